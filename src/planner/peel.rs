//! Peeling boundary iterations off an output loop, so that its interior
//! runs as vector code.
//!
//! Owns one transformation of the kernel IR. Derivatives of shifted reads
//! (`dx[s] = Σ_{k = max(0, s − T + 1)}^{min(K − 1, s)} dy[s − k] · w[k]`, the
//! input gradient of every convolution) have reduction bounds that depend
//! on the output index `s`, so the lanes of a vector would run different
//! trip counts and the loop stays scalar. On the interior of `s`'s range
//! every such bound is dominated by an invariant one of its list (`0` and
//! `K − 1` above), so the loop is split into
//!
//! ```text
//! head:     s in [lo, min(hi, L − 1)]        original body, scalar
//! interior: s in [max(lo, L), min(hi, U)]    bounds without the s-dependent forms, vector code
//! tail:     s in [max(lo, L, U + 1), hi]     original body, scalar
//! ```
//!
//! with `L`, `U` the conditions under which the dependent forms are
//! dominated. The three pieces cover the range exactly once whether or not
//! the interior is empty, and which piece an element falls in depends on
//! its index only (never on where threads cut the parallel loop), so
//! results stay independent of the thread count. Index guards that depend
//! on the loop variable (the zero padding of an im2col copy) are split off
//! the same way: on the interior they hold.
//!
//! It must not change what a
//! kernel computes: only which loop computes each element.

use super::vectorize::vectorizable;
use crate::kernel::{Bound, Cond, IVar, Lin, Loop, Stmt};
use crate::symbolic::expr::CmpOp;

/// A loop split into scalar head and tail and a vectorisable interior.
pub(crate) struct Peeled {
    pub(crate) head: Option<Loop>,
    pub(crate) interior: Loop,
    pub(crate) tail: Option<Loop>,
}

/// The split of `l` (see the module documentation), when its only obstacle
/// to vector code is reduction bounds that depend on its variable, through
/// at most one condition on each side.
pub(crate) fn peel(l: &Loop) -> Option<Peeled> {
    let mut bound_inside = Vec::new();
    collect_loop_vars(&l.body, &mut bound_inside);
    let mut cx = Conditions {
        var: l.var,
        bound_inside,
        lower: Vec::new(),
        upper: Vec::new(),
    };
    let body = cx.strip(&l.body)?;
    if cx.lower.len() > 1 || cx.upper.len() > 1 || (cx.lower.is_empty() && cx.upper.is_empty()) {
        return None;
    }
    let interior = Loop {
        var: l.var,
        lower: l.lower.iter().chain(&cx.lower).cloned().collect(),
        upper: l.upper.iter().chain(&cx.upper).cloned().collect(),
        body,
        max_trips: l.max_trips,
        vector: false,
    };
    if !vectorizable(&interior) {
        return None;
    }
    let piece = |lower: Vec<Bound>, upper: Vec<Bound>| Loop {
        var: l.var,
        lower,
        upper,
        body: l.body.clone(),
        max_trips: l.max_trips,
        vector: false,
    };
    // head: v < L, i.e. v ≤ ⌊(num − 1) / den⌋.
    let head = cx.lower.first().map(|b| {
        let before = Bound {
            num: add_const(&b.num, -1),
            den: b.den,
        };
        piece(l.lower.clone(), [&l.upper[..], &[before]].concat())
    });
    // tail: v > U, i.e. v ≥ ⌈(num + 1) / den⌉, and v ≥ L (so it never
    // overlaps the head when the interior is empty).
    let tail = cx.upper.first().map(|b| {
        let after = Bound {
            num: add_const(&b.num, 1),
            den: b.den,
        };
        let lower = l
            .lower
            .iter()
            .chain(&cx.lower)
            .cloned()
            .chain([after])
            .collect();
        piece(lower, l.upper.clone())
    });
    Some(Peeled {
        head,
        interior,
        tail,
    })
}

/// Conditions on the loop variable under which every dependent reduction
/// bound is dominated: `var ≥ ⌈lower⌉`, `var ≤ ⌊upper⌋`.
struct Conditions {
    var: IVar,
    /// Variables of loops inside the body, with their range when it is
    /// constant: conditions may not mention the others.
    bound_inside: Vec<(IVar, Option<(i64, i64)>)>,
    lower: Vec<Bound>,
    upper: Vec<Bound>,
}

impl Conditions {
    /// The body with dependent reduction bounds removed, recording the
    /// conditions; `None` when a dependent bound cannot be handled.
    fn strip(&mut self, body: &[Stmt]) -> Option<Vec<Stmt>> {
        body.iter()
            .map(|s| {
                Some(match s {
                    Stmt::Reduce {
                        op,
                        value,
                        result,
                        body,
                        wide,
                    } => {
                        let lower = self.list(&body.lower, true)?;
                        let upper = self.list(&body.upper, false)?;
                        Stmt::Reduce {
                            op: *op,
                            value: *value,
                            result: *result,
                            wide: *wide,
                            body: Loop {
                                var: body.var,
                                lower,
                                upper,
                                body: self.strip(&body.body)?,
                                max_trips: body.max_trips,
                                vector: body.vector,
                            },
                        }
                    }
                    Stmt::If {
                        cond,
                        then,
                        then_value,
                        otherwise,
                        otherwise_value,
                        result,
                    } => Stmt::If {
                        cond: self.guard(cond)?,
                        then: self.strip(then)?,
                        then_value: *then_value,
                        otherwise: self.strip(otherwise)?,
                        otherwise_value: *otherwise_value,
                        result: *result,
                    },
                    Stmt::For(_) => return None,
                    other => other.clone(),
                })
            })
            .collect()
    }

    /// An index guard that depends on the variable (the zero padding of a
    /// convolution's im2col copy: `if {q + j − 1 ≥ 0} then (x[…]) else
    /// (0)`) holds on the interior: it becomes a condition of the interior
    /// and, there, a guard that always holds (one branch every lane takes).
    /// Other guards are kept.
    fn guard(&mut self, cond: &Cond) -> Option<Cond> {
        let Cond::Index(l, op) = cond else {
            return Some(cond.clone());
        };
        let c = l.coeff(self.var);
        if c == 0 {
            return Some(cond.clone());
        }
        // As `form ≥ 0`.
        let form = match op {
            CmpOp::Ge => l.clone(),
            CmpOp::Gt => add_const(l, -1),
            CmpOp::Le => l.checked_scale(-1)?,
            CmpOp::Lt => add_const(&l.checked_scale(-1)?, -1),
            CmpOp::Eq | CmpOp::Ne => return None,
        };
        let c = form.coeff(self.var);
        // A variable of a loop inside, of constant range, at its worst
        // value: the guard holds for every value when it holds there (a
        // pool's padding `2·t + k − 1 ≥ 0` for every tap `k ≥ 0`).
        let mut r = form.without(self.var);
        for (w, range) in &self.bound_inside {
            let k = r.coeff(*w);
            if k != 0 {
                let (lo, hi) = (*range)?;
                let worst = if k > 0 { lo } else { hi };
                r = add_const(&r.without(*w), k.checked_mul(worst)?);
            }
        }
        // c·v + r ≥ 0: v ≥ ⌈−r / c⌉ (c > 0) or v ≤ ⌊r / −c⌋ (c < 0).
        let (condition, list) = if c > 0 {
            (
                Bound {
                    num: r.checked_scale(-1)?,
                    den: c,
                },
                &mut self.lower,
            )
        } else {
            (Bound { num: r, den: -c }, &mut self.upper)
        };
        if !list.contains(&condition) {
            list.push(condition);
        }
        Some(Cond::Index(Lin::constant(0), CmpOp::Ge))
    }

    fn is_inside(&self, v: IVar) -> bool {
        self.bound_inside.iter().any(|(w, _)| *w == v)
    }

    /// A bound list (`lower`: the maximum of ceilings is taken, else the
    /// minimum of floors) without its forms that depend on the variable;
    /// each is dominated by the list's first invariant integer form `N`
    /// where `c·v + r ≤ N·d` (lower) or `c·v + r ≥ N·d` (upper).
    fn list(&mut self, bounds: &[Bound], lower: bool) -> Option<Vec<Bound>> {
        let dependent = |b: &&Bound| b.num.coeff(self.var) != 0;
        if !bounds.iter().any(|b| dependent(&b)) {
            return Some(bounds.to_vec());
        }
        let invariant: Vec<Bound> = bounds.iter().filter(|b| !dependent(b)).cloned().collect();
        let n = invariant.iter().find(|b| b.den == 1)?.num.clone();
        for b in bounds.iter().filter(dependent) {
            let c = b.num.coeff(self.var);
            let r = b.num.without(self.var);
            // lower: c·v ≤ N·d − r; upper: c·v ≥ N·d − r.
            let rhs = n.checked_scale(b.den)?.checked_sub(&r)?;
            if rhs.terms.iter().any(|(v, _)| self.is_inside(*v)) {
                return None;
            }
            // v ≤ rhs / c when (lower, c > 0) or (upper, c < 0); else v ≥.
            let (num, den) = if c > 0 {
                (rhs, c)
            } else {
                (rhs.checked_scale(-1)?, -c)
            };
            let condition = Bound { num, den };
            let list = if lower == (c > 0) {
                &mut self.upper
            } else {
                &mut self.lower
            };
            if !list.contains(&condition) {
                list.push(condition);
            }
        }
        Some(invariant)
    }
}

/// The variables of the loops in `body`, with their range when every
/// bound is a constant.
fn collect_loop_vars(body: &[Stmt], out: &mut Vec<(IVar, Option<(i64, i64)>)>) {
    for s in body {
        match s {
            Stmt::Reduce { body, .. } | Stmt::For(body) => {
                out.push((body.var, body.constant_range()));
                collect_loop_vars(&body.body, out);
            }
            Stmt::If {
                then, otherwise, ..
            } => {
                collect_loop_vars(then, out);
                collect_loop_vars(otherwise, out);
            }
            _ => {}
        }
    }
}

fn add_const(l: &Lin, c: i64) -> Lin {
    Lin {
        constant: l.constant.wrapping_add(c),
        terms: l.terms.clone(),
    }
}
