//! [`Lanes`] for AVX2 (`__m256`, 8 lanes) and AVX-512 (`__m512`, 16
//! lanes), and the loads, stores and other operations the executor needs
//! beyond them ([`Wide`]).
//!
//! Owns the mapping of each lane operation to one instruction with the
//! same IEEE result as the f32x4 code's (`super::super::clif_lanes`): the
//! same comparisons (ordered and quiet, `Ne` unordered), fused
//! multiply-adds, bitwise selects. Every method is `#[inline(always)]` and
//! only sound inside a function compiled with the matching target features
//! (`super::exec`'s entry points), which the caller checks at run time.
//! Must not decide which width runs.

#![allow(unsafe_op_in_unsafe_fn)]

use super::super::vmath::{Cc, Lanes};
use std::arch::x86_64::*;

/// A vector width the executor runs: its lanes and the operations on whole
/// vectors in memory.
pub(crate) trait Wide: Lanes + Default {
    /// Lanes per vector.
    const W: usize;
    /// # Safety
    /// `p` points at `W` readable f32 values.
    unsafe fn load(&mut self, p: *const f32) -> Self::F;
    /// # Safety
    /// `p` points at `W` writable f32 values.
    unsafe fn store(&mut self, p: *mut f32, x: Self::F);
    fn sqrt(&mut self, x: Self::F) -> Self::F;
    /// Rounds towards −∞.
    fn floor(&mut self, x: Self::F) -> Self::F;
}

/// AVX-512 (F): 16 lanes, masks in `k` registers.
#[derive(Clone, Copy, Default)]
pub(crate) struct Avx512;

/// AVX2 with FMA: 8 lanes, masks as all-ones lanes.
#[derive(Clone, Copy, Default)]
pub(crate) struct Avx2;

macro_rules! cmp_pred {
    ($f:ident, $cc:expr, $a:expr, $b:expr) => {
        match $cc {
            Cc::Eq => $f::<_CMP_EQ_OQ>($a, $b),
            Cc::Ne => $f::<_CMP_NEQ_UQ>($a, $b),
            Cc::Lt => $f::<_CMP_LT_OQ>($a, $b),
            Cc::Le => $f::<_CMP_LE_OQ>($a, $b),
            Cc::Gt => $f::<_CMP_GT_OQ>($a, $b),
            Cc::Ge => $f::<_CMP_GE_OQ>($a, $b),
            Cc::Unordered => $f::<_CMP_UNORD_Q>($a, $b),
        }
    };
}

// SAFETY (every block in this file): the intrinsics need AVX-512F (or
// AVX2 and FMA); the methods are inlined into `super::exec`'s entry points,
// compiled with those features and called only on hosts that have them.
impl Lanes for Avx512 {
    type F = __m512;
    type I = __m512i;
    type M = __mmask16;

    #[inline(always)]
    fn c(&mut self, x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    fn ci(&mut self, x: i32) -> __m512i {
        unsafe { _mm512_set1_epi32(x) }
    }
    #[inline(always)]
    fn add(&mut self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(&mut self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(&mut self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(&mut self, a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    fn mad(&mut self, a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn abs(&mut self, a: __m512) -> __m512 {
        let m = self.ci(0x7FFF_FFFF);
        let a = self.as_int(a);
        let r = self.iand(a, m);
        self.as_float(r)
    }
    #[inline(always)]
    fn neg(&mut self, a: __m512) -> __m512 {
        unsafe {
            let s = _mm512_set1_epi32(i32::MIN);
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), s))
        }
    }
    #[inline(always)]
    fn cmp(&mut self, cc: Cc, a: __m512, b: __m512) -> __mmask16 {
        unsafe { cmp_pred!(_mm512_cmp_ps_mask, cc, a, b) }
    }
    #[inline(always)]
    fn or_m(&mut self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn and_m(&mut self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a & b
    }
    #[inline(always)]
    fn sel(&mut self, m: __mmask16, x: __m512, y: __m512) -> __m512 {
        unsafe { _mm512_mask_blend_ps(m, y, x) }
    }
    #[inline(always)]
    fn fand(&mut self, a: __m512, b: __m512) -> __m512 {
        let (a, b) = (self.as_int(a), self.as_int(b));
        let r = self.iand(a, b);
        self.as_float(r)
    }
    #[inline(always)]
    fn f_or(&mut self, a: __m512, b: __m512) -> __m512 {
        let (a, b) = (self.as_int(a), self.as_int(b));
        let r = self.ior(a, b);
        self.as_float(r)
    }
    #[inline(always)]
    fn as_int(&mut self, x: __m512) -> __m512i {
        unsafe { _mm512_castps_si512(x) }
    }
    #[inline(always)]
    fn as_float(&mut self, x: __m512i) -> __m512 {
        unsafe { _mm512_castsi512_ps(x) }
    }
    #[inline(always)]
    fn iadd(&mut self, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_add_epi32(a, b) }
    }
    #[inline(always)]
    fn isub(&mut self, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_sub_epi32(a, b) }
    }
    #[inline(always)]
    fn iand(&mut self, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_and_si512(a, b) }
    }
    #[inline(always)]
    fn ior(&mut self, a: __m512i, b: __m512i) -> __m512i {
        unsafe { _mm512_or_si512(a, b) }
    }
    #[inline(always)]
    fn sshr1(&mut self, a: __m512i) -> __m512i {
        unsafe { _mm512_srai_epi32::<1>(a) }
    }
    #[inline(always)]
    fn ushr23(&mut self, a: __m512i) -> __m512i {
        unsafe { _mm512_srli_epi32::<23>(a) }
    }
    #[inline(always)]
    fn shl23(&mut self, a: __m512i) -> __m512i {
        unsafe { _mm512_slli_epi32::<23>(a) }
    }
    #[inline(always)]
    fn itof(&mut self, a: __m512i) -> __m512 {
        unsafe { _mm512_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn scale(&mut self, y: __m512, n: __m512, _ni: __m512i) -> __m512 {
        unsafe { _mm512_scalef_ps(y, n) }
    }
    #[inline(always)]
    fn clamp(&mut self, x: __m512, lo: __m512, hi: __m512) -> __m512 {
        unsafe { _mm512_max_ps(lo, _mm512_min_ps(hi, x)) }
    }
}

impl Wide for Avx512 {
    const W: usize = 16;
    #[inline(always)]
    unsafe fn load(&mut self, p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(&mut self, p: *mut f32, x: __m512) {
        _mm512_storeu_ps(p, x)
    }
    #[inline(always)]
    fn sqrt(&mut self, x: __m512) -> __m512 {
        unsafe { _mm512_sqrt_ps(x) }
    }
    #[inline(always)]
    fn floor(&mut self, x: __m512) -> __m512 {
        unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(x) }
    }
}

impl Lanes for Avx2 {
    type F = __m256;
    type I = __m256i;
    type M = __m256;

    #[inline(always)]
    fn c(&mut self, x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    fn ci(&mut self, x: i32) -> __m256i {
        unsafe { _mm256_set1_epi32(x) }
    }
    #[inline(always)]
    fn add(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn mad(&mut self, a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn abs(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF))) }
    }
    #[inline(always)]
    fn neg(&mut self, a: __m256) -> __m256 {
        unsafe { _mm256_xor_ps(a, _mm256_set1_ps(-0.0)) }
    }
    #[inline(always)]
    fn cmp(&mut self, cc: Cc, a: __m256, b: __m256) -> __m256 {
        unsafe { cmp_pred!(_mm256_cmp_ps, cc, a, b) }
    }
    #[inline(always)]
    fn or_m(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn and_m(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn sel(&mut self, m: __m256, x: __m256, y: __m256) -> __m256 {
        unsafe { _mm256_blendv_ps(y, x, m) }
    }
    #[inline(always)]
    fn fand(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn f_or(&mut self, a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn as_int(&mut self, x: __m256) -> __m256i {
        unsafe { _mm256_castps_si256(x) }
    }
    #[inline(always)]
    fn as_float(&mut self, x: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(x) }
    }
    #[inline(always)]
    fn iadd(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(a, b) }
    }
    #[inline(always)]
    fn isub(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_sub_epi32(a, b) }
    }
    #[inline(always)]
    fn iand(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_and_si256(a, b) }
    }
    #[inline(always)]
    fn ior(&mut self, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_or_si256(a, b) }
    }
    #[inline(always)]
    fn sshr1(&mut self, a: __m256i) -> __m256i {
        unsafe { _mm256_srai_epi32::<1>(a) }
    }
    #[inline(always)]
    fn ushr23(&mut self, a: __m256i) -> __m256i {
        unsafe { _mm256_srli_epi32::<23>(a) }
    }
    #[inline(always)]
    fn shl23(&mut self, a: __m256i) -> __m256i {
        unsafe { _mm256_slli_epi32::<23>(a) }
    }
    #[inline(always)]
    fn itof(&mut self, a: __m256i) -> __m256 {
        unsafe { _mm256_cvtepi32_ps(a) }
    }
    #[inline(always)]
    fn clamp(&mut self, x: __m256, lo: __m256, hi: __m256) -> __m256 {
        unsafe { _mm256_max_ps(lo, _mm256_min_ps(hi, x)) }
    }
}

impl Wide for Avx2 {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn load(&mut self, p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(&mut self, p: *mut f32, x: __m256) {
        _mm256_storeu_ps(p, x)
    }
    #[inline(always)]
    fn sqrt(&mut self, x: __m256) -> __m256 {
        unsafe { _mm256_sqrt_ps(x) }
    }
    #[inline(always)]
    fn floor(&mut self, x: __m256) -> __m256 {
        unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(x) }
    }
}
