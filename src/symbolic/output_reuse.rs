//! The forward output found again inside a derivative's products, at any
//! index: the saved value read instead of recomputed.
//!
//! Owns [`reuse_output_in_products`]. `derive_reusing_output` replaces the
//! forward body where it appears whole at the output's own index. A
//! normaliser's derivative meets its value elsewhere too, and in pieces:
//! the derivative of `log Σ_k exp(e_k)` is `exp(e_a) · (1 / Σ_k exp(e_k))`,
//! which is the softmax `exp(x[a] − (m + log Σ_k exp(x[k] − m)))` at the
//! element `a` of the sum, written as a product. Found there, that product
//! becomes a read of the saved output, and a softmax derivative reads the
//! output and the incoming gradient only, not the input as well.
//!
//! | forward body `R` | its pieces | a product holding them at index `σ` becomes |
//! | --- | --- | --- |
//! | `exp(a − (b + log c))` (softmax) | `exp(a − b)`, `1 / c` | `f[σ]` |
//! | `a − (b + log c)` (log-softmax) | `exp(a − b)`, `1 / c` | `exp(f[σ])` |
//!
//! Other bodies are left to the replacement at the output's own index.
//!
//! The index `σ` is read off an *anchor*: an access in `R` whose index is
//! the output's variables, one per dimension, over an argument of the
//! output's shape; its occurrence in a candidate factor gives each output
//! variable's value, and the pieces at `σ` must then be present exactly
//! (the same nodes: the graph shares equal subexpressions). The anchor's
//! read being in bounds makes `f[σ]` in bounds. Must not derive or plan.

use super::affine::{Affine, VarId};
use super::expr::{BinaryOp, Graph, Node, NodeId, ReduceOp, UnaryOp};
use super::index_fn::IndexFn;
use super::subst::substitute;
use rustc_hash::FxHashMap as HashMap;

/// How a product holding the pieces is rewritten.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Reading {
    /// The pieces are the output.
    Output,
    /// The pieces are `exp` of the output.
    ExpOfOutput,
}

/// The forward body as pieces of a product, and an anchor to place them.
struct Pattern {
    pieces: Vec<NodeId>,
    reading: Reading,
    /// The anchor's argument and, per dimension, the output variable its
    /// index is.
    anchor: (usize, Vec<VarId>),
    out_vars: Vec<VarId>,
    /// The argument number of the saved output.
    saved_arg: usize,
}

/// `body` (built in `g`, which holds `f`'s graph) with every product that
/// holds `f`'s value at some index (see the module documentation) reading
/// the saved output, argument `saved_arg`, instead.
pub(crate) fn reuse_output_in_products(
    g: &mut Graph,
    f: &IndexFn,
    body: NodeId,
    saved_arg: usize,
) -> NodeId {
    let Some(p) = Pattern::of(g, f, saved_arg) else {
        return body;
    };
    let mut memo = HashMap::default();
    rewrite(g, &p, body, &mut memo)
}

impl Pattern {
    fn of(g: &mut Graph, f: &IndexFn, saved_arg: usize) -> Option<Pattern> {
        let anchor = anchor(g, f)?;
        let (pieces, reading) = match *g.node(f.root) {
            Node::Unary(UnaryOp::Exp, e) => (lse_pieces(g, f, e)?, Reading::Output),
            _ => (lse_pieces(g, f, f.root)?, Reading::ExpOfOutput),
        };
        Some(Pattern {
            pieces,
            reading,
            anchor,
            out_vars: f.out_vars.clone(),
            saved_arg,
        })
    }

    /// The pieces and the replacement at the index where the anchor is
    /// the access `index` (of the anchor's argument), if it is one.
    fn at(&self, g: &mut Graph, index: &[Affine]) -> Option<(Vec<NodeId>, NodeId)> {
        let map: HashMap<VarId, Affine> = self
            .anchor
            .1
            .iter()
            .copied()
            .zip(index.iter().cloned())
            .collect();
        let pieces = self
            .pieces
            .iter()
            .map(|&p| substitute(g, p, &map).ok())
            .collect::<Option<Vec<_>>>()?;
        let at: Vec<Affine> = self.out_vars.iter().map(|v| map[v].clone()).collect();
        let saved = g.access(self.saved_arg, at);
        let with = match self.reading {
            Reading::Output => saved,
            Reading::ExpOfOutput => g.unary(UnaryOp::Exp, saved),
        };
        Some((pieces, with))
    }
}

/// An access in `f`'s body whose index is exactly the output variables,
/// each once, over an argument whose shape is the output's.
fn anchor(g: &Graph, f: &IndexFn) -> Option<(usize, Vec<VarId>)> {
    g.reachable(f.root).into_iter().find_map(|n| {
        let Node::Access { arg, index } = g.node(n) else {
            return None;
        };
        let vars: Vec<VarId> = index
            .iter()
            .map(|a| a.as_single_var())
            .collect::<Option<_>>()?;
        let covers = vars.len() == f.out_vars.len()
            && f.out_vars.iter().all(|v| vars.contains(v))
            && f.args.get(*arg)?.shape.iter().zip(&vars).all(|(&n, v)| {
                let d = f.out_vars.iter().position(|o| o == v);
                d.is_some_and(|d| f.out_shape[d] == n)
            });
        covers.then_some((*arg, vars))
    })
}

/// `[exp(a − b), 1 / c]` for `e = a − (b + log c)` with `c = Σ_k exp(a_k −
/// b)`, `b` taken as written inside the sum (the node a derivative's
/// factor `exp(a_k − b)` holds), which must be the `b` outside it up to
/// the names of bound indices (the same text parses to two binders).
fn lse_pieces(g: &mut Graph, f: &IndexFn, e: NodeId) -> Option<Vec<NodeId>> {
    let Node::Binary(BinaryOp::Sub, a, shift) = *g.node(e) else {
        return None;
    };
    let Node::Binary(BinaryOp::Add, b, log) = *g.node(shift) else {
        return None;
    };
    let Node::Unary(UnaryOp::Log, c) = *g.node(log) else {
        return None;
    };
    let Node::Reduce {
        op: ReduceOp::Sum,
        body,
        ..
    } = *g.node(c)
    else {
        return None;
    };
    let Node::Unary(UnaryOp::Exp, term) = *g.node(body) else {
        return None;
    };
    let Node::Binary(BinaryOp::Sub, _, inner) = *g.node(term) else {
        return None;
    };
    if inner != b && !alpha_equal(g, f, b, inner) {
        return None;
    }
    let centred = g.sub(a, inner);
    let exp = g.unary(UnaryOp::Exp, centred);
    let one = g.constant(1.0);
    let reciprocal = g.div(one, c);
    Some(vec![exp, reciprocal])
}

/// Whether nodes `a` and `b` of `g` (over `f`'s variables) are equal up
/// to the names of the indices they bind.
fn alpha_equal(g: &Graph, f: &IndexFn, a: NodeId, b: NodeId) -> bool {
    let with_root = |root| f.with_body(g.clone(), root);
    with_root(a) == with_root(b)
}

/// The factors of the product tree at `n` (through `Mul` nodes only).
fn factors(g: &Graph, n: NodeId, out: &mut Vec<NodeId>) {
    match g.node(n) {
        Node::Binary(BinaryOp::Mul, a, b) => {
            let (a, b) = (*a, *b);
            factors(g, a, out);
            factors(g, b, out);
        }
        _ => out.push(n),
    }
}

/// The accesses of argument `arg` in `n`, each index once.
fn accesses_of(g: &Graph, n: NodeId, arg: usize) -> Vec<Vec<Affine>> {
    let mut out: Vec<Vec<Affine>> = Vec::new();
    for m in g.reachable(n) {
        if let Node::Access { arg: a, index } = g.node(m) {
            if *a == arg && !out.contains(index) {
                out.push(index.clone());
            }
        }
    }
    out
}

fn rewrite(g: &mut Graph, p: &Pattern, n: NodeId, memo: &mut HashMap<NodeId, NodeId>) -> NodeId {
    if let Some(&done) = memo.get(&n) {
        return done;
    }
    let out = if matches!(g.node(n), Node::Binary(BinaryOp::Mul, ..)) {
        let mut found = Vec::new();
        factors(g, n, &mut found);
        let mut fs: Vec<NodeId> = found.iter().map(|&c| rewrite(g, p, c, memo)).collect();
        // Rebuilt only where something changed (the product's shape, and
        // so its rounding, stays as derived elsewhere).
        if replace_pieces(g, p, &mut fs) || fs != found {
            g.mul_all(&fs).unwrap_or(n)
        } else {
            n
        }
    } else {
        let node = g.node(n).clone();
        let mut mapped = HashMap::default();
        for c in node.children() {
            let r = rewrite(g, p, c, memo);
            mapped.insert(c, r);
        }
        g.intern(node.map_children(&|c| mapped[&c]))
    };
    memo.insert(n, out);
    out
}

/// Replaces, in the factor list `fs`, every set of pieces at one index by
/// their reading of the saved output; whether any was.
fn replace_pieces(g: &mut Graph, p: &Pattern, fs: &mut Vec<NodeId>) -> bool {
    let mut any = false;
    let mut k = 0;
    while k < fs.len() {
        let mut replaced = false;
        for index in accesses_of(g, fs[k], p.anchor.0) {
            let Some((pieces, with)) = p.at(g, &index) else {
                continue;
            };
            let mut left = fs.clone();
            let all = pieces
                .iter()
                .all(|piece| match left.iter().position(|f| f == piece) {
                    Some(at) => {
                        left.remove(at);
                        true
                    }
                    None => false,
                });
            if all {
                left.push(with);
                *fs = left;
                replaced = true;
                break;
            }
        }
        any |= replaced;
        if !replaced {
            k += 1;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use crate::symbolic::IndexFn;

    const SOFTMAX: &str = "f[i; j] = exp (x[i; j] - (detach max{m}_0^3 (x[i; m]) + log sum{k}_0^3 (exp (x[i; k] - detach max{m}_0^3 (x[i; m])))))";
    const LOG_SOFTMAX: &str = "f[i; j] = x[i; j] - (detach max{m}_0^3 (x[i; m]) + log sum{k}_0^3 (exp (x[i; k] - detach max{m}_0^3 (x[i; m]))))";
    /// The shift outside the sum is not the one inside: no identity holds.
    const OTHER_SHIFT: &str = "f[i; j] = exp (x[i; j] - (c[i] + log sum{k}_0^3 (exp (x[i; k] - detach max{m}_0^3 (x[i; m])))))";

    /// The derivative reusing the output, its text, and its largest
    /// difference from the plain derivative at some point.
    fn derivative(src: &str) -> (String, f64) {
        let f = IndexFn::parse(src, &[("x", &[2, 4][..]), ("c", &[2][..])]).unwrap();
        let x: Vec<f64> = (0..8).map(|k| (k * 5 % 7) as f64 * 0.3 - 1.0).collect();
        let (c, df) = ([0.5, -0.25], [0.3, -1.0, 2.0, 0.5, 1.5, -0.5, 0.25, 1.0]);
        let args = [("x", &x[..]), ("c", &c[..])];
        let y = f.eval_f64(&args).unwrap();
        let plain = f
            .derive("x")
            .unwrap()
            .eval_f64(&[args[0], args[1], ("df", &df[..])]);
        let reusing = f.derive_reusing_output("x").unwrap();
        let got = reusing
            .eval_f64(&[args[0], args[1], ("df", &df[..]), ("f", &y[..])])
            .unwrap();
        let diff = plain
            .unwrap()
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        (reusing.to_string(), diff)
    }

    #[test]
    fn a_softmax_derivative_reads_the_output_and_not_the_input() {
        let (text, diff) = derivative(SOFTMAX);
        assert!(!text.contains(" x[") && !text.contains("(x["), "{text}");
        assert_eq!(text.replace("df[", "").matches("f[").count(), 3, "{text}");
        assert!(diff < 1e-12, "{diff}");
    }

    #[test]
    fn a_log_softmax_derivative_reads_the_exponential_of_the_output() {
        let (text, diff) = derivative(LOG_SOFTMAX);
        assert!(!text.contains(" x[") && !text.contains("(x["), "{text}");
        assert!(text.contains("exp f["), "{text}");
        assert!(diff < 1e-12, "{diff}");
    }

    #[test]
    fn another_shift_outside_the_sum_is_left_alone() {
        let (text, diff) = derivative(OTHER_SHIFT);
        assert!(text.contains("(x[") || text.contains(" x["), "{text}");
        assert!(diff < 1e-12, "{diff}");
    }
}
