//! `backward` from a tensor: the seed gradient, the errors for tensors
//! that need no gradient, and the `Tensor::backward*` methods. The walk
//! itself is the tape's (`crate::trace::run_backward`).

use crate::runtime::Storage;
use crate::trace::{self, Origin};
use crate::{Error, Tensor};
use std::sync::Arc;

impl Tensor {
    /// Differentiates this one-element tensor (a loss) with respect to
    /// every leaf that requires a gradient, accumulating into their
    /// `grad()`. Saved values are released as backward goes; a second
    /// `backward` through the same graph is an error (see
    /// [`Tensor::backward_retaining_graph`]).
    pub fn backward(&self) -> Result<(), Error> {
        backward(self, None, false)
    }

    /// As [`Tensor::backward`] for an output of any shape, with `grad` the
    /// gradient flowing into it (same shape and dtype).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![1., 2.], &[2])?.requires_grad();
    /// let y = x.mul_scalar(3.0)?;
    /// assert!(y.backward().is_err()); // two elements: which gradient?
    /// y.backward_with(&Tensor::from_vec_f64(vec![1., 10.], &[2])?)?;
    /// assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![3., 30.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn backward_with(&self, grad: &Tensor) -> Result<(), Error> {
        backward(self, Some(grad), false)
    }

    /// As [`Tensor::backward`] (or `backward_with` when `grad` is given),
    /// keeping the saved values so backward can run through this graph
    /// again.
    pub fn backward_retaining_graph(&self, grad: Option<&Tensor>) -> Result<(), Error> {
        backward(self, grad, true)
    }

    /// As [`Tensor::backward`] (or `backward_with` when `grad` is given),
    /// with the gradients recorded on the tape (PyTorch's
    /// `backward(create_graph=True)`): each leaf's `grad()` is then a
    /// tensor that can be differentiated again. The recorded gradient
    /// refers back to its leaf; `zero_grad` releases it.
    ///
    /// ```
    /// use tenjin::{autograd, Tensor};
    /// let x = Tensor::from_vec_f64(vec![3.0], &[1])?.requires_grad();
    /// let y = autograd::keep_inputs(|| x.mul(&x)?.mul(&x)?.sum())?; // x³
    /// y.backward_create_graph(None)?;
    /// let g = x.grad().unwrap(); // 3x² = 27, recorded
    /// assert_eq!(g.to_vec_f64()?, vec![27.0]);
    /// x.zero_grad();
    /// g.sum()?.backward()?; // 6x
    /// assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![18.0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn backward_create_graph(&self, grad: Option<&Tensor>) -> Result<(), Error> {
        crate::autograd::backward_create_graph(self, grad)
    }
}

/// `d root / d leaf`, accumulated into every leaf that requires a gradient.
/// `grad` is the gradient flowing into `root` (required unless `root` has
/// one element). With `retain_graph` the saved values stay for another
/// backward; otherwise each is released right after its last use.
pub(crate) fn backward(
    root: &Tensor,
    grad: Option<&Tensor>,
    retain_graph: bool,
) -> Result<(), Error> {
    if root.is_view() {
        return backward(&root.contiguous()?, grad, retain_graph);
    }
    let seed = seed(root, grad)?;
    match root.origin() {
        Origin::Constant => Err(trace::autograd_error(
            "backward",
            format!(
                "the tensor of shape {:?} does not require a gradient: no input it was computed from requires one",
                root.shape()
            ),
        )),
        Origin::Leaf(leaf) => leaf.accumulate(seed),
        Origin::Op(node) => trace::run_backward(node, seed, retain_graph),
    }
}

/// The gradient flowing into the output, as a storage of its own.
fn seed(root: &Tensor, grad: Option<&Tensor>) -> Result<Arc<Storage>, Error> {
    match grad {
        None => {
            if root.numel() != 1 {
                return Err(trace::autograd_error(
                    "backward",
                    format!(
                        "the output has shape {:?} ({} elements): backward without a gradient needs a single-element output; use backward_with(grad) with a gradient of shape {:?}",
                        root.shape(),
                        root.numel(),
                        root.shape()
                    ),
                ));
            }
            Tensor::ones_on(root.shape(), root.dtype(), root.device())?.dense_storage()
        }
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::Shape {
                    op: "backward_with".into(),
                    message: format!(
                        "the gradient has shape {:?}, the output {:?}",
                        g.shape(),
                        root.shape()
                    ),
                });
            }
            if g.dtype() != root.dtype() {
                return Err(Error::DType {
                    op: "backward_with".into(),
                    message: format!(
                        "the gradient is {:?}, the output {:?}",
                        g.dtype(),
                        root.dtype()
                    ),
                });
            }
            g.detach().contiguous()?.dense_storage()
        }
    }
}
