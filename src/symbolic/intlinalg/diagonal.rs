//! Diagonalisation for the Smith normal form over a checked ring.
//!
//! Owns the generic elimination behind [`super::smith_normal_form`]: the
//! [`Entry`] ring (`i128` with checked arithmetic, or [`BigInt`]), the
//! working matrix [`Mat`], row and column Hermite reduction and the
//! alternation that diagonalises (Alg. 1 with Alg. 2's Bézout step). Private
//! to [`super`]; it must not know about anything but integer matrices.

use super::IntMatrix;
use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{Signed, Zero};
use std::cmp::Ordering;
use std::fmt::Debug;

/// Alg. 2 on `i128`, checked (`None` only for inputs near `i128::MIN`).
pub(super) fn ext_gcd_i128(a: i128, b: i128) -> Option<(i128, i128, i128)> {
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
pub(super) trait Entry: Clone + PartialEq + Debug {
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
pub(super) struct Mat<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
}

impl<T: Entry> Mat<T> {
    pub(super) fn from_int(a: &IntMatrix) -> Self {
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

    pub(super) fn get(&self, by_row: bool, line: usize, pos: usize) -> &T {
        &self.data[self.ix(by_row, line, pos)]
    }

    /// (number of lines, length of a line)
    pub(super) fn shape(&self, by_row: bool) -> (usize, usize) {
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
pub(super) fn hermite<T: Entry>(s: &mut Mat<T>, w: &mut Mat<T>, by_row: bool) -> Option<()> {
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

pub(super) type SnfParts<T> = (Mat<T>, Mat<T>, Mat<T>, usize);

/// Diagonalises by alternating row and column Hermite reductions
/// (Kannan–Bachem), then enforces the divisibility chain (Alg. 1 steps
/// 30–37) with the Bézout step of Alg. 2. `None` when `T` overflows.
pub(super) fn snf_generic<T: Entry>(a: &IntMatrix) -> Option<SnfParts<T>> {
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
