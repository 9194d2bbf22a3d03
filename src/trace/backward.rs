//! The backward driver: runs the derivative kernels of a recorded graph in
//! reverse, accumulating gradients into leaves.
//!
//! Owns the traversal (only nodes reachable from the output, only edges
//! that lead to a leaf requiring a gradient), the order of the derivative
//! computations, gradient accumulation and the release of saved values.
//! Every derivative it runs comes from `OpPlan::grad` (symbolic).

use super::plan::GradInput;
use super::{add_into, autograd_error, Node};
use crate::exec;
use crate::tensor::{Origin, Storage, Tensor};
use crate::Error;
use std::collections::HashMap;
use std::sync::Arc;

/// `d root / d leaf`, accumulated into every leaf that requires a gradient.
/// `grad` is the gradient flowing into `root` (required unless `root` has
/// one element). With `retain_graph` the saved values stay for another
/// backward; otherwise they are released as soon as each node is done.
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
        Origin::Constant => Err(autograd_error(
            "backward",
            format!(
                "the tensor of shape {:?} does not require a gradient: no input it was computed from requires one",
                root.shape()
            ),
        )),
        Origin::Leaf(leaf) => leaf.accumulate(seed),
        Origin::Op(node) => run(node, seed, retain_graph),
    }
}

/// The gradient flowing into the output, as a storage of its own.
fn seed(root: &Tensor, grad: Option<&Tensor>) -> Result<Arc<Storage>, Error> {
    match grad {
        None => {
            if root.numel() != 1 {
                return Err(autograd_error(
                    "backward",
                    format!(
                        "the output has shape {:?} ({} elements): backward without a gradient needs a single-element output; use backward_with(grad) with a gradient of shape {:?}",
                        root.shape(),
                        root.numel(),
                        root.shape()
                    ),
                ));
            }
            Tensor::ones(root.shape(), root.dtype())?.dense_storage()
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

fn run(root: &Arc<Node>, seed: Arc<Storage>, retain_graph: bool) -> Result<(), Error> {
    let order = reverse_order(root);
    let mut pending: HashMap<u64, Option<Arc<Storage>>> = HashMap::new();
    pending.insert(root.id(), Some(seed));
    for node in order {
        let Some(Some(g)) = pending.remove(&node.id()) else {
            continue;
        };
        let mut saved = node.saved.lock().unwrap_or_else(|e| e.into_inner());
        if saved.released {
            return Err(autograd_error(
                "backward",
                format!(
                    "the graph through {} was already released by an earlier backward; call backward_retaining_graph() the first time to run backward twice",
                    node.op_name()
                ),
            ));
        }
        for (a, edge) in node.edges.iter().enumerate() {
            if !edge.requires_grad() {
                continue;
            }
            let gp = node.plan.grad(a)?;
            let mut inputs: Vec<&Arc<Storage>> = Vec::with_capacity(gp.inputs.len());
            for input in &gp.inputs {
                let (s, version) = match *input {
                    GradInput::Df => {
                        inputs.push(&g);
                        continue;
                    }
                    GradInput::Arg(k) => saved.args[k].as_ref(),
                    GradInput::Out => saved.out.as_ref(),
                }
                .map(|(s, v)| (s, *v))
                .ok_or_else(|| {
                    autograd_error(
                        "backward",
                        format!(
                            "{} did not save a value its derivative reads",
                            node.op_name()
                        ),
                    )
                })?;
                if s.version() != version {
                    return Err(autograd_error(
                        "backward",
                        format!(
                            "a value saved by {} was modified in place after it was saved; its derivative would be wrong",
                            node.op_name()
                        ),
                    ));
                }
                inputs.push(s);
            }
            let dx = exec::run_new(&gp.kernel, &inputs)?;
            match edge {
                Origin::Leaf(leaf) => leaf.accumulate(dx)?,
                Origin::Op(n) => add_into(pending.entry(n.id()).or_default(), dx)?,
                Origin::Constant => {}
            }
        }
        if !retain_graph {
            saved.args.iter_mut().for_each(|s| *s = None);
            saved.out = None;
            saved.released = true;
        }
    }
    Ok(())
}

/// The nodes reachable from `root`, consumers before producers (node ids
/// grow with recording order, so decreasing ids are a reverse topological
/// order).
fn reverse_order(root: &Arc<Node>) -> Vec<Arc<Node>> {
    let mut seen: HashMap<u64, Arc<Node>> = HashMap::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        if seen.contains_key(&n.id()) {
            continue;
        }
        for e in &n.edges {
            if let Origin::Op(m) = e {
                stack.push(m.clone());
            }
        }
        seen.insert(n.id(), n);
    }
    let mut order: Vec<Arc<Node>> = seen.into_values().collect();
    order.sort_by_key(|n| std::cmp::Reverse(n.id()));
    order
}
