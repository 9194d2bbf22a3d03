//! What the ports of PyTorch scripts (`tests/port_*.rs`) share: reading
//! the PyTorch side's files and comparing to 1e-9.

use tenjin::Tensor;

/// The entries of `tests/data/ports/{name}` (written by `tests/ports/*.py`).
pub fn load(name: &str) -> Vec<(String, Tensor)> {
    let path = format!("{}/tests/data/ports/{name}", env!("CARGO_MANIFEST_DIR"));
    tenjin::safetensors::load(path).expect("the PyTorch side's file")
}

/// The values of the entry `name`.
pub fn value(entries: &[(String, Tensor)], name: &str) -> Vec<f64> {
    let (_, t) = entries
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no `{name}` in PyTorch's file"));
    t.to_vec_f64().expect("readable values")
}

/// `got` equals PyTorch's `want` to 1e-9 (relative; absolute below 1e-3).
pub fn close(what: &str, got: &[f64], want: &[f64]) {
    close_above(what, got, want, 1e-3);
}

/// `got` equals PyTorch's `want` to 1e-9, relative above `floor` and
/// absolute (1e-9 · `floor`) below it.
#[allow(dead_code)] // not every port needs it
pub fn close_above(what: &str, got: &[f64], want: &[f64], floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-9 * w.abs().max(floor),
            "{what}[{k}]: {g}, PyTorch {w}"
        );
    }
}

/// A mid-run file's parts: the module's weights (the entries without an
/// `opt.` or `sched.` prefix), the optimizer's state (`opt.…`, prefix
/// dropped) and the schedule's (`sched.…`, as numbers).
#[allow(dead_code)] // not every port resumes
pub fn mid_run(entries: &[(String, Tensor)]) -> MidRun {
    let strip = |prefix: &str| -> Vec<(String, Tensor)> {
        entries
            .iter()
            .filter_map(|(n, t)| n.strip_prefix(prefix).map(|s| (s.to_string(), t.clone())))
            .collect()
    };
    MidRun {
        weights: entries
            .iter()
            .filter(|(n, _)| !n.starts_with("opt.") && !n.starts_with("sched."))
            .cloned()
            .collect(),
        optimizer: strip("opt."),
        schedule: strip("sched.")
            .into_iter()
            .map(|(n, t)| (n, t.item().expect("a number")))
            .collect(),
    }
}

/// See [`mid_run`].
#[allow(dead_code)]
pub struct MidRun {
    pub weights: Vec<(String, Tensor)>,
    pub optimizer: Vec<(String, Tensor)>,
    pub schedule: Vec<(String, f64)>,
}
