//! A tensor's read-only entry points into the tape: [`explain`] and the
//! memory plan (`backward` is `crate::autograd`'s: it may copy a view,
//! an op). The tape itself (`crate::trace`) works on nodes, leaves and
//! storages and never sees a [`Tensor`].

use super::{Origin, Tensor};
use crate::alloc::AllocMode;
use crate::trace;
use crate::Error;

/// The stages of the recorded operation that produced `t`.
///
/// ```
/// use tenjin::{DType, Tensor};
/// let x = Tensor::randn(&[32, 64], DType::F32, 1)?;
/// let w = Tensor::randn(&[48, 64], DType::F32, 2)?.requires_grad();
/// let c = Tensor::randn(&[48], DType::F32, 3)?.requires_grad();
/// let h = tenjin::index_fn("h[b; o] = max(sum{k}_0^63 (x[b; k] * w[o; k]) + c[o], 0)",
///                          &[("x", &x), ("w", &w), ("c", &c)])?;
/// let e = tenjin::explain(&h)?;
/// println!("{e}");
/// // The pre-activation is a stage of its own, saved for the backward
/// // program; the weight gradient is a GEMM.
/// assert!(e.forward.iter().any(|s| s.role.contains("saved for backward")));
/// assert!(e.backward.iter().any(|s| s.route == "gemm" && s.role == "gradient of w"));
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn explain(t: &Tensor) -> Result<trace::Explanation, Error> {
    let Origin::Op(node) = t.origin() else {
        return Err(Error::Invalid {
            function: "explain".into(),
            message: format!(
                "the tensor of shape {:?} was not produced by a recorded operation (record it with an input that requires a gradient to see its plan; `tenjin::planner::plan_function` plans any function)",
                t.shape()
            ),
        });
    };
    Ok(trace::explain_node(node))
}

impl Tensor {
    /// The static memory plan of this tensor's trace, for `backward()`
    /// from it, in the block sizes of its device's allocator's current
    /// mode; see [`MemoryPlan`](trace::MemoryPlan).
    pub fn memory_plan(&self) -> Result<trace::MemoryPlan, Error> {
        self.memory_plan_for(crate::alloc::mode_for(self.device()))
    }

    /// As [`Tensor::memory_plan`], with the block sizes of `mode`.
    pub fn memory_plan_for(&self, mode: AllocMode) -> Result<trace::MemoryPlan, Error> {
        if self.is_view() {
            return Err(trace::autograd_error(
                "memory_plan",
                format!(
                    "the tensor of shape {:?} is a view; plan the dense tensor it views, or a contiguous copy",
                    self.shape()
                ),
            ));
        }
        match self.origin() {
            Origin::Op(node) => trace::plan_backward(node, self.numel(), self.dtype(), mode),
            _ => Err(trace::autograd_error(
                "memory_plan",
                format!(
                    "the tensor of shape {:?} was not computed by a recorded operation: there is no trace to plan",
                    self.shape()
                ),
            )),
        }
    }
}
