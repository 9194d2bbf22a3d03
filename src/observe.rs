//! A development hook: a function called after every kernel the CPU
//! backend runs (from `exec`), with the kernel, its inputs and its output.
//! It sits beside the backends, so the GPU backend need not know the
//! CPU's.
//!
//! The GPU backend's tests use it to run the emitted PTX of every kernel a
//! test suite generates (in the test-only PTX interpreter, or on a real
//! GPU) on exactly the CPU's inputs, and compare. Hidden from the
//! documentation; it costs one atomic load per kernel run when unset.

use crate::jit::CompiledKernel;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::RwLock;

/// The values of one kernel argument or output.
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

/// One kernel run on the CPU: inputs in the kernel's argument order.
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
pub(crate) fn notify(run: &KernelRun<'_>) {
    if !active() {
        return;
    }
    if let Some(f) = OBSERVER.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        f(run)
    }
}

/// The typed view of a slice of the sealed element types.
pub(crate) fn values<T: crate::dtype::Float>(s: &[T]) -> Values<'_> {
    match T::DTYPE {
        // SAFETY: `Float` is sealed and implemented by f32 and f64 only,
        // each with its own DTYPE, so T is exactly the type cast to.
        crate::DType::F32 => {
            Values::F32(unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) })
        }
        _ => Values::F64(unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) }),
    }
}
