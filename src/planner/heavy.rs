//! The heavy nodes of one function and the cuts they would make: what
//! `extract`'s rules ask about a node while it decides what to cut.
//!
//! Owns [`Keys`]: which nodes are heavy (contain a reduction of two or
//! more terms), their cuts and cut keys (made on demand and memoised), the
//! work per point of a node, how many operand slots read it, whether the
//! same cut occurs elsewhere, and the merging of alpha-equivalent copies.
//! Must not decide what is cut (`extract` does) nor build stages.

use super::cut::{cut, Cut};
use super::extract::{canonical, CutKey};
use super::program::Source;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, ReduceOp, UnaryOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::subst::replace;
use crate::symbolic::IndexFn;
use rustc_hash::FxHashMap as HashMap;

/// The cuts of a function's nodes, by node, as [`Keys`] finds them (see
/// [`Keys::new`]).
pub(super) type Cuts = HashMap<NodeId, Option<(CutKey, Cut)>>;

/// Heavy nodes of one function and their cuts, computed on demand.
pub(super) struct Keys<'a> {
    f: &'a IndexFn,
    iv: &'a Intervals,
    sources: &'a [Source],
    heavy: Vec<bool>,
    /// The heavy nodes reachable from the root, except the root.
    heavy_nodes: Vec<NodeId>,
    cuts: &'a mut Cuts,
    /// How many heavy nodes share each cut hash (computed once).
    counts: Option<HashMap<u64, usize>>,
    /// Per node reachable from the root: how many operand slots read it.
    uses: HashMap<NodeId, usize>,
}

impl<'a> Keys<'a> {
    /// The heavy nodes of `f` (whose indices range over `iv`, whose
    /// arguments are `sources`), with the cuts found so far: `cuts` may
    /// hold those of an earlier form of `f` whose nodes `f` keeps. A node
    /// is immutable (the graph is hash-consed, and a cut or a merge only
    /// adds nodes and rewrites the ancestors of what it replaces), its
    /// cut depends only on its own subexpression, the ranges of its
    /// indices (set by the sums around it, which keep their bounds) and
    /// the arguments it reads (a cut appends one), so the stages cut out of
    /// a function one after another reuse every cut found before
    /// (`extract`). A caller that rewrites the function otherwise (a
    /// window's stages) starts with no cuts.
    pub(super) fn new(
        f: &'a IndexFn,
        iv: &'a Intervals,
        sources: &'a [Source],
        cuts: &'a mut Cuts,
    ) -> Keys<'a> {
        let g = &f.graph;
        let mut heavy = vec![false; g.len()];
        for id in (0..g.len() as u32).map(NodeId) {
            let own = matches!(g.node(id), Node::Reduce { .. })
                && iv.trips.get(&id).copied().unwrap_or(0) >= 2;
            heavy[id.0 as usize] = own || g.node(id).children().iter().any(|c| heavy[c.0 as usize]);
        }
        let reachable = g.reachable(f.root);
        let mut uses: HashMap<NodeId, usize> = HashMap::default();
        for &n in &reachable {
            for c in g.node(n).children() {
                *uses.entry(c).or_default() += 1;
            }
        }
        let heavy_nodes = reachable
            .into_iter()
            .filter(|&n| n != f.root && heavy[n.0 as usize])
            .collect();
        Keys {
            f,
            iv,
            sources,
            heavy,
            heavy_nodes,
            cuts,
            counts: None,
            uses,
        }
    }

    /// How many operand slots of the function's nodes read `n`.
    pub(super) fn uses(&self, n: NodeId) -> usize {
        self.uses.get(&n).copied().unwrap_or(0)
    }

    pub(super) fn heavy(&self, n: NodeId) -> bool {
        self.heavy[n.0 as usize]
    }

    /// The heavy nodes reachable from the root, except the root.
    pub(super) fn heavy_nodes(&self) -> Vec<NodeId> {
        self.heavy_nodes.clone()
    }

    pub(super) fn get(&mut self, n: NodeId) -> Option<&(CutKey, Cut)> {
        if !self.cuts.contains_key(&n) {
            let value = cut(self.f, self.iv, n).map(|c| {
                let (f, sources) = canonical(&c.stage, self.sources);
                (CutKey::new(f, sources), c)
            });
            self.cuts.insert(n, value);
        }
        self.cuts[&n].as_ref()
    }

    /// Work per point of `n`'s own indices (roughly, simple operations):
    /// a reduction costs its trip count times its body; subexpressions
    /// over fewer of `n`'s indices are computed once per their own points
    /// (hoisted) and cost nothing here.
    pub(super) fn point_cost(&self, n: NodeId) -> u64 {
        let g = &self.f.graph;
        let free = g.free_vars(n);
        let hoisted = |m: NodeId| {
            let fm = g.free_vars(m);
            m != n && fm.len() < free.len() && fm.iter().all(|v| free.contains(v))
        };
        let mut memo: HashMap<NodeId, u64> = HashMap::default();
        for m in g.reachable(n) {
            let node = g.node(m);
            let cost = if hoisted(m) {
                0
            } else {
                let children: u64 = node
                    .children()
                    .iter()
                    .map(|c| memo.get(c).copied().unwrap_or(0))
                    .fold(0, u64::saturating_add);
                match node {
                    Node::Reduce { .. } => {
                        let trips = self.iv.trips.get(&m).copied().unwrap_or(1);
                        trips.saturating_mul(children.saturating_add(1))
                    }
                    Node::Unary(op, _) => children + unary_cost(*op),
                    Node::Binary(BinaryOp::Div, ..) => children + 4,
                    // A small integer power is multiplications (lowering's
                    // `PowI`); another is a `pow` call.
                    Node::Binary(BinaryOp::Pow, _, e)
                        if g.const_value(*e)
                            .is_some_and(|e| e == e.trunc() && e.abs() <= 64.0) =>
                    {
                        children + 2
                    }
                    Node::Binary(BinaryOp::Pow, ..) => children + 40,
                    Node::Const(_) => 0,
                    // Two 64-bit multiplications and shifts (`Expr::Random`).
                    Node::Random { .. } => children + 12,
                    _ => children + 1,
                }
            };
            memo.insert(m, cost);
        }
        memo.get(&n).copied().unwrap_or(0)
    }

    /// The number of points of `n`'s cut (`None` when it cannot be cut).
    pub(super) fn domain(&mut self, n: NodeId) -> Option<u64> {
        self.get(n).map(|(_, c)| {
            c.stage
                .output_shape()
                .iter()
                .fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
        })
    }

    /// Whether `n`'s cut is a contraction worth a GEMM.
    pub(super) fn is_contraction(&mut self, n: NodeId) -> bool {
        if !matches!(
            self.f.graph.node(n),
            Node::Reduce {
                op: ReduceOp::Sum,
                ..
            }
        ) {
            return false;
        }
        self.get(n)
            .is_some_and(|(k, _)| super::route::is_gemm(&k.f))
    }

    /// How many heavy nodes are contractions worth a GEMM, not counting
    /// those nested in another (the inner sums of one contraction chain).
    pub(super) fn contractions(&mut self) -> usize {
        let cs: Vec<NodeId> = self
            .heavy_nodes()
            .into_iter()
            .filter(|&n| self.is_contraction(n))
            .collect();
        let g = &self.f.graph;
        cs.iter()
            .filter(|&&n| !cs.iter().any(|&m| m != n && g.reachable(m).contains(&n)))
            .count()
    }

    /// Whether another heavy node is the same cut as `n`, read at another
    /// index (the same cut read at the same index is merged first).
    pub(super) fn shared(&mut self, n: NodeId) -> bool {
        if self.counts.is_none() {
            let mut counts: HashMap<u64, usize> = HashMap::default();
            for m in self.heavy_nodes() {
                if let Some((k, _)) = self.get(m) {
                    *counts.entry(k.hash).or_default() += 1;
                }
            }
            self.counts = Some(counts);
        }
        let Some(k) = self.get(n).map(|(k, _)| k.hash) else {
            return false;
        };
        if self
            .counts
            .as_ref()
            .and_then(|c| c.get(&k))
            .copied()
            .unwrap_or(0)
            < 2
        {
            return false;
        }
        let (key, cut) = self.get(n).cloned().expect("computed above");
        self.heavy_nodes().into_iter().any(|m| {
            m != n
                && self
                    .get(m)
                    .is_some_and(|(k2, c2)| k2.same(&key) && c2.read != cut.read)
        })
    }

    /// `f` with heavy nodes that compute the same values at the same
    /// points (alpha-equivalent copies, such as a row maximum written twice)
    /// merged into one node, or `None` when there are none.
    pub(super) fn merge_duplicates(&mut self) -> Option<IndexFn> {
        let nodes = self.heavy_nodes();
        let mut seen: HashMap<u64, Vec<NodeId>> = HashMap::default();
        let mut replace_with: Vec<(NodeId, NodeId)> = Vec::new();
        for &n in &nodes {
            let Some((key, c)) = self.get(n).cloned() else {
                continue;
            };
            let twin = seen.get(&key.hash).and_then(|list| {
                list.iter().copied().find(|&m| {
                    self.cuts[&m]
                        .as_ref()
                        .is_some_and(|(k2, c2)| k2.same(&key) && c2.read == c.read)
                })
            });
            match twin {
                Some(m) if self.f.graph.free_vars(m) == self.f.graph.free_vars(n) => {
                    replace_with.push((n, m))
                }
                _ => seen.entry(key.hash).or_default().push(n),
            }
        }
        if replace_with.is_empty() {
            return None;
        }
        let mut g = self.f.clone();
        for (n, m) in replace_with {
            g.root = replace(&mut g.graph, g.root, n, m);
        }
        Some(g)
    }
}

fn unary_cost(op: UnaryOp) -> u64 {
    match op {
        UnaryOp::Detach => 0,
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sgn => 1,
        UnaryOp::Sqrt => 4,
        _ => 20,
    }
}
