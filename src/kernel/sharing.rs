//! One code for kernels that differ only in their sizes: the policy both
//! backends follow (issue 28).
//!
//! A kernel lifted by [`Kernel::with_run_time_constants`] reads the
//! constants of its bounds, guards, strides and floats when it runs, so
//! kernels of one op at different sizes have one loop nest, which a backend
//! compiles once (Cranelift code on the CPU, `crate::cpu`'s code cache; a
//! PTX module on a GPU, `crate::gpu`'s backend). Shared code is slower
//! where constants would fold away or let a loop be unrolled, so sharing
//! follows torch.compile's second-value rule and tiers up as JITs do:
//!
//! 1. the first kernel of an op ([`op_hash`]) gets code of its own, its
//!    constants compiled in (a training loop's steady size runs at full
//!    speed);
//! 2. a kernel of an op met before (a new size) gets its nest's shared
//!    code: compiled for the first such kernel, taken as it is by every
//!    later one;
//! 3. a kernel that ran shared code [`SPECIALISE_AFTER`] times is a steady
//!    size too, and gets code of its own then.
//!
//! Inside a [`dynamic_sizes`] scope (the user's `mark_dynamic`), sizes are
//! dynamic from their first value: every kernel gets its nest's shared
//! code, the first of an op too, and keeps it.
//!
//! Owns that policy ([`Tier`], [`Ops::tier`], [`OwnLater`]), the switch
//! ([`set_run_time_constants`]), the scope ([`DynamicSizes`]) and
//! `TENJIN_SHARED_CODE=always`. Must not
//! compile nor run anything: a backend compiles what the tier says.

use super::{visit_stmts, Expr, Kernel, Stmt};
use crate::kernel::key::hash_bytes;
use crate::DType;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether bounds and guards read their constants at run time (the
/// default); off, every constant is compiled in and only equal kernels
/// share code.
static RUN_TIME_CONSTANTS: AtomicBool = AtomicBool::new(true);

/// Whether kernels compiled from now on read the constants of their loop
/// bounds and guards when called, so that one code serves every size
/// (`true`, the default), or have them compiled in (`false`: code
/// specialised to each size, what tenjin did before; for measuring the
/// difference, or as an escape hatch). Both compute the same values bit
/// for bit, on the CPU and on a GPU.
///
/// ```
/// tenjin::jit::set_run_time_constants(false);
/// assert!(!tenjin::jit::run_time_constants());
/// tenjin::jit::set_run_time_constants(true);
/// ```
pub fn set_run_time_constants(on: bool) {
    RUN_TIME_CONSTANTS.store(on, Relaxed);
}

/// Whether kernels compiled now read their bounds' constants at run time
/// ([`set_run_time_constants`]).
pub fn run_time_constants() -> bool {
    RUN_TIME_CONSTANTS.load(Relaxed)
}

/// The [`DynamicSizes`] scopes alive.
static DYNAMIC_SCOPES: AtomicUsize = AtomicUsize::new(0);

/// A scope in which sizes are dynamic from their first value, made by
/// [`dynamic_sizes`]; they are again when it is dropped.
#[must_use = "sizes are dynamic only while the scope lives"]
#[derive(Debug)]
pub struct DynamicSizes(());

impl Drop for DynamicSizes {
    fn drop(&mut self) {
        DYNAMIC_SCOPES.fetch_sub(1, Relaxed);
    }
}

/// Marks every size dynamic while the returned scope lives (on every
/// thread): tenjin's form of torch.compile's `mark_dynamic`, for a loop
/// known to change its batch size or sequence length at every step.
///
/// By default an op's first kernel gets code with its sizes compiled in,
/// and a second size compiles the code that reads them at run time
/// ([`set_run_time_constants`]): two compilations per op. In the scope,
/// the first size compiles the code that reads them, so every later size
/// compiles nothing, and kernels keep that code however often they run
/// (outside the scope, a kernel run [`SPECIALISE_AFTER`] times gets code
/// of its own). Kernels compiled in the scope keep their code after it,
/// as the kernel cache keeps them. Results are the same bits either way.
///
/// ```
/// use tenjin::{jit, DType, Tensor};
/// let w = Tensor::ones(&[6, 3], DType::F32)?.requires_grad();
/// let step = |b: usize| -> Result<(), tenjin::Error> {
///     let x = Tensor::ones(&[b, 6], DType::F32)?;
///     x.matmul(&w)?.tanh()?.sum()?.backward()
/// };
/// let _dynamic = jit::dynamic_sizes();
/// step(3)?;
/// let after_first = tenjin::stats();
/// for b in [5, 8, 13, 21] {
///     step(b)?;
/// }
/// let after = tenjin::stats();
/// assert_eq!(after.cpu_code_compiled, after_first.cpu_code_compiled);
/// assert!(after.cpu_code_shared > after_first.cpu_code_shared);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn dynamic_sizes() -> DynamicSizes {
    DYNAMIC_SCOPES.fetch_add(1, Relaxed);
    DynamicSizes(())
}

/// Runs after which a kernel running shared code gets code of its own,
/// its constants compiled in: a size met that often is a steady one, and
/// the shared code, which reads its bounds at run time and unrolls no
/// loop, is up to 1.24× slower on windows (a max pool's or a depthwise
/// convolution's step on the CPU, measured).
pub const SPECIALISE_AFTER: u32 = 16;

/// `TENJIN_SHARED_CODE=always`: every kernel with run-time constants runs
/// its nest's shared code, the first of an op too, and never gets code of
/// its own (so that a test suite runs the shared code throughout; CI does,
/// on the CPU and on the simulated GPU).
fn always_shared() -> bool {
    static ALWAYS: OnceLock<bool> = OnceLock::new();
    *ALWAYS.get_or_init(|| std::env::var("TENJIN_SHARED_CODE").is_ok_and(|v| v == "always"))
}

/// What a kernel computes, whatever its sizes: its name, its arguments'
/// names, its output's rank, its element type and the operations of its
/// statements in order (loads by argument, arithmetic, folds), but not
/// its loops or the arguments' ranks (a size of 1 drops a loop, and a
/// dimension of a view). Two kernels with the same are taken for one op
/// at two sizes; a wrong guess costs only the choice of which code comes
/// first.
pub(crate) fn op_hash(k: &Kernel, dtype: DType) -> u64 {
    let args: Vec<&str> = k.args.iter().map(|a| a.name.as_str()).collect();
    let mut ops = format!("{dtype:?} {} {args:?} {}", k.name, k.out_shape.len());
    visit_stmts(&k.body, &mut |s| {
        use std::fmt::Write;
        let _ = match s {
            Stmt::Let(_, Expr::Load { arg, .. }) => write!(ops, " load{arg}"),
            Stmt::Let(_, Expr::Unary(op, _)) => write!(ops, " {op:?}"),
            Stmt::Let(_, Expr::Binary(op, ..)) => write!(ops, " {op:?}"),
            Stmt::Let(_, Expr::PowI(_, n)) => write!(ops, " pow{n}"),
            Stmt::Let(_, Expr::Random { .. }) => write!(ops, " random"),
            Stmt::Reduce { op, .. } => write!(ops, " {op:?}"),
            Stmt::Store { .. } => write!(ops, " store"),
            Stmt::Let(..) | Stmt::If { .. } | Stmt::For(_) => Ok(()),
        };
    });
    hash_bytes(ops.as_bytes())
}

/// What code a kernel gets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tier {
    /// Code of its own, its constants compiled in: the first kernel of an
    /// op with constants to read at run time.
    Own,
    /// The code of its nest: `nest` (the kernel with its run-time
    /// constants, [`Kernel::with_run_time_constants`], or the kernel itself
    /// when the switch is off) compiled once for every kernel with the
    /// same nest. With `then_own`, the kernel gets code of its own after
    /// [`SPECIALISE_AFTER`] runs.
    Nest { nest: Box<Kernel>, then_own: bool },
}

/// The ops a backend has met (by [`op_hash`]), whatever their sizes.
#[derive(Default)]
pub(crate) struct Ops(Mutex<HashSet<u64>>);

impl Ops {
    /// The code `k` gets in `dtype` (see the module documentation); `k`'s
    /// op counts as met from now on.
    pub(crate) fn tier(&self, k: &Kernel, dtype: DType) -> Tier {
        let nest = if run_time_constants() {
            k.with_run_time_constants()
        } else {
            k.clone()
        };
        // Code of its own now or later, unless every size is dynamic.
        let tiered =
            !nest.params.is_empty() && !always_shared() && DYNAMIC_SCOPES.load(Relaxed) == 0;
        let new_op = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(op_hash(k, dtype));
        if tiered && new_op {
            return Tier::Own;
        }
        Tier::Nest {
            nest: Box::new(nest),
            then_own: tiered,
        }
    }
}

/// A kernel running shared code: its runs so far, and the code of its own
/// (a backend's `T`: machine code, a loaded module) made at the
/// [`SPECIALISE_AFTER`]-th run.
pub(crate) struct OwnLater<T> {
    /// The kernel itself, its constants compiled in.
    pub(crate) kernel: Kernel,
    pub(crate) dtype: DType,
    runs: AtomicU32,
    own: OnceLock<Option<Arc<T>>>,
}

impl<T> OwnLater<T> {
    pub(crate) fn new(kernel: Kernel, dtype: DType) -> OwnLater<T> {
        OwnLater {
            kernel,
            dtype,
            runs: AtomicU32::new(0),
            own: OnceLock::new(),
        }
    }

    /// Counts a run; the kernel's own code once it has run
    /// [`SPECIALISE_AFTER`] times, made then by `make` (`None`, a failure,
    /// keeps the shared code for good); `None` before.
    pub(crate) fn run(&self, make: impl FnOnce(&Kernel, DType) -> Option<T>) -> Option<&Arc<T>> {
        match self.own.get() {
            Some(own) => own.as_ref(),
            None if self.runs.fetch_add(1, Relaxed) + 1 >= SPECIALISE_AFTER => self
                .own
                .get_or_init(|| make(&self.kernel, self.dtype).map(Arc::new))
                .as_ref(),
            None => None,
        }
    }
}
