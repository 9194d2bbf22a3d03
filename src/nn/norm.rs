//! Normalisation layers: [`LayerNorm`] and [`BatchNorm`] (PyTorch's
//! `BatchNorm1d`/`BatchNorm2d`: training with batch statistics and running
//! statistics, evaluation with the running ones).

use super::{Mode, Module};
use crate::ops::normalize;
use crate::{DType, Error, Tensor};

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
    /// The shift (zeros at first); likewise, and without `bias`.
    pub bias: Tensor,
    eps: f64,
    elementwise_affine: bool,
    has_bias: bool,
    mode: Mode,
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
        LayerNorm::with_bias(normalized_shape, eps, elementwise_affine, true, dtype)
    }

    /// PyTorch's `LayerNorm(normalized_shape, eps, elementwise_affine,
    /// bias)`: with `bias: false` the affine part is a scale only.
    ///
    /// ```
    /// use tenjin::nn::{LayerNorm, Module};
    /// use tenjin::DType;
    /// let ln = LayerNorm::with_bias(&[3], 1e-5, true, false, DType::F32)?;
    /// let names: Vec<String> = ln.state_dict().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["weight"]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_bias(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        bias: bool,
        dtype: DType,
    ) -> Result<LayerNorm, Error> {
        let (weight, shift) = (
            Tensor::ones(normalized_shape, dtype)?,
            Tensor::zeros(normalized_shape, dtype)?,
        );
        let has_bias = elementwise_affine && bias;
        let weight = if elementwise_affine {
            weight.requires_grad()
        } else {
            weight
        };
        let shift = if has_bias {
            shift.requires_grad()
        } else {
            shift
        };
        Ok(LayerNorm {
            weight,
            bias: shift,
            eps,
            elementwise_affine,
            has_bias,
            mode: Mode::default(),
        })
    }
}

impl Module for LayerNorm {
    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let affine = self.elementwise_affine;
        x.layer_norm(
            self.weight.rank(),
            affine.then_some(&self.weight),
            self.has_bias.then_some(&self.bias),
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        if self.elementwise_affine {
            out.push(("weight".into(), self.weight.clone()));
        }
        if self.has_bias {
            out.push(("bias".into(), self.bias.clone()));
        }
        out
    }
}

/// Batch normalisation over every dimension but the channels (the second
/// dimension) of `[N, C]` or `[N, C, …]` inputs, as PyTorch's `BatchNorm1d/2d`:
/// in training, the batch's mean and biased variance normalise, and the
/// running statistics move by `momentum` towards the batch's mean and
/// unbiased variance (with `momentum: None`, their cumulative average over
/// the `num_batches_tracked` batches); in evaluation
/// ([`Module::eval`]) the running statistics normalise. The running
/// statistics and the batch count are buffers (saved in
/// [`Module::state_dict`] as `running_mean`, `running_var`,
/// `num_batches_tracked`, an `i64` scalar, as PyTorch saves them); every
/// update stays on the module's device (no value is read back).
///
/// ```
/// use tenjin::nn::{BatchNorm, Module};
/// use tenjin::{DType, Tensor};
/// let bn = BatchNorm::new(2, 1e-5, 0.1, DType::F64)?;
/// let x = Tensor::from_vec_f64(vec![1., 10., 3., 30.], &[2, 2])?;
/// let y = bn.forward(&x)?.to_vec_f64()?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[2] - 1.0).abs() < 1e-4);
/// assert_eq!(bn.running_mean.to_vec_f64()?, vec![0.2, 2.0]); // 0.9·0 + 0.1·mean
/// assert_eq!(bn.num_batches_tracked.to_vec_i64()?, vec![1]);
/// bn.eval();
/// assert_eq!(bn.forward(&x)?.shape(), &[2, 2]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct BatchNorm {
    /// The scale (ones at first); a constant the forward does not read
    /// without `affine`.
    pub weight: Tensor,
    /// The shift (zeros at first); likewise.
    pub bias: Tensor,
    pub running_mean: Tensor,
    pub running_var: Tensor,
    /// Training batches seen (an `i64` scalar).
    pub num_batches_tracked: Tensor,
    config: BatchNormConfig,
    mode: Mode,
}

/// [`BatchNorm`]'s options, by PyTorch's names; `Default` is PyTorch's
/// (`eps` 1e-5, `momentum` 0.1, `affine`, `track_running_stats`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    pub eps: f64,
    /// `None`: the running statistics are the cumulative average.
    pub momentum: Option<f64>,
    /// A learned per-channel scale and shift.
    pub affine: bool,
    /// Keep running statistics; without them the batch statistics
    /// normalise in evaluation mode too, and there are no buffers.
    pub track_running_stats: bool,
}

impl Default for BatchNormConfig {
    fn default() -> BatchNormConfig {
        BatchNormConfig {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
            track_running_stats: true,
        }
    }
}

impl BatchNorm {
    pub fn new(channels: usize, eps: f64, momentum: f64, dtype: DType) -> Result<BatchNorm, Error> {
        let config = BatchNormConfig {
            eps,
            momentum: Some(momentum),
            ..BatchNormConfig::default()
        };
        BatchNorm::with_options(channels, config, dtype)
    }

    /// PyTorch's `BatchNorm(channels, eps, momentum, affine,
    /// track_running_stats)`.
    ///
    /// ```
    /// use tenjin::nn::{BatchNorm, BatchNormConfig, Module};
    /// use tenjin::{DType, Tensor};
    /// let config = BatchNormConfig { momentum: None, affine: false, ..Default::default() };
    /// let bn = BatchNorm::with_options(1, config, DType::F64)?;
    /// assert!(bn.named_parameters().is_empty());
    /// for x in [[1.0, 3.0], [5.0, 7.0]] {
    ///     bn.forward(&Tensor::from_vec_f64(x.to_vec(), &[2, 1])?)?;
    /// }
    /// assert_eq!(bn.running_mean.to_vec_f64()?, vec![4.0]); // the average of 2 and 6
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_options(
        channels: usize,
        config: BatchNormConfig,
        dtype: DType,
    ) -> Result<BatchNorm, Error> {
        if let Some(m) = config.momentum {
            if !(0.0..=1.0).contains(&m) {
                return Err(super::config_error(
                    "BatchNorm",
                    format!("momentum must be in [0, 1], got {m}"),
                ));
            }
        }
        let (weight, bias) = (
            Tensor::ones(&[channels], dtype)?,
            Tensor::zeros(&[channels], dtype)?,
        );
        let (weight, bias) = if config.affine {
            (weight.requires_grad(), bias.requires_grad())
        } else {
            (weight, bias)
        };
        let on = crate::default_device();
        Ok(BatchNorm {
            weight,
            bias,
            running_mean: Tensor::zeros(&[channels], dtype)?,
            running_var: Tensor::ones(&[channels], dtype)?,
            num_batches_tracked: Tensor::from_vec_i64(vec![0], &[])?.to_device(on)?,
            config,
            mode: Mode::default(),
        })
    }

    /// `[C]` as `[1, C, 1, …]` for an input of `rank`.
    fn per_channel(t: &Tensor, rank: usize) -> Result<Tensor, Error> {
        let mut shape = vec![1; rank];
        shape[1] = t.numel();
        t.reshape(&shape)
    }

    /// One training batch with statistics `mean`, `var` (unbiased): the
    /// count and the running statistics move, on their device.
    fn track(&self, mean: &Tensor, var: &Tensor) -> Result<(), Error> {
        let count = self
            .num_batches_tracked
            .to_dtype(DType::F64)?
            .add_scalar(1.0)?;
        // PyTorch's factor: the momentum (a constant), or 1 / batches (a
        // scalar tensor on the device, so nothing is read back).
        let (rm, rv) = match self.config.momentum {
            Some(m) => (
                self.running_mean
                    .mul_scalar(1.0 - m)?
                    .add(&mean.mul_scalar(m)?)?,
                self.running_var
                    .mul_scalar(1.0 - m)?
                    .add(&var.mul_scalar(m)?)?,
            ),
            None => {
                let m = count.pow_scalar(-1.0)?.to_dtype(mean.dtype())?;
                let omm = m.mul_scalar(-1.0)?.add_scalar(1.0)?;
                (
                    self.running_mean.mul(&omm)?.add(&mean.mul(&m)?)?,
                    self.running_var.mul(&omm)?.add(&var.mul(&m)?)?,
                )
            }
        };
        super::load_into(
            &self.named_buffers(),
            &[
                ("running_mean".into(), rm),
                ("running_var".into(), rv),
                ("num_batches_tracked".into(), count.to_dtype(DType::I64)?),
            ],
        )
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
        let (w, b) = if self.config.affine {
            (
                Some(BatchNorm::per_channel(&self.weight, r)?),
                Some(BatchNorm::per_channel(&self.bias, r)?),
            )
        } else {
            (None, None)
        };
        let tracking = self.config.track_running_stats;
        let training = self.mode.get();
        if tracking && !training {
            let mean = BatchNorm::per_channel(&self.running_mean, r)?;
            let var = BatchNorm::per_channel(&self.running_var, r)?;
            let inv = var.add_scalar(self.config.eps)?.rsqrt()?;
            let y = x.sub(&mean)?.mul(&inv)?;
            let y = match &w {
                Some(w) => y.mul(w)?,
                None => y,
            };
            return match &b {
                Some(b) => y.add(b),
                None => Ok(y),
            };
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
        if tracking {
            // The running statistics, outside the trace.
            crate::trace::no_grad(|| -> Result<(), Error> {
                let xd = x.detach();
                self.track(&xd.mean_dims(&dims, false)?, &xd.var(&dims, 1, false)?)
            })?;
        }
        normalize(
            "batch_norm",
            x,
            &dims,
            self.config.eps,
            w.as_ref(),
            b.as_ref(),
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        if !self.config.affine {
            return Vec::new();
        }
        vec![
            ("weight".into(), self.weight.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }

    /// Training: batch statistics normalise (and update the running
    /// ones); evaluation: the running statistics normalise (the batch's
    /// without `track_running_stats`).
    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        if !self.config.track_running_stats {
            return Vec::new();
        }
        vec![
            ("running_mean".into(), self.running_mean.clone()),
            ("running_var".into(), self.running_var.clone()),
            (
                "num_batches_tracked".into(),
                self.num_batches_tracked.clone(),
            ),
        ]
    }
}
