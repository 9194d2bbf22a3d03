//! The five loops of a product of bf16 operands packed as pairs of terms,
//! over any micro-kernel that reads such packing ([`PairKernel`]: the
//! `vdpbf16ps` kernel of `super::bf16`, the tile unit's of `super::amx`).
//!
//! Owns the loops (blocks of N, K and M of `super::blis`, micro-tiles,
//! the lower triangle's skipped tiles) and the thread's packing buffers.
//! K's blocks depend on the whole product's shape only
//! (`super::blis::k_blocks`), so each element's sums, and its bits, are the
//! same at every thread count. Must not pack nor compute a tile itself.

#![allow(unsafe_op_in_unsafe_fn)]

use super::blis::{computes_transpose, k_blocks, Operand, Product};
use std::cell::RefCell;

/// A micro-kernel of bf16 pairs: its tile, its cache blocks, and the
/// packing it reads. A micro-panel of A (its `MR` rows) starts at
/// `index · depth` pairs into the packed A block, for `index` its first
/// row, and one of B likewise for its first column.
pub(super) trait PairKernel {
    /// Rows and columns of a micro-tile of C.
    const MR: usize;
    const NR: usize;
    /// Rows of A and columns of B a block packs at most.
    const MC: usize;
    const NC: usize;
    /// Whether a micro-panel of A stays (in L1) while the block's B
    /// panels pass, rather than a panel of B while A's pass.
    const A_STAYS: bool;

    /// The pairs a packed row of A or column of B holds for `kl` terms.
    fn depth(kl: usize) -> usize;

    /// Packs `block` of A (its rows) into micro-panels at `dst`.
    ///
    /// # Safety
    ///
    /// The view's elements are readable, `dst` holds the block.
    unsafe fn pack_a(&self, block: Block, dst: *mut u32);

    /// Packs `block` of B (its columns), as [`PairKernel::pack_a`] packs A.
    ///
    /// # Safety
    ///
    /// As for [`PairKernel::pack_a`].
    unsafe fn pack_b(&self, block: Block, dst: *mut u32);

    /// One micro-tile: `C = alpha·Σ a·b` (added to C when `accumulate`)
    /// over `depth` pairs of the micro-panels at `a` and `b`, its first `m`
    /// rows and `n` columns written at `c` with strides `(rs_c, cs_c)`.
    ///
    /// # Safety
    ///
    /// The panels are packed, C's elements writable, and the host runs
    /// the kernel.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        &self,
        depth: usize,
        a: *const u32,
        b: *const u32,
        c: *mut f32,
        rs_c: isize,
        cs_c: isize,
        alpha: f32,
        accumulate: bool,
        m: usize,
        n: usize,
    );
}

/// A block of an operand to pack: `count` rows of A (or columns of B)
/// from `first`, terms `pc..pc + kl`, `depth` pairs each.
#[derive(Clone, Copy)]
pub(super) struct Block {
    pub count: usize,
    pub kl: usize,
    pub depth: usize,
    pub op: Operand<f32>,
    pub first: usize,
    pub pc: usize,
}

thread_local! {
    /// The thread's packed A block and B block, in pairs.
    static PACKED: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Computes `p` (no diagonal factor; `packed` operands are not read) on
/// `kernel`, with blocks of K of at most `kc` (the whole product's).
///
/// # Safety
///
/// As for `super::blis::gemm`, and the host runs the kernel and its
/// packing.
pub(super) unsafe fn gemm<K: PairKernel>(kernel: &K, kc: usize, p: Product<f32>) {
    debug_assert!(p.diag.is_none());
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
    if computes_transpose(rs_c, cs_c) {
        return gemm(kernel, kc, p.transposed());
    }
    let needed = |r1: usize, c0: usize| {
        p.lower
            .is_none_or(|off| r1 as isize - 1 + off >= c0 as isize)
    };
    let (k_count, kc) = k_blocks(k, kc);
    let depth_max = K::depth(kc);
    let mc = K::MC.min(m.next_multiple_of(K::MR));
    let nc = K::NC.min(n.next_multiple_of(K::NR));
    PACKED.with(|cell| {
        let mut bufs = cell.borrow_mut();
        let (a_buf, b_buf) = &mut *bufs;
        a_buf.resize(a_buf.len().max(mc * depth_max), 0);
        b_buf.resize(b_buf.len().max(nc * depth_max), 0);
        let (packed_a, packed_b) = (a_buf.as_mut_ptr(), b_buf.as_mut_ptr());
        for jc in (0..n).step_by(nc) {
            let nb = nc.min(n - jc);
            if !needed(m, jc) {
                break;
            }
            for kb in 0..k_count {
                let pc = kb * kc;
                let kl = kc.min(k - pc);
                let depth = K::depth(kl);
                let block = |count, op, first| Block {
                    count,
                    kl,
                    depth,
                    op,
                    first,
                    pc,
                };
                kernel.pack_b(block(nb, b, jc), packed_b);
                let add = p.accumulate || kb > 0;
                for ic in (0..m).step_by(mc) {
                    let mb = mc.min(m - ic);
                    if !needed(ic + mb, jc) {
                        continue;
                    }
                    kernel.pack_a(block(mb, a, ic), packed_a);
                    let tile = |ir: usize, jr: usize| {
                        let rows = K::MR.min(mb - ir);
                        if !needed(ic + ir + rows, jc + jr) {
                            return;
                        }
                        let dst = c
                            .offset((ic + ir) as isize * rs_c)
                            .offset((jc + jr) as isize * cs_c);
                        kernel.tile(
                            depth,
                            packed_a.add(ir * depth),
                            packed_b.add(jr * depth),
                            dst,
                            rs_c,
                            cs_c,
                            alpha,
                            add,
                            rows,
                            K::NR.min(nb - jr),
                        );
                    };
                    if K::A_STAYS {
                        for ir in (0..mb).step_by(K::MR) {
                            for jr in (0..nb).step_by(K::NR) {
                                tile(ir, jr);
                            }
                        }
                    } else {
                        for jr in (0..nb).step_by(K::NR) {
                            for ir in (0..mb).step_by(K::MR) {
                                tile(ir, jr);
                            }
                        }
                    }
                }
            }
        }
    });
}
