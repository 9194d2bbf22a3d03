//! Products of bf16 operands with f32 accumulation on Intel's tile unit
//! (AMX: `tdpbf16ps` multiplies a 16 × 32 bf16 tile by a 32 × 16 one into
//! a 16 × 16 f32 tile, 8,192 products an instruction; an `avx512_bf16`
//! core does 32 a cycle with `vdpbf16ps`, no more than its f32 FMAs).
//!
//! Owns [`available`] (the CPU has the tile unit, and Linux lets this
//! process use it: `arch_prctl(ARCH_REQ_XCOMP_PERM)`), the packing of a
//! block into tiles (A's rows as rows of bf16 pairs, B's columns as
//! `super::bf16`'s 32-wide panels of pairs, both padded with zero pairs
//! to whole tiles of 16 pairs) and the `32 × 32` micro-kernel (four C
//! tiles, two of A, two of B), which `super::pairs`'s loops run
//! ([`gemm`]). A block of K is summed by the tile unit in its own order of
//! additions (not a sequential f32 chain: on a Xeon with AMX, 21–95 of a
//! tile's 256 sums differed in the last bit from each of six orders
//! tried, pair by pair or wider), within the f32 rounding of its terms;
//! the blocks depend on the whole product's shape only
//! (`super::blis::k_blocks`), so results are bitwise equal at every
//! thread count. `emulated` (in tests) computes a tile as a sequential
//! chain in plain Rust, so the tests run the driver (packing, blocks,
//! partial tiles, write-back) on every host that packs bf16 pairs. Must
//! not decide when it runs (`super::Contraction::run`).

#![allow(unsafe_op_in_unsafe_fn)]

use super::blis::{Operand, Product};
use super::pack::Index;
use super::pairs::{Block, PairKernel};
use std::arch::asm;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows and columns of the micro-kernel's C block: 2 × 2 tiles of 16 × 16.
pub(super) const MR: usize = 32;
pub(super) const NR: usize = 32;
/// Pairs of terms a tile holds along K (64 bytes a row).
const STEP: usize = 16;
/// Cache blocks: M (A's block, `MC × KC / 2` pairs, in L2), N.
const MC: usize = 256;
const NC: usize = 1024;

/// Whether this process runs the tile unit: the CPU has AMX-TILE and
/// AMX-BF16, the `avx512_bf16` packing runs (`super::bf16::available`),
/// `TENJIN_AMX` is not `0` (which keeps bf16 products on `vdpbf16ps`),
/// and Linux granted the tile data's state (asked once).
pub(super) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        let has = (leaf.edx >> 22) & 1 == 1 && (leaf.edx >> 24) & 1 == 1;
        has && super::bf16::available()
            && std::env::var("TENJIN_AMX").map_or(true, |v| v != "0")
            && request_tile_data()
    })
}

/// Asks Linux for the tile data's state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`; without it the first tile instruction faults):
/// whether it was granted (never elsewhere: no tile unit there).
#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// See above; Linux on x86-64.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: the system call only reads its two integer arguments; it
    // clobbers rcx and r11, as every `syscall` does.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// Computes one `MR × NR` block of C from zero: `steps` tiles of
/// [`STEP`] pairs along K, A's 32 rows `a_stride` bytes apart (pairs
/// contiguous along a row), B's 32-wide panel of pairs at `b`; the block
/// is stored row-major at `out`.
pub(super) type MicroKernel =
    unsafe fn(steps: usize, a: *const u32, a_stride: usize, b: *const u32, out: *mut f32);

/// The tile configuration: palette 1, eight tiles of 16 rows of 64 bytes
/// (C in 0–3, A in 4–5, B in 6–7).
#[repr(C, align(64))]
struct Config([u8; 64]);

const CONFIG: Config = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    Config(c)
};

/// [`MicroKernel`] on the tile unit.
///
/// # Safety
///
/// [`available`]; `a` holds 32 rows of `steps · STEP` pairs, `b` a panel of
/// `steps · STEP` rows of 32 pairs, `out` 32 × 32 values.
pub(super) unsafe fn tiles(
    steps: usize,
    a: *const u32,
    a_stride: usize,
    b: *const u32,
    out: *mut f32,
) {
    let a1 = (a as *const u8).add(16 * a_stride);
    asm!(
        "ldtilecfg [{cfg}]",
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "2:",
        "tileloadd tmm4, [{a} + {sa}*1]",
        "tileloadd tmm5, [{a1} + {sa}*1]",
        "tileloadd tmm6, [{b} + {sb}*1]",
        "tileloadd tmm7, [{b} + {sb}*1 + 64]",
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tdpbf16ps tmm1, tmm4, tmm7",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "tdpbf16ps tmm3, tmm5, tmm7",
        "add {a}, 64",
        "add {a1}, 64",
        "add {b}, 2048",
        "dec {n}",
        "jnz 2b",
        "tilestored [{out} + {sb}*1], tmm0",
        "tilestored [{out} + {sb}*1 + 64], tmm1",
        "tilestored [{out1} + {sb}*1], tmm2",
        "tilestored [{out1} + {sb}*1 + 64], tmm3",
        "tilerelease",
        cfg = in(reg) CONFIG.0.as_ptr(),
        a = inout(reg) a => _,
        a1 = inout(reg) a1 => _,
        b = inout(reg) b => _,
        n = inout(reg) steps => _,
        sa = in(reg) a_stride,
        sb = in(reg) 4 * NR,
        out = in(reg) out,
        out1 = in(reg) out.add(16 * NR),
        options(nostack),
    );
}

#[cfg(test)]
/// A bf16 value (the high half of an f32) as f32, a subnormal as zero of
/// its sign (the tile unit's inputs).
fn widened(bits: u32) -> f32 {
    let x = f32::from_bits(bits << 16);
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[cfg(test)]
/// An f32 result with a subnormal flushed to zero of its sign.
fn flushed(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[cfg(test)]
/// [`MicroKernel`] in plain Rust: each sum a chain from `+0`, its pairs in
/// increasing order, the even product before the odd one, subnormals
/// flushed as the tile unit flushes them (the driver's tests on any
/// host; not the tile unit's bits, see the module documentation).
///
/// # Safety
///
/// As for [`tiles`], on any host.
pub(super) unsafe fn emulated(
    steps: usize,
    a: *const u32,
    a_stride: usize,
    b: *const u32,
    out: *mut f32,
) {
    for i in 0..MR {
        let row = (a as *const u8).add(i * a_stride) as *const u32;
        for j in 0..NR {
            let mut acc = 0f32;
            for h in 0..steps * STEP {
                let (x, y) = (*row.add(h), *b.add(h * NR + j));
                acc = flushed(acc + widened(x & 0xffff) * widened(y & 0xffff));
                acc = flushed(acc + widened(x >> 16) * widened(y >> 16));
            }
            *out.add(i * NR + j) = acc;
        }
    }
}

thread_local! {
    /// A panel of [`MR`] rows of A packed as B's are (see [`pack_a`]).
    static PANEL: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// The tile unit's products (or the emulated ones) as `super::pairs`
/// drives them: A packed as rows of pairs, B as 32-wide panels of pairs,
/// both padded to whole tiles of [`STEP`] pairs.
pub(super) struct Tiles(pub(super) MicroKernel);

impl PairKernel for Tiles {
    const MR: usize = MR;
    const NR: usize = NR;
    const MC: usize = MC;
    const NC: usize = NC;
    // A micro-panel of 32 rows (32 KB at 256 pairs) stays in L1 while the
    // block's B panels stream past it: a 1024³ product 5.6–5.9 → 5.3–5.5
    // ms against B's panels staying.
    const A_STAYS: bool = true;

    fn depth(kl: usize) -> usize {
        kl.div_ceil(2).next_multiple_of(STEP)
    }

    unsafe fn pack_a(&self, k: Block, dst: *mut u32) {
        pack_a(k.count, k.kl, k.depth, k.op, k.first, k.pc, dst)
    }

    unsafe fn pack_b(&self, k: Block, dst: *mut u32) {
        pack_b(k.count, k.kl, k.depth, k.op, k.first, k.pc, dst)
    }

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
    ) {
        let mut block = [0f32; MR * NR];
        (self.0)(depth / STEP, a, 4 * depth, b, block.as_mut_ptr());
        store(&block, c, rs_c, cs_c, alpha, accumulate, m, n);
    }
}

/// Computes `p` (no diagonal factor; `packed` operands are not read) with
/// blocks of K of at most `kc` (the whole product's), each micro-tile's C
/// computed by `kernel`.
///
/// # Safety
///
/// As for `super::blis::gemm`; the host runs `kernel` ([`available`] for
/// [`tiles`]) and the `avx512_bf16` packing (`super::bf16::available`).
pub(super) unsafe fn gemm(kc: usize, p: Product<f32>, kernel: MicroKernel) {
    super::pairs::gemm(&Tiles(kernel), kc, p)
}

/// `C = alpha·block` (added to C when `accumulate`) for its first `m` rows
/// and `n` columns, at `c` with strides `(rs_c, cs_c)`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn store(
    block: &[f32; MR * NR],
    c: *mut f32,
    rs_c: isize,
    cs_c: isize,
    alpha: f32,
    accumulate: bool,
    m: usize,
    n: usize,
) {
    if cs_c == 1 {
        store_rows(block, c, rs_c, alpha, accumulate, m, n);
        return;
    }
    for i in 0..m {
        let dst = c.offset(i as isize * rs_c);
        for j in 0..n {
            let d = dst.offset(j as isize * cs_c);
            let v = block[i * NR + j] * alpha;
            *d = if accumulate { *d + v } else { v };
        }
    }
}

/// [`store`] into rows of contiguous columns, 16 lanes at a time.
#[target_feature(enable = "avx512f")]
unsafe fn store_rows(
    block: &[f32; MR * NR],
    c: *mut f32,
    rs_c: isize,
    alpha: f32,
    accumulate: bool,
    m: usize,
    n: usize,
) {
    use std::arch::x86_64::*;
    let scale = _mm512_set1_ps(alpha);
    for i in 0..m {
        let dst = c.offset(i as isize * rs_c);
        for half in 0..NR / 16 {
            let lanes = n.saturating_sub(16 * half).min(16);
            if lanes == 0 {
                break;
            }
            let mask: __mmask16 = if lanes == 16 { !0 } else { (1u16 << lanes) - 1 };
            let p = dst.add(16 * half);
            let v = _mm512_mul_ps(
                _mm512_loadu_ps(block.as_ptr().add(i * NR + 16 * half)),
                scale,
            );
            let v = if accumulate {
                _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), v)
            } else {
                v
            };
            _mm512_mask_storeu_ps(p, mask, v);
        }
    }
}

/// Packs rows `r0..r0 + rows` of A, terms `pc..pc + kc`, as rows of pairs
/// `stride` apart (zero pairs after the last term, zero rows up to a
/// multiple of [`MR`]). Rows side by side in memory with terms apart (a
/// transposed operand: `xᵀ` of a weight gradient) are packed [`MR`] at a
/// time as B's panels are, vectorised, then turned into rows.
unsafe fn pack_a(
    rows: usize,
    kc: usize,
    stride: usize,
    op: Operand<f32>,
    r0: usize,
    pc: usize,
    dst: *mut u32,
) {
    let (src, row, k) = op.block(r0, pc);
    let halves = kc.div_ceil(2);
    let adjacent = row.stride() == Some(1) && !matches!(k, Index::Stride(1));
    if adjacent {
        PANEL.with(|cell| {
            let mut panel = cell.borrow_mut();
            let len = panel.len().max(MR * halves);
            panel.resize(len, 0);
            for g in (0..rows).step_by(MR) {
                let (part, offset) = row.from(g);
                let width = MR.min(rows - g);
                super::bf16::pack_pairs(
                    MR,
                    width,
                    kc,
                    src.wrapping_offset(offset),
                    part,
                    k,
                    panel.as_mut_ptr(),
                );
                for i in 0..MR {
                    let at = dst.add((g + i) * stride);
                    for h in 0..halves {
                        *at.add(h) = panel[h * MR + i];
                    }
                    std::ptr::write_bytes(at.add(halves), 0, stride - halves);
                }
            }
        });
        return;
    }
    for r in 0..rows.next_multiple_of(MR) {
        let at = dst.add(r * stride);
        if r >= rows {
            std::ptr::write_bytes(at, 0, stride);
            continue;
        }
        let (one, offset) = row.from(r);
        let first = src.wrapping_offset(offset);
        if matches!(k, Index::Stride(1)) {
            pack_row(kc, first, at);
        } else {
            super::bf16::pack_pairs(1, 1, kc, first, one, k, at);
        }
        std::ptr::write_bytes(at.add(halves), 0, stride - halves);
    }
}

/// A row of `kc` contiguous terms at `src` as pairs at `dst`: its bf16
/// values in order (`vcvtne2ps2bf16`: nearest even), the even term of a
/// pair in its low half, a zero after an odd last term.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_row(kc: usize, src: *const f32, dst: *mut u32) {
    use std::arch::x86_64::*;
    let mask = |n: usize| -> __mmask16 {
        if n >= 16 {
            !0
        } else {
            (1u16 << n) - 1
        }
    };
    for t in (0..kc).step_by(32) {
        let left = kc - t;
        let lo = _mm512_maskz_loadu_ps(mask(left), src.add(t));
        let hi = _mm512_maskz_loadu_ps(mask(left.saturating_sub(16)), src.add(t + 16));
        let pairs: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        let whole = left.div_ceil(2).min(16);
        _mm512_mask_storeu_epi32(dst.add(t / 2) as *mut i32, mask(whole), pairs);
    }
}

/// Packs columns `c0..c0 + cols` of B, terms `pc..pc + kc`, as
/// `super::bf16`'s panels of [`NR`] columns, `stride` pairs deep (zero
/// pairs after the last term).
unsafe fn pack_b(
    cols: usize,
    kc: usize,
    stride: usize,
    op: Operand<f32>,
    c0: usize,
    pc: usize,
    dst: *mut u32,
) {
    let (src, row, k) = op.block(c0, pc);
    let halves = kc.div_ceil(2);
    for q in 0..cols.div_ceil(NR) {
        let panel = dst.add(q * NR * stride);
        let (part, offset) = row.from(q * NR);
        let width = NR.min(cols - q * NR);
        super::bf16::pack_pairs(NR, width, kc, src.wrapping_offset(offset), part, k, panel);
        std::ptr::write_bytes(panel.add(halves * NR), 0, (stride - halves) * NR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::bf16::tests::{
        a_tile_is_bitwise_the_whole, exact_products_within_f32_sums,
    };

    /// The products on `kernel` (the tests' views lie in their buffers).
    fn on(kernel: MicroKernel) -> impl Fn(usize, Product<f32>) {
        // SAFETY: as `bf16::tests::run` builds them; run only where the
        // host packs bf16 pairs, and on the tile unit only where it has one.
        move |kc, p| unsafe { gemm(kc, p, kernel) }
    }

    /// The driver (packing, blocks, partial tiles, write-back) on the
    /// emulated tile unit: on every host that packs bf16 pairs.
    #[test]
    fn the_driver_on_emulated_tiles_gives_the_exact_products_within_f32_sums() {
        if !super::super::bf16::available() {
            eprintln!("skipped: this host has no avx512_bf16 (or TENJIN_SIMD is below AVX-512)");
            return;
        }
        exact_products_within_f32_sums(&on(emulated));
        a_tile_is_bitwise_the_whole(&on(emulated));
    }

    /// The tile unit within the f32 rounding of each sum's terms, and a
    /// tile of the product (a thread's) bitwise the whole product's.
    #[test]
    fn the_tile_unit_gives_the_exact_products_within_f32_sums() {
        if !available() {
            eprintln!("skipped: this host has no AMX (or TENJIN_AMX=0)");
            return;
        }
        exact_products_within_f32_sums(&on(tiles));
        a_tile_is_bitwise_the_whole(&on(tiles));
    }
}
