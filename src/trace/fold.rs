//! The backward pass's folds: a pointwise gradient computed by the step
//! that produces its input, and a term of a sum of gradients added by
//! the step computing it.
//!
//! `q.matmul(&k_t)?.mul_scalar(s)?` records a node whose derivative is
//! `s · df`: one pass over the gradient of the scores, which the step
//! before it (the softmax's backward) wrote in a pass of its own. With
//! fusion on for the device ([`crate::runtime::fusion`]), the schedule
//! folds such a step into the one producing its input: the producer's
//! stage computes `φ(its value)` ([`IndexFn::map_output`]), the pointwise
//! step passes its input on, and a pass over the gradient is saved
//! (PyTorch's inductor does the same: `fused__softmax_backward_data_div`).
//! A producer that is a GEMM takes a constant factor as its scale.
//!
//! A step that reads values its node saved as well, element for element
//! (`tanh`'s `(1 − y²)·df`, a product's `b·df`, a sigmoid's), folds the
//! same way into a producer running generated code: the producer's value
//! is fed to it ([`IndexFn::feed_into`]) and the producer's stage reads
//! those saved values too (`Val::SavedBy`; they are alive then, since
//! their node releases them after its own step, which comes later). A
//! chain of element-wise ops thus gets one backward kernel from the
//! gradient reaching its end to the first step that several consumers
//! feed or that is not element-wise.
//!
//! | rule | why |
//! | --- | --- |
//! | the step is its node's only step, runs generated code, and either reads the incoming gradient alone as a pointwise map of it ([`IndexFn::is_pointwise_map`]), or reads it and its node's saved values, each element for element with no reduction ([`IndexFn::feeds_elementwise`]) | it reads nothing but the producer's value and values alive at the producer's step, at the producer's own index |
//! | exactly one edge feeds its node, directly or through nodes whose only step passes the gradient on (an addition's, a reshape's) | no other gradient is summed into the value it maps |
//! | the producing step runs generated code or a GEMM, delivers to that edge alone, and no later step of its node reads its value | the value exists only to be mapped |
//! | both compute the same dtype on the same device, and the composed stage takes the producer's route | a GEMM with a loop epilogue would write and read the value as the two steps do |
//! | a step reading saved values folds only into generated code of its own shape, reading fewer than [`MAX_FOLDED_ARGS`] arguments in all | cuBLAS takes a scale, not an expression; the arguments of a chain add up |
//! | no window's step (a node with a `Placement`) is passed through, nor adds a sum in a kernel | its gradient is a block (or strided elements) of its target's, placed by the interpreter |
//!
//! **Sums of gradients.** A value read twice gets the sum of two
//! gradients (a residual stream: the addition's, passed on, and the layer
//! norm's input gradient); the second term's step would write its value
//! and a built-in addition would then read it and the first. With fusion
//! on, a step that delivers a later term of a sum takes the sum so far as
//! a last input and adds it in its kernel (`f[i…] + sum[i…]`,
//! `IndexFn::add_fn`), writing over it when nobody else holds it
//! (`Step::into`): the term is never written on its own. A loop kernel
//! adds it as it stores; a GEMM on a GPU (three GEMMs give the gradient
//! of the input that `q`, `k` and `v` share) with cuBLAS's `beta = 1`
//! (`Contraction::accumulate`). Where the composed stage would take
//! another route (a GEMM with an epilogue on the CPU), nothing folds.
//! A leaf's gradient, summed aside until the backward commits it, takes
//! its later terms the same way (`SumInto::Leaf`), also when a term
//! reaches the leaf through a step that passes on a producer's value (a
//! folded step's): the producer's kernel adds the sum, provided nothing
//! else reads that value and no other term reaches the leaf between the
//! two steps.
//!
//! A schedule is `Tensor::backward`'s, which gives leaves their
//! gradients and nothing else: the values passed on in between are never
//! observed. Must not change when a value is released (the memory plan
//! replays the same schedule); a fold may make a step read another
//! node's saved value earlier than that node's own step does.
//!
//! [`IndexFn::map_output`]: crate::symbolic::IndexFn::map_output
//! [`IndexFn::is_pointwise_map`]: crate::symbolic::IndexFn::is_pointwise_map
//! [`IndexFn::feed_into`]: crate::symbolic::IndexFn::feed_into
//! [`IndexFn::feeds_elementwise`]: crate::symbolic::IndexFn::feeds_elementwise

use super::schedule::{Prog, Step, SumInto, Val};
use super::{Node, Origin};
use crate::kernel::RouteKind;
use crate::runtime::{self, CompiledKernel};
use crate::symbolic::IndexFn;
use crate::Error;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Every fold the rules allow, in `steps` (schedule order, their
/// `passes`, `kept` and `deliver` set): pointwise and element-wise steps
/// into their producers, then later terms of sums into the kernels
/// computing them. Nothing is looked at when no step's device fuses (the
/// CPU's default): a schedule is built on every backward.
pub(super) fn fold(
    steps: &mut [Step],
    nodes: &[Arc<Node>],
    targets: &[Vec<Option<usize>>],
) -> Result<(), Error> {
    if !steps.iter().any(|st| runtime::fusion(st.kernel.device())) {
        return Ok(());
    }
    // Who feeds whom and who delivers what: the folds change neither.
    let graph = Graph::new(steps, nodes, targets);
    fold_pointwise(steps, &graph)?;
    fold_accumulations(steps, nodes, targets, &graph)
}

/// Folds every pointwise gradient step the rules allow into its producer
/// (`steps` in schedule order, their `passes`, `kept` and `deliver` set).
fn fold_pointwise(steps: &mut [Step], graph: &Graph) -> Result<(), Error> {
    for k in 0..steps.len() {
        let Some(how) = fold_of(&steps[k], graph) else {
            continue;
        };
        let Some(p) = graph.producer(steps, steps[k].node) else {
            continue;
        };
        let (made, map) = (&steps[p].kernel, &steps[k].kernel);
        if made.dtype() != map.dtype() || made.device() != map.device() {
            continue;
        }
        let df = match how {
            Fold::Map => 0,
            Fold::Feed(df)
                if made.route() == RouteKind::Jit
                    && made.output_shape() == map.output_shape()
                    && fits(&steps[p], &steps[k]) =>
            {
                df
            }
            Fold::Feed(_) | Fold::Sum => continue,
        };
        if let Some(folded) = folded(made, how, Some(map))? {
            let node = steps[k].node;
            let reads: Vec<Val> = steps[k]
                .inputs
                .iter()
                .filter_map(|v| match *v {
                    Val::Saved(slot) => Some(Val::SavedBy(node, slot)),
                    _ => None,
                })
                .collect();
            steps[p].kernel = folded;
            steps[p].inputs.extend(reads);
            steps[k].passes = Some(df);
            steps[k].in_place = None;
        }
    }
    Ok(())
}

/// Gives every step that delivers a term of a sum of gradients, after the
/// first term, a kernel that adds its value to the sum so far (see the
/// module documentation): `Step::into`.
fn fold_accumulations(
    steps: &mut [Step],
    nodes: &[Arc<Node>],
    targets: &[Vec<Option<usize>>],
    graph: &Graph,
) -> Result<(), Error> {
    let mut reached = vec![false; nodes.len()];
    // Leaves reached, by address (several nodes' edges may lead to one),
    // and the last step delivering to each.
    let mut reached_leaves: HashMap<usize, usize> = HashMap::new();
    for k in 0..steps.len() {
        let st = &steps[k];
        let to: Vec<usize> = st
            .deliver
            .iter()
            .filter_map(|&e| targets[st.node][e])
            .collect();
        let leaves: Vec<(usize, usize)> = st
            .deliver
            .iter()
            .filter(|&&e| targets[st.node][e].is_none())
            .filter_map(|&e| leaf_address(nodes, st.node, e).map(|a| (e, a)))
            .collect();
        // A window's gradient is placed in a block of the sum, by the
        // interpreter: no kernel adds it.
        let placed = graph.placed[st.node];
        let into = match (&to[..], &leaves[..]) {
            _ if placed => None,
            ([t], []) if reached[*t] => Some(SumInto::Node(*t)),
            ([], [(edge, a)]) if reached_leaves.contains_key(a) => Some(SumInto::Leaf {
                node: st.node,
                edge: *edge,
            }),
            _ => None,
        };
        if let (Some(into), 1) = (into, st.deliver.len()) {
            if st.passes.is_none() {
                add_in_kernel(&mut steps[k], into)?;
            } else if let (SumInto::Leaf { .. }, [(_, a)], 1) =
                (into, &leaves[..], graph.steps_of[st.node])
            {
                // The value passed on to the leaf is a producer's (and
                // nothing else of this node reads it): that kernel adds
                // the sum when no delivery to the leaf comes between the
                // two steps.
                if let Some(p) = graph.producer(steps, steps[k].node) {
                    if reached_leaves[a] < p && add_in_kernel(&mut steps[p], into)? {
                        steps[k].into = Some(into);
                    }
                }
            }
        }
        to.iter().for_each(|&t| reached[t] = true);
        reached_leaves.extend(leaves.iter().map(|&(_, a)| (a, k)));
    }
    Ok(())
}

/// Gives `st` a kernel adding its value to the gradient `into` sums, when
/// the rules allow (see the module documentation): whether it did.
fn add_in_kernel(st: &mut Step, into: SumInto) -> Result<bool, Error> {
    let allowed = st.into.is_none()
        && !st.kept
        && st.passes.is_none()
        && matches!(st.kernel.route(), RouteKind::Jit | RouteKind::Gemm)
        && !st.kernel.output_shape().is_empty()
        && runtime::fusion(st.kernel.device());
    if !allowed {
        return Ok(false);
    }
    let Some(k) = folded(&st.kernel, Fold::Sum, None)? else {
        return Ok(false);
    };
    st.kernel = k;
    st.into = Some(into);
    st.in_place = None;
    Ok(true)
}

/// The address of the leaf at edge `e` of node `i`, if it leads to one.
fn leaf_address(nodes: &[Arc<Node>], i: usize, e: usize) -> Option<usize> {
    match &nodes[i].edges[e] {
        Origin::Leaf(leaf) => Some(Arc::as_ptr(leaf) as usize),
        _ => None,
    }
}

/// Who feeds whom, and which step delivers each gradient.
struct Graph {
    /// Per node: the gradient-carrying edges `(node, edge)` leading to it.
    feeders: Vec<Vec<(usize, usize)>>,
    /// `(node, edge)` → the step delivering that edge's gradient.
    delivers: HashMap<(usize, usize), usize>,
    /// Per node: how many steps it runs.
    steps_of: Vec<usize>,
    /// Per node: whether it is a window's, its gradient placed in a block
    /// of its target's (never passed on whole).
    placed: Vec<bool>,
}

impl Graph {
    fn new(steps: &[Step], nodes: &[Arc<Node>], targets: &[Vec<Option<usize>>]) -> Graph {
        let mut feeders = vec![Vec::new(); nodes.len()];
        for (c, n) in nodes.iter().enumerate() {
            for &e in &n.grad.plan.wrt {
                if let Some(t) = targets[c][e] {
                    feeders[t].push((c, e));
                }
            }
        }
        let mut delivers = HashMap::new();
        let mut steps_of = vec![0; nodes.len()];
        for (k, st) in steps.iter().enumerate() {
            steps_of[st.node] += 1;
            for &e in &st.deliver {
                delivers.insert((st.node, e), k);
            }
        }
        Graph {
            feeders,
            delivers,
            steps_of,
            placed: nodes.iter().map(|n| n.placed.is_some()).collect(),
        }
    }

    /// The step whose value alone reaches `node` as its incoming
    /// gradient, through steps that pass it on (the second and third
    /// rules), if there is one.
    fn producer(&self, steps: &[Step], mut node: usize) -> Option<usize> {
        loop {
            let [edge] = self.feeders[node][..] else {
                return None;
            };
            let d = *self.delivers.get(&edge)?;
            let st = &steps[d];
            if st.deliver.len() != 1 || st.kept || self.placed[st.node] {
                return None;
            }
            match st.passes {
                None => {
                    return matches!(st.kernel.route(), RouteKind::Jit | RouteKind::Gemm)
                        .then_some(d)
                }
                Some(p) if st.inputs[p] == Val::Df && self.steps_of[st.node] == 1 => {
                    node = st.node;
                }
                Some(_) => return None,
            }
        }
    }
}

/// How a step folds into the one producing its input, or into the sum
/// of gradients it delivers a term of.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Fold {
    /// A pointwise map of the incoming gradient alone, applied to the
    /// producer's value (`IndexFn::map_output`).
    Map,
    /// A step reading the incoming gradient (its input `.0`) and values its
    /// node saved, all element for element: the producer's value fed to it
    /// (`IndexFn::feed_into`).
    Feed(usize),
    /// The sum so far added to the step's value (`fold_accumulations`).
    Sum,
}

/// Arguments a folded stage may read: each is a pointer per element and a
/// register in the kernel, and folds compose along a chain.
const MAX_FOLDED_ARGS: usize = 12;

/// Whether the producer `p` with `k`'s saved values added stays within
/// [`MAX_FOLDED_ARGS`] (the sum so far counted).
fn fits(p: &Step, k: &Step) -> bool {
    p.inputs.len() + k.inputs.len() < MAX_FOLDED_ARGS
}

/// The first rule (a pointwise map of the gradient alone, or a step reading
/// the gradient and its node's saved values element for element), and
/// fusion on for the step's device.
fn fold_of(st: &Step, graph: &Graph) -> Option<Fold> {
    let candidate = st.prog == Prog::Backward
        && graph.steps_of[st.node] == 1
        && st.passes.is_none()
        && st.kernel.route() == RouteKind::Jit
        && runtime::fusion(st.kernel.device());
    if !candidate {
        return None;
    }
    let f = st.kernel.source();
    if st.inputs == [Val::Df] {
        return f.is_pointwise_map().then_some(Fold::Map);
    }
    let df = st.inputs.iter().position(|v| *v == Val::Df)?;
    let saved_else = st
        .inputs
        .iter()
        .enumerate()
        .all(|(k, v)| k == df || matches!(v, Val::Saved(_)));
    (saved_else && f.feeds_elementwise(df)).then_some(Fold::Feed(df))
}

/// Folded kernels by the producer, the fold and the step folded into it
/// (none for the sum so far, `fold_accumulations`), holding both kernels so
/// their addresses stay theirs: a schedule is built on every backward.
type FoldCache = HashMap<
    (usize, Fold, usize),
    (
        Arc<CompiledKernel>,
        Option<Arc<CompiledKernel>>,
        Option<Arc<CompiledKernel>>,
    ),
>;
static FOLDED: Mutex<Option<FoldCache>> = Mutex::new(None);
/// Pairs the cache holds before it starts over.
const FOLD_CACHE_PAIRS: usize = 4096;

/// `made`'s stage with `map`'s applied to its value (`Fold::Map`), fed to
/// it (`Fold::Feed`), or with the sum so far added to it (`Fold::Sum`: a
/// last argument read at the output index), compiled for its device, when
/// it takes `made`'s route.
fn folded(
    made: &Arc<CompiledKernel>,
    how: Fold,
    map: Option<&Arc<CompiledKernel>>,
) -> Result<Option<Arc<CompiledKernel>>, Error> {
    let key = (
        Arc::as_ptr(made) as usize,
        how,
        map.map_or(0, |m| Arc::as_ptr(m) as usize),
    );
    if let Some((_, _, k)) = FOLDED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(k.clone());
    }
    let f = made.source();
    let f = match (how, map) {
        (Fold::Map, Some(m)) => f.map_output(m.source())?,
        (Fold::Feed(df), Some(m)) => f.feed_into(m.source(), df)?,
        _ => f.add_fn(&IndexFn::read_whole("sum", f.output_shape())?)?,
    };
    let k = runtime::compile_for(&f, made.dtype(), made.device())?;
    let k = (k.route() == made.route()).then_some(k);
    let mut cache = FOLDED.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= FOLD_CACHE_PAIRS {
        cache.clear();
    }
    cache.insert(key, (made.clone(), map.cloned(), k.clone()));
    Ok(k)
}
