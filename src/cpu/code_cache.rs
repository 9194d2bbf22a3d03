//! Machine code shared between kernels that differ only in what the code
//! does not read.
//!
//! Owns [`shared_code`]. The code Cranelift generates for a loop nest is a
//! function of the nest alone (its statements, registers, argument count,
//! buffer types), of the element type and of the vector width: the
//! parallel loop's extent, the declared shapes and the trip-count bounds
//! of scalar loops are not in it (the parallel loop runs `start..end`,
//! given per call; the code reads `Loop::max_trips` only on vector loops,
//! to choose their unrolling). A new batch size of
//! an element-wise op, or of a row-wise one (a softmax, a loss over rows),
//! plans a kernel whose nest is the same as the last size's with another
//! extent: it gets the code already compiled instead of a Cranelift run
//! (issue 28: a quarter of a new batch size's time went to Cranelift).
//! The key is the nest's full `Debug` form, so equal keys mean equal code;
//! a nest with a NaN constant (whose payload the form does not show) is
//! never shared. Code is held weakly here and strongly by the kernels
//! using it, so it is freed with the last of them. Must not decide what
//! to compile or run anything.

use super::codegen;
use super::compiled::JitCode;
use super::wide::Width;
use crate::kernel::{Kernel, Stmt};
use crate::{DType, Error};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

/// Kernels that got code compiled for another kernel.
static SHARED: AtomicU64 = AtomicU64::new(0);

/// Kernels since the process started whose machine code was compiled for
/// another kernel with the same loop nest (see the module documentation).
pub fn code_shared() -> u64 {
    SHARED.load(Relaxed)
}

#[derive(Default)]
struct Codes {
    by_nest: HashMap<String, Weak<JitCode>>,
    /// The map's size after the last sweep of dead entries.
    swept_at: usize,
}

static CODES: Mutex<Option<Codes>> = Mutex::new(None);

/// The code of `k` for `dtype` elements: the live code of an equal nest,
/// or compiled now.
pub(crate) fn shared_code(k: &Kernel, dtype: DType) -> Result<Arc<JitCode>, Error> {
    let nest = format!(
        "{dtype:?} {} {:?}",
        Width::host().name(),
        (
            k.args.len(),
            k.num_ivars,
            k.num_regs,
            k.threads_per_output,
            k.shared_loops,
            &k.buffers,
            &without_scalar_trips(k.body.clone())
        )
    );
    let compile = || Ok(Arc::new(JitCode::new(codegen::compile(k, dtype)?)));
    if nest.contains("NaN") {
        return compile();
    }
    let lock = || CODES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(code) = lock()
        .as_ref()
        .and_then(|c| c.by_nest.get(&nest)?.upgrade())
    {
        SHARED.fetch_add(1, Relaxed);
        return Ok(code);
    }
    // Compiled outside the lock: another thread may compile the same nest
    // meanwhile, and the last one in is kept (both are correct).
    let code = compile()?;
    let mut guard = lock();
    let codes = guard.get_or_insert_with(Codes::default);
    codes.by_nest.insert(nest, Arc::downgrade(&code));
    if codes.by_nest.len() > 2 * codes.swept_at.max(64) {
        codes.by_nest.retain(|_, w| w.strong_count() > 0);
        codes.swept_at = codes.by_nest.len();
    }
    Ok(code)
}

/// `body` with the trip-count bound of every loop that is not a vector
/// loop set to 0: the code does not read it there.
fn without_scalar_trips(mut body: Vec<Stmt>) -> Vec<Stmt> {
    fn clear(stmts: &mut [Stmt]) {
        for s in stmts {
            match s {
                Stmt::For(l) | Stmt::Reduce { body: l, .. } => {
                    if !l.vector {
                        l.max_trips = 0;
                    }
                    clear(&mut l.body);
                }
                Stmt::If {
                    then, otherwise, ..
                } => {
                    clear(then);
                    clear(otherwise);
                }
                Stmt::Let(..) | Stmt::Store { .. } => {}
            }
        }
    }
    clear(&mut body);
    body
}
