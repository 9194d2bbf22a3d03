//! A contraction's operand as the planner cuts it: which factor of a sum
//! body is computed as a stage of its own so that the rest runs as a
//! GEMM, and, on the CPU, a diagonal factor grouped so that it is cut
//! alone (`Σ_i x[i; a]·d(i)·x[i; b]` as an [i] stage and one scaled GEMM).
//!
//! Owns [`contraction_operand`] and [`group_diagonal`]; `super::extract`
//! decides when a cut is worth it. Must not plan or route.

use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, ReduceOp};
use crate::symbolic::subst::{replace, substitute};
use crate::symbolic::{Affine, IndexFn};
use rustc_hash::FxHashMap as HashMap;

/// In a sum body `a · b` with exactly one side an argument read, the other
/// side when it is an expression (not a read or a constant).
pub(super) fn contraction_operand(
    f: &IndexFn,
    body: NodeId,
    diagonal_gemm: bool,
) -> Option<NodeId> {
    let g = &f.graph;
    let Node::Binary(BinaryOp::Mul, a, b) = g.node(body) else {
        return None;
    };
    let is_read = |n: NodeId| matches!(g.node(n), Node::Access { .. });
    let is_leaf = |n: NodeId| matches!(g.node(n), Node::Access { .. } | Node::Const(_));
    // Two reads times a diagonal factor (`group_diagonal`): the factor.
    let two_reads = |n: NodeId| matches!(g.node(n), Node::Binary(BinaryOp::Mul, x, y) if is_read(*x) && is_read(*y));
    match (is_read(*a), is_read(*b)) {
        (true, false) if !is_leaf(*b) => Some(*b),
        (false, true) if !is_leaf(*a) => Some(*a),
        (false, false) if diagonal_gemm && two_reads(*a) && !is_leaf(*b) => Some(*b),
        _ => None,
    }
}

/// On the CPU, a sum whose body is two reads and factors that depend on
/// the summed index alone, `Σ_i x[i; b]·p(i)·q(i)·x[i; a]` (a logistic
/// regression's Hessian), rebuilt as `Σ_i (x[i; b]·x[i; a])·(p(i)·q(i))`:
/// the contraction-operand rule then cuts the diagonal factor alone, an
/// [i] stage, and the rest is one scaled GEMM (`is_scaled_gemm`), where
/// cutting `x·p·q` would write an [i, b] matrix first. A GPU's BLAS has
/// no diagonal factor, so there the matrix stays the operand.
pub(super) fn group_diagonal(f: &IndexFn) -> IndexFn {
    // Output indices that take one value count as none.
    let fixed: Vec<VarId> = f
        .out_vars
        .iter()
        .zip(&f.out_shape)
        .filter(|(_, &n)| n == 1)
        .map(|(v, _)| *v)
        .collect();
    let mut out = f.clone();
    // (An output index of one value reads as 0: `x[b1 + i]` is `x[i]`,
    // which `detect_scaled` needs of the diagonal factor.)
    let zero: HashMap<VarId, Affine> = fixed.iter().map(|&v| (v, Affine::constant(0))).collect();
    let mut changed = false;
    if !zero.is_empty() {
        match substitute(&mut out.graph, out.root, &zero) {
            Ok(root) => out.root = root,
            Err(_) => return f.clone(),
        }
    }
    let g = &out.graph.clone();
    for n in g.reachable(out.root) {
        let Node::Reduce {
            op: ReduceOp::Sum,
            var,
            range,
            body,
        } = g.node(n).clone()
        else {
            continue;
        };
        let mut factors = Vec::new();
        let mut stack = vec![body];
        while let Some(m) = stack.pop() {
            match g.node(m) {
                Node::Binary(BinaryOp::Mul, x, y) => stack.extend([*x, *y]),
                _ => factors.push(m),
            }
        }
        let diagonal = |m: NodeId| {
            g.const_value(m).is_none()
                && g.free_vars(m)
                    .iter()
                    .all(|v| *v == var || fixed.contains(v))
        };
        let (diag, operands): (Vec<NodeId>, Vec<NodeId>) =
            factors.into_iter().partition(|&m| diagonal(m));
        let reads = operands
            .iter()
            .all(|&m| matches!(g.node(m), Node::Access { .. }));
        let plain = matches!(diag[..], [d] if matches!(g.node(d), Node::Access { .. }));
        if operands.len() != 2 || !reads || diag.is_empty() || plain {
            continue;
        }
        let o = &mut out.graph;
        let pair = o.mul(operands[0], operands[1]);
        let d = diag[1..].iter().fold(diag[0], |acc, &x| o.mul(acc, x));
        let new_body = o.mul(pair, d);
        let sum = o.reduce(ReduceOp::Sum, var, range, new_body);
        out.root = replace(&mut out.graph, out.root, n, sum);
        changed = true;
    }
    if !changed {
        return f.clone();
    }
    let (graph, root) = out.graph.extract(out.root);
    out.graph = graph;
    out.root = root;
    out
}
