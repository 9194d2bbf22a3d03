//! A development hook: a function called after every kernel the runtime
//! runs on host memory (from `exec`), with the kernel, its inputs and its
//! output.
//!
//! The GPU backend's tests use it to run the emitted PTX of every kernel a
//! test suite generates (in the test-only PTX interpreter, or on a real
//! GPU) on exactly the CPU's inputs, and compare. Hidden from the
//! documentation; it costs one atomic load per kernel run when unset.

use super::compiled::CompiledKernel;
use crate::kernel::backend::Operand;
pub use crate::kernel::backend::Values;
use crate::kernel::RouteKind;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::RwLock;

/// One kernel run: inputs in the kernel's argument order.
pub struct KernelRun<'a> {
    pub kernel: &'a CompiledKernel,
    pub inputs: Vec<Values<'a>>,
    pub output: Values<'a>,
}

type Observer = Box<dyn Fn(&KernelRun<'_>) + Send + Sync>;

static SET: AtomicBool = AtomicBool::new(false);
static OBSERVER: RwLock<Option<Observer>> = RwLock::new(None);

/// Installs (or, with `None`, removes) the observer.
pub fn set_kernel_observer(f: Option<Observer>) {
    let mut o = OBSERVER.write().unwrap_or_else(|e| e.into_inner());
    SET.store(f.is_some(), Relaxed);
    *o = f;
}

/// Whether an observer is installed.
pub(crate) fn active() -> bool {
    SET.load(Relaxed)
}

/// Calls the observer, if any, with `run`.
fn notify(run: &KernelRun<'_>) {
    if !active() {
        return;
    }
    if let Some(f) = OBSERVER.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        f(run)
    }
}

/// Whether runs of `kernel` are observed: float kernels on host memory
/// (host kernels, which read integers, are not).
fn observed(kernel: &CompiledKernel, operands: &[Operand<'_>]) -> bool {
    kernel.route() != RouteKind::Host && operands.iter().all(|o| Values::of(*o).is_some())
}

/// Tells the observer about a run of `kernel` from `inputs` into `output`.
pub(crate) fn notify_run(kernel: &CompiledKernel, inputs: &[Operand<'_>], output: Operand<'_>) {
    if !observed(kernel, inputs) {
        return;
    }
    if let (Some(inputs), Some(output)) = (
        inputs
            .iter()
            .map(|o| Values::of(*o))
            .collect::<Option<Vec<_>>>(),
        Values::of(output),
    ) {
        notify(&KernelRun {
            kernel,
            inputs,
            output,
        });
    }
}

/// Copies of a run's inputs taken before a kernel writes over one of them.
pub(crate) struct Snapshot(Option<Vec<Owned>>);

enum Owned {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Snapshot {
    pub(crate) fn of(inputs: &[Operand<'_>]) -> Snapshot {
        Snapshot(
            inputs
                .iter()
                .map(|o| match Values::of(*o)? {
                    Values::F32(v) => Some(Owned::F32(v.to_vec())),
                    Values::F64(v) => Some(Owned::F64(v.to_vec())),
                })
                .collect(),
        )
    }

    /// Tells the observer about the run of `kernel` from the saved inputs
    /// into `output`.
    pub(crate) fn notify(&self, kernel: &CompiledKernel, output: Operand<'_>) {
        let (Some(saved), Some(output)) = (&self.0, Values::of(output)) else {
            return;
        };
        if kernel.route() == RouteKind::Host {
            return;
        }
        notify(&KernelRun {
            kernel,
            inputs: saved
                .iter()
                .map(|o| match o {
                    Owned::F32(v) => Values::F32(v),
                    Owned::F64(v) => Values::F64(v),
                })
                .collect(),
            output,
        });
    }
}
