//! Output loops split by residue, so the sums inside them stop dividing.
//!
//! Owns [`split_residues`], one rewrite of the kernel IR. The derivative of
//! a strided read solves its sum's range exactly, and the solution divides
//! by the stride: the input gradient of a 3×3 pool or convolution at
//! stride 2 sums `Σ_{z ∈ [max(−15, ⌈(−1 − u)/2⌉), min(0, ⌊(1 − u)/2⌋)]}`,
//! one or two terms depending on the parity of `u`. Every output element
//! then computes divisions, and lanes of a vector would run different trip
//! counts, so the loop stays scalar. Split by the residue `u = 2·a + p`,
//! each phase `p` has bounds without division (`⌈(−1 − 2a − p)/2⌉ = −a +
//! ⌈(−1 − p)/2⌉`): PyTorch's "stride 2 as four phases", found on the
//! kernel rather than on the op.
//!
//! A phase's sums still slide with `a` (`z ∈ [−a − 1, −a]`): a window of
//! constant length whose position follows the output. Such a sum is
//! *shifted* (`z = z' − a`), so that its range is constant and its reads
//! walk the output's index instead (`dy[−z] = dy[a − z']`); the clamps at
//! the image's borders then depend on `a`, and `super::peel` takes them off
//! the interior like any other.
//!
//! Neither rewrite changes an element's operations or their order: each
//! output is still computed by one loop iteration running the same sums in
//! the same order, so f32 and f64 kernels give the same bits as before
//! (the reference interpreter's, for f64). Runs after guards become
//! bounds and before vectors (`super::passes`). Must not emit code.

use crate::kernel::{Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Reg, Stmt};
use crate::symbolic::expr::{BinaryOp, CmpOp, ReduceOp};

/// The largest residue count split (a stride of at most 4 in each
/// dimension: 16 phases for a 2-D stride of 4).
pub(crate) const MAX_PHASES: i64 = 4;

/// `k` with its output loops split by residue and their sliding sums
/// shifted (see the module documentation).
///
/// ```
/// use tenjin::planner::residues::split_residues;
/// use tenjin::symbolic::IndexFn;
/// // The input gradient of a stride-2 read: one or two terms by parity.
/// let f = IndexFn::parse_with_sizes(
///     "dx[i; u] = sum{z}_(max [-7; (-1 + -u)/2])^(min [0; (1 + -u)/2]) (dy[i; -z])",
///     &[("dy", &[2, 8][..])],
///     &[("u", 16)],
/// )?;
/// let before = tenjin::kernel::lower(&f)?.to_string();
/// let after = split_residues(tenjin::kernel::lower(&f)?).to_string();
/// assert!(before.contains("/2"), "{before}");
/// assert!(!after.contains("/2") && after.matches("for v").count() == 3, "{after}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn split_residues(mut k: Kernel) -> Kernel {
    let extent = i64::try_from(k.extent).unwrap_or(i64::MAX);
    k.body = split_stmts(std::mem::take(&mut k.body), extent);
    collapse_point_sums(&mut k.body, &mut k.num_regs);
    k
}

/// Sums whose range is one point or none at every iteration (both bounds
/// one form, differing by a constant: what a phase leaves of `Σ_{a ∈
/// [⌈(u − p)/s⌉, ⌊(u − p)/s⌋]}` once `u = s·a′ + q`), as their term
/// (`0 + x`, the loop's one addition) or `0`; `regs` counts the kernel's
/// registers, for the zeros.
fn collapse_point_sums(stmts: &mut Vec<Stmt>, regs: &mut u32) {
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in std::mem::take(stmts) {
        match &mut s {
            Stmt::Reduce { body, .. } | Stmt::For(body) => {
                collapse_point_sums(&mut body.body, regs)
            }
            Stmt::If {
                then, otherwise, ..
            } => {
                collapse_point_sums(then, regs);
                collapse_point_sums(otherwise, regs);
            }
            _ => {}
        }
        let Stmt::Reduce {
            op: ReduceOp::Sum,
            value,
            result,
            body,
            wide: false,
        } = s
        else {
            out.push(s);
            continue;
        };
        let trips = match (&body.lower[..], &body.upper[..]) {
            ([lo], [hi]) if lo.den == 1 && hi.den == 1 => hi
                .num
                .checked_sub(&lo.num)
                .filter(|d| d.terms.is_empty())
                .and_then(|d| d.constant.checked_add(1)),
            _ => None,
        };
        // The body at its one point (`None` when a form overflows).
        let at = (trips == Some(1))
            .then(|| {
                let mut at = body.body.clone();
                substitute_stmts(&mut at, body.var, &body.lower[0].num).map(|()| at)
            })
            .flatten();
        if let Some(at) = at {
            let zero = Reg(*regs);
            *regs += 1;
            out.push(Stmt::Let(zero, Expr::Const(0.0)));
            out.extend(at);
            out.push(Stmt::Let(result, Expr::Binary(BinaryOp::Add, zero, value)));
        } else if trips.is_some_and(|t| t <= 0) {
            out.push(Stmt::Let(result, Expr::Const(0.0)));
        } else {
            out.push(Stmt::Reduce {
                op: ReduceOp::Sum,
                value,
                result,
                body,
                wide: false,
            });
        }
    }
    *stmts = out;
}

/// `stmts` with their output loops split; `extent` is the parallel loop's
/// trip count (its bounds are the call's `[start, end)`).
fn split_stmts(stmts: Vec<Stmt>, extent: i64) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::For(mut l) => {
                // Every phase, or the loop whole. (The parallel loop too:
                // each call's `[start, end)` is split into its phases.)
                let split = phases(&l).and_then(|d| {
                    (0..d)
                        .map(|p| phase(&l, d, p, extent))
                        .collect::<Option<Vec<_>>>()
                });
                match split {
                    Some(loops) => out.extend(loops.into_iter().map(Stmt::For)),
                    None => {
                        l.body = split_stmts(std::mem::take(&mut l.body), extent);
                        out.push(Stmt::For(l));
                    }
                }
            }
            branch @ Stmt::If { .. } => out.push(branch.map_branches(|b| split_stmts(b, extent))),
            other => out.push(other),
        }
    }
    out
}

/// The residue count that takes every division by the loop's variable out
/// of its body: the one divisor of its bounds and divisibility guards that
/// do not divide the variable's coefficient; `None` when there is none, or
/// several, or one above [`MAX_PHASES`].
fn phases(l: &Loop) -> Option<i64> {
    let v = l.var;
    let mut divisors: Vec<i64> = Vec::new();
    let mut note = |lin: &Lin, den: i64| {
        if den > 1 && lin.coeff(v) % den != 0 && !divisors.contains(&den) {
            divisors.push(den);
        }
    };
    visit_forms(&l.body, &mut |form| match form {
        Form::Bound(b) => note(&b.num, b.den),
        Form::Divisible(lin, m) => note(lin, m),
    });
    match divisors[..] {
        [d] if d <= MAX_PHASES => Some(d),
        _ => None,
    }
}

/// The iterations `v = d·v' + p` of `l` as a loop over `v'`, its divisions
/// simplified and, in an innermost output loop, its sliding sums shifted;
/// `None` when a form overflows (the caller then keeps the loop whole).
fn phase(l: &Loop, d: i64, p: i64, extent: i64) -> Option<Loop> {
    let v = l.var;
    let value = Lin {
        constant: p,
        terms: vec![(v, d)],
    };
    // v ≥ ⌈n / q⌉ ⟺ v' ≥ ⌈(n − p·q) / (q·d)⌉, and likewise for ⌊⌋.
    let bound = |b: &Bound| -> Option<Bound> {
        Some(Bound {
            num: b.num.checked_sub(&Lin::constant(p.checked_mul(b.den)?))?,
            den: b.den.checked_mul(d)?,
        })
    };
    let mut body = l.body.clone();
    substitute_stmts(&mut body, v, &value)?;
    simplify_stmts(&mut body);
    let mut phase = Loop {
        var: v,
        lower: l
            .lower
            .iter()
            .map(|b| Some(exact(&bound(b)?, true)))
            .collect::<Option<_>>()?,
        upper: l
            .upper
            .iter()
            .map(|b| Some(exact(&bound(b)?, false)))
            .collect::<Option<_>>()?,
        body,
        max_trips: (l.max_trips as i64).div_euclid(d) as u64 + 1,
        vector: false,
    };
    let innermost = !phase.body.iter().any(|s| matches!(s, Stmt::For(_)));
    if innermost {
        // The phase's range: its constant bounds, or the parallel loop's
        // `[0, extent)` in steps of `d` from `p`.
        let range = phase.constant_range().or_else(|| {
            l.is_parallel()
                .then(|| (-(-p).div_euclid(d), (extent - 1 - p).div_euclid(d)))
        });
        shift_sliding_sums(&mut phase.body, v, range);
    }
    phase.body = split_stmts(phase.body, extent);
    Some(phase)
}

/// A form of a loop body that may divide by the loop variable.
enum Form<'a> {
    Bound(&'a Bound),
    Divisible(&'a Lin, i64),
}

fn visit_forms(stmts: &[Stmt], f: &mut dyn FnMut(Form)) {
    for s in stmts {
        match s {
            Stmt::Reduce { body, .. } | Stmt::For(body) => {
                for b in body.lower.iter().chain(&body.upper) {
                    f(Form::Bound(b));
                }
                visit_forms(&body.body, f);
            }
            Stmt::If {
                cond,
                then,
                otherwise,
                ..
            } => {
                if let Cond::Divisible(lin, m) = cond {
                    f(Form::Divisible(lin, *m));
                }
                visit_forms(then, f);
                visit_forms(otherwise, f);
            }
            _ => {}
        }
    }
}

/// `l` with `v` replaced by `with`.
fn substitute(l: &Lin, v: IVar, with: &Lin) -> Option<Lin> {
    let c = l.coeff(v);
    if c == 0 {
        return Some(l.clone());
    }
    l.without(v).checked_add(&with.checked_scale(c)?)
}

/// Every form of `stmts` with `v` replaced by `with`.
fn substitute_stmts(stmts: &mut [Stmt], v: IVar, with: &Lin) -> Option<()> {
    let sub = |l: &mut Lin| -> Option<()> {
        *l = substitute(l, v, with)?;
        Some(())
    };
    for s in stmts {
        match s {
            Stmt::Let(_, e) => match e {
                Expr::Load { offset: l, .. } | Expr::Index(l) => sub(l)?,
                Expr::Random { counter, .. } => sub(counter)?,
                _ => {}
            },
            Stmt::Store { offset, .. } => sub(offset)?,
            Stmt::Reduce { body, .. } | Stmt::For(body) => {
                for b in body.lower.iter_mut().chain(&mut body.upper) {
                    sub(&mut b.num)?;
                }
                substitute_stmts(&mut body.body, v, with)?;
            }
            Stmt::If {
                cond,
                then,
                otherwise,
                ..
            } => {
                match cond {
                    Cond::Index(l, _) | Cond::Divisible(l, _) => sub(l)?,
                    Cond::Value(..) => {}
                }
                substitute_stmts(then, v, with)?;
                substitute_stmts(otherwise, v, with)?;
            }
        }
    }
    Some(())
}

/// Bounds whose variables' coefficients the denominator divides, as
/// integer forms (`⌈(2a − 3)/2⌉ = a − 1`), and divisibility guards that no
/// longer depend on a variable, as guards that always or never hold.
fn simplify_stmts(stmts: &mut [Stmt]) {
    for s in stmts {
        match s {
            Stmt::Reduce { body, .. } | Stmt::For(body) => {
                for b in &mut body.lower {
                    *b = exact(b, true);
                }
                for b in &mut body.upper {
                    *b = exact(b, false);
                }
                simplify_stmts(&mut body.body);
            }
            Stmt::If {
                cond,
                then,
                otherwise,
                ..
            } => {
                // The rest of the form is a multiple of `m` at every
                // point: divisible exactly when the constant is.
                if let Cond::Divisible(l, m) = cond {
                    if l.terms.iter().all(|&(_, c)| c % *m == 0) {
                        let holds = l.constant.rem_euclid(*m) == 0;
                        *cond = Cond::Index(Lin::constant(if holds { 0 } else { -1 }), CmpOp::Ge);
                    }
                }
                simplify_stmts(then);
                simplify_stmts(otherwise);
            }
            _ => {}
        }
    }
}

/// `b` as an integer form when its denominator divides every coefficient
/// (`ceil` for a lower bound, `floor` for an upper one).
fn exact(b: &Bound, lower: bool) -> Bound {
    if b.den == 1 || b.num.terms.iter().any(|&(_, c)| c % b.den != 0) {
        return b.clone();
    }
    let c = b.num.constant;
    let constant = if lower {
        -(-c).div_euclid(b.den)
    } else {
        c.div_euclid(b.den)
    };
    Bound {
        num: Lin {
            constant,
            terms: b.num.terms.iter().map(|&(v, k)| (v, k / b.den)).collect(),
        },
        den: 1,
    }
}

/// Sums directly in the body of the loop over `v` (range `range`) whose
/// range slides with `v`, shifted to a constant range (see the module
/// documentation).
fn shift_sliding_sums(stmts: &mut [Stmt], v: IVar, range: Option<(i64, i64)>) {
    for s in stmts {
        match s {
            Stmt::Reduce { body, .. } => {
                if let Some(c) = sliding(body, v, range) {
                    let w = body.var;
                    // w = w' + c·v
                    let with = Lin {
                        constant: 0,
                        terms: {
                            let mut t = vec![(w, 1), (v, c)];
                            t.sort();
                            t
                        },
                    };
                    let shifted = (|| {
                        let mut l = body.clone();
                        for b in l.lower.iter_mut().chain(&mut l.upper) {
                            b.num = b.num.checked_sub(&Lin {
                                constant: 0,
                                terms: vec![(v, c.checked_mul(b.den)?)],
                            })?;
                        }
                        substitute_stmts(&mut l.body, w, &with)?;
                        Some(l)
                    })();
                    if let Some(l) = shifted {
                        *body = l;
                    }
                }
                shift_sliding_sums(&mut body.body, v, range);
            }
            Stmt::If {
                then, otherwise, ..
            } => {
                shift_sliding_sums(then, v, range);
                shift_sliding_sums(otherwise, v, range);
            }
            _ => {}
        }
    }
}

/// `Some(c)` when the sum over `l` slides with `v` at rate `c`: at the
/// middle of `v`'s range, both its lower and its upper bound are forms
/// `c·v + r` (integer, the same `c ≠ 0`) rather than the constants beside
/// them. (A sum whose constants bind in the middle, the input gradient of
/// a convolution at stride 1, is left to `super::peel` as it is.)
fn sliding(l: &Loop, v: IVar, range: Option<(i64, i64)>) -> Option<i64> {
    let (lo, hi) = range?;
    let mid = lo + (hi - lo) / 2;
    let mut rate = None;
    for (bounds, lower) in [(&l.lower, true), (&l.upper, false)] {
        // The bound that binds at the middle (others' variables at 0).
        let at = |b: &Bound| {
            let n = b.num.eval(&|x| if x == v { mid } else { 0 });
            if lower {
                -(-n).div_euclid(b.den)
            } else {
                n.div_euclid(b.den)
            }
        };
        let binding = if lower {
            bounds.iter().max_by_key(|b| at(b))?
        } else {
            bounds.iter().min_by_key(|b| at(b))?
        };
        let c = binding.num.coeff(v);
        if c == 0 || binding.den != 1 || rate.is_some_and(|r| r != c) {
            return None;
        }
        rate = Some(c);
    }
    rate
}
