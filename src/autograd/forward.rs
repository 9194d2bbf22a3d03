//! Forward mode: Jacobian-vector products in one pass over the trace.
//!
//! Owns [`tangents`]: the nodes between an input and an output in
//! topological order, each node's tangent function
//! ([`IndexFn::tangent`], derived once per op plan and set of arguments
//! with a tangent, cached) applied as an op to its arguments and their
//! tangents. One forward pass of the same kernels' size, where the
//! transpose of a vector-Jacobian product needs two reverse walks.

use super::post_order;
use crate::ops::{apply_index_fn, window};
use crate::runtime::op_plan::OpPlan;
use crate::symbolic::IndexFn;
use crate::tensor::Tensor;
use crate::trace::Origin;
use crate::trace::{self, Node};
use crate::Error;
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// A node's tangent function without the arguments it does not read.
struct TangentFn {
    f: IndexFn,
    /// Positions read among the node's arguments, then their tangents
    /// (`n + k` for the `k`-th argument with a tangent).
    reads: Vec<usize>,
    text: String,
    /// Keeps the plan (and so the key's address) alive.
    _plan: Arc<OpPlan>,
}

type TangentKey = (usize, Vec<usize>);
static TANGENTS: LazyLock<DashMap<TangentKey, Arc<TangentFn>>> = LazyLock::new(DashMap::new);

fn tangent_fn(plan: &Arc<OpPlan>, wrt: &[usize]) -> Result<Arc<TangentFn>, Error> {
    let key = (Arc::as_ptr(plan) as usize, wrt.to_vec());
    if let Some(t) = TANGENTS.get(&key) {
        return Ok(t.clone());
    }
    let (f, reads) = plan.f.tangent(wrt)?.without_unused_args();
    let t = Arc::new(TangentFn {
        text: f.to_string(),
        f,
        reads,
        _plan: plan.clone(),
    });
    TANGENTS.insert(key, t.clone());
    Ok(t)
}

/// `J·v`: the tangent of `output` when `input` (a leaf) moves along `v`.
/// `None` when the output does not depend on the input.
pub(crate) fn tangent(
    output: &Tensor,
    input: &Tensor,
    v: &Tensor,
) -> Result<Option<Tensor>, Error> {
    if v.shape() != input.shape() {
        return Err(Error::Shape {
            op: "jvp".into(),
            message: format!(
                "the tangent has shape {:?}, the input {:?}",
                v.shape(),
                input.shape()
            ),
        });
    }
    let Origin::Leaf(leaf) = input.origin() else {
        return Err(trace::autograd_error(
            "jvp",
            "internal: the input of a forward pass must be a leaf".into(),
        ));
    };
    let leaf_key = Arc::as_ptr(leaf) as usize;
    let y = trace::with_grad_enabled(true, || output.contiguous())?;
    let root = match y.origin() {
        Origin::Op(root) => root,
        // The output is the input itself (a view of it that copies nothing).
        Origin::Leaf(l) if Arc::as_ptr(l) as usize == leaf_key => {
            return Ok(Some(v.reshape(y.shape())?))
        }
        _ => return Ok(None),
    };
    // Nodes depending on the input, every node after the nodes it reads.
    let order = depending_on(root, leaf_key);
    let mut tangent: HashMap<u64, Tensor> = HashMap::new();
    let dtype = output.dtype();
    for node in &order {
        let f = &node.plan.f;
        let n = f.args().len();
        let mut wrt = Vec::new();
        let mut tangents: Vec<Tensor> = Vec::new();
        for (a, e) in node.edges.iter().enumerate() {
            let t = match e {
                Origin::Leaf(l) if Arc::as_ptr(l) as usize == leaf_key => Some(v.clone()),
                Origin::Op(m) => tangent.get(&m.id()).cloned(),
                _ => None,
            };
            if let Some(t) = t {
                wrt.push(a);
                // A reshape reads its input flat; a window's is placed.
                tangents.push(match node.placed {
                    Some(_) => t,
                    None => t.reshape(&f.args()[a].shape)?,
                });
            }
        }
        if wrt.is_empty() {
            continue;
        }
        if node.placed.is_some() {
            tangent.insert(node.id(), window::window_tangent(node, &tangents[0])?);
            continue;
        }
        if node.plan.is_host() {
            return Err(crate::trace::autograd_error(
                node.op_name(),
                "forward mode (jvp) through a host stage (index_select, embedding, gather, to_dtype, checkpoint) is not supported yet".into(),
            ));
        }
        let tf = tangent_fn(&node.plan, &wrt)?;
        let mut args: Vec<Tensor> = Vec::with_capacity(tf.reads.len());
        for &r in &tf.reads {
            if r < n {
                let s = node.input_storage(r).ok_or_else(|| {
                    trace::autograd_error(
                        "jvp",
                        format!(
                            "the forward pass through {} needs its input `{}`, which was freed or modified in place",
                            node.op_name(),
                            f.args()[r].name
                        ),
                    )
                })?;
                args.push(Tensor::dense(
                    f.args()[r].shape.clone(),
                    s,
                    node.edges[r].clone(),
                ));
            } else {
                args.push(tangents[r - n].clone());
            }
        }
        let refs: Vec<&Tensor> = args.iter().collect();
        let name = format!("t{}", node.op_name());
        let t = apply_index_fn(&name, &tf.f, &tf.text, &refs, dtype, output.device())?;
        tangent.insert(node.id(), t);
    }
    tangent
        .remove(&root.id())
        .map(|t| t.reshape(y.shape()))
        .transpose()
}

/// The nodes under `root` that depend on the leaf at `leaf`, in an order
/// where every node follows the nodes it reads.
fn depending_on(root: &Arc<Node>, leaf: usize) -> Vec<Arc<Node>> {
    post_order(std::slice::from_ref(root), |node, kept| {
        node.edges.iter().any(|e| match e {
            Origin::Leaf(l) => Arc::as_ptr(l) as usize == leaf,
            Origin::Op(c) => kept.contains(&c.id()),
            Origin::Constant => false,
        })
    })
}
