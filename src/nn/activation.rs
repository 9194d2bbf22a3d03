//! Parameter-free layers: activations ([`ReLU`], [`Tanh`], [`Sigmoid`],
//! [`GELU`], [`SiLU`]), [`Flatten`], and [`Lambda`] for
//! any function of a tensor (a one-line custom op, for instance).

use super::{config_error, Module};
use crate::{Error, Tensor};

/// `max(x, 0)` element-wise.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReLU;

/// `tanh(x)` element-wise.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tanh;

/// `1 / (1 + exp(-x))` element-wise.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sigmoid;

/// GELU, `x·Φ(x)` (PyTorch's `nn.GELU()`), or its tanh approximation
/// (`nn.GELU(approximate="tanh")`, here `GELU::new("tanh")` or
/// `GELU { approximate: GeluApproximate::Tanh }`).
///
/// ```
/// use tenjin::nn::{GeluApproximate, Module, GELU};
/// let x = tenjin::Tensor::from_vec_f64(vec![-1.0, 0.0, 2.0], &[3])?;
/// let y = GELU::default().forward(&x)?.to_vec_f64()?;
/// assert!((y[2] - 1.954499736103642).abs() < 1e-15 && y[1] == 0.0);
/// assert_eq!(GELU::new("tanh")?.approximate, GeluApproximate::Tanh);
/// assert!(GELU::new("sigmoid").is_err());
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GELU {
    pub approximate: GeluApproximate,
}

/// GELU's `approximate` option, as PyTorch spells it: `"none"` (the exact
/// `x·Φ(x)`, the default) or `"tanh"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GeluApproximate {
    #[default]
    None,
    Tanh,
}

impl GELU {
    /// PyTorch's `nn.GELU(approximate=…)`: `"none"` or `"tanh"`; any
    /// other string is an error naming the two.
    pub fn new(approximate: &str) -> Result<GELU, Error> {
        let approximate = match approximate {
            "none" => GeluApproximate::None,
            "tanh" => GeluApproximate::Tanh,
            other => {
                return Err(super::config_error(
                    "GELU",
                    format!("approximate must be \"none\" or \"tanh\", got {other:?}"),
                ))
            }
        };
        Ok(GELU { approximate })
    }
}

/// SiLU (swish), `x·σ(x)` element-wise.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiLU;

/// `[N, d1, d2, ...]` → `[N, d1·d2·...]` (as `torch.nn.Flatten()`); a
/// reshape, so dense inputs are not copied.
///
/// ```
/// use tenjin::nn::{Flatten, Module};
/// use tenjin::{DType, Tensor};
/// let y = Flatten.forward(&Tensor::zeros(&[2, 3, 4], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 12]);
/// assert!(Flatten.forward(&Tensor::zeros(&[5], DType::F32)?).is_err());
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Flatten;

impl Module for ReLU {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.relu()
    }
}

impl Module for Tanh {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.tanh()
    }
}

impl Module for Sigmoid {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.sigmoid()
    }
}

impl Module for GELU {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        match self.approximate {
            GeluApproximate::None => x.gelu(),
            GeluApproximate::Tanh => x.gelu_tanh(),
        }
    }
}

impl Module for SiLU {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.silu()
    }
}

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let s = x.shape();
        if s.len() < 2 {
            return Err(config_error(
                "Flatten",
                format!("the input must be [N, ...] with at least 2 dimensions, got {s:?}"),
            ));
        }
        x.reshape(&[s[0], s[1..].iter().product()])
    }
}

/// A layer computing any function of its input, without parameters of its
/// own (a closure may capture tensors, but they are not listed by
/// [`Module::parameters`]).
///
/// ```
/// use tenjin::nn::{Lambda, Module, Sequential};
/// use tenjin::Tensor;
/// // A custom activation as one line of index notation.
/// let softsign = Lambda::new(|x: &Tensor| {
///     tenjin::index_fn("y[i; j] = x[i; j] / (1 + abs (x[i; j]))", &[("x", x)])
/// });
/// let model = Sequential::new().add(softsign);
/// let y = model.forward(&Tensor::from_vec(vec![1., -3.], &[1, 2])?)?;
/// assert_eq!(y.to_vec()?, vec![0.5, -0.75]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Lambda<F>(F);

impl<F: Fn(&Tensor) -> Result<Tensor, Error>> Lambda<F> {
    pub fn new(f: F) -> Lambda<F> {
        Lambda(f)
    }
}

impl<F: Fn(&Tensor) -> Result<Tensor, Error>> Module for Lambda<F> {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        (self.0)(x)
    }
}

impl<F> std::fmt::Debug for Lambda<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lambda")
    }
}
