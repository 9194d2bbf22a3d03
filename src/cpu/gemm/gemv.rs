//! Matrix–vector products: a product with one column (or one row, through
//! its transpose) is memory-bound, and a register tile of 6 × 32 would
//! spend 31 of its 32 lanes on padding.
//!
//! Owns [`gemv`]: when A is contiguous along K, each output is a dot
//! product of a row of A with the vector; when A is contiguous along M, the
//! output is a sum of columns of A scaled by the vector's elements (axpy).
//! Both are plain Rust compiled for the host's width (the same code at
//! every width: multiplies and adds, never fused, in a fixed order that
//! depends on K only), so the result is the same at every thread count and
//! every width. Must not tile nor thread (the caller cuts the rows).

use super::super::wide::Width;
use super::blis::Product;
use super::kernels::Float;
use super::pack::Index;

/// Lanes of the dot product's accumulators.
const LANES: usize = 32;

/// `Σ_p a[p]·b[p]` over `k` contiguous elements: `LANES` accumulators,
/// then a halving sum.
#[inline(always)]
unsafe fn dot_body<T: Float>(k: usize, a: *const T, b: *const T) -> T {
    let mut acc = [T::ZERO; LANES];
    let full = k / LANES * LANES;
    let mut p = 0;
    while p < full {
        for (l, x) in acc.iter_mut().enumerate() {
            *x = *x + *a.add(p + l) * *b.add(p + l);
        }
        p += LANES;
    }
    for (l, x) in acc.iter_mut().take(k - full).enumerate() {
        *x = *x + *a.add(full + l) * *b.add(full + l);
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] = acc[l] + acc[l + width];
        }
    }
    acc[0]
}

/// `c[i] += x·a[i]` over `m` contiguous elements.
#[inline(always)]
unsafe fn axpy_body<T: Float>(m: usize, x: T, a: *const T, c: *mut T) {
    for i in 0..m {
        *c.add(i) = *c.add(i) + x * *a.add(i);
    }
}

type DotFn<T> = unsafe fn(usize, *const T, *const T) -> T;
type AxpyFn<T> = unsafe fn(usize, T, *const T, *mut T);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512<T: Float>(k: usize, a: *const T, b: *const T) -> T {
    dot_body(k, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2<T: Float>(k: usize, a: *const T, b: *const T) -> T {
    dot_body(k, a, b)
}

unsafe fn dot_plain<T: Float>(k: usize, a: *const T, b: *const T) -> T {
    dot_body(k, a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn axpy_avx512<T: Float>(m: usize, x: T, a: *const T, c: *mut T) {
    axpy_body(m, x, a, c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn axpy_avx2<T: Float>(m: usize, x: T, a: *const T, c: *mut T) {
    axpy_body(m, x, a, c)
}

unsafe fn axpy_plain<T: Float>(m: usize, x: T, a: *const T, c: *mut T) {
    axpy_body(m, x, a, c)
}

/// The dot product and axpy for this host's width ([`Width::host`], which
/// checks the features).
fn ops<T: Float>() -> (DotFn<T>, AxpyFn<T>) {
    match Width::host() {
        #[cfg(target_arch = "x86_64")]
        Width::Avx512 => (dot_avx512::<T>, axpy_avx512::<T>),
        #[cfg(target_arch = "x86_64")]
        Width::Avx2 => (dot_avx2::<T>, axpy_avx2::<T>),
        _ => (dot_plain::<T>, axpy_plain::<T>),
    }
}

/// Computes `p`, a product with one column (`p.n == 1`), when A is
/// contiguous along K or along M; returns `false` (nothing written) for
/// any other A, which the tiled product computes.
///
/// # Safety
///
/// As for [`super::blis::gemm`].
pub(super) unsafe fn gemv<T: Float>(p: &Product<T>) -> bool {
    let Product {
        m,
        k,
        a,
        b,
        c,
        rs_c,
        ..
    } = *p;
    debug_assert_eq!(p.n, 1);
    let dot_form = matches!(a.k, Index::Stride(1));
    if !dot_form && a.rows.stride() != Some(1) {
        return false;
    }
    let (dot, axpy) = ops::<T>();
    // `alpha·s`, added to C or written over it.
    let store = |i: usize, s: T| {
        let dst = c.offset(i as isize * rs_c);
        let v = s * p.alpha;
        *dst = if p.accumulate { *dst + v } else { v };
    };
    // The vector's term `q`, with the diagonal factor applied (as packing
    // applies it: one rounding of `b·d`).
    let term = |q: usize| {
        let v = *b.ptr.offset(b.k.at(q));
        match p.diag {
            Some((d, index)) => v * *d.offset(index.at(q)),
            None => v,
        }
    };
    if dot_form {
        // The vector as it is when contiguous, else gathered once.
        let gathered: Vec<T>;
        let x = if p.diag.is_none() && matches!(b.k, Index::Stride(1)) {
            b.ptr
        } else {
            gathered = (0..k).map(term).collect();
            gathered.as_ptr()
        };
        for i in 0..m {
            store(i, dot(k, a.ptr.offset(a.rows.at(i)), x));
        }
    } else {
        let mut sums = vec![T::ZERO; m];
        for q in 0..k {
            axpy(m, term(q), a.ptr.offset(a.k.at(q)), sums.as_mut_ptr());
        }
        for (i, &s) in sums.iter().enumerate() {
            store(i, s);
        }
    }
    true
}
