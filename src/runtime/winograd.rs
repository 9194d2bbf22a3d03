//! The user's switch for Winograd's convolution: [`set_winograd`] and
//! [`winograd`].
//!
//! Owns only the switch's effect on what the runtime caches: the
//! planner's setting (`crate::planner::winograd`) decides the plans made
//! from now on, and the op plans made under the other setting are
//! dropped, so the next step plans (and compiles) again. Must not decide
//! when the algorithm applies.

use crate::planner::winograd as planner;

/// Turns Winograd's F(2×2, 3×3) (and F(3×3, 2×2) for weight gradients)
/// on or off for 3×3 stride-1 convolutions on the CPU (forward, input and
/// weight gradients, `conv2d` or a hand-written line alike), from the
/// next op on. Off by default (or as the
/// environment variable `TENJIN_WINOGRAD=1` says): it multiplies 2.25×
/// less but rounds differently from the direct sum (its f32 error is in
/// `BENCHMARKS.md`). With it on, results are still bitwise identical at
/// every thread count.
///
/// ```
/// use tenjin::{set_winograd, winograd, DType, Tensor};
/// let x = Tensor::randn(&[1, 8, 6, 6], DType::F64, 1)?;
/// let w = Tensor::randn(&[8, 8, 3, 3], DType::F64, 2)?;
/// let direct = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1)?;
/// set_winograd(true);
/// assert!(winograd());
/// let fast = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1)?;
/// set_winograd(false);
/// for (a, b) in fast.to_vec_f64()?.iter().zip(direct.to_vec_f64()?) {
///     assert!((a - b).abs() < 1e-12, "{a} {b}");
/// }
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn set_winograd(on: bool) {
    if planner::enabled() != on {
        planner::set_enabled(on);
        super::plan_cache::clear_plans();
    }
}

/// Whether 3×3 stride-1 convolutions on the CPU use Winograd's algorithm
/// (see [`set_winograd`]).
pub fn winograd() -> bool {
    planner::enabled()
}
