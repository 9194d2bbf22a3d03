//! Normalisation layers: [`LayerNorm`] and [`BatchNorm`] (PyTorch's
//! `BatchNorm1d`/`BatchNorm2d`: training with batch statistics and running
//! statistics, evaluation with the running ones).

use super::Module;
use crate::ops::normalize;
use crate::{DType, Error, Tensor};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// `(x − mean) / √(var + eps) · weight + bias` over the last dimensions
/// (PyTorch's `nn.LayerNorm(normalized_shape, eps)`): weight ones and bias
/// zeros at creation.
///
/// ```
/// use tenjin::nn::{LayerNorm, Module};
/// let ln = LayerNorm::new(&[4], 1e-5, tenjin::DType::F64)?;
/// let y = ln.forward(&tenjin::Tensor::arange(8, tenjin::DType::F64)?.reshape(&[2, 4])?)?;
/// assert!(y.to_vec_f64()?.iter().sum::<f64>().abs() < 1e-12);
/// assert_eq!(ln.named_parameters()[0].0, "weight");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct LayerNorm {
    /// The scale (ones at first); a constant the forward does not read
    /// without `elementwise_affine`.
    pub weight: Tensor,
    /// The shift (zeros at first); likewise.
    pub bias: Tensor,
    eps: f64,
    elementwise_affine: bool,
}

impl LayerNorm {
    /// With a learned scale and shift (PyTorch's default).
    pub fn new(normalized_shape: &[usize], eps: f64, dtype: DType) -> Result<LayerNorm, Error> {
        LayerNorm::with_options(normalized_shape, eps, true, dtype)
    }

    /// PyTorch's `LayerNorm(normalized_shape, eps, elementwise_affine)`:
    /// without the affine part the module has no parameters and only
    /// normalises.
    ///
    /// ```
    /// use tenjin::nn::{LayerNorm, Module};
    /// use tenjin::{DType, Tensor};
    /// let ln = LayerNorm::with_options(&[2], 1e-5, false, DType::F64)?;
    /// assert!(ln.named_parameters().is_empty());
    /// let y = ln.forward(&Tensor::from_vec_f64(vec![1.0, 3.0], &[1, 2])?)?.to_vec_f64()?;
    /// assert!((y[0] + 1.0).abs() < 1e-5 && (y[1] - 1.0).abs() < 1e-5);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        dtype: DType,
    ) -> Result<LayerNorm, Error> {
        let (weight, bias) = (
            Tensor::ones(normalized_shape, dtype)?,
            Tensor::zeros(normalized_shape, dtype)?,
        );
        let (weight, bias) = if elementwise_affine {
            (weight.requires_grad(), bias.requires_grad())
        } else {
            (weight, bias)
        };
        Ok(LayerNorm {
            weight,
            bias,
            eps,
            elementwise_affine,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let affine = self.elementwise_affine;
        x.layer_norm(
            self.weight.rank(),
            affine.then_some(&self.weight),
            affine.then_some(&self.bias),
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        if !self.elementwise_affine {
            return Vec::new();
        }
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }
}

/// Batch normalisation over every dimension but the channels (the second
/// dimension) of `[N, C]` or `[N, C, …]` inputs, as PyTorch's `BatchNorm1d/2d`:
/// in training, the batch's mean and biased variance normalise, and the
/// running statistics move by `momentum` towards the batch's mean and
/// unbiased variance; in evaluation ([`BatchNorm::eval`]) the running
/// statistics normalise. Running statistics are buffers (saved in
/// [`Module::state_dict`] as `running_mean`, `running_var`).
///
/// ```
/// use tenjin::nn::{BatchNorm, Module};
/// use tenjin::{DType, Tensor};
/// let bn = BatchNorm::new(2, 1e-5, 0.1, DType::F64)?;
/// let x = Tensor::from_vec_f64(vec![1., 10., 3., 30.], &[2, 2])?;
/// let y = bn.forward(&x)?.to_vec_f64()?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[2] - 1.0).abs() < 1e-4);
/// assert_eq!(bn.running_mean.to_vec_f64()?, vec![0.2, 2.0]); // 0.9·0 + 0.1·mean
/// bn.eval();
/// assert_eq!(bn.forward(&x)?.shape(), &[2, 2]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct BatchNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    eps: f64,
    momentum: f64,
    training: AtomicBool,
}

impl BatchNorm {
    pub fn new(channels: usize, eps: f64, momentum: f64, dtype: DType) -> Result<BatchNorm, Error> {
        Ok(BatchNorm {
            weight: Tensor::ones(&[channels], dtype)?.requires_grad(),
            bias: Tensor::zeros(&[channels], dtype)?.requires_grad(),
            running_mean: Tensor::zeros(&[channels], dtype)?,
            running_var: Tensor::ones(&[channels], dtype)?,
            eps,
            momentum,
            training: AtomicBool::new(true),
        })
    }

    /// `[C]` as `[1, C, 1, …]` for an input of `rank`.
    fn per_channel(t: &Tensor, rank: usize) -> Result<Tensor, Error> {
        let mut shape = vec![1; rank];
        shape[1] = t.numel();
        t.reshape(&shape)
    }
}

impl Module for BatchNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let c = self.weight.numel();
        if x.rank() < 2 || x.shape()[1] != c {
            return Err(Error::shape(
                "batch_norm",
                format!("input of shape {:?}: expected [N, {c}, …]", x.shape()),
            ));
        }
        let r = x.rank();
        let dims: Vec<usize> = (0..r).filter(|&d| d != 1).collect();
        let w = BatchNorm::per_channel(&self.weight, r)?;
        let b = BatchNorm::per_channel(&self.bias, r)?;
        if !self.training.load(Relaxed) {
            let mean = BatchNorm::per_channel(&self.running_mean, r)?;
            let var = BatchNorm::per_channel(&self.running_var, r)?;
            let inv = var.add_scalar(self.eps)?.rsqrt()?;
            return x.sub(&mean)?.mul(&inv)?.mul(&w)?.add(&b);
        }
        let n = x.numel() / c.max(1);
        if n < 2 {
            return Err(Error::shape(
                "batch_norm",
                format!(
                    "input of shape {:?}: training needs more than one value per channel",
                    x.shape()
                ),
            ));
        }
        // The running statistics, outside the trace.
        crate::trace::no_grad(|| -> Result<(), Error> {
            let xd = x.detach();
            let mean = xd.mean_dims(&dims, false)?;
            let var = xd.var(&dims, 1, false)?;
            let m = self.momentum;
            let rm = self
                .running_mean
                .mul_scalar(1.0 - m)?
                .add(&mean.mul_scalar(m)?)?;
            let rv = self
                .running_var
                .mul_scalar(1.0 - m)?
                .add(&var.mul_scalar(m)?)?;
            super::load_into(
                &[
                    ("running_mean".into(), self.running_mean.clone()),
                    ("running_var".into(), self.running_var.clone()),
                ],
                &[("running_mean".into(), rm), ("running_var".into(), rv)],
            )
        })?;
        normalize(x, &dims, self.eps, Some(&w), Some(&b))
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }

    /// Training: batch statistics normalise (and update the running
    /// ones); evaluation: the running statistics normalise.
    fn set_training(&self, training: bool) {
        self.training.store(training, Relaxed);
    }

    fn is_training(&self) -> bool {
        self.training.load(Relaxed)
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        vec![
            ("running_mean".into(), self.running_mean.clone()),
            ("running_var".into(), self.running_var.clone()),
        ]
    }
}
