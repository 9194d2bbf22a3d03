//! Which loops run as vector code: the decision, recorded in the kernel IR.
//!
//! Owns [`plan_vectors`], which marks loops of an f32 kernel
//! [`Loop::vector`](crate::kernel::Loop) and peels boundary iterations off
//! loops whose sum bounds depend on their index (`peel`), and the rules
//! behind it (`vectorizable`, `reduction_vectorizable`). The CPU
//! backend emits f32x4 code for exactly the marked loops (`crate::cpu::simd`
//! documents the code and its fixed reduction order). Must not emit code.
//!
//! **Output loops.** A loop qualifies when it is an output loop
//! (`Stmt::For`) with no loop inside, every store in it is contiguous
//! (coefficient 1 of the loop variable) or strided forwards (a phase of an
//! output split by residue, `super::residues`: lanes store one at a time),
//! every load contiguous, invariant
//! (coefficient 0, a broadcast) or strided (a coefficient of at most
//! `MAX_STRIDE` (16) in size: a pool's or a strided convolution's windows,
//! a flip; its lanes load one at a time), and every index guard is invariant (an
//! index used as a number may vary: each lane converts its own value). An
//! index guard is then a real branch that all lanes take alike (`cat` along
//! an outer dimension, the rows of an optimizer's stacked update), so loads
//! may sit under it. Both branches of a value guard run on every lane and a
//! `bitselect` picks the result, so a lane may load what its scalar
//! iteration would not have: that is safe because every lane is an
//! iteration of the loop, inside the index guards around it, and an index
//! function's reads are in bounds wherever its index guards hold whatever
//! its value guards say (`IndexFn::check_bounds` ignores value guards,
//! which depend on data; a max pool's gradient reads `dy` under an
//! equality with the window's argmax). A reduction inside (a sum, a
//! maximum or minimum, an argmax or argmin) runs once per lane with a
//! vector accumulator, in index order.
//!
//! **Sums.** A sum qualifies when its body has no loop and no store, its
//! loads are contiguous or invariant in the reduction variable (under a
//! value guard too, for the same reason) and its
//! index guards are invariant; its partial sums are then combined in a
//! fixed order that depends only on its range.
//!
//! f64 kernels stay scalar: they compute exactly what the interpreter does.
//! Long sums of f32 kernels are split into blocks added in f64 by the next
//! pass (`super::blocked_sums`; the order is `super::passes`).

use super::peel::peel;
use crate::kernel::{Cond, Expr, IVar, Kernel, Lin, Loop, Stmt, LANES};
use crate::symbolic::ReduceOp;
use crate::DType;

/// `k` with its vector loops marked and its peelable loops split (see the
/// module documentation); f64 kernels come back unchanged.
pub fn plan_vectors(mut k: Kernel, dtype: DType) -> Kernel {
    if dtype != DType::F32 {
        return k;
    }
    let body = std::mem::take(&mut k.body);
    k.body = plan_stmts(body);
    k
}

fn plan_stmts(stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::For(mut l) => {
                if vectorizable(&l) {
                    l.vector = true;
                    out.push(Stmt::For(l));
                } else if let Some(p) = peel(&l) {
                    // Scalar boundary iterations around a vector interior.
                    let mut interior = p.interior;
                    interior.vector = true;
                    out.extend(p.head.map(|h| Stmt::For(plan_loop(h))));
                    out.push(Stmt::For(interior));
                    out.extend(p.tail.map(|t| Stmt::For(plan_loop(t))));
                } else {
                    out.push(Stmt::For(plan_loop(l)));
                }
            }
            Stmt::Reduce {
                op,
                value,
                result,
                mut body,
                wide,
            } => {
                if reduction_vectorizable(op, &body) {
                    body.vector = true;
                } else {
                    body = plan_loop(body);
                }
                out.push(Stmt::Reduce {
                    op,
                    value,
                    result,
                    body,
                    wide,
                });
            }
            branch @ Stmt::If { .. } => out.push(branch.map_branches(plan_stmts)),
            other => out.push(other),
        }
    }
    out
}

/// A scalar loop with the loops inside it planned.
fn plan_loop(mut l: Loop) -> Loop {
    let body = std::mem::take(&mut l.body);
    l.body = plan_stmts(body);
    l
}

/// Whether the output loop `l` of `k` can run as f32x4 code (see the
/// module documentation).
pub(crate) fn vectorizable(l: &Loop) -> bool {
    let stores: Vec<&Lin> = l
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::Store { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    let cx = Check {
        var: l.var,
        output_loop: true,
        trips: l.max_trips,
    };
    !stores.is_empty() && l.body.iter().all(|s| cx.stmt_ok(s, true))
}

/// The largest stride of a read in a vectorised output loop: the lanes
/// load one at a time, so wider strides only save the loop's overhead.
const MAX_STRIDE: u64 = 16;

/// The rules shared by vectorised output loops and vectorised sums.
struct Check {
    var: IVar,
    /// An output loop (stores and per-lane reductions allowed) rather than
    /// the body of a vectorised sum.
    output_loop: bool,
    /// Trip count bound of the loop.
    trips: u64,
}

impl Check {
    fn stmt_ok(&self, s: &Stmt, top: bool) -> bool {
        let v = self.var;
        match s {
            Stmt::Let(_, e) => match e {
                // An output loop's lanes may also read with a stride (a
                // lane at a time, `crate::cpu::simd`), a sum's not.
                Expr::Load { offset, .. } => match offset.coeff(v) {
                    0 | 1 => true,
                    c => self.output_loop && c.unsigned_abs() <= MAX_STRIDE,
                },
                _ => true,
            },
            // Stores contiguous, or strided as reads are (the phases of an
            // output split by residue, `super::residues`).
            Stmt::Store { offset, .. } => {
                self.output_loop
                    && top
                    && matches!(offset.coeff(v), c if c == 1 || (2..=MAX_STRIDE as i64).contains(&c))
            }
            Stmt::If {
                cond,
                then,
                otherwise,
                ..
            } => {
                // An index guard (invariant) is a branch all lanes take
                // alike; both sides of a value guard run on every lane.
                let (cond_ok, inner_top) = match cond {
                    Cond::Value(..) => (true, false),
                    Cond::Index(l, _) | Cond::Divisible(l, _) => (l.coeff(v) == 0, top),
                };
                cond_ok
                    && then.iter().all(|s| self.stmt_ok(s, inner_top))
                    && otherwise.iter().all(|s| self.stmt_ok(s, inner_top))
            }
            // A reduction inside the loop runs once per lane with a vector
            // accumulator, in index order (a column sum `Σ_i x[i; j]` in a
            // loop over `j`; the channel and tap sums of a convolution in a
            // loop over time; a pool's argmax, each lane with its own index
            // and best value): its trip range must be the same on every
            // lane. A reduction contiguous in its own variable and longer
            // than this loop keeps the scalar loop with a vectorised sum
            // (`vector_sum`): the longer loop gets the vectors.
            Stmt::Reduce { op, body, .. } => {
                let invariant = |b: &crate::kernel::Bound| b.num.coeff(v) == 0;
                self.output_loop
                    && matches!(
                        op,
                        ReduceOp::Sum
                            | ReduceOp::Max
                            | ReduceOp::Min
                            | ReduceOp::ArgMax
                            | ReduceOp::ArgMin
                    )
                    && (!reduction_vectorizable(*op, body) || body.max_trips < self.trips)
                    && body.lower.iter().chain(&body.upper).all(invariant)
                    && body.body.iter().all(|s| self.stmt_ok(s, top))
            }
            Stmt::For(_) => false,
        }
    }
}

/// Whether the f32 reduction `op` over `l` can run as f32x4 code: a sum
/// whose body has no loop and no store, whose loads are contiguous or
/// invariant in the reduction variable, and whose index guards are
/// invariant. Index guards become branches (taken by all four
/// lanes alike), so loads may sit in them; both branches of a value guard
/// run on every lane (their loads in bounds: see the module
/// documentation).
pub(crate) fn reduction_vectorizable(op: ReduceOp, l: &Loop) -> bool {
    let cx = Check {
        var: l.var,
        output_loop: false,
        trips: l.max_trips,
    };
    op == ReduceOp::Sum && l.max_trips >= LANES as u64 && l.body.iter().all(|s| cx.stmt_ok(s, true))
}
