//! Algebraic normalisation before staging: linearity of sums and masks
//! factored out of guarded products.
//!
//! Owns [`normalize`], a bottom-up rewrite of a function's body with three
//! rules. Each moves work out of a loop it does not depend on, or isolates
//! the part of an expression that depends on fewer indices, so that the
//! stage extraction (`stage`) can materialise it once:
//!
//! | rule | before | after | when |
//! | --- | --- | --- | --- |
//! | invariant factor | `Σ_v (a · b / c)` | `(Σ_v a) · b / c` | `b`, `c` do not depend on `v` |
//! | invariant guard | `Σ_v (if {C} then (a) else (0))` | `if {C} then (Σ_v a) else (0)` | `C` does not depend on `v` |
//! | invariant term | `Σ_v (a · (b ± c))` | `(Σ_v a) · b ± Σ_v (a · c)` | `b` does not depend on `v`, `c` does |
//! | split sum | `Σ_v (p ± q)` | `Σ_v p ± Σ_v q` | a factor of `p` or `q` does not depend on `v` (it then leaves its sum) |
//! | constant sum | `Σ_v c` | `c · n` | `c` a constant, the range's `n` terms constant |
//! | reciprocal | `a / c` | `a · (1 / c)` | `c` depends on fewer indices than `a` (`1 / c` is then computed once per its own indices, a multiplication replaces a division per element) |
//! | mask factoring | `if {C} then (a · b) else (0)` | `(if {C} then (a) else (0)) · b` | `C` is a value condition, `a` depends only on indices `C` depends on |
//! | nest order | `Σ_i Σ_d Σ_j (Π factors)` | the same sums, nested in variable-elimination order | the ranges do not depend on each other |
//! | cancellation | `a − a`, `a + (−a)` | `0` | equal products in canonical order |
//! | common operand | `c₁ · Σ_v (a · x[v…]) ± c₂ · Σ_w (b · x[w…])` | `Σ_v ((c₁ · a ± c₂ · b[w := v]) · x[v…])` | the same read `x` and range, `c₁`, `c₂` outside the sums |
//!
//! The nest rule runs first: a derivative through a normaliser holds a
//! nest like `Σ_j Σ_d Σ_i (do[i;d] · v[j;d] · E[i;j] / Z[i]² · E[i;a] · q[i;b])`
//! whose order leaves nothing to factor out. Summing first over the index
//! whose factors make the smallest intermediate (greedy variable
//! elimination, as `opt_einsum`'s greedy path) and nesting the sums in that
//! order (the first eliminated innermost) lets the invariant-factor rule
//! turn it into `Σ_i (E[i;a] · q[i;b] / Z[i]² · Σ_j (E[i;j] · Σ_d (do[i;d] · v[j;d])))`:
//! `N²·E` work instead of `N³·E²`.
//!
//! The common-operand rule runs last, on the result: attention's query
//! gradient comes out as `Σ_j (s[i;j] · k[j;d]) / z[i] − (Σ_j (e[i;j] ·
//! k[j;d])) · c[i] / z[i]²`, two contractions with one operand `k`; merged,
//! it is one contraction (one GEMM once its left operand is a stage).
//!
//! Finally every product's factors are put in one order (by a hash of
//! their structure that ignores index names), so that equal products met
//! in two derivatives are the same stage.
//!
//! Derivatives need these: the derivative of `exp(x − m) / Σ exp(x − m)`
//! holds `Σ_j (dp[j] · … · exp(x[k] − m))`, quadratic in the row length
//! until `exp(x[k] − m)` leaves the sum, and the derivative of a fused layer
//! `max(Σ_k x·w + c, 0)` holds `if {z ≥ 0} then (dh[b;o] · x[b;k]) else (0)`,
//! whose mask `if {z ≥ 0} then (dh) else (0)` depends on `(b, o)` only.
//!
//! What changes: a product is re-associated (rounding may differ in the last
//! bit), and where the interpreter skipped a factor (an empty sum, a false
//! mask) the factor is now evaluated and multiplied by zero, so an infinite
//! or NaN factor gives NaN there, as PyTorch's `grad * mask` does. A factor
//! whose reads are in bounds only inside a sum's range stays inside unless
//! the range is never empty (`symbolic::intervals`). Must not change what a
//! function computes otherwise.

use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Cond, Graph, Node, NodeId, ReduceOp, UnaryOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::IndexFn;
use std::collections::HashMap;

/// `f` with the rules of the module documentation applied everywhere.
///
/// ```
/// use tenjin::planner::normalize;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i; k] = sum{j}_0^3 (a[i; j] * b[i; k])",
///                        &[("a", &[2, 4][..]), ("b", &[2, 5][..])])?;
/// assert_eq!(normalize(&f).to_string(), "f[i; k] = b[i; k] * sum{j}_0^3 (a[i; j])");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn normalize(f: &IndexFn) -> IndexFn {
    let f = canonical_order(&reorder_nests(f));
    let f = &f;
    let iv = Intervals::of(f);
    let mut n = Normalizer::new(f, &iv);
    let root = n.bottom_up(f.root, |n, id, old| n.rewrite(id, old));
    let root = n.merge_common_operands(root);
    n.finish(root)
}

/// `f` with differences of equal products (in canonical order) cancelled
/// to zero, and nothing else changed: for a function whose parts became
/// stage reads after normalisation (two terms that differed only inside a
/// part now cut out are equal).
pub(crate) fn cancel_equal_terms(f: &IndexFn) -> IndexFn {
    let iv = Intervals::of(f);
    let mut n = Normalizer::new(f, &iv);
    let root = n.bottom_up(f.root, |n, id, _| match n.g.node(id).clone() {
        Node::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), a, b) => {
            n.cancel(op, a, b).unwrap_or_else(|| n.g.binary(op, a, b))
        }
        _ => id,
    });
    n.finish(root)
}

/// `f` with every product's factors in canonical order.
fn canonical_order(f: &IndexFn) -> IndexFn {
    let iv = Intervals::of(f);
    let mut n = Normalizer::new(f, &iv);
    let root = n.canonical_products(f.root);
    n.finish(root)
}

struct Normalizer<'a> {
    f: &'a IndexFn,
    iv: &'a Intervals,
    g: Graph,
    speculable: HashMap<NodeId, bool>,
    /// `shape_hash` of each node.
    shapes: HashMap<NodeId, u64>,
    /// Sum rewrites left, and the current depth of nested ones: the rules
    /// stop (leaving the rest as it is) rather than run away on some
    /// pathological expression.
    budget: usize,
    depth: usize,
}

/// Most sum rewrites in one function, and their deepest nesting.
const REWRITE_BUDGET: usize = 100_000;
const MAX_DEPTH: usize = 200;

/// `v` without its element `k`.
fn all_but(v: &[NodeId], k: usize) -> Vec<NodeId> {
    v.iter()
        .enumerate()
        .filter(|(j, _)| *j != k)
        .map(|(_, n)| *n)
        .collect()
}

/// `outer · Σ_var (rest · read)` (see `Normalizer::contractions`).
struct Contraction {
    /// The sum node itself.
    sum: NodeId,
    var: VarId,
    range: crate::symbolic::Range,
    read: NodeId,
    rest: NodeId,
    outer: NodeId,
}

/// A product `sign · Π num / Π den`, flattened.
struct Product {
    negative: bool,
    num: Vec<NodeId>,
    den: Vec<NodeId>,
}

impl<'a> Normalizer<'a> {
    fn new(f: &'a IndexFn, iv: &'a Intervals) -> Normalizer<'a> {
        Normalizer {
            iv,
            g: f.graph.clone(),
            f,
            speculable: HashMap::new(),
            shapes: HashMap::new(),
            budget: REWRITE_BUDGET,
            depth: 0,
        }
    }

    /// The function with body `root`, compacted.
    fn finish(self, root: NodeId) -> IndexFn {
        let (graph, root) = self.g.extract(root);
        IndexFn {
            graph,
            root,
            ..self.f.clone()
        }
    }

    /// Applies the first rule that fits `id` (whose children are already
    /// normal); `old` is the node it was built from, for the analysis.
    fn rewrite(&mut self, id: NodeId, old: NodeId) -> NodeId {
        match self.g.node(id).clone() {
            Node::Reduce {
                op: ReduceOp::Sum,
                var,
                range,
                body,
            } => {
                let nonempty = self.iv.nonempty.get(&old).copied().unwrap_or(false);
                self.sum(var, &range, body, nonempty).unwrap_or(id)
            }
            Node::Select {
                cond: cond @ Cond::Value(..),
                then,
                otherwise,
            } => self.mask(cond, then, otherwise).unwrap_or(id),
            _ => id,
        }
    }

    /// The invariant-guard and invariant-factor rules on `Σ_var body`.
    fn sum(
        &mut self,
        var: VarId,
        range: &crate::symbolic::Range,
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
        range: &crate::symbolic::Range,
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
            let sum = s_reduce(self, var, range, grouped);
            return Some(if p.negative { self.g.neg(sum) } else { sum });
        }
        let inner_body = self.regroup(var, &num_in, &den_in);
        let inner = rebuild(self, inner_body);
        num_out.insert(0, inner);
        Some(self.build(p.negative, &num_out, &den_out))
    }

    /// The canonical product of `factors` (each flattened).
    fn product_of(&mut self, factors: &[NodeId]) -> NodeId {
        let mut p = Product {
            negative: false,
            num: vec![],
            den: vec![],
        };
        for &x in factors {
            self.flatten(x, false, &mut p);
        }
        self.build(p.negative, &p.num, &p.den)
    }

    /// Every product under `root` with its factors in canonical order
    /// (see the module documentation), bottom-up.
    fn canonical_products(&mut self, root: NodeId) -> NodeId {
        self.bottom_up(root, |n, id, _| match n.g.node(id) {
            Node::Binary(BinaryOp::Mul | BinaryOp::Div, ..) | Node::Unary(UnaryOp::Neg, _) => {
                let p = n.flattened(id);
                n.build(p.negative, &p.num, &p.den)
            }
            _ => id,
        })
    }

    /// A hash of `n`'s structure that ignores which index variables it
    /// uses (so it agrees on alpha-equivalent expressions of two
    /// functions), memoised.
    fn shape_hash(&mut self, n: NodeId) -> u64 {
        use std::hash::{Hash, Hasher};
        if let Some(&h) = self.shapes.get(&n) {
            return h;
        }
        let mut st = std::collections::hash_map::DefaultHasher::new();
        let form = |a: &crate::symbolic::Affine,
                    st: &mut std::collections::hash_map::DefaultHasher| {
            let mut c: Vec<i64> = a.terms.iter().map(|t| t.1).collect();
            c.sort_unstable();
            (c, a.constant).hash(st);
        };
        let node = self.g.node(n).clone();
        match &node {
            Node::Const(bits) => (0u8, bits).hash(&mut st),
            Node::Access { arg, index } => {
                (1u8, arg).hash(&mut st);
                index.iter().for_each(|a| form(a, &mut st));
            }
            Node::Index(a) => {
                2u8.hash(&mut st);
                form(a, &mut st);
            }
            Node::Unary(op, _) => (3u8, format!("{op:?}")).hash(&mut st),
            Node::Binary(op, _, _) => (4u8, format!("{op:?}")).hash(&mut st),
            Node::Select { cond, .. } => {
                5u8.hash(&mut st);
                match cond {
                    Cond::Index(r, op) => {
                        form(&r.num, &mut st);
                        (r.den, format!("{op:?}")).hash(&mut st);
                    }
                    Cond::Value(_, op, _) => format!("{op:?}").hash(&mut st),
                    Cond::IsInt(r) => {
                        form(&r.num, &mut st);
                        r.den.hash(&mut st);
                    }
                }
            }
            Node::Reduce { op, range, .. } => {
                (6u8, format!("{op:?}"), range.lower.len(), range.upper.len()).hash(&mut st)
            }
        }
        for c in node.children() {
            self.shape_hash(c).hash(&mut st);
        }
        let h = st.finish();
        self.shapes.insert(n, h);
        h
    }

    /// The common-operand rule on every sum and difference under `root`
    /// (see the module documentation), bottom-up.
    fn merge_common_operands(&mut self, root: NodeId) -> NodeId {
        self.bottom_up(root, |n, id, _| match n.g.node(id).clone() {
            Node::Binary(op @ (BinaryOp::Add | BinaryOp::Sub), a, b) => n
                .cancel(op, a, b)
                .or_else(|| n.merge_pair(op, a, b))
                .unwrap_or(id),
            _ => id,
        })
    }

    /// The DAG under `root` rebuilt children first, `rule(self, new, old)`
    /// applied to each rebuilt node (`old`: the node it was built from).
    fn bottom_up(
        &mut self,
        root: NodeId,
        mut rule: impl FnMut(&mut Self, NodeId, NodeId) -> NodeId,
    ) -> NodeId {
        let mut map: HashMap<NodeId, NodeId> = HashMap::new();
        for old in self.g.reachable(root) {
            let node = self.g.node(old).map_children(&|c| map[&c]);
            let id = self.g.intern(node);
            let new = rule(self, id, old);
            map.insert(old, new);
        }
        map[&root]
    }

    /// `0` for `a − a` and `a + (−a)`, products compared in canonical
    /// form (the same product associated two ways is one value).
    fn cancel(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Option<NodeId> {
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
                let rename: HashMap<VarId, crate::symbolic::Affine> =
                    [(cb.var, crate::symbolic::Affine::var(ca.var))].into();
                let Ok(xb) = crate::symbolic::subst::substitute(&mut self.g, cb.read, &rename)
                else {
                    continue;
                };
                if xb != ca.read {
                    continue;
                }
                let Ok(rest_b) = crate::symbolic::subst::substitute(&mut self.g, cb.rest, &rename)
                else {
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

    /// The split-sum rule: `Σ_v (p ± q)` as `Σ_v p ± Σ_v q` when a factor
    /// of `p` or `q` does not depend on `v` (and may leave the sum).
    fn split_sum(
        &mut self,
        var: VarId,
        range: &crate::symbolic::Range,
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
        range: &crate::symbolic::Range,
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
            s.g.free_vars(n)
                .iter()
                .map(|v| {
                    s.iv.vars
                        .get(v)
                        .map_or(1.0, |&(lo, hi)| (hi - lo + 1).max(1) as f64)
                })
                .product()
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
            for &n in num
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, n)| n)
                .chain(den)
            {
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
        let rest: Vec<NodeId> = num
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| *n)
            .collect();
        let a = self.build(false, &rest, den);
        self.g.mul(a, num[i])
    }

    /// The mask-factoring rule on `if {cond} then (then) else (otherwise)`.
    fn mask(&mut self, cond: Cond, then: NodeId, otherwise: NodeId) -> Option<NodeId> {
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

    /// The factors of `n` (a single factor when it is not a product).
    fn flattened(&self, n: NodeId) -> Product {
        let mut p = Product {
            negative: false,
            num: vec![],
            den: vec![],
        };
        self.flatten(n, false, &mut p);
        p
    }

    /// The flattened product at `n`, when `n` is a product or quotient
    /// with at least two factors (a negation counts as a sign).
    fn product(&self, n: NodeId) -> Option<Product> {
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
    fn build(&mut self, negative: bool, num: &[NodeId], den: &[NodeId]) -> NodeId {
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
        let key = |s: &mut Self, n: NodeId| s.shape_hash(n);
        let mut keyed: Vec<(u64, NodeId)> = num.iter().map(|&n| (key(self, n), n)).collect();
        keyed.sort_by_key(|k| k.0);
        num = keyed.into_iter().map(|k| k.1).collect();
        let mut keyed: Vec<(u64, NodeId)> = den.iter().map(|&n| (key(self, n), n)).collect();
        keyed.sort_by_key(|k| k.0);
        den = keyed.into_iter().map(|k| k.1).collect();
        // The reciprocal rule: a denominator over fewer indices than the
        // numerator becomes a factor `1 / c` of its own.
        let num_free: Vec<VarId> = {
            let mut v: Vec<VarId> = num
                .iter()
                .flat_map(|&n| self.g.free_vars(n).to_vec())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let (hoist, keep): (Vec<NodeId>, Vec<NodeId>) = den.iter().partition(|&&d| {
            let fd = self.g.free_vars(d);
            fd.len() < num_free.len() && fd.iter().all(|v| num_free.contains(v))
        });
        if !hoist.is_empty() {
            let one = self.g.constant(1.0);
            let rest: Vec<NodeId> = hoist.iter().skip(1).copied().collect();
            let mut d = hoist[0];
            for &r in &rest {
                d = self.g.mul(d, r);
            }
            let recip = self.g.div(one, d);
            num.push(recip);
            den = keep;
            let mut keyed: Vec<(u64, NodeId)> = num.iter().map(|&n| (key(self, n), n)).collect();
            keyed.sort_by_key(|k| k.0);
            num = keyed.into_iter().map(|k| k.1).collect();
        }
        let (num, den) = (&num[..], &den[..]);
        let one = self.g.constant(1.0);
        let top = num.iter().fold(None, |acc, &n| match acc {
            None => Some(n),
            Some(a) => Some(self.g.mul(a, n)),
        });
        let bottom = den.iter().fold(None, |acc, &n| match acc {
            None => Some(n),
            Some(a) => Some(self.g.mul(a, n)),
        });
        let top = top.unwrap_or(one);
        let q = match bottom {
            Some(b) => self.g.div(top, b),
            None => top,
        };
        if negative {
            self.g.neg(q)
        } else {
            q
        }
    }

    fn cond_vars(&self, cond: &Cond) -> Vec<VarId> {
        match cond {
            Cond::Index(r, _) | Cond::IsInt(r) => r.vars().collect(),
            Cond::Value(a, _, b) => {
                let mut v = self.g.free_vars(*a).to_vec();
                v.extend_from_slice(self.g.free_vars(*b));
                v
            }
        }
    }

    /// Whether every access under `n` is in bounds for all values of its
    /// variables (so `n` may be evaluated where the interpreter would not).
    fn is_speculable(&mut self, n: NodeId) -> bool {
        if let Some(&s) = self.speculable.get(&n) {
            return s;
        }
        let own = match self.g.node(n) {
            Node::Access { arg, index } => {
                let shape = &self.f.args[*arg].shape;
                index
                    .iter()
                    .zip(shape)
                    .all(|(form, &size)| match self.iv.of_affine(form) {
                        Some((lo, hi)) => lo > hi || (lo >= 0 && hi < size as i128),
                        None => false,
                    })
            }
            // A reduction's own variable has its interval too.
            _ => true,
        };
        let s = own
            && self
                .g
                .node(n)
                .children()
                .iter()
                .all(|&c| self.is_speculable(c));
        self.speculable.insert(n, s);
        s
    }
}

fn s_reduce(
    n: &mut Normalizer,
    var: VarId,
    range: &crate::symbolic::Range,
    body: NodeId,
) -> NodeId {
    n.g.reduce(ReduceOp::Sum, var, range.clone(), body)
}

/// `f` with every nest of sums over a product reordered for variable
/// elimination (see the module documentation).
fn reorder_nests(f: &IndexFn) -> IndexFn {
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
    let mut sums: Vec<(VarId, crate::symbolic::Range)> = Vec::new();
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
    let size = |v: &VarId| -> f64 {
        iv.vars
            .get(v)
            .map_or(1.0, |&(lo, hi)| ((hi - lo + 1).max(1)) as f64)
            .ln()
    };
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

/// The number of terms of a range with constant bounds.
fn constant_count(range: &crate::symbolic::Range) -> Option<i64> {
    super::contraction::constant_range(range).map(|(lo, hi)| (hi - lo + 1).max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
        IndexFn::parse_with_sizes(src, args, sizes).unwrap()
    }

    fn data(n: usize, seed: f64) -> Vec<f64> {
        (0..n).map(|i| ((i as f64) * 0.61 + seed).sin()).collect()
    }

    /// `src` normalises to `want`, and the values agree.
    fn normalizes_to(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)], want: &str) {
        let f = parse(src, args, sizes);
        assert_eq!(normalize(&f).to_string(), want);
        same_values(&f);
    }

    /// Normalised and original agree (f64, relative 1e-12) on data.
    fn same_values(f: &IndexFn) {
        let g = normalize(f);
        let bufs: Vec<Vec<f64>> = f
            .args()
            .iter()
            .enumerate()
            .map(|(k, a)| data(a.shape.iter().product(), k as f64))
            .collect();
        let inputs: Vec<(&str, &[f64])> = f
            .args()
            .iter()
            .zip(&bufs)
            .map(|(a, b)| (a.name.as_str(), &b[..]))
            .collect();
        let (a, b) = (f.eval_f64(&inputs).unwrap(), g.eval_f64(&inputs).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                "{f}\n{g}\n{x} {y}"
            );
        }
        g.check_bounds().unwrap();
    }

    #[test]
    fn invariant_factors_and_guards_leave_sums() {
        normalizes_to(
            "f[i; k] = sum{j}_0^3 (-(a[i; j] * b[i; k]) / c[k])",
            &[("a", &[2, 4]), ("b", &[2, 5]), ("c", &[5])],
            &[],
            "f[i; k] = -(1 / c[k] * b[i; k] * sum{j}_0^3 (a[i; j]))",
        );
        normalizes_to(
            "f[i] = sum{j}_0^3 (if {x[i] > 0} then (a[i; j]) else (0))",
            &[("x", &[2]), ("a", &[2, 4])],
            &[],
            "f[i] = if {x[i] > 0} then (sum{j}_0^3 (a[i; j])) else (0)",
        );
    }

    #[test]
    fn masks_factor_out_of_guarded_products() {
        // The derivative of a fused layer with respect to x.
        normalizes_to(
            "dx[b; k] = sum{o}_0^3 (if {sum{q}_0^4 (x[b; q] * w[o; q]) >= 0} then (dh[b; o] * w[o; k]) else (0))",
            &[("x", &[2, 5]), ("w", &[4, 5]), ("dh", &[2, 4])],
            &[],
            "dx[b; k] = sum{o}_0^3 (if {sum{q}_0^4 (x[b; q] * w[o; q]) >= 0} then (dh[b; o]) else (0) * w[o; k])",
        );
    }

    #[test]
    fn reads_valid_only_inside_a_possibly_empty_sum_stay_inside() {
        // x[i - 1] is in bounds only where 0..=i-1 is non-empty.
        let f = parse(
            "f[i] = sum{k}_0^(i - 1) (x[i - 1] * y[k])",
            &[("x", &[4]), ("y", &[4])],
            &[("i", 4)],
        );
        assert_eq!(normalize(&f).to_string(), f.to_string());
        same_values(&f);
        // Always in bounds: it may leave.
        normalizes_to(
            "f[i] = sum{k}_0^(i - 1) (x[i] * y[k])",
            &[("x", &[4]), ("y", &[4])],
            &[("i", 4)],
            "f[i] = sum{k}_0^(-1 + i) (y[k]) * x[i]",
        );
    }

    #[test]
    fn nests_are_summed_in_elimination_order() {
        // The normaliser term of attention's key gradient: summing i
        // innermost (as derivation nests it) factors nothing out.
        let f = parse(
            "dk[a; b] = sum{j}_0^5 (sum{d}_0^2 (sum{i}_0^4 (do[i; d] * v[j; d] * e[i; j] * z[i] * e[i; a] * q[i; b])))",
            &[("do", &[5, 3]), ("v", &[6, 3]), ("e", &[5, 6]), ("z", &[5]), ("q", &[5, 2])],
            &[("a", 6)],
        );
        let g = normalize(&f);
        assert_eq!(
            g.to_string(),
            "dk[a; b] = sum{i}_0^4 (sum{j}_0^5 (sum{d}_0^2 (do[i; d] * v[j; d]) * e[i; j]) * z[i] * q[i; b] * e[i; a])"
        );
        same_values(&f);
    }
}
