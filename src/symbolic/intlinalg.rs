//! Exact integer linear algebra: Smith normal form and what is read off it.
//!
//! Owns [`IntMatrix`] (a dense row-major `i64` matrix), the Smith normal form
//! [`smith_normal_form`] (Urban & van der Smagt, Alg. 1, with the extended
//! Euclidean algorithm of Alg. 2, [`extended_gcd`]), and the quantities of
//! §4.1 derived from it: [`pseudo_inverse`], [`kernel`], [`cokernel`], plus a
//! fraction-free determinant [`det`]. It must not know about affine forms,
//! index functions, inequalities or devices.
//!
//! All arithmetic is exact. The Smith normal form is computed with checked
//! `i64` arithmetic and recomputed with [`BigInt`] when an intermediate value
//! overflows; an [`Overflow`] is reported only when a final entry does not
//! fit in an `i64`. Nothing here panics on numeric input; shape violations
//! (an out-of-range index, ragged rows, mismatched product dimensions) are
//! programmer errors and panic like slice indexing does.

use super::affine::Overflow;
use super::lattice::{Coef, SmithTransforms};
use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::Ratio;
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::cmp::Ordering;
use std::fmt::Debug;
use std::ops::Range;

/// A dense, row-major integer matrix.
///
/// ```
/// use tenjin::symbolic::intlinalg::IntMatrix;
/// let a = IntMatrix::from_rows(&[vec![1, 2], vec![3, 4]]);
/// let p = a.mul(&IntMatrix::identity(2)).unwrap();
/// assert_eq!(p, a);
/// assert_eq!(a.transpose().get(0, 1), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IntMatrix {
    rows: usize,
    cols: usize,
    data: Vec<i64>,
}

impl IntMatrix {
    /// The `rows × cols` zero matrix (either dimension may be 0).
    ///
    /// # Panics
    /// When `rows · cols` overflows `usize` (the allocation could not exist).
    pub fn new(rows: usize, cols: usize) -> IntMatrix {
        let len = rows
            .checked_mul(cols)
            .expect("IntMatrix dimensions overflow usize");
        IntMatrix {
            rows,
            cols,
            data: vec![0; len],
        }
    }

    /// Builds a matrix from its rows. An empty slice gives the 0×0 matrix.
    ///
    /// # Panics
    /// When the rows do not all have the same length.
    pub fn from_rows<R: AsRef<[i64]>>(rows: &[R]) -> IntMatrix {
        let cols = rows.first().map_or(0, |r| r.as_ref().len());
        let mut data = Vec::with_capacity(rows.len() * cols);
        for r in rows {
            assert_eq!(r.as_ref().len(), cols, "IntMatrix::from_rows: ragged rows");
            data.extend_from_slice(r.as_ref());
        }
        IntMatrix {
            rows: rows.len(),
            cols,
            data,
        }
    }

    /// Builds a `rows × cols` matrix from row-major data; `None` when the
    /// length does not match.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<i64>) -> Option<IntMatrix> {
        (rows.checked_mul(cols) == Some(data.len())).then_some(IntMatrix { rows, cols, data })
    }

    /// The `n × n` identity.
    pub fn identity(n: usize) -> IntMatrix {
        let mut m = IntMatrix::new(n, n);
        for i in 0..n {
            m.data[i * n + i] = 1;
        }
        m
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Entry `(r, c)`. Panics when out of range.
    pub fn get(&self, r: usize, c: usize) -> i64 {
        assert!(
            r < self.rows && c < self.cols,
            "IntMatrix index out of range"
        );
        self.data[r * self.cols + c]
    }

    /// Sets entry `(r, c)`. Panics when out of range.
    pub fn set(&mut self, r: usize, c: usize, value: i64) {
        assert!(
            r < self.rows && c < self.cols,
            "IntMatrix index out of range"
        );
        self.data[r * self.cols + c] = value;
    }

    /// Row `r` as a slice. Panics when out of range.
    pub fn row(&self, r: usize) -> &[i64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// Column `c` as a vector. Panics when out of range.
    pub fn column(&self, c: usize) -> Vec<i64> {
        assert!(c < self.cols, "IntMatrix index out of range");
        (0..self.rows)
            .map(|r| self.data[r * self.cols + c])
            .collect()
    }

    /// The row-major entries.
    pub fn data(&self) -> &[i64] {
        &self.data
    }

    /// The product `self · other` with checked arithmetic.
    ///
    /// # Panics
    /// When `self.cols() != other.rows()`.
    pub fn mul(&self, other: &IntMatrix) -> Result<IntMatrix, Overflow> {
        assert_eq!(self.cols, other.rows, "IntMatrix::mul: dimension mismatch");
        let mut out = IntMatrix::new(self.rows, other.cols);
        for r in 0..self.rows {
            for c in 0..other.cols {
                let mut acc: i128 = 0;
                for k in 0..self.cols {
                    let p = i128::from(self.data[r * self.cols + k])
                        * i128::from(other.data[k * other.cols + c]);
                    acc = acc.checked_add(p).ok_or(Overflow)?;
                }
                out.data[r * other.cols + c] = i64::try_from(acc).map_err(|_| Overflow)?;
            }
        }
        Ok(out)
    }

    pub fn transpose(&self) -> IntMatrix {
        let mut out = IntMatrix::new(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.data[c * self.rows + r] = self.data[r * self.cols + c];
            }
        }
        out
    }

    pub fn is_zero(&self) -> bool {
        self.data.iter().all(|&x| x == 0)
    }

    /// Columns `range` as a new matrix.
    pub fn columns(&self, range: Range<usize>) -> IntMatrix {
        let mut out = IntMatrix::new(self.rows, range.len());
        for r in 0..self.rows {
            for (k, c) in range.clone().enumerate() {
                out.data[r * out.cols + k] = self.get(r, c);
            }
        }
        out
    }

    /// Rows `range` as a new matrix.
    pub fn row_range(&self, range: Range<usize>) -> IntMatrix {
        let data = self.data[range.start * self.cols..range.end * self.cols].to_vec();
        IntMatrix {
            rows: range.len(),
            cols: self.cols,
            data,
        }
    }
}

/// Extended Euclidean algorithm (Alg. 2) for integers of any sign.
///
/// Returns `(g, x, y)` with `g = gcd(a, b) ≥ 0` and `g = a·x + b·y`;
/// `gcd(0, 0) = 0`. The Bézout factors are the minimal ones Euclid produces
/// (`|x| ≤ |b|/g`, `|y| ≤ |a|/g`). Fails only when `g = 2⁶³` (both inputs in
/// `{0, i64::MIN}`), which does not fit.
///
/// ```
/// use tenjin::symbolic::intlinalg::extended_gcd;
/// let (g, x, y) = extended_gcd(240, -46).unwrap();
/// assert_eq!(g, 2);
/// assert_eq!(240 * x + (-46) * y, 2);
/// ```
pub fn extended_gcd(a: i64, b: i64) -> Result<(i64, i64, i64), Overflow> {
    let (g, x, y) = ext_gcd_i128(i128::from(a), i128::from(b)).ok_or(Overflow)?;
    let fit = |v: i128| i64::try_from(v).map_err(|_| Overflow);
    Ok((fit(g)?, fit(x)?, fit(y)?))
}

/// Alg. 2 on `i128`, checked (`None` only for inputs near `i128::MIN`).
fn ext_gcd_i128(a: i128, b: i128) -> Option<(i128, i128, i128)> {
    let (mut r0, mut r1) = (a, b);
    let (mut s0, mut s1) = (1i128, 0i128);
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0.checked_div(r1)?;
        (r0, r1) = (r1, r0.checked_sub(q.checked_mul(r1)?)?);
        (s0, s1) = (s1, s0.checked_sub(q.checked_mul(s1)?)?);
        (t0, t1) = (t1, t0.checked_sub(q.checked_mul(t1)?)?);
    }
    if r0 < 0 {
        Some((r0.checked_neg()?, s0.checked_neg()?, t0.checked_neg()?))
    } else {
        Some((r0, s0, t0))
    }
}

/// Ring operations the diagonalisation needs: `i128` with checked
/// arithmetic (`None` on overflow) and [`BigInt`] (never `None`).
trait Entry: Clone + PartialEq + Debug {
    fn from_i64(v: i64) -> Self;
    fn to_big(&self) -> BigInt;
    fn is_nil(&self) -> bool;
    fn is_neg(&self) -> bool;
    fn abs_cmp(&self, other: &Self) -> Ordering;
    /// `a·x + b·y`.
    fn lin(a: &Self, x: &Self, b: &Self, y: &Self) -> Option<Self>;
    fn neg(&self) -> Option<Self>;
    /// `x / d` rounded down (`nearest == false`) or to the nearest integer.
    fn quot(x: &Self, d: &Self, nearest: bool) -> Option<Self>;
    fn ext_gcd(a: &Self, b: &Self) -> Option<(Self, Self, Self)>;
}

impl Entry for i128 {
    fn from_i64(v: i64) -> Self {
        i128::from(v)
    }
    fn to_big(&self) -> BigInt {
        BigInt::from(*self)
    }
    fn is_nil(&self) -> bool {
        *self == 0
    }
    fn is_neg(&self) -> bool {
        *self < 0
    }
    fn abs_cmp(&self, other: &Self) -> Ordering {
        self.unsigned_abs().cmp(&other.unsigned_abs())
    }
    fn lin(a: &Self, x: &Self, b: &Self, y: &Self) -> Option<Self> {
        a.checked_mul(*x)?.checked_add(b.checked_mul(*y)?)
    }
    fn neg(&self) -> Option<Self> {
        self.checked_neg()
    }
    fn quot(x: &Self, d: &Self, nearest: bool) -> Option<Self> {
        let (x, d) = if *d < 0 {
            (x.checked_neg()?, d.checked_neg()?)
        } else {
            (*x, *d)
        };
        if d == 0 {
            return None;
        }
        if nearest {
            x.checked_mul(2)?
                .checked_add(d)?
                .checked_div_euclid(d.checked_mul(2)?)
        } else {
            x.checked_div_euclid(d)
        }
    }
    fn ext_gcd(a: &Self, b: &Self) -> Option<(Self, Self, Self)> {
        ext_gcd_i128(*a, *b)
    }
}

impl Entry for BigInt {
    fn from_i64(v: i64) -> Self {
        BigInt::from(v)
    }
    fn to_big(&self) -> BigInt {
        self.clone()
    }
    fn is_nil(&self) -> bool {
        Zero::is_zero(self)
    }
    fn is_neg(&self) -> bool {
        Signed::is_negative(self)
    }
    fn abs_cmp(&self, other: &Self) -> Ordering {
        self.magnitude().cmp(other.magnitude())
    }
    fn lin(a: &Self, x: &Self, b: &Self, y: &Self) -> Option<Self> {
        Some(a * x + b * y)
    }
    fn neg(&self) -> Option<Self> {
        Some(-self)
    }
    fn quot(x: &Self, d: &Self, nearest: bool) -> Option<Self> {
        if Zero::is_zero(d) {
            return None;
        }
        let (x, d) = if Signed::is_negative(d) {
            (-x, -d)
        } else {
            (x.clone(), d.clone())
        };
        let num: BigInt = if nearest { x * 2 + &d } else { x };
        let den: BigInt = if nearest { d * 2 } else { d };
        Some(Integer::div_floor(&num, &den))
    }
    fn ext_gcd(a: &Self, b: &Self) -> Option<(Self, Self, Self)> {
        let e = a.extended_gcd(b);
        if Signed::is_negative(&e.gcd) {
            Some((-e.gcd, -e.x, -e.y))
        } else {
            Some((e.gcd, e.x, e.y))
        }
    }
}

/// Row-major working matrix over an [`Entry`] type. Its *lines* are rows
/// (`by_row`) or columns; a line's *positions* are the other index.
#[derive(Clone)]
struct Mat<T> {
    rows: usize,
    cols: usize,
    data: Vec<T>,
}

impl<T: Entry> Mat<T> {
    fn from_int(a: &IntMatrix) -> Self {
        let data = a.data.iter().map(|&x| T::from_i64(x)).collect();
        Mat {
            rows: a.rows,
            cols: a.cols,
            data,
        }
    }

    fn ix(&self, by_row: bool, line: usize, pos: usize) -> usize {
        if by_row {
            line * self.cols + pos
        } else {
            pos * self.cols + line
        }
    }

    fn get(&self, by_row: bool, line: usize, pos: usize) -> &T {
        &self.data[self.ix(by_row, line, pos)]
    }

    /// (number of lines, length of a line)
    fn shape(&self, by_row: bool) -> (usize, usize) {
        if by_row {
            (self.rows, self.cols)
        } else {
            (self.cols, self.rows)
        }
    }

    fn swap_lines(&mut self, by_row: bool, a: usize, b: usize) {
        for p in 0..self.shape(by_row).1 {
            let (i, j) = (self.ix(by_row, a, p), self.ix(by_row, b, p));
            self.data.swap(i, j);
        }
    }

    /// Simultaneously `l₁ ← k₀·l₁ + k₁·l₂`, `l₂ ← k₂·l₁ + k₃·l₂`.
    fn combine(&mut self, by_row: bool, l1: usize, l2: usize, k: &[T; 4]) -> Option<()> {
        for p in 0..self.shape(by_row).1 {
            let (i, j) = (self.ix(by_row, l1, p), self.ix(by_row, l2, p));
            let (x, y) = (self.data[i].clone(), self.data[j].clone());
            self.data[i] = T::lin(&k[0], &x, &k[1], &y)?;
            self.data[j] = T::lin(&k[2], &x, &k[3], &y)?;
        }
        Some(())
    }

    /// `dst ← dst + f·src`.
    fn add_multiple(&mut self, by_row: bool, dst: usize, src: usize, f: &T) -> Option<()> {
        let one = T::from_i64(1);
        for p in 0..self.shape(by_row).1 {
            let (i, j) = (self.ix(by_row, dst, p), self.ix(by_row, src, p));
            self.data[i] = T::lin(&one, &self.data[i], f, &self.data[j])?;
        }
        Some(())
    }

    fn negate_line(&mut self, by_row: bool, l: usize) -> Option<()> {
        for p in 0..self.shape(by_row).1 {
            let i = self.ix(by_row, l, p);
            self.data[i] = self.data[i].neg()?;
        }
        Some(())
    }

    fn is_diagonal(&self) -> bool {
        (0..self.rows)
            .all(|r| (0..self.cols).all(|c| r == c || self.data[r * self.cols + c].is_nil()))
    }
}

/// Hermite reduction of the lines of `s` (rows: `s ← E·s`, `w ← E·w`;
/// columns: `s ← s·E`, `w ← w·E`): echelon form with positive pivots and the
/// entries before each pivot reduced into `[0, pivot)`. The elimination is
/// Alg. 1's (steps 15–18 / 24–27) with the least-magnitude entry as pivot and
/// rounded quotients, which is Euclid's algorithm (Alg. 2) run on the lines.
fn hermite<T: Entry>(s: &mut Mat<T>, w: &mut Mat<T>, by_row: bool) -> Option<()> {
    let (lines, positions) = s.shape(by_row);
    let mut r = 0;
    for c in 0..positions {
        if r == lines {
            break;
        }
        loop {
            let mut best: Option<usize> = None;
            for i in r..lines {
                let x = s.get(by_row, i, c);
                if !x.is_nil() && best.is_none_or(|b| x.abs_cmp(s.get(by_row, b, c)).is_lt()) {
                    best = Some(i);
                }
            }
            let Some(b) = best else { break };
            s.swap_lines(by_row, r, b);
            w.swap_lines(by_row, r, b);
            let p = s.get(by_row, r, c).clone();
            let mut clean = true;
            for i in r + 1..lines {
                if s.get(by_row, i, c).is_nil() {
                    continue;
                }
                let f = T::quot(s.get(by_row, i, c), &p, true)?.neg()?;
                s.add_multiple(by_row, i, r, &f)?;
                w.add_multiple(by_row, i, r, &f)?;
                clean &= s.get(by_row, i, c).is_nil();
            }
            if clean {
                break;
            }
        }
        if s.get(by_row, r, c).is_nil() {
            continue;
        }
        if s.get(by_row, r, c).is_neg() {
            s.negate_line(by_row, r)?;
            w.negate_line(by_row, r)?;
        }
        let p = s.get(by_row, r, c).clone();
        for i in 0..r {
            let f = T::quot(s.get(by_row, i, c), &p, false)?;
            if !f.is_nil() {
                let f = f.neg()?;
                s.add_multiple(by_row, i, r, &f)?;
                w.add_multiple(by_row, i, r, &f)?;
            }
        }
        r += 1;
    }
    Some(())
}

type SnfParts<T> = (Mat<T>, Mat<T>, Mat<T>, usize);

/// Diagonalises by alternating row and column Hermite reductions
/// (Kannan–Bachem), then enforces the divisibility chain (Alg. 1 steps
/// 30–37) with the Bézout step of Alg. 2. `None` when `T` overflows.
fn snf_generic<T: Entry>(a: &IntMatrix) -> Option<SnfParts<T>> {
    let mut s = Mat::<T>::from_int(a);
    let mut u = Mat::<T>::from_int(&IntMatrix::identity(a.rows));
    let mut v = Mat::<T>::from_int(&IntMatrix::identity(a.cols));
    // At least one (row) reduction: an input that is already diagonal may
    // still have zeros before non-zeros or negative entries.
    let mut diagonal = false;
    // Terminates (the leading entry's magnitude decreases every round that
    // does not finish); the bound only guards against a logic error.
    for round in 0..4096 {
        if diagonal {
            break;
        }
        let by_row = round % 2 == 0;
        hermite(&mut s, if by_row { &mut u } else { &mut v }, by_row)?;
        diagonal = s.is_diagonal();
    }
    if !diagonal {
        return None;
    }
    // Make the diagonal positive (a zero-free prefix of length `rank`).
    let n = a.rows.min(a.cols);
    let rank = (0..n)
        .take_while(|&i| !s.data[i * s.cols + i].is_nil())
        .count();
    for i in 0..rank {
        if s.data[i * s.cols + i].is_neg() {
            s.negate_line(true, i)?;
            u.negate_line(true, i)?;
        }
    }
    let one = T::from_i64(1);
    for i in 0..rank {
        for j in i + 1..rank {
            let (x, y) = (
                s.data[i * s.cols + i].clone(),
                s.data[j * s.cols + j].clone(),
            );
            if T::quot(&y, &x, false)
                .and_then(|q| T::lin(&one, &y, &q.neg()?, &x))?
                .is_nil()
            {
                continue; // s_i | s_j already
            }
            // diag(x, y) → diag(g, x·y/g): column j into column i, the Bézout
            // row step, and clearing the remaining off-diagonal entry.
            let (g, sigma, tau) = T::ext_gcd(&x, &y)?;
            s.add_multiple(false, i, j, &one)?;
            v.add_multiple(false, i, j, &one)?;
            let k = [
                sigma,
                tau,
                T::quot(&y, &g, false)?.neg()?,
                T::quot(&x, &g, false)?,
            ];
            s.combine(true, i, j, &k)?;
            u.combine(true, i, j, &k)?;
            let f = T::quot(&s.data[i * s.cols + j], &g, false)?.neg()?;
            s.add_multiple(false, j, i, &f)?;
            v.add_multiple(false, j, i, &f)?;
        }
    }
    Some((s, u, v, rank))
}

/// Smith normal form `S = U·A·V` (§4.1.1).
///
/// `s` is `N×M` diagonal with positive `s_ii` for `i < rank`, zero after,
/// and `s_ii | s_{i+1,i+1}`; `u` (`N×N`) and `v` (`M×M`) are unimodular.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snf {
    pub s: IntMatrix,
    pub u: IntMatrix,
    pub v: IntMatrix,
    pub rank: usize,
}

impl Snf {
    /// The non-zero diagonal entries `s_0 | s_1 | … | s_{R−1}`.
    pub fn divisors(&self) -> Vec<i64> {
        (0..self.rank).map(|i| self.s.get(i, i)).collect()
    }
}

/// Transforms whose entries all lie within this bound are returned as
/// computed; larger ones are shrunk by [`SmithTransforms::reduce`].
const SMALL_TRANSFORM: u128 = 1 << 12;

/// Computes the Smith normal form of any `N×M` integer matrix (zero and
/// empty matrices included).
///
/// The matrix is diagonalised by Alg. 1's eliminations grouped into
/// alternating row and column Hermite reductions (least-magnitude pivots,
/// rounded quotients: Kannan–Bachem), and the divisibility chain is enforced
/// with the Bézout step of Alg. 2 (Alg. 1 steps 30–37). Arithmetic is checked
/// `i64`, redone in [`BigInt`] on overflow. Transforms with large entries are
/// then shrunk by lattice reduction inside the set of valid `(U, V)` pairs
/// ([`SmithTransforms::reduce`]), which keeps 8×8 inputs with entries up to
/// ±30 around 2⁴⁵. Fails only when a final entry does not fit in an `i64`.
///
/// ```
/// use tenjin::symbolic::intlinalg::{smith_normal_form, IntMatrix};
/// let a = IntMatrix::from_rows(&[vec![2, 4, 4], vec![-6, 6, 12], vec![10, -4, -16]]);
/// let snf = smith_normal_form(&a).unwrap();
/// assert_eq!(snf.divisors(), vec![2, 6, 12]);
/// assert_eq!(snf.u.mul(&a).unwrap().mul(&snf.v).unwrap(), snf.s);
/// ```
pub fn smith_normal_form(a: &IntMatrix) -> Result<Snf, Overflow> {
    if let Some((s, u, v, rank)) = snf_generic::<i128>(a) {
        let small = |m: &Mat<i128>| m.data.iter().all(|x| x.unsigned_abs() <= SMALL_TRANSFORM);
        if small(&u) && small(&v) {
            let int = |m: Mat<i128>| -> Result<IntMatrix, Overflow> {
                let data = m
                    .data
                    .iter()
                    .map(|&x| i64::try_from(x).map_err(|_| Overflow))
                    .collect::<Result<_, _>>()?;
                Ok(IntMatrix {
                    rows: m.rows,
                    cols: m.cols,
                    data,
                })
            };
            return Ok(Snf {
                s: int(s)?,
                u: int(u)?,
                v: int(v)?,
                rank,
            });
        }
        if let Some(snf) = reduce_transforms(&s, &u, &v, rank) {
            return snf;
        }
    }
    let (s, u, v, rank) = snf_generic::<BigInt>(a).ok_or(Overflow)?;
    reduce_transforms(&s, &u, &v, rank).unwrap_or(Err(Overflow))
}

/// Shrinks `U` and `V` (see [`SmithTransforms::reduce`]) in `T` and converts
/// to `i64`; `None` when `T` overflows on the way.
fn reduce_transforms<T: Entry + Coef>(
    s: &Mat<T>,
    u: &Mat<T>,
    v: &Mat<T>,
    rank: usize,
) -> Option<Result<Snf, Overflow>> {
    let lines = |m: &Mat<T>, by_row: bool| -> Vec<Vec<T>> {
        let (l, p) = m.shape(by_row);
        (0..l)
            .map(|i| (0..p).map(|j| m.get(by_row, i, j).clone()).collect())
            .collect()
    };
    // V⁻¹: the row Hermite form of a unimodular matrix is the identity.
    let mut h = v.clone();
    let mut w = Mat::<T>::from_int(&IntMatrix::identity(v.rows));
    hermite(&mut h, &mut w, true)?;
    let mut t = SmithTransforms {
        div: (0..rank).map(|i| s.data[i * s.cols + i].to_big()).collect(),
        u: lines(u, true),
        v: lines(v, false),
        w: lines(&w, true),
        rank,
    };
    t.reduce()?;
    fn to_int<T: Entry>(
        rows: usize,
        cols: usize,
        at: &dyn Fn(usize, usize) -> T,
    ) -> Result<IntMatrix, Overflow> {
        let mut m = IntMatrix::new(rows, cols);
        for r in 0..rows {
            for c in 0..cols {
                m.data[r * cols + c] = at(r, c).to_big().to_i64().ok_or(Overflow)?;
            }
        }
        Ok(m)
    }
    let snf = (|| {
        Ok(Snf {
            s: to_int(s.rows, s.cols, &|r, c| s.data[r * s.cols + c].clone())?,
            u: to_int(u.rows, u.rows, &|r, c| t.u[r][c].clone())?,
            v: to_int(v.rows, v.rows, &|r, c| t.v[c][r].clone())?,
            rank,
        })
    })();
    Some(snf)
}

/// Kernel basis `K = V[:, R..]` (`M×(M−R)`): `A·K = 0`, and every integer
/// solution of `A·x = 0` is `K·z` for a unique `z ∈ Z^(M−R)`.
pub fn kernel(snf: &Snf) -> IntMatrix {
    snf.v.columns(snf.rank..snf.v.cols())
}

/// Cokernel `C = U[R.., :]` (`(N−R)×N`): `C·A = 0`; `A·x = b` is solvable
/// over the rationals iff `C·b = 0`.
pub fn cokernel(snf: &Snf) -> IntMatrix {
    snf.u.row_range(snf.rank..snf.u.rows())
}

/// The pseudo-inverse `I = V·S⁺·U` (`M×N`, eq. 18) with `A·I·A = A`, as
/// rows of exact fractions. Fails when an entry's reduced numerator or
/// denominator does not fit in an `i64`.
///
/// ```
/// use tenjin::symbolic::intlinalg::{pseudo_inverse, smith_normal_form, IntMatrix};
/// use num_rational::Ratio;
/// let snf = smith_normal_form(&IntMatrix::from_rows(&[vec![2]])).unwrap();
/// assert_eq!(pseudo_inverse(&snf).unwrap(), vec![vec![Ratio::new(1, 2)]]);
/// ```
pub fn pseudo_inverse(snf: &Snf) -> Result<Vec<Vec<Ratio<i64>>>, Overflow> {
    let (n, m) = (snf.u.rows(), snf.v.rows());
    let divs = snf.divisors();
    let mut out = Vec::with_capacity(m);
    for i in 0..m {
        let mut row = Vec::with_capacity(n);
        for j in 0..n {
            let mut acc = Ratio::<BigInt>::zero();
            for (k, &d) in divs.iter().enumerate() {
                let num = BigInt::from(snf.v.get(i, k)) * BigInt::from(snf.u.get(k, j));
                acc += Ratio::new(num, BigInt::from(d));
            }
            let num = acc.numer().to_i64().ok_or(Overflow)?;
            let den = acc.denom().to_i64().ok_or(Overflow)?;
            row.push(Ratio::new_raw(num, den));
        }
        out.push(row);
    }
    Ok(out)
}

/// Determinant by fraction-free (Bareiss) elimination in [`BigInt`];
/// `None` for a non-square matrix. The 0×0 determinant is 1.
///
/// ```
/// use tenjin::symbolic::intlinalg::{det, IntMatrix};
/// let a = IntMatrix::from_rows(&[vec![2, 1], vec![7, 4]]);
/// assert_eq!(det(&a), Some(1.into()));
/// ```
pub fn det(m: &IntMatrix) -> Option<BigInt> {
    if m.rows != m.cols {
        return None;
    }
    let n = m.rows;
    let mut a: Vec<BigInt> = m.data.iter().map(|&x| BigInt::from(x)).collect();
    let mut sign = BigInt::one();
    let mut prev = BigInt::one();
    for k in 0..n {
        if a[k * n + k].is_zero() {
            let Some(p) = (k + 1..n).find(|&i| !a[i * n + k].is_zero()) else {
                return Some(BigInt::zero());
            };
            for c in 0..n {
                a.swap(k * n + c, p * n + c);
            }
            sign = -sign;
        }
        for i in k + 1..n {
            for j in k + 1..n {
                let v = &a[i * n + j] * &a[k * n + k] - &a[i * n + k] * &a[k * n + j];
                a[i * n + j] = v / &prev;
            }
        }
        prev = a[k * n + k].clone();
    }
    Some(if n == 0 { sign } else { sign * &a[n * n - 1] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn check_snf(a: &IntMatrix) -> Snf {
        let snf = smith_normal_form(a).unwrap();
        let (n, m) = (a.rows(), a.cols());
        assert_eq!(
            snf.u.mul(a).unwrap().mul(&snf.v).unwrap(),
            snf.s,
            "S = UAV for {a:?}"
        );
        for i in 0..n {
            for j in 0..m {
                if i != j {
                    assert_eq!(snf.s.get(i, j), 0);
                }
            }
        }
        let d = snf.divisors();
        assert!(d.iter().all(|&x| x > 0));
        assert!(d.windows(2).all(|w| w[1] % w[0] == 0), "chain {d:?}");
        for i in snf.rank..n.min(m) {
            assert_eq!(snf.s.get(i, i), 0);
        }
        assert_eq!(det(&snf.u).unwrap().magnitude(), BigInt::one().magnitude());
        assert_eq!(det(&snf.v).unwrap().magnitude(), BigInt::one().magnitude());
        let k = kernel(&snf);
        assert_eq!((k.rows(), k.cols()), (m, m - snf.rank));
        assert!(a.mul(&k).unwrap().is_zero());
        let c = cokernel(&snf);
        assert_eq!((c.rows(), c.cols()), (n - snf.rank, n));
        assert!(c.mul(a).unwrap().is_zero());
        // A·I·A = A over the rationals.
        let pinv = pseudo_inverse(&snf).unwrap();
        for r in 0..n {
            for c in 0..m {
                let mut acc = Ratio::<i64>::zero();
                for p in 0..m {
                    for q in 0..n {
                        acc += Ratio::from(a.get(r, p)) * pinv[p][q] * a.get(q, c);
                    }
                }
                assert_eq!(acc, Ratio::from(a.get(r, c)));
            }
        }
        snf
    }

    #[test]
    fn known_smith_forms() {
        let cases: [(Vec<Vec<i64>>, Vec<i64>); 4] = [
            (
                vec![vec![2, 4, 4], vec![-6, 6, 12], vec![10, -4, -16]],
                vec![2, 6, 12],
            ),
            (
                vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]],
                vec![1, 3],
            ),
            (
                vec![
                    vec![-6, 111, -36, 6],
                    vec![5, -672, 210, 74],
                    vec![0, -255, 81, 24],
                    vec![-7, 255, -81, -10],
                ],
                vec![1, 3, 21],
            ),
            (
                vec![vec![9, -36, 30], vec![-36, 192, -180], vec![30, -180, 180]],
                vec![3, 12, 60],
            ),
        ];
        for (rows, want) in cases {
            let snf = check_snf(&IntMatrix::from_rows(&rows));
            assert_eq!(snf.divisors(), want);
            assert_eq!(snf.rank, want.len());
        }
    }

    #[test]
    fn degenerate_shapes() {
        for (n, m) in [(0, 0), (0, 3), (3, 0), (2, 3), (1, 1)] {
            let snf = check_snf(&IntMatrix::new(n, m));
            assert_eq!(snf.rank, 0);
            assert_eq!(kernel(&snf), IntMatrix::identity(m));
        }
        assert_eq!(det(&IntMatrix::new(0, 0)), Some(BigInt::one()));
        assert_eq!(det(&IntMatrix::new(2, 3)), None);
    }

    fn random_matrix(rng: &mut impl Rng, n: usize, m: usize, zero_frac: f64) -> IntMatrix {
        let data = (0..n * m)
            .map(|_| {
                if rng.gen_bool(zero_frac) {
                    0
                } else {
                    rng.gen_range(-30..=30)
                }
            })
            .collect();
        IntMatrix::from_vec(n, m, data).unwrap()
    }

    #[test]
    fn random_matrices() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        for k in 0..2000 {
            let (n, m) = (rng.gen_range(1..=8), rng.gen_range(1..=8));
            // The first thousand are dense, the rest sparse (rank deficiency).
            let zero_frac = if k < 1000 {
                0.0
            } else {
                rng.gen_range(0.0..0.7)
            };
            check_snf(&random_matrix(&mut rng, n, m, zero_frac));
        }
    }

    #[test]
    fn dense_8x8_matrices_fit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        for _ in 0..1000 {
            let snf = check_snf(&random_matrix(&mut rng, 8, 8, 0.0));
            // Reduced transforms stay far from the i64 limit (about 2^47 here).
            let max = snf
                .u
                .data()
                .iter()
                .chain(snf.v.data())
                .map(|x| x.unsigned_abs())
                .max();
            assert!(max < Some(1 << 52));
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let a = IntMatrix::from_rows(&[vec![i64::MAX, 0], vec![0, i64::MAX - 1]]);
        assert_eq!(smith_normal_form(&a), Err(Overflow));
        let huge = [i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1, 0, 1, -1];
        for &x in &huge {
            for &y in &huge {
                for &z in &huge {
                    let a = IntMatrix::from_rows(&[vec![x, y], vec![z, x], vec![y, z]]);
                    if let Ok(snf) = smith_normal_form(&a) {
                        assert_eq!(snf.u.mul(&a).and_then(|p| p.mul(&snf.v)), Ok(snf.s.clone()));
                    }
                }
            }
        }
        assert_eq!(extended_gcd(i64::MIN, 0), Err(Overflow));
        assert_eq!(extended_gcd(i64::MIN, i64::MIN), Err(Overflow));
        assert_eq!(extended_gcd(i64::MIN, 3).map(|t| t.0), Ok(1));
        let m = IntMatrix::from_rows(&[vec![i64::MAX]]);
        assert_eq!(m.mul(&IntMatrix::from_rows(&[vec![2]])), Err(Overflow));
    }

    #[test]
    fn extended_gcd_signs() {
        for a in -20i64..=20 {
            for b in -20i64..=20 {
                let (g, x, y) = extended_gcd(a, b).unwrap();
                assert_eq!(g, a.gcd(&b));
                assert_eq!(a * x + b * y, g);
            }
        }
    }
}
#[cfg(test)]
mod perf3 {
    use super::*;
    use rand::{Rng, SeedableRng};
    #[test]
    #[ignore]
    fn perf_split() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (n, m) = (6, 6);
        let mats: Vec<IntMatrix> = (0..500)
            .map(|_| {
                IntMatrix::from_vec(n, m, (0..n * m).map(|_| rng.gen_range(-30..=30)).collect())
                    .unwrap()
            })
            .collect();
        let mut t_kb = std::time::Duration::ZERO;
        let mut t_red = std::time::Duration::ZERO;
        for a in &mats {
            let t = std::time::Instant::now();
            let r = snf_generic::<i128>(a);
            let big = if r.is_none() {
                Some(snf_generic::<BigInt>(a).unwrap())
            } else {
                None
            };
            t_kb += t.elapsed();
            let t = std::time::Instant::now();
            let _ = match (r, big) {
                (Some((s, u, v, k)), _) => reduce_transforms(&s, &u, &v, k).is_some(),
                (None, Some((s, u, v, k))) => reduce_transforms(&s, &u, &v, k).is_some(),
                _ => unreachable!(),
            };
            t_red += t.elapsed();
        }
        println!("kb {:?} red {:?}", t_kb / 500, t_red / 500);
    }
}
#[cfg(test)]
mod perf {
    use super::*;
    use rand::{Rng, SeedableRng};
    #[test]
    #[ignore]
    fn perf_and_bits() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for (lo, hi, n, m) in [
            (-2i64, 2i64, 6usize, 6usize),
            (-30, 30, 6, 6),
            (-30, 30, 8, 8),
            (-30, 30, 5, 8),
            (-30, 30, 8, 5),
        ] {
            let mats: Vec<IntMatrix> = (0..500)
                .map(|_| {
                    IntMatrix::from_vec(n, m, (0..n * m).map(|_| rng.gen_range(lo..=hi)).collect())
                        .unwrap()
                })
                .collect();
            let t = std::time::Instant::now();
            let mut maxb = 0;
            for a in &mats {
                let s = smith_normal_form(a).unwrap();
                maxb = maxb.max(
                    s.u.data()
                        .iter()
                        .chain(s.v.data())
                        .map(|x| 64 - x.unsigned_abs().leading_zeros())
                        .max()
                        .unwrap(),
                );
            }
            println!(
                "{n}x{m} [{lo},{hi}]: {:?}/matrix, max bits {maxb}",
                t.elapsed() / 500
            );
        }
    }
}
#[cfg(test)]
mod dbg {
    use super::*;
    use rand::{Rng, SeedableRng};
    #[test]
    #[ignore]
    fn find_fail() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        for i in 0..1000 {
            let data: Vec<i64> = (0..64).map(|_| rng.gen_range(-30..=30)).collect();
            let a = IntMatrix::from_vec(8, 8, data).unwrap();
            if smith_normal_form(&a).is_err() {
                let r = snf_generic::<i128>(&a);
                println!("#{i} i128 kb ok: {}", r.is_some());
                if let Some((s, u, v, k)) = &r {
                    println!(
                        " reduce i128: {:?}",
                        reduce_transforms(s, u, v, *k).map(|x| x.is_ok())
                    );
                    let d: Vec<_> = (0..*k).map(|i| s.data[i * 8 + i]).collect();
                    println!(" div {d:?}");
                }
                let (s, u, v, k) = snf_generic::<BigInt>(&a).unwrap();
                let bits = |m: &Mat<BigInt>| m.data.iter().map(|x| x.bits()).max().unwrap();
                println!(" big kb bits u {} v {}", bits(&u), bits(&v));
                let lines = |m: &Mat<BigInt>, by_row: bool| -> Vec<Vec<BigInt>> {
                    let (l, p) = m.shape(by_row);
                    (0..l)
                        .map(|i| (0..p).map(|j| m.get(by_row, i, j).clone()).collect())
                        .collect()
                };
                let mut h = v.clone();
                let mut w = Mat::<BigInt>::from_int(&IntMatrix::identity(8));
                hermite(&mut h, &mut w, true).unwrap();
                let mut t = SmithTransforms {
                    div: (0..k).map(|i| s.data[i * 8 + i].clone()).collect(),
                    u: lines(&u, true),
                    v: lines(&v, false),
                    w: lines(&w, true),
                    rank: k,
                };
                t.reduce().unwrap();
                println!(
                    " after: u rows {:?}",
                    t.u.iter()
                        .map(|r| r.iter().map(|x| x.bits()).max().unwrap())
                        .collect::<Vec<_>>()
                );
                println!(
                    " after: v cols {:?}",
                    t.v.iter()
                        .map(|r| r.iter().map(|x| x.bits()).max().unwrap())
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}
