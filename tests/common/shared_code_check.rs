//! Runs every loop kernel the CPU backend runs twice more, on the CPU's
//! own inputs: with its constants compiled in, and with them read when
//! called (`Kernel::with_run_time_constants`, the code a new size of an
//! op shares; `crate::kernel::sharing`), and requires the two outputs to
//! be equal bit for bit (NaNs as NaNs: their payloads may differ).
//!
//! Installed as a kernel observer (`tenjin::observe`). The kernel is the
//! stage's loop kernel planned for the CPU (`tenjin::planner::passes`),
//! compiled and run by `tenjin::jit::check::run_loop_kernel` on the
//! calling thread. Any disagreement panics the test that ran the kernel.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tenjin::jit::check::run_loop_kernel;
use tenjin::jit::RouteKind;
use tenjin::observe::{set_kernel_observer, KernelRun, Values};
use tenjin::planner::passes::{loop_kernel, LoopRole};
use tenjin::planner::Target;

/// Distinct kernels checked, and runs compared.
pub static KERNELS: AtomicU64 = AtomicU64::new(0);
pub static CHECKED: AtomicU64 = AtomicU64::new(0);
/// Of those, kernels with constants to read (the others compile alike).
pub static LIFTED: AtomicU64 = AtomicU64::new(0);

/// Runs of one kernel (structural key and dtype) that are checked.
const RUNS_PER_KERNEL: u32 = 2;

static SEEN: std::sync::Mutex<Option<std::collections::HashMap<(u64, bool), u32>>> =
    std::sync::Mutex::new(None);

/// Installs the check as the kernel observer.
pub fn install() {
    set_kernel_observer(Some(Box::new(|run: &KernelRun<'_>| check(run))));
}

fn as_f64(v: &Values<'_>) -> Vec<f64> {
    match v {
        Values::F32(x) => x.iter().map(|&v| v as f64).collect(),
        Values::F64(x) => x.to_vec(),
    }
}

pub fn check(run: &KernelRun<'_>) {
    if run.kernel.route() != RouteKind::Jit {
        return;
    }
    let f = run.kernel.source();
    let dtype = run.kernel.dtype();
    let hash = tenjin::kernel::key::structural_key(f).hash;
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen
            .get_or_insert_with(Default::default)
            .entry((hash, dtype == tenjin::DType::F32))
            .or_insert(0);
        *n += 1;
        if *n > RUNS_PER_KERNEL {
            return;
        }
        if *n == 1 {
            KERNELS.fetch_add(1, Relaxed);
        }
    }
    let kernel = loop_kernel(f, dtype, Target::Cpu, LoopRole::Whole).expect("CPU loop kernel");
    if kernel.with_run_time_constants().params.is_empty() {
        return;
    }
    let inputs: Vec<Vec<f64>> = run.inputs.iter().map(as_f64).collect();
    let out_len = as_f64(&run.output).len();
    let own = run_loop_kernel(&kernel, dtype, &inputs, out_len, false)
        .unwrap_or_else(|e| panic!("{}: {e}", f.name()));
    let shared = run_loop_kernel(&kernel, dtype, &inputs, out_len, true)
        .unwrap_or_else(|e| panic!("{} (constants read when called): {e}", f.name()));
    for (i, (a, b)) in own.iter().zip(&shared).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{}: element {i}: {a:e} with the constants compiled in, {b:e} read when called\n{f}\n{kernel}",
            f.name()
        );
    }
    LIFTED.fetch_add(1, Relaxed);
    CHECKED.fetch_add(1, Relaxed);
}
