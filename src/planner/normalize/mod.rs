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
//!
//! | file | holds |
//! | --- | --- |
//! | `mod.rs` | the entry points, the [`Normalizer`] and its analyses |
//! | `rules.rs` | the sum rules and mask factoring |
//! | `product.rs` | flattened products, their canonical order and the reciprocal rule |
//! | `combine.rs` | cancellation and the common-operand rule |
//! | `nests.rs` | the nest-order rule |

mod combine;
mod nests;
mod product;
mod rules;
#[cfg(test)]
mod tests;

use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Cond, Graph, Node, NodeId, ReduceOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::shape_hash::ShapeHashes;
use crate::symbolic::IndexFn;
use nests::reorder_nests;
use rustc_hash::FxHashMap as HashMap;

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
    normalize_with(f, false)
}

/// [`normalize`], and reads common to both terms of a sum or difference
/// taken out of it (`x[i; b]·p − x[i; b]·q` → `x[i; b]·(p − q)`): for the
/// CPU, whose GEMM takes the factor left (`p − q`, a diagonal) while it
/// packs; a GPU's BLAS cannot, and there the product stays an operand of
/// its own (`extract` plans with this on the CPU only).
pub(crate) fn normalize_factoring_reads(f: &IndexFn) -> IndexFn {
    normalize_with(f, true)
}

fn normalize_with(f: &IndexFn, factor_reads: bool) -> IndexFn {
    let f = canonical_order(&reorder_nests(f));
    let f = &f;
    let iv = Intervals::of(f);
    let mut n = Normalizer::new(f, &iv);
    let root = n.bottom_up(f.root, |n, id, old| n.rewrite(id, old));
    let root = n.merge_common_operands(root, factor_reads);
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

/// One rewrite of a function: its graph, grown by the rules, and what
/// they ask of it (memoised per node).
struct Normalizer<'a> {
    f: &'a IndexFn,
    iv: &'a Intervals,
    g: Graph,
    speculable: HashMap<NodeId, bool>,
    /// Orders the factors of every product built.
    shapes: ShapeHashes,
    /// Sum rewrites left, and the current depth of nested ones: the rules
    /// stop (leaving the rest as it is) rather than run away on some
    /// pathological expression.
    budget: usize,
    depth: usize,
}

/// Most sum rewrites in one function, and their deepest nesting.
const REWRITE_BUDGET: usize = 100_000;
const MAX_DEPTH: usize = 200;

impl<'a> Normalizer<'a> {
    fn new(f: &'a IndexFn, iv: &'a Intervals) -> Normalizer<'a> {
        Normalizer {
            iv,
            g: f.graph.clone(),
            f,
            speculable: HashMap::default(),
            shapes: ShapeHashes::default(),
            budget: REWRITE_BUDGET,
            depth: 0,
        }
    }

    /// The function with body `root`, compacted.
    fn finish(self, root: NodeId) -> IndexFn {
        let (graph, root) = self.g.extract(root);
        self.f.with_body(graph, root)
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

    /// The DAG under `root` rebuilt children first, `rule(self, new, old)`
    /// applied to each rebuilt node (`old`: the node it was built from).
    fn bottom_up(
        &mut self,
        root: NodeId,
        mut rule: impl FnMut(&mut Self, NodeId, NodeId) -> NodeId,
    ) -> NodeId {
        let mut map: HashMap<NodeId, NodeId> = HashMap::default();
        for old in self.g.reachable(root) {
            let id = match self.g.node(old).map_children(&|c| map[&c]) {
                // A sum whose terms became zero is zero (`Σ_k (x[k] − mean)`
                // after its terms cancel), not a loop adding zeros.
                Node::Reduce {
                    op,
                    var,
                    range,
                    body,
                } => self.g.reduce(op, var, range, body),
                node => self.g.intern(node),
            };
            let new = rule(self, id, old);
            map.insert(old, new);
        }
        map[&root]
    }

    /// The index variables `cond` depends on.
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
            Node::Access { arg, index } => self.iv.in_bounds(index, &self.f.args[*arg].shape),
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
