//! The user-facing [`Tensor`]: dense storage or an affine view of it, a
//! dtype, a device and, when it takes part in differentiation, its place on
//! the trace.
//!
//! Owns the tensor record, creation (`create`), views (`view`), reading
//! data back, and what a deferred result carries for the op that reads it
//! next (`Producer`, attached to its storage by `crate::ops::fuse`). Operations live in [`crate::ops`]; the tape in
//! [`crate::trace`]. No per-op backward code lives here or anywhere: every
//! derivative comes from [`crate::symbolic`].

mod create;
mod device;
mod dim;
mod half;
mod integer;
mod tape;
pub(crate) mod view;

use crate::alloc::Device;
pub(crate) use crate::runtime::Storage;
use crate::symbolic::compose::AffineMap;
pub(crate) use crate::trace::Origin;
use crate::trace::{self, Leaf};
use crate::DType;
use crate::Error;
pub(crate) use create::SplitMix64;
pub(crate) use device::move_all;
pub use device::{default_device, set_default_device};
pub(crate) use dim::resolve_dims;
pub use dim::Dim;
use std::sync::Arc;
pub use tape::explain;

/// An n-dimensional array of `f32` or `f64` on a device, recorded on the
/// trace when it depends on a tensor that requires a gradient.
///
/// Cloning a `Tensor` is cheap: clones share data and trace position.
///
/// ```
/// use tenjin::Tensor;
/// let a = Tensor::from_vec_f64(vec![1., 2., 3., 4.], &[2, 2])?.requires_grad();
/// let loss = a.mul(&a)?.sum()?;
/// loss.backward()?;
/// assert_eq!(a.grad().unwrap().to_vec_f64()?, vec![2., 4., 6., 8.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) layout: Layout,
}

/// The element-wise function computing a deferred result, and its
/// arguments (see `crate::ops::fuse`): attached to the deferred storage,
/// so that the op reading it next can compute it inside its own kernel
/// instead, and dropped once the storage's kernel has run.
pub(crate) struct Producer {
    /// The op's plan: its function (`plan.f`) reads the dense tensors in
    /// `args` (views composed in).
    pub(crate) plan: Arc<crate::runtime::op_plan::OpPlan>,
    /// Dense tensors, in the function's argument order.
    pub(crate) args: Vec<Tensor>,
    /// The key `plan` is cached under.
    pub(crate) key: String,
    /// The ops the function composes.
    pub(crate) depth: usize,
}

/// Where a tensor's elements live.
pub(crate) enum Layout {
    /// Row-major, contiguous elements of its own (possibly shared with
    /// tensors that alias it, like reshapes).
    Dense {
        storage: Arc<Storage>,
        origin: Origin,
    },
    /// `self[v] = base[map(v)]`; `base` is always `Dense`.
    View { base: Tensor, map: AffineMap },
}

impl Tensor {
    pub(crate) fn dense(shape: Vec<usize>, storage: Arc<Storage>, origin: Origin) -> Tensor {
        Tensor(Arc::new(Inner {
            shape,
            dtype: storage.dtype(),
            layout: Layout::Dense { storage, origin },
        }))
    }

    /// What computes this dense tensor, while its kernel has not run (not
    /// for a reshape sharing the storage: it reads the elements flat).
    pub(crate) fn pending_producer(&self) -> Option<Arc<Producer>> {
        if self.is_view() {
            return None;
        }
        let about = self.storage_and_origin().0.deferred_about()?;
        let p = about.downcast::<Producer>().ok()?;
        (p.plan.f.output_shape() == self.shape()).then_some(p)
    }

    pub(crate) fn view_of(base: &Tensor, shape: Vec<usize>, map: AffineMap) -> Tensor {
        Tensor(Arc::new(Inner {
            shape,
            dtype: base.dtype(),
            layout: Layout::View {
                base: base.clone(),
                map,
            },
        }))
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.0.shape.iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// The device holding the data (its storage's): the CPU unless the
    /// tensor was created on or moved to another ([`Tensor::to_device`],
    /// [`crate::set_default_device`]).
    ///
    /// ```
    /// let t = tenjin::Tensor::zeros(&[2], tenjin::DType::F32)?;
    /// assert_eq!(t.device(), tenjin::Device::Cpu);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn device(&self) -> Device {
        self.storage_and_origin().0.device()
    }

    /// Whether this tensor is a view (transpose, slice, broadcast, ...) of
    /// another tensor's data rather than dense data of its own.
    pub fn is_view(&self) -> bool {
        matches!(self.0.layout, Layout::View { .. })
    }

    /// The dense tensor holding this tensor's data and the map from this
    /// tensor's indices into it (the identity for dense tensors).
    pub(crate) fn base_and_map(&self) -> (&Tensor, Option<&AffineMap>) {
        match &self.0.layout {
            Layout::Dense { .. } => (self, None),
            Layout::View { base, map } => (base, Some(map)),
        }
    }

    /// Storage and origin of a dense tensor (of the base of a view).
    pub(crate) fn storage_and_origin(&self) -> (&Arc<Storage>, &Origin) {
        match &self.base_and_map().0 .0.layout {
            Layout::Dense { storage, origin } => (storage, origin),
            Layout::View { .. } => unreachable!("the base of a view is dense"),
        }
    }

    pub(crate) fn origin(&self) -> &Origin {
        self.storage_and_origin().1
    }

    /// Whether a gradient flows into this tensor: it is a leaf that requires
    /// one or depends on such a leaf.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::ones(&[2], tenjin::DType::F64)?;
    /// assert!(!x.is_requires_grad());
    /// let w = x.clone().requires_grad();
    /// assert!(w.is_requires_grad() && w.exp()?.is_requires_grad());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn is_requires_grad(&self) -> bool {
        self.origin().requires_grad()
    }

    /// Whether this tensor is a leaf of the trace (not computed by a
    /// recorded operation).
    pub fn is_leaf(&self) -> bool {
        !matches!(self.origin(), Origin::Op(_))
    }

    /// This tensor's data as a leaf that requires a gradient. A tensor that
    /// is already such a leaf is returned as is; the data of any other
    /// tensor (a computed result, a view) is shared, or copied for views,
    /// into a new leaf, detached from the trace.
    pub fn requires_grad(self) -> Tensor {
        if let Origin::Leaf(_) = self.origin() {
            if !self.is_view() {
                return self;
            }
        }
        let dense = match self.contiguous_detached() {
            Ok(t) => t,
            // Copying a view can only fail for lack of memory; keep the data
            // shared through the view in that case rather than lose it.
            Err(_) => return self,
        };
        let (storage, _) = dense.storage_and_origin();
        Tensor::dense(
            self.shape().to_vec(),
            storage.clone(),
            Origin::Leaf(Arc::new(Leaf::new())),
        )
    }

    /// The same data with no trace: gradients do not flow through the
    /// result. Views stay views.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let w = Tensor::ones(&[3], tenjin::DType::F32)?.requires_grad();
    /// assert!(!w.detach().is_requires_grad());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn detach(&self) -> Tensor {
        match &self.0.layout {
            Layout::Dense { storage, .. } => {
                Tensor::dense(self.shape().to_vec(), storage.clone(), Origin::Constant)
            }
            Layout::View { base, map } => {
                Tensor::view_of(&base.detach(), self.shape().to_vec(), map.clone())
            }
        }
    }

    /// Whether `other` is this tensor read again: the same elements (one
    /// storage, the same view of it) and the same place on the tape, so a
    /// function reading both may read one (`IndexFn::merge_args`).
    pub(crate) fn reads_as(&self, other: &Tensor) -> bool {
        if Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        let ((a, ma), (b, mb)) = (self.base_and_map(), other.base_and_map());
        let same_view = ma == mb;
        let (sa, oa) = a.storage_and_origin();
        let (sb, ob) = b.storage_and_origin();
        let same_origin = match (oa, ob) {
            (Origin::Constant, Origin::Constant) => true,
            (Origin::Leaf(x), Origin::Leaf(y)) => Arc::ptr_eq(x, y),
            (Origin::Op(x), Origin::Op(y)) => Arc::ptr_eq(x, y),
            _ => false,
        };
        self.shape() == other.shape()
            && self.dtype() == other.dtype()
            && a.shape() == b.shape()
            && Arc::ptr_eq(sa, sb)
            && same_view
            && same_origin
    }

    /// Runs the kernel of this tensor's value now if fusion deferred it
    /// (`tenjin::set_fusion`: an element-wise result runs inside the
    /// kernel of the op reading it, or when read otherwise; one dropped
    /// unread never runs). Like tinygrad's `realize`: the work is queued
    /// on the device, with no host synchronisation. For timing a
    /// producer alone; reading a value never needs it.
    ///
    /// ```
    /// use tenjin::{Device, DType, Tensor};
    /// tenjin::cuda::simulate()?;
    /// let x = Tensor::ones_on(&[4], DType::F32, Device::Cuda(0))?;
    /// let before = tenjin::stats().ptx_launches;
    /// let y = x.exp()?; // deferred
    /// assert_eq!(tenjin::stats().ptx_launches, before);
    /// y.realize()?;
    /// assert_eq!(tenjin::stats().ptx_launches, before + 1);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn realize(&self) -> Result<(), Error> {
        self.base_and_map().0.storage_and_origin().0.settle()
    }

    /// The gradient accumulated into this leaf by `backward`, if any.
    /// `None` for tensors that do not require a gradient, for non-leaves and
    /// before the first `backward`; [`Tensor::try_grad`] says which.
    pub fn grad(&self) -> Option<Tensor> {
        self.try_grad().ok().flatten()
    }

    /// As [`Tensor::grad`], with an error for a tensor that does not require
    /// a gradient or is not a leaf.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::ones(&[2], tenjin::DType::F64)?;
    /// assert!(matches!(x.try_grad(), Err(tenjin::Error::Autograd { .. })));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn try_grad(&self) -> Result<Option<Tensor>, Error> {
        if self.is_view() {
            return Err(trace::autograd_error(
                "grad",
                format!(
                    "a view of shape {:?} has no gradient of its own; read the gradient of the tensor it views",
                    self.shape()
                ),
            ));
        }
        match self.origin() {
            Origin::Leaf(leaf) => Ok(leaf
                .grad_graph()
                .map(|(s, origin)| Tensor::dense(self.shape().to_vec(), s, origin))
                .or_else(|| {
                leaf.grad()
                    .map(|s| Tensor::dense(self.shape().to_vec(), s, Origin::Constant))
            })),
            Origin::Constant => Err(trace::autograd_error(
                "grad",
                format!(
                    "the tensor of shape {:?} does not require a gradient (call .requires_grad() on it before using it)",
                    self.shape()
                ),
            )),
            Origin::Op(node) => Err(trace::autograd_error(
                "grad",
                format!(
                    "the tensor of shape {:?} is the result of {}, not a leaf; gradients accumulate into leaves only",
                    self.shape(),
                    node.op_name()
                ),
            )),
        }
    }

    /// Replaces the gradient of this leaf with `grad`'s values (shared,
    /// not copied: a later `backward` accumulates into a copy while
    /// `grad` is held elsewhere), or clears it with `None` — for code that
    /// edits gradients (PyTorch's `p.grad = g`). `grad` must have this
    /// tensor's shape, dtype and device; a view is made contiguous first.
    /// The gradient is a constant afterwards (a recorded one's graph is
    /// dropped). On an error the gradient is as it was.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let w = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?.requires_grad();
    /// w.mul(&w)?.sum()?.backward()?;
    /// let halved = w.grad().unwrap().mul_scalar(0.5)?;
    /// w.set_grad(Some(&halved))?;
    /// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![1.0, 2.0]);
    /// assert!(w.set_grad(Some(&Tensor::zeros(&[3], tenjin::DType::F64)?)).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn set_grad(&self, grad: Option<&Tensor>) -> Result<(), Error> {
        self.try_grad()?; // a leaf that requires a gradient, not a view
        let Origin::Leaf(leaf) = self.origin() else {
            unreachable!("try_grad accepted it")
        };
        let Some(g) = grad else {
            leaf.set(None);
            return Ok(());
        };
        if g.shape() != self.shape() || g.dtype() != self.dtype() || g.device() != self.device() {
            return Err(Error::shape(
                "set_grad",
                format!(
                    "a gradient of shape {:?} ({:?} on {}) for a tensor of shape {:?} ({:?} on {})",
                    g.shape(),
                    g.dtype(),
                    g.device(),
                    self.shape(),
                    self.dtype(),
                    self.device()
                ),
            ));
        }
        let g = if g.is_view() {
            g.contiguous()?
        } else {
            g.clone()
        };
        leaf.set(Some(g.storage_and_origin().0.clone()));
        Ok(())
    }

    /// Edits this leaf's gradient: it becomes `edit(gradient)` (PyTorch's
    /// `p.grad.mul_(0.5)` is `p.grad_mut(|g| g.mul_scalar(0.5))`), which
    /// must keep its shape, dtype and device. Returns whether there was a
    /// gradient to edit; before the first `backward` there is none and
    /// `edit` is not called. All or nothing: when `edit` fails or returns
    /// a tensor of another shape, the gradient is as it was.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let w = Tensor::from_vec_f64(vec![1.0, -2.0], &[2])?.requires_grad();
    /// assert!(!w.grad_mut(|g| g.neg())?); // no gradient yet
    /// w.mul(&w)?.sum()?.backward()?; // gradient (2, -4)
    /// assert!(w.grad_mut(|g| g.clamp(-3.0, 3.0))?);
    /// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![2.0, -3.0]);
    /// assert!(w.grad_mut(|g| g.sum()).is_err()); // a scalar for a [2] gradient
    /// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![2.0, -3.0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn grad_mut(
        &self,
        edit: impl FnOnce(&Tensor) -> Result<Tensor, Error>,
    ) -> Result<bool, Error> {
        let Some(g) = self.try_grad()? else {
            return Ok(false);
        };
        let edited = crate::no_grad(|| edit(&g))?;
        drop(g);
        self.set_grad(Some(&edited.detach()))?;
        Ok(true)
    }

    /// Clears the gradient of this leaf (the next `backward` starts from
    /// zero). A no-op on tensors without a gradient.
    pub fn zero_grad(&self) {
        if let Origin::Leaf(leaf) = self.origin() {
            leaf.clear();
        }
    }

    /// Whether two tensors share their data (dense storage or view base).
    pub fn shares_data_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(self.storage_and_origin().0, other.storage_and_origin().0)
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {:?}", self.shape(), self.dtype())?;
        if self.is_view() {
            write!(f, ", view")?;
        }
        match self.origin() {
            Origin::Constant => {}
            Origin::Leaf(_) => write!(f, ", requires_grad")?,
            Origin::Op(n) => write!(f, ", from {}", n.op_name())?,
        }
        if self.numel() <= 16 {
            if let Ok(v) = self.to_vec_f64() {
                write!(f, ", {v:?}")?;
            }
        }
        write!(f, ")")
    }
}
