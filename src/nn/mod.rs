//! Neural-network building blocks: the [`Module`] trait, layers with
//! parameters ([`Linear`], [`Conv2d`]), activations as modules ([`ReLU`],
//! [`Tanh`], [`Sigmoid`], [`Flatten`], any closure as [`Lambda`]), [`Dropout`] and
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
mod attention;
mod conv;
mod dropout;
mod embedding;
pub mod init;
mod linear;
mod mode;
mod norm;
mod pool;
pub mod utils;

pub use activation::{Flatten, GeluApproximate, Lambda, ReLU, SiLU, Sigmoid, Tanh, GELU};
pub use attention::{AttendOptions, MultiheadAttention, MultiheadAttentionConfig};
pub use conv::{Conv2d, Conv2dConfig};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use mode::Mode;
pub use norm::{BatchNorm, BatchNormConfig, LayerNorm};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};

use crate::{Error, Tensor};

/// A layer or a model: a function of one tensor, with parameters.
pub trait Module {
    /// The output for the input `x` (recorded on the trace when a
    /// parameter or `x` requires a gradient).
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error>;

    /// The tensors an optimizer trains: the tensors of
    /// [`Module::named_parameters`], where each parameter is registered
    /// once (override only to change the order).
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    }

    /// The parameters with PyTorch's names (`weight`, `bias`;
    /// `0.weight` inside a [`Sequential`]): leaves that require a gradient,
    /// each once. A layer lists its own; the default lists its children's
    /// ([`Module::named_children`]) under `{child}.{name}`, a parameter
    /// shared by two children once, under its first name.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        with_own(
            self.own_parameters(),
            from_children(self, |c| c.named_parameters()),
        )
    }

    /// The parameters this module holds itself, not through a child
    /// (PyTorch's `named_parameters(recurse=False)`): a custom model's
    /// position table. The default of [`Module::named_parameters`] lists
    /// them first, then the children's, as PyTorch orders them. None by
    /// default.
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module};
    /// use tenjin::{DType, Error, Tensor};
    /// struct Model { pos: Tensor, head: Linear }
    /// impl Module for Model {
    ///     fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
    ///         self.head.forward(&x.add(&self.pos)?)
    ///     }
    ///     fn own_parameters(&self) -> Vec<(String, Tensor)> {
    ///         vec![("pos".into(), self.pos.clone())]
    ///     }
    ///     fn named_children(&self) -> Vec<(String, &dyn Module)> {
    ///         vec![("head".into(), &self.head)]
    ///     }
    /// }
    /// let m = Model { pos: Tensor::zeros(&[3], DType::F32)?.requires_grad(), head: Linear::new(3, 2, 0)? };
    /// let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["pos", "head.weight", "head.bias"]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// The modules inside this one, by PyTorch's names (`0`, `1`, … in a
    /// [`Sequential`] or a [`ModuleList`]): what the defaults of
    /// [`Module::named_parameters`], [`Module::named_buffers`] and
    /// [`Module::set_training`] walk. None by default.
    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        Vec::new()
    }

    /// State that is not trained by gradients but saved with the model
    /// (a batch norm's running statistics), named as PyTorch names it; the
    /// default lists the children's.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        with_own(
            self.own_buffers(),
            from_children(self, |c| c.named_buffers()),
        )
    }

    /// The buffers this module holds itself, listed before the
    /// children's by the default of [`Module::named_buffers`]. None by
    /// default.
    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// This module's own training flag (PyTorch's `self.training`), for a
    /// module that keeps one: the layers of this crate do, and a custom
    /// module holds a [`Mode`] and returns it here. `None` by default.
    fn mode(&self) -> Option<&Mode> {
        None
    }

    /// Puts this module and every module inside it into training (`true`)
    /// or evaluation mode: the default sets [`Module::mode`] and passes it
    /// on to the children.
    fn set_training(&self, training: bool) {
        if let Some(mode) = self.mode() {
            mode.set(training);
        }
        for (_, c) in self.named_children() {
            c.set_training(training);
        }
    }

    /// Training mode, for this module and every module inside it
    /// (PyTorch's `model.train()`).
    ///
    /// ```
    /// use tenjin::nn::{BatchNorm, Linear, Module, Sequential};
    /// let model = Sequential::new()
    ///     .add(Linear::new(4, 3, 0)?)
    ///     .add(BatchNorm::new(3, 1e-5, 0.1, tenjin::DType::F32)?);
    /// model.eval();
    /// assert!(!model.is_training() && !model.layers()[1].is_training());
    /// model.train();
    /// assert!(model.is_training());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    fn train(&self) {
        self.set_training(true)
    }

    /// Evaluation mode, for this module and every module inside it
    /// (PyTorch's `model.eval()`).
    fn eval(&self) {
        self.set_training(false)
    }

    /// Whether the module is in training mode: its own [`Module::mode`]
    /// when it keeps one, else whether every child is. A module with
    /// neither (the stateless activations [`ReLU`], [`Tanh`], …: unit
    /// values whose output does not depend on the mode) reports `true`.
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module, ReLU, Sequential};
    /// let model = Sequential::new().add(Linear::new(2, 2, 0)?).add(ReLU);
    /// model.eval();
    /// assert!(!model.is_training() && !model.layers()[0].is_training());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    fn is_training(&self) -> bool {
        match self.mode() {
            Some(mode) => mode.get(),
            None => self.named_children().iter().all(|(_, c)| c.is_training()),
        }
    }

    /// Parameters and buffers by name: what [`crate::safetensors::save`]
    /// writes and [`Module::load_state_dict`] reads.
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = self.named_parameters();
        out.extend(self.named_buffers());
        out
    }

    /// Moves every parameter and buffer to `device` in place, all or
    /// nothing: each keeps its identity (the tensors an optimizer or the
    /// caller holds see the move), their gradients are cleared. Make the
    /// optimizer after the move: one made before refuses to step (its
    /// state stayed behind).
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module};
    /// let layer = Linear::new(3, 2, 0)?;
    /// let w = layer.parameters()[0].clone();
    /// layer.to_device(tenjin::Device::Cpu)?;
    /// assert_eq!(w.device(), tenjin::Device::Cpu);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    fn to_device(&self, device: crate::Device) -> Result<(), Error> {
        let all: Vec<Tensor> = self
            .named_parameters()
            .into_iter()
            .chain(self.named_buffers())
            .map(|(_, t)| t)
            .collect();
        crate::tensor::move_all(&all, device)
    }

    /// Copies `state` into this module's parameters and buffers, in place
    /// (tensors sharing them see the new values). Strict, as PyTorch's
    /// default: every entry of [`Module::state_dict`] must be present with
    /// its shape, and no other name; values are converted to each
    /// parameter's dtype and moved to its device. On an error nothing has
    /// been changed.
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module};
    /// use tenjin::{DType, Tensor};
    /// let a = Linear::new(3, 2, 0)?;
    /// let b = Linear::new(3, 2, 1)?;
    /// b.load_state_dict(&a.state_dict())?;
    /// let x = Tensor::ones(&[1, 3], DType::F32)?;
    /// assert_eq!(b.forward(&x)?.to_vec()?, a.forward(&x)?.to_vec()?);
    /// assert!(b.load_state_dict(&[]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    fn load_state_dict(&self, state: &[(String, Tensor)]) -> Result<(), Error> {
        load_into(&self.state_dict(), state)
    }
}

/// Checks every pair of `(own, given)` first, then copies: all or nothing.
pub(crate) fn load_into(own: &[(String, Tensor)], state: &[(String, Tensor)]) -> Result<(), Error> {
    let err = |message: String| Error::Invalid {
        function: "load_state_dict".into(),
        message,
    };
    if let Some((name, _)) = state.iter().find(|(n, _)| !own.iter().any(|(m, _)| m == n)) {
        let known: Vec<&str> = own.iter().map(|(n, _)| n.as_str()).collect();
        return Err(err(format!(
            "unexpected key `{name}` (the module has {known:?})"
        )));
    }
    let mut pairs = Vec::with_capacity(own.len());
    for (name, target) in own {
        let Some((_, value)) = state.iter().find(|(n, _)| n == name) else {
            return Err(err(format!("missing key `{name}`")));
        };
        if value.shape() != target.shape() {
            return Err(err(format!(
                "`{name}`: the module's tensor has shape {:?}, the state's {:?}",
                target.shape(),
                value.shape()
            )));
        }
        if target.is_view() {
            return Err(err(format!(
                "`{name}` is a view; only dense tensors can be loaded into"
            )));
        }
        // Converted and moved where the target lives (weights loaded from
        // disk onto a model on a GPU).
        let value = value.detach().to_dtype(target.dtype())?;
        pairs.push((target, value.to_device(target.device())?));
    }
    for (target, value) in pairs {
        target
            .storage_and_origin()
            .0
            .copy_from(value.storage_and_origin().0)?;
    }
    Ok(())
}

/// `Module` for a pointer to a module (`Box`, `Arc`): every method
/// forwarded, so a boxed or shared layer is the layer.
macro_rules! forward_module {
    ($($ptr:ty),*) => {$(
        impl<M: Module + ?Sized> Module for $ptr {
            fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
                (**self).forward(x)
            }

            fn own_parameters(&self) -> Vec<(String, Tensor)> {
                (**self).own_parameters()
            }

            fn own_buffers(&self) -> Vec<(String, Tensor)> {
                (**self).own_buffers()
            }

            fn mode(&self) -> Option<&Mode> {
                (**self).mode()
            }

            fn parameters(&self) -> Vec<Tensor> {
                (**self).parameters()
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                (**self).named_parameters()
            }

            fn named_children(&self) -> Vec<(String, &dyn Module)> {
                (**self).named_children()
            }

            fn named_buffers(&self) -> Vec<(String, Tensor)> {
                (**self).named_buffers()
            }

            fn set_training(&self, training: bool) {
                (**self).set_training(training)
            }

            fn is_training(&self) -> bool {
                (**self).is_training()
            }
        }
    )*};
}

forward_module!(Box<M>, std::sync::Arc<M>);

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
    mode: Mode,
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

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    /// The layers by index (`0`, `1`, …): parameters are named
    /// `{index}.{name}`, each shared one once (its first name).
    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        self.layers
            .iter()
            .enumerate()
            .map(|(k, l)| (k.to_string(), &**l as &dyn Module))
            .collect()
    }
}

/// Modules held in a list (PyTorch's `nn.ModuleList`): their parameters,
/// buffers and mode are the list's (named `0`, `1`, …), and the caller's
/// forward decides how to apply them — the list has no forward of its own.
///
/// ```
/// use tenjin::nn::{Linear, Module, ModuleList};
/// use tenjin::{DType, Tensor};
/// let mut blocks = ModuleList::new();
/// for seed in 0..3 {
///     blocks.push(Linear::new(4, 4, seed)?);
/// }
/// let mut h = Tensor::ones(&[2, 4], DType::F32)?;
/// for b in blocks.iter() {
///     h = h.add(&b.forward(&h)?)?; // residual blocks
/// }
/// assert_eq!(blocks.named_parameters()[2].0, "1.weight");
/// assert!(blocks.forward(&h).is_err());
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Default)]
pub struct ModuleList {
    modules: Vec<Box<dyn Module + Send + Sync>>,
    mode: Mode,
}

impl ModuleList {
    pub fn new() -> ModuleList {
        ModuleList::default()
    }

    /// A list of `modules` (PyTorch's `nn.ModuleList([...])`).
    ///
    /// ```
    /// use tenjin::nn::{Linear, Module, ModuleList};
    /// let blocks = ModuleList::from_modules([Linear::new(2, 2, 0)?, Linear::new(2, 2, 1)?]);
    /// assert_eq!((blocks.len(), blocks.named_parameters()[3].0.as_str()), (2, "1.bias"));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_modules<M: Module + Send + Sync + 'static>(
        modules: impl IntoIterator<Item = M>,
    ) -> ModuleList {
        let mut list = ModuleList::new();
        for m in modules {
            list.push(m);
        }
        list
    }

    /// Appends `module`.
    pub fn push<M: Module + Send + Sync + 'static>(&mut self, module: M) {
        self.modules.push(Box::new(module));
    }

    pub fn len(&self) -> usize {
        self.modules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// Module `k`, if there is one.
    pub fn get(&self, k: usize) -> Option<&(dyn Module + Send + Sync)> {
        self.modules.get(k).map(|m| &**m)
    }

    /// The modules, in order.
    pub fn iter(&self) -> impl Iterator<Item = &(dyn Module + Send + Sync)> {
        self.modules.iter().map(|m| &**m)
    }
}

impl Module for ModuleList {
    /// An error: a list does not say how its modules combine.
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        Err(config_error(
            "ModuleList",
            format!(
                "a ModuleList of {} modules has no forward (input {:?}): apply its modules in your own forward",
                self.modules.len(),
                x.shape()
            ),
        ))
    }

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        self.modules
            .iter()
            .enumerate()
            .map(|(k, m)| (k.to_string(), &**m as &dyn Module))
            .collect()
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

/// `own` first, then `children`'s tensors that are not among them.
fn with_own(
    mut own: Vec<(String, Tensor)>,
    children: Vec<(String, Tensor)>,
) -> Vec<(String, Tensor)> {
    for (n, t) in children {
        if !own.iter().any(|(_, q)| same_tensor(q, &t)) {
            own.push((n, t));
        }
    }
    own
}

/// `f` of every child of `m`, named `{child}.{name}`, each tensor once
/// (under its first name).
fn from_children<M: Module + ?Sized>(
    m: &M,
    f: impl Fn(&dyn Module) -> Vec<(String, Tensor)>,
) -> Vec<(String, Tensor)> {
    let mut out: Vec<(String, Tensor)> = Vec::new();
    for (child, c) in m.named_children() {
        for (n, t) in f(c) {
            if !out.iter().any(|(_, q)| same_tensor(q, &t)) {
                out.push((format!("{child}.{n}"), t));
            }
        }
    }
    out
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
