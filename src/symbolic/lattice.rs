//! Integer lattices: solving `A·α = β` over the integers in a readable basis.
//!
//! Owns [`solve_lattice`] and its [`LatticeSolution`] (§4.1 of Urban & van
//! der Smagt: cokernel condition, divisibility of `U·β`, particular
//! solution and kernel, the kernel in a Hermite echelon form whose pivots
//! sit at the latest coordinates), and the lattice-basis reduction behind it:
//! LLL and Babai's nearest plane, which [`super::intlinalg`] uses to shrink
//! Smith transforms ([`SmithTransforms`]). It must not know about affine
//! forms, inequalities, index functions or devices.

use super::affine::Overflow;
use super::intlinalg::{smith_normal_form, IntMatrix};
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};

/// The integer solutions of `A·α = β` (`A` is `N×M`, `β ∈ Z^N` symbolic).
///
/// `A·α = β` has a solution iff `C·β = 0` and every `w_i = (u_i·β)/s_i` is an
/// integer; the solutions are then exactly `α = particular·w + kernel·z`
/// for all `z ∈ Z^(M−R)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatticeSolution {
    pub rank: usize,
    /// C ((N−R)×N), in row Hermite form: `A·α = β` is solvable only if
    /// `C·β = 0`. The first non-zero entry of each row is positive.
    pub cokernel: IntMatrix,
    /// The `R` divisors `s_i` (the Smith diagonal).
    pub divisors: Vec<i64>,
    /// `R×N`: `w_i = (u_i·β)/s_i` must be an integer. Reduced modulo the
    /// cokernel (valid because `C·β = 0` is required anyway); the first
    /// non-zero entry of each row is positive.
    pub u_rows: IntMatrix,
    /// `M×R`: reduced modulo the kernel at its pivot coordinates (into
    /// `[0, pivot)`, so zero there when the pivot is 1).
    pub particular: IntMatrix,
    /// `M×(M−R)`: column `j` is zero after its pivot coordinate, positive
    /// at it, columns ordered by pivot coordinate ascending, and entries of
    /// other columns at a pivot coordinate reduced into `[0, pivot)`.
    pub kernel: IntMatrix,
}

impl LatticeSolution {
    /// The kernel column's pivot coordinate (its last non-zero entry).
    pub fn pivot(&self, col: usize) -> Option<usize> {
        (0..self.kernel.rows())
            .rev()
            .find(|&r| self.kernel.get(r, col) != 0)
    }

    /// `particular·w` for a concrete `β`, or `None` when `A·α = β` has no
    /// integer solution.
    pub fn particular_solution(&self, beta: &[i64]) -> Result<Option<Vec<i64>>, Overflow> {
        let dot = |row: &[i64]| -> Result<i128, Overflow> {
            row.iter().zip(beta).try_fold(0i128, |acc, (&a, &b)| {
                acc.checked_add(i128::from(a) * i128::from(b))
                    .ok_or(Overflow)
            })
        };
        for r in 0..self.cokernel.rows() {
            if dot(self.cokernel.row(r))? != 0 {
                return Ok(None);
            }
        }
        let mut w = Vec::with_capacity(self.rank);
        for (i, &s) in self.divisors.iter().enumerate() {
            let x = dot(self.u_rows.row(i))?;
            if x % i128::from(s) != 0 {
                return Ok(None);
            }
            w.push(x / i128::from(s));
        }
        (0..self.particular.rows())
            .map(|r| {
                let v = w.iter().enumerate().try_fold(0i128, |acc, (i, &wi)| {
                    acc.checked_add(i128::from(self.particular.get(r, i)).checked_mul(wi)?)
                });
                v.and_then(|v| i64::try_from(v).ok()).ok_or(Overflow)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// Solves `A·α = β` symbolically in `β` (§4.1) from the Smith normal form,
/// then rewrites the basis for readability with unimodular changes only:
/// the cokernel in row Hermite form, the kernel in a column echelon form
/// with pivots at the latest coordinates possible, the particular part
/// reduced modulo the kernel (a change of variables `z' = z + T·w`) and
/// `u_rows` reduced modulo the cokernel.
///
/// ```
/// use tenjin::symbolic::intlinalg::IntMatrix;
/// use tenjin::symbolic::lattice::solve_lattice;
/// // The access d[i+k] over (i, j, k): α = (β − z1, z0, z1).
/// let sol = solve_lattice(&IntMatrix::from_rows(&[vec![1, 0, 1]])).unwrap();
/// assert_eq!(sol.kernel, IntMatrix::from_rows(&[vec![0, -1], vec![1, 0], vec![0, 1]]));
/// assert_eq!(sol.particular, IntMatrix::from_rows(&[vec![1], vec![0], vec![0]]));
/// assert_eq!((sol.divisors.clone(), sol.u_rows.clone()), (vec![1], IntMatrix::from_rows(&[vec![1]])));
/// ```
pub fn solve_lattice(a: &IntMatrix) -> Result<LatticeSolution, Overflow> {
    let snf = smith_normal_form(a)?;
    let (n, m, r) = (a.rows(), a.cols(), snf.rank);
    let wide = |x: &IntMatrix| -> Vec<Vec<i128>> {
        (0..x.rows())
            .map(|i| x.row(i).iter().map(|&v| i128::from(v)).collect())
            .collect()
    };
    // Work on lines: rows of U, columns of V.
    let u = wide(&snf.u);
    let vt = wide(&snf.v.transpose());
    let mut coker: Vec<Vec<i128>> = u[r..].to_vec();
    row_hermite(&mut coker)?;
    let mut u_rows: Vec<Vec<i128>> = u[..r].to_vec();
    let mut part: Vec<Vec<i128>> = vt[..r].to_vec();
    let mut kern: Vec<Vec<i128>> = vt[r..].to_vec();
    let pivots = latest_pivot_echelon(&mut kern, m)?;
    for (row, col) in u_rows.iter_mut().zip(part.iter_mut()) {
        for c in &coker {
            let p = c.iter().position(|&x| x != 0).unwrap_or(0);
            let q = Integer::div_floor(&row[p], &c[p]);
            sub_multiple(row, q, c)?;
        }
        if row.iter().find(|&&x| x != 0).is_some_and(|&x| x < 0) {
            row.iter_mut().for_each(|x| *x = -*x);
            col.iter_mut().for_each(|x| *x = -*x);
        }
        for (k, &p) in kern.iter().zip(&pivots).rev() {
            let q = Integer::div_floor(&col[p], &k[p]);
            sub_multiple(col, q, k)?;
        }
    }
    let narrow =
        |lines: &[Vec<i128>], len: usize, transpose: bool| -> Result<IntMatrix, Overflow> {
            let (rows, cols) = if transpose {
                (len, lines.len())
            } else {
                (lines.len(), len)
            };
            let mut out = IntMatrix::new(rows, cols);
            for (i, line) in lines.iter().enumerate() {
                for (j, &x) in line.iter().enumerate() {
                    let x = i64::try_from(x).map_err(|_| Overflow)?;
                    if transpose {
                        out.set(j, i, x);
                    } else {
                        out.set(i, j, x);
                    }
                }
            }
            Ok(out)
        };
    Ok(LatticeSolution {
        rank: r,
        cokernel: narrow(&coker, n, false)?,
        divisors: snf.divisors(),
        u_rows: narrow(&u_rows, n, false)?,
        particular: narrow(&part, m, true)?,
        kernel: narrow(&kern, m, true)?,
    })
}

/// `a / b` rounded to the nearest integer (`b ≠ 0`), checked.
fn round_div(a: i128, b: i128) -> Result<i128, Overflow> {
    let (a, b) = if b < 0 {
        (a.checked_neg(), -b)
    } else {
        (Some(a), b)
    };
    let num = a
        .and_then(|a| a.checked_mul(2)?.checked_add(b))
        .ok_or(Overflow)?;
    Ok(Integer::div_floor(&num, &(b * 2)))
}

/// `line ← line − q·other`, checked.
fn sub_multiple(line: &mut [i128], q: i128, other: &[i128]) -> Result<(), Overflow> {
    if q != 0 {
        for (x, &y) in line.iter_mut().zip(other) {
            *x = x
                .checked_sub(q.checked_mul(y).ok_or(Overflow)?)
                .ok_or(Overflow)?;
        }
    }
    Ok(())
}

/// Euclid on coordinate `c` of the lines `idx`: afterwards at most one of
/// them is non-zero there; returns it (made positive).
fn gcd_at(lines: &mut [Vec<i128>], idx: &[usize], c: usize) -> Result<Option<usize>, Overflow> {
    loop {
        let nz: Vec<usize> = idx.iter().copied().filter(|&i| lines[i][c] != 0).collect();
        let Some(&p) = nz.iter().min_by_key(|&&i| lines[i][c].unsigned_abs()) else {
            return Ok(None);
        };
        if nz.len() == 1 {
            if lines[p][c] < 0 {
                lines[p].iter_mut().for_each(|x| *x = -*x);
            }
            return Ok(Some(p));
        }
        let pivot = lines[p].clone();
        for &i in nz.iter().filter(|&&i| i != p) {
            let q = round_div(lines[i][c], pivot[c])?;
            sub_multiple(&mut lines[i], q, &pivot)?;
        }
    }
}

/// Row Hermite form of independent rows: pivots at the earliest coordinates,
/// positive, entries above a pivot reduced into `[0, pivot)`.
fn row_hermite(rows: &mut Vec<Vec<i128>>) -> Result<(), Overflow> {
    let len = rows.first().map_or(0, Vec::len);
    let mut done = 0;
    for c in 0..len {
        let idx: Vec<usize> = (done..rows.len()).collect();
        let Some(p) = gcd_at(rows, &idx, c)? else {
            continue;
        };
        rows.swap(done, p);
        let pivot = rows[done].clone();
        for i in 0..done {
            let q = Integer::div_floor(&rows[i][c], &pivot[c]);
            sub_multiple(&mut rows[i], q, &pivot)?;
        }
        done += 1;
    }
    Ok(())
}

/// Echelon form of independent columns (given as lines of length `len`)
/// with pivots at the latest coordinates: coordinates are processed from
/// the last; the not yet pivoted column left non-zero there becomes a
/// positive pivot and reduces the entries of the pivoted ones into
/// `[0, pivot)`. Sorts the columns by pivot ascending and returns the pivots.
fn latest_pivot_echelon(cols: &mut Vec<Vec<i128>>, len: usize) -> Result<Vec<usize>, Overflow> {
    let mut pivot: Vec<Option<usize>> = vec![None; cols.len()];
    for c in (0..len).rev() {
        let free: Vec<usize> = (0..cols.len()).filter(|&j| pivot[j].is_none()).collect();
        let Some(p) = gcd_at(cols, &free, c)? else {
            continue;
        };
        pivot[p] = Some(c);
        let pc = cols[p].clone();
        for j in (0..cols.len()).filter(|&j| j != p && pivot[j].is_some()) {
            let q = Integer::div_floor(&cols[j][c], &pc[c]);
            sub_multiple(&mut cols[j], q, &pc)?;
        }
    }
    let mut order: Vec<(usize, Vec<i128>)> = pivot
        .into_iter()
        .map(|p| p.unwrap_or(0))
        .zip(std::mem::take(cols))
        .collect();
    order.sort_by_key(|(p, _)| *p);
    let (pivots, sorted): (Vec<usize>, Vec<Vec<i128>>) = order.into_iter().unzip();
    *cols = sorted;
    Ok(pivots)
}

/// One step of an LLL run on positions of its input list: `Sub(k, l, q)`
/// is `b_k ← b_k − q·b_l`, `Swap(k)` exchanges `b_{k−1}` and `b_k`.
enum Step {
    Sub(usize, usize, BigInt),
    Swap(usize),
}

fn dot(x: &[BigInt], y: &[BigInt]) -> BigInt {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// `dst ← dst + q·src`.
fn axpy(dst: &mut [BigInt], q: &BigInt, src: &[BigInt]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += q * s;
    }
}

/// Exact Gram–Schmidt data of integral LLL (Cohen, *A Course in
/// Computational Algebraic Number Theory*, Alg. 2.6.7): `d[i+1]` is the Gram
/// determinant of `b_0..b_i` and `lam[k][j] = d[j+1]·μ_kj`, all integers.
struct Gso {
    b: Vec<Vec<BigInt>>,
    d: Vec<BigInt>,
    lam: Vec<Vec<BigInt>>,
}

impl Gso {
    /// `None` when one of the first `independent` vectors depends on the
    /// previous ones (a later dependent vector is only ever reduced).
    fn new(b: Vec<Vec<BigInt>>, independent: usize) -> Option<Gso> {
        let n = b.len();
        let mut d = vec![BigInt::zero(); n + 1];
        d[0] = BigInt::one();
        let mut lam = vec![vec![BigInt::zero(); n]; n];
        for k in 0..n {
            for j in 0..=k {
                let mut u = dot(&b[k], &b[j]);
                for i in 0..j {
                    u = (&d[i + 1] * &u - &lam[k][i] * &lam[j][i]) / &d[i];
                }
                if j < k {
                    lam[k][j] = u;
                } else {
                    d[k + 1] = u;
                }
            }
            if k < independent && d[k + 1].is_zero() {
                return None;
            }
        }
        Some(Gso { b, d, lam })
    }

    /// Size-reduces `b_k` by `b_l` (`l < k`); returns the multiple used.
    fn redi(&mut self, k: usize, l: usize) -> Option<BigInt> {
        let dl = &self.d[l + 1];
        if (&self.lam[k][l] * 2u8).magnitude() <= dl.magnitude() {
            return None;
        }
        let num: BigInt = &self.lam[k][l] * 2 + dl;
        let q = Integer::div_floor(&num, &(dl * 2));
        let bl = self.b[l].clone();
        axpy(&mut self.b[k], &-&q, &bl);
        self.lam[k][l] -= &q * dl;
        for i in 0..l {
            let t = &q * &self.lam[l][i];
            self.lam[k][i] -= t;
        }
        Some(q)
    }

    /// Lovász condition with δ = 99/100 violated at `k`.
    fn lovasz_fails(&self, k: usize) -> bool {
        let lhs = &self.d[k + 1] * &self.d[k - 1] * 100u8;
        let rhs =
            &self.d[k] * &self.d[k] * 99u8 - &self.lam[k][k - 1] * &self.lam[k][k - 1] * 100u8;
        lhs < rhs
    }

    fn swapi(&mut self, k: usize) {
        let n = self.b.len();
        self.b.swap(k, k - 1);
        for j in 0..k - 1 {
            let t = std::mem::take(&mut self.lam[k][j]);
            self.lam[k][j] = std::mem::replace(&mut self.lam[k - 1][j], t);
        }
        let l = self.lam[k][k - 1].clone();
        let big_b = (&self.d[k - 1] * &self.d[k + 1] + &l * &l) / &self.d[k];
        for i in k + 1..n {
            let t = self.lam[i][k].clone();
            self.lam[i][k] = (&self.d[k + 1] * &self.lam[i][k - 1] - &l * &t) / &self.d[k];
            self.lam[i][k - 1] = (&big_b * &t + &l * &self.lam[i][k]) / &self.d[k + 1];
        }
        self.d[k] = big_b;
    }
}

/// Integral LLL (δ = 99/100) on independent vectors, swapping positions
/// `k−1` and `k` only when `can_swap(k)`; reports every step. Dependent
/// input is left alone.
fn lll_exact(vecs: Vec<Vec<BigInt>>, can_swap: &dyn Fn(usize) -> bool, emit: &mut dyn FnMut(Step)) {
    let n = vecs.len();
    let Some(mut g) = Gso::new(vecs, n) else {
        return;
    };
    let (mut k, mut budget) = (1, 100_000u32);
    while k < n && budget > 0 {
        budget -= 1;
        if let Some(q) = g.redi(k, k - 1) {
            emit(Step::Sub(k, k - 1, q));
        }
        if can_swap(k) && g.lovasz_fails(k) {
            g.swapi(k);
            emit(Step::Swap(k));
            k = (k - 1).max(1);
        } else {
            for l in (0..k - 1).rev() {
                if let Some(q) = g.redi(k, l) {
                    emit(Step::Sub(k, l, q));
                }
            }
            k += 1;
        }
    }
}

/// Exact Babai nearest plane (see [`nearest_plane`]).
fn nearest_plane_exact(basis_and_target: Vec<Vec<BigInt>>) -> Vec<(usize, BigInt)> {
    let n = basis_and_target.len() - 1;
    let Some(mut g) = Gso::new(basis_and_target, n) else {
        return Vec::new();
    };
    (0..n)
        .rev()
        .filter_map(|l| Some((l, g.redi(n, l)?)))
        .collect()
}

/// Largest magnitude handed to the floating-point paths (`i128` vectors
/// with checked growth; size reduction is iterated, so `f64` rounding of
/// large entries only costs extra passes).
const FAST_LIMIT: u128 = 1 << 100;

fn to_small<T: Coef>(vecs: &[Vec<T>]) -> Option<Vec<Vec<i128>>> {
    vecs.iter()
        .map(|v| v.iter().map(Coef::small).collect())
        .collect()
}

fn to_big(vecs: &[Vec<i128>]) -> Vec<Vec<BigInt>> {
    vecs.iter()
        .map(|v| v.iter().map(|&x| BigInt::from(x)).collect())
        .collect()
}

/// Modified Gram–Schmidt of `b_k` against `bs[..k]` in `f64`: fills
/// `mu[k][..k]`, `bs[k]` and returns `(|b_k*|², |b_k|²)`.
fn gs_row(b: &[f64], k: usize, bs: &mut [Vec<f64>], mu: &mut [Vec<f64>], bn: &[f64]) -> (f64, f64) {
    let mut v = b.to_vec();
    let full: f64 = v.iter().map(|a| a * a).sum();
    for j in 0..k {
        let m = v.iter().zip(&bs[j]).map(|(a, b)| a * b).sum::<f64>() / bn[j];
        mu[k][j] = m;
        v.iter_mut().zip(&bs[j]).for_each(|(a, b)| *a -= m * b);
    }
    let norm: f64 = v.iter().map(|a| a * a).sum();
    bs[k] = v;
    (norm, full)
}

/// Whether a Gram–Schmidt norm computed in `f64` can be trusted.
fn reliable((norm, full): (f64, f64)) -> bool {
    norm.is_finite() && norm > full * 1e-12
}

/// `b_k ← b_k − q·b_j` on `i128` vectors; `None` on overflow.
fn sub_small(b: &mut [Vec<i128>], k: usize, j: usize, q: i128) -> Option<()> {
    for c in 0..b[k].len() {
        b[k][c] = b[k][c].checked_sub(q.checked_mul(b[j][c])?)?;
    }
    Some(())
}

/// Floating-point LLL (Gram–Schmidt in `f64`, exact `i128` vectors, size
/// reduction repeated until stable). Returns `false` when it cannot finish
/// (overflow, lost precision, dependency); every reported step has been
/// applied to `b` either way.
fn lll_fast(
    b: &mut [Vec<i128>],
    can_swap: &dyn Fn(usize) -> bool,
    emit: &mut dyn FnMut(Step),
) -> bool {
    let n = b.len();
    let dim = b.first().map_or(0, Vec::len);
    let (mut bs, mut mu, mut bn) = (vec![vec![0.0; dim]; n], vec![vec![0.0; n]; n], vec![0.0; n]);
    let mut bf: Vec<Vec<f64>> = b
        .iter()
        .map(|v| v.iter().map(|&x| x as f64).collect())
        .collect();
    bn[0] = gs_row(&bf[0], 0, &mut bs, &mut mu, &bn).0;
    let (mut k, mut budget) = (1, 20_000u32);
    while k < n {
        if bn[..k].iter().any(|x| !x.is_finite() || *x <= 0.0) {
            return false;
        }
        let mut g;
        loop {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                return false;
            }
            g = gs_row(&bf[k], k, &mut bs, &mut mu, &bn);
            let mut big = false;
            for j in (0..k).rev() {
                let q = mu[k][j].round();
                if q == 0.0 {
                    continue;
                }
                if !q.is_finite() || q.abs() > 1e30 || sub_small(b, k, j, q as i128).is_none() {
                    return false;
                }
                emit(Step::Sub(k, j, BigInt::from(q as i128)));
                for i in 0..j {
                    mu[k][i] -= q * mu[j][i];
                }
                mu[k][j] -= q;
                big |= q.abs() > (1u64 << 20) as f64;
            }
            bf[k] = b[k].iter().map(|&x| x as f64).collect();
            if !big {
                break;
            }
        }
        // A numerically vanishing |b_k*| is a Lovász failure: b_k moves
        // down and is recomputed there. Where it cannot move it is harmless
        // only if no later vector needs it as a divisor.
        let lost = !reliable(g);
        if lost && !can_swap(k) && k + 1 < n {
            return false;
        }
        bn[k] = g.0;
        let m = mu[k][k - 1];
        if can_swap(k) && (lost || bn[k] < (0.99 - m * m) * bn[k - 1]) {
            b.swap(k - 1, k);
            bf.swap(k - 1, k);
            emit(Step::Swap(k));
            if k == 1 {
                bn[0] = gs_row(&bf[0], 0, &mut bs, &mut mu, &bn).0;
            }
            k = (k - 1).max(1);
        } else {
            k += 1;
        }
    }
    true
}

/// LLL-reduces independent vectors (δ = 0.99), swapping positions `k−1`
/// and `k` only when `can_swap(k)` (a constrained order), and reports every
/// step so that callers can mirror it on related matrices. Small inputs take
/// a floating-point path; otherwise, or when that path gives up, the exact
/// integral algorithm finishes the job. Dependent input is left alone.
fn lll<T: Coef>(vecs: &[Vec<T>], can_swap: &dyn Fn(usize) -> bool, emit: &mut dyn FnMut(Step)) {
    if vecs.len() < 2 {
        return;
    }
    if let Some(mut small) = to_small(vecs) {
        if lll_fast(&mut small, can_swap, emit) {
            return;
        }
        return lll_exact(to_big(&small), can_swap, emit);
    }
    lll_exact(bigs(vecs), can_swap, emit)
}

/// Babai's nearest plane: multiples `(l, q)` such that
/// `target − Σ q·basis_l` is size-reduced against the (independent) basis.
fn nearest_plane<T: Coef>(basis: &[Vec<T>], target: &[T]) -> Vec<(usize, BigInt)> {
    let n = basis.len();
    if n == 0 {
        return Vec::new();
    }
    let mut all = basis.to_vec();
    all.push(target.to_vec());
    if let Some(mut b) = to_small(&all) {
        let dim = b[0].len();
        let (mut bs, mut mu, mut bn) = (
            vec![vec![0.0; dim]; n + 1],
            vec![vec![0.0; n + 1]; n + 1],
            vec![0.0; n + 1],
        );
        let mut ok = true;
        let bf: Vec<Vec<f64>> = b
            .iter()
            .map(|v| v.iter().map(|&x| x as f64).collect())
            .collect();
        for k in 0..n {
            let g = gs_row(&bf[k], k, &mut bs, &mut mu, &bn);
            ok &= reliable(g);
            bn[k] = g.0;
        }
        if ok {
            let mut total = vec![0i128; n];
            for _round in 0..8 {
                let t: Vec<f64> = b[n].iter().map(|&x| x as f64).collect();
                gs_row(&t, n, &mut bs, &mut mu, &bn);
                let mut moved = false;
                for j in (0..n).rev() {
                    let q = mu[n][j].round();
                    if q == 0.0 {
                        continue;
                    }
                    if q.abs() > 1e30 || sub_small(&mut b, n, j, q as i128).is_none() {
                        break;
                    }
                    total[j] += q as i128;
                    for i in 0..j {
                        mu[n][i] -= q * mu[j][i];
                    }
                    moved = true;
                }
                if !moved {
                    return (0..n)
                        .rev()
                        .filter(|&j| total[j] != 0)
                        .map(|j| (j, BigInt::from(total[j])))
                        .collect();
                }
            }
        }
    }
    nearest_plane_exact(bigs(&all))
}

/// A Smith decomposition in [`BigInt`] whose transforms are shrunk without
/// changing `S`.
///
/// The valid pairs are `(P·U, V·Q)` with `P·S·Q = S`. They are generated by
/// `v_a ← v_a − q·v_b` whenever `s_a | q·s_b` (compensated by
/// `u_b ← u_b + q·(s_b/s_a)·u_a`; free when `v_b` is a kernel column), by
/// adding cokernel rows to rows of `U`, and by permutations inside a group
/// of equal divisors. Within that set, [`SmithTransforms::reduce`] LLL-reduces the rows of
/// `W = V⁻¹` (which bound `U = S·W·A⁺`), then the columns of `V` inside each
/// group of equal divisors, reduces columns of larger divisors modulo the
/// scaled lattice `(s_a/s_b)·v_b` of smaller ones, and finally LLL-reduces
/// the kernel and cokernel bases and reduces `V`'s and `U`'s first `R`
/// columns/rows modulo them.
pub(crate) struct SmithTransforms<T> {
    /// The divisors `s_0 | … | s_{R−1}`.
    pub div: Vec<BigInt>,
    /// Rows of `U`.
    pub u: Vec<Vec<T>>,
    /// Columns of `V`.
    pub v: Vec<Vec<T>>,
    /// Rows of `V⁻¹` (emptied once no longer needed).
    pub w: Vec<Vec<T>>,
    pub rank: usize,
}

/// Entries of [`SmithTransforms`]: `i128` (checked) or [`BigInt`].
pub(crate) trait Coef: Clone {
    fn big(&self) -> BigInt;
    /// The value as `i128` when within [`FAST_LIMIT`].
    fn small(&self) -> Option<i128>;
    /// `dst ← dst + q·src`; `None` on overflow.
    fn axpy(dst: &mut [Self], q: &BigInt, src: &[Self]) -> Option<()>;
}

impl Coef for i128 {
    fn big(&self) -> BigInt {
        BigInt::from(*self)
    }
    fn small(&self) -> Option<i128> {
        (self.unsigned_abs() <= FAST_LIMIT).then_some(*self)
    }
    fn axpy(dst: &mut [Self], q: &BigInt, src: &[Self]) -> Option<()> {
        let q = q.to_i128()?;
        for (d, s) in dst.iter_mut().zip(src) {
            *d = d.checked_add(q.checked_mul(*s)?)?;
        }
        Some(())
    }
}

impl Coef for BigInt {
    fn big(&self) -> BigInt {
        self.clone()
    }
    fn small(&self) -> Option<i128> {
        self.to_i128().and_then(|x| x.small())
    }
    fn axpy(dst: &mut [Self], q: &BigInt, src: &[Self]) -> Option<()> {
        axpy(dst, q, src);
        Some(())
    }
}

fn bigs<T: Coef>(vecs: &[Vec<T>]) -> Vec<Vec<BigInt>> {
    vecs.iter()
        .map(|v| v.iter().map(Coef::big).collect())
        .collect()
}

impl<T: Coef> SmithTransforms<T> {
    /// `v_a ← v_a − q·v_b` with its compensation (requires `s_a | q·s_b`).
    fn vop(&mut self, a: usize, b: usize, q: &BigInt) -> Option<()> {
        let vb = self.v[b].clone();
        T::axpy(&mut self.v[a], &-q, &vb)?;
        if !self.w.is_empty() {
            let wa = self.w[a].clone();
            T::axpy(&mut self.w[b], q, &wa)?;
        }
        if b < self.rank {
            let c = q * &self.div[b] / &self.div[a];
            let ua = self.u[a].clone();
            T::axpy(&mut self.u[b], &c, &ua)?;
        }
        Some(())
    }

    /// `u_a ← u_a − q·u_b` for a cokernel row `b`.
    fn uop(&mut self, a: usize, b: usize, q: &BigInt) -> Option<()> {
        let ub = self.u[b].clone();
        T::axpy(&mut self.u[a], &-q, &ub)
    }

    /// Exchanges indices `a` and `b` of one group (equal divisors or both kernel).
    fn swap(&mut self, a: usize, b: usize) {
        self.v.swap(a, b);
        if !self.w.is_empty() {
            self.w.swap(a, b);
        }
        if a < self.rank && b < self.rank {
            self.u.swap(a, b);
        }
    }

    /// Runs the reduction described on the type; `None` when `T` overflows.
    pub(crate) fn reduce(&mut self) -> Option<()> {
        let (r, m) = (self.rank, self.v.len());
        let group: Vec<Option<&BigInt>> = (0..m).map(|i| self.div.get(i)).collect();
        let mut steps = Vec::new();
        lll(&self.w, &|k| group[k] == group[k - 1], &mut |st| {
            steps.push(st)
        });
        for st in steps.drain(..) {
            match st {
                Step::Sub(k, l, q) => self.vop(l, k, &-q)?,
                Step::Swap(k) => self.swap(k - 1, k),
            }
        }
        self.w.clear();
        let mut runs = Vec::new();
        let mut lo = 0;
        while lo < r {
            let hi = (lo..r).find(|&i| self.div[i] != self.div[lo]).unwrap_or(r);
            runs.push((lo, hi));
            lo = hi;
        }
        runs.push((r, m)); // the kernel
        for &(lo, hi) in &runs {
            lll(&self.v[lo..hi], &|_| true, &mut |st| steps.push(st));
            for st in steps.drain(..) {
                match st {
                    Step::Sub(k, l, q) => self.vop(lo + k, lo + l, &q)?,
                    Step::Swap(k) => self.swap(lo + k - 1, lo + k),
                }
            }
        }
        for &(lo, hi) in runs.iter().filter(|&&(lo, _)| lo > 0 && lo < r) {
            let sigma = self.div[lo].clone();
            let ratio: Vec<BigInt> = self.div[..lo].iter().map(|d| &sigma / d).collect();
            let basis: Vec<Vec<BigInt>> = (0..lo)
                .map(|b| self.v[b].iter().map(|x| x.big() * &ratio[b]).collect())
                .collect();
            for a in lo..hi {
                for (l, c) in nearest_plane(&basis, &bigs(&self.v[a..=a])[0]) {
                    self.vop(a, l, &(c * &ratio[l]))?;
                }
            }
        }
        lll(&self.u[r..], &|_| true, &mut |st| steps.push(st));
        for st in steps.drain(..) {
            match st {
                Step::Sub(k, l, q) => self.uop(r + k, r + l, &q)?,
                Step::Swap(k) => self.u.swap(r + k - 1, r + k),
            }
        }
        for a in 0..r {
            for (l, c) in nearest_plane(&self.v[r..], &self.v[a]) {
                self.vop(a, r + l, &c)?;
            }
            for (l, c) in nearest_plane(&self.u[r..], &self.u[a]) {
                self.uop(a, r + l, &c)?;
            }
        }
        Some(())
    }
}
