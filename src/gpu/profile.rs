//! Where a GPU program's time goes: the device time of every loop kernel
//! and GEMM, summed per kernel.
//!
//! Owns the profile switch ([`set_profiling`], or `TENJIN_GPU_PROFILE=1`),
//! the rows it fills and [`profile_report`]. With profiling on, the
//! backend brackets every loop kernel and cuBLAS call by two marks of its
//! stream (timed CUDA events on a GPU; the host's clock on the simulated
//! device, which runs each kernel as it is queued), and adds the time
//! between them to the kernel's row when the report is asked for. Nothing
//! waits for the device meanwhile, so the work runs as it would without
//! the profile, two event records per kernel aside; a kernel's time also
//! holds any wait of the device for the host between the two marks (a
//! phase of tiny kernels issued faster than they run has none). Must not
//! decide anything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use super::driver::{Driver, Mark};
use crate::Error;

static ON: AtomicBool = AtomicBool::new(false);

/// Per label: calls and seconds.
static ROWS: Mutex<Option<HashMap<String, (u64, f64)>>> = Mutex::new(None);

/// A timed call whose marks the device may not have passed yet: its
/// label, and the seconds between its marks (waiting for the later).
type Pending = (String, Box<dyn FnOnce() -> Result<f64, Error> + Send>);

/// The timed calls not yet added to [`ROWS`].
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

/// Pending calls past this many are added to the rows on the next call
/// (each holds two events).
const MAX_PENDING: usize = 1 << 14;

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
    let start = driver.mark()?;
    let r = f()?;
    let end = driver.mark()?;
    let full = {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        pending.push((label(), Box::new(move || end.seconds_since(&start))));
        pending.len() > MAX_PENDING
    };
    if full {
        settle()?;
    }
    Ok(r)
}

/// Adds every pending call to the rows (waiting for the device to pass
/// their marks).
fn settle() -> Result<(), Error> {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    let mut rows = ROWS.lock().unwrap_or_else(|e| e.into_inner());
    let rows = rows.get_or_insert_with(HashMap::new);
    for (label, seconds) in pending {
        let row = rows.entry(label).or_default();
        row.0 += 1;
        row.1 += seconds()?;
    }
    Ok(())
}

/// The rows timed since the last reset, the costliest first, as a table
/// (total ms, calls, ms per call, share, kernel); `reset` empties them.
///
/// ```
/// assert!(tenjin::cuda::profile_report(true).contains("total ms"));
/// ```
pub fn profile_report(reset: bool) -> String {
    // (A device error here would have been reported by the work itself.)
    let _ = settle();
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
