//! Gradients as tensors, to any order: `grad` with `create_graph`, and the
//! functional API of `torch.autograd.functional` (`vjp`, `jvp`, `hvp`,
//! `jacobian`, `hessian`).
//!
//! Owns the public entry points; the walk over the trace is `graph`. Every
//! derivative applied here is an index function the symbolic core derived
//! and the planner staged: a gradient computed with `create_graph` is
//! recorded like any op, so it can be differentiated again. Jacobians and
//! Hessians are not `n` backward passes: one walk carries a batch of
//! gradients, and its first step folds the identity in symbolically
//! (`IndexFn::lift_seed`), so the Hessian of logistic regression is the
//! one contraction `Xᵀ·diag(σ(1−σ))·X`.
//!
//! Sits above `ops` and `trace` (it applies derived functions as ops and
//! reads the tape); nothing below imports it.

mod backward;
mod forward;
mod functional;
mod graph;

pub use crate::trace::keep_inputs;
pub use functional::{hessian, hvp, jacobian, jvp, vjp};

use crate::tensor::Tensor;
use crate::trace::Origin;
use crate::trace::{self, Node};
use crate::Error;
use graph::{gradients, Seed};
use std::collections::HashSet;
use std::sync::Arc;

/// The gradients of `outputs` with respect to `inputs` (like
/// `torch.autograd.grad`): `Σ_k grad_outputs[k] · ∂outputs[k]/∂input`,
/// with `grad_outputs` ones for one-element outputs when `None`. An input
/// no gradient reaches gets zeros. Leaves' `grad()` are not touched.
///
/// With `create_graph` the gradients are recorded on the tape, so they can
/// be differentiated again; the outputs must then have been computed with
/// what their derivatives read still alive (always so in memory-efficient
/// mode and inside [`keep_inputs`]; otherwise an `Err` says what is
/// missing).
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?.requires_grad();
/// let y = autograd::keep_inputs(|| x.mul(&x)?.mul(&x)?.sum())?; // Σ x³
/// let g = autograd::grad(&[&y], &[&x], None, true)?; // 3x²
/// assert_eq!(g[0].to_vec_f64()?, vec![3.0, 12.0]);
/// let h = autograd::grad(&[&g[0].sum()?], &[&x], None, false)?; // 6x
/// assert_eq!(h[0].to_vec_f64()?, vec![6.0, 12.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn grad(
    outputs: &[&Tensor],
    inputs: &[&Tensor],
    grad_outputs: Option<&[&Tensor]>,
    create_graph: bool,
) -> Result<Vec<Tensor>, Error> {
    let seeds = match grad_outputs {
        Some(g) => g.iter().map(|t| (*t).clone()).collect(),
        None => outputs
            .iter()
            .map(|y| {
                if y.numel() != 1 {
                    return Err(trace::autograd_error(
                        "grad",
                        format!(
                            "an output has shape {:?} ({} elements): without grad_outputs every output must have one element",
                            y.shape(),
                            y.numel()
                        ),
                    ));
                }
                Tensor::ones_on(y.shape(), y.dtype(), y.device())
            })
            .collect::<Result<_, _>>()?,
    };
    let found = gradients(outputs, Seed::Plain(seeds), inputs, create_graph)?;
    fill_zeros(found, inputs, &[])
}

/// The Jacobian of a recorded `output` with respect to `input` (a leaf or
/// a recorded tensor it was computed from), shaped
/// `output.shape() ++ input.shape()`: one walk of the trace with the
/// identity as a batch of seeds, folded into the first derivatives. With
/// `create_graph` the Jacobian is recorded too (and `explain` shows its
/// last op's stages).
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?.requires_grad();
/// let y = x.mul(&x)?; // J = diag(2x)
/// let j = autograd::jacobian_of(&y, &x, false)?;
/// assert_eq!(j.to_vec_f64()?, vec![2.0, 0.0, 0.0, 4.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn jacobian_of(output: &Tensor, input: &Tensor, create_graph: bool) -> Result<Tensor, Error> {
    let found = gradients(&[output], Seed::Identity, &[input], create_graph)?;
    Ok(fill_zeros(found, &[input], output.shape())?.remove(0))
}

/// Zeros (of `batch ++ shape`) where no gradient arrived.
fn fill_zeros(
    found: Vec<Option<Tensor>>,
    inputs: &[&Tensor],
    batch: &[usize],
) -> Result<Vec<Tensor>, Error> {
    found
        .into_iter()
        .zip(inputs)
        .map(|(g, x)| match g {
            Some(g) => Ok(g),
            None => {
                let shape: Vec<usize> = batch.iter().chain(x.shape()).copied().collect();
                Tensor::zeros_on(&shape, x.dtype(), x.device())
            }
        })
        .collect()
}

/// `backward` with `create_graph`: the gradient of `root` accumulated into
/// every leaf it depends on, recorded so `leaf.grad()` can be
/// differentiated again.
pub(crate) fn backward_create_graph(root: &Tensor, grad: Option<&Tensor>) -> Result<(), Error> {
    let leaves = leaves_of(root)?;
    let inputs: Vec<&Tensor> = leaves.iter().map(|(_, t)| t).collect();
    let grads = match grad {
        Some(g) => self::grad(&[root], &inputs, Some(&[g]), true)?,
        None => self::grad(&[root], &inputs, None, true)?,
    };
    for ((leaf, _), g) in leaves.iter().zip(grads) {
        accumulate_recorded(leaf, g)?;
    }
    Ok(())
}

/// `leaf.grad += g` with the sum recorded too (`g` dense, of the leaf's
/// shape), so the gradient can be differentiated.
fn accumulate_recorded(leaf: &trace::Leaf, g: Tensor) -> Result<(), Error> {
    let shape = g.shape().to_vec();
    let sum = match (leaf.grad_graph(), leaf.grad()) {
        (Some((storage, origin)), _) => Tensor::dense(shape, storage, origin).add(&g)?,
        (None, Some(old)) => Tensor::dense(shape, old, Origin::Constant).add(&g)?,
        (None, None) => g,
    };
    let sum = sum.contiguous()?;
    let (storage, origin) = sum.storage_and_origin();
    leaf.set_recorded(storage.clone(), origin.clone());
    Ok(())
}

/// The leaves `root` depends on, each as a tensor of its own.
fn leaves_of(root: &Tensor) -> Result<Vec<(Arc<trace::Leaf>, Tensor)>, Error> {
    let mut out = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut visited: HashSet<u64> = HashSet::new();
    let mut push_leaf = |leaf: &Arc<trace::Leaf>, t: Tensor, out: &mut Vec<_>| {
        if seen.insert(Arc::as_ptr(leaf) as usize) {
            out.push((leaf.clone(), t));
        }
    };
    let mut stack: Vec<Arc<Node>> = Vec::new();
    match root.origin() {
        Origin::Leaf(l) => push_leaf(l, root.clone(), &mut out),
        Origin::Op(n) => stack.push(n.clone()),
        Origin::Constant => {}
    }
    while let Some(node) = stack.pop() {
        if !visited.insert(node.id()) {
            continue;
        }
        for (i, e) in node.edges.iter().enumerate() {
            match e {
                Origin::Op(n) => stack.push(n.clone()),
                Origin::Leaf(l) => {
                    let shape = node.plan.f.args()[i].shape.clone();
                    let s = node.input_storage(i).ok_or_else(|| {
                        trace::autograd_error(
                            "backward",
                            format!(
                                "a leaf of shape {shape:?} read by {} was modified in place after it was read",
                                node.op_name()
                            ),
                        )
                    })?;
                    push_leaf(l, Tensor::dense(shape, s, e.clone()), &mut out);
                }
                Origin::Constant => {}
            }
        }
    }
    Ok(out)
}

/// The nodes under `roots` for which `keep` holds, every node after the
/// nodes it reads (post-order, by an explicit stack: a long trace must not
/// recurse). `keep` sees a node once the nodes it reads were decided, and
/// the ids of those kept so far.
pub(crate) fn post_order(
    roots: &[Arc<Node>],
    mut keep: impl FnMut(&Node, &HashSet<u64>) -> bool,
) -> Vec<Arc<Node>> {
    let mut order: Vec<Arc<Node>> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut kept: HashSet<u64> = HashSet::new();
    for root in roots {
        if !seen.insert(root.id()) {
            continue;
        }
        let mut stack: Vec<(Arc<Node>, usize)> = vec![(root.clone(), 0)];
        while let Some((node, next)) = stack.pop() {
            if let Some(Origin::Op(child)) = node.edges.get(next) {
                let child = child.clone();
                stack.push((node, next + 1));
                if seen.insert(child.id()) {
                    stack.push((child, 0));
                }
                continue;
            }
            if next < node.edges.len() {
                stack.push((node, next + 1));
                continue;
            }
            if keep(&node, &kept) {
                kept.insert(node.id());
                order.push(node);
            }
        }
    }
    order
}
