//! Reordering nested sums for memory locality, in f32 kernels.
//!
//! Owns one rewrite: `sum{t}(sum{b}(e))` with independent ranges becomes
//! `sum{b}(sum{t}(e))` when `t` walks some argument contiguously and `b`
//! walks none (a weight gradient `Σ_t Σ_b dy[b; o; t] · x[b; c; t + k]`, as
//! derivation leaves it, strides through the batch innermost). The sum's
//! floating-point order changes (it stays fixed: results do not depend on
//! threads); f64 kernels keep the interpreter's order exactly and are never
//! reordered. It must not change what the function computes otherwise.

use crate::symbolic::expr::{Node, NodeId, ReduceOp};
use crate::symbolic::index_fn::row_major_strides;
use crate::symbolic::{subst, IndexFn, VarId};

/// `f` with nested sums interchanged where that makes the innermost loop
/// read contiguous memory (see the module documentation).
pub(crate) fn interchange_sums(f: &IndexFn) -> IndexFn {
    let mut f = f.clone();
    // Each pass swaps one pair; nests are a few sums deep.
    for _ in 0..16 {
        let Some((target, with)) = find_swap(&mut f) else {
            break;
        };
        f.root = subst::replace(&mut f.graph, f.root, target, with);
    }
    let (graph, root) = f.graph.extract(f.root);
    f.graph = graph;
    f.root = root;
    f
}

fn find_swap(f: &mut IndexFn) -> Option<(NodeId, NodeId)> {
    for n in f.graph.reachable(f.root) {
        let Node::Reduce {
            op: ReduceOp::Sum,
            var: t,
            range: outer_range,
            body,
        } = f.graph.node(n).clone()
        else {
            continue;
        };
        let Node::Reduce {
            op: ReduceOp::Sum,
            var: b,
            range: inner_range,
            body: inner,
        } = f.graph.node(body).clone()
        else {
            continue;
        };
        let depends_on_t = inner_range
            .lower
            .iter()
            .chain(&inner_range.upper)
            .any(|r| r.vars().any(|v| v == t));
        if depends_on_t {
            continue;
        }
        if contiguous(f, inner, t) && !contiguous(f, inner, b) {
            let swapped = f.graph.reduce(ReduceOp::Sum, t, outer_range, inner);
            let with = f.graph.reduce(ReduceOp::Sum, b, inner_range, swapped);
            return Some((n, with));
        }
    }
    None
}

/// Whether some access under `n` moves by one element when `v` does.
fn contiguous(f: &IndexFn, n: NodeId, v: VarId) -> bool {
    f.graph
        .reachable(n)
        .into_iter()
        .any(|m| match f.graph.node(m) {
            Node::Access { arg, index } => {
                let Some(strides) = row_major_strides(&f.args[*arg].shape) else {
                    return false;
                };
                let flat: i128 = index
                    .iter()
                    .zip(strides)
                    .map(|(form, s)| i128::from(form.coeff(v)) * i128::from(s))
                    .sum();
                flat.abs() == 1
            }
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_sum_of_a_weight_gradient_moves_outside() {
        let f = IndexFn::parse_with_sizes(
            "dw[o; k] = sum{t}_0^5 (sum{b}_0^2 (dy[b; o; t] * x[b; t + k]))",
            &[("dy", &[3, 2, 6][..]), ("x", &[3, 8][..])],
            &[("k", 3)],
        )
        .unwrap();
        let g = interchange_sums(&f);
        assert_eq!(
            g.to_string(),
            "dw[o; k] = sum{b}_0^2 (sum{t}_0^5 (dy[b; o; t] * x[b; k + t]))"
        );
        let data = |n: usize| (0..n).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>();
        let (dy, x) = (data(36), data(24));
        let inputs = [("dy", &dy[..]), ("x", &x[..])];
        let (a, b) = (f.eval_f64(&inputs).unwrap(), g.eval_f64(&inputs).unwrap());
        assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12));
        // Already contiguous innermost, or a dependent range: unchanged.
        let h = IndexFn::parse_with_sizes(
            "f[i] = sum{b}_0^2 (sum{t}_0^5 (x[b; t + i]))",
            &[("x", &[3, 8][..])],
            &[("i", 3)],
        )
        .unwrap();
        assert_eq!(interchange_sums(&h).to_string(), h.to_string());
        let d = IndexFn::parse_with_sizes(
            "f[i] = sum{t}_0^2 (sum{b}_0^(t) (x[b; t + i]))",
            &[("x", &[3, 8][..])],
            &[("i", 3)],
        )
        .unwrap();
        assert_eq!(interchange_sums(&d).to_string(), d.to_string());
    }
}
