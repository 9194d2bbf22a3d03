//! The nest-order rule: a nest of independent sums over a product nested
//! in greedy variable-elimination order (see the module documentation of
//! `normalize`), before any other rule runs.

use super::Normalizer;
use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Graph, Node, NodeId, Range, ReduceOp, UnaryOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::IndexFn;

/// `f` with every nest of sums over a product reordered for variable
/// elimination (see the module documentation).
pub(super) fn reorder_nests(f: &IndexFn) -> IndexFn {
    let iv = Intervals::of(f);
    let mut n = Normalizer::new(f, &iv);
    let root = n.bottom_up(f.root, |n, id, _| {
        reorder_nest(&mut n.g, n.iv, id).unwrap_or(id)
    });
    n.finish(root)
}

/// The nest of sums starting at `top` in elimination order, when it has at
/// least two independent sums over a product and its order changes.
fn reorder_nest(g: &mut Graph, iv: &Intervals, top: NodeId) -> Option<NodeId> {
    let mut sums: Vec<(VarId, Range)> = Vec::new();
    let mut negative = false;
    let mut n = top;
    loop {
        match g.node(n) {
            Node::Reduce {
                op: ReduceOp::Sum,
                var,
                range,
                body,
            } => {
                sums.push((*var, range.clone()));
                n = *body;
            }
            Node::Unary(UnaryOp::Neg, x)
                if matches!(
                    g.node(*x),
                    Node::Reduce {
                        op: ReduceOp::Sum,
                        ..
                    }
                ) =>
            {
                negative = !negative;
                n = *x;
            }
            _ => break,
        }
    }
    if sums.len() < 2 {
        return None;
    }
    let nest: Vec<VarId> = sums.iter().map(|s| s.0).collect();
    if sums
        .iter()
        .any(|(_, r)| r.vars().any(|v| nest.contains(&v)))
    {
        return None; // a range depends on another sum of the nest
    }
    let body = n;
    let mut factors: Vec<Vec<VarId>> = Vec::new();
    collect_factors(g, body, &mut factors);
    if factors.len() < 2 {
        return None;
    }
    let size = |v: &VarId| iv.points(*v).ln();
    // Greedy elimination: the variable whose factors span the fewest
    // points goes first (ties: the one nested deeper now).
    let mut remaining: Vec<VarId> = nest.clone();
    let mut order: Vec<VarId> = Vec::new();
    while !remaining.is_empty() {
        let span = |v: VarId, factors: &[Vec<VarId>]| {
            let mut u: Vec<VarId> = vec![v];
            for fv in factors.iter().filter(|fv| fv.contains(&v)) {
                u.extend(fv.iter().copied());
            }
            u.sort();
            u.dedup();
            (u.iter().map(size).sum::<f64>(), u)
        };
        let (pos, _) = remaining
            .iter()
            .enumerate()
            .rev()
            .map(|(p, &v)| (p, span(v, &factors).0))
            .fold((usize::MAX, f64::INFINITY), |best, cur| {
                if cur.1 < best.1 - 1e-9 {
                    cur
                } else {
                    best
                }
            });
        let v = remaining.remove(pos);
        let (_, mut merged) = span(v, &factors);
        factors.retain(|fv| !fv.contains(&v));
        merged.retain(|u| *u != v);
        factors.push(merged);
        order.push(v);
    }
    let current: Vec<VarId> = nest.iter().rev().copied().collect();
    if order == current {
        return None;
    }
    let mut out = if negative { g.neg(body) } else { body };
    for v in &order {
        let range = sums.iter().find(|s| s.0 == *v).map(|s| s.1.clone())?;
        out = g.reduce(ReduceOp::Sum, *v, range, out);
    }
    Some(out)
}

/// The free variables of each factor of the product at `n`.
fn collect_factors(g: &Graph, n: NodeId, out: &mut Vec<Vec<VarId>>) {
    match g.node(n) {
        Node::Binary(BinaryOp::Mul | BinaryOp::Div, a, b) => {
            collect_factors(g, *a, out);
            collect_factors(g, *b, out);
        }
        Node::Unary(UnaryOp::Neg, a) => collect_factors(g, *a, out),
        _ => out.push(g.free_vars(n).to_vec()),
    }
}
