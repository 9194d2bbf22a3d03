//! Conversions between f32 and bf16 over slices, eight values at a time
//! with AVX2 where the CPU has it, with the `half` crate's values: f32 →
//! bf16 to nearest even (subnormals rounded like any value, a NaN kept
//! quiet with its sign and high payload), bf16 → f32 exactly. Every op on
//! bf16 tensors widens its arguments and rounds its result through here
//! (`HostIn::cast_into`), so their speed is that of every bf16 op's first
//! and last passes; the `half` crate converts bf16 slices one value at a
//! time.
//!
//! Owns [`f32_to_bf16`], [`bf16_to_f32`] and their composition
//! [`round_to_bf16`] (f32 values rounded to bf16 values, in f32: autocast's
//! operands). (`vcvtneps2bf16` is not used: it reads f32 subnormals as
//! zero.) Must not know about tensors or kernels.

use half::bf16;

/// `out[i] = $one(x[i])` for every `i` of the shorter slice: the first
/// multiple of 8 by `$eights` (an AVX2 function returning how many it
/// did) where the CPU has AVX2, the rest one at a time.
macro_rules! by_eights {
    ($x:expr, $out:expr, $eights:ident, $one:expr) => {{
        let n = $x.len().min($out.len());
        let (x, out) = (&$x[..n], &mut $out[..n]);
        #[allow(unused_mut)]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, and both slices hold `n` elements.
            done = unsafe { $eights(x, out) };
        }
        for (o, &v) in out[done..].iter_mut().zip(&x[done..]) {
            *o = $one(v);
        }
    }};
}

/// `out[i] = bf16::from_f32(x[i])` for every `i` of the shorter slice.
///
/// ```
/// use tenjin::bf16;
/// # use tenjin::kernel::bf16_slices::f32_to_bf16;
/// let x = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::NAN, 1e-40];
/// let mut out = [bf16::ZERO; 4];
/// f32_to_bf16(&x, &mut out);
/// assert_eq!(out[0], bf16::from_f32(1.0)); // a tie, to even
/// assert_eq!(out[1], bf16::from_f32(1.0 + 4.0 / 256.0));
/// assert!(out[2].is_nan());
/// assert_eq!(out[3], bf16::from_f32(1e-40)); // a subnormal, not zero
/// ```
pub fn f32_to_bf16(x: &[f32], out: &mut [bf16]) {
    by_eights!(x, out, avx2, bf16::from_f32)
}

/// `out[i] = x[i].to_f32()` (exact; a NaN comes out quiet) for every `i`
/// of the shorter slice.
///
/// ```
/// use tenjin::bf16;
/// # use tenjin::kernel::bf16_slices::bf16_to_f32;
/// let x = [bf16::from_f32(1.5), bf16::NEG_INFINITY, bf16::from_bits(0x0001)];
/// let mut out = [0f32; 3];
/// bf16_to_f32(&x, &mut out);
/// assert_eq!(out, [1.5, f32::NEG_INFINITY, f32::from_bits(0x0001_0000)]);
/// ```
pub fn bf16_to_f32(x: &[bf16], out: &mut [f32]) {
    by_eights!(x, out, widen_avx2, bf16::to_f32)
}

/// Widens the first multiple of 8 of the elements; returns how many.
///
/// # Safety
///
/// The CPU has AVX2; `out` holds at least `x.len()` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn widen_avx2(x: &[bf16], out: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let full = x.len() / 8 * 8;
    let (abs, inf, quiet) = (
        _mm256_set1_epi32(0x7fff_ffff),
        _mm256_set1_epi32(0x7f80_0000),
        _mm256_set1_epi32(0x0040_0000),
    );
    for k in (0..full).step_by(8) {
        let h = _mm_loadu_si128(x.as_ptr().add(k) as *const __m128i);
        let b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        // A NaN comes out quiet, as `half` widens it.
        let nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), inf);
        let b = _mm256_or_si256(b, _mm256_and_si256(nan, quiet));
        _mm256_storeu_si256(out.as_mut_ptr().add(k) as *mut __m256i, b);
    }
    full
}

/// The bf16 bits (in the low half of each lane) of eight f32 lanes `b`,
/// rounded as `bf16::from_f32`: nearest even (add 0x7fff plus the kept
/// part's lowest bit), a NaN (magnitude above infinity's bits) keeping its
/// high half, quieted.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn rounded_bits(b: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let high = _mm256_srli_epi32(b, 16);
    let lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    let rounded = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    let magnitude = _mm256_and_si256(b, _mm256_set1_epi32(0x7fff_ffff));
    let nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f80_0000));
    let quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    _mm256_blendv_epi8(rounded, quiet, nan)
}

/// `out[i] = bf16::from_f32(x[i]).to_f32()` for every `i` of the shorter
/// slice: f32 values rounded to bf16 values, kept in f32 (one pass where
/// the two conversions take two).
///
/// ```
/// # use tenjin::kernel::bf16_slices::round_to_bf16;
/// let x = [1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::NAN];
/// let mut out = [0f32; 3];
/// round_to_bf16(&x, &mut out);
/// assert_eq!(&out[..2], &[1.0, 1.0 + 4.0 / 256.0]);
/// assert!(out[2].is_nan());
/// ```
pub fn round_to_bf16(x: &[f32], out: &mut [f32]) {
    by_eights!(x, out, round_avx2, |v| bf16::from_f32(v).to_f32())
}

/// Rounds the first multiple of 8 of the elements; returns how many.
///
/// # Safety
///
/// The CPU has AVX2; `out` holds at least `x.len()` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn round_avx2(x: &[f32], out: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let full = x.len() / 8 * 8;
    for k in (0..full).step_by(8) {
        let b = _mm256_loadu_si256(x.as_ptr().add(k) as *const __m256i);
        // The bf16 bits back in the high half; a NaN's are quiet already,
        // as `bf16::to_f32` would make them.
        let wide = _mm256_slli_epi32(rounded_bits(b), 16);
        _mm256_storeu_si256(out.as_mut_ptr().add(k) as *mut __m256i, wide);
    }
    full
}

/// Rounds the first multiple of 8 of the elements; returns how many.
///
/// # Safety
///
/// The CPU has AVX2; `out` holds at least `x.len()` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(x: &[f32], out: &mut [bf16]) -> usize {
    use std::arch::x86_64::*;
    let full = x.len() / 8 * 8;
    for k in (0..full).step_by(8) {
        let b = _mm256_loadu_si256(x.as_ptr().add(k) as *const __m256i);
        let bits = rounded_bits(b);
        // 8 × 32 bits (each < 2¹⁶) to 8 × 16: the pack works per 128-bit
        // half, so lanes 0-3 and 4-7 land in quadwords 0 and 2.
        let packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0b1000);
        _mm_storeu_si128(
            out.as_mut_ptr().add(k) as *mut __m128i,
            _mm256_castsi256_si128(packed),
        );
    }
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every high half (sign, exponent, 7 mantissa bits) with low halves
    /// at and around the tie, zero, and the extremes: the vector path
    /// against `half`'s rounding, bit for bit.
    #[test]
    fn rounds_every_high_half_as_half_does() {
        let lows = [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000];
        let x: Vec<f32> = (0..1u32 << 16)
            .flat_map(|h| lows.iter().map(move |&l| f32::from_bits(h << 16 | l)))
            .chain([0.5, -1.25, 3.0]) // a tail past the last 8
            .collect();
        let mut got = vec![bf16::ZERO; x.len()];
        f32_to_bf16(&x, &mut got);
        for (v, g) in x.iter().zip(&got) {
            assert_eq!(
                g.to_bits(),
                bf16::from_f32(*v).to_bits(),
                "{:#x}",
                v.to_bits()
            );
        }
    }

    #[test]
    fn rounds_to_bf16_values_as_the_two_conversions_do() {
        let lows = [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff];
        let x: Vec<f32> = (0..1u32 << 16)
            .flat_map(|h| lows.iter().map(move |&l| f32::from_bits(h << 16 | l)))
            .chain([0.5, -1.25, 3.0])
            .collect();
        let mut got = vec![0f32; x.len()];
        round_to_bf16(&x, &mut got);
        for (v, g) in x.iter().zip(&got) {
            let want = bf16::from_f32(*v).to_f32();
            assert_eq!(g.to_bits(), want.to_bits(), "{:#x}", v.to_bits());
        }
    }

    #[test]
    fn widens_every_bf16_exactly() {
        let x: Vec<bf16> = (0..=u16::MAX)
            .map(bf16::from_bits)
            .chain([bf16::ONE])
            .collect();
        let mut got = vec![0f32; x.len()];
        bf16_to_f32(&x, &mut got);
        for (v, g) in x.iter().zip(&got) {
            assert_eq!(g.to_bits(), v.to_f32().to_bits(), "{:#x}", v.to_bits());
        }
    }
}
