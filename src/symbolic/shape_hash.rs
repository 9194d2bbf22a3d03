//! A structural hash of expressions that agrees with alpha-equivalence.
//!
//! Owns [`ShapeHashes`]: a hash of a node's structure that ignores which
//! index variables it uses, so two expressions equal up to renaming their
//! indices (`equality`) hash alike, whichever function's DAG holds them.
//! The planner sorts a product's factors by it (one canonical order for
//! equal products met in two derivatives) and keys its stage cache with it
//! (equality is then checked). Unequal expressions may collide; nothing
//! may rely on a hash alone. Must not modify a graph.

use super::affine::Affine;
use super::expr::{Cond, Graph, Node, NodeId};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The shape hash of every node asked for, memoised per graph (a memo
/// must only be used with the graph it was filled from).
#[derive(Default)]
pub(crate) struct ShapeHashes {
    memo: HashMap<NodeId, u64>,
}

impl ShapeHashes {
    /// The hash of `n` in `g`: its node kind and operator, the
    /// coefficients of its index forms (sorted, variables dropped), its
    /// constants (every NaN alike), and its children's hashes in order.
    pub(crate) fn of(&mut self, g: &Graph, n: NodeId) -> u64 {
        // Children first, without recursion (deep DAGs do not overflow
        // the stack); memoised nodes are not entered again.
        let mut stack = vec![(n, false)];
        while let Some((m, expanded)) = stack.pop() {
            if self.memo.contains_key(&m) {
                continue;
            }
            let node = g.node(m);
            if !expanded {
                stack.push((m, true));
                stack.extend(node.children().into_iter().map(|c| (c, false)));
                continue;
            }
            let mut st = DefaultHasher::new();
            own_hash(node, &mut st);
            for c in node.children() {
                self.memo[&c].hash(&mut st);
            }
            self.memo.insert(m, st.finish());
        }
        self.memo[&n]
    }
}

/// What `node` itself contributes (not its children).
fn own_hash(node: &Node, st: &mut DefaultHasher) {
    match node {
        Node::Const(bits) => {
            let bits = if f64::from_bits(*bits).is_nan() {
                f64::NAN.to_bits()
            } else {
                *bits
            };
            (0u8, bits).hash(st)
        }
        Node::Access { arg, index } => {
            (1u8, arg).hash(st);
            index.iter().for_each(|a| form(a, st));
        }
        Node::Index(a) => {
            2u8.hash(st);
            form(a, st);
        }
        Node::Random { counter, .. } => {
            7u8.hash(st);
            form(counter, st);
        }
        Node::Unary(op, _) => (3u8, name(op)).hash(st),
        Node::Binary(op, _, _) => (4u8, name(op)).hash(st),
        Node::Select { cond, .. } => {
            5u8.hash(st);
            match cond {
                Cond::Index(r, op) => {
                    form(&r.num, st);
                    (r.den, name(op)).hash(st);
                }
                Cond::Value(_, op, _) => name(op).hash(st),
                Cond::IsInt(r) => {
                    form(&r.num, st);
                    r.den.hash(st);
                }
            }
        }
        Node::Reduce { op, range, .. } => {
            (6u8, name(op), range.lower.len(), range.upper.len()).hash(st)
        }
    }
}

/// An operator by its name: the hash values, and so the canonical order
/// of factors the planner's plans and tests are pinned to, stay what they
/// were when products were first ordered.
fn name(op: &impl std::fmt::Debug) -> String {
    format!("{op:?}")
}

/// An affine form without its variables: its sorted coefficients and its
/// constant.
fn form(a: &Affine, st: &mut DefaultHasher) {
    let mut c: Vec<i64> = a.terms.iter().map(|t| t.1).collect();
    c.sort_unstable();
    (c, a.constant).hash(st);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolic::IndexFn;

    fn root_hash(src: &str, args: &[(&str, &[usize])]) -> u64 {
        let f = IndexFn::parse(src, args).unwrap();
        ShapeHashes::default().of(&f.graph, f.root)
    }

    #[test]
    fn renamed_indices_hash_alike_and_changed_structure_does_not() {
        let args: &[(&str, &[usize])] = &[("a", &[3, 4]), ("b", &[4, 5])];
        // `4 - j` cannot size `j`: every variant keeps a plain `b[k; j]`.
        let h = root_hash("f[i; j] = sum{k}_0^3 (a[i; k] * b[k; j])", args);
        assert_eq!(
            h,
            root_hash("g[p; q] = sum{r}_0^3 (a[p; r] * b[r; q])", args)
        );
        // Another operator, another index form, another constant.
        for other in [
            "f[i; j] = sum{k}_0^3 (a[i; k] + b[k; j])",
            "f[i; j] = sum{k}_0^3 (a[i; k] * b[k; j] * b[k; 4 - j])",
            "f[i; j] = sum{k}_0^3 (a[i; k] * b[k; j] * b[k; j])",
            "f[i; j] = sum{k}_0^3 (a[i; k] * b[k; j] * 2)",
        ] {
            assert_ne!(h, root_hash(other, args), "{other}");
        }
    }

    #[test]
    fn every_nan_hashes_alike() {
        let mut g = Graph::default();
        let a = g.constant(f64::NAN);
        let b = g.constant(f64::from_bits(f64::NAN.to_bits() | 1));
        assert_ne!(a, b);
        let mut h = ShapeHashes::default();
        assert_eq!(h.of(&g, a), h.of(&g, b));
    }
}
