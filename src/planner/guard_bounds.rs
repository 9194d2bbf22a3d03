//! Guards of a reduction's terms folded into the reduction's bounds.
//!
//! Owns [`guards_to_bounds`], one rewrite of the kernel IR. Zero padding is
//! a guard around a term (`sum{k} (if {t + k − 1 ≥ 0} then (x[t + k − 1]·w[k])
//! else (0))`, a depthwise convolution or any window read as a loop nest),
//! so every output element tests every tap, and a guard that depends on the
//! output index keeps the loop scalar. A guard linear in the sum's variable
//! is exactly a bound on it: `k ≥ 1 − t` here. With the guards moved into
//! the bounds, the sum runs over the taps that are inside, and its bounds
//! depend on `t` only through a `max`/`min` that `super::peel` splits off,
//! so the interior of the output loop runs as vector code.
//!
//! The terms left out are the reduction's identity (the guard's other
//! branch): 0 for a sum, whose accumulator starts at +0 so that `s + 0 = s`
//! for every `s` it can hold; −∞ for a maximum (a max pool's padding), +∞
//! for a minimum. So the kernel computes the same bits in f32 and f64, and
//! an empty range gives what all-skipped terms gave. NaN and infinities in
//! the skipped positions were never read (the guard's branch does not load
//! them). Runs after lowering
//! and before tiles and vectors (`super::passes`). Must not emit code.

use crate::kernel::{visit_stmts, Bound, Cond, Expr, Kernel, Lin, Loop, Reg, Stmt};
use crate::symbolic::expr::CmpOp;
use crate::symbolic::ReduceOp;

/// `k` with the linear guards of its sums folded into their bounds (see the
/// module documentation).
///
/// ```
/// use tenjin::planner::guard_bounds::guards_to_bounds;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse_with_sizes(
///     "y[t] = sum{k}_0^2 (if {t + k - 1 >= 0} then (x[t + k - 1]) else (0))",
///     &[("x", &[8][..])],
///     &[("t", 6)],
/// )?;
/// let guarded = tenjin::kernel::lower(&f)?.to_string();
/// let bounded = guards_to_bounds(tenjin::kernel::lower(&f)?).to_string();
/// assert!(guarded.contains("if") && !bounded.contains("if"), "{bounded}");
/// assert!(bounded.contains("sum v3 in max(0, -v2 + 1) ..= 2"), "{bounded}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn guards_to_bounds(mut k: Kernel) -> Kernel {
    let consts = constant_registers(&k.body);
    rewrite(&mut k.body, &consts);
    k
}

/// Registers defined as constants anywhere in `stmts`, with their values.
fn constant_registers(stmts: &[Stmt]) -> Vec<(Reg, f64)> {
    let mut out = Vec::new();
    visit_stmts(stmts, &mut |s| {
        if let Stmt::Let(r, Expr::Const(c)) = s {
            out.push((*r, *c));
        }
    });
    out
}

/// The value a reduction leaves unchanged, whatever it has folded: 0 for
/// a sum, −∞ for a maximum, +∞ for a minimum (NaN stays NaN under all
/// three); `None` for the arg-reductions, whose result is a position.
fn identity(op: ReduceOp) -> Option<f64> {
    match op {
        ReduceOp::Sum => Some(0.0),
        ReduceOp::Max => Some(f64::NEG_INFINITY),
        ReduceOp::Min => Some(f64::INFINITY),
        _ => None,
    }
}

/// Folds the guards of every reduction in `stmts`, in place.
fn rewrite(stmts: &mut [Stmt], consts: &[(Reg, f64)]) {
    for s in stmts {
        match s {
            Stmt::For(l) => rewrite(&mut l.body, consts),
            Stmt::If {
                then, otherwise, ..
            } => {
                rewrite(then, consts);
                rewrite(otherwise, consts);
            }
            Stmt::Reduce {
                op, value, body, ..
            } => {
                if let Some(id) = identity(*op) {
                    let skipped: Vec<Reg> = consts
                        .iter()
                        .filter(|(_, c)| *c == id)
                        .map(|(r, _)| *r)
                        .collect();
                    while let Some(v) = fold_guard(body, *value, &skipped) {
                        *value = v;
                    }
                }
                rewrite(&mut body.body, consts);
            }
            Stmt::Let(..) | Stmt::Store { .. } => {}
        }
    }
}

/// When the reduction over `l` folds `value` computed by a last statement
/// `value = if {form op 0} then (…) else (e)` with `e` one of the
/// registers in `skipped` (holding the reduction's identity) and `form`
/// linear in the loop's variable: the guard becomes a bound of `l`, the
/// branch's statements replace the `if`, and the branch's value is
/// returned (the value the reduction now folds).
fn fold_guard(l: &mut Loop, value: Reg, skipped: &[Reg]) -> Option<Reg> {
    let Some(Stmt::If {
        cond: Cond::Index(form, op),
        otherwise,
        otherwise_value,
        result,
        ..
    }) = l.body.last()
    else {
        return None;
    };
    if *result != value || !otherwise.is_empty() || !skipped.contains(otherwise_value) {
        return None;
    }
    let (lower, bound) = bound_of(form, *op, l)?;
    let Some(Stmt::If {
        then, then_value, ..
    }) = l.body.pop()
    else {
        return None;
    };
    match lower {
        true => l.lower.push(bound),
        false => l.upper.push(bound),
    }
    l.body.extend(then);
    Some(then_value)
}

/// The bound on `l`'s variable that `form op 0` is: `(true, lower)` or
/// `(false, upper)`; `None` for `=`, `≠`, a form without the variable, or
/// on overflow.
fn bound_of(form: &Lin, op: CmpOp, l: &Loop) -> Option<(bool, Bound)> {
    // As `g ≥ 0` over the integers.
    let g = match op {
        CmpOp::Ge => form.clone(),
        CmpOp::Gt => form.checked_add(&Lin::constant(-1))?,
        CmpOp::Le => form.checked_scale(-1)?,
        CmpOp::Lt => form.checked_scale(-1)?.checked_add(&Lin::constant(-1))?,
        CmpOp::Eq | CmpOp::Ne => return None,
    };
    let a = g.coeff(l.var);
    let rest = g.without(l.var);
    match a.signum() {
        // a·k + rest ≥ 0  ⇔  k ≥ ⌈−rest / a⌉
        1 => Some((
            true,
            Bound {
                num: rest.checked_scale(-1)?,
                den: a,
            },
        )),
        // −|a|·k + rest ≥ 0  ⇔  k ≤ ⌊rest / |a|⌋
        -1 => Some((
            false,
            Bound {
                num: rest,
                den: a.checked_neg()?,
            },
        )),
        _ => None,
    }
}
