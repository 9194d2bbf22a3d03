//! Deciding what to materialise: a function becomes a DAG of stages.
//!
//! Owns [`Builder`], which turns functions into [`Stage`]s of one
//! [`Program`](super::Program) under construction. For each function it
//! normalises the body (`normalize`), then repeatedly cuts a subexpression
//! out as a stage of its own (`cut`) and reads it back, until none is worth
//! cutting; each stage is planned the same way before it is added. Stages
//! are shared: a cut equal to one already in the program (the same
//! function of the same buffers, up to index names) is read, not computed
//! again, so the derivatives of all arguments of one node share their
//! common parts.
//!
//! **What is cut** (a *heavy* node is one containing a reduction of two or
//! more terms; the root of a function is never cut):
//!
//! | rule | a node is cut when |
//! | --- | --- |
//! | redundant | it is heavy and some loop around the place it is computed (after hoisting out of loops it does not depend on; on the GPU, whose threads are the output loops, never out of those) is over an index it does not depend on: it would be recomputed for every value of that index |
//! | (row-fused, GPU) | never, when it is a statistic of the row in a stage that reads such statistics ([`gpu_pinned`]: the innermost output loop is not pinned, a team per row computes them once), unless the program has it as a stage already |
//! | nested | it is a reduction hoisted out of a reduction over an index it does not depend on (the row maximum inside a row's sum of exponentials): one stage serves every reader |
//! | spread (GPU) | it is a reduction of at least [`SPREAD_MIN_TERMS`] terms inside a reduction over an index it depends on, in a function of at most `SPLIT_MAX_OUTPUTS` outputs that is not one long sum (the label's logit picked from each row of a mean loss): a stage of an output per row, spread over teams, where inline each term of the outer reduction would be one thread's serial pass |
//! | shared | it is heavy and another node of the function is the same cut (`exp(Σ_e q[i;e]·k[j;e])` and `exp(Σ_e q[i;e]·k[m;e])`), or it is redundant and read by several parents (`Σ_k df[i;k]` in two row terms): cut before its parents |
//! | known | it is heavy and equal to a stage already in the program, or to a costly cut the caller wants (a forward intermediate); or it is a guarded expression equal to a stage already in the program |
//! | contraction operand | it is a factor of a sum of a product with one argument read, and it would be recomputed per term (cutting it leaves a contraction that runs as GEMM), unless the function is a product with a diagonal factor that the CPU's GEMM runs whole (`x[i; a] · (d[i] · x[i; b])`) |
//!
//! The cost-based rules (redundant, nested, spread, contraction, contraction operand) also
//! require that the stage has no more points than the loops around the
//! node evaluate it at: coordinates such as `t + k` next to `t` can span a
//! box far larger than the points read. Nodes are visited top-down, so the
//! largest subexpression that qualifies is cut. A cut is kept only if the function reading it back passes the
//! exact bounds check; otherwise that node is left inline.
//!
//! Must not compile or run anything.

use super::heavy::{Cuts, Keys};
use super::normalize::{normalize, normalize_factoring_reads};
use super::operand::{contraction_operand, group_diagonal};
use super::phases;
use super::program::{Source, Stage};
use super::route::{is_scaled_gemm, route_for, routes_to_gemm, Route, Target};
use super::split_sums::{is_long_sum, split_long_sum, SPLIT_MAX_OUTPUTS};
use super::window;
use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, ReduceOp, UnaryOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::shape_hash::ShapeHashes;
use crate::symbolic::subst::replace;
use crate::symbolic::{ArgDecl, IndexFn};
use crate::{DType, Error};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::borrow::Cow;
use std::hash::{Hash, Hasher};

/// Most cuts made in one function (a guard against a rewrite that never
/// settles; real functions need a handful).
const MAX_CUTS: usize = 64;

/// A stage as it was cut: its canonical function (arguments in source
/// order, named after their sources) and its sources. Two equal keys
/// compute the same values.
#[derive(Clone, Debug)]
pub(crate) struct CutKey {
    /// A fingerprint independent of how the DAG was built (equal
    /// functions have equal fingerprints; equality is then checked).
    pub hash: u64,
    pub f: IndexFn,
    pub sources: Vec<Source>,
}

impl CutKey {
    pub(crate) fn new(f: IndexFn, sources: Vec<Source>) -> CutKey {
        CutKey {
            hash: fingerprint(&f, &sources),
            f,
            sources,
        }
    }

    /// The key of a stage's function `f` read from `sources`, whatever
    /// the stage is named.
    pub(crate) fn of_stage(f: &IndexFn, sources: &[Source]) -> CutKey {
        let anonymous = IndexFn {
            name: "s".into(),
            ..f.clone()
        };
        CutKey::new(anonymous, sources.to_vec())
    }

    pub(crate) fn same(&self, other: &CutKey) -> bool {
        self.hash == other.hash && self.sources == other.sources && self.f == other.f
    }
}

/// What a cut became (see [`Builder::plan_cut`]).
enum Planned {
    Stage(usize),
    Constant(f64),
}

/// The stages of one program under construction.
pub(crate) struct Builder {
    pub dtype: DType,
    /// What the stages' loop nests are planned for.
    pub target: Target,
    pub stages: Vec<Stage>,
    /// Per stage: the cut it was made from (`None` for a whole function).
    pub cut_as: Vec<Option<CutKey>>,
    /// Per stage: its final function as a key (a cut planned before some
    /// of its parts became stages is found again by this one).
    pub final_as: Vec<CutKey>,
    /// Cuts the caller wants made wherever they occur.
    pub wanted: Vec<CutKey>,
}

/// `f` taking only the arguments it reads, merged where two read the same
/// source, ordered by source and named after it; and those sources.
pub(crate) fn canonical(f: &IndexFn, sources: &[Source]) -> (IndexFn, Vec<Source>) {
    // Merged first: a read of a later argument with a source already seen
    // now reads the first argument with that source, which must be kept
    // even when `f` itself read only the later one.
    let merged = merge_duplicate_args(f, sources);
    let used = merged.used_args();
    let mut pairs: Vec<(Source, usize)> = used.iter().map(|&a| (sources[a], a)).collect();
    pairs.sort();
    let mut g = merged.with_args(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    for (decl, (src, _)) in g.args.iter_mut().zip(&pairs) {
        decl.name = source_name(*src);
    }
    (g, pairs.into_iter().map(|p| p.0).collect())
}

/// `f` with every read of a duplicated source redirected to its first
/// argument.
fn merge_duplicate_args<'f>(f: &'f IndexFn, sources: &[Source]) -> Cow<'f, IndexFn> {
    let first: Vec<usize> = (0..sources.len())
        .map(|a| sources.iter().position(|s| *s == sources[a]).unwrap_or(a))
        .collect();
    if first.iter().enumerate().all(|(a, &b)| a == b) {
        return Cow::Borrowed(f);
    }
    let mut g = f.clone();
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    for n in f.graph.reachable(f.root) {
        let node = match f.graph.node(n) {
            Node::Access { arg, index } => Node::Access {
                arg: first[*arg],
                index: index.clone(),
            },
            other => other.map_children(&|c| map[&c]),
        };
        map.insert(n, g.graph.intern(node));
    }
    g.root = map[&f.root];
    Cow::Owned(g)
}

fn source_name(s: Source) -> String {
    match s {
        Source::Input(k) => format!("in{k}"),
        Source::Stage(k) => format!("s{k}"),
    }
}

impl Builder {
    pub(crate) fn new(dtype: DType, target: Target) -> Builder {
        Builder {
            dtype,
            target,
            stages: Vec::new(),
            cut_as: Vec::new(),
            final_as: Vec::new(),
            wanted: Vec::new(),
        }
    }

    /// `f` normalised for the target: on the CPU with reads common to two
    /// terms taken out (`normalize_factoring_reads`).
    fn normalize(&self, f: &IndexFn) -> IndexFn {
        match self.target {
            Target::Cpu => normalize_factoring_reads(f),
            Target::Gpu => normalize(f),
        }
    }

    /// Plans `f` (its arguments read from `sources`) into stages; returns
    /// the stage computing `f`.
    pub(crate) fn add(&mut self, f: &IndexFn, sources: &[Source]) -> Result<usize, Error> {
        let (f, sources) = self.extract(self.normalize(f), sources.to_vec(), true)?;
        let (fin, srcs) = canonical(&f, &sources);
        // An equal whole function already planned (two derivatives equal).
        if let Some(j) = self
            .stages
            .iter()
            .position(|s| s.sources == srcs && s.f.eq_but_name(&fin))
        {
            return Ok(j);
        }
        self.push(fin, srcs, None)
    }

    fn push(
        &mut self,
        f: IndexFn,
        sources: Vec<Source>,
        cut: Option<CutKey>,
    ) -> Result<usize, Error> {
        let id = self.stages.len();
        let f = if cut.is_some() {
            IndexFn {
                name: format!("s{id}"),
                ..f
            }
        } else {
            f
        };
        let key = CutKey::of_stage(&f, &sources);
        let route = route_for(&f, self.dtype, self.target)?;
        if self.target == Target::Gpu && matches!(route, Route::Loop(_)) {
            if let Some((partials, combine)) = split_long_sum(&f) {
                return self.push_split(partials, combine, sources, cut, key);
            }
        }
        self.push_stage(f, route, sources, cut, key)
    }

    /// Adds `f` as the next stage, known as `cut` (when it was cut) and
    /// `key` (what it computes).
    pub(super) fn push_stage(
        &mut self,
        f: IndexFn,
        route: Route,
        sources: Vec<Source>,
        cut: Option<CutKey>,
        key: CutKey,
    ) -> Result<usize, Error> {
        let id = self.stages.len();
        self.stages.push(Stage {
            route,
            f,
            sources,
            forward: None,
        });
        self.cut_as.push(cut);
        self.final_as.push(key);
        Ok(id)
    }

    /// The stage for a cut: an existing equal one, or a new one planned
    /// like any function (`use_wanted`: as for [`Builder::extract`]).
    pub(super) fn stage_for(&mut self, key: CutKey, use_wanted: bool) -> Result<usize, Error> {
        match self.plan_cut(key, use_wanted, false)? {
            Planned::Stage(j) => Ok(j),
            // (`plan_cut` folds constants only when asked.)
            Planned::Constant(_) => Err(Error::Invalid {
                function: "planner".into(),
                message: "internal: a cut that must be a stage became a constant".into(),
            }),
        }
    }

    /// What a cut becomes: an existing equal stage, a new one planned like
    /// any function, or (`fold`) the constant it is once planned (its
    /// terms cancelled: `Σ_k (x[k] − mean)` in a variance's derivative),
    /// which needs no stage.
    fn plan_cut(&mut self, key: CutKey, use_wanted: bool, fold: bool) -> Result<Planned, Error> {
        if let Some(j) = self.find(&key) {
            return Ok(Planned::Stage(j));
        }
        // A stage the forward pass provides is not cut further for the
        // forward's sake: it comes whole.
        let use_wanted = use_wanted && !self.is_wanted(&key);
        let (f, sources) = self.extract(self.normalize(&key.f), key.sources.clone(), use_wanted)?;
        if let Some(c) = f.graph.const_value(f.root).filter(|_| fold) {
            return Ok(Planned::Constant(c));
        }
        let (fin, srcs) = canonical(&f, &sources);
        self.push(fin, srcs, Some(key)).map(Planned::Stage)
    }

    pub(crate) fn find(&self, key: &CutKey) -> Option<usize> {
        self.cut_as
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.same(key)))
            .or_else(|| self.final_as.iter().position(|c| c.same(key)))
    }

    fn is_wanted(&self, key: &CutKey) -> bool {
        self.wanted.iter().any(|w| w.same(key))
    }

    /// Cuts stages out of `f` until none qualifies (see the module
    /// documentation); returns the function reading them and its sources.
    /// The cuts the caller wants count as known only when `use_wanted`.
    fn extract(
        &mut self,
        mut f: IndexFn,
        mut sources: Vec<Source>,
        use_wanted: bool,
    ) -> Result<(IndexFn, Vec<Source>), Error> {
        let stages = sources.len();
        (f, sources) = self.apply_window(f, sources, use_wanted)?;
        if sources.len() == stages {
            // A strided contraction `window` refuses, split by residue;
            // the phases' reader only interleaves stages: nothing to cut.
            if let Some(phased) = self.apply_phases(&f, &sources, use_wanted)? {
                return Ok(phased);
            }
        }
        if self.target == Target::Cpu {
            f = group_diagonal(&f);
        }
        let whole_gemm = routes_to_gemm(&f, self.target);
        let mut rejected: HashSet<NodeId> = HashSet::default();
        // The cuts found so far, by node: each round cuts one stage and
        // keeps every other node (see `Keys::new`).
        let mut cuts = Cuts::default();
        for _ in 0..MAX_CUTS {
            let iv = Intervals::of(&f);
            let mut keys = Keys::new(&f, &iv, &sources, &mut cuts);
            if let Some(merged) = keys.merge_duplicates() {
                f = merged;
                continue;
            }
            let mut progress = false;
            for n in self.candidates(&f, &iv, &mut keys, use_wanted, whole_gemm) {
                if rejected.contains(&n) {
                    continue;
                }
                let Some((key, c)) = keys.get(n).cloned() else {
                    rejected.insert(n);
                    continue;
                };
                // Every node that is this same cut is read back.
                let mut occurrences = vec![(n, c.read.clone())];
                for m in keys.heavy_nodes() {
                    if m != n {
                        if let Some((k2, c2)) = keys.get(m) {
                            if k2.same(&key) {
                                occurrences.push((m, c2.read.clone()));
                            }
                        }
                    }
                }
                let reader = read_back(&f, &occurrences, &key.f);
                if reader.check_bounds().is_err() {
                    rejected.insert(n);
                    continue;
                }
                match self.plan_cut(key, use_wanted, true)? {
                    Planned::Stage(sid) => {
                        f = reader;
                        sources.push(Source::Stage(sid));
                    }
                    Planned::Constant(c) => {
                        let k = f.graph.constant(c);
                        for (m, _) in &occurrences {
                            f.root = replace(&mut f.graph, f.root, *m, k);
                        }
                    }
                }
                progress = true;
                break;
            }
            if !progress {
                break;
            }
            // A cut may leave a convolution-shaped contraction that was not
            // one before (a masked gradient cut as a stage leaves the input
            // gradient's windowed sum over that stage): rewrite it too.
            let stages = sources.len();
            (f, sources) = self.apply_window(f, sources, use_wanted)?;
            if sources.len() != stages {
                rejected.clear();
                cuts.clear();
            }
        }
        let (graph, root) = f.graph.extract(f.root);
        let f = super::normalize::cancel_equal_terms(&IndexFn { graph, root, ..f });
        if self.target == Target::Gpu {
            let (f, sources) = self.relayout_output(f, sources, use_wanted)?;
            return self.relayout_operands(f, sources, use_wanted);
        }
        Ok((f, sources))
    }

    /// `g` (which reads the stages `keys` as its last arguments, in order)
    /// with those stages planned and added to `sources`.
    pub(super) fn read_stages(
        &mut self,
        g: IndexFn,
        keys: Vec<CutKey>,
        mut sources: Vec<Source>,
        use_wanted: bool,
    ) -> Result<(IndexFn, Vec<Source>), Error> {
        for key in keys {
            let sid = self.stage_for(key, use_wanted)?;
            sources.push(Source::Stage(sid));
        }
        Ok((g, sources))
    }

    /// `f` split by `phases` (on the CPU: a strided contraction as one
    /// stride-1 contraction per residue of its output index, each a stage),
    /// as the function reading the phases back and its sources; `None`
    /// when that does not apply.
    fn apply_phases(
        &mut self,
        f: &IndexFn,
        sources: &[Source],
        use_wanted: bool,
    ) -> Result<Option<(IndexFn, Vec<Source>)>, Error> {
        if self.target != Target::Cpu {
            return Ok(None);
        }
        let Some(plan) = phases::plan(f, self.target) else {
            return Ok(None);
        };
        let keys = plan
            .phases
            .iter()
            .map(|p| {
                let (cf, csrc) = canonical(p, sources);
                CutKey::new(cf, csrc)
            })
            .collect();
        self.read_stages(plan.reader, keys, sources.to_vec(), use_wanted)
            .map(Some)
    }

    /// `f` rewritten by `window` (a convolution-shaped contraction over
    /// constant ranges, its padded or windowed reads read back from
    /// stages), or `f` as it is when that does not apply or a read-back
    /// fails its bounds check.
    fn apply_window(
        &mut self,
        f: IndexFn,
        sources: Vec<Source>,
        use_wanted: bool,
    ) -> Result<(IndexFn, Vec<Source>), Error> {
        let Some(plan) = window::plan(&f, self.target) else {
            return Ok((f, sources));
        };
        let mut g = plan.f;
        let mut keys = Vec::new();
        for (node, c) in &plan.cuts {
            let (cf, csrc) = canonical(&c.stage, &sources);
            let key = CutKey::new(cf, csrc);
            g = read_back(&g, &[(*node, c.read.clone())], &key.f);
            keys.push(key);
        }
        if g.check_bounds().is_err() {
            return Ok((f, sources));
        }
        self.read_stages(g, keys, sources, use_wanted)
    }

    /// The nodes that qualify for a cut (see the module documentation):
    /// first the shared and known ones, top-down and maximal, then the
    /// rest, top-down.
    fn candidates(
        &self,
        f: &IndexFn,
        iv: &Intervals,
        keys: &mut Keys,
        use_wanted: bool,
        whole_gemm: bool,
    ) -> Vec<NodeId> {
        let g = &f.graph;
        let (mut first, mut then): (Vec<NodeId>, Vec<NodeId>) = (Vec::new(), Vec::new());
        let mut seen: HashSet<(NodeId, Vec<VarId>)> = HashSet::default();
        let out_loops: Vec<(VarId, u64)> = f
            .out_vars
            .iter()
            .zip(&f.out_shape)
            .map(|(&v, &n)| (v, n as u64))
            .collect();
        let many_contractions = keys.contractions() >= 2;
        // A product with a diagonal factor that the CPU's GEMM runs whole
        // keeps its factors inline (the GEMM scales while it packs).
        let scaled_gemm = is_scaled_gemm(f, self.target);
        // A GPU thread computes one output element: a node that does not
        // depend on every output index is computed again by each thread;
        // in a row-fused stage, a team computes it once per row.
        let pinned = match self.target {
            Target::Gpu => gpu_pinned(f, keys),
            Target::Cpu => 0,
        };
        let rows_fused = pinned < out_loops.len();
        // On the GPU, a function of few outputs that is not one long sum
        // (which `split_long_sum` spreads) runs a team per output: a long
        // reduction inside its reduction is a serial pass per term.
        let few_outputs = self.target == Target::Gpu
            && f.out_shape.iter().product::<usize>() <= SPLIT_MAX_OUTPUTS
            && !is_long_sum(f);
        let mut stack: Vec<(NodeId, Vec<(VarId, u64)>)> = vec![(f.root, out_loops)];
        while let Some((n, ctx)) = stack.pop() {
            if !keys.heavy(n) {
                // A guarded expression equal to a stage already planned
                // (the masked gradient a weight gradient cut) is read
                // back: it is computed anyway.
                if n != f.root
                    && matches!(g.node(n), Node::Select { .. })
                    && keys.get(n).is_some_and(|(k, _)| self.find(k).is_some())
                {
                    first.push(n);
                }
                continue;
            }
            let vars: Vec<VarId> = ctx.iter().map(|c| c.0).collect();
            if !seen.insert((n, vars)) {
                continue;
            }
            let eff = placement(g.free_vars(n), &ctx, pinned);
            // A reciprocal `1 / h` is not cut itself: `h` is (a forward
            // pass that keeps `1 / σ` and a derivative that needs `σ` then
            // share one stage; the division runs once per point of `h`).
            // Likewise a constant multiple `c · h`, `h / c`, `−h`: the mean
            // `Σ x · 2⁻⁹` and the row sum `Σ x` are one stage.
            let transparent = match g.node(n) {
                Node::Binary(BinaryOp::Div, a, _) => g.const_value(*a) == Some(1.0),
                Node::Binary(BinaryOp::Mul, a, b) => {
                    g.const_value(*a).is_some() || g.const_value(*b).is_some()
                }
                // A held-constant value is the value: `h` is cut.
                Node::Unary(UnaryOp::Neg | UnaryOp::Detach, _) => true,
                _ => false,
            } || matches!(g.node(n), Node::Binary(BinaryOp::Div, _, c) if g.const_value(*c).is_some());
            // A statistic of the row in a row-fused stage (hoisted to the
            // row, and depending on every index of it): the row's team
            // computes it there, once; it is read from a stage only when
            // this program has one already.
            let row_statistic =
                rows_fused && eff.len() == pinned && redundancy(g.free_vars(n), eff) == 1;
            if n != f.root && !transparent && row_statistic {
                if keys.get(n).is_some_and(|(k, _)| self.find(k).is_some()) {
                    first.push(n);
                    continue;
                }
            } else if n != f.root && !transparent {
                let costly = keys.point_cost(n) >= SHARED_MIN_COST;
                let known = keys.get(n).is_some_and(|(k, _)| {
                    self.find(k).is_some() || (use_wanted && costly && self.is_wanted(k))
                });
                let shared = costly && keys.shared(n);
                if known || shared {
                    first.push(n);
                    continue;
                }
                let redundant = redundancy(g.free_vars(n), eff) > 1;
                // A reduction inside a reduction over an index it does not
                // depend on (the row maximum inside a row's sum of
                // exponentials): hoisted, it runs once per row anyway, and
                // as a stage of its own it is computed once for every
                // place that needs it (the log-sum-exp and the maximum
                // beside it read one stage, not two passes over the row).
                let nested = matches!(g.node(n), Node::Reduce { .. })
                    && ctx[eff.len()..]
                        .iter()
                        .any(|(v, _)| !f.out_vars.contains(v));
                // A long reduction inside a reduction over an index it
                // depends on, in a function of few outputs (the label's
                // logit picked from each row of a mean loss): as a stage
                // it has an output per row, spread over teams.
                let spread = few_outputs
                    && matches!(g.node(n), Node::Reduce { .. })
                    && eff.iter().any(|(v, _)| !f.out_vars.contains(v))
                    && iv.trips.get(&n).is_some_and(|&t| t >= SPREAD_MIN_TERMS);
                // A contraction runs as a GEMM of its own unless it is the
                // one the route fuses with the element-wise work around it.
                // (A sum inside the one contraction of a function that is
                // itself a GEMM, the tap sum of `Σ_c Σ_k x[t + k]·w`, is not.)
                let own_gemm = keys.is_contraction(n)
                    && (many_contractions
                        || (!whole_gemm && !g.free_vars(n).iter().all(|v| f.out_vars.contains(v))));
                // Either way, the stage must not compute more points than
                // the places reading it evaluate (coordinates such as
                // `t + k` next to `t` can span a much larger box).
                let small = keys.domain(n).is_some_and(|d| d <= points(eff));
                // Recomputed, and read by several parents (`Σ df` in two
                // row terms of a variance's derivative): cut before the
                // parents are, or each parent's stage computes it again.
                if redundant && small && keys.uses(n) >= 2 {
                    first.push(n);
                    continue;
                }
                if (redundant || nested || own_gemm || spread) && small {
                    then.push(n);
                }
            }
            // A transparent node is never cut: its operand is placed as
            // it would be (the loops it was hoisted out of still count).
            let mut inner: Vec<(VarId, u64)> = if transparent {
                ctx.clone()
            } else {
                eff.to_vec()
            };
            let node = g.node(n).clone();
            if let Node::Reduce { var, body, op, .. } = &node {
                inner.push((*var, iv.trips.get(&n).copied().unwrap_or(1)));
                if *op == ReduceOp::Sum && !scaled_gemm {
                    let diagonal_gemm = self.target == Target::Cpu;
                    if let Some(x) = contraction_operand(f, *body, diagonal_gemm) {
                        let light = !keys.heavy(x);
                        let around = placement(g.free_vars(x), &inner, pinned);
                        if light
                            && redundancy(g.free_vars(x), around) > 1
                            && keys.domain(x).is_some_and(|d| d <= points(around))
                        {
                            then.push(x);
                        }
                    }
                }
            }
            for c in node.children().into_iter().rev() {
                stack.push((c, inner.clone()));
            }
        }
        // The costliest first: a row sum that contains a row maximum is cut
        // whole before the maximum alone (each stays equal to what a
        // derivative or a forward pass knows it as).
        let mut cost: HashMap<NodeId, u64> = HashMap::default();
        for &n in &first {
            cost.insert(n, keys.point_cost(n));
        }
        first.sort_by_key(|n| std::cmp::Reverse(cost[n]));
        first.extend(then);
        first
    }
}

/// A subexpression met twice, or one the forward pass could provide, is
/// cut only when computing it once per point costs at least this (roughly, simple operations): `exp(x[i; j] − m[i])`
/// is cheaper to recompute than to store and load again,
/// `exp(Σ_e q[i; e] · k[j; e])` is not.
const SHARED_MIN_COST: u64 = 32;

/// The cuts of every heavy node of `f` but its root (the forward
/// subexpressions a derivative may want to read instead of recomputing).
pub(crate) fn forward_cuts(f: &IndexFn, sources: &[Source]) -> Vec<CutKey> {
    let iv = Intervals::of(f);
    let mut cuts = Cuts::default();
    let mut keys = Keys::new(f, &iv, sources, &mut cuts);
    let mut out: Vec<CutKey> = Vec::new();
    for n in keys.heavy_nodes() {
        if let Some((k, _)) = keys.get(n) {
            if !out.iter().any(|o| o.same(k)) {
                out.push(k.clone());
            }
        }
    }
    out
}

/// The fewest terms of a reduction that the "spread" rule cuts out of a
/// function of few outputs (shorter ones cost less inline than a stage).
const SPREAD_MIN_TERMS: u64 = 256;

/// Rows shorter than this are left to a thread per output (a team of a
/// warp would idle).
const ROW_FUSED_MIN: usize = 256;
/// Rows longer than this are not fused: a team reads its row once per
/// statistic and once more for the values, and those passes should find
/// the row in cache.
const ROW_FUSED_MAX: usize = 16_384;
/// Fewer rows than this leave a row-fused launch's teams too few to fill
/// a GPU; their statistics are stages of their own, each spread alone.
const ROW_FUSED_ROWS: usize = 512;

/// The output loops a GPU stage's threads are pinned to (nothing is
/// hoisted out of them): all of them, or all but the innermost where the
/// function reads statistics of its rows (a heavy reduction depending on
/// outer output indices only, such as a softmax's maximum and sum or a
/// layer norm's mean and variance) and the rows suit a team
/// ([`ROW_FUSED_MIN`], [`ROW_FUSED_MAX`], [`ROW_FUSED_ROWS`]). The stage
/// then runs a team per row (`super::spread`), which computes the
/// statistics once and then the row's values: one pass over memory where
/// separate stages take one per statistic besides.
fn gpu_pinned(f: &IndexFn, keys: &Keys) -> usize {
    let n = f.out_vars.len();
    if n < 2 {
        return n;
    }
    let (row, rows) = (
        f.out_shape[n - 1],
        f.out_shape[..n - 1].iter().product::<usize>(),
    );
    if !(ROW_FUSED_MIN..=ROW_FUSED_MAX).contains(&row) || rows < ROW_FUSED_ROWS {
        return n;
    }
    let g = &f.graph;
    let statistic = keys.heavy_nodes().into_iter().any(|m| {
        let free = g.free_vars(m);
        matches!(g.node(m), Node::Reduce { .. })
            && !free.is_empty()
            && free.iter().all(|v| f.out_vars[..n - 1].contains(v))
    });
    if statistic {
        n - 1
    } else {
        n
    }
}

/// The loops around the place a node with free indices `free` is computed:
/// `ctx` up to the innermost loop over one of them (hoisting leaves the
/// loops inside that one), and at least its first `pinned` loops (the
/// output loops of a GPU kernel, which are its threads: nothing is hoisted
/// out of them).
fn placement<'a>(free: &[VarId], ctx: &'a [(VarId, u64)], pinned: usize) -> &'a [(VarId, u64)] {
    let d = ctx.iter().rposition(|(v, _)| free.contains(v));
    &ctx[..d.map_or(0, |d| d + 1).max(pinned.min(ctx.len()))]
}

/// How many points the loops `eff` iterate.
fn points(eff: &[(VarId, u64)]) -> u64 {
    eff.iter().fold(1u64, |acc, (_, t)| acc.saturating_mul(*t))
}

/// How often a node is recomputed for each value of its own indices: the
/// product of the trip counts of the loops around it over other indices.
fn redundancy(free: &[VarId], eff: &[(VarId, u64)]) -> u64 {
    eff.iter()
        .filter(|(v, _)| !free.contains(v))
        .fold(1u64, |acc, (_, t)| acc.saturating_mul(*t))
}

/// `f` with each listed node replaced by a read of a new argument (the
/// stage `stage`) at its index.
pub(super) fn read_back(
    f: &IndexFn,
    occurrences: &[(NodeId, Vec<crate::symbolic::Affine>)],
    stage: &IndexFn,
) -> IndexFn {
    let mut g = f.clone();
    let arg = g.args.len();
    g.args.push(ArgDecl {
        name: fresh_name(f, "stage"),
        shape: stage.output_shape().to_vec(),
    });
    for (n, read) in occurrences {
        let access = g.graph.access(arg, read.clone());
        g.root = replace(&mut g.graph, g.root, *n, access);
    }
    g
}

fn fresh_name(f: &IndexFn, base: &str) -> String {
    (0..)
        .map(|k| format!("{base}{k}"))
        .find(|n| f.args().iter().all(|a| &a.name != n))
        .unwrap_or_else(|| base.to_string())
}

/// A hash that agrees with alpha-equivalence of functions: their shapes,
/// sources and the shape hash of their bodies.
fn fingerprint(f: &IndexFn, sources: &[Source]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    f.output_shape().hash(&mut h);
    sources.hash(&mut h);
    for a in f.args() {
        a.shape.hash(&mut h);
    }
    ShapeHashes::default().of(&f.graph, f.root).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::{canonical, Source};
    use crate::symbolic::IndexFn;

    /// Two arguments reading one source, the function reading only the
    /// second: the canonical function reads the one argument kept (a
    /// double backward once read its first input where it meant a stage).
    #[test]
    fn a_read_of_a_duplicated_source_keeps_its_argument() {
        let f = IndexFn::parse(
            "f[i] = x[i] * b[i]",
            &[("x", &[4][..]), ("a", &[4][..]), ("b", &[4][..])],
        )
        .unwrap();
        let sources = [Source::Input(0), Source::Stage(1), Source::Stage(1)];
        let (g, kept) = canonical(&f, &sources);
        assert_eq!(kept, vec![Source::Input(0), Source::Stage(1)]);
        assert_eq!(g.args().len(), 2);
        assert_eq!(g.to_string(), "f[i] = in0[i] * s1[i]");
    }
}
