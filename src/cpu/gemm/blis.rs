//! One single-threaded matrix product over strided views, as the five
//! loops of Goto and van de Geijn (BLIS's formulation): blocks of N, then
//! of K (pack B), then of M (pack A), then micro-tiles.
//!
//! Owns [`gemm`] (with a diagonal factor applied to packed B, A read in
//! place when its rows are contiguous along K, B read in place through its
//! table of terms when each panel's columns are adjacent (a padded
//! convolution's output rows over its image: no packed copy of the
//! windows) unless the panel would crowd a few L1 sets, micro-tiles above
//! the diagonal skipped for a symmetric product), [`prepack`] (a factor packed
//! whole, for the products of a batch that share it), [`mirror_lower`],
//! the thread's packing buffers and the split of K into blocks
//! ([`k_block`], [`k_blocks`]). The caller passes the blocks of K of the
//! whole product, so every output element is rounded the same way
//! wherever its tile lies: callers may cut M and N among threads freely
//! and stay bitwise reproducible. Must not choose kernels
//! (`super::kernels`) nor thread.

use super::gemv::gemv;
use super::kernels::{Float, Kernel};
use super::pack::{pack_panels, Index};
use std::cell::RefCell;

/// One factor of a product: element `(r, p)` (row `r` of A, or column
/// `r` of B; term `p` of K) at `ptr + rows.at(r) + k.at(p)`.
#[derive(Clone, Copy)]
pub(super) struct Operand<T> {
    pub ptr: *const T,
    pub rows: Index,
    pub k: Index,
    /// The whole operand already packed by [`prepack`] with this
    /// product's panel width and blocks of K (null: packed block by block
    /// as the product runs).
    pub packed: *const T,
}

impl<T> Operand<T> {
    /// Where the block of rows from `r` and terms from `p0` starts, and
    /// the index of its rows and of its terms.
    ///
    /// # Safety
    ///
    /// Tables hold at least `r` rows and `p0` terms.
    pub(super) unsafe fn block(self, r: usize, p0: usize) -> (*const T, Index, Index) {
        let (rows, row_offset) = self.rows.from(r);
        let (k, offset) = self.k.from(p0);
        let ptr = self.ptr.wrapping_offset(row_offset + offset);
        (ptr, rows, k)
    }
}

/// A 64-byte-aligned block of packing memory.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

thread_local! {
    /// The thread's packed A block and B panel.
    static PACKED: RefCell<(Vec<Line>, Vec<Line>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn grow(buf: &mut Vec<Line>, bytes: usize) -> *mut u8 {
    let lines = bytes.div_ceil(64);
    if buf.len() < lines {
        buf.resize(lines, Line([0; 64]));
    }
    buf.as_mut_ptr() as *mut u8
}

/// Bytes of a whole `k × n` B under which K is not blocked: B then stays
/// in half of L2, and one pass over K streams A once and writes C once (a
/// convolution's narrow weight matrix against its tall input).
const NARROW_B_BYTES: usize = 512 << 10;

/// The largest block of K for a product with `n` columns and `k` terms:
/// the kernel's `kc`, or all of `k` when B is narrow. It depends on the
/// whole product's shape, never on a thread's tile of it, so that every
/// element is rounded the same way at every thread count.
pub(super) fn k_block<T: Float>(kernel: &Kernel<T>, n: usize, k: usize) -> usize {
    k_block_of(kernel.kc, std::mem::size_of::<T>(), n, k)
}

/// [`k_block`] for a kernel whose blocks of K are `kc` and whose B
/// elements take `bytes` (as the caller's buffers hold them).
pub(super) fn k_block_of(kc: usize, bytes: usize, n: usize, k: usize) -> usize {
    if n.saturating_mul(k).saturating_mul(bytes) <= NARROW_B_BYTES {
        k.max(1)
    } else {
        kc
    }
}

/// The split of `k` into blocks of at most `kc`, all of nearly equal size
/// (so no block is a short remainder): `(blocks, size of the first ones)`;
/// the last block holds what is left.
pub(super) fn k_blocks(k: usize, kc: usize) -> (usize, usize) {
    let blocks = k.div_ceil(kc).max(1);
    (blocks, k.div_ceil(blocks))
}

/// One single-threaded product: `C = alpha·A·diag(d)·B`, or `C += …` when
/// `accumulate`, for `A` of `m × k`, `B` of `k × n` and `C` of `m × n`
/// at `c` with strides `(rs_c, cs_c)`.
#[derive(Clone, Copy)]
pub(super) struct Product<T> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: T,
    pub a: Operand<T>,
    pub b: Operand<T>,
    /// The diagonal factor: `d[p]` at `ptr + k.at(p)` (none: all ones).
    pub diag: Option<(*const T, Index)>,
    pub c: *mut T,
    pub rs_c: isize,
    pub cs_c: isize,
    pub accumulate: bool,
    /// Only the lower triangle is needed: C's row 0 is row `off` of the
    /// whole (square) output, its column 0 the whole's column 0, and
    /// micro-tiles wholly above the diagonal (`row + off < column` for
    /// every element) are skipped. Elements above it in the tiles that
    /// straddle it are computed too.
    pub lower: Option<isize>,
}

/// Whether [`gemm`] computes a C of these strides as `Cᵀ = Bᵀ·Aᵀ`: a
/// column-major C, whose transpose has contiguous rows.
pub(super) fn computes_transpose(rs_c: isize, cs_c: isize) -> bool {
    cs_c != 1 && rs_c == 1
}

impl<T> Product<T> {
    /// The same product as `Cᵀ = Bᵀ·Aᵀ`, computed whole (its lower
    /// triangle is C's upper one) and with both factors unpacked (packing
    /// made for one role does not fit the other's panels).
    pub(super) fn transposed(self) -> Product<T> {
        let unpacked = |o: Operand<T>| Operand {
            packed: std::ptr::null(),
            ..o
        };
        Product {
            m: self.n,
            n: self.m,
            a: unpacked(self.b),
            b: unpacked(self.a),
            rs_c: self.cs_c,
            cs_c: self.rs_c,
            lower: None,
            ..self
        }
    }
}

/// Computes `p` with `kernel` and blocks of K of at most `kc`
/// ([`k_block`] of the whole product).
///
/// # Safety
///
/// Every element of the three views (and of `d` for `p < k`) is valid (C's
/// for reads and writes), no element of C is written twice (distinct `(r,
/// c)` have distinct addresses) and C overlaps no operand. `k ≥ 1`.
pub(super) unsafe fn gemm<T: Float>(kernel: &Kernel<T>, kc: usize, p: Product<T>) {
    let Product {
        m,
        n,
        k,
        alpha,
        a,
        b,
        c,
        rs_c,
        cs_c,
        ..
    } = p;
    if m == 0 || n == 0 {
        return;
    }
    // A matrix–vector product: one column, or one row through Cᵀ = Bᵀ·Aᵀ.
    if n == 1 && gemv(&p) {
        return;
    }
    if m == 1 && gemv(&p.transposed()) {
        return;
    }
    if computes_transpose(rs_c, cs_c) {
        return gemm(kernel, kc, p.transposed());
    }
    // Whether some element of rows `r0 ≤ r < r1` and columns `c0 ≤ c` is
    // on or below the diagonal.
    let needed = |r1: usize, c0: usize| {
        p.lower
            .is_none_or(|off| r1 as isize - 1 + off >= c0 as isize)
    };
    let Kernel { mr, nr, mc, nc, .. } = *kernel;
    let (k_count, kc) = k_blocks(k, kc);
    let mc = mc.min(m.next_multiple_of(mr));
    let nc = nc.min(n.next_multiple_of(nr));
    let size = std::mem::size_of::<T>();
    PACKED.with(|cell| {
        let mut bufs = cell.borrow_mut();
        let (a_buf, b_buf) = &mut *bufs;
        let packed_a = grow(a_buf, mc * kc * size) as *mut T;
        let packed_b = grow(b_buf, nc * kc * size) as *mut T;
        // A whose rows are contiguous along K (at a uniform stride) is
        // read in place, saving a copy of A per block of N (a
        // convolution's A is large and each of its micro-panels meets few
        // B panels); only a last, partial micro-panel is packed, so no row
        // past A's end is read.
        let a_stride = a.rows.stride();
        let in_place = a.packed.is_null() && matches!(a.k, Index::Stride(1)) && a_stride.is_some();
        let (m_pad, n_pad) = (m.next_multiple_of(mr), n.next_multiple_of(nr));
        for jc in (0..n).step_by(nc) {
            let nb = nc.min(n - jc);
            if !needed(m, jc) {
                break;
            }
            for kb in 0..k_count {
                let pc = kb * kc;
                let kl = kc.min(k - pc);
                // B read in place through its table of terms when each
                // full panel's columns are adjacent (`b_in_place`); its
                // last, partial panel is packed, so no column past B's end
                // is read.
                let b_direct = b_in_place(nr, nb, kl, b, jc, pc, p.diag.is_some());
                let b_panels = if b_direct.is_some() {
                    let last = nb - nb % nr;
                    if last < nb {
                        let to = packed_b.add(last * kl);
                        pack_block(nr, nb - last, kl, b, jc + last, pc, None, to);
                    }
                    packed_b as *const T
                } else if b.packed.is_null() {
                    pack_block(nr, nb, kl, b, jc, pc, p.diag, packed_b);
                    packed_b as *const T
                } else {
                    b.packed.add(pc * n_pad + jc * kl)
                };
                let add = p.accumulate || kb > 0;
                for ic in (0..m).step_by(mc) {
                    let mb = mc.min(m - ic);
                    if !needed(ic + mb, jc) {
                        continue;
                    }
                    let (a_block, a_rows, a_k) = a.block(ic, pc);
                    let a_panels = if !a.packed.is_null() {
                        a.packed.add(pc * m_pad + ic * kl)
                    } else {
                        packed_a as *const T
                    };
                    if a.packed.is_null() && !in_place {
                        pack_panels(mr, mb, kl, a_block, a_rows, a_k, packed_a);
                    } else if in_place && mb % mr != 0 {
                        let last = mb - mb % mr;
                        let (edge, edge_rows, _) = a.block(ic + last, pc);
                        let to = packed_a.add(last * kl);
                        pack_panels(mr, mb - last, kl, edge, edge_rows, a_k, to);
                    }
                    for jr in (0..nb).step_by(nr) {
                        // The panel in place (its first column, and the
                        // terms' offsets), or packed.
                        let (b_panel, b_terms) = match b_direct {
                            Some(terms) if jr + nr <= nb => {
                                let (cols, rows, _) = b.block(jc + jr, pc);
                                (cols.wrapping_offset(rows.at(0)), terms)
                            }
                            _ => (b_panels.add(jr * kl), std::ptr::null()),
                        };
                        for ir in (0..mb).step_by(mr) {
                            let rows = mr.min(mb - ir);
                            if !needed(ic + ir + rows, jc + jr) {
                                continue;
                            }
                            let (a_panel, rs_a, cs_a) = match a_stride {
                                Some(s) if in_place && rows == mr => {
                                    (a_block.wrapping_offset(ir as isize * s), s, 1)
                                }
                                _ => (a_panels.add(ir * kl), 1, mr as isize),
                            };
                            let dst = c
                                .offset((ic + ir) as isize * rs_c)
                                .offset((jc + jr) as isize * cs_c);
                            (kernel.run_for(rows))(
                                kl,
                                a_panel,
                                rs_a,
                                cs_a,
                                b_panel,
                                nr as isize,
                                b_terms,
                                dst,
                                rs_c,
                                cs_c,
                                alpha,
                                add,
                                rows,
                                nr.min(nb - jr),
                            );
                        }
                    }
                }
            }
        }
    });
}

/// The most lines of an in-place B panel one L1 set may hold: two sets'
/// worth of a 12-way L1 (a padded conv2d's panel puts 14–20 lines in its
/// fullest set and gains from reading in place; conv1d's channels of 1024
/// f32, 4 KB apart, put all 320 terms in one set and lose: 26.0 against
/// 24.1 ms a step, measured).
const CROWDED_SET_LINES: usize = 24;

/// The table of B's terms from `pc` when the block of its `cols` columns
/// from `c0` is read in place: its terms come through a table (a
/// convolution's taps and channels), every full panel of `width` columns
/// is adjacent in memory (a row of the output over its image), no
/// diagonal factor scales the packed copy and the panel's lines would not
/// crowd an L1 set. `None`: pack the block.
///
/// # Safety
///
/// B's tables hold its rows and terms from `c0` and `pc`.
unsafe fn b_in_place<T>(
    width: usize,
    cols: usize,
    kc_of_block: usize,
    b: Operand<T>,
    c0: usize,
    pc: usize,
    scaled: bool,
) -> Option<*const isize> {
    if scaled || !b.packed.is_null() || cols < width {
        return None;
    }
    let (ptr, rows, k) = b.block(c0, pc);
    let Index::Table(terms) = k else {
        return None;
    };
    if (0..cols / width).any(|q| rows.adjacent(q * width, width) != Some(false)) {
        return None;
    }
    // The panel's lines per L1 set (64 sets of 64-byte lines: every x86
    // L1 since Sandy Bridge): terms a multiple of 4 KB apart (conv1d's
    // channels of 1024 f32) would share a few sets and evict each other
    // between the micro-tiles that reuse the panel.
    let size = std::mem::size_of::<T>() as isize;
    let mut per_set = [0usize; 64];
    for p in 0..kc_of_block {
        let at = ptr as isize + (rows.at(0) + *terms.add(p)) * size;
        for line in at >> 6..=(at + width as isize * size - 1) >> 6 {
            per_set[(line & 63) as usize] += 1;
        }
    }
    let crowded = per_set.iter().max().copied().unwrap_or(0);
    // (The count depends on where the buffers lie, so the choice may
    // differ between runs; both forms give the same bits.)
    (crowded <= CROWDED_SET_LINES).then_some(terms)
}

/// Packs the `rows` rows (or columns) of `op` from `r0`, terms `pc..pc +
/// kc`, into panels of `width` at `dst`, each term scaled by the diagonal
/// factor when there is one.
///
/// # Safety
///
/// As for [`pack_panels`] and [`scale_panels`].
#[allow(clippy::too_many_arguments)]
unsafe fn pack_block<T: Float>(
    width: usize,
    rows: usize,
    kc: usize,
    op: Operand<T>,
    r0: usize,
    pc: usize,
    diag: Option<(*const T, Index)>,
    dst: *mut T,
) {
    let (src, row, k) = op.block(r0, pc);
    pack_panels(width, rows, kc, src, row, k, dst);
    if let Some((d, d_k)) = diag {
        let (d_k, offset) = d_k.from(pc);
        scale_panels(width, rows, kc, d.wrapping_offset(offset), d_k, dst);
    }
}

/// The whole of `op` (`rows` rows or columns, `k` terms) packed as
/// [`gemm`] packs it block by block (panels of `width`; blocks of K of
/// `kc`, [`k_blocks`]; a block from term `pc` at `pc · rows_pad`, its
/// panel of row `r` at `r · kl`), for the products of a batch that share
/// it, and the diagonal factor applied when given (B's role).
///
/// # Safety
///
/// Every element of the operand (and of `d`) is readable.
pub(super) unsafe fn prepack<T: Float>(
    width: usize,
    kc: usize,
    rows: usize,
    k: usize,
    op: Operand<T>,
    diag: Option<(*const T, Index)>,
) -> Vec<T> {
    let (k_count, kc) = k_blocks(k, kc);
    let pad = rows.next_multiple_of(width);
    let mut out = vec![T::default(); pad * k];
    for kb in 0..k_count {
        let pc = kb * kc;
        let kl = kc.min(k - pc);
        pack_block(
            width,
            rows,
            kl,
            op,
            0,
            pc,
            diag,
            out.as_mut_ptr().add(pc * pad),
        );
    }
    out
}

/// Multiplies column `p` of every packed panel of B by `d[k.at(p)]`.
///
/// # Safety
///
/// `packed` holds the `cols.div_ceil(width)` panels of `width × kc`
/// elements that [`pack_panels`] wrote, and `d` is readable at `k.at(p)`
/// for `p < kc`.
unsafe fn scale_panels<T: Float>(
    width: usize,
    cols: usize,
    kc: usize,
    d: *const T,
    k: Index,
    packed: *mut T,
) {
    for q in 0..cols.div_ceil(width) {
        let panel = packed.add(q * width * kc);
        for p in 0..kc {
            let dp = *d.offset(k.at(p));
            let column = std::slice::from_raw_parts_mut(panel.add(p * width), width);
            for x in column {
                *x = *x * dp;
            }
        }
    }
}

/// Copies the lower triangle of the square `n × n` matrix at `c` (strides
/// `rs`, `cs`) onto its upper one, in square blocks so that both sides
/// are read and written a cache line at a time.
///
/// # Safety
///
/// Every element of the matrix is valid for reads and writes.
pub(super) unsafe fn mirror_lower<T: Copy>(c: *mut T, n: usize, rs: isize, cs: isize) {
    const BLOCK: usize = 32;
    let at = |i: usize, j: usize| c.offset(i as isize * rs + j as isize * cs);
    for i0 in (0..n).step_by(BLOCK) {
        for j0 in (i0..n).step_by(BLOCK) {
            for i in i0..(i0 + BLOCK).min(n) {
                for j in j0.max(i + 1)..(j0 + BLOCK).min(n) {
                    *at(i, j) = *at(j, i);
                }
            }
        }
    }
}
