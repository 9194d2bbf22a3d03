//! `BatchNorm`'s options against PyTorch's `BatchNorm2d` in f64 and f32
//! (`bench/torch_batchnorm_options.py` →
//! `tests/data/torch_batchnorm_options.txt`): `momentum: None` (the
//! cumulative average), `affine: false`, `track_running_stats: false`;
//! the state-dict keys (with `num_batches_tracked`), every training
//! output and buffer, and the evaluation output. And a strict load of
//! PyTorch's state, `num_batches_tracked` included.

use tenjin::nn::{BatchNorm, BatchNormConfig, Module};
use tenjin::{DType, Error, Tensor};

fn batch(k: usize, dtype: DType) -> Result<Tensor, Error> {
    let v: Vec<f64> = (0..36)
        .map(|i| ((i as f64) * (0.3 + 0.2 * k as f64) + k as f64).sin() * (1 + k) as f64)
        .collect();
    Tensor::from_vec_f64(v, &[2, 2, 3, 3])?.to_dtype(dtype)
}

fn config(name: &str) -> BatchNormConfig {
    let d = BatchNormConfig::default();
    match name.trim_end_matches("_f32") {
        "defaults" => d,
        "momentum_none" => BatchNormConfig {
            momentum: None,
            ..d
        },
        "no_affine" => BatchNormConfig { affine: false, ..d },
        "no_tracking" => BatchNormConfig {
            track_running_stats: false,
            ..d
        },
        other => panic!("no case {other}"),
    }
}

/// Within 1e-12 in f64; in f32 within 2e-6 (the statistics' sums are
/// ordered differently from PyTorch's).
fn close(what: &str, got: &[f64], want: &[f64]) {
    let tol = if what.contains("_f32") { 2e-6 } else { 1e-12 };
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{k}]: {g} against PyTorch's {w}"
        );
    }
}

#[test]
fn batch_norm_options_follow_pytorch() -> Result<(), Error> {
    let text = include_str!("data/torch_batchnorm_options.txt");
    let mut bn: Option<BatchNorm> = None;
    let mut name = String::new();
    let mut step = 0;
    let mut checked = 0;
    let mut dtype = DType::F64;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        let values = || -> Vec<f64> { rest.split(' ').map(|v| v.parse().unwrap()).collect() };
        match tag {
            "case" => {
                name = rest.to_string();
                dtype = if name.ends_with("_f32") {
                    DType::F32
                } else {
                    DType::F64
                };
                bn = Some(BatchNorm::with_options(2, config(&name), dtype)?);
                step = 0;
            }
            "keys" => {
                let keys: Vec<String> = bn
                    .as_ref()
                    .unwrap()
                    .state_dict()
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect();
                assert_eq!(keys.join(" "), rest, "{name}");
            }
            "train" => {
                let y = bn.as_ref().unwrap().forward(&batch(step, dtype)?)?;
                close(&format!("{name} train {step}"), &y.to_vec_f64()?, &values());
                step += 1;
            }
            "running_mean" | "running_var" | "num_batches_tracked" => {
                let b = bn.as_ref().unwrap();
                let t = match tag {
                    "running_mean" => &b.running_mean,
                    "running_var" => &b.running_var,
                    _ => &b.num_batches_tracked,
                };
                let got: Vec<f64> = if tag == "num_batches_tracked" {
                    t.to_vec_i64()?.into_iter().map(|v| v as f64).collect()
                } else {
                    t.to_vec_f64()?
                };
                close(&format!("{name} {tag} after {step}"), &got, &values());
            }
            "eval" => {
                let b = bn.as_ref().unwrap();
                b.eval();
                close(
                    &format!("{name} eval"),
                    &b.forward(&batch(0, dtype)?)?.to_vec_f64()?,
                    &values(),
                );
            }
            other => panic!("unknown line {other}"),
        }
        checked += 1;
    }
    // Per case: its line, its keys, 3 outputs, an eval; 3 buffers after
    // each of 3 batches in the 3 cases that track.
    assert_eq!(checked, 2 * (4 * (2 + 3 + 1) + 3 * 3 * 3));
    Ok(())
}

/// PyTorch's BatchNorm state, `num_batches_tracked` (an i64 scalar)
/// included, loads strictly, and the count goes on from it.
#[test]
fn a_pytorch_state_with_its_batch_count_loads_strictly() -> Result<(), Error> {
    let bn = BatchNorm::new(2, 1e-5, 0.1, DType::F64)?;
    let state = vec![
        (
            "weight".to_string(),
            Tensor::from_vec_f64(vec![1.5, 0.5], &[2])?,
        ),
        (
            "bias".to_string(),
            Tensor::from_vec_f64(vec![0.1, -0.1], &[2])?,
        ),
        (
            "running_mean".to_string(),
            Tensor::from_vec_f64(vec![0.2, 0.3], &[2])?,
        ),
        (
            "running_var".to_string(),
            Tensor::from_vec_f64(vec![1.1, 0.9], &[2])?,
        ),
        (
            "num_batches_tracked".to_string(),
            Tensor::from_vec_i64(vec![41], &[])?,
        ),
    ];
    bn.load_state_dict(&state)?;
    bn.forward(&batch(0, DType::F64)?)?;
    assert_eq!(bn.num_batches_tracked.to_vec_i64()?, vec![42]);
    assert!(
        bn.load_state_dict(&state[..4]).is_err(),
        "strict: the count is required"
    );
    Ok(())
}
