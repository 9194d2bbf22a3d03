//! [`Linear`]: `y = x·Wᵀ + b`.

use super::{check_bias, config_error, init, Mode, Module};
use crate::{DType, Error, Tensor};

/// A fully connected layer, `y = x·Wᵀ + b` for `x` of shape `[.., in]`, as
/// `torch.nn.Linear`: weight `[out, in]`, bias `[out]`, both initialised
/// from `U(-1/√in, 1/√in)`. The forward pass is one GEMM with the bias in
/// its epilogue ([`Tensor::linear`]).
///
/// ```
/// use tenjin::nn::{Linear, Module};
/// use tenjin::{DType, Tensor};
/// let layer = Linear::new(3, 2, 42)?;
/// assert_eq!(layer.weight().shape(), &[2, 3]);
/// assert!(layer.weight().is_requires_grad());
/// let y = layer.forward(&Tensor::ones(&[5, 3], DType::F32)?)?;
/// assert_eq!(y.shape(), &[5, 2]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    mode: Mode,
}

impl Linear {
    /// An f32 layer with a bias, initialised from `seed`.
    pub fn new(in_features: usize, out_features: usize, seed: u64) -> Result<Linear, Error> {
        Linear::with_options(in_features, out_features, true, DType::F32, seed)
    }

    /// A layer of `dtype`, with or without a bias, initialised from `seed`.
    pub fn with_options(
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
        seed: u64,
    ) -> Result<Linear, Error> {
        let w = init::fan_in_uniform(&[out_features, in_features], in_features, dtype, seed)?;
        let b = if bias {
            Some(init::fan_in_uniform(
                &[out_features],
                in_features,
                dtype,
                init::sub_seed(seed),
            )?)
        } else {
            None
        };
        Linear::from_parameters(w, b)
    }

    /// A layer with the given weight `[out, in]` and bias `[out]` (made
    /// leaves that require a gradient).
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module};
    /// use tenjin::Tensor;
    /// let w = Tensor::from_vec(vec![1., 2.], &[1, 2])?;
    /// let layer = Linear::from_parameters(w, Some(Tensor::from_vec(vec![0.5], &[1])?))?;
    /// let y = layer.forward(&Tensor::from_vec(vec![3., 4.], &[1, 2])?)?;
    /// assert_eq!(y.to_vec()?, vec![11.5]);
    /// assert!(Linear::from_parameters(Tensor::ones(&[1, 2], tenjin::DType::F32)?,
    ///                                 Some(Tensor::ones(&[3], tenjin::DType::F32)?)).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_parameters(weight: Tensor, bias: Option<Tensor>) -> Result<Linear, Error> {
        let ws = weight.shape().to_vec();
        if ws.len() != 2 {
            return Err(config_error(
                "Linear",
                format!("the weight must have shape [out, in], got {ws:?}"),
            ));
        }
        check_bias("Linear", &weight, bias.as_ref())?;
        Ok(Linear {
            weight: weight.requires_grad(),
            bias: bias.map(Tensor::requires_grad),
            mode: Mode::default(),
        })
    }

    /// The weight, `[out, in]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias, `[out]`.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// `in`.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// `out`.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.linear(&self.weight, self.bias.as_ref())
    }

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        std::iter::once(("weight".to_string(), self.weight.clone()))
            .chain(self.bias.clone().map(|b| ("bias".to_string(), b)))
            .collect()
    }
}
