//! How cuBLAS multiplies f32 matrices: [`MathMode`], process-wide, read
//! by every GEMM when it is queued.
//!
//! Owns the setting and TF32's rounding ([`round_to_tf32`], which the
//! simulated cuBLAS applies to its inputs as the tensor cores do). Must
//! not know about plans or kernels.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// The precision of f32 GEMMs on a GPU (f64 GEMMs are always full
/// precision).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MathMode {
    /// Full f32 products and sums (`CUBLAS_DEFAULT_MATH`): the same
    /// arithmetic as the CPU's, up to summation order. The default.
    #[default]
    Full,
    /// Inputs rounded to TF32 (10 explicit mantissa bits) on tensor cores,
    /// sums in f32 (`CUBLAS_TF32_TENSOR_OP_MATH`; PyTorch's
    /// `allow_tf32 = True`): several times faster on A100/H100, relative
    /// errors near 1e-3.
    Tf32,
}

static MODE: AtomicU8 = AtomicU8::new(0);

/// Sets the precision of the f32 GEMMs queued from now on, on every
/// device.
///
/// ```
/// use tenjin::cuda::{math_mode, set_math_mode, MathMode};
/// assert_eq!(math_mode(), MathMode::Full); // the default: no TF32
/// set_math_mode(MathMode::Tf32);
/// assert_eq!(math_mode(), MathMode::Tf32);
/// set_math_mode(MathMode::Full);
/// ```
pub fn set_math_mode(mode: MathMode) {
    MODE.store(mode as u8, Relaxed);
}

/// The precision f32 GEMMs are queued with ([`set_math_mode`]).
pub fn math_mode() -> MathMode {
    match MODE.load(Relaxed) {
        1 => MathMode::Tf32,
        _ => MathMode::Full,
    }
}

/// `x` rounded to TF32 (the 13 low mantissa bits dropped, to nearest,
/// ties away from zero: PTX's `cvt.rna.tf32.f32`); NaN and infinities
/// stay as they are.
pub(crate) fn round_to_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let bits = x.to_bits();
    // Adding half of the dropped unit rounds ties away from zero in
    // magnitude (the sign bit is untouched); a carry into the exponent
    // is the correct rounding up to the next binade (or to infinity).
    f32::from_bits((bits + 0x1000) & !0x1FFF)
}

#[cfg(test)]
mod tests {
    use super::round_to_tf32;

    #[test]
    fn tf32_keeps_ten_mantissa_bits_rounding_to_nearest() {
        assert_eq!(round_to_tf32(1.0), 1.0);
        let ulp = 2f32.powi(-10);
        assert_eq!(round_to_tf32(1.0 + ulp), 1.0 + ulp);
        assert_eq!(round_to_tf32(1.0 + ulp * 0.49), 1.0);
        assert_eq!(round_to_tf32(1.0 + ulp * 0.5), 1.0 + ulp, "ties away");
        assert_eq!(round_to_tf32(-(1.0 + ulp * 0.51)), -(1.0 + ulp));
        assert_eq!(round_to_tf32(f32::MAX), f32::INFINITY);
        assert!(round_to_tf32(f32::NAN).is_nan());
        assert_eq!(round_to_tf32(f32::NEG_INFINITY), f32::NEG_INFINITY);
    }
}
