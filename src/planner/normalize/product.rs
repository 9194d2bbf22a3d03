//! Products as the rules see them: flattened into signed factor lists
//! ([`Product`]) and built back in canonical order (constants folded into
//! one, first, the other factors sorted by their shape hash, the
//! reciprocal rule applied).

use super::Normalizer;
use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, UnaryOp};

/// `v` without its element `k`.
pub(super) fn all_but(v: &[NodeId], k: usize) -> Vec<NodeId> {
    v.iter()
        .enumerate()
        .filter(|(j, _)| *j != k)
        .map(|(_, n)| *n)
        .collect()
}

/// A product `sign · Π num / Π den`, flattened.
#[derive(Default)]
pub(super) struct Product {
    pub negative: bool,
    pub num: Vec<NodeId>,
    pub den: Vec<NodeId>,
}

impl Normalizer<'_> {
    /// The canonical product of `factors` (each flattened).
    pub(super) fn product_of(&mut self, factors: &[NodeId]) -> NodeId {
        let mut p = Product::default();
        for &x in factors {
            self.flatten(x, false, &mut p);
        }
        self.build(p.negative, &p.num, &p.den)
    }

    /// Every product under `root` with its factors in canonical order
    /// (see the module documentation), bottom-up.
    pub(super) fn canonical_products(&mut self, root: NodeId) -> NodeId {
        self.bottom_up(root, |n, id, _| match n.g.node(id) {
            Node::Binary(BinaryOp::Mul | BinaryOp::Div, ..) | Node::Unary(UnaryOp::Neg, _) => {
                let p = n.flattened(id);
                n.build(p.negative, &p.num, &p.den)
            }
            _ => id,
        })
    }

    /// The factors of `n` (a single factor when it is not a product).
    pub(super) fn flattened(&self, n: NodeId) -> Product {
        let mut p = Product::default();
        self.flatten(n, false, &mut p);
        p
    }

    /// The flattened product at `n`, when `n` is a product or quotient
    /// with at least two factors (a negation counts as a sign).
    pub(super) fn product(&self, n: NodeId) -> Option<Product> {
        let p = self.flattened(n);
        (p.num.len() + p.den.len() >= 2).then_some(p)
    }

    fn flatten(&self, n: NodeId, in_den: bool, p: &mut Product) {
        match self.g.node(n) {
            Node::Binary(BinaryOp::Mul, a, b) => {
                self.flatten(*a, in_den, p);
                self.flatten(*b, in_den, p);
            }
            Node::Binary(BinaryOp::Div, a, b) if !in_den => {
                self.flatten(*a, false, p);
                self.flatten(*b, true, p);
            }
            Node::Unary(UnaryOp::Neg, a) => {
                p.negative = !p.negative;
                self.flatten(*a, in_den, p);
            }
            // A factor 1 is no factor (`1 / c` is `c` in the denominator).
            _ if self.g.const_value(n) == Some(1.0) => {}
            _ if in_den => p.den.push(n),
            _ => p.num.push(n),
        }
    }

    /// `±Π num / Π den` (an empty numerator is 1), the factors in
    /// canonical order.
    pub(super) fn build(&mut self, negative: bool, num: &[NodeId], den: &[NodeId]) -> NodeId {
        // Constant factors fold into one (so equal products written with
        // their constants split differently become one node).
        let mut c = 1.0f64;
        let mut num: Vec<NodeId> = num
            .iter()
            .copied()
            .filter(|&n| match self.g.const_value(n) {
                Some(x) => {
                    c *= x;
                    false
                }
                None => true,
            })
            .collect();
        let mut den: Vec<NodeId> = den
            .iter()
            .copied()
            .filter(|&n| match self.g.const_value(n) {
                Some(x) if x != 0.0 => {
                    c /= x;
                    false
                }
                _ => true,
            })
            .collect();
        if c != 1.0 {
            num.push(self.g.constant(c));
        }
        self.sort_canonical(&mut den);
        // The reciprocal rule: a denominator over fewer indices than the
        // numerator becomes a factor `1 / c` of its own.
        let mut num_free: Vec<VarId> = num
            .iter()
            .flat_map(|&n| self.g.free_vars(n).to_vec())
            .collect();
        num_free.sort();
        num_free.dedup();
        let (hoist, keep): (Vec<NodeId>, Vec<NodeId>) = den.iter().partition(|&&d| {
            let fd = self.g.free_vars(d);
            fd.len() < num_free.len() && fd.iter().all(|v| num_free.contains(v))
        });
        if let Some(d) = self.chain(&hoist) {
            let one = self.g.constant(1.0);
            num.push(self.g.div(one, d));
            den = keep;
        }
        self.sort_canonical(&mut num);
        let top = match self.chain(&num) {
            Some(t) => t,
            None => self.g.constant(1.0),
        };
        let q = match self.chain(&den) {
            Some(b) => self.g.div(top, b),
            None => top,
        };
        if negative {
            self.g.neg(q)
        } else {
            q
        }
    }

    /// `factors` in canonical order: a constant first (there is one once
    /// folded), then by shape hash, ties as given. A constant's value does
    /// not place it: a mean's `1/B` is a constant of the function, and one
    /// function at two sizes must get one order, so one loop nest
    /// (`crate::kernel::Kernel::with_run_time_constants`).
    fn sort_canonical(&mut self, factors: &mut [NodeId]) {
        let mut keyed: Vec<(u64, NodeId)> = factors
            .iter()
            .map(|&n| match self.g.const_value(n) {
                Some(_) => (0, n),
                None => (self.shapes.of(&self.g, n).max(1), n),
            })
            .collect();
        keyed.sort_by_key(|k| k.0);
        for (slot, (_, n)) in factors.iter_mut().zip(keyed) {
            *slot = n;
        }
    }

    /// `f₁ · f₂ · …` (`None` for no factors), balanced when long.
    fn chain(&mut self, factors: &[NodeId]) -> Option<NodeId> {
        self.g.mul_all(factors)
    }
}
