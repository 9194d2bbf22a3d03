//! Forward mode: the directional derivative of an index function.
//!
//! Owns [`IndexFn::tangent`]. Where `derive` turns every read into a
//! gather over the solved index sets (reverse mode), forward mode needs no
//! inversion at all: the tangent of a read `x[A·α + b]` is the read
//! `tx[A·α + b]` of the tangent at the same place, and the chain rule runs
//! bottom-up over the body, with the partials of `rules`:
//!
//! | node | tangent |
//! | --- | --- |
//! | constant, index value | `0` |
//! | `x[e]` | `tx[e]` (`0` for an argument without a tangent) |
//! | `op(a)` | `∂op/∂a · ta` |
//! | `a op b` | `∂op/∂a · ta + ∂op/∂b · tb`; `max`/`min`: the tangent of the operand chosen (the first on ties) |
//! | `if {c} then (a) else (b)` | `if {c} then (ta) else (tb)` |
//! | `sum{v} (a)` | `sum{v} (ta)` |
//! | `max{v} (a)`, `min{v} (a)` | `sum{v} (if {v = argmax{v} (a)} then (ta) else (0))` (the first maximum, as in reverse mode) |
//! | `argmax`, `argmin` | `0` |
//!
//! The result is again an `IndexFn` over the same output (one pass, no
//! sums beyond the function's own), planned and staged like any other.

use super::affine::{Affine, VarId};
use super::expr::{BinaryOp, CmpOp, Cond, Graph, Node, NodeId, ReduceOp};
use super::index_fn::{ArgDecl, IndexFn};
use super::rules::{binary_partials, unary_partial};
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

impl IndexFn {
    /// The directional derivative `Σ_a Σ_β ∂f[α]/∂a[β] · t<a>[β]` along the
    /// arguments at positions `wrt`: a function named `t<name>` over the
    /// same output, reading this function's arguments and then one tangent
    /// `t<arg>` (of the argument's shape) per entry of `wrt`, in order.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = sum{k}_0^2 (x[i; k] * x[i; k])", &[("x", &[2, 3][..])])?;
    /// let t = f.tangent(&[0])?;
    /// assert_eq!(t.args().last().unwrap().name, "tx");
    /// let x = [1., 2., 3., 0., 1., 0.];
    /// let v = [1., 0., 0., 0., 0., 1.];
    /// assert_eq!(t.eval_f64(&[("x", &x[..]), ("tx", &v[..])])?, vec![2., 0.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn tangent(&self, wrt: &[usize]) -> Result<IndexFn, Error> {
        let n = self.args.len();
        let mut tangent_arg: HashMap<usize, usize> = HashMap::default();
        let mut out = self.clone();
        for (k, &a) in wrt.iter().enumerate() {
            let decl = self
                .args
                .get(a)
                .ok_or_else(|| self.invalid(format!("no argument number {a}")))?;
            let mut name = format!("t{}", decl.name);
            while out.args.iter().any(|d| d.name == name) {
                name.push('_');
            }
            out.args.push(ArgDecl {
                name,
                shape: decl.shape.clone(),
            });
            tangent_arg.insert(a, n + k);
        }
        let mut name = format!("t{}", self.name);
        while out.args.iter().any(|d| d.name == name) {
            name.push('_');
        }
        out.name = name;
        let mut t: HashMap<NodeId, NodeId> = HashMap::default();
        for id in self.graph.reachable(self.root) {
            let tn = tangent_node(&mut out.graph, id, &t, &tangent_arg);
            t.insert(id, tn);
        }
        out.root = t[&self.root];
        let (graph, root) = out.graph.extract(out.root);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }
}

/// The tangent of node `id` (children's tangents in `t`).
fn tangent_node(
    g: &mut Graph,
    id: NodeId,
    t: &HashMap<NodeId, NodeId>,
    tangent_arg: &HashMap<usize, usize>,
) -> NodeId {
    let zero = g.constant(0.0);
    match g.node(id).clone() {
        Node::Const(_) | Node::Index(_) | Node::Random { .. } => zero,
        Node::Access { arg, index } => match tangent_arg.get(&arg) {
            Some(&ta) => g.access(ta, index),
            None => zero,
        },
        Node::Unary(op, a) => {
            let d = unary_partial(g, op, a, id);
            g.mul(d, t[&a])
        }
        Node::Binary(op @ (BinaryOp::Max | BinaryOp::Min), a, b) => {
            let cmp = if op == BinaryOp::Max {
                CmpOp::Ge
            } else {
                CmpOp::Le
            };
            g.select(Cond::Value(a, cmp, b), t[&a], t[&b])
        }
        Node::Binary(op, a, b) => {
            let (da, db) = binary_partials(g, op, a, b, id);
            let left = g.mul(da, t[&a]);
            let right = g.mul(db, t[&b]);
            g.add(left, right)
        }
        Node::Select {
            cond,
            then,
            otherwise,
        } => g.select(cond, t[&then], t[&otherwise]),
        Node::Reduce {
            op: ReduceOp::Sum,
            var,
            range,
            body,
        } => g.reduce(ReduceOp::Sum, var, range, t[&body]),
        Node::Reduce {
            op: op @ (ReduceOp::Max | ReduceOp::Min),
            var,
            range,
            body,
        } => {
            let arg = if op == ReduceOp::Max {
                ReduceOp::ArgMax
            } else {
                ReduceOp::ArgMin
            };
            let at = g.reduce(arg, var, range.clone(), body);
            let here = index_of(g, var);
            let chosen = g.select(Cond::Value(here, CmpOp::Eq, at), t[&body], zero);
            g.reduce(ReduceOp::Sum, var, range, chosen)
        }
        Node::Reduce { .. } => zero,
    }
}

fn index_of(g: &mut Graph, v: VarId) -> NodeId {
    g.index_value(Affine::var(v))
}
