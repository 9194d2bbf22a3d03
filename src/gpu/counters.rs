//! What the GPU backend did since the process started, on every device:
//! kernels run, PTX launches, cuBLAS calls (and those with half-precision
//! products), bytes copied each way, and synchronisations of the host with
//! a device.
//!
//! Owns [`Counters`] and the process-wide [`COUNTERS`]; `stats()` reads a
//! [`snapshot`]. A copy to or from the host counts as a synchronisation:
//! both drivers wait for the device there. Must not decide anything.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub(crate) struct Counters {
    pub(crate) kernels_run: AtomicU64,
    pub(crate) launches: AtomicU64,
    pub(crate) blas_calls: AtomicU64,
    pub(crate) half_blas_calls: AtomicU64,
    pub(crate) bytes_to_device: AtomicU64,
    pub(crate) bytes_to_host: AtomicU64,
    pub(crate) synchronizations: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    kernels_run: AtomicU64::new(0),
    launches: AtomicU64::new(0),
    blas_calls: AtomicU64::new(0),
    half_blas_calls: AtomicU64::new(0),
    bytes_to_device: AtomicU64::new(0),
    bytes_to_host: AtomicU64::new(0),
    synchronizations: AtomicU64::new(0),
};

/// Adds `n` to `counter`.
pub(crate) fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

/// The counters now: `[kernels run, launches, cuBLAS calls, those with
/// half-precision products, bytes to the device, bytes to the host,
/// synchronisations]`.
pub(crate) fn snapshot() -> [u64; 7] {
    let c = &COUNTERS;
    [
        &c.kernels_run,
        &c.launches,
        &c.blas_calls,
        &c.half_blas_calls,
        &c.bytes_to_device,
        &c.bytes_to_host,
        &c.synchronizations,
    ]
    .map(|x| x.load(Relaxed))
}
