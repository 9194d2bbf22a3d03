//! Runs the emitted PTX of every kernel the CPU backend runs, on the
//! simulated device (`tenjin::gpu::check::simulate_module`), on the CPU's
//! own inputs, and compares the outputs.
//!
//! Installed as a kernel observer (`tenjin::observe`). For each kernel
//! the GPU's loop kernel of the same function (planned for the GPU
//! target, `tenjin::planner::passes`) is
//! emitted for every architecture (so `TENJIN_PTX_DUMP` collects them all
//! for `ptxas`) and the sm_80 module runs on the simulated device, its
//! output filled with NaN first (an element no thread writes shows). f64 results must equal
//! the CPU's bit for bit where both run the same operations in the same
//! order (a CPU loop kernel without transcendental functions); otherwise
//! they agree within a relative tolerance (f64: 1e-10, f32: 1e-4 of
//! `1 + |value|`). Any disagreement, and any access the simulator refuses
//! (out of bounds, misaligned, a store into an input, an element stored
//! by two threads), panics the test that ran the kernel.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tenjin::gpu::ptx::{emit_with, launch_sizes, module, Access, Arch, IndexBits};
use tenjin::jit::RouteKind;
use tenjin::kernel::{Expr, Stmt};
use tenjin::observe::{set_kernel_observer, KernelRun, Values};
use tenjin::planner::passes::{loop_kernel, LoopRole};
use tenjin::planner::Target;
use tenjin::symbolic::{BinaryOp, UnaryOp};

/// Kernel runs observed and checked, distinct kernels seen, and runs
/// compared bit for bit.
pub static OBSERVED: AtomicU64 = AtomicU64::new(0);
pub static CHECKED: AtomicU64 = AtomicU64::new(0);
pub static KERNELS: AtomicU64 = AtomicU64::new(0);
pub static GPU_CHECKED: AtomicU64 = AtomicU64::new(0);

/// `TENJIN_CHECK_ON_GPU=1` with a GPU present: every checked run also runs
/// on CUDA device 0 and is compared the same way.
pub fn on_gpu() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let asked = std::env::var("TENJIN_CHECK_ON_GPU").is_ok_and(|v| v == "1");
        if asked && !tenjin::cuda::is_available() {
            eprintln!("TENJIN_CHECK_ON_GPU=1 but no CUDA device is available: interpreter only");
        }
        asked && tenjin::cuda::is_available()
    })
}
pub static BITWISE: AtomicU64 = AtomicU64::new(0);

/// Installs the check as the kernel observer.
pub fn install() {
    set_kernel_observer(Some(Box::new(|run: &KernelRun<'_>| check(run))));
}

/// Whether a statement list uses a function whose PTX sequence is not the
/// CPU's (`std`) implementation.
fn approximate(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Let(_, Expr::Unary(op, _)) => !matches!(
            op,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sgn | UnaryOp::Sqrt
        ),
        Stmt::Let(_, Expr::Binary(BinaryOp::Pow, _, _)) => true,
        Stmt::If {
            then, otherwise, ..
        } => approximate(then) || approximate(otherwise),
        Stmt::Reduce { body, .. } | Stmt::For(body) => approximate(&body.body),
        _ => false,
    })
}

/// Runs of one kernel (structural key and dtype) that are checked; later
/// runs of the same kernel only count.
const RUNS_PER_KERNEL: u32 = 3;

static SEEN: std::sync::Mutex<Option<std::collections::HashMap<(u64, bool), u32>>> =
    std::sync::Mutex::new(None);

pub fn check(run: &KernelRun<'_>) {
    let f = run.kernel.source();
    let dtype = run.kernel.dtype();
    OBSERVED.fetch_add(1, Relaxed);
    {
        let key = (
            tenjin::kernel::key::structural_key(f).hash,
            dtype == tenjin::DType::F32,
        );
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen
            .get_or_insert_with(Default::default)
            .entry(key)
            .or_insert(0);
        *n += 1;
        if *n > RUNS_PER_KERNEL {
            return;
        }
        if *n == 1 {
            KERNELS.fetch_add(1, Relaxed);
        }
    }
    let kernel = loop_kernel(f, dtype, Target::Gpu, LoopRole::Whole).expect("GPU loop kernel");
    let hash = tenjin::kernel::key::structural_key(f).hash;
    let mut text = String::new();
    for arch in Arch::ALL {
        let t = module(hash, &kernel, dtype, arch).unwrap_or_else(|e| panic!("emit: {e}"));
        if arch == Arch::Sm80 {
            text = t;
        }
    }
    let out_len = match run.output {
        Values::F32(v) => v.len(),
        Values::F64(v) => v.len(),
    };
    // A grid smaller than the output exercises the grid-stride loop (a
    // kernel with a team per output: the team is the block).
    let (block, grid) = match kernel.threads_per_output {
        1 => (32, (out_len as u32).div_ceil(32).clamp(1, 3)),
        team => (team, (out_len as u32).clamp(1, 3)),
    };
    let simulated =
        tenjin::gpu::check::simulate_module(&text, dtype, &run.inputs, out_len, (grid, block), &[])
            .unwrap_or_else(|e| panic!("{}: {e}\n{kernel}", f.name()));
    // The plain form of the same kernel, with 64-bit index arithmetic
    // (what sizes past 2³¹ get) and one element per access (what
    // unaligned buffers get), computes the same bits as the fitted form
    // (32-bit indices, vector loads and stores where it qualifies).
    let plain = emit_with(
        &kernel,
        dtype,
        Arch::Sm80,
        "k",
        IndexBits::Wide,
        Access::Scalar,
    )
    .unwrap();
    let plain = tenjin::gpu::check::simulate_module(
        &plain,
        dtype,
        &run.inputs,
        out_len,
        (grid, block),
        &[],
    )
    .unwrap_or_else(|e| panic!("{} (plain form): {e}\n{kernel}", f.name()));
    assert!(
        plain
            .iter()
            .zip(&simulated)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{}: the fitted form (32-bit indices, vector accesses) and the plain form differ\n{kernel}",
        f.name()
    );
    // The form a new size of the kernel runs (`crate::kernel::sharing`):
    // its bounds, guards, strides and float constants read at launch
    // (`launch_sizes`), the same bits.
    let lifted = kernel.with_run_time_constants();
    let sizes: Vec<u64> = launch_sizes(&lifted).into_iter().map(|(_, v)| v).collect();
    let mut shared = String::new();
    for arch in Arch::ALL {
        // (Dumped under a name of its own, so `ptxas` assembles both.)
        let t = module(hash.rotate_left(1), &lifted, dtype, arch)
            .unwrap_or_else(|e| panic!("emit with run-time constants: {e}"));
        if arch == Arch::Sm80 {
            shared = t;
        }
    }
    let shared = tenjin::gpu::check::simulate_module(
        &shared,
        dtype,
        &run.inputs,
        out_len,
        (grid, block),
        &sizes,
    )
    .unwrap_or_else(|e| panic!("{} (sizes read at launch): {e}\n{lifted}", f.name()));
    assert!(
        shared
            .iter()
            .zip(&simulated)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{}: the module reading its sizes at launch and the one with them compiled in differ\n{lifted}",
        f.name()
    );
    // The same operations in the same order (a team sums in another).
    let same_ops = run.kernel.route() == RouteKind::Jit
        && !approximate(&kernel.body)
        && kernel.threads_per_output == 1;
    let got: Vec<f64>;
    let want: Vec<f64>;
    let tol;
    match run.output {
        Values::F32(w) => {
            got = simulated;
            want = w.iter().map(|&x| x as f64).collect();
            tol = 1e-4;
        }
        Values::F64(w) => {
            got = simulated;
            want = w.to_vec();
            tol = if same_ops { 0.0 } else { 1e-10 };
        }
    }
    let compare = |by: &str, got: &[f64]| {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let ok = if w.is_nan() {
                g.is_nan()
            } else if tol == 0.0 || w.is_infinite() {
                g.to_bits() == w.to_bits() || (g == w && *w == 0.0 && tol != 0.0)
            } else {
                (g - w).abs() <= tol * (1.0 + w.abs())
            };
            assert!(
                ok,
                "{}: element {i}: {by} {g:e}, CPU {w:e} (tolerance {tol:e})\n{}\n{kernel}",
                f.name(),
                f
            );
        }
    };
    compare("simulated PTX", &got);
    if on_gpu() {
        let gpu = tenjin::gpu::check::run_loop_kernel(0, f, &kernel, dtype, &run.inputs)
            .unwrap_or_else(|e| panic!("{}: on the GPU: {e}", f.name()));
        compare("GPU", &gpu);
        GPU_CHECKED.fetch_add(1, Relaxed);
    }
    CHECKED.fetch_add(1, Relaxed);
    if tol == 0.0 {
        BITWISE.fetch_add(1, Relaxed);
    }
}
