//! Neural-network building blocks: the [`Module`] trait, layers with
//! parameters ([`Linear`], [`Conv2d`]), activations as modules ([`ReLU`],
//! [`Tanh`], [`Sigmoid`], [`Flatten`], any closure as [`Lambda`]) and
//! [`Sequential`] to chain them; [`init`] holds the initialisers.
//!
//! A layer's forward is one or a few tensor ops, each one index function:
//! no layer has backward code. Parameters are leaves created with
//! `.requires_grad()`; [`Module::parameters`] hands them to an optimizer
//! ([`crate::optim`]).
//!
//! ```
//! use tenjin::nn::{Linear, Module, ReLU, Sequential};
//! use tenjin::optim::{Optimizer, SgdConfig, SGD};
//! use tenjin::{DType, Tensor};
//! let model = Sequential::new()
//!     .add(Linear::new(2, 8, 0)?)
//!     .add(ReLU)
//!     .add(Linear::new(8, 1, 1)?);
//! let mut opt = SGD::new(model.parameters(), SgdConfig { lr: 0.05, ..Default::default() })?;
//! let x = Tensor::randn(&[16, 2], DType::F32, 2)?;
//! let y = x.sum_dims(&[1], true)?; // learn y = x0 + x1
//! let mut losses = vec![];
//! for _ in 0..20 {
//!     opt.zero_grad();
//!     let loss = model.forward(&x)?.mse_loss(&y)?;
//!     loss.backward()?;
//!     opt.step()?;
//!     losses.push(loss.item()?);
//! }
//! assert!(losses[19] < losses[0]);
//! # Ok::<(), tenjin::Error>(())
//! ```

mod activation;
mod conv;
pub mod init;
mod linear;

pub use activation::{Flatten, Lambda, ReLU, Sigmoid, Tanh};
pub use conv::{Conv2d, Conv2dConfig};
pub use linear::Linear;

use crate::{Error, Tensor};

/// A layer or a model: a function of one tensor, with parameters.
pub trait Module {
    /// The output for the input `x` (recorded on the trace when a
    /// parameter or `x` requires a gradient).
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error>;

    /// The tensors an optimizer trains: leaves that require a gradient,
    /// each listed once. None by default.
    fn parameters(&self) -> Vec<Tensor> {
        Vec::new()
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        (**self).forward(x)
    }

    fn parameters(&self) -> Vec<Tensor> {
        (**self).parameters()
    }
}

impl<M: Module + ?Sized> Module for std::sync::Arc<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        (**self).forward(x)
    }

    fn parameters(&self) -> Vec<Tensor> {
        (**self).parameters()
    }
}

/// Layers applied one after the other.
///
/// A layer added twice (or clones of one layer, which share their
/// parameters) shares its weights; [`Module::parameters`] lists each
/// parameter once.
///
/// ```
/// use tenjin::nn::{Flatten, Linear, Module, Sequential, Tanh};
/// use tenjin::{DType, Tensor};
/// let model = Sequential::new().add(Flatten).add(Linear::new(6, 3, 7)?).add(Tanh);
/// assert_eq!(model.len(), 3);
/// assert_eq!(model.parameters().len(), 2); // weight and bias
/// let y = model.forward(&Tensor::ones(&[4, 2, 3], DType::F32)?)?;
/// assert_eq!(y.shape(), &[4, 3]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module + Send + Sync>>,
}

impl Sequential {
    /// No layers: the identity.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// `self` with `layer` appended (a builder).
    #[allow(clippy::should_implement_trait)] // PyTorch's and the tutorials' name
    pub fn add<M: Module + Send + Sync + 'static>(mut self, layer: M) -> Sequential {
        self.push(layer);
        self
    }

    /// Appends `layer`.
    pub fn push<M: Module + Send + Sync + 'static>(&mut self, layer: M) {
        self.layers.push(Box::new(layer));
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[Box<dyn Module + Send + Sync>] {
        &self.layers
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }

    fn parameters(&self) -> Vec<Tensor> {
        let mut out: Vec<Tensor> = Vec::new();
        for p in self.layers.iter().flat_map(|l| l.parameters()) {
            if !out.iter().any(|q| same_tensor(q, &p)) {
                out.push(p);
            }
        }
        out
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

/// Whether `a` and `b` are the same parameter: clones of one tensor, or
/// tensors of one leaf.
pub(crate) fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    use crate::trace::Origin;
    if std::sync::Arc::ptr_eq(&a.0, &b.0) {
        return true;
    }
    match (a.origin(), b.origin()) {
        (Origin::Leaf(x), Origin::Leaf(y)) => {
            !a.is_view() && !b.is_view() && std::sync::Arc::ptr_eq(x, y)
        }
        _ => false,
    }
}

/// An error naming the layer for a bad configuration.
/// A layer's bias must be `[out]` (the weight's dimension 0) in the
/// weight's dtype.
pub(crate) fn check_bias(layer: &str, weight: &Tensor, bias: Option<&Tensor>) -> Result<(), Error> {
    let out = weight.shape().first().copied().unwrap_or(0);
    match bias {
        Some(b) if b.shape() != [out] || b.dtype() != weight.dtype() => Err(config_error(
            layer,
            format!(
                "the bias ({:?} {:?}) must have shape [{out}] and the weight's dtype {:?}",
                b.shape(),
                b.dtype(),
                weight.dtype()
            ),
        )),
        _ => Ok(()),
    }
}

pub(crate) fn config_error(layer: &str, message: String) -> Error {
    Error::Invalid {
        function: layer.to_string(),
        message,
    }
}
