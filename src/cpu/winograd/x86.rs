//! AVX-512 kernels for runs of 16 tiles of an f32 Winograd convolution.
//!
//! Owns [`input_run`], [`gradient_run`] and [`output_run`]: one vector
//! holds one value of 16 adjacent tiles. A patch row's columns `2t … 2t + 3` of 16 tiles are two
//! even/odd de-interleaves (`vpermt2ps`) of 34 adjacent values; the
//! outputs' two columns per tile are interleaved back the same way. The
//! additions are those of `super::transforms::input_tile`,
//! `gradient_tile` and `output_tile`, in the same order, so the bits are the portable path's
//! (a unit test compares them). Must not decide where runs lie.

use std::arch::x86_64::*;

/// Lanes `0, 2, …, 30` of two vectors side by side.
#[inline(always)]
unsafe fn evens() -> __m512i {
    _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0)
}

/// Lanes `1, 3, …, 31` of two vectors side by side.
#[inline(always)]
unsafe fn odds() -> __m512i {
    _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)
}

/// `Bᵀ d B` of the patches of 16 adjacent tiles whose four rows start at
/// `rows` (each reads 34 values), value `ξ` of tile `l` written to
/// `dst + ξ·stride + l`.
///
/// # Safety
///
/// The host has AVX-512F; the 34 values of each row and the 16 runs of 16
/// values at `dst` are valid.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn input_run(rows: [*const f32; 4], dst: *mut f32, stride: usize) {
    let (even, odd) = (evens(), odds());
    // d[i][j]: column 2l + j of patch row i, for the 16 tiles l.
    let mut d = [[_mm512_setzero_ps(); 4]; 4];
    for (i, &row) in rows.iter().enumerate() {
        let (a, b) = (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)));
        let (c, e) = (_mm512_loadu_ps(row.add(2)), _mm512_loadu_ps(row.add(18)));
        d[i] = [
            _mm512_permutex2var_ps(a, even, b),
            _mm512_permutex2var_ps(a, odd, b),
            _mm512_permutex2var_ps(c, even, e),
            _mm512_permutex2var_ps(c, odd, e),
        ];
    }
    let (add, sub) = (_mm512_add_ps, _mm512_sub_ps);
    // Down the columns (Bᵀ d), as `input_tile`.
    let down = |j: usize| {
        [
            sub(d[0][j], d[2][j]),
            add(d[1][j], d[2][j]),
            sub(d[2][j], d[1][j]),
            sub(d[1][j], d[3][j]),
        ]
    };
    let cols = [down(0), down(1), down(2), down(3)];
    #[allow(clippy::needless_range_loop)] // (`r` indexes the inner arrays)
    for r in 0..4 {
        let values = [
            sub(cols[0][r], cols[2][r]),
            add(cols[1][r], cols[2][r]),
            sub(cols[2][r], cols[1][r]),
            sub(cols[1][r], cols[3][r]),
        ];
        for (s, v) in values.into_iter().enumerate() {
            _mm512_storeu_ps(dst.add((r * 4 + s) * stride), v);
        }
    }
}

/// `A g Aᵀ` of the 2×2 tiles of 16 adjacent tiles of an output gradient
/// whose two rows start at `rows` (each reads 32 values), value `ξ` of
/// tile `l` written to `dst + ξ·stride + l`.
///
/// # Safety
///
/// The host has AVX-512F; the 32 values of each row and the 16 runs of 16
/// values at `dst` are valid.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gradient_run(rows: [*const f32; 2], dst: *mut f32, stride: usize) {
    let (even, odd) = (evens(), odds());
    let mut g = [[_mm512_setzero_ps(); 2]; 2];
    for (i, &row) in rows.iter().enumerate() {
        let (a, b) = (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)));
        g[i] = [
            _mm512_permutex2var_ps(a, even, b),
            _mm512_permutex2var_ps(a, odd, b),
        ];
    }
    let (add, sub) = (_mm512_add_ps, _mm512_sub_ps);
    // −x as IEEE negation (the sign bit flipped), as `gradient_tile`.
    let sign = _mm512_set1_epi32(i32::MIN);
    let neg = |x: __m512| _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
    let down = |j: usize| {
        [
            g[0][j],
            add(g[0][j], g[1][j]),
            sub(g[0][j], g[1][j]),
            neg(g[1][j]),
        ]
    };
    let cols = [down(0), down(1)];
    #[allow(clippy::needless_range_loop)] // (`r` indexes the inner arrays)
    for r in 0..4 {
        let values = [
            cols[0][r],
            add(cols[0][r], cols[1][r]),
            sub(cols[0][r], cols[1][r]),
            neg(cols[1][r]),
        ];
        for (s, v) in values.into_iter().enumerate() {
            _mm512_storeu_ps(dst.add((r * 4 + s) * stride), v);
        }
    }
}

/// `Aᵀ M A` of 16 adjacent tiles whose value `ξ` of tile `l` lies at `m +
/// ξ·stride + l`, written to the two output rows at `rows` (32 adjacent
/// values each: the tiles' two columns).
///
/// # Safety
///
/// The host has AVX-512F; the 16 runs of 16 values at `m` and the 32
/// values of each row are valid.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn output_run(m: *const f32, stride: usize, rows: [*mut f32; 2]) {
    let v: [__m512; 16] = std::array::from_fn(|xi| _mm512_loadu_ps(m.add(xi * stride)));
    let (add, sub) = (_mm512_add_ps, _mm512_sub_ps);
    // Down the columns (Aᵀ M), as `output_tile`.
    let down = |j: usize| {
        [
            add(add(v[j], v[4 + j]), v[8 + j]),
            sub(sub(v[4 + j], v[8 + j]), v[12 + j]),
        ]
    };
    let cols = [down(0), down(1), down(2), down(3)];
    // Lanes 0..8 of each, then 8..16, interleaved: (y0[l], y1[l]) pairs.
    let low = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    let high = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (a, &row) in rows.iter().enumerate() {
        let y0 = add(add(cols[0][a], cols[1][a]), cols[2][a]);
        let y1 = sub(sub(cols[1][a], cols[2][a]), cols[3][a]);
        _mm512_storeu_ps(row, _mm512_permutex2var_ps(y0, low, y1));
        _mm512_storeu_ps(row.add(16), _mm512_permutex2var_ps(y0, high, y1));
    }
}
