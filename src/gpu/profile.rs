//! Where a GPU program's time goes: the device time of every loop kernel
//! and GEMM, summed per kernel.
//!
//! Owns the profile switch ([`set_profiling`], or `TENJIN_GPU_PROFILE=1`),
//! the rows it fills and [`profile_report`]. With profiling on, the
//! backend brackets every loop kernel and cuBLAS call by synchronisations
//! of its device and adds the wall time between them to the kernel's row.
//! That serialises the device and counts each launch's latency: the
//! report is a breakdown to find the costly kernels, never a figure to
//! publish (`bench/gpu.sh` runs with profiling off). Must not decide
//! anything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use super::driver::Driver;
use crate::Error;

static ON: AtomicBool = AtomicBool::new(false);

/// Per label: calls and seconds.
static ROWS: Mutex<Option<HashMap<String, (u64, f64)>>> = Mutex::new(None);

/// Turns per-kernel timing on or off (see the module documentation).
///
/// ```
/// tenjin::cuda::set_profiling(true);
/// assert!(tenjin::cuda::is_profiling());
/// tenjin::cuda::set_profiling(false);
/// ```
pub fn set_profiling(on: bool) {
    ON.store(on, Relaxed);
}

/// Whether per-kernel timing is on ([`set_profiling`] or
/// `TENJIN_GPU_PROFILE=1`).
pub fn is_profiling() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    ON.load(Relaxed)
        || *ENV.get_or_init(|| std::env::var("TENJIN_GPU_PROFILE").is_ok_and(|v| v == "1"))
}

/// Runs `f` (work queued on `driver`'s device), timed under `label` when
/// profiling is on.
pub(crate) fn timed<D: Driver, R>(
    driver: &D,
    label: impl FnOnce() -> String,
    f: impl FnOnce() -> Result<R, Error>,
) -> Result<R, Error> {
    if !is_profiling() {
        return f();
    }
    driver.synchronize()?;
    let start = Instant::now();
    let r = f()?;
    driver.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    let mut rows = ROWS.lock().unwrap_or_else(|e| e.into_inner());
    let row = rows
        .get_or_insert_with(HashMap::new)
        .entry(label())
        .or_default();
    row.0 += 1;
    row.1 += seconds;
    Ok(r)
}

/// The rows timed since the last reset, the costliest first, as a table
/// (total ms, calls, ms per call, share, kernel); `reset` empties them.
///
/// ```
/// assert!(tenjin::cuda::profile_report(true).contains("total ms"));
/// ```
pub fn profile_report(reset: bool) -> String {
    let mut rows = ROWS.lock().unwrap_or_else(|e| e.into_inner());
    let mut list: Vec<(String, (u64, f64))> = rows
        .as_ref()
        .map(|r| r.iter().map(|(k, v)| (k.clone(), *v)).collect())
        .unwrap_or_default();
    if reset {
        *rows = None;
    }
    list.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    let all: f64 = list.iter().map(|r| r.1 .1).sum();
    let mut out = String::from(
        "| total ms | calls | ms per call | share | kernel |\n| --- | --- | --- | --- | --- |\n",
    );
    for (label, (calls, s)) in list {
        out.push_str(&format!(
            "| {:.3} | {calls} | {:.4} | {:.1}% | {label} |\n",
            s * 1e3,
            s * 1e3 / calls as f64,
            100.0 * s / all.max(f64::MIN_POSITIVE)
        ));
    }
    out
}
