//! Machine code shared between kernels that differ only in their sizes.
//!
//! Owns [`shared_code`] and what a kernel runs ([`JitCall`]). The code
//! Cranelift generates for a loop nest is a function of the nest alone
//! (its statements, registers, argument count, buffer types), of the
//! element type and of the vector width. What a new size changes in a nest
//! is kept out of the code:
//!
//! - the parallel loop's extent and the declared shapes: the parallel
//!   loop runs `start..end`, given per call;
//! - the constants of loop bounds and guards (`sum b in 0 ..= B − 1`, the
//!   block count of a long sum): run-time constants
//!   ([`Kernel::with_run_time_constants`]), read when the code is called
//!   (shared code unrolls no loop: a short sum over a small batch is a
//!   loop there, in the same order);
//! - the strides of loads and stores (rows of length `T` in a `[B, T, D]`
//!   tensor, lanes `T` apart): run-time strides (`Kernel::strides`);
//! - trip counts: the code reads them only on vector loops, to choose
//!   their unrolling and whether the wide executor runs them
//!   (`super::trips`); a loop whose bounds are read at run time chooses
//!   when it runs, one whose range moves with other loops by its bound
//!   `Loop::max_trips`, so the key holds which side of those thresholds
//!   each vector loop is on, or that it decides at run time (its *trip
//!   class*).
//!
//! Offsets' constants stay compiled in (a concatenation's `y[t − B]`), so
//! nests whose offsets hold a size are not shared.
//!
//! Which kernels share code is `crate::kernel::sharing`'s policy (an
//! op's first kernel gets code of its own, a new size of it the nest's
//! shared code, a kernel run `SPECIALISE_AFTER` times code of its own
//! again): shared code is up to 1.24× slower on a max pool's or a
//! depthwise convolution's step, whose constant bounds fold away or let
//! the taps be unrolled (measured).
//!
//! So a new batch size of an MLP step compiles nothing: its element-wise
//! and row-wise kernels, and its sums over the batch (the loss, the bias
//! gradients), all run shared code (issue 28), and compute the same values
//! bit for bit (the same loops over the same ranges). The key is the lifted
//! nest's full `Debug` form, so equal keys mean equal code; with run-time
//! constants off, a nest with a NaN constant (whose payload the form does
//! not show) is never shared (lifted, a float constant travels as its
//! bits).
//! Code is held weakly here and strongly by the kernels using it, so it is
//! freed with the last of them. Must not plan, nor run anything but the
//! compilation of a kernel's own code from its run.

use super::codegen;
use super::compiled::JitCode;
use super::trips::reach;
use super::wide::Width;
use super::wide_loop::MIN_TRIPS;
use crate::kernel::sharing::{Ops, OwnLater, Tier};
use crate::kernel::{IVar, Kernel, Stmt, LANES};
use crate::{DType, Error};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// Kernels that got code compiled for another kernel.
static SHARED: AtomicU64 = AtomicU64::new(0);

/// Cranelift runs for kernels (shared code, or a kernel's own).
static COMPILED: AtomicU64 = AtomicU64::new(0);

/// Kernels running shared code that got code of their own.
static SPECIALISED: AtomicU64 = AtomicU64::new(0);

/// Kernels since the process started whose machine code was compiled for
/// another kernel with the same loop nest (see the module documentation).
pub fn code_shared() -> u64 {
    SHARED.load(Relaxed)
}

/// Loop nests compiled by Cranelift since the process started, for a
/// kernel (its own code, or a nest's shared code); a kernel's own code
/// made after `SPECIALISE_AFTER` runs is counted apart
/// ([`code_specialised`]).
pub fn code_compiled() -> u64 {
    COMPILED.load(Relaxed)
}

/// Kernels since the process started that ran shared code
/// `SPECIALISE_AFTER` times and then got code with their constants
/// compiled in.
pub fn code_specialised() -> u64 {
    SPECIALISED.load(Relaxed)
}

/// Generated code with the values of its run-time constants for one kernel
/// (`Kernel::params`, in order), passed behind a pointer after the
/// arguments'; when the code is shared, what makes the kernel code of its
/// own once it runs often.
pub(crate) struct JitCall {
    pub(crate) code: Arc<JitCode>,
    pub(crate) constants: Vec<i64>,
    own: Option<Box<OwnLater<JitCode>>>,
}

impl JitCall {
    fn fixed(code: Arc<JitCode>) -> JitCall {
        JitCall {
            code,
            constants: Vec::new(),
            own: None,
        }
    }

    /// The code to run now, with its constants (counts a run).
    pub(crate) fn current(&self) -> (&JitCode, &[i64]) {
        let own = self.own.as_ref().and_then(|own| {
            own.run(|kernel, dtype| {
                // The same nest compiled before with parameters: a failure
                // here keeps the shared code.
                let code = codegen::compile(kernel, dtype).ok()?;
                SPECIALISED.fetch_add(1, Relaxed);
                Some(JitCode::new(code))
            })
        });
        match own {
            Some(code) => (code, &[]),
            None => (&self.code, &self.constants),
        }
    }
}

#[derive(Default)]
struct Codes {
    /// The code of each lifted nest, while kernels use it.
    by_nest: HashMap<String, Weak<JitCode>>,
    /// The map's size after the last sweep of dead entries.
    swept_at: usize,
}

static CODES: Mutex<Option<Codes>> = Mutex::new(None);

/// The code of `k` for `dtype` elements (see the module documentation):
/// the first kernel of an op gets code with its constants compiled in; a
/// kernel of an op met before gets its nest's shared code, which reads
/// them when called, compiled now if no kernel uses it.
pub(crate) fn shared_code(k: &Kernel, dtype: DType) -> Result<JitCall, Error> {
    let compile = |k: &Kernel| {
        COMPILED.fetch_add(1, Relaxed);
        Ok(Arc::new(JitCode::new(codegen::compile(k, dtype)?)))
    };
    static OPS: LazyLock<Ops> = LazyLock::new(Ops::default);
    let (lifted, tiered) = match OPS.tier(k, dtype) {
        // The first kernel of an op: its own code, at full speed (other ops
        // with the same nest, a convolution at another stride or another
        // layer's shapes, do not make it dynamic).
        Tier::Own => return compile(k).map(JitCall::fixed),
        Tier::Nest { nest, then_own } => (*nest, then_own),
    };
    let lock = || CODES.lock().unwrap_or_else(|e| e.into_inner());
    let nest = format!(
        "{dtype:?} {} {:?}",
        Width::host().name(),
        (
            lifted.args.len(),
            lifted.num_ivars,
            lifted.num_regs,
            lifted.threads_per_output,
            lifted.shared_loops,
            &lifted.buffers,
            lifted.params.iter().map(|p| p.0).collect::<Vec<_>>(),
            &lifted.strides,
            &with_trip_classes(lifted.body.clone(), &lifted.params)
        )
    );
    if nest.contains("NaN") {
        return compile(k).map(JitCall::fixed);
    }
    let call = |code| JitCall {
        code,
        constants: lifted.params.iter().map(|&(_, c)| c).collect(),
        own: tiered.then(|| Box::new(OwnLater::new(k.clone(), dtype))),
    };
    let found = lock()
        .get_or_insert_with(Codes::default)
        .by_nest
        .get(&nest)
        .and_then(Weak::upgrade);
    if let Some(code) = found {
        SHARED.fetch_add(1, Relaxed);
        return Ok(call(code));
    }
    // Compiled outside the lock: another thread may compile the same nest
    // meanwhile, and the last one in is kept (both are correct).
    let code = compile(&lifted)?;
    let mut guard = lock();
    let codes = guard.get_or_insert_with(Codes::default);
    codes.by_nest.insert(nest, Arc::downgrade(&code));
    if codes.by_nest.len() > 2 * codes.swept_at.max(64) {
        codes.by_nest.retain(|_, w| w.strong_count() > 0);
        codes.swept_at = codes.by_nest.len();
    }
    Ok(call(code))
}

/// `body` with the trip-count bound of every loop replaced by what the
/// code reads of it: nothing on a scalar loop (0), on a vector loop which
/// forms its code has, by the thresholds it reaches (four f32x4 steps per
/// iteration, `super::simd`; the wide executor, `super::wide_loop`): yes,
/// no, or decided when the code runs (`super::trips`: a loop over `T`
/// elements, its bounds read at run time, is one class for every `T`).
fn with_trip_classes(mut body: Vec<Stmt>, params: &[(IVar, i64)]) -> Vec<Stmt> {
    fn classify(stmts: &mut [Stmt], is_param: &dyn Fn(IVar) -> bool) {
        for s in stmts {
            match s {
                Stmt::For(l) | Stmt::Reduce { body: l, .. } => {
                    l.max_trips = if l.vector {
                        [4 * LANES as u64, MIN_TRIPS]
                            .iter()
                            .fold(0, |class, &t| 3 * class + reach(l, t, is_param) as u64)
                    } else {
                        0
                    };
                    classify(&mut l.body, is_param);
                }
                Stmt::If {
                    then, otherwise, ..
                } => {
                    classify(then, is_param);
                    classify(otherwise, is_param);
                }
                Stmt::Let(..) | Stmt::Store { .. } => {}
            }
        }
    }
    classify(&mut body, &|v| params.iter().any(|p| p.0 == v));
    body
}
