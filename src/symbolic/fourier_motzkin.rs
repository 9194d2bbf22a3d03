//! Fourier–Motzkin elimination with symbolic right-hand sides (Alg. 3).
//!
//! Owns [`eliminate`], which turns a system of integer rows `form ≥ 0` into
//! nested loop bounds ([`Elimination`]: per variable, lower and upper bounds
//! in the parameters and the variables eliminated later, plus conditions on
//! the parameters alone), and the two ways to use them: [`enumerate`] (the
//! nested loops) and [`has_integer_point`] (exact integer feasibility). It
//! builds on [`super::affine`] and must not know about expressions, index
//! functions, tensors or devices.
//!
//! Arithmetic is integral throughout: two rows are combined with positive
//! integer multipliers, and every row is divided by the gcd of its
//! coefficients with the constant rounded down (Chvátal–Gomory tightening,
//! valid because every variable and parameter is an integer). Elimination
//! is exact over the reals and loses no integer point; the nested bounds
//! enumerate exactly the integer points of the system.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use num_integer::Integer;
use std::collections::BTreeSet;

/// The bounds of one eliminated variable: `var ≥ ⌈l⌉` for every `l` in
/// `lower` and `var ≤ ⌊u⌋` for every `u` in `upper`. Each bound mentions
/// only parameters and variables that come later in the elimination order.
/// An empty list means unbounded on that side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarBounds {
    pub var: VarId,
    pub lower: Vec<RatAffine>,
    pub upper: Vec<RatAffine>,
}

/// The result of [`eliminate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elimination {
    /// In the order given; `bounds[0]` is the first eliminated variable (the
    /// innermost loop).
    pub bounds: Vec<VarBounds>,
    /// Rows `≥ 0` over the parameters alone, after pruning.
    pub conditions: Vec<Affine>,
    /// A constant row `< 0` appeared: no point for any parameter value.
    pub infeasible: bool,
}

/// Dense rows over a fixed column order (the variables to eliminate, then
/// the parameters), each `width` coefficients followed by the constant,
/// with the set of input rows each one was combined from.
struct Rows {
    width: usize,
    data: Vec<i64>,
    history: Vec<u128>,
}

impl Rows {
    fn len(&self) -> usize {
        self.data.len() / (self.width + 1)
    }

    fn row(&self, i: usize) -> &[i64] {
        &self.data[i * (self.width + 1)..(i + 1) * (self.width + 1)]
    }
}

/// Appends `row` (coefficients and constant, as `i128`) divided by the gcd
/// of its coefficients with the constant rounded down. Returns `false`
/// for a constant row, which is not appended.
fn push_tightened(out: &mut Vec<i64>, row: &[i128]) -> Result<bool, Overflow> {
    let (coeffs, constant) = row.split_at(row.len() - 1);
    let g = coeffs.iter().fold(0u128, |g, &c| g.gcd(&c.unsigned_abs()));
    if g == 0 {
        return Ok(false);
    }
    let g = i128::try_from(g).map_err(|_| Overflow)?;
    let fit = |x: i128| i64::try_from(x).map_err(|_| Overflow);
    for &c in coeffs {
        out.push(fit(c / g)?);
    }
    out.push(fit(Integer::div_floor(&constant[0], &g))?);
    Ok(true)
}

/// Keeps one row per coefficient vector, the one with the smallest
/// constant (the tightest); also drops exact duplicates.
fn prune(rows: Rows) -> Rows {
    let w = rows.width;
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    idx.sort_unstable_by(|&a, &b| rows.row(a).cmp(rows.row(b)));
    let mut data = Vec::with_capacity(rows.data.len());
    let mut history = Vec::with_capacity(rows.history.len());
    let mut last: Option<usize> = None;
    for i in idx {
        let r = rows.row(i);
        if last.is_some_and(|l| rows.row(l)[..w] == r[..w]) {
            continue; // sorted: the kept one has the smaller constant
        }
        data.extend_from_slice(r);
        history.push(rows.history[i]);
        last = Some(i);
    }
    Rows {
        width: w,
        data,
        history,
    }
}

/// Eliminates the variables of `order` (first to last) from the rows
/// `row ≥ 0`; every other variable is a parameter (Alg. 3).
///
/// For each variable, the rows where it has a positive coefficient give its
/// lower bounds and those with a negative one its upper bounds; every
/// positive row is combined with every negative one to cancel it. Rows are
/// tightened by the gcd of their coefficients, constant rows are checked
/// (`< 0` sets `infeasible`) and dropped, and among rows with the same
/// coefficients only the tightest is kept, which also prunes duplicate
/// bounds. Combinations of more than `s + 1` input rows after `s`
/// eliminations are implied by the others and skipped (Chernikov's rule),
/// which keeps the row count from exploding. A variable bounded on one side
/// only gets an empty list on the other and its rows are dropped without
/// combination.
///
/// ```
/// use tenjin::symbolic::fourier_motzkin::eliminate;
/// use tenjin::symbolic::{Affine, VarId};
/// let (x, y, n) = (VarId(0), VarId(1), VarId(2));
/// let v = |v| Affine::var(v);
/// // 0 ≤ x ≤ y ≤ n − 1, eliminating x then y; n is a parameter.
/// let rows = [v(x), v(y).sub(&v(x)).unwrap(), v(n).sub(&v(y)).unwrap().add_const(-1).unwrap()];
/// let e = eliminate(&rows, &[x, y]).unwrap();
/// assert_eq!((e.bounds[0].lower.len(), e.bounds[0].upper.len()), (1, 1)); // 0 ≤ x ≤ y
/// assert_eq!(e.conditions, vec![v(n).add_const(-1).unwrap()]); // n ≥ 1
/// assert!(!e.infeasible);
/// ```
pub fn eliminate(rows: &[Affine], order: &[VarId]) -> Result<Elimination, Overflow> {
    let params: Vec<VarId> = rows
        .iter()
        .flat_map(Affine::vars)
        .filter(|v| !order.contains(v))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let cols: Vec<VarId> = order.iter().chain(&params).copied().collect();
    let width = cols.len();
    let column = |v: VarId| cols.iter().position(|&c| c == v);
    let mut infeasible = false;
    let mut data = Vec::with_capacity(rows.len() * (width + 1));
    let mut history = Vec::with_capacity(rows.len());
    let mut dense = vec![0i128; width + 1];
    // Chernikov's rule needs one bit per input row.
    let chernikov = rows.len() <= 128;
    for (i, r) in rows.iter().enumerate() {
        dense.iter_mut().for_each(|x| *x = 0);
        for &(v, c) in &r.terms {
            if let Some(k) = column(v) {
                dense[k] = i128::from(c);
            }
        }
        dense[width] = i128::from(r.constant);
        if push_tightened(&mut data, &dense)? {
            history.push(if chernikov { 1u128 << i } else { 0 });
        } else if r.constant < 0 {
            infeasible = true;
        }
    }
    let mut cur = prune(Rows {
        width,
        data,
        history,
    });
    let mut bounds = Vec::with_capacity(order.len());
    for (k, &var) in order.iter().enumerate() {
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        let (mut pos, mut neg) = (Vec::new(), Vec::new());
        let mut next = Vec::with_capacity(cur.data.len());
        let mut next_history = Vec::with_capacity(cur.len());
        for i in 0..cur.len() {
            let r = cur.row(i);
            match r[k].signum() {
                0 => {
                    next.extend_from_slice(r);
                    next_history.push(cur.history[i]);
                }
                1 => {
                    pos.push(i);
                    lower.push(bound(r, k, &cols, true)?);
                }
                _ => {
                    neg.push(i);
                    upper.push(bound(r, k, &cols, false)?);
                }
            }
        }
        for &p in &pos {
            for &n in &neg {
                // Chernikov: after k + 1 eliminations a row combined from
                // more than k + 2 input rows is implied by the others.
                let h = cur.history[p] | cur.history[n];
                if chernikov && h.count_ones() as usize > k + 2 {
                    continue;
                }
                let (rp, rn) = (cur.row(p), cur.row(n));
                let (a, b) = (i128::from(rp[k]), -i128::from(rn[k]));
                let g = a.gcd(&b);
                let (mp, mn) = (b / g, a / g);
                for (x, (&y, &z)) in dense.iter_mut().zip(rp.iter().zip(rn)) {
                    let (y, z) = (mp * i128::from(y), mn * i128::from(z));
                    *x = y.checked_add(z).ok_or(Overflow)?;
                }
                if push_tightened(&mut next, &dense)? {
                    next_history.push(h);
                } else if dense[width] < 0 {
                    infeasible = true;
                }
            }
        }
        cur = prune(Rows {
            width,
            data: next,
            history: next_history,
        });
        dedup_bounds(&mut lower, true);
        dedup_bounds(&mut upper, false);
        bounds.push(VarBounds { var, lower, upper });
    }
    let conditions = (0..cur.len())
        .map(|i| dense_to_affine(cur.row(i), &cols, usize::MAX, 1))
        .collect::<Result<_, _>>()?;
    Ok(Elimination {
        bounds,
        conditions,
        infeasible,
    })
}

/// The affine form `Σ sign·row_c·col_c + sign·constant` over the columns
/// other than `skip`.
fn dense_to_affine(
    row: &[i64],
    cols: &[VarId],
    skip: usize,
    sign: i64,
) -> Result<Affine, Overflow> {
    let (coeffs, constant) = row.split_at(cols.len());
    let terms = coeffs
        .iter()
        .zip(cols)
        .enumerate()
        .filter(|&(c, (&x, _))| c != skip && x != 0)
        .map(|(_, (&x, &v))| Ok((v, x.checked_mul(sign).ok_or(Overflow)?)))
        .collect::<Result<Vec<_>, Overflow>>()?;
    Affine::from_terms(terms, constant[0].checked_mul(sign).ok_or(Overflow)?)
}

/// The bound on column `k` given by row `a·x + rest ≥ 0`: `x ≥ −rest/a`
/// for `a > 0` (lower), `x ≤ rest/|a|` for `a < 0`.
fn bound(row: &[i64], k: usize, cols: &[VarId], lower: bool) -> Result<RatAffine, Overflow> {
    let rest = dense_to_affine(row, cols, k, if lower { -1 } else { 1 })?;
    // `i64::MIN` has no magnitude in `i64`; the gcd normalisation needs one.
    if rest.constant == i64::MIN || rest.terms.iter().any(|&(_, c)| c == i64::MIN) {
        return Err(Overflow);
    }
    RatAffine::new(rest, row[k].checked_abs().ok_or(Overflow)?)
}

/// Drops duplicate bounds and bounds that differ from another only by a
/// weaker constant (a smaller one for lower bounds, a larger one for upper).
fn dedup_bounds(bounds: &mut Vec<RatAffine>, lower: bool) {
    bounds.sort_by(|a, b| {
        let key = (&a.num.terms, a.den).cmp(&(&b.num.terms, b.den));
        let c = a.num.constant.cmp(&b.num.constant);
        key.then(if lower { c.reverse() } else { c })
    });
    bounds.dedup_by(|later, kept| later.num.terms == kept.num.terms && later.den == kept.den);
}

/// A bound compiled for evaluation: `(constant + Σ coeff·value[pos]) / den`
/// with the parameters already folded into the constant.
struct Compiled {
    constant: i128,
    terms: Vec<(usize, i128)>,
    den: i128,
}

/// Per variable (in elimination order): lower bounds, upper bounds.
type Loops = Vec<(Vec<Compiled>, Vec<Compiled>)>;

/// The loops of `elim` at fixed parameters, or `None` when a condition fails
/// or the system is infeasible.
fn compile(elim: &Elimination, params: &dyn Fn(VarId) -> i64) -> Result<Option<Loops>, Overflow> {
    if elim.infeasible {
        return Ok(None);
    }
    for c in &elim.conditions {
        if c.eval(params)? < 0 {
            return Ok(None);
        }
    }
    let position = |v: VarId| elim.bounds.iter().position(|b| b.var == v);
    let compile_one = |r: &RatAffine| -> Result<Compiled, Overflow> {
        let mut constant = i128::from(r.num.constant);
        let mut terms = Vec::new();
        for &(v, c) in &r.num.terms {
            match position(v) {
                Some(p) => terms.push((p, i128::from(c))),
                None => {
                    let t = i128::from(c) * i128::from(params(v));
                    constant = constant.checked_add(t).ok_or(Overflow)?;
                }
            }
        }
        Ok(Compiled {
            constant,
            terms,
            den: i128::from(r.den),
        })
    };
    let loops = elim
        .bounds
        .iter()
        .map(|b| {
            let lo = b.lower.iter().map(compile_one).collect::<Result<_, _>>()?;
            let hi = b.upper.iter().map(compile_one).collect::<Result<_, _>>()?;
            Ok((lo, hi))
        })
        .collect::<Result<_, Overflow>>()?;
    Ok(Some(loops))
}

/// `⌈max lower⌉` and `⌊min upper⌋` of variable `k` given the values of the
/// later variables (`None` on a side without bounds).
fn range(loops: &Loops, k: usize, values: &[i64]) -> Result<(Option<i64>, Option<i64>), Overflow> {
    let eval = |c: &Compiled, up: bool| -> Result<i64, Overflow> {
        let mut num = c.constant;
        for &(p, coeff) in &c.terms {
            num = num
                .checked_add(coeff * i128::from(values[p]))
                .ok_or(Overflow)?;
        }
        let q = if up {
            Integer::div_floor(&num, &c.den)
        } else {
            Integer::div_ceil(&num, &c.den)
        };
        i64::try_from(q).map_err(|_| Overflow)
    };
    let (lo, hi) = &loops[k];
    let mut l: Option<i64> = None;
    for c in lo {
        let v = eval(c, false)?;
        l = Some(l.map_or(v, |l| l.max(v)));
    }
    let mut h: Option<i64> = None;
    for c in hi {
        let v = eval(c, true)?;
        h = Some(h.map_or(v, |h| h.min(v)));
    }
    Ok((l, h))
}

/// How [`enumerate`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enumeration {
    /// Every integer point was visited.
    Complete,
    /// Nothing was visited: this variable has no lower or no upper bound,
    /// so the points cannot be listed.
    Unbounded(VarId),
}

/// Visits every integer point of the eliminated system at the given
/// parameter values, as nested loops from the last variable of the order
/// (outermost) to the first, each over `⌈max lower⌉..=⌊min upper⌋`. The
/// slice holds the values in the order given to [`eliminate`]. Nothing is
/// visited when the system is infeasible or a condition fails; an unbounded
/// variable is reported as [`Enumeration::Unbounded`] before anything is
/// visited.
///
/// ```
/// use tenjin::symbolic::fourier_motzkin::{eliminate, enumerate, Enumeration};
/// use tenjin::symbolic::{Affine, VarId};
/// let (x, y, n) = (VarId(0), VarId(1), VarId(2));
/// let v = |v| Affine::var(v);
/// // 0 ≤ x ≤ y ≤ n − 1 with n = 3: six points.
/// let rows = [v(x), v(y).sub(&v(x)).unwrap(), v(n).sub(&v(y)).unwrap().add_const(-1).unwrap()];
/// let e = eliminate(&rows, &[x, y]).unwrap();
/// let mut points = Vec::new();
/// let end = enumerate(&e, &|_| 3, &mut |p| points.push(p.to_vec())).unwrap();
/// assert_eq!(end, Enumeration::Complete);
/// assert_eq!(points, vec![vec![0, 0], vec![0, 1], vec![1, 1], vec![0, 2], vec![1, 2], vec![2, 2]]);
/// ```
pub fn enumerate(
    elim: &Elimination,
    params: &dyn Fn(VarId) -> i64,
    visit: &mut dyn FnMut(&[i64]),
) -> Result<Enumeration, Overflow> {
    let Some(loops) = compile(elim, params)? else {
        return Ok(Enumeration::Complete);
    };
    if let Some(b) = elim
        .bounds
        .iter()
        .find(|b| b.lower.is_empty() || b.upper.is_empty())
    {
        return Ok(Enumeration::Unbounded(b.var));
    }
    let mut values = vec![0i64; loops.len()];
    fn rec(
        loops: &Loops,
        k: usize,
        values: &mut [i64],
        visit: &mut dyn FnMut(&[i64]),
    ) -> Result<(), Overflow> {
        let (Some(lo), Some(hi)) = range(loops, k, values)? else {
            return Ok(()); // unreachable: checked above
        };
        for x in lo..=hi {
            values[k] = x;
            if k == 0 {
                visit(values);
            } else {
                rec(loops, k - 1, values, visit)?;
            }
        }
        Ok(())
    }
    if !loops.is_empty() {
        rec(&loops, loops.len() - 1, &mut values, visit)?;
    } else {
        visit(&values);
    }
    Ok(Enumeration::Complete)
}

/// The answer of [`integer_feasibility`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feasibility {
    Feasible,
    Infeasible,
    /// The search reached this variable, which has no lower or no upper
    /// bound while later-eliminated variables depend on it; the system has
    /// real solutions but integer feasibility was not decided.
    Undecided(VarId),
}

/// Exact integer feasibility of the rows `row ≥ 0` at the given parameter
/// values: eliminates `order`, then searches depth-first through the
/// nested bounds for one integer point (Fourier–Motzkin is exact over the
/// reals; the search makes it exact over the integers). A variable bounded
/// on one side only is decided when nothing eliminated before it depends
/// on it (any value on the bounded side then works), and reported as
/// [`Feasibility::Undecided`] otherwise; bounded systems are always decided.
pub fn integer_feasibility(
    rows: &[Affine],
    order: &[VarId],
    params: &dyn Fn(VarId) -> i64,
) -> Result<Feasibility, Overflow> {
    let elim = eliminate(rows, order)?;
    let Some(loops) = compile(&elim, params)? else {
        return Ok(Feasibility::Infeasible);
    };
    if loops.is_empty() {
        return Ok(Feasibility::Feasible);
    }
    // needed[k]: some variable eliminated before k has a bound mentioning k.
    let mut needed = vec![false; loops.len()];
    for (lo, hi) in &loops {
        for c in lo.iter().chain(hi) {
            for &(p, _) in &c.terms {
                needed[p] = true;
            }
        }
    }
    fn dfs(
        loops: &Loops,
        needed: &[bool],
        vars: &[VarId],
        k: usize,
        values: &mut [i64],
    ) -> Result<Feasibility, Overflow> {
        let candidates: Box<dyn Iterator<Item = i64>> = match range(loops, k, values)? {
            (Some(lo), Some(hi)) => Box::new(lo..=hi),
            (lo, hi) if !needed[k] => Box::new(std::iter::once(lo.or(hi).unwrap_or(0))),
            _ => return Ok(Feasibility::Undecided(vars[k])),
        };
        for x in candidates {
            values[k] = x;
            if k == 0 {
                return Ok(Feasibility::Feasible);
            }
            match dfs(loops, needed, vars, k - 1, values)? {
                Feasibility::Infeasible => {}
                other => return Ok(other),
            }
        }
        Ok(Feasibility::Infeasible)
    }
    let vars: Vec<VarId> = elim.bounds.iter().map(|b| b.var).collect();
    let mut values = vec![0i64; loops.len()];
    dfs(&loops, &needed, &vars, loops.len() - 1, &mut values)
}

/// Whether the rows `row ≥ 0` have an integer point at the given parameter
/// values ([`integer_feasibility`]): exact for bounded systems; an
/// undecided unbounded search answers `true` (a point may exist).
///
/// ```
/// use tenjin::symbolic::fourier_motzkin::has_integer_point;
/// use tenjin::symbolic::{Affine, VarId};
/// let (x, y) = (VarId(0), VarId(1));
/// // 1 ≤ 2x − 2y ≤ 1 has real solutions but no integer one.
/// let d = Affine::from_terms([(x, 2), (y, -2)], 0).unwrap();
/// let rows = [d.add_const(-1).unwrap(), d.scale(-1).unwrap().add_const(1).unwrap(), Affine::var(y)];
/// assert!(!has_integer_point(&rows, &[x, y], &|_| 0).unwrap());
/// ```
pub fn has_integer_point(
    rows: &[Affine],
    order: &[VarId],
    params: &dyn Fn(VarId) -> i64,
) -> Result<bool, Overflow> {
    Ok(integer_feasibility(rows, order, params)? != Feasibility::Infeasible)
}

#[cfg(test)]
mod tests;
