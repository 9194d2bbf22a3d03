//! Combining the terms of a sum or difference: cancellation of equal
//! products, the common-operand rule (two contractions with one read
//! merged into one sum) and reads common to both terms' products taken
//! out of the difference.

use super::product::all_but;
use super::Normalizer;
use crate::symbolic::affine::{Affine, VarId};
use crate::symbolic::expr::{BinaryOp, Node, NodeId, Range, ReduceOp};
use crate::symbolic::subst::substitute;
use rustc_hash::FxHashMap as HashMap;

/// `outer · Σ_var (rest · read)` (see `Normalizer::contractions`).
struct Contraction {
    /// The sum node itself.
    sum: NodeId,
    var: VarId,
    range: Range,
    read: NodeId,
    rest: NodeId,
    outer: NodeId,
}

impl Normalizer<'_> {
    /// The common-operand rule on every sum and difference under `root`
    /// (see the module documentation), bottom-up.
    /// With `factor_reads`, reads common to both terms' products are then
    /// taken out (`factor_common_reads`).
    pub(super) fn merge_common_operands(&mut self, root: NodeId, factor_reads: bool) -> NodeId {
        self.bottom_up(root, |n, id, _| match n.g.node(id).clone() {
            Node::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), a, b) => n
                .cancel(op, a, b)
                .or_else(|| n.merge_pair(op, a, b))
                .or_else(|| {
                    factor_reads
                        .then(|| n.factor_common_reads(op, a, b))
                        .flatten()
                })
                .unwrap_or(id),
            _ => id,
        })
    }

    /// `0` for `a − a` and `a + (−a)`, products compared in canonical
    /// form (the same product associated two ways is one value).
    pub(super) fn cancel(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Option<NodeId> {
        let ca = self.product_of(&[a]);
        let cb = match op {
            BinaryOp::Sub => self.product_of(&[b]),
            _ => {
                let nb = self.g.neg(b);
                self.product_of(&[nb])
            }
        };
        (ca == cb).then(|| self.g.constant(0.0))
    }

    /// `c · (a′ op b′)` for `a op b` whose products share the reads `c`
    /// (`x[i; b]·p − x[i; b]·q`, two terms of a composed derivative): the
    /// reads taken once, and the rest one factor (the diagonal factor of
    /// `Σ_i x[i; b]·d(i)·x[i; a]`, which the CPU's GEMM then applies while
    /// it packs, where the product `x·d` was a matrix of its own).
    fn factor_common_reads(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Option<NodeId> {
        let (pa, pb) = (self.flattened(a), self.flattened(b));
        let mut rest_b = pb.num.clone();
        let (mut common, mut rest_a) = (Vec::new(), Vec::new());
        for &x in &pa.num {
            let read = matches!(self.g.node(x), Node::Access { .. });
            match rest_b.iter().position(|&y| y == x) {
                Some(k) if read => {
                    rest_b.remove(k);
                    common.push(x);
                }
                _ => rest_a.push(x),
            }
        }
        if common.is_empty() {
            return None;
        }
        let ra = self.build(pa.negative, &rest_a, &pa.den);
        let rb = self.build(pb.negative, &rest_b, &pb.den);
        let rest = self.g.binary(op, ra, rb);
        common.push(rest);
        Some(self.product_of(&common))
    }

    /// `a op b` as one sum when both are a contraction with the same read
    /// (see [`Normalizer::contractions`]).
    fn merge_pair(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Option<NodeId> {
        let (cas, cbs) = (self.contractions(a), self.contractions(b));
        // Moving a term's outer factors inside its sum must not enlarge the
        // sum's iteration space: they may only use indices it depends on.
        let fits = |s: &Self, c: &Contraction| {
            let sum_free = s.g.free_vars(c.sum);
            s.g.free_vars(c.outer).iter().all(|v| sum_free.contains(v))
        };
        let cas: Vec<Contraction> = cas.into_iter().filter(|c| fits(self, c)).collect();
        let cbs: Vec<Contraction> = cbs.into_iter().filter(|c| fits(self, c)).collect();
        for ca in &cas {
            for cb in &cbs {
                if ca.range != cb.range {
                    continue;
                }
                // The second one's sum variable renamed to the first's.
                let rename = HashMap::from_iter([(cb.var, Affine::var(ca.var))]);
                let Ok(xb) = substitute(&mut self.g, cb.read, &rename) else {
                    continue;
                };
                if xb != ca.read {
                    continue;
                }
                let Ok(rest_b) = substitute(&mut self.g, cb.rest, &rename) else {
                    continue;
                };
                // Outer factors move inside (they do not depend on the sum
                // index).
                let left = self.product_of(&[ca.outer, ca.rest]);
                let right = self.product_of(&[cb.outer, rest_b]);
                let combined = self.g.binary(op, left, right);
                let body = self.g.mul(combined, ca.read);
                return Some(self.g.reduce(ReduceOp::Sum, ca.var, ca.range.clone(), body));
            }
        }
        None
    }

    /// Every way to see `n` as `outer · Σ_v (rest · read)`: one per sum
    /// factor of the product `n` whose body has an argument read using `v`
    /// (its last such read), the other factors not depending on `v`.
    fn contractions(&mut self, n: NodeId) -> Vec<Contraction> {
        let p = self.flattened(n);
        let mut out = Vec::new();
        for k in 0..p.num.len() {
            let Node::Reduce {
                op: ReduceOp::Sum,
                var,
                range,
                body,
            } = self.g.node(p.num[k]).clone()
            else {
                continue;
            };
            let outside: Vec<NodeId> = all_but(&p.num, k);
            if outside
                .iter()
                .chain(&p.den)
                .any(|&m| self.g.free_vars(m).contains(&var))
            {
                continue;
            }
            let mut q = self.flattened(body);
            let Some(r) = q.num.iter().rposition(|&m| {
                matches!(self.g.node(m), Node::Access { .. }) && self.g.free_vars(m).contains(&var)
            }) else {
                continue;
            };
            let read = q.num.remove(r);
            let rest = self.build(q.negative, &q.num, &q.den);
            let outer = self.build(p.negative, &outside, &p.den);
            out.push(Contraction {
                sum: p.num[k],
                var,
                range,
                read,
                rest,
                outer,
            });
        }
        out
    }
}
