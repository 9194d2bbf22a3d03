//! How one stage runs: as a GEMM, as a GEMM followed by a fused
//! element-wise epilogue, as a loop nest, or (opt in, on the CPU) as
//! Winograd's convolution, alone or followed by its epilogue.
//!
//! Owns [`route`] and [`route_for`], the decision every backend obeys: a
//! contraction big enough to pay for a GEMM call goes to GEMM (alone, or
//! followed by one fused kernel for the element-wise work around it); every
//! other function is a loop nest, lowered and planned for the backend's
//! [`Target`] by the loop passes (`super::passes`), so a backend only
//! emits code. The choice between GEMM, GEMM and epilogue, and loop is the
//! same for every target. The [`Route`] itself is kernel IR. Must not
//! generate or run code.

use super::contraction::{self, Contraction};
use super::epilogue;
use super::passes::{loop_kernel, LoopRole};
pub use crate::kernel::backend::Target;
pub use crate::kernel::route::Route;
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// Smallest `m·n·k` of one product for which a contraction is sent to GEMM
/// (below it, packing costs more than the generic kernel's loop).
pub const MIN_GEMM_VOLUME: usize = 16 * 16 * 16;

/// Whether each product of `plan` on `target` is big enough for a GEMM
/// call: the CPU's GEMM sums every term in one product and folds the batch
/// where it can (`Contraction::folded_shape`: a small convolution over a
/// padded copy is one product per image, not one per row and tap), a
/// GPU's cuBLAS runs the products `gemm_shape` counts.
fn worth_gemm(plan: &Contraction, target: Target) -> bool {
    let [calls, m, n, k] = plan.gemm_shape_on(target);
    calls > 0 && m.saturating_mul(n).saturating_mul(k) >= MIN_GEMM_VOLUME
}

/// Whether `f` is a contraction whose every product is big enough for a
/// GEMM call on any target.
pub(crate) fn is_gemm(f: &IndexFn) -> bool {
    contraction::detect(f).is_some_and(|p| worth_gemm(&p, Target::Gpu))
}

/// Whether `f` is a product with a diagonal factor (`Σ_i x[i; a] · d[i] ·
/// x[i; b]`) that the route on `target` sends to GEMM whole: on the CPU,
/// whose GEMM applies the factor while packing (a GPU's BLAS has no such
/// factor, so there the product `d[i] · x[i; b]` is a stage of its own).
pub(crate) fn is_scaled_gemm(f: &IndexFn, target: Target) -> bool {
    target == Target::Cpu
        && contraction::detect_scaled(f).is_some_and(|p| p.has_diagonal() && worth_gemm(&p, target))
}

/// Whether the route of `f` on `target` is a GEMM, alone or followed by a
/// loop.
pub(crate) fn routes_to_gemm(f: &IndexFn, target: Target) -> bool {
    let worth = |c: &Contraction| worth_gemm(c, target);
    contraction::detect(f).is_some_and(|p| worth(&p))
        || epilogue::split(f).is_some_and(|s| worth(&s.contraction))
}

/// The CPU route of `f` computed in `dtype` ([`route_for`] with
/// [`Target::Cpu`]).
///
/// ```
/// use tenjin::planner::route::route;
/// use tenjin::symbolic::IndexFn;
/// let mm = IndexFn::parse("f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j])",
///                         &[("a", &[64, 64][..]), ("b", &[64, 64][..])])?;
/// assert_eq!(route(&mm, tenjin::DType::F32)?.name(), "gemm");
/// let relu = IndexFn::parse("f[i; j] = max(sum{k}_0^63 (a[i; k] * b[k; j]), 0)",
///                           &[("a", &[64, 64][..]), ("b", &[64, 64][..])])?;
/// assert_eq!(route(&relu, tenjin::DType::F32)?.name(), "gemm+loop");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn route(f: &IndexFn, dtype: DType) -> Result<Route, Error> {
    route_for(f, dtype, Target::Cpu)
}

/// The route of `f` computed in `dtype` on `target` (see the module
/// documentation).
///
/// ```
/// use tenjin::planner::route::{route_for, Route, Target};
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = sum{k}_0^9999 (x[i; k])", &[("x", &[2, 10000][..])])?;
/// let Route::Loop(k) = route_for(&f, tenjin::DType::F32, Target::Gpu)? else { panic!() };
/// assert!(k.to_string().contains("sum.f64"), "{k}"); // long f32 sums add blocks in f64
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn route_for(f: &IndexFn, dtype: DType, target: Target) -> Result<Route, Error> {
    // A GPU runs a contraction through cuBLAS, which needs every matrix
    // with a unit stride (`Contraction::blas`); any other view is a loop
    // kernel there (`explain` shows the route), and so is a batch of dot
    // products (1×1 outputs: cuBLAS runs them far below the bandwidth; a
    // loop kernel is a column sum, split as one, `super::split_sums`).
    let on_gpu = |c: &Contraction| c.blas().is_some_and(|p| p.m * p.n > 1);
    let runs = |c: &Contraction| worth_gemm(c, target) && (target == Target::Cpu || on_gpu(c));
    // Winograd's convolution where the user turned it on (CPU only),
    // alone or then its epilogue (a bias).
    let winograd = |c: &Contraction| {
        let on = target == Target::Cpu && dtype.kernels_compute_in() && super::winograd::enabled();
        on.then(|| super::winograd::of_contraction(c)).flatten()
    };
    // (A diagonal factor, which BLAS lacks, leaves a GPU no `blas` plan.)
    if let Some(plan) = contraction::detect_scaled(f) {
        if let Some(w) = winograd(&plan) {
            return Ok(Route::Winograd(w));
        }
        if runs(&plan) {
            return Ok(Route::Gemm(plan));
        }
    }
    if let Some(split) = epilogue::split(f) {
        if let Some(conv) = winograd(&split.contraction) {
            let kernel = loop_kernel(&split.epilogue, dtype, target, LoopRole::Epilogue)?;
            return Ok(Route::WinogradThenLoop {
                conv,
                epilogue: split.epilogue,
                kernel,
            });
        }
        if runs(&split.contraction) {
            // A GPU adds a whole argument with the GEMM's `beta = 1`.
            let added = epilogue::added_argument(&split.epilogue);
            if let Some(k) = added.filter(|_| target == Target::Gpu) {
                let mut contraction = split.contraction;
                contraction.accumulate = Some(k);
                return Ok(Route::Gemm(contraction));
            }
            let kernel = loop_kernel(&split.epilogue, dtype, target, LoopRole::Epilogue)?;
            return Ok(Route::GemmThenLoop {
                contraction: split.contraction,
                epilogue: split.epilogue,
                kernel,
            });
        }
    }
    Ok(Route::Loop(loop_kernel(f, dtype, target, LoopRole::Whole)?))
}
