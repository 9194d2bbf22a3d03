//! Reductions spread over a block of GPU threads when a kernel has few
//! outputs and long reductions.
//!
//! Owns [`spread_reductions`]. One thread per output element leaves a GPU
//! idle when there are few outputs: a scalar loss over 10⁶ values would
//! be one thread's serial loop. A kernel with at most [`MAX_OUTPUTS`]
//! outputs and a *top-level* reduction (not inside another loop) of at
//! least [`MIN_TRIPS`] iterations gets [`THREADS`] threads per output
//! ([`Kernel::threads_per_output`]): each folds a strided share of the
//! reduction and the shares combine in a fixed tree, so results depend
//! only on the sizes — bitwise the same from run to run, with no atomics.
//! Every top-level reduction of such a kernel is shared out (none is run
//! by all the threads over again). Its sums are `wide` (shares and tree in
//! f64), which holds the accuracy of the CPU's blocked sums. The
//! thresholds are a first choice, to be tuned on a GPU (issue "GPU
//! speed"). Must not emit code.

use crate::kernel::{Kernel, Stmt};
use crate::symbolic::ReduceOp;

/// Threads per output of a spread kernel (one block).
pub(crate) const THREADS: u32 = 256;
/// The most outputs a kernel may have for its reductions to be spread
/// (beyond it, one thread per output already fills the device).
pub(crate) const MAX_OUTPUTS: usize = 2_048;
/// The shortest top-level reduction worth spreading.
pub(crate) const MIN_TRIPS: u64 = 256;

/// `k` with its top-level reductions spread over [`THREADS`] threads per
/// output where that pays (see the module documentation).
///
/// ```
/// use tenjin::planner::passes::{loop_kernel, LoopRole};
/// use tenjin::planner::route::Target;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[] = sum{i}_0^999999 x[i]", &[("x", &[1_000_000][..])])?;
/// let gpu = loop_kernel(&f, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 256);
/// let cpu = loop_kernel(&f, tenjin::DType::F32, Target::Cpu, LoopRole::Whole)?;
/// assert_eq!(cpu.threads_per_output, 1);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub(crate) fn spread_reductions(mut k: Kernel) -> Kernel {
    if k.out_len() == 0 || k.out_len() > MAX_OUTPUTS {
        return k;
    }
    let long = top_level(&mut k.body)
        .iter()
        .any(|s| matches!(s, Stmt::Reduce { body, .. } if body.max_trips >= MIN_TRIPS));
    if !long {
        return k;
    }
    k.threads_per_output = THREADS;
    // Every top-level sum of a spread kernel is shared out; f32 ones keep
    // their shares in f64.
    for s in top_level(&mut k.body) {
        if let Stmt::Reduce { op, wide, .. } = s {
            *wide |= *op == ReduceOp::Sum;
        }
    }
    k
}

/// The statements that run once per output element: those of the
/// innermost output loop's body and of the branches in it, not those
/// inside a reduction's loop.
fn top_level(body: &mut [Stmt]) -> Vec<&mut Stmt> {
    let mut found = Vec::new();
    let mut stack: Vec<&mut [Stmt]> = vec![body];
    while let Some(stmts) = stack.pop() {
        for s in stmts {
            match s {
                Stmt::For(l) => stack.push(&mut l.body),
                Stmt::If {
                    then, otherwise, ..
                } => {
                    stack.push(then);
                    stack.push(otherwise);
                }
                other => found.push(other),
            }
        }
    }
    found
}
