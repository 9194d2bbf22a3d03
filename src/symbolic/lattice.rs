//! Integer lattices: solving `A·α = β` over the integers in a readable basis.
//!
//! Owns [`solve_lattice`] and its [`LatticeSolution`] (§4.1 of Urban & van
//! der Smagt: the cokernel condition, the divisibility of `U·β`, a
//! particular solution and the kernel), rewritten by unimodular changes of
//! basis so that generated loops read naturally: the kernel in a Hermite
//! echelon form whose pivots sit at the latest coordinates, the particular
//! part reduced modulo it. It builds on [`super::intlinalg`] and must not
//! know about affine forms, inequalities, index functions or devices.

use super::affine::Overflow;
use super::intlinalg::{smith_normal_form, IntMatrix};
use num_integer::Integer;

/// The integer solutions of `A·α = β` (`A` is `N×M`, `β ∈ Z^N` symbolic).
///
/// `A·α = β` has a solution iff `C·β = 0` and every `w_i = (u_i·β)/s_i` is an
/// integer; the solutions are then exactly `α = particular·w + kernel·z`
/// for all `z ∈ Z^(M−R)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatticeSolution {
    /// The rank `R` of `A`.
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
    ///
    /// # Panics
    /// When `beta` does not have `N` entries.
    pub fn particular_solution(&self, beta: &[i64]) -> Result<Option<Vec<i64>>, Overflow> {
        assert_eq!(beta.len(), self.u_rows.cols(), "β must have N entries");
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
            if let Some(p) = c.iter().position(|&x| x != 0) {
                let q = Integer::div_floor(&row[p], &c[p]);
                sub_multiple(row, q, c)?;
            }
        }
        if row.iter().find(|&&x| x != 0).is_some_and(|&x| x < 0) {
            negate(row)?;
            negate(col)?;
        }
        for (k, &p) in kern.iter().zip(&pivots).rev() {
            if k[p] != 0 {
                let q = Integer::div_floor(&col[p], &k[p]);
                sub_multiple(col, q, k)?;
            }
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
        (a.checked_neg(), b.checked_neg())
    } else {
        (Some(a), Some(b))
    };
    let (num, den) = a
        .zip(b)
        .and_then(|(a, b)| Some((a.checked_mul(2)?.checked_add(b)?, b.checked_mul(2)?)))
        .ok_or(Overflow)?;
    Ok(Integer::div_floor(&num, &den))
}

/// `line ← −line`, checked.
fn negate(line: &mut [i128]) -> Result<(), Overflow> {
    for x in line {
        *x = x.checked_neg().ok_or(Overflow)?;
    }
    Ok(())
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
                negate(&mut lines[p])?;
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
fn row_hermite(rows: &mut [Vec<i128>]) -> Result<(), Overflow> {
    let len = rows.first().map_or(0, Vec::len);
    let mut done = 0;
    for c in 0..len {
        let idx: Vec<usize> = (done..rows.len()).collect();
        let Some(p) = gcd_at(rows, &idx, c)? else {
            continue;
        };
        rows.swap(done, p);
        let pivot = rows[done].clone();
        for row in &mut rows[..done] {
            let q = Integer::div_floor(&row[c], &pivot[c]);
            sub_multiple(row, q, &pivot)?;
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

#[cfg(test)]
mod tests;
