//! Products of bf16 operands with f32 accumulation on `avx512_bf16`
//! (`vdpbf16ps`: sixteen f32 lanes, each adding two bf16 products per
//! instruction: twice the work of an f32 FMA on AMD cores, the same on
//! Intel's, which issue it at half the rate).
//!
//! Owns [`available`], the packing of f32 views into bf16 pairs (each
//! operand rounded to nearest even: exact for the widened bf16 tensors
//! this serves, a bf16 rounding of anything else), the `12 × 32`
//! micro-kernel, run by `super::pairs`'s loops ([`gemm`]). A block of K is
//! summed by pairs in increasing order, one chain per output element, and
//! its blocks depend on the whole product's shape only (`super::blis::
//! k_block`), so results are bitwise equal at every thread count. Must not
//! decide when it runs (`super::Contraction::run`).

#![allow(unsafe_op_in_unsafe_fn)]

use super::blis::{Operand, Product};
use super::pack::Index;
use super::pairs::{Block, PairKernel};
use crate::cpu::wide::Width;
use std::arch::x86_64::*;

/// Rows and columns of the register tile: 12 × 2 vectors of accumulators.
pub(super) const MR: usize = 12;
pub(super) const NR: usize = 32;
/// Cache blocks: K (even: whole pairs), M, N.
pub(super) const KC: usize = 512;
const MC: usize = 144;
const NC: usize = 4096;

/// Whether this host runs the kernel: `avx512_bf16` present, and the
/// element-wise code allowed AVX-512 (`TENJIN_SIMD` below it turns this
/// off too, as it does for the f32 kernels).
pub(super) fn available() -> bool {
    Width::host() == Width::Avx512
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bf16")
}

/// `x` rounded to bf16 (nearest even; a NaN stays a quiet NaN), its bits.
#[inline(always)]
fn bf16_bits(x: f32) -> u32 {
    u32::from(half::bf16::from_f32(x).to_bits())
}

/// Two terms of K as one lane: the even term in the low half.
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    bf16_bits(even) | (bf16_bits(odd) << 16)
}

/// Packs `rows × kc` elements of the view whose element `(r, p)` is at
/// `src + row.at(r) + k.at(p)` into `rows.div_ceil(width)` panels of
/// `width × kc.div_ceil(2)` pairs at `dst`: panel `q` holds the pair of
/// terms `(2h, 2h + 1)` of row `q·width + i` at `q·width·h_count + h·width
/// + i`; zeros past the last row and past the last term.
///
/// # Safety
///
/// Every element of the view is readable and `dst` has room for the
/// panels.
pub(super) unsafe fn pack_pairs(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const f32,
    row: Index,
    k: Index,
    dst: *mut u32,
) {
    match (row.stride(), k) {
        // B's panels: a term's `width` values side by side.
        (Some(1), Index::Stride(s)) if width == NR => pack_adjacent_rows(rows, kc, src, s, dst),
        // A's rows, each contiguous along K.
        (Some(row_stride), Index::Stride(1)) => {
            pack_contiguous_terms(width, rows, kc, src, row_stride, dst)
        }
        _ => pack_any(width, rows, kc, src, row, k, dst),
    }
}

/// [`pack_pairs`] for panels of [`NR`] adjacent rows (`row_stride` 1),
/// terms `s` apart: per pair of terms, four vectors converted
/// (`vcvtne2ps2bf16`: nearest even) and interleaved into pairs.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_adjacent_rows(rows: usize, kc: usize, src: *const f32, s: isize, dst: *mut u32) {
    let halves = kc.div_ceil(2);
    // Element e of the result: term 2h's value e/2 (even e) or term
    // 2h + 1's (odd e), of the 16 rows whose conversion `cvtne2ps` puts
    // in its low (term 2h) and high (term 2h + 1) halves.
    let order = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
    let full = rows / NR;
    for q in 0..full {
        let panel = dst.add(q * NR * halves);
        let first = src.add(q * NR);
        for h in 0..halves {
            let even = first.wrapping_offset(2 * h as isize * s);
            let odd = even.wrapping_offset(s);
            let has_odd = 2 * h + 1 < kc;
            for v in 0..2 {
                let lo = _mm512_loadu_ps(even.add(16 * v));
                let hi = if has_odd {
                    _mm512_loadu_ps(odd.add(16 * v))
                } else {
                    _mm512_setzero_ps()
                };
                let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                let pairs = _mm512_permutexvar_epi16(order, both);
                _mm512_storeu_si512(panel.add(h * NR + 16 * v) as *mut _, pairs);
            }
        }
    }
    if full * NR < rows {
        let done = full * NR;
        pack_any(
            NR,
            rows - done,
            kc,
            src.add(done),
            Index::Stride(1),
            Index::Stride(s),
            dst.add(full * NR * halves),
        );
    }
}

/// [`pack_pairs`] for rows contiguous along K: eight pairs of a row
/// converted at a time (`vcvtneps2bf16`: nearest even, two terms to a
/// lane, the even one low), then placed in the panel.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_contiguous_terms(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const f32,
    row_stride: isize,
    dst: *mut u32,
) {
    let halves = kc.div_ceil(2);
    for q in 0..rows.div_ceil(width) {
        let panel = dst.add(q * width * halves);
        for i in 0..width {
            let r = q * width + i;
            if r >= rows {
                for h in 0..halves {
                    *panel.add(h * width + i) = 0;
                }
                continue;
            }
            let row = src.wrapping_offset(r as isize * row_stride);
            let mut h = 0;
            while h < halves {
                let terms = (kc - 2 * h).min(16);
                let mask: __mmask16 = if terms == 16 { !0 } else { (1u16 << terms) - 1 };
                let x = _mm512_maskz_loadu_ps(mask, row.add(2 * h));
                let lanes: [u32; 8] = std::mem::transmute(_mm512_cvtneps_pbh(x));
                for (e, &pair) in lanes.iter().enumerate().take(halves - h) {
                    *panel.add((h + e) * width + i) = pair;
                }
                h += 8;
            }
        }
    }
}

/// [`pack_pairs`] for any view, one pair at a time.
unsafe fn pack_any(
    width: usize,
    rows: usize,
    kc: usize,
    src: *const f32,
    row: Index,
    k: Index,
    dst: *mut u32,
) {
    let halves = kc.div_ceil(2);
    for q in 0..rows.div_ceil(width) {
        let panel = dst.add(q * width * halves);
        for h in 0..halves {
            let (p0, p1) = (2 * h, 2 * h + 1);
            let (o0, o1) = (k.at(p0), if p1 < kc { k.at(p1) } else { 0 });
            for i in 0..width {
                let r = q * width + i;
                *panel.add(h * width + i) = if r < rows {
                    let row = src.wrapping_offset(row.at(r));
                    let odd = if p1 < kc {
                        *row.wrapping_offset(o1)
                    } else {
                        0.0
                    };
                    pair(*row.wrapping_offset(o0), odd)
                } else {
                    0
                };
            }
        }
    }
}

/// One `MR × NR` tile: `C = alpha·Σ a·b` (added to C when `accumulate`)
/// over `halves` pairs of terms of the packed panels, its first `m` rows
/// and `n` columns written at `c` with strides `(rs_c, cs_c)`.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel(
    halves: usize,
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
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (mut a, mut b) = (a, b);
    for _ in 0..halves {
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b as *const _));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(16) as *const _));
        for (i, row) in acc.iter_mut().enumerate() {
            let ai: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(i) as i32));
            row[0] = _mm512_dpbf16_ps(row[0], ai, b0);
            row[1] = _mm512_dpbf16_ps(row[1], ai, b1);
        }
        a = a.add(MR);
        b = b.add(NR);
    }
    let alpha = _mm512_set1_ps(alpha);
    if m == MR && n == NR && cs_c == 1 {
        for (i, row) in acc.iter().enumerate() {
            let dst = c.offset(i as isize * rs_c);
            for (j, &x) in row.iter().enumerate() {
                let p = dst.add(j * 16);
                let v = _mm512_mul_ps(x, alpha);
                let v = if accumulate {
                    _mm512_add_ps(_mm512_loadu_ps(p), v)
                } else {
                    v
                };
                _mm512_storeu_ps(p, v);
            }
        }
    } else {
        let mut tile = [0f32; MR * NR];
        for (i, row) in acc.iter().enumerate() {
            for (j, &x) in row.iter().enumerate() {
                _mm512_storeu_ps(
                    tile.as_mut_ptr().add(i * NR + j * 16),
                    _mm512_mul_ps(x, alpha),
                );
            }
        }
        for i in 0..m {
            let dst = c.offset(i as isize * rs_c);
            for j in 0..n {
                let d = dst.offset(j as isize * cs_c);
                let v = tile[i * NR + j];
                *d = if accumulate { *d + v } else { v };
            }
        }
    }
}

/// The `vdpbf16ps` kernel as `super::pairs` drives it: A packed in panels
/// of [`MR`] rows, B of [`NR`] columns, each pair of terms side by side.
struct Vdp;

impl PairKernel for Vdp {
    const MR: usize = MR;
    const NR: usize = NR;
    const MC: usize = MC;
    const NC: usize = NC;
    const A_STAYS: bool = false;

    fn depth(kl: usize) -> usize {
        kl.div_ceil(2)
    }

    unsafe fn pack_a(&self, k: Block, dst: *mut u32) {
        pack_operand(MR, k.count, k.kl, k.op, k.first, k.pc, dst)
    }

    unsafe fn pack_b(&self, k: Block, dst: *mut u32) {
        pack_operand(NR, k.count, k.kl, k.op, k.first, k.pc, dst)
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
        kernel(depth, a, b, c, rs_c, cs_c, alpha, accumulate, m, n)
    }
}

/// Computes `p` (no diagonal factor; `packed` operands are not read) with
/// blocks of K of at most `kc` (the whole product's, even).
///
/// # Safety
///
/// As for `super::blis::gemm`, and the host runs the kernel
/// ([`available`]).
pub(super) unsafe fn gemm(kc: usize, p: Product<f32>) {
    debug_assert!(available());
    super::pairs::gemm(&Vdp, kc, p)
}

/// Packs rows `r0..r0 + rows` of `op`, terms `pc..pc + kc`, in pairs.
///
/// # Safety
///
/// As for [`pack_pairs`].
unsafe fn pack_operand(
    width: usize,
    rows: usize,
    kc: usize,
    op: Operand<f32>,
    r0: usize,
    pc: usize,
    dst: *mut u32,
) {
    let (src, row, k) = op.block(r0, pc);
    pack_pairs(width, rows, kc, src, row, k, dst);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A product of bf16 pairs with blocks of K of at most the first
    /// argument (this module's [`gemm`], or `super::super::amx`'s).
    pub(in crate::cpu::gemm) type Gemm<'a> = &'a dyn Fn(usize, Product<f32>);

    /// Deterministic values in [-1, 1), rounded to bf16 (as widened bf16
    /// tensors hold them).
    pub(in crate::cpu::gemm) fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let x = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                f32::from_bits(bf16_bits(x) << 16)
            })
            .collect()
    }

    /// `C = alpha·A·B` for A `m × k` (row stride `lda`, K stride 1 or
    /// transposed) and B `k × n` row-major, C with strides `(rs, cs)`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::cpu::gemm) fn run(
        gemm: Gemm,
        m: usize,
        n: usize,
        k: usize,
        a_t: bool,
        rs: isize,
        cs: isize,
        kc: usize,
        a: &[f32],
        b: &[f32],
    ) -> Vec<f32> {
        let mut c = vec![f32::NAN; m * n];
        let (a_stride, a_k) = if a_t {
            (1, m as isize)
        } else {
            (k as isize, 1)
        };
        let p = Product {
            m,
            n,
            k,
            alpha: 0.5,
            a: Operand {
                ptr: a.as_ptr(),
                rows: Index::Stride(a_stride),
                k: Index::Stride(a_k),
                packed: std::ptr::null(),
            },
            b: Operand {
                ptr: b.as_ptr(),
                rows: Index::Stride(1),
                k: Index::Stride(n as isize),
                packed: std::ptr::null(),
            },
            diag: None,
            c: c.as_mut_ptr(),
            rs_c: rs,
            cs_c: cs,
            accumulate: false,
            lower: None,
        };
        gemm(kc, p);
        c
    }

    /// This module's products (the views lie in the test's buffers, and
    /// the tests run them only where the host has the kernel).
    fn pairs(kc: usize, p: Product<f32>) {
        // SAFETY: as above.
        unsafe { gemm(kc, p) }
    }

    #[test]
    fn bf16_pairs_give_the_exact_products_within_f32_sums() {
        if !available() {
            eprintln!("skipped: this host has no avx512_bf16 (or TENJIN_SIMD is below AVX-512)");
            return;
        }
        exact_products_within_f32_sums(&pairs);
    }

    /// Checks `gemm` against f64 sums: each element within the f32
    /// rounding of its sum's terms.
    pub(in crate::cpu::gemm) fn exact_products_within_f32_sums(gemm: Gemm) {
        // Partial tiles, odd K, blocks of K, a transposed A, a column-major C.
        for &(m, n, k, a_t, col_major, kc) in &[
            (12, 32, 8, false, false, KC),
            (13, 33, 7, false, false, KC),
            (50, 70, 301, true, false, 64),
            (40, 9, 1031, false, true, KC),
            (144 + 5, 100, 130, false, false, 32),
        ] {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            let (rs, cs) = if col_major {
                (1, m as isize)
            } else {
                (n as isize, 1)
            };
            let c = run(gemm, m, n, k, a_t, rs, cs, kc, &a, &b);
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut size) = (0f64, 0f64);
                    for p in 0..k {
                        let av = if a_t { a[p * m + i] } else { a[i * k + p] };
                        let t = f64::from(av) * f64::from(b[p * n + j]);
                        want += t;
                        size += t.abs();
                    }
                    let got = f64::from(c[(i as isize * rs + j as isize * cs) as usize]);
                    let tol = (k as f64 + 2.0) * f64::from(f32::EPSILON) * size * 0.5;
                    assert!(
                        (got - 0.5 * want).abs() <= tol,
                        "{m}x{n}x{k} ({i}, {j}): {got} vs {}",
                        0.5 * want
                    );
                }
            }
        }
    }

    #[test]
    fn a_tile_of_the_product_is_bitwise_the_whole_products() {
        if !available() {
            eprintln!("skipped: this host has no avx512_bf16");
            return;
        }
        a_tile_is_bitwise_the_whole(&pairs);
    }

    /// Checks that columns 32.. of a product computed alone (as a
    /// thread's tile computes them) equal the whole product's, bit for bit.
    pub(in crate::cpu::gemm) fn a_tile_is_bitwise_the_whole(gemm: Gemm) {
        let (m, n, k) = (37, 90, 700);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let whole = run(gemm, m, n, k, false, n as isize, 1, 256, &a, &b);
        // Columns 32.. alone (as a thread's tile computes them).
        let mut part = vec![0f32; m * (n - 32)];
        let p = Product {
            m,
            n: n - 32,
            k,
            alpha: 0.5,
            a: Operand {
                ptr: a.as_ptr(),
                rows: Index::Stride(k as isize),
                k: Index::Stride(1),
                packed: std::ptr::null(),
            },
            b: Operand {
                ptr: b[32..].as_ptr(),
                rows: Index::Stride(1),
                k: Index::Stride(n as isize),
                packed: std::ptr::null(),
            },
            diag: None,
            c: part.as_mut_ptr(),
            rs_c: (n - 32) as isize,
            cs_c: 1,
            accumulate: false,
            lower: None,
        };
        gemm(256, p);
        for i in 0..m {
            for j in 32..n {
                assert_eq!(
                    whole[i * n + j].to_bits(),
                    part[i * (n - 32) + j - 32].to_bits()
                );
            }
        }
    }

    #[test]
    fn rounding_to_bf16_is_to_nearest_even_and_keeps_nan() {
        for x in [
            1.0f32 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            -2.5e-3,
            f32::INFINITY,
            3.4e38,
        ] {
            assert_eq!(
                bf16_bits(x) as u16,
                half::bf16::from_f32(x).to_bits(),
                "{x}"
            );
        }
        assert!(half::bf16::from_bits(bf16_bits(f32::NAN) as u16).is_nan());
    }
}
