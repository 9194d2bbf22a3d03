//! A contraction's description: a batched matrix product over strided
//! views of the argument buffers, as a backend runs it.
//!
//! Owns [`Contraction`] (which loop dimensions are batch, M, N and K, their
//! strides in elements, the scale) and `Dim`. The planner recognises
//! contractions and builds these (`crate::planner::contraction::detect`);
//! the CPU backend runs them with its own GEMM, a GPU backend with
//! cuBLAS. Must not decide what is a contraction, nor run one.

use crate::DType;

/// One (possibly fused) loop dimension: its length and its stride, in
/// elements, in the first operand, the second operand, the output and the
/// diagonal factor (0 when there is none, or it does not vary along it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim {
    pub(crate) len: usize,
    pub(crate) a: isize,
    pub(crate) b: isize,
    pub(crate) out: isize,
    pub(crate) d: isize,
}

impl Dim {
    /// A dimension of length 1 (a role with no variable).
    pub(crate) const UNIT: Dim = Dim {
        len: 1,
        a: 0,
        b: 0,
        out: 0,
        d: 0,
    };

    /// `self` as the outer and `inner` as the inner part of one strided
    /// dimension, when the strides nest in every operand and the output.
    pub(crate) fn fuse(self, inner: Dim) -> Option<Dim> {
        let l = isize::try_from(inner.len).ok()?;
        let nests = |outer: isize, inner: isize| inner.checked_mul(l) == Some(outer);
        if nests(self.a, inner.a)
            && nests(self.b, inner.b)
            && nests(self.out, inner.out)
            && nests(self.d, inner.d)
        {
            Some(Dim {
                len: self.len.checked_mul(inner.len)?,
                ..inner
            })
        } else {
            None
        }
    }
}

/// A plan that computes an `IndexFn` recognised by `crate::planner::contraction::detect` with calls
/// to a GEMM: `out[batch; m; n] = scale · Σ_k a[batch; m; k] · b[batch; k; n]`
/// over strided views of the argument buffers, or, recognised by
/// `detect_scaled` for the CPU, `scale · Σ_k a[batch; m; k] · d[k] ·
/// b[batch; k; n]` with a diagonal factor `d` read at the summed indices
/// only (`Xᵀ·diag(d)·X`).
#[derive(Clone, Debug)]
pub struct Contraction {
    /// Argument numbers (into `f.args()`) of the two factors.
    pub(crate) arg_a: usize,
    pub(crate) arg_b: usize,
    /// Declared length of every argument buffer, and of the output.
    pub(crate) arg_lens: Vec<usize>,
    pub(crate) out_len: usize,
    /// Offset (elements) of the first element each operand reads.
    pub(crate) base_a: usize,
    pub(crate) base_b: usize,
    /// The dimensions handed to gemm (`Dim::UNIT` where a role is empty).
    pub(crate) m: Dim,
    pub(crate) n: Dim,
    pub(crate) k: Dim,
    /// Outer loops, each iteration writing a distinct output slice.
    pub(crate) batch: Vec<Dim>,
    /// Extra summed dimensions: the CPU folds them into K (one product
    /// sums every term), a GPU accumulates a call per point into the
    /// output slice.
    pub(crate) k_outer: Vec<Dim>,
    /// Number of terms of each sum (0: the output is all zeros).
    pub(crate) k_total: usize,
    /// Constant factor folded from the expression (gemm's `beta`).
    pub(crate) scale: f64,
    /// The diagonal factor, when there is one (its strides are the `d`
    /// of the dimensions).
    pub(crate) diag: Option<Diag>,
    /// Whether `out[…; m; n] = out[…; n; m]` by construction: both factors
    /// are the same view with M and N swapped (`Σ_i x[i; a] · x[i; b]`,
    /// with or without a diagonal factor), so one triangle is computed and
    /// mirrored.
    pub(crate) symmetric: bool,
    /// An argument read at the output index alone that the product is
    /// added to (`Σ_k a·b + c[i; j]`): a GPU runs cuBLAS's `beta = 1`
    /// over it (in place when it may write over it, else over a copy).
    /// Only GPU routes set it (`planner::route_for`).
    pub(crate) accumulate: Option<usize>,
    pub(crate) threads: usize,
    /// The half type the operands' values are of, when they are (widened
    /// to f32): a CPU with `avx512_bf16` then multiplies bf16 ones as bf16
    /// pairs, and a GPU either type on its tensor cores, with f32
    /// accumulation (`Contraction::set_half_operands`).
    pub(crate) half_operands: Option<DType>,
}

/// The diagonal factor of a scaled contraction: its argument number and
/// the offset (elements) of its first element read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diag {
    pub(crate) arg: usize,
    pub(crate) base: usize,
}

impl Contraction {
    /// The same contraction with its factors' roles exchanged: `Cᵀ = Bᵀ·Aᵀ`
    /// as a product whose M is this one's N (the same terms summed in the
    /// same order for every element).
    pub(crate) fn swapped(&self) -> Contraction {
        let swap = |d: &Dim| Dim {
            a: d.b,
            b: d.a,
            ..*d
        };
        Contraction {
            arg_a: self.arg_b,
            arg_b: self.arg_a,
            base_a: self.base_b,
            base_b: self.base_a,
            m: swap(&self.n),
            n: swap(&self.m),
            k: swap(&self.k),
            batch: self.batch.iter().map(swap).collect(),
            k_outer: self.k_outer.iter().map(swap).collect(),
            ..self.clone()
        }
    }

    /// Floating-point operations of one run: `2 · |output| · |summed range|`.
    pub fn flops(&self) -> usize {
        self.out_len.saturating_mul(self.k_total).saturating_mul(2)
    }

    /// Threads a GEMM may use per call (the CPU backend's tiling);
    /// `0` is treated as 1.
    pub fn set_threads(&mut self, n: usize) {
        self.threads = n.max(1);
    }

    /// Marks the operands as values of the half type `half` held in f32
    /// (the product of an op on tensors of that type, `crate::ops::half`),
    /// or unmarks them (`None`). A CPU with `avx512_bf16` then rounds bf16
    /// ones to bf16 as it packs them (exact for such values) and
    /// multiplies them with `vdpbf16ps`; a GPU runs either type's products
    /// on its tensor cores (cuBLAS's `CUBLAS_COMPUTE_32F_FAST_16BF` and
    /// `_16F`); both accumulate in f32.
    pub fn set_half_operands(&mut self, half: Option<DType>) {
        self.half_operands = half;
    }

    /// The thread count set by [`Contraction::set_threads`] (default 1).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// `[calls, m, n, k]`: the number of gemm calls one run makes and the
    /// size of each, for callers that prefer their own kernel for many tiny
    /// products.
    pub fn gemm_shape(&self) -> [usize; 4] {
        let calls = self
            .batch
            .iter()
            .chain(&self.k_outer)
            .fold(1usize, |acc, d| acc.saturating_mul(d.len));
        [calls, self.m.len, self.n.len, self.k.len]
    }
}

/// How one matrix operand is stored for a column-major BLAS: transposed
/// or not, and its leading dimension.
fn blas_layout(
    rows: usize,
    row_stride: isize,
    cols: usize,
    col_stride: isize,
) -> Option<(bool, usize)> {
    let fits = |ld: usize, min: usize| (ld >= min.max(1)).then_some(ld);
    if rows <= 1 || row_stride == 1 {
        // Column-major as it is: (r, c) at r + c·ld.
        let ld = if cols <= 1 {
            rows.max(1)
        } else {
            usize::try_from(col_stride).ok()?
        };
        return fits(ld, rows).map(|ld| (false, ld));
    }
    if cols <= 1 || col_stride == 1 {
        // Its transpose is column-major: (r, c) at c + r·ld.
        let ld = usize::try_from(row_stride).ok()?;
        return fits(ld, cols).map(|ld| (true, ld));
    }
    None
}

/// A contraction as column-major BLAS calls (cuBLAS's
/// `gemmStridedBatched`): `C = alpha·op(A)·op(B) + beta·C` per call, with
/// the other batch dimensions and the extra summed dimensions as loops
/// around the calls (`beta` is 1 after the first summed slice).
#[derive(Clone, Debug, PartialEq)]
pub struct BlasPlan {
    /// Whether BLAS's `A` is the contraction's second operand: the output
    /// is row-major, so `Cᵀ = Bᵀ·Aᵀ` is computed.
    pub swapped: bool,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// The strided batch: how many products, and the element strides of
    /// `A`, `B` and `C` between them.
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
    /// The remaining batch dimensions: one call per point, each writing
    /// its own slice (strides relative to the contraction's operands).
    pub outer: Vec<Dim>,
    /// `alpha` (the contraction's scale).
    pub alpha: f64,
}

impl Contraction {
    /// The contraction as column-major BLAS calls, when every matrix has a
    /// unit stride in one dimension and non-negative strides (transposes
    /// and leading dimensions absorb the rest), and the sizes fit BLAS's
    /// 32-bit integers; `None` otherwise (a reversed or doubly strided
    /// view: the planner then routes the function to a loop kernel).
    ///
    /// ```
    /// use tenjin::planner::contraction::detect;
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j])",
    ///                        &[("a", &[32, 64][..]), ("b", &[64, 16][..])])?;
    /// let p = detect(&f).unwrap().blas().unwrap();
    /// // A row-major product is Cᵀ = Bᵀ·Aᵀ for a column-major BLAS.
    /// assert!(p.swapped && (p.m, p.n, p.k) == (16, 32, 64));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn blas(&self) -> Option<BlasPlan> {
        if self.diag.is_some() {
            return None; // a BLAS call has no diagonal factor
        }
        let (m, n, k) = (self.m, self.n, self.k);
        let direct = m.len <= 1 || m.out == 1;
        let swapped = !direct && (n.len <= 1 || n.out == 1);
        if !direct && !swapped {
            return None;
        }
        // (rows, cols) of C, op(A), op(B) in BLAS terms, with the strides
        // of the operands they come from.
        let (rows, cols) = if swapped { (n, m) } else { (m, n) };
        let c_ld = if cols.len <= 1 {
            rows.len.max(1)
        } else {
            usize::try_from(cols.out).ok()?
        };
        if c_ld < rows.len.max(1) {
            return None;
        }
        let (trans_a, lda, trans_b, ldb) = if swapped {
            // A = Bᵀ: (n, k) from the second operand; B = Aᵀ: (k, m).
            let (ta, lda) = blas_layout(n.len, n.b, k.len, k.b)?;
            let (tb, ldb) = blas_layout(k.len, k.a, m.len, m.a)?;
            (ta, lda, tb, ldb)
        } else {
            let (ta, lda) = blas_layout(m.len, m.a, k.len, k.a)?;
            let (tb, ldb) = blas_layout(k.len, k.b, n.len, n.b)?;
            (ta, lda, tb, ldb)
        };
        // The strided batch: the longest batch dimension with
        // non-negative strides.
        let stride = |d: &Dim| {
            let (sa, sb) = if swapped { (d.b, d.a) } else { (d.a, d.b) };
            Some((
                usize::try_from(sa).ok()?,
                usize::try_from(sb).ok()?,
                usize::try_from(d.out).ok()?,
            ))
        };
        let mut outer = self.batch.clone();
        let chosen = (0..outer.len())
            .filter(|&i| stride(&outer[i]).is_some())
            .max_by_key(|&i| outer[i].len);
        let (batch, (stride_a, stride_b, stride_c)) = match chosen {
            Some(i) => {
                let d = outer.remove(i);
                (d.len, stride(&d)?)
            }
            None => (1, (0, 0, 0)),
        };
        let small = |x: usize| x <= i32::MAX as usize;
        let all = [rows.len, cols.len, k.len, lda, ldb, c_ld, batch];
        if !all.into_iter().all(small) {
            return None;
        }
        Some(BlasPlan {
            swapped,
            trans_a,
            trans_b,
            m: rows.len,
            n: cols.len,
            k: k.len,
            lda,
            ldb,
            ldc: c_ld,
            batch,
            stride_a,
            stride_b,
            stride_c,
            outer,
            alpha: self.scale,
        })
    }

    /// The operands' argument numbers (first, second) and their base
    /// offsets in elements.
    pub fn operands(&self) -> [(usize, usize); 2] {
        [(self.arg_a, self.base_a), (self.arg_b, self.base_b)]
    }

    /// Whether the output is symmetric in M and N by construction (see
    /// [`Contraction`]); the CPU computes one triangle and mirrors it.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    /// Whether the product has a diagonal factor (`Σ_k a·d[k]·b`).
    pub fn has_diagonal(&self) -> bool {
        self.diag.is_some()
    }

    /// The extra summed dimensions (accumulated by calls with `beta = 1`).
    pub fn k_outer(&self) -> &[Dim] {
        &self.k_outer
    }

    /// Elements of the output.
    pub fn out_len(&self) -> usize {
        self.out_len
    }
}

/// The element offsets (first operand, second operand, output) of point
/// `flat` of the loop nest `dims` (row-major, the last dimension fastest).
pub fn offsets(dims: &[Dim], mut flat: usize) -> (isize, isize, isize) {
    let (mut a, mut b, mut o) = (0isize, 0isize, 0isize);
    for d in dims.iter().rev() {
        let i = (flat % d.len) as isize;
        flat /= d.len;
        a += i * d.a;
        b += i * d.b;
        o += i * d.out;
    }
    (a, b, o)
}

/// The element offset in the diagonal factor of point `flat` of `dims`
/// (as [`offsets`]).
pub fn diag_offset(dims: &[Dim], mut flat: usize) -> isize {
    let mut d = 0isize;
    for dim in dims.iter().rev() {
        d += (flat % dim.len) as isize * dim.d;
        flat /= dim.len;
    }
    d
}
