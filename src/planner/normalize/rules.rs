//! The sum rules of the normalisation table (constant sum, invariant guard,
//! invariant factor, invariant term, split sum) and mask factoring, as
//! methods of the [`Normalizer`]. Each returns `None` when it does not fit.

use super::product::all_but;
use super::{Normalizer, MAX_DEPTH};
use crate::planner::contraction::constant_range;
use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Cond, Node, NodeId, Range, ReduceOp};

impl Normalizer<'_> {
    /// The invariant-guard and invariant-factor rules on `Σ_var body`.
    pub(super) fn sum(
        &mut self,
        var: VarId,
        range: &Range,
        body: NodeId,
        nonempty: bool,
    ) -> Option<NodeId> {
        if self.budget == 0 || self.depth >= MAX_DEPTH {
            return None;
        }
        self.budget -= 1;
        self.depth += 1;
        let out = self.sum_rules(var, range, body, nonempty);
        self.depth -= 1;
        out
    }

    fn sum_rules(
        &mut self,
        var: VarId,
        range: &Range,
        body: NodeId,
        nonempty: bool,
    ) -> Option<NodeId> {
        // A constant summed over a constant range is a constant.
        if let (Some(c), Some(n)) = (self.g.const_value(body), constant_count(range)) {
            return Some(self.g.constant(c * n as f64));
        }
        let rebuild = |s: &mut Self, body: NodeId| {
            let inner = s.g.reduce(ReduceOp::Sum, var, range.clone(), body);
            // The new inner sum may admit another rule.
            s.sum(var, range, body, nonempty).unwrap_or(inner)
        };
        if let Node::Select {
            cond,
            then,
            otherwise,
        } = self.g.node(body).clone()
        {
            let cond_free = self.cond_vars(&cond);
            let safe = match &cond {
                Cond::Value(a, _, b) => {
                    nonempty || (self.is_speculable(*a) && self.is_speculable(*b))
                }
                _ => true,
            };
            if !cond_free.contains(&var) && safe {
                let zero = self.g.constant(0.0);
                if self.g.const_value(otherwise) == Some(0.0) {
                    let inner = rebuild(self, then);
                    return Some(self.g.select(cond, inner, zero));
                }
                if self.g.const_value(then) == Some(0.0) {
                    let inner = rebuild(self, otherwise);
                    return Some(self.g.select(cond, zero, inner));
                }
            }
            return None;
        }
        if let Some(split) = self.distribute(var, range, body, nonempty) {
            return Some(split);
        }
        if let Some(split) = self.split_sum(var, range, body, nonempty) {
            return Some(split);
        }
        let p = self.product(body)?;
        let outside = |s: &mut Self, n: NodeId| {
            !s.g.free_vars(n).contains(&var) && (nonempty || s.is_speculable(n))
        };
        let (mut num_in, mut num_out, mut den_in, mut den_out) = (vec![], vec![], vec![], vec![]);
        for &n in &p.num {
            if outside(self, n) {
                num_out.push(n)
            } else {
                num_in.push(n)
            }
        }
        for &n in &p.den {
            if outside(self, n) {
                den_out.push(n)
            } else {
                den_in.push(n)
            }
        }
        if num_out.is_empty() && den_out.is_empty() {
            if p.num.len() + p.den.len() < 3 {
                return None;
            }
            // Nothing leaves the sum; it may still split into two operands.
            let grouped = self.regroup(var, &num_in, &den_in);
            if grouped == self.build(false, &num_in, &den_in) {
                return None;
            }
            let sum = self.g.reduce(ReduceOp::Sum, var, range.clone(), grouped);
            return Some(if p.negative { self.g.neg(sum) } else { sum });
        }
        let inner_body = self.regroup(var, &num_in, &den_in);
        let inner = rebuild(self, inner_body);
        num_out.insert(0, inner);
        Some(self.build(p.negative, &num_out, &den_out))
    }

    /// The split-sum rule: `Σ_v (p ± q)` as `Σ_v p ± Σ_v q` when a factor
    /// of `p` or `q` does not depend on `v` (and may leave the sum).
    fn split_sum(
        &mut self,
        var: VarId,
        range: &Range,
        body: NodeId,
        nonempty: bool,
    ) -> Option<NodeId> {
        let Node::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), p, q) = *self.g.node(body) else {
            return None;
        };
        let pulls =
            |s: &mut Self, t: NodeId| {
                let pr = s.flattened(t);
                pr.num.len() + pr.den.len() >= 2
                    && pr.num.iter().chain(&pr.den).any(|&f| {
                        !s.g.free_vars(f).contains(&var) && (nonempty || s.is_speculable(f))
                    })
            };
        if !(pulls(self, p) || pulls(self, q)) {
            return None;
        }
        let term = |s: &mut Self, t: NodeId| {
            let sum = s.g.reduce(ReduceOp::Sum, var, range.clone(), t);
            s.sum(var, range, t, nonempty).unwrap_or(sum)
        };
        let (sp, sq) = (term(self, p), term(self, q));
        Some(self.g.binary(op, sp, sq))
    }

    /// The invariant-term rule: `Σ_v (a · (b ± c))` as `Σ_v (a · b) ±
    /// Σ_v (a · c)` when exactly one of `b`, `c` depends on `v` (then the
    /// other leaves its sum): the gradient of an RBF kernel,
    /// `Σ_j w[i;j] · (x[i;d] − y[j;d])`, becomes `x[i;d] · Σ_j w[i;j] −
    /// Σ_j w[i;j] · y[j;d]`, a row sum and a contraction.
    fn distribute(
        &mut self,
        var: VarId,
        range: &Range,
        body: NodeId,
        nonempty: bool,
    ) -> Option<NodeId> {
        let p = self.flattened(body);
        let (pos, op, b, c) = p.num.iter().enumerate().find_map(|(k, &n)| {
            let Node::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), b, c) = *self.g.node(n) else {
                return None;
            };
            let dep = |x: NodeId| self.g.free_vars(x).contains(&var);
            (dep(b) != dep(c)).then_some((k, op, b, c))
        })?;
        let invariant = if self.g.free_vars(b).contains(&var) {
            c
        } else {
            b
        };
        if !(nonempty || self.is_speculable(invariant)) {
            return None;
        }
        let rest_num: Vec<NodeId> = all_but(&p.num, pos);
        let term = |s: &mut Self, t: NodeId| {
            let mut num = rest_num.clone();
            num.push(t);
            let body = s.build(false, &num, &p.den);
            let sum = s.g.reduce(ReduceOp::Sum, var, range.clone(), body);
            s.sum(var, range, body, nonempty).unwrap_or(sum)
        };
        let (tb, tc) = (term(self, b), term(self, c));
        let total = self.g.binary(op, tb, tc);
        Some(if p.negative { self.g.neg(total) } else { total })
    }

    /// Whether a reduction occurs under `n`.
    fn has_reduction(&self, n: NodeId) -> bool {
        self.g
            .reachable(n)
            .into_iter()
            .any(|m| matches!(self.g.node(m), Node::Reduce { .. }))
    }

    /// The body `Π num / Π den` of a sum over `var` as two operands
    /// `A · X` when one factor `X` is an argument read whose indices
    /// (other than `var`) the other factors `A` do not all use, and `A`
    /// uses indices `X` does not: the shape of a contraction whose operand
    /// `A` can be computed once (the invariant-factor rule leaves
    /// `Σ_v (s[v; a] · q[v; b] / z[v])` alone; this makes it
    /// `Σ_v ((s[v; a] / z[v]) · q[v; b])`). Of several such `X`, the one
    /// over the most points is kept as is. Otherwise the plain product.
    fn regroup(&mut self, var: VarId, num: &[NodeId], den: &[NodeId]) -> NodeId {
        if num.len() + den.len() < 3 {
            return self.build(false, num, den);
        }
        let outer = |s: &Self, n: NodeId| -> Vec<VarId> {
            s.g.free_vars(n)
                .iter()
                .copied()
                .filter(|v| *v != var)
                .collect()
        };
        let points = |s: &Self, n: NodeId| -> f64 {
            s.g.free_vars(n).iter().map(|&v| s.iv.points(v)).product()
        };
        let mut best: Option<(usize, f64)> = None;
        for (i, &x) in num.iter().enumerate() {
            // An argument read, or an expression with a reduction in it (it
            // becomes a stage read once cut: `exp(Σ q·k)` in attention).
            if !matches!(self.g.node(x), Node::Access { .. }) && !self.has_reduction(x) {
                continue;
            }
            let ox = outer(self, x);
            let mut oa: Vec<VarId> = Vec::new();
            for &n in all_but(num, i).iter().chain(den) {
                oa.extend(outer(self, n));
            }
            let x_own = ox.iter().any(|v| !oa.contains(v));
            let a_own = oa.iter().any(|v| !ox.contains(v));
            if x_own && a_own {
                let p = points(self, x);
                if best.is_none_or(|(_, q)| p > q) {
                    best = Some((i, p));
                }
            }
        }
        let Some((i, _)) = best else {
            return self.build(false, num, den);
        };
        let a = self.build(false, &all_but(num, i), den);
        self.g.mul(a, num[i])
    }

    /// The mask-factoring rule on `if {cond} then (then) else (otherwise)`.
    pub(super) fn mask(&mut self, cond: Cond, then: NodeId, otherwise: NodeId) -> Option<NodeId> {
        let zero = self.g.constant(0.0);
        let (guarded, then_side) = if self.g.const_value(otherwise) == Some(0.0) {
            (then, true)
        } else if self.g.const_value(then) == Some(0.0) {
            (otherwise, false)
        } else {
            return None;
        };
        let p = self.product(guarded)?;
        let cond_free = self.cond_vars(&cond);
        let inside = |s: &Self, n: NodeId| s.g.free_vars(n).iter().all(|v| cond_free.contains(v));
        let (num_in, num_out): (Vec<NodeId>, Vec<NodeId>) =
            p.num.iter().partition(|&&n| inside(self, n));
        let (den_in, den_out): (Vec<NodeId>, Vec<NodeId>) =
            p.den.iter().partition(|&&n| inside(self, n));
        if num_out.is_empty() && den_out.is_empty() {
            return None;
        }
        let masked = self.build(false, &num_in, &den_in);
        let mask = if then_side {
            self.g.select(cond, masked, zero)
        } else {
            self.g.select(cond, zero, masked)
        };
        let mut num = vec![mask];
        num.extend(num_out);
        Some(self.build(p.negative, &num, &den_out))
    }
}

/// The number of terms of a range with constant bounds.
fn constant_count(range: &Range) -> Option<i64> {
    constant_range(range).map(|(lo, hi)| (hi - lo + 1).max(0))
}
