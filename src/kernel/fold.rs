//! A contraction's batch dimensions folded into its M or N, as the CPU's
//! GEMM runs it.
//!
//! Owns [`Folded`] and [`Contraction::folded`]. A batch dimension that
//! only one factor reads, and that nests with M (or N) in the *output*
//! though not in that factor, is one more stretch of M's rows: the rows'
//! offsets in the factor come from a table (`Folded::row_offsets`), while
//! C's rows keep one stride. One product then computes what were many
//! small ones. A convolution over a padded image is the case in point:
//! its output rows `(y, x)` are 32 × 32 consecutive elements of the output,
//! but rows `y` of the padded image are 34 apart, so the contraction has
//! `x` as M and `y` as a batch of 32 products of 32 rows each; folded, it
//! is one product of 1,024 rows read straight from the image (implicit
//! GEMM). A GPU's cuBLAS takes uniform strides only and runs the batch as
//! it is. Must not decide what is a contraction (`crate::planner`) nor run
//! one (`crate::cpu::gemm`).

use super::backend::Target;
use super::contraction::{Contraction, Dim};
use crate::DType;

/// Below this many rows, M is folded even when its factor could be read
/// in place (a GEMM call on few rows costs more than packing them).
const FOLD_ROWS_BELOW: usize = 128;

/// A contraction's M and N with the batch dimensions folded into them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// M's dimensions, outermost first (the contraction's `m` is one of
    /// them): `m_len` rows whose output offsets are `r · m_out`.
    pub m: Vec<Dim>,
    /// N's dimensions, likewise.
    pub n: Vec<Dim>,
    /// The batch dimensions left: one product each.
    pub batch: Vec<Dim>,
    /// K's summed dimensions, outermost first: the terms of one product.
    /// With several, the widest-spread outermost and the narrowest
    /// innermost, whatever their lengths, so that consecutive terms lie
    /// closest in memory (the weight gradient of a stride-2 convolution
    /// sums 32 images of 16 × 16 positions: the images outermost, not
    /// its longest dimension innermost, whose terms are 69,696 elements
    /// apart and pack one at a time).
    pub k: Vec<Dim>,
}

impl Folded {
    /// Rows of M (or N) in `dims`.
    pub fn len(dims: &[Dim]) -> usize {
        dims.iter().map(|d| d.len).product()
    }

    /// The output stride of the rows of `dims` (the innermost's).
    pub fn out_stride(dims: &[Dim]) -> isize {
        dims.last().map_or(0, |d| d.out)
    }

    /// The offsets in a factor of the rows of `dims` (the factor's stride
    /// of each dimension is `stride(d)`), in the order of their output
    /// offsets; `None` when `dims` is one dimension, whose stride does.
    pub fn row_offsets(dims: &[Dim], stride: fn(&Dim) -> isize) -> Option<Vec<isize>> {
        if dims.len() <= 1 {
            return None;
        }
        let mut offsets = vec![0isize];
        for d in dims {
            let s = stride(d);
            offsets = offsets
                .iter()
                .flat_map(|&o| (0..d.len as isize).map(move |i| o + i * s))
                .collect();
        }
        Some(offsets)
    }
}

impl Contraction {
    /// The contraction's batch dimensions folded into M and N where they
    /// nest there in the output (see the module documentation). M is left
    /// alone when its factor is read in place (contiguous along K, with at
    /// least [`FOLD_ROWS_BELOW`] rows), and nothing is folded in a
    /// symmetric product or a product of bf16 pairs, whose packing and
    /// triangles assume uniform rows. K's summed dimensions are ordered by
    /// spread, the narrowest innermost, when the planner's K does not
    /// pack in runs (terms 1 or 2 apart in both factors) and another one
    /// does (`Folded::k`; measured: the weight gradient of a stride-2
    /// convolution 7.4 → 5.9 ms; a flipped one, whose taps run backwards,
    /// keeps its order). The fold depends on the shape alone, never on
    /// the threads.
    ///
    /// ```
    /// use tenjin::planner::contraction::detect;
    /// use tenjin::symbolic::IndexFn;
    /// // A 3×3 convolution over a zero-padded 6×6 image: rows of the
    /// // output are 4 apart, rows of the image 6.
    /// let f = IndexFn::parse_with_sizes(
    ///     "y[o; t; u] = sum{c}_0^1 (sum{k}_0^2 (sum{l}_0^2 (w[o; c; k; l] * x[c; t + k; u + l])))",
    ///     &[("w", &[3, 2, 3, 3][..]), ("x", &[2, 6, 6][..])],
    ///     &[("t", 4), ("u", 4)],
    /// )?;
    /// let c = detect(&f).expect("a contraction");
    /// assert_eq!(c.gemm_shape()[0], 24); // 4 rows × 6 taps: 24 products
    /// // One product: 3 rows (o), 16 columns (t, u), 18 terms (c, k, l).
    /// assert!(c.folded().batch.is_empty());
    /// assert_eq!(c.folded_shape(), [1, 3, 16, 18]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn folded(&self) -> Folded {
        let mut k: Vec<Dim> = self.k_outer.iter().copied().chain([self.k]).collect();
        let packs_in_runs = |d: &Dim| (1..=2).contains(&d.a) && (1..=2).contains(&d.b);
        if !packs_in_runs(&self.k) && self.k_outer.iter().any(packs_in_runs) {
            // (Stable: equal spreads keep the planner's order.)
            k.sort_by_key(|d| {
                std::cmp::Reverse(d.a.unsigned_abs().saturating_add(d.b.unsigned_abs()))
            });
        }
        let mut folded = Folded {
            m: vec![self.m],
            n: vec![self.n],
            batch: Vec::new(),
            k,
        };
        let plain = self.symmetric || self.half_operands == Some(DType::BF16);
        let a_in_place = self.k_outer.is_empty() && self.k.a == 1 && self.m.len >= FOLD_ROWS_BELOW;
        for &d in &self.batch {
            let into_m = d.b == 0 && !a_in_place;
            let into_n = d.a == 0;
            let folds = !plain
                && d.d == 0
                && ((into_m && join(&mut folded.m, d)) || (into_n && join(&mut folded.n, d)));
            if !folds {
                folded.batch.push(d);
            }
        }
        folded
    }

    /// `[calls, m, n, k]` of the CPU's GEMM: [`Contraction::gemm_shape`]
    /// with the batch folded ([`Contraction::folded`]) and every summed
    /// dimension in one K.
    pub fn folded_shape(&self) -> [usize; 4] {
        let f = self.folded();
        [
            Folded::len(&f.batch),
            Folded::len(&f.m),
            Folded::len(&f.n),
            self.k_total,
        ]
    }
}

impl Contraction {
    /// `[calls, m, n, k]` of the products `target` runs: the CPU's GEMM
    /// folded ([`Contraction::folded_shape`]), a GPU's cuBLAS calls
    /// ([`Contraction::gemm_shape`]).
    pub fn gemm_shape_on(&self, target: Target) -> [usize; 4] {
        match target {
            Target::Cpu => self.folded_shape(),
            Target::Gpu => self.gemm_shape(),
        }
    }
}

/// Adds `d` to the rows `chain` (outermost first) when it continues them
/// in the output, outside or inside.
fn join(chain: &mut Vec<Dim>, d: Dim) -> bool {
    let (Some(&outer), Some(&inner)) = (chain.first(), chain.last()) else {
        return false;
    };
    if outer.len <= 1 || d.len <= 1 {
        return false;
    }
    let span = |x: Dim| {
        isize::try_from(x.len)
            .ok()
            .and_then(|l| x.out.checked_mul(l))
    };
    if span(outer) == Some(d.out) && d.out != 0 {
        chain.insert(0, d);
        true
    } else if span(d) == Some(inner.out) && inner.out != 0 {
        chain.push(d);
        true
    } else {
        false
    }
}
