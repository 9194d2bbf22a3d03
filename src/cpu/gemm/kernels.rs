//! Micro-kernels: one `mr × nr` tile of `C = alpha·A·B (+ C)` from two
//! packed panels, with its accumulators in registers, and the table that
//! picks one per element type and vector width.
//!
//! Owns the [`Kernel`] descriptions (register tile and cache blocks, chosen
//! by measurement on the hosts `BENCHMARKS.md` names), the portable kernel
//! every CPU runs, and [`Float::kernel`], which picks the AVX-512 or AVX2
//! kernels of `super::x86` from the width the element-wise code runs at
//! (`TENJIN_SIMD` forces the portable kernel with `f32x4`, so CI exercises
//! it on any host). Must not pack nor loop over blocks (`super::blis`).
//!
//! Every kernel sums its `kc` products in increasing `p` order, one chain
//! per output element, so an element's rounding depends on the blocking of
//! K only, never on where its tile lies nor on the thread that computes it.

use super::super::wide::Width;
use crate::dtype::Element;
use std::ops::{Add, Mul};

/// `(kc, a, rs_a, cs_a, b, ks_b, b_terms, c, rs_c, cs_c, alpha, accumulate,
/// m, n)`: computes the `mr × nr` tile `alpha · Σ_p a[i·rs_a + p·cs_a] ·
/// b[p·ks_b + j]` (each operand packed, `rs_a = 1, cs_a = mr` and `ks_b =
/// nr`, or read in place), or `… · b[b_terms[p] + j]` when `b_terms` is not
/// null (B's `nr` columns adjacent in memory, its terms through a table: a
/// convolution's windows read in place), and writes its first `m` rows and
/// `n` columns to `c + i·rs_c + j·cs_c`, added to what is there when
/// `accumulate` (otherwise `c` is not read). The sum runs in increasing
/// `p` either way, so both forms of B give the same bits.
pub(super) type KernelFn<T> = unsafe fn(
    usize,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    *const isize,
    *mut T,
    isize,
    isize,
    T,
    bool,
    usize,
    usize,
);

/// A micro-kernel and the blocking it is run with.
#[derive(Clone, Copy)]
pub(crate) struct Kernel<T: 'static> {
    /// Rows and columns of the register tile.
    pub mr: usize,
    pub nr: usize,
    /// Largest block of K (a packed B micro-panel of `kc × nr` stays in
    /// L1), of M (a packed `mc × kc` block of A stays in L2) and of N.
    pub kc: usize,
    pub mc: usize,
    pub nc: usize,
    pub run: KernelFn<T>,
    /// Kernels of the same columns and fewer rows, by rows ascending, for
    /// a last partial panel of A: its rows past M are not computed (a
    /// 12-row tile over M = 64 computes 72 rows without them). The same
    /// sums in the same order: the same bits.
    pub short: &'static [(usize, KernelFn<T>)],
    /// What `BENCHMARKS.md` and the tests call it.
    pub name: &'static str,
}

impl<T: 'static> Kernel<T> {
    /// The kernel for a panel of `rows` rows: the shortest that holds
    /// them.
    #[inline]
    pub fn run_for(&self, rows: usize) -> KernelFn<T> {
        self.short
            .iter()
            .find(|(mr, _)| rows <= *mr)
            .map_or(self.run, |&(_, run)| run)
    }
}

/// The element types the GEMM runs: f32 and f64.
pub(crate) trait Float:
    Element + PartialEq + Add<Output = Self> + Mul<Output = Self>
{
    /// The kernels at `width`: the wide one, and the narrow one for
    /// products of at most its `nr` columns when there is one.
    fn kernels_at(width: Width) -> (Kernel<Self>, Option<Kernel<Self>>);

    /// The kernel for this host ([`Width::host`]).
    fn kernel() -> Kernel<Self> {
        Self::kernels_at(Width::host()).0
    }

    /// The kernel for products of `n` columns: the narrow one when `n` is
    /// at most its `nr` and it wastes fewer lanes. Every kernel sums in
    /// the same order (`super::blis::k_block` depends on `kc`, which they
    /// share), so the choice never changes a result.
    fn kernel_for(n: usize) -> Kernel<Self> {
        match Self::kernels_at(Width::host()) {
            (wide, Some(narrow)) if n <= narrow.nr && n.next_multiple_of(wide.nr) > narrow.nr => {
                narrow
            }
            (wide, _) => wide,
        }
    }
}

/// `Float` for one type: its (wide, narrow) kernels at AVX-512 (the wide
/// one an expression: f32's depends on the CPU's vendor) and AVX2.
macro_rules! float {
    ($t:ty, $avx512:expr, $avx512_narrow:ident, $avx2:ident, $avx2_narrow:ident) => {
        impl Float for $t {
            fn kernels_at(width: Width) -> (Kernel<$t>, Option<Kernel<$t>>) {
                match width {
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx512 => ($avx512, Some(super::x86::$avx512_narrow)),
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx2 => (super::x86::$avx2, Some(super::x86::$avx2_narrow)),
                    _ => (portable(), None),
                }
            }
        }
    };
}

float!(
    f32,
    super::x86::avx512_f32_kernel(),
    AVX512_F32_NARROW,
    AVX2_F32,
    AVX2_F32_NARROW
);
float!(
    f64,
    super::x86::AVX512_F64,
    AVX512_F64_NARROW,
    AVX2_F64,
    AVX2_F64_NARROW
);

/// Rows and columns of the portable kernel's tile.
const PORTABLE_MR: usize = 4;
const PORTABLE_NR: usize = 8;

/// The portable kernel: plain Rust that the compiler vectorises at the
/// target's baseline (SSE2 on x86-64), for every CPU.
pub(super) fn portable<T: Float>() -> Kernel<T> {
    Kernel {
        mr: PORTABLE_MR,
        nr: PORTABLE_NR,
        kc: 256,
        mc: 128,
        nc: 2048,
        run: portable_kernel::<T>,
        short: &[],
        name: "portable 4x8",
    }
}

/// [`KernelFn`] in plain Rust.
///
/// # Safety
///
/// As for every [`KernelFn`]: the `mr × kc` elements of A are readable,
/// `b` holds `kc·nr` packed elements, and the `m × n` corner of the tile at
/// `c` is writable.
#[allow(clippy::too_many_arguments)]
unsafe fn portable_kernel<T: Float>(
    kc: usize,
    a: *const T,
    rs_a: isize,
    cs_a: isize,
    b: *const T,
    ks_b: isize,
    b_terms: *const isize,
    c: *mut T,
    rs_c: isize,
    cs_c: isize,
    alpha: T,
    accumulate: bool,
    m: usize,
    n: usize,
) {
    const MR: usize = PORTABLE_MR;
    const NR: usize = PORTABLE_NR;
    let mut acc = [[T::default(); NR]; MR];
    for p in 0..kc {
        let column = a.offset(p as isize * cs_a);
        let at = if b_terms.is_null() {
            p as isize * ks_b
        } else {
            *b_terms.add(p)
        };
        let bv = std::slice::from_raw_parts(b.offset(at), NR);
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = *column.offset(i as isize * rs_a);
            for (x, &bj) in row.iter_mut().zip(bv) {
                *x = *x + ai * bj;
            }
        }
    }
    let mut tile = [T::default(); MR * NR];
    for (i, row) in acc.iter().enumerate() {
        for (j, &x) in row.iter().enumerate() {
            tile[i * NR + j] = x * alpha;
        }
    }
    write_tile(&tile, NR, c, rs_c, cs_c, accumulate, m, n);
}

/// Writes the `m × n` corner of a scaled tile (rows of `nr`) to `c`:
/// the path of edge tiles and of outputs whose rows are not contiguous.
///
/// # Safety
///
/// `c + i·rs_c + j·cs_c` is writable (and readable when `accumulate`) for
/// `i < m`, `j < n`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn write_tile<T: Float>(
    tile: &[T],
    nr: usize,
    c: *mut T,
    rs_c: isize,
    cs_c: isize,
    accumulate: bool,
    m: usize,
    n: usize,
) {
    for i in 0..m {
        let row = c.offset(i as isize * rs_c);
        for j in 0..n {
            let dst = row.offset(j as isize * cs_c);
            let v = tile[i * nr + j];
            *dst = if accumulate { *dst + v } else { v };
        }
    }
}
