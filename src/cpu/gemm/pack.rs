//! Packing: copying a block of an operand view into the contiguous
//! micro-panels a micro-kernel reads.
//!
//! Owns [`Index`] (where the `p`-th term of K, or the `r`-th row, lies in
//! an operand: a stride, or a table of offsets when it runs over several
//! dimensions: the channels and taps of a convolution's window read
//! straight from the image, or the positions of its output rows in a
//! padded image) and [`pack_panels`], the one packing routine for both
//! operands: a block of `rows × kc` elements of a view (any strides, zero
//! for a broadcast, negative for a reversed view, or tables) becomes panels of `width` rows,
//! each holding, for every `p` in `0..kc`, the `width` values of column `p`
//! side by side, with zeros past the last row. The left operand is packed
//! as it is (rows of A), the right one through its transpose (columns of
//! B). Must not choose block sizes nor compute.

use super::pack_transposed;
use crate::dtype::{DType, Element};

/// Where term `p` of K (or row `p`) lies in an operand, relative to its
/// origin.
#[derive(Clone, Copy, Debug)]
pub(super) enum Index {
    /// At `p · stride`.
    Stride(isize),
    /// At `table[p]`.
    Table(*const isize),
}

impl Index {
    /// The offset of term `p`.
    ///
    /// # Safety
    ///
    /// A table holds at least `p + 1` entries.
    #[inline(always)]
    pub(super) unsafe fn at(self, p: usize) -> isize {
        match self {
            Index::Stride(s) => p as isize * s,
            Index::Table(t) => *t.add(p),
        }
    }

    /// The index of the terms (rows) from `p0` on, and the offset to add to
    /// the operand's pointer for them (a table keeps absolute offsets).
    ///
    /// # Safety
    ///
    /// A table holds at least `p0` entries.
    pub(super) unsafe fn from(self, p0: usize) -> (Index, isize) {
        match self {
            Index::Stride(s) => (self, p0 as isize * s),
            Index::Table(t) => (Index::Table(t.add(p0)), 0),
        }
    }

    /// The stride, when the offsets are one.
    pub(super) fn stride(self) -> Option<isize> {
        match self {
            Index::Stride(s) => Some(s),
            Index::Table(_) => None,
        }
    }

    /// Whether the `n` offsets from `p0` are consecutive, `+1` (`Some(false)`)
    /// or `−1` (`Some(true)`) apart.
    ///
    /// # Safety
    ///
    /// A table holds at least `p0 + n` entries.
    #[inline(always)]
    pub(super) unsafe fn adjacent(self, p0: usize, n: usize) -> Option<bool> {
        match self {
            Index::Stride(1) => Some(false),
            Index::Stride(-1) => Some(true),
            Index::Stride(_) => None,
            Index::Table(t) => {
                let first = *t.add(p0);
                let run = |step: isize| (1..n).all(|i| *t.add(p0 + i) == first + i as isize * step);
                if run(1) {
                    Some(false)
                } else if run(-1) {
                    Some(true)
                } else {
                    None
                }
            }
        }
    }
}

/// Calls `$f::<T, W>($args…)` for `W` the width of a kernel's panels (the
/// kernels of `super::kernels` and `super::x86` have no other; the tests
/// run every one).
macro_rules! by_width {
    ($width:expr, $f:ident, ($($arg:expr),*)) => {
        match $width {
            4 => $f::<T, 4>($($arg),*),
            6 => $f::<T, 6>($($arg),*),
            8 => $f::<T, 8>($($arg),*),
            12 => $f::<T, 12>($($arg),*),
            16 => $f::<T, 16>($($arg),*),
            32 => $f::<T, 32>($($arg),*),
            w => unreachable!("no GEMM kernel has panels of {w} rows"),
        }
    };
}

/// Packs `rows × kc` elements of the view whose element `(r, p)` is at
/// `src + row.at(r) + k.at(p)` into `rows.div_ceil(width)` panels of
/// `width × kc` elements at `dst`: panel `q` holds element `(q·width + i,
/// p)` at `q·width·kc + p·width + i`, and zero where `q·width + i ≥ rows`.
///
/// # Safety
///
/// Every element of the view is readable (tables hold `rows` and `kc`
/// entries), `dst` has room for `rows.div_ceil(width) · width · kc`
/// elements, and the two do not overlap.
pub(super) unsafe fn pack_panels<T: Element>(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const T,
    row: Index,
    k: Index,
    dst: *mut T,
) {
    // Each kind of index gets its own copy of the loops (contiguous K
    // visibly so, for the compiler).
    match k {
        Index::Stride(1) => pack_with(width, rows, kc, src, row, |p| p as isize, dst),
        Index::Stride(s) => pack_with(width, rows, kc, src, row, |p| p as isize * s, dst),
        Index::Table(t) => pack_with(width, rows, kc, src, row, |p| *t.add(p), dst),
    }
}

/// [`pack_panels`] with the K offsets as a function.
#[inline(always)]
unsafe fn pack_with<T: Element, K: Fn(usize) -> isize + Copy>(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const T,
    row: Index,
    k: K,
    dst: *mut T,
) {
    // Rows far apart, gathered by register transposes (their terms in
    // runs, checked sixteen at a time).
    let transposed = width >= 8 && T::DTYPE == DType::F32 && pack_transposed::available();
    let mut r0 = 0;
    let mut panel = dst;
    while r0 < rows {
        let live = width.min(rows - r0);
        let first = src.wrapping_offset(row.at(r0));
        match row.adjacent(r0, live) {
            // The panel's rows are adjacent: each column is one copy, and
            // a reversal when they are adjacent backwards (a convolution's
            // input gradient reads its padded output gradient so).
            Some(rev) if live == width => {
                let start = if rev {
                    first.wrapping_offset(1 - width as isize)
                } else {
                    first
                };
                by_width!(width, copy_columns, (kc, start, rev, k, panel))
            }
            // Two runs of 16 rows at stride 2 (a stride-2 convolution's
            // output rows over its padded image): a permute per run.
            _ if live == width && stride_two_halves::<T>(width, row, r0) => {
                let half = |h: usize| src.wrapping_offset(row.at(r0 + 16 * h)) as *const f32;
                stride_two::copy_halves(kc, [half(0), half(1)], k, panel as *mut f32)
            }
            _ if transposed => {
                let starts: [*const f32; 32] = std::array::from_fn(|i| {
                    src.wrapping_offset(row.at(r0 + i.min(live - 1))) as *const f32
                });
                let rows = &starts[..live];
                pack_transposed::gather_panel(width, live, kc, rows, k, panel as *mut f32)
            }
            _ => by_width!(width, gather_rows, (live, kc, src, row, r0, k, panel)),
        }
        if live < width {
            for p in 0..kc {
                for i in live..width {
                    *panel.add(p * width + i) = T::default();
                }
            }
        }
        panel = panel.add(width * kc);
        r0 += width;
    }
}

/// Whether the panel of `width` rows from `r0` is two runs of 16 f32 rows
/// at stride 2, on a host with AVX-512 (`stride_two::copy_halves`).
///
/// # Safety
///
/// A table holds at least `r0 + width` entries.
unsafe fn stride_two_halves<T: Element>(width: usize, row: Index, r0: usize) -> bool {
    if width != 32 || T::DTYPE != DType::F32 || !stride_two::available() {
        return false;
    }
    (0..2).all(|h| {
        let first = row.at(r0 + 16 * h);
        (1..16).all(|i| row.at(r0 + 16 * h + i) == first + 2 * i as isize)
    })
}

/// Packing rows at stride 2 with AVX-512 permutes.
#[cfg(target_arch = "x86_64")]
mod stride_two {
    use std::arch::x86_64::*;

    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }

    /// One panel of 32 rows, two runs of 16 at stride 2 from `first[0]` and
    /// `first[1]`: per term `p`, each run's 31 values from `first + k(p)`
    /// (the last one not read past), every other one kept by one permute.
    ///
    /// # Safety
    ///
    /// As for `super::pack_panels`, for one panel; `available()`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn copy_halves(
        kc: usize,
        first: [*const f32; 2],
        k: impl Fn(usize) -> isize,
        panel: *mut f32,
    ) {
        let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        for p in 0..kc {
            let at = k(p);
            for (h, run) in first.iter().enumerate() {
                let base = run.wrapping_offset(at);
                let lo = _mm512_loadu_ps(base);
                let hi = _mm512_maskz_loadu_ps(0x7fff, base.wrapping_add(16));
                let v = _mm512_permutex2var_ps(lo, even, hi);
                _mm512_storeu_ps(panel.add(p * 32 + 16 * h), v);
            }
        }
    }
}

/// No permutes off x86-64: the gathers pack every panel.
#[cfg(not(target_arch = "x86_64"))]
mod stride_two {
    pub(super) fn available() -> bool {
        false
    }
    pub(super) unsafe fn copy_halves(
        _: usize,
        _: [*const f32; 2],
        _: impl Fn(usize) -> isize,
        _: *mut f32,
    ) {
        unreachable!("no stride-2 permutes off x86-64 (`available` is false)")
    }
}

/// One full panel whose rows are adjacent, from `start` (row stride 1),
/// or adjacent backwards, the panel's last row at `start` (`reversed`,
/// row stride −1): a fixed-size copy per column, reversed in the second
/// case.
///
/// # Safety
///
/// As for [`pack_panels`], for one panel.
unsafe fn copy_columns<T: Copy, const W: usize>(
    kc: usize,
    start: *const T,
    reversed: bool,
    k: impl Fn(usize) -> isize,
    panel: *mut T,
) {
    for p in 0..kc {
        let mut column = (start.wrapping_offset(k(p)) as *const [T; W]).read_unaligned();
        if reversed {
            column.reverse();
        }
        *(panel.add(p * W) as *mut [T; W]) = column;
    }
}

/// One panel from the `live ≤ W` rows from `r0`: the panel is written in
/// order, each column gathered from the `W` rows at the column's one
/// offset (rows past `live` read the first row; the caller zeroes them).
///
/// # Safety
///
/// As for [`pack_panels`], for one panel.
unsafe fn gather_rows<T: Copy, const W: usize>(
    live: usize,
    kc: usize,
    src: *const T,
    row: Index,
    r0: usize,
    k: impl Fn(usize) -> isize,
    panel: *mut T,
) {
    let rows: [*const T; W] =
        std::array::from_fn(|i| src.wrapping_offset(row.at(r0 + if i < live { i } else { 0 })));
    for p in 0..kc {
        let column = panel.add(p * W);
        let at = k(p);
        for (i, row) in rows.iter().enumerate() {
            *column.add(i) = *row.wrapping_offset(at);
        }
    }
}
