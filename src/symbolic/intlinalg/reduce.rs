//! Shrinking Smith transforms by lattice reduction.
//!
//! Owns [`SmithTransforms`]: a Smith decomposition `S = U·A·V` held as rows
//! of `U`, columns of `V` and rows of `V⁻¹`, whose transforms are reduced
//! inside the set of valid pairs without changing `S`, and the LLL and
//! Babai nearest-plane routines that do it (a fast `f64`/`i128` path with
//! an exact integral fallback). Private to [`super`]; it must not know
//! about anything but integer vectors.

use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};

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
                let (done, row) = mu.split_at_mut(k);
                row[0]
                    .iter_mut()
                    .zip(&done[j][..j])
                    .for_each(|(a, b)| *a -= q * b);
                row[0][j] -= q;
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
                    let (done, row) = mu.split_at_mut(n);
                    row[0]
                        .iter_mut()
                        .zip(&done[j][..j])
                        .for_each(|(a, b)| *a -= q * b);
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

/// Transforms whose entries have at most this many bits are not reduced
/// further (well inside `i64`, and cheap for the callers' `i128` work).
const GOOD_ENOUGH_BITS: u64 = 48;

/// Rows or columns of a matrix.
type Lines<T> = Vec<Vec<T>>;

/// A Smith decomposition `S = U·A·V` (rows of `U`, columns of `V`, rows of
/// `W = V⁻¹`) whose transforms are shrunk without changing `S`.
///
/// The valid pairs are `(P·U, V·Q)` with `P·S·Q = S`. They are generated by
/// `v_a ← v_a − q·v_b` whenever `s_a | q·s_b` (compensated by
/// `u_b ← u_b + q·(s_b/s_a)·u_a`, and `w_b ← w_b + q·w_a`; free when `v_b`
/// is a kernel column), by adding cokernel rows to rows of `U`, and by
/// permutations inside a group of equal divisors. [`SmithTransforms::reduce`]
/// works inside that set; see there.
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
    /// Bit length of the magnitude.
    fn bits(&self) -> u64;
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
    fn bits(&self) -> u64 {
        u64::from(128 - self.unsigned_abs().leading_zeros())
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
    fn bits(&self) -> u64 {
        BigInt::bits(self)
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

    /// LLL inside each run of equal divisors (and the kernel run), then
    /// columns of larger divisors reduced modulo the scaled lattice
    /// `(s_a/s_b)·v_b` of smaller ones (Babai).
    fn groups_and_planes(&mut self, runs: &[(usize, usize)]) -> Option<()> {
        let mut steps = Vec::new();
        for &(lo, hi) in runs {
            lll(&self.v[lo..hi], &|_| true, &mut |st| steps.push(st));
            for st in steps.drain(..) {
                match st {
                    Step::Sub(k, l, q) => self.vop(lo + k, lo + l, &q)?,
                    Step::Swap(k) => self.swap(lo + k - 1, lo + k),
                }
            }
        }
        let rank = self.rank;
        for &(lo, hi) in runs.iter().filter(|&&(lo, _)| lo > 0 && lo < rank) {
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
        Some(())
    }

    /// LLL on the rows of `W = V⁻¹`, swapping only inside a group.
    fn reduce_dual(&mut self) -> Option<()> {
        let group: Vec<Option<&BigInt>> = (0..self.v.len()).map(|i| self.div.get(i)).collect();
        let mut steps = Vec::new();
        lll(&self.w, &|k| group[k] == group[k - 1], &mut |st| {
            steps.push(st)
        });
        for st in steps {
            match st {
                Step::Sub(k, l, q) => self.vop(l, k, &-q)?,
                Step::Swap(k) => self.swap(k - 1, k),
            }
        }
        Some(())
    }

    /// The largest bit length in `U` and `V`.
    fn size(&self) -> u64 {
        self.u
            .iter()
            .chain(&self.v)
            .flatten()
            .map(Coef::bits)
            .max()
            .unwrap_or(0)
    }

    /// Shrinks `U` and `V`; `None` when `T` overflows.
    ///
    /// First the columns of each group of equal divisors (and the kernel)
    /// are LLL-reduced and the columns of larger divisors are reduced modulo
    /// the scaled lattice `(s_a/s_b)·v_b` of the smaller ones (Babai): the
    /// dual step cannot move them. Then, while the largest entry keeps
    /// shrinking (at most four rounds, stopping early once it has at most
    /// [`GOOD_ENOUGH_BITS`] bits), the rows of `W` are LLL-reduced with swaps
    /// only inside a group (a small `W` bounds `U = S·W·A⁺`) and the primal
    /// step is repeated. Finally the cokernel rows are LLL-reduced and the
    /// first `R` columns of `V` and rows of `U` are reduced modulo the
    /// kernel and cokernel bases.
    pub(crate) fn reduce(&mut self) -> Option<()> {
        let (r, m) = (self.rank, self.v.len());
        let mut runs = Vec::new();
        let mut lo = 0;
        while lo < r {
            let hi = (lo..r).find(|&i| self.div[i] != self.div[lo]).unwrap_or(r);
            runs.push((lo, hi));
            lo = hi;
        }
        runs.push((r, m)); // the kernel
                           // Columns of large divisors first go into a short coset (the dual
                           // reduction cannot move them), then dual and primal reductions
                           // alternate while the transforms keep shrinking.
        self.groups_and_planes(&runs)?;
        let mut best: Option<(u64, Lines<T>, Lines<T>)> = None;
        for _round in 0..4 {
            self.reduce_dual()?;
            self.groups_and_planes(&runs)?;
            let size = self.size();
            match &best {
                Some((b, _, _)) if *b <= size => break,
                _ => best = Some((size, self.u.clone(), self.v.clone())),
            }
            if size <= GOOD_ENOUGH_BITS {
                break;
            }
        }
        if let Some((_, u, v)) = best {
            (self.u, self.v) = (u, v);
        }
        self.w.clear();
        let mut steps = Vec::new();
        lll(&self.u[r..], &|_| true, &mut |st| steps.push(st));
        for st in steps {
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
