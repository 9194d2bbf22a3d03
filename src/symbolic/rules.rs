//! The derivative rule table: the local partial derivative of every scalar
//! operation with respect to each operand, as new DAG nodes.
//!
//! Owns only these local rules. Control flow (guards, max/min selects,
//! reductions) contributes facts on paths instead of partials; that lives in
//! `context`, and the chain rule with sum liberation in `derive`.

use super::expr::{BinaryOp, Graph, Node, NodeId, UnaryOp};

/// `∂y/∂x` for `y = op(x)`; `y` is the node itself, reused where the
/// derivative is expressed through the value (exp, tanh, sigmoid, sqrt).
pub(crate) fn unary_partial(g: &mut Graph, op: UnaryOp, x: NodeId, y: NodeId) -> NodeId {
    match op {
        UnaryOp::Neg => g.constant(-1.0),
        UnaryOp::Exp => y,
        UnaryOp::Log => {
            let one = g.constant(1.0);
            g.div(one, x)
        }
        UnaryOp::Log10 => {
            let ln10 = g.constant(std::f64::consts::LN_10);
            let one = g.constant(1.0);
            let scaled = g.mul(x, ln10);
            g.div(one, scaled)
        }
        UnaryOp::Sqrt => {
            let half = g.constant(0.5);
            g.div(half, y)
        }
        UnaryOp::Tanh => {
            let one = g.constant(1.0);
            let two = g.constant(2.0);
            let sq = g.binary(BinaryOp::Pow, y, two);
            g.sub(one, sq)
        }
        UnaryOp::Sin => g.unary(UnaryOp::Cos, x),
        UnaryOp::Cos => {
            let s = g.unary(UnaryOp::Sin, x);
            g.neg(s)
        }
        UnaryOp::Abs => g.unary(UnaryOp::Sgn, x),
        UnaryOp::Sgn => g.constant(0.0),
        UnaryOp::Sigmoid => {
            let one = g.constant(1.0);
            let rest = g.sub(one, y);
            g.mul(y, rest)
        }
        UnaryOp::Log1p => {
            let one = g.constant(1.0);
            let u = g.add(one, x);
            g.div(one, u)
        }
        UnaryOp::Expm1 => g.unary(UnaryOp::Exp, x),
        UnaryOp::Atan => {
            let one = g.constant(1.0);
            let two = g.constant(2.0);
            let sq = g.binary(BinaryOp::Pow, x, two);
            let d = g.add(one, sq);
            g.div(one, d)
        }
        UnaryOp::Erf => {
            // 2/√π · exp(−x²)
            let two = g.constant(2.0);
            let sq = g.binary(BinaryOp::Pow, x, two);
            let nsq = g.neg(sq);
            let e = g.unary(UnaryOp::Exp, nsq);
            let c = g.constant(std::f64::consts::FRAC_2_SQRT_PI);
            g.mul(c, e)
        }
        UnaryOp::Floor | UnaryOp::Detach => g.constant(0.0),
    }
}

/// `(∂y/∂a, ∂y/∂b)` for `y = a op b`. `Max`/`Min` pass the gradient through
/// unchanged: which operand receives it is a path fact (see `context`).
pub(crate) fn binary_partials(
    g: &mut Graph,
    op: BinaryOp,
    a: NodeId,
    b: NodeId,
    y: NodeId,
) -> (NodeId, NodeId) {
    let one = g.constant(1.0);
    match op {
        BinaryOp::Add | BinaryOp::Max | BinaryOp::Min => (one, one),
        BinaryOp::Sub => (one, g.constant(-1.0)),
        BinaryOp::Mul => (b, a),
        BinaryOp::Div => {
            let da = g.div(one, b);
            let two = g.constant(2.0);
            let b2 = g.binary(BinaryOp::Pow, b, two);
            let q = g.div(a, b2);
            (da, g.neg(q))
        }
        BinaryOp::Pow => {
            // d/da a**b = b * a**(b - 1); d/db a**b = a**b * log a.
            let bm1 = g.sub(b, one);
            let p = g.binary(BinaryOp::Pow, a, bm1);
            let da = g.mul(b, p);
            let db = if g.const_value(b).is_some() {
                g.constant(0.0)
            } else {
                let la = g.unary(UnaryOp::Log, a);
                g.mul(y, la)
            };
            (da, db)
        }
    }
}

/// The partial derivative of node `n` along each of its operand edges that
/// carries a gradient, in the order `context::edges` lists them.
pub(crate) fn partials(g: &mut Graph, n: NodeId) -> Vec<NodeId> {
    match g.node(n).clone() {
        Node::Unary(op, x) => vec![unary_partial(g, op, x, n)],
        Node::Binary(op, a, b) => {
            let (da, db) = binary_partials(g, op, a, b, n);
            vec![da, db]
        }
        // Guards and reductions pass the adjoint through unchanged.
        Node::Select { .. } | Node::Reduce { .. } => vec![g.constant(1.0); 2],
        Node::Const(_) | Node::Access { .. } | Node::Index(_) | Node::Random { .. } => vec![],
    }
}
