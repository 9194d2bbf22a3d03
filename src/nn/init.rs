//! Initialisers: reproducible random tensors (from a seed) with the
//! distributions layers start from. They return constants; a layer turns
//! them into parameters with `.requires_grad()`.
//!
//! ```
//! use tenjin::nn::init;
//! use tenjin::DType;
//! let w = init::fan_in_uniform(&[4, 3], 3, DType::F32, 0)?;
//! let bound = 1.0 / 3f64.sqrt();
//! assert!(w.to_vec_f64()?.iter().all(|v| v.abs() <= bound));
//! assert_eq!(w.to_vec()?, init::fan_in_uniform(&[4, 3], 3, DType::F32, 0)?.to_vec()?);
//! # Ok::<(), tenjin::Error>(())
//! ```

use super::config_error;
use crate::{DType, Error, Tensor};

/// Values uniform in `[low, high)`, reproducible from `seed`.
pub fn uniform(
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    seed: u64,
) -> Result<Tensor, Error> {
    if !(low.is_finite() && high.is_finite() && low <= high) {
        return Err(config_error(
            "init::uniform",
            format!("the bounds [{low}, {high}) are not a finite interval"),
        ));
    }
    // Drawn in f64 and mapped by an op: nothing of the tensor's size is
    // held on the host beside it.
    let u = Tensor::rand(shape, DType::F64, seed)?;
    u.mul_scalar(high - low)?.add_scalar(low)?.to_dtype(dtype)
}

/// Normal values with mean `mean` and standard deviation `std`,
/// reproducible from `seed`.
pub fn normal(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    seed: u64,
) -> Result<Tensor, Error> {
    if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
        return Err(config_error(
            "init::normal",
            format!("mean {mean} and standard deviation {std} must be finite, std >= 0"),
        ));
    }
    let z = Tensor::randn(shape, DType::F64, seed)?;
    z.mul_scalar(std)?.add_scalar(mean)?.to_dtype(dtype)
}

/// `U(-1/√fan_in, 1/√fan_in)`: PyTorch's default for the weights and
/// biases of `Linear` and `Conv2d` (its `kaiming_uniform_(a = √5)`). Zeros
/// when `fan_in` is 0.
pub fn fan_in_uniform(
    shape: &[usize],
    fan_in: usize,
    dtype: DType,
    seed: u64,
) -> Result<Tensor, Error> {
    let bound = if fan_in == 0 {
        0.0
    } else {
        1.0 / (fan_in as f64).sqrt()
    };
    uniform(shape, -bound, bound, dtype, seed)
}

/// `(fan_in, fan_out)` of a weight `[out, in, k...]`: `in·Πk` and `out·Πk`.
pub fn fans(shape: &[usize]) -> Result<(usize, usize), Error> {
    if shape.len() < 2 {
        return Err(config_error(
            "init",
            format!(
                "fan in and fan out need a weight of rank >= 2 ([out, in, ...]), got {shape:?}"
            ),
        ));
    }
    let receptive = shape[2..].iter().fold(1usize, |a, &d| a.saturating_mul(d));
    Ok((
        shape[1].saturating_mul(receptive),
        shape[0].saturating_mul(receptive),
    ))
}

/// Glorot/Xavier uniform: `U(-a, a)` with `a = √(6 / (fan_in + fan_out))`.
pub fn xavier_uniform(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor, Error> {
    let (fan_in, fan_out) = fans(shape)?;
    let bound = if fan_in + fan_out == 0 {
        0.0
    } else {
        (6.0 / (fan_in + fan_out) as f64).sqrt()
    };
    uniform(shape, -bound, bound, dtype, seed)
}

/// He/Kaiming uniform for ReLU layers: `U(-a, a)` with `a = √(6 / fan_in)`.
pub fn kaiming_uniform(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor, Error> {
    let (fan_in, _) = fans(shape)?;
    let bound = if fan_in == 0 {
        0.0
    } else {
        (6.0 / fan_in as f64).sqrt()
    };
    uniform(shape, -bound, bound, dtype, seed)
}

/// A second seed derived from `seed` (for a layer's bias), on a stream
/// unrelated to `seed`'s.
pub(crate) fn sub_seed(seed: u64) -> u64 {
    (seed ^ 0xD1B5_4A32_D192_ED03).rotate_left(17)
}
