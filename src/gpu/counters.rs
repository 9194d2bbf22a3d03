//! What the GPU backend did since the process started, on every device:
//! kernels run, PTX launches, cuBLAS calls (and those with half-precision
//! products), bytes copied each way, synchronisations of the host with a
//! device, and the loop kernels' PTX modules: loaded, shared between
//! kernels that differ only in sizes, and loaded again with a steady
//! size's constants compiled in.
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
    pub(crate) modules_loaded: AtomicU64,
    pub(crate) modules_shared: AtomicU64,
    pub(crate) modules_specialised: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    kernels_run: AtomicU64::new(0),
    launches: AtomicU64::new(0),
    blas_calls: AtomicU64::new(0),
    half_blas_calls: AtomicU64::new(0),
    bytes_to_device: AtomicU64::new(0),
    bytes_to_host: AtomicU64::new(0),
    synchronizations: AtomicU64::new(0),
    modules_loaded: AtomicU64::new(0),
    modules_shared: AtomicU64::new(0),
    modules_specialised: AtomicU64::new(0),
};

/// Adds `n` to `counter`.
pub(crate) fn count(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

/// The counters' values at one time (see [`Counters`]).
pub(crate) struct Snapshot {
    pub(crate) kernels_run: u64,
    pub(crate) launches: u64,
    pub(crate) blas_calls: u64,
    pub(crate) half_blas_calls: u64,
    pub(crate) bytes_to_device: u64,
    pub(crate) bytes_to_host: u64,
    pub(crate) synchronizations: u64,
    pub(crate) modules_loaded: u64,
    pub(crate) modules_shared: u64,
    pub(crate) modules_specialised: u64,
}

/// The counters now.
pub(crate) fn snapshot() -> Snapshot {
    let c = &COUNTERS;
    Snapshot {
        kernels_run: c.kernels_run.load(Relaxed),
        launches: c.launches.load(Relaxed),
        blas_calls: c.blas_calls.load(Relaxed),
        half_blas_calls: c.half_blas_calls.load(Relaxed),
        bytes_to_device: c.bytes_to_device.load(Relaxed),
        bytes_to_host: c.bytes_to_host.load(Relaxed),
        synchronizations: c.synchronizations.load(Relaxed),
        modules_loaded: c.modules_loaded.load(Relaxed),
        modules_shared: c.modules_shared.load(Relaxed),
        modules_specialised: c.modules_specialised.load(Relaxed),
    }
}
