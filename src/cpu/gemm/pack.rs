//! Packing: copying a block of a strided operand into the contiguous
//! micro-panels a micro-kernel reads.
//!
//! Owns [`pack_panels`], the one packing routine for both operands: a block
//! of `rows × kc` elements of a strided view (any strides, zero for a
//! broadcast, negative for a reversed view) becomes panels of `width` rows,
//! each holding, for every `p` in `0..kc`, the `width` values of column `p`
//! side by side, with zeros past the last row. The left operand is packed
//! as it is (rows of A), the right one through its transpose (columns of
//! B). Must not choose block sizes nor compute.

/// Packs `rows × kc` elements of the view whose element `(r, p)` is at
/// `src + r·row_stride + p·k_stride` into `rows.div_ceil(width)` panels of
/// `width × kc` elements at `dst`: panel `q` holds element `(q·width + i,
/// p)` at `q·width·kc + p·width + i`, and zero where `q·width + i ≥ rows`.
///
/// # Safety
///
/// Every element of the view is readable, `dst` has room for
/// `rows.div_ceil(width) · width · kc` elements, and the two do not overlap.
pub(super) unsafe fn pack_panels<T: Copy + Default>(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const T,
    row_stride: isize,
    k_stride: isize,
    dst: *mut T,
) {
    let mut r0 = 0;
    let mut panel = dst;
    while r0 < rows {
        let live = width.min(rows - r0);
        let first = src.wrapping_offset(r0 as isize * row_stride);
        if row_stride == 1 && live == width {
            // The panel's rows are adjacent: each column is one copy.
            match width {
                4 => copy_columns::<T, 4>(kc, first, k_stride, panel),
                6 => copy_columns::<T, 6>(kc, first, k_stride, panel),
                8 => copy_columns::<T, 8>(kc, first, k_stride, panel),
                16 => copy_columns::<T, 16>(kc, first, k_stride, panel),
                32 => copy_columns::<T, 32>(kc, first, k_stride, panel),
                _ => scatter_rows(width, live, kc, first, row_stride, k_stride, panel),
            }
        } else if k_stride == 1 {
            match width {
                4 => gather_rows::<T, 4>(live, kc, first, row_stride, panel),
                6 => gather_rows::<T, 6>(live, kc, first, row_stride, panel),
                8 => gather_rows::<T, 8>(live, kc, first, row_stride, panel),
                16 => gather_rows::<T, 16>(live, kc, first, row_stride, panel),
                32 => gather_rows::<T, 32>(live, kc, first, row_stride, panel),
                _ => scatter_rows(width, live, kc, first, row_stride, k_stride, panel),
            }
        } else {
            scatter_rows(width, live, kc, first, row_stride, k_stride, panel);
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

/// One full panel whose rows are adjacent (row stride 1), a fixed-size
/// copy per column.
///
/// # Safety
///
/// As for [`pack_panels`], for one panel.
unsafe fn copy_columns<T: Copy, const W: usize>(
    kc: usize,
    first: *const T,
    k_stride: isize,
    panel: *mut T,
) {
    for p in 0..kc {
        let from = first.wrapping_offset(p as isize * k_stride) as *const [T; W];
        *(panel.add(p * W) as *mut [T; W]) = from.read_unaligned();
    }
}

/// One panel from `live ≤ W` rows that are contiguous along k: the panel is
/// written in order, each column gathered from the `W` row streams (rows
/// past `live` read the first row; the caller zeroes them).
///
/// # Safety
///
/// As for [`pack_panels`], for one panel.
unsafe fn gather_rows<T: Copy, const W: usize>(
    live: usize,
    kc: usize,
    first: *const T,
    row_stride: isize,
    panel: *mut T,
) {
    let rows: [*const T; W] = std::array::from_fn(|i| {
        first.wrapping_offset(if i < live { i as isize * row_stride } else { 0 })
    });
    for p in 0..kc {
        let column = panel.add(p * W);
        for (i, row) in rows.iter().enumerate() {
            *column.add(i) = *row.add(p);
        }
    }
}

/// One panel from `live ≤ width` rows of any strides, row by row.
///
/// # Safety
///
/// As for [`pack_panels`], for one panel.
unsafe fn scatter_rows<T: Copy>(
    width: usize,
    live: usize,
    kc: usize,
    first: *const T,
    row_stride: isize,
    k_stride: isize,
    panel: *mut T,
) {
    for i in 0..live {
        let row = first.wrapping_offset(i as isize * row_stride);
        let to = panel.add(i);
        for p in 0..kc {
            *to.add(p * width) = *row.wrapping_offset(p as isize * k_stride);
        }
    }
}
