//! Packing panels whose rows are far apart but whose terms of K come in
//! runs (a weight read through its transpose, `x·Wᵀ`; the rows of an
//! activation as the left operand; a stride-2 convolution's positions,
//! two apart): sixteen terms of sixteen rows at a time, loaded as sixteen
//! vectors and transposed in registers (AVX-512), instead of one scalar
//! load and store per element.
//!
//! Owns [`gather_panel`]; `super::pack` decides when it applies. Same
//! values as the scalar gather, in the same places: a copy, no
//! arithmetic.

use super::super::wide::Width;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the transposes run: AVX-512F on this host and no narrower
/// width forced (`TENJIN_SIMD`, which CI sets to exercise the portable
/// path: the scalar gather then packs).
pub(super) fn available() -> bool {
    Width::host() == Width::Avx512
}

/// How sixteen consecutive terms of K lie in every row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    /// Adjacent: one vector load.
    Adjacent,
    /// Two apart (a stride-2 convolution's positions): two loads, the
    /// even elements kept by one permute.
    EveryOther,
    /// Anything else: one value at a time.
    Scattered,
}

/// The run of terms `p0..p0 + 16` at offsets `k(p)`.
fn run_of(p0: usize, k: &impl Fn(usize) -> isize) -> Run {
    let first = k(p0);
    if (1..16).all(|i| k(p0 + i) == first + i as isize) {
        Run::Adjacent
    } else if (1..16).all(|i| k(p0 + i) == first + 2 * i as isize) {
        Run::EveryOther
    } else {
        Run::Scattered
    }
}

/// One panel of `width` rows (a multiple of 16, or at most 16) from the
/// `live ≤ width` rows starting at `rows[..live]`, term `p` of a row at
/// offset `k(p)` from its start: for every `p` in `0..kc`, the `width`
/// values side by side at `panel + p·width`, zeros for the rows past
/// `live`.
///
/// # Safety
///
/// Every `rows[i] + k(p)` (`i < live`, `p < kc`) is readable, all in one
/// buffer (so is every element between two of them, which a run's vector
/// loads read); `panel` has room for `width · kc`; `available()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gather_panel(
    width: usize,
    live: usize,
    kc: usize,
    rows: &[*const f32],
    k: impl Fn(usize) -> isize,
    panel: *mut f32,
) {
    let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    let blocks = kc / 16;
    for b in 0..blocks {
        let p0 = b * 16;
        let run = run_of(p0, &k);
        let at = k(p0);
        for chunk in (0..width).step_by(16) {
            let n = 16.min(width - chunk);
            if run == Run::Scattered {
                gather_scalar(width, live, chunk, n, p0..p0 + 16, rows, &k, panel);
                continue;
            }
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, v) in r.iter_mut().enumerate().take(n) {
                if chunk + i < live {
                    let from = rows[chunk + i].wrapping_offset(at);
                    *v = match run {
                        Run::Adjacent => _mm512_loadu_ps(from),
                        // Elements 0, 2, …, 30: the second load stops at 30.
                        _ => _mm512_permutex2var_ps(
                            _mm512_loadu_ps(from),
                            even,
                            _mm512_maskz_loadu_ps(0x7fff, from.add(16)),
                        ),
                    };
                }
            }
            let mask: __mmask16 = if n == 16 { 0xffff } else { (1u16 << n) - 1 };
            for (c, column) in transpose(r).iter().enumerate() {
                _mm512_mask_storeu_ps(panel.add((p0 + c) * width + chunk), mask, *column);
            }
        }
    }
    // The last terms, one value at a time.
    for chunk in (0..width).step_by(16) {
        let n = 16.min(width - chunk);
        gather_scalar(width, live, chunk, n, blocks * 16..kc, rows, &k, panel);
    }
}

/// Terms `terms` of rows `chunk..chunk + n` into the panel, one value at
/// a time (zeros past `live`).
///
/// # Safety
///
/// As for [`gather_panel`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gather_scalar(
    width: usize,
    live: usize,
    chunk: usize,
    n: usize,
    terms: std::ops::Range<usize>,
    rows: &[*const f32],
    k: &impl Fn(usize) -> isize,
    panel: *mut f32,
) {
    let read = n.min(live.saturating_sub(chunk));
    let rows = rows.get(chunk..chunk + read).unwrap_or(&[]);
    for p in terms {
        let at = k(p);
        let column = panel.add(p * width + chunk);
        for (i, row) in rows.iter().enumerate() {
            *column.add(i) = *row.wrapping_offset(at);
        }
        for i in read..n {
            *column.add(i) = 0.0;
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn gather_panel(
    _: usize,
    _: usize,
    _: usize,
    _: &[*const f32],
    _: impl Fn(usize) -> isize,
    _: *mut f32,
) {
    unreachable!("no register transposes off x86-64 (`available` is false)")
}

/// The 16×16 transpose of `r` (row `i`, lane `j` → row `j`, lane `i`):
/// interleaves of 32-bit, then 64-bit elements within 128-bit lanes, then
/// two shuffles of 128-bit lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Four rows' element `c` side by side, for `c` ≡ j (mod 4) in lane
    // `c / 4` of u[4g + j].
    let mut u = [_mm512_setzero_ps(); 16];
    let pd = _mm512_castps_pd;
    let ps = _mm512_castpd_ps;
    for g in 0..4 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = ps(_mm512_unpacklo_pd(pd(a), pd(c)));
        u[4 * g + 1] = ps(_mm512_unpackhi_pd(pd(a), pd(c)));
        u[4 * g + 2] = ps(_mm512_unpacklo_pd(pd(b), pd(d)));
        u[4 * g + 3] = ps(_mm512_unpackhi_pd(pd(b), pd(d)));
    }
    // Lanes 0 and 2 (0x88) or 1 and 3 (0xdd) of two groups of four rows.
    let mut v = [_mm512_setzero_ps(); 16];
    for j in 0..4 {
        v[j] = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
        v[4 + j] = _mm512_shuffle_f32x4::<0xdd>(u[j], u[4 + j]);
        v[8 + j] = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
        v[12 + j] = _mm512_shuffle_f32x4::<0xdd>(u[8 + j], u[12 + j]);
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for j in 0..4 {
        out[j] = _mm512_shuffle_f32x4::<0x88>(v[j], v[8 + j]);
        out[4 + j] = _mm512_shuffle_f32x4::<0x88>(v[4 + j], v[12 + j]);
        out[8 + j] = _mm512_shuffle_f32x4::<0xdd>(v[j], v[8 + j]);
        out[12 + j] = _mm512_shuffle_f32x4::<0xdd>(v[4 + j], v[12 + j]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_equal_the_scalar_gather_for_every_width_length_and_run() {
        if !available() {
            eprintln!("skipped: no AVX-512F on this host, or TENJIN_SIMD forces a narrower width");
            return;
        }
        let stride = 200;
        let data: Vec<f32> = (0..40 * stride).map(|v| v as f32 + 0.5).collect();
        // Adjacent terms, terms two apart, and terms in no run.
        type Offsets = fn(usize) -> isize;
        let runs: [(&str, Offsets); 3] = [
            ("adjacent", |p| p as isize),
            ("every other", |p| 2 * p as isize),
            ("scattered", |p| (p * 7 % 61) as isize),
        ];
        for (name, k) in runs {
            for width in [6, 12, 16, 32] {
                for live in [1, width / 2, width] {
                    for kc in [1, 15, 16, 17, 48, 61] {
                        let rows: Vec<*const f32> =
                            (0..live).map(|i| data[i * stride + 3..].as_ptr()).collect();
                        let mut panel = vec![f32::NAN; width * kc];
                        unsafe { gather_panel(width, live, kc, &rows, k, panel.as_mut_ptr()) };
                        for p in 0..kc {
                            for i in 0..width {
                                let expected = if i < live {
                                    data[i * stride + 3 + k(p) as usize]
                                } else {
                                    0.0
                                };
                                let got = panel[p * width + i];
                                assert_eq!(got, expected, "{name}: {width} {live} {kc} {p} {i}");
                            }
                        }
                    }
                }
            }
        }
    }
}
