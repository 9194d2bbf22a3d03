//! The x86-64 micro-kernels: AVX-512 and AVX2 with FMA, f32 and f64.
//!
//! Owns the register tiles and their blocking. Each kernel keeps `mr × nv`
//! vector accumulators in registers; per step of K it loads `nv` vectors of
//! the packed B panel (or of B in place, at the step's offset from its
//! table of terms), broadcasts `mr` values of the packed A panel and
//! issues `mr · nv` fused multiply-adds. The tiles leave enough independent
//! accumulators to hide the FMA latency on both pipes (Zen 4: 4 cycles, 2
//! pipes of 256 bits), the cache blocks keep a B micro-panel in L1 and an A
//! block in L2 (see `BENCHMARKS.md`, "GEMM near the peak", for the
//! measurements behind them). Must not pack nor loop over blocks.

#![allow(unsafe_op_in_unsafe_fn)]

use super::kernels::{write_tile, Kernel};
use std::arch::x86_64::*;

/// Defines a [`super::kernels::KernelFn`] over one vector type. Calling
/// one is sound only on a host with its features: the kernel table
/// (`super::kernels`) hands them out by `Width::host`, which checks them.
macro_rules! micro_kernel {
    ($name:ident, $feature:literal, $t:ty, $mr:literal, $nv:literal, $lanes:literal,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident, $mul:ident, $add:ident) => {
        #[target_feature(enable = $feature)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            kc: usize,
            a: *const $t,
            rs_a: isize,
            cs_a: isize,
            b: *const $t,
            ks_b: isize,
            b_terms: *const isize,
            c: *mut $t,
            rs_c: isize,
            cs_c: isize,
            alpha: $t,
            accumulate: bool,
            m: usize,
            n: usize,
        ) {
            const NR: usize = $nv * $lanes;
            let mut acc = [[$zero(); $nv]; $mr];
            // A's rows, each from its own pointer: one offset advances
            // them all (computed as `a + i·rs_a` at every step, they were
            // a chain of `mr` dependent additions a step; a 1024³ product
            // on a Xeon, paired runs, 0.89–1.01 of the time, median 0.96).
            let rows: [*const $t; $mr] = std::array::from_fn(|i| a.offset(i as isize * rs_a));
            // One step of K: B's `nv` vectors at `b`, A's column at `at`
            // from each row.
            macro_rules! step {
                ($at:expr, $b:expr) => {{
                    let mut bv = [$zero(); $nv];
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = $load($b.add(j * $lanes));
                    }
                    for (row, &r) in acc.iter_mut().zip(&rows) {
                        let ai = $set1(*r.offset($at));
                        for (x, &bj) in row.iter_mut().zip(&bv) {
                            *x = $fma(ai, bj, *x);
                        }
                    }
                }};
            }
            let mut at = 0isize;
            if b_terms.is_null() {
                let mut b = b;
                for _ in 0..kc {
                    step!(at, b);
                    at += cs_a;
                    b = b.offset(ks_b);
                }
            } else {
                for p in 0..kc {
                    step!(at, b.offset(*b_terms.add(p)));
                    at += cs_a;
                }
            }
            let alpha = $set1(alpha);
            if m == $mr && n == NR && cs_c == 1 {
                for (i, row) in acc.iter().enumerate() {
                    let dst = c.offset(i as isize * rs_c);
                    for (j, &x) in row.iter().enumerate() {
                        let p = dst.add(j * $lanes);
                        let v = $mul(x, alpha);
                        $store(p, if accumulate { $add($load(p), v) } else { v });
                    }
                }
            } else {
                let mut tile = [0.0 as $t; $mr * NR];
                for (i, row) in acc.iter().enumerate() {
                    for (j, &x) in row.iter().enumerate() {
                        $store(tile.as_mut_ptr().add(i * NR + j * $lanes), $mul(x, alpha));
                    }
                }
                write_tile(&tile, NR, c, rs_c, cs_c, accumulate, m, n);
            }
        }
    };
}

/// The four instruction sets and element types, each a macro that defines
/// a kernel of `mr` rows by `nv` vectors with `micro_kernel`.
macro_rules! avx512_ps {
    ($name:ident, $mr:literal, $nv:literal) => {
        micro_kernel!(
            $name,
            "avx512f,fma",
            f32,
            $mr,
            $nv,
            16,
            _mm512_setzero_ps,
            _mm512_loadu_ps,
            _mm512_storeu_ps,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_mul_ps,
            _mm512_add_ps
        );
    };
}
macro_rules! avx512_pd {
    ($name:ident, $mr:literal, $nv:literal) => {
        micro_kernel!(
            $name,
            "avx512f,fma",
            f64,
            $mr,
            $nv,
            8,
            _mm512_setzero_pd,
            _mm512_loadu_pd,
            _mm512_storeu_pd,
            _mm512_set1_pd,
            _mm512_fmadd_pd,
            _mm512_mul_pd,
            _mm512_add_pd
        );
    };
}
macro_rules! avx2_ps {
    ($name:ident, $mr:literal, $nv:literal) => {
        micro_kernel!(
            $name,
            "avx2,fma",
            f32,
            $mr,
            $nv,
            8,
            _mm256_setzero_ps,
            _mm256_loadu_ps,
            _mm256_storeu_ps,
            _mm256_set1_ps,
            _mm256_fmadd_ps,
            _mm256_mul_ps,
            _mm256_add_ps
        );
    };
}
macro_rules! avx2_pd {
    ($name:ident, $mr:literal, $nv:literal) => {
        micro_kernel!(
            $name,
            "avx2,fma",
            f64,
            $mr,
            $nv,
            4,
            _mm256_setzero_pd,
            _mm256_loadu_pd,
            _mm256_storeu_pd,
            _mm256_set1_pd,
            _mm256_fmadd_pd,
            _mm256_mul_pd,
            _mm256_add_pd
        );
    };
}

avx512_ps!(avx512_f32, 6, 2);
avx512_ps!(avx512_f32_12x32, 12, 2);
avx512_ps!(avx512_f32_4x32, 4, 2);
avx512_ps!(avx512_f32_8x32, 8, 2);
avx512_pd!(avx512_f64, 6, 2);
avx2_ps!(avx2_f32, 6, 2);
avx2_pd!(avx2_f64, 6, 2);
avx512_ps!(avx512_f32_narrow, 12, 1);
avx512_pd!(avx512_f64_narrow, 12, 1);
avx2_ps!(avx2_f32_narrow, 12, 1);
avx2_pd!(avx2_f64_narrow, 12, 1);

pub(super) const AVX512_F32: Kernel<f32> = Kernel {
    mr: 6,
    nr: 32,
    kc: 512,
    mc: 144,
    nc: 4096,
    run: avx512_f32,
    short: &[],
    name: "avx512 6x32",
};

/// The AVX-512 f32 kernel on Intel cores: twelve rows (24 accumulators,
/// half as many loads a multiply-add). A 1024³ product on a Xeon took
/// 16.0–16.5 ms against 17.1–18.0 with six rows (alternated, medians of
/// 60); six rows stay on AMD cores, where they reach 94 % of the FMA peak
/// (`BENCHMARKS.md`). The same sums in the same order: the same bits.
///
/// A last panel of at most 4 or 8 rows runs a 4- or 8-row tile (M = 64,
/// a convolution's channels: 5 panels of 12 and one of 4, not 6 of 12).
pub(super) const AVX512_F32_INTEL: Kernel<f32> = Kernel {
    mr: 12,
    run: avx512_f32_12x32,
    short: &[(4, avx512_f32_4x32), (8, avx512_f32_8x32)],
    name: "avx512 12x32",
    ..AVX512_F32
};

/// Whether the CPU is Intel's (CPUID's vendor string).
fn intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        let leaf = __cpuid(0);
        [leaf.ebx, leaf.edx, leaf.ecx] == [0x756e_6547, 0x4965_6e69, 0x6c65_746e]
    })
}

/// The AVX-512 f32 kernel for this CPU's vendor.
pub(super) fn avx512_f32_kernel() -> Kernel<f32> {
    if intel() {
        AVX512_F32_INTEL
    } else {
        AVX512_F32
    }
}

pub(super) const AVX512_F64: Kernel<f64> = Kernel {
    mr: 6,
    nr: 16,
    kc: 512,
    mc: 96,
    nc: 4096,
    run: avx512_f64,
    short: &[],
    name: "avx512 6x16",
};

pub(super) const AVX2_F32: Kernel<f32> = Kernel {
    mr: 6,
    nr: 16,
    kc: 512,
    mc: 144,
    nc: 4096,
    run: avx2_f32,
    short: &[],
    name: "avx2 6x16",
};

pub(super) const AVX2_F64: Kernel<f64> = Kernel {
    mr: 6,
    nr: 8,
    kc: 512,
    mc: 96,
    nc: 4096,
    run: avx2_f64,
    short: &[],
    name: "avx2 6x8",
};

/// The narrow tiles, for products of at most one vector of columns (a
/// layer's 10 logits, a convolution's 16 positions of a row), where the
/// wide tiles would compute mostly padding: twelve rows by one vector.
pub(super) const AVX512_F32_NARROW: Kernel<f32> = Kernel {
    mr: 12,
    nr: 16,
    mc: 144,
    run: avx512_f32_narrow,
    name: "avx512 12x16",
    ..AVX512_F32
};

pub(super) const AVX512_F64_NARROW: Kernel<f64> = Kernel {
    mr: 12,
    nr: 8,
    run: avx512_f64_narrow,
    name: "avx512 12x8",
    ..AVX512_F64
};

pub(super) const AVX2_F32_NARROW: Kernel<f32> = Kernel {
    mr: 12,
    nr: 8,
    run: avx2_f32_narrow,
    name: "avx2 12x8",
    ..AVX2_F32
};

pub(super) const AVX2_F64_NARROW: Kernel<f64> = Kernel {
    mr: 12,
    nr: 4,
    run: avx2_f64_narrow,
    name: "avx2 12x4",
    ..AVX2_F64
};
