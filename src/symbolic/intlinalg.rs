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
//! `i128` arithmetic and recomputed with [`BigInt`] when an intermediate
//! value overflows (submodule `diagonal`); large transforms are then shrunk
//! by lattice reduction (submodule `reduce`). An [`Overflow`] is reported
//! only when a final entry does not fit in an `i64`. Nothing here panics on
//! numeric input; shape violations (an out-of-range index, ragged rows,
//! mismatched product dimensions) are programmer errors and panic like
//! slice indexing does.

use super::affine::Overflow;
use diagonal::{ext_gcd_i128, hermite, snf_generic, Entry, Mat};
use num_bigint::BigInt;
use num_rational::Ratio;
use num_traits::{One, ToPrimitive, Zero};
use reduce::{Coef, SmithTransforms};
use std::ops::Range;

mod diagonal;
mod reduce;

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

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
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

    /// The transpose.
    pub fn transpose(&self) -> IntMatrix {
        let mut out = IntMatrix::new(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.data[c * self.rows + r] = self.data[r * self.cols + c];
            }
        }
        out
    }

    /// Whether every entry is zero (true for empty matrices).
    pub fn is_zero(&self) -> bool {
        self.data.iter().all(|&x| x == 0)
    }

    /// Columns `range` as a new matrix. Panics when out of range.
    pub fn columns(&self, range: Range<usize>) -> IntMatrix {
        let mut out = IntMatrix::new(self.rows, range.len());
        for r in 0..self.rows {
            for (k, c) in range.clone().enumerate() {
                out.data[r * out.cols + k] = self.get(r, c);
            }
        }
        out
    }

    /// Rows `range` as a new matrix. Panics when out of range.
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

/// Smith normal form `S = U·A·V` (§4.1.1).
///
/// `s` is `N×M` diagonal with positive `s_ii` for `i < rank`, zero after,
/// and `s_ii | s_{i+1,i+1}`; `u` (`N×N`) and `v` (`M×M`) are unimodular.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snf {
    /// `N×M`, diagonal.
    pub s: IntMatrix,
    /// `N×N`, unimodular.
    pub u: IntMatrix,
    /// `M×M`, unimodular.
    pub v: IntMatrix,
    /// The number of non-zero diagonal entries.
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
/// (`SmithTransforms::reduce`), which keeps 8×8 inputs with entries up to
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
mod tests;
