//! A contraction's description: a batched matrix product over strided
//! views of the argument buffers, as a backend runs it.
//!
//! Owns [`Contraction`] (which loop dimensions are batch, M, N and K, their
//! strides in elements, the scale) and `Dim`. The planner recognises
//! contractions and builds these (`crate::planner::contraction::detect`);
//! the CPU backend runs them with the `gemm` crate, a GPU backend with
//! cuBLAS. Must not decide what is a contraction, nor run one.

/// One (possibly fused) loop dimension: its length and its stride, in
/// elements, in the first operand, the second operand and the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dim {
    pub(crate) len: usize,
    pub(crate) a: isize,
    pub(crate) b: isize,
    pub(crate) out: isize,
}

impl Dim {
    /// A dimension of length 1 (a role with no variable).
    pub(crate) const UNIT: Dim = Dim {
        len: 1,
        a: 0,
        b: 0,
        out: 0,
    };

    /// `self` as the outer and `inner` as the inner part of one strided
    /// dimension, when the strides nest in every operand and the output.
    pub(crate) fn fuse(self, inner: Dim) -> Option<Dim> {
        let l = isize::try_from(inner.len).ok()?;
        let nests = |outer: isize, inner: isize| inner.checked_mul(l) == Some(outer);
        if nests(self.a, inner.a) && nests(self.b, inner.b) && nests(self.out, inner.out) {
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
/// over strided views of the argument buffers.
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
    /// Extra summed dimensions, accumulated into the output slice.
    pub(crate) k_outer: Vec<Dim>,
    /// Number of terms of each sum (0: the output is all zeros).
    pub(crate) k_total: usize,
    /// Constant factor folded from the expression (gemm's `beta`).
    pub(crate) scale: f64,
    pub(crate) threads: usize,
}

impl Contraction {
    /// Floating-point operations of one run: `2 · |output| · |summed range|`.
    pub fn flops(&self) -> usize {
        self.out_len.saturating_mul(self.k_total).saturating_mul(2)
    }

    /// Threads a GEMM may use per call (the CPU backend's tiling);
    /// `0` is treated as 1.
    pub fn set_threads(&mut self, n: usize) {
        self.threads = n.max(1);
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
