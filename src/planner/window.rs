//! Convolution-shaped contractions, made GEMM-shaped.
//!
//! Owns [`plan`]: the rewrite that turns a sum of a product of two reads
//! whose *ranges* or *guards* follow the output index, or whose reads are
//! *windows* (`x[n; c; s·t + d·k]`), into a contraction with constant
//! ranges over stages the planner materialises. The three functions of a
//! convolution are all of this kind, written by the `conv` ops or by hand:
//!
//! | function | what makes it irregular | rewritten to |
//! | --- | --- | --- |
//! | padded forward `Σ_c Σ_k [0 ≤ t + k − p < T] x[n; c; t + k − p] · w[o; c; k]` | zero padding as guards | the guarded read as a stage (a padded copy, or im2col), then one GEMM |
//! | weight gradient `Σ_n Σ_{t ∈ [max(0, p − k), min(T′ − 1, T − 1 + p − k)]} x[n; c; t + k − p] · dy[n; o; t]` | bounds follow the tap `k` | the same guarded read (the same im2col stage as the forward), then one GEMM |
//! | input gradient, stride 1 `Σ_o Σ_{k ∈ [max(0, u − T′ + 1), min(K − 1, u)]} w[o; c; k] · dy[n; o; u − k]` | bounds follow the position `u` | a zero-padded `dy`, then one GEMM per tap (or im2col) |
//! | unpadded forward `Σ_c Σ_k x[n; c; t + k] · w[o; c; k]` | a window | one GEMM per tap over a shifted view (no copy), or im2col |
//!
//! **The rewrite is exact.** Each sum runs over its constant hull (the
//! interval of its values over the whole domain) and every bound that is
//! not constant becomes a guard `e ≥ 0`; every guard is then attached to
//! the read whose indices it constrains (all its variables appear there),
//! as a zero outside it. `Σ_{z ∈ R} a · b = Σ_{z ∈ hull} [z ∈ R] a · b`
//! and `[c_a ∧ c_b] a · b = ([c_a] a) · ([c_b] b)`. The one difference is
//! IEEE: a padding zero times an infinite weight is NaN, as in PyTorch's
//! own convolutions, where the unrewritten sum skipped the term.
//!
//! **When.** The hull may hold many more terms than the ranges (the input
//! gradient of a strided convolution solves `k = u − s·t` for a sparse set
//! of `t`): the rewrite is refused when the hull has more than
//! [`MAX_HULL_EXCESS`] times the terms the ranges and guards keep, counted
//! exactly at sample points of the output. That case is left to `extract`,
//! which materialises the inner contraction over its coordinates and reads
//! it back through the solved ranges (col2im).
//!
//! **How to materialise** a guarded or windowed read is chosen per shape
//! by a cost model of the GEMM calls it leaves ([`cost_ns`]): keep it as a
//! strided view (a GEMM per tap, no copy), copy it zero-padded over its own
//! index (`cut`), or copy it over its variables, taps before positions
//! (im2col: one large GEMM). Long rows (`conv1d` over 1024 steps) favour
//! the view, short ones (a 32×32 image) im2col. A contraction with few
//! terms per output element (a depthwise convolution's 9 taps) stays a
//! loop nest: the rewrite is refused when the model puts the loop first.
//!
//! Must not decide anything else about the function (it returns a plan that
//! `extract` applies) and must not change the function it is given.

use super::contraction::{self, Contraction};
use super::cut::{cut, Cut};
use super::route::Target;
use crate::symbolic::affine::{Affine, RatAffine, VarId};
use crate::symbolic::expr::{BinaryOp, CmpOp, Cond, Node, NodeId, Range, ReduceOp, UnaryOp};
use crate::symbolic::intervals::Intervals;
use crate::symbolic::subst::replace;
use crate::symbolic::IndexFn;
use rustc_hash::FxHashMap as HashMap;

/// The hull of the sums may hold at most this many times the terms their
/// ranges and guards keep.
pub(crate) const MAX_HULL_EXCESS: f64 = 1.5;

/// A rewrite (see the module documentation): the function with its
/// contraction over constant hulls, and the reads to materialise.
pub(crate) struct WindowPlan {
    pub f: IndexFn,
    /// The operand nodes of `f` to cut, with their cuts.
    pub cuts: Vec<(NodeId, Cut)>,
}

/// `s · Σ_{z…} [guards] (a · b)` as parsed from a node.
struct Chain {
    top: NodeId,
    scale: f64,
    sums: Vec<(VarId, Range)>,
    guards: Vec<Cond>,
    reads: [NodeId; 2],
}

/// A condition on indices: `form ≥ 0` (normalised), or any other.
#[derive(Clone, Debug)]
enum Condition {
    AtLeastZero(Affine),
    Other(Cond),
}

impl Condition {
    fn vars(&self) -> Vec<VarId> {
        match self {
            Condition::AtLeastZero(a) => a.vars().collect(),
            Condition::Other(Cond::Index(r, _) | Cond::IsInt(r)) => r.vars().collect(),
            Condition::Other(Cond::Value(..)) => Vec::new(),
        }
    }

    fn cond(&self) -> Cond {
        match self {
            Condition::AtLeastZero(a) => Cond::Index(RatAffine::integer(a.clone()), CmpOp::Ge),
            Condition::Other(c) => c.clone(),
        }
    }
}

/// How one operand of the rewritten contraction is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Materialise {
    /// As a strided view of its argument (no stage).
    View,
    /// A stage over its own index (a zero-padded copy).
    Padded,
    /// A stage over its variables, taps first (im2col).
    Columns,
}

/// The rewrite of `f` (see the module documentation), or `None` when `f`
/// has no convolution-shaped contraction, or one better left as it is.
pub(crate) fn plan(f: &IndexFn, target: Target) -> Option<WindowPlan> {
    let chain = find_chain(f)?;
    let iv = &Intervals::of(f);
    let g = &f.graph;
    let windowed = chain.reads.iter().any(|&r| is_window(g, r));

    // Every sum over its hull; bounds that are not constant become guards.
    let mut conditions: Vec<Condition> = Vec::new();
    let mut hulls: Vec<(VarId, i64, i64)> = Vec::new();
    for (var, range) in &chain.sums {
        let &(lo, hi) = iv.vars.get(var)?;
        let (lo, hi) = (i64::try_from(lo).ok()?, i64::try_from(hi).ok()?);
        if hi < lo || hi - lo > 1 << 24 {
            return None;
        }
        hulls.push((*var, lo, hi));
        for b in range.lower.iter().filter(|b| !b.num.is_constant()) {
            // z ≥ ⌈num / den⌉  ⟺  den·z − num ≥ 0
            let e = Affine::var(*var).scale(b.den).ok()?.sub(&b.num).ok()?;
            conditions.push(Condition::AtLeastZero(e));
        }
        for b in range.upper.iter().filter(|b| !b.num.is_constant()) {
            let e = b.num.sub(&Affine::var(*var).scale(b.den).ok()?).ok()?;
            conditions.push(Condition::AtLeastZero(e));
        }
    }
    for c in &chain.guards {
        conditions.extend(normalise(c)?);
    }
    let mut conditions: Vec<Condition> = conditions
        .into_iter()
        .filter_map(|c| simplify(c, iv))
        .collect::<Option<Vec<_>>>()?;
    conditions.sort_by_key(condition_key);
    conditions.dedup_by_key(|c| condition_key(c));
    if conditions.is_empty() && !windowed {
        return None; // a plain contraction: `contraction::detect` takes it
    }

    // Each condition guards the read whose indices it constrains.
    let read_vars: Vec<Vec<VarId>> = chain
        .reads
        .iter()
        .map(|&r| g.free_vars(r).to_vec())
        .collect();
    let mut guards: [Vec<Condition>; 2] = [Vec::new(), Vec::new()];
    for c in conditions {
        let vars = c.vars();
        let side = (0..2).find(|&s| vars.iter().all(|v| read_vars[s].contains(v)))?;
        guards[side].push(c);
    }
    if hull_excess(f, &chain, &hulls)? > MAX_HULL_EXCESS {
        return None;
    }

    // The contraction over the hulls, each read behind its guards.
    let mut h = f.clone();
    let gr = &mut h.graph;
    let mut reads = chain.reads;
    for (read, conds) in reads.iter_mut().zip(&guards) {
        for c in conds.iter().rev() {
            let zero = gr.constant(0.0);
            *read = gr.select(c.cond(), *read, zero);
        }
    }
    let mut body = gr.mul(reads[0], reads[1]);
    for &(var, lo, hi) in hulls.iter().rev() {
        body = gr.reduce(ReduceOp::Sum, var, Range::constant(lo, hi), body);
    }
    if chain.scale != 1.0 {
        let s = gr.constant(chain.scale);
        body = gr.mul(s, body);
    }
    h.root = replace(gr, h.root, chain.top, body);
    h.check_bounds().ok()?;

    // How to read each operand: the cheapest combination.
    let hiv = Intervals::of(&h);
    let options = |s: usize| -> Vec<Materialise> {
        let guarded = !guards[s].is_empty();
        let mut o = Vec::new();
        if !guarded {
            o.push(Materialise::View);
        }
        if guarded {
            o.push(Materialise::Padded);
        }
        if guarded || is_window(&h.graph, chain.reads[s]) {
            o.push(Materialise::Columns);
        }
        o
    };
    let mut best: Option<(f64, Vec<(NodeId, Cut)>)> = None;
    for ma in options(0) {
        for mb in options(1) {
            let mut cuts = Vec::new();
            let mut ok = true;
            for (s, m) in [(0, ma), (1, mb)] {
                let cut = match m {
                    Materialise::View => continue,
                    Materialise::Padded => cut(&h, &hiv, reads[s]),
                    Materialise::Columns => columns(&h, &hiv, reads[s], &guards[s], target),
                };
                match cut {
                    Some(c) => cuts.push((reads[s], c)),
                    None => ok = false,
                }
            }
            if !ok {
                continue;
            }
            let Some(cost) = plan_cost(&h, body, &cuts, target) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, cuts));
            }
        }
    }
    let (cost, cuts) = best?;
    if cuts.is_empty() && conditions_free(&guards) {
        return None; // the function is already the best plan
    }
    // Few terms per output element (a depthwise convolution sums 9): the
    // loop nest, vectorised along the output row, beats GEMM calls with a
    // tiny K.
    let terms = f.out_shape.iter().map(|&d| d as f64).product::<f64>()
        * hulls
            .iter()
            .map(|&(_, lo, hi)| (hi - lo + 1) as f64)
            .product::<f64>();
    if terms * LOOP_NS_PER_TERM <= cost {
        return None;
    }
    Some(WindowPlan { f: h, cuts })
}

fn conditions_free(guards: &[Vec<Condition>; 2]) -> bool {
    guards.iter().all(|g| g.is_empty())
}

/// The outermost sum chain of `f` that computes a whole output element:
/// the root, or a sum under an element-wise epilogue.
fn find_chain(f: &IndexFn) -> Option<Chain> {
    let g = &f.graph;
    let mut stack = vec![f.root];
    while let Some(n) = stack.pop() {
        if let Some(c) = parse_chain(f, n) {
            if g.free_vars(n).iter().all(|v| f.out_vars.contains(v)) {
                return Some(c);
            }
        }
        match g.node(n) {
            Node::Reduce { .. } => {}
            node => stack.extend(node.children().into_iter().rev()),
        }
    }
    None
}

fn parse_chain(f: &IndexFn, top: NodeId) -> Option<Chain> {
    let g = &f.graph;
    let mut scale = 1.0;
    let (mut sums, mut guards) = (Vec::new(), Vec::new());
    let mut node = top;
    loop {
        if let Some(inner) = contraction::peel_constant(f, node, &mut scale)? {
            node = inner;
            continue;
        }
        match g.node(node) {
            Node::Reduce {
                op: ReduceOp::Sum,
                var,
                range,
                body,
            } => {
                sums.push((*var, range.clone()));
                node = *body;
            }
            Node::Select {
                cond: cond @ (Cond::Index(..) | Cond::IsInt(_)),
                then,
                otherwise,
            } if g.const_value(*otherwise) == Some(0.0) => {
                guards.push(cond.clone());
                node = *then;
            }
            _ => break,
        }
    }
    if sums.is_empty() {
        return None;
    }
    let mut reads = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        match g.node(n) {
            Node::Access { .. } if reads.len() < 2 => reads.push(n),
            Node::Const(_) => scale *= g.const_value(n)?,
            Node::Unary(UnaryOp::Neg, x) => {
                scale = -scale;
                stack.push(*x);
            }
            Node::Binary(BinaryOp::Mul, x, y) => {
                stack.push(*y);
                stack.push(*x);
            }
            _ => return None,
        }
    }
    let [a, b] = reads[..] else { return None };
    (scale.is_finite() && scale != 0.0).then_some(Chain {
        top,
        scale,
        sums,
        guards,
        reads: [a, b],
    })
}

/// Whether a read has a dimension over two or more indices (a window).
fn is_window(g: &crate::symbolic::Graph, read: NodeId) -> bool {
    let mut n = read;
    while let Node::Select { then, .. } = g.node(n) {
        n = *then;
    }
    matches!(g.node(n), Node::Access { index, .. } if index.iter().any(|d| d.terms.len() >= 2))
}

/// A guard as conditions `form ≥ 0` where it is an inequality.
fn normalise(c: &Cond) -> Option<Vec<Condition>> {
    let Cond::Index(r, op) = c else {
        return Some(vec![Condition::Other(c.clone())]);
    };
    let n = &r.num; // the denominator is positive
    let neg = n.scale(-1).ok()?;
    Some(match op {
        CmpOp::Ge => vec![Condition::AtLeastZero(n.clone())],
        CmpOp::Gt => vec![Condition::AtLeastZero(n.add_const(-1).ok()?)],
        CmpOp::Le => vec![Condition::AtLeastZero(neg)],
        CmpOp::Lt => vec![Condition::AtLeastZero(neg.add_const(-1).ok()?)],
        CmpOp::Eq => vec![
            Condition::AtLeastZero(n.clone()),
            Condition::AtLeastZero(neg),
        ],
        CmpOp::Ne => vec![Condition::Other(c.clone())],
    })
}

/// `c` with its coefficients divided by their gcd (`2·z + 3 ≥ 0` is
/// `z + 1 ≥ 0` over the integers); `None` (dropped) when it holds on the
/// whole box of `iv`; `Some(None)` when it never can.
fn simplify(c: Condition, iv: &Intervals) -> Option<Option<Condition>> {
    let Condition::AtLeastZero(a) = c else {
        return Some(Some(c));
    };
    let g = a.coeff_gcd() as i64;
    let a = if g > 1 {
        Affine::from_terms(
            a.terms.iter().map(|&(v, k)| (v, k / g)),
            a.constant.div_euclid(g),
        )
        .ok()?
    } else {
        a
    };
    match iv.of_affine(&a) {
        Some((lo, _)) if lo >= 0 => None,
        _ => Some(Some(Condition::AtLeastZero(a))),
    }
}

/// Conditions in a fixed order (their forms), so equal guards built from
/// different functions come out equal.
fn condition_key(c: &Condition) -> (u8, Vec<(u32, i64)>, i64) {
    match c {
        Condition::AtLeastZero(a) => (
            0,
            a.terms.iter().map(|(v, k)| (v.0, *k)).collect(),
            a.constant,
        ),
        Condition::Other(_) => (1, Vec::new(), 0),
    }
}

/// The hull's terms over the terms the original ranges and guards keep,
/// summed over up to 64 output points spread over the domain.
fn hull_excess(f: &IndexFn, chain: &Chain, hulls: &[(VarId, i64, i64)]) -> Option<f64> {
    let per_point: u64 = hulls.iter().try_fold(1u64, |acc, &(_, lo, hi)| {
        acc.checked_mul((hi - lo + 1) as u64)
    })?;
    let total: u64 = f.out_shape.iter().map(|&d| d as u64).product();
    if total == 0 || per_point == 0 {
        return Some(1.0);
    }
    let samples = total.min(64).min((1 << 22) / per_point.max(1)).max(1);
    let (mut hull, mut kept) = (0u64, 0u64);
    let mut env: HashMap<VarId, i64> = HashMap::default();
    for s in 0..samples {
        let mut flat = if samples > 1 {
            s * (total - 1) / (samples - 1)
        } else {
            0
        };
        for (&v, &d) in f.out_vars.iter().zip(&f.out_shape).rev() {
            env.insert(v, (flat % d as u64) as i64);
            flat /= d as u64;
        }
        hull += per_point;
        kept += count_terms(chain, 0, &mut env)?;
    }
    Some(if kept == 0 {
        f64::INFINITY
    } else {
        hull as f64 / kept as f64
    })
}

/// The terms of the sums from `level` in that the original ranges and
/// guards keep, at the index values `env`.
fn count_terms(chain: &Chain, level: usize, env: &mut HashMap<VarId, i64>) -> Option<u64> {
    let (lo, hi) = {
        let at = |v: VarId| env.get(&v).copied().unwrap_or(0);
        let Some((_, range)) = chain.sums.get(level) else {
            let holds = chain.guards.iter().all(|c| match c {
                Cond::Index(r, op) => r.num.eval(&at).is_ok_and(|x| op.holds(x, 0)),
                Cond::IsInt(r) => r.is_int_at(&at).unwrap_or(false),
                Cond::Value(..) => true,
            });
            return Some(holds as u64);
        };
        let lo = range.lower.iter().map(|b| b.eval_ceil(&at).ok()).max()??;
        let hi = range.upper.iter().map(|b| b.eval_floor(&at).ok()).min()??;
        (lo, hi)
    };
    let var = chain.sums[level].0;
    let mut n = 0u64;
    for z in lo..=hi {
        env.insert(var, z);
        n += count_terms(chain, level + 1, env)?;
    }
    env.remove(&var);
    Some(n)
}

/// The read `read` (an access behind the guards `conds`) as a stage over
/// its variables: those of the dimensions before the first window, then
/// the taps of every window, then the positions and the rest, each over
/// its range in `iv` (im2col). A window's position is its variable with
/// the longest range (ties: the larger coefficient); the others are taps.
///
/// On the GPU the first of the dimensions before the windows (the batch
/// of images) goes after the taps, just before the positions:
/// `[c; kh; kw; n; y; x]`. cuBLAS then takes every product of the
/// convolution in one call with no copy of the columns: the forward's
/// `K = (c, kh, kw)` and the weight gradient's `K = (n, y, x)` are each
/// one dimension of uniform stride (in `[n; c; kh; kw; y; x]` the weight
/// gradient's `n` and `(y, x)` are not, and its columns were copied again
/// in another order, the largest copy of a convolution's step).
fn columns(
    f: &IndexFn,
    iv: &Intervals,
    read: NodeId,
    conds: &[Condition],
    target: Target,
) -> Option<Cut> {
    let g = &f.graph;
    let mut n = read;
    while let Node::Select { then, .. } = g.node(n) {
        n = *then;
    }
    let Node::Access { arg, index } = g.node(n) else {
        return None;
    };
    let len = |v: VarId| iv.vars.get(&v).map(|&(lo, hi)| hi - lo + 1);
    let (mut lead, mut taps, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen_window = false;
    for form in index {
        let mut vars: Vec<(VarId, i64)> = form.terms.clone();
        if vars.len() >= 2 {
            seen_window = true;
            vars.sort_by_key(|&(v, c)| (std::cmp::Reverse(len(v)), std::cmp::Reverse(c.abs())));
            taps.extend(vars[1..].iter().map(|p| p.0));
            rest.push(vars[0].0);
        } else if let Some(&(v, _)) = vars.first() {
            if seen_window {
                rest.push(v);
            } else {
                lead.push(v);
            }
        }
    }
    if target == Target::Gpu && lead.len() >= 2 {
        let batch = lead.remove(0);
        rest.insert(0, batch);
    }
    let order: Vec<VarId> = lead.into_iter().chain(taps).chain(rest).collect();
    for (i, v) in order.iter().enumerate() {
        if order[..i].contains(v) {
            return None; // a variable in two dimensions
        }
    }
    if order.len() != g.free_vars(read).len() {
        return None;
    }

    // s[q…] = [conds] arg[index], with every variable v = q + lo(v).
    let mut var_names = f.var_names.clone();
    let mut map: HashMap<VarId, Affine> = HashMap::default();
    let (mut q, mut shape, mut lows) = (Vec::new(), Vec::new(), Vec::new());
    for (j, &v) in order.iter().enumerate() {
        let &(lo, hi) = iv.vars.get(&v)?;
        let qv = VarId(var_names.len() as u32);
        var_names.push(format!("s_{j}"));
        let lo = i64::try_from(lo).ok()?;
        map.insert(v, Affine::var(qv).add_const(lo).ok()?);
        q.push(qv);
        shape.push(usize::try_from(hi - lo as i128 + 1).ok()?);
        lows.push(lo);
    }
    let mut graph = crate::symbolic::Graph::new();
    let sub = |a: &Affine| a.substitute(&|v| map.get(&v).cloned()).ok();
    let index: Vec<Affine> = index.iter().map(sub).collect::<Option<_>>()?;
    let mut body = graph.access(*arg, index);
    let mut conds: Vec<Condition> = conds
        .iter()
        .map(|c| {
            Some(match c {
                Condition::AtLeastZero(a) => Condition::AtLeastZero(sub(a)?),
                Condition::Other(_) => return None,
            })
        })
        .collect::<Option<_>>()?;
    conds.sort_by_key(condition_key);
    for c in conds.iter().rev() {
        let zero = graph.constant(0.0);
        body = graph.select(c.cond(), body, zero);
    }
    let stage = IndexFn {
        name: "s".into(),
        out_vars: q,
        out_shape: shape,
        args: f.args.clone(),
        var_names,
        graph,
        root: body,
    };
    stage.check_bounds().ok()?;
    let read = order
        .iter()
        .zip(&lows)
        .map(|(&v, &lo)| Affine::var(v).add_const(-lo).ok())
        .collect::<Option<Vec<_>>>()?;
    Some(Cut { stage, read })
}

/// The estimated time (ns) of the contraction `body` of `f` with the
/// reads `cuts` replaced by their stages: its GEMM calls on `target` and
/// the copies.
fn plan_cost(f: &IndexFn, body: NodeId, cuts: &[(NodeId, Cut)], target: Target) -> Option<f64> {
    let mut h = IndexFn {
        root: body,
        ..f.clone()
    };
    let mut copied = 0usize;
    for (node, c) in cuts {
        let arg = h.args.len();
        h.args.push(crate::symbolic::ArgDecl {
            name: format!("stage{arg}"),
            shape: c.stage.output_shape().to_vec(),
        });
        let access = h.graph.access(arg, c.read.clone());
        h.root = replace(&mut h.graph, h.root, *node, access);
        copied += c.stage.output_shape().iter().product::<usize>();
    }
    let plan = contraction::detect(&h)?;
    Some(cost_ns(&plan, copied, target))
}

/// GEMM throughput per core (flops per ns), packing cost per operand
/// element and fixed cost per call (ns), and the cost of writing and
/// reading back one copied element (ns): rough values for one AVX2 core,
/// measured with the `gemm` crate (about 45–55 GFLOP/s on `bench/conv.sh`'s
/// shapes; tenjin's own GEMM runs those shapes at least as fast).
const FLOPS_PER_NS: f64 = 50.0;
const PACK_NS: f64 = 0.5;
const CALL_NS: f64 = 1000.0;
const COPY_NS: f64 = 1.0;
/// The cost of one term of a vectorised loop nest (ns), for comparison.
const LOOP_NS_PER_TERM: f64 = 0.5;

/// The cost model of one plan: every GEMM call packs its operands and runs
/// its flops; every copied element is written once and read once. The
/// CPU's GEMM sums every term in one product and folds the batch into M
/// and N where it can (`Contraction::folded_shape`: a window over a padded
/// copy is one product per image); a GPU makes a call per batch point and
/// per point of the outer sums.
fn cost_ns(plan: &Contraction, copied: usize, target: Target) -> f64 {
    let [calls, m, n, k] = plan.gemm_shape_on(target).map(|x| x as f64);
    let call = 2.0 * m * n * k / FLOPS_PER_NS + (m * k + k * n) * PACK_NS + CALL_NS;
    calls * call + copied as f64 * COPY_NS
}
