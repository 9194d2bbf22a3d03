//! The backward driver: schedules the derivative kernels of a recorded
//! graph, runs them, accumulates gradients into leaves and frees every
//! intermediate at its last use.
//!
//! Owns the traversal (only nodes reachable from the output, only edges
//! that lead to a leaf requiring a gradient), the order of the derivative
//! computations ([`Schedule`]: DeepDSL's height heuristic, thesis §4.3),
//! gradient accumulation, liveness (saved values and pending gradients
//! released at their last use) and in-place reuse of a dying gradient
//! buffer. Every derivative it runs comes from `OpPlan::grad` (symbolic).
//! The static memory plan (`memory_plan`) replays the same [`Schedule`],
//! so what it predicts is what this driver does.
//!
//! **Statements.** One derivative kernel run is a *statement* `(node, arg)`:
//! it reads the gradient flowing into `node`'s output (`df`, the node's
//! *pending* gradient, complete once every consumer of the node has run
//! its statement towards it) and the values the node saved, and adds its
//! result into the pending gradient of the node behind edge `arg`, or into
//! a leaf's gradient (a *parameter statement*).
//!
//! **Order (height heuristic).** A statement's height is 0 for the
//! output's node and otherwise one more than the highest statement it
//! depends on (all statements of a node share it). Parameter statements are
//! taken in increasing height; before each, its not yet scheduled
//! ancestors are scheduled in increasing height. Parents have smaller
//! heights than children, so this is a topological order; it computes each
//! parameter gradient as soon as its `df` exists, before the gradient that
//! flows further back, so the values only the parameter gradient reads are
//! released before the next large buffer is allocated. Ties: later nodes
//! first (reverse recording order), then argument order.
//!
//! **Liveness.** Without `retain_graph`, a saved value is released right
//! after the last statement of its node that reads it, and a pending
//! gradient is dropped right after the last statement of its node that
//! reads it: its memory goes back to the allocator then, unless someone
//! else (a user's tensor, another node) still holds it. Leaf gradients are
//! kept.
//!
//! **In place.** A statement whose derivative reads `df` only at its own
//! output index ([`GradPlan::elementwise`]), runs as generated code (not a
//! GEMM) and is the last reader of `df` writes its result over `df` when
//! nobody else holds that buffer (`Arc::strong_count == 1`) instead of
//! allocating (Zhabinski et al.; DeepDSL §4.4).

use super::plan::{GradInput, GradPlan};
use super::{add_into, autograd_error, Node};
use crate::exec;
use crate::tensor::{Origin, Storage, Tensor};
use crate::Error;
use std::collections::HashMap;
use std::sync::Arc;

/// `d root / d leaf`, accumulated into every leaf that requires a gradient.
/// `grad` is the gradient flowing into `root` (required unless `root` has
/// one element). With `retain_graph` the saved values stay for another
/// backward; otherwise each is released right after its last use.
pub(crate) fn backward(
    root: &Tensor,
    grad: Option<&Tensor>,
    retain_graph: bool,
) -> Result<(), Error> {
    if root.is_view() {
        return backward(&root.contiguous()?, grad, retain_graph);
    }
    let seed = seed(root, grad)?;
    match root.origin() {
        Origin::Constant => Err(autograd_error(
            "backward",
            format!(
                "the tensor of shape {:?} does not require a gradient: no input it was computed from requires one",
                root.shape()
            ),
        )),
        Origin::Leaf(leaf) => leaf.accumulate(seed),
        Origin::Op(node) => run(node, seed, retain_graph),
    }
}

/// The gradient flowing into the output, as a storage of its own.
fn seed(root: &Tensor, grad: Option<&Tensor>) -> Result<Arc<Storage>, Error> {
    match grad {
        None => {
            if root.numel() != 1 {
                return Err(autograd_error(
                    "backward",
                    format!(
                        "the output has shape {:?} ({} elements): backward without a gradient needs a single-element output; use backward_with(grad) with a gradient of shape {:?}",
                        root.shape(),
                        root.numel(),
                        root.shape()
                    ),
                ));
            }
            Tensor::ones(root.shape(), root.dtype())?.dense_storage()
        }
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::Shape {
                    op: "backward_with".into(),
                    message: format!(
                        "the gradient has shape {:?}, the output {:?}",
                        g.shape(),
                        root.shape()
                    ),
                });
            }
            if g.dtype() != root.dtype() {
                return Err(Error::DType {
                    op: "backward_with".into(),
                    message: format!(
                        "the gradient is {:?}, the output {:?}",
                        g.dtype(),
                        root.dtype()
                    ),
                });
            }
            g.detach().contiguous()?.dense_storage()
        }
    }
}

/// A value a node saved for its derivatives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Slot {
    /// The forward function's argument `k`.
    Arg(usize),
    /// The forward output.
    Out,
}

/// One derivative kernel run, with what is released after it.
pub(super) struct Statement {
    /// The node (index into [`Schedule::nodes`]).
    pub(super) node: usize,
    /// The argument of the node's function it differentiates for.
    pub(super) arg: usize,
    pub(super) grad: Arc<GradPlan>,
    /// Where the result goes: the pending gradient of this node (index
    /// into [`Schedule::nodes`]), or `None` for a leaf (a parameter
    /// statement).
    pub(super) target: Option<usize>,
    /// Height in the statement DAG (0 for the output's node).
    pub(super) height: usize,
    /// The node's first statement (checks that the graph was not released).
    pub(super) first_of_node: bool,
    /// The node's last statement (releases whatever it saved).
    pub(super) last_of_node: bool,
    /// The pending gradient of the node is dropped after this statement.
    pub(super) last_df: bool,
    /// Position in `grad.inputs` of `df`, when the result may be written
    /// over `df` (element-wise, generated code, last use).
    pub(super) in_place: Option<usize>,
    /// Saved values read for the last time by this statement.
    pub(super) last_reads: Vec<Slot>,
}

/// The derivative computations of one backward, in the order they run.
pub(super) struct Schedule {
    /// The nodes reachable from the output, in recording order.
    pub(super) nodes: Vec<Arc<Node>>,
    /// Index of the output's node in `nodes`.
    pub(super) root: usize,
    pub(super) statements: Vec<Statement>,
}

impl Schedule {
    /// The schedule of a backward from `root`'s output (see the module
    /// documentation for the order and the release points).
    pub(super) fn new(root: &Arc<Node>) -> Result<Schedule, Error> {
        let nodes = reachable(root);
        let index: HashMap<u64, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
        let root_ix = index[&root.id()];
        // Consumers feed a node's pending gradient: (consumer, its argument).
        let mut feeders: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
        for (c, n) in nodes.iter().enumerate() {
            for (b, e) in n.edges.iter().enumerate() {
                if let Origin::Op(m) = e {
                    feeders[index[&m.id()]].push((c, b));
                }
            }
        }
        // Heights: consumers are recorded after their inputs, so reverse
        // recording order visits every consumer before its producers.
        let mut height = vec![0usize; nodes.len()];
        for j in (0..nodes.len()).rev() {
            height[j] = feeders[j]
                .iter()
                .map(|&(c, _)| height[c] + 1)
                .max()
                .unwrap_or(0);
        }
        // All statements, numbered; `by_node[i][b]` is the number of (i, b).
        let mut all: Vec<(usize, usize)> = Vec::new();
        let mut by_node: Vec<Vec<Option<usize>>> = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let mut row = vec![None; n.edges.len()];
            for (b, e) in n.edges.iter().enumerate() {
                if e.requires_grad() {
                    row[b] = Some(all.len());
                    all.push((i, b));
                }
            }
            by_node.push(row);
        }
        let key = |s: usize| {
            let (i, b) = all[s];
            (height[i], std::cmp::Reverse(i), b)
        };
        let mut params: Vec<usize> = (0..all.len())
            .filter(|&s| {
                let (i, b) = all[s];
                matches!(nodes[i].edges[b], Origin::Leaf(_))
            })
            .collect();
        params.sort_by_key(|&s| key(s));
        let mut scheduled = vec![false; all.len()];
        let mut order: Vec<usize> = Vec::with_capacity(all.len());
        // Nodes visited by the search for parameter statement `p`'s
        // ancestors are stamped `p + 1`.
        let mut visited = vec![0usize; nodes.len()];
        for p in params {
            if scheduled[p] {
                continue;
            }
            // Unscheduled ancestors: the statements feeding the node, and
            // theirs. A scheduled statement's ancestors are all scheduled.
            let mut found: Vec<usize> = Vec::new();
            let mut stack: Vec<usize> = vec![all[p].0];
            while let Some(i) = stack.pop() {
                if std::mem::replace(&mut visited[i], p + 1) == p + 1 {
                    continue;
                }
                for &(c, b) in &feeders[i] {
                    let s = by_node[c][b].expect("an Op edge requires a gradient");
                    if !scheduled[s] {
                        scheduled[s] = true;
                        found.push(s);
                        stack.push(c);
                    }
                }
            }
            found.sort_by_key(|&s| key(s));
            order.extend(found);
            scheduled[p] = true;
            order.push(p);
        }
        // Statements that lead to no parameter cannot exist (every Op edge
        // ends at a leaf), but keep them in a valid order if they do.
        let mut rest: Vec<usize> = (0..all.len()).filter(|&s| !scheduled[s]).collect();
        rest.sort_by_key(|&s| key(s));
        order.extend(rest);

        let mut statements = Vec::with_capacity(order.len());
        for &s in &order {
            let (i, b) = all[s];
            let target = match &nodes[i].edges[b] {
                Origin::Op(m) => Some(index[&m.id()]),
                _ => None,
            };
            statements.push(Statement {
                node: i,
                arg: b,
                grad: nodes[i].plan.grad(b)?,
                target,
                height: height[i],
                first_of_node: false,
                last_of_node: false,
                last_df: false,
                in_place: None,
                last_reads: Vec::new(),
            });
        }
        // Release points: scan backwards, the first sighting is the last use.
        let mut node_seen = vec![false; nodes.len()];
        let mut df_seen = vec![false; nodes.len()];
        let mut slot_seen: Vec<Vec<Slot>> = vec![Vec::new(); nodes.len()];
        for st in statements.iter_mut().rev() {
            let i = st.node;
            st.last_of_node = !std::mem::replace(&mut node_seen[i], true);
            let df_at = st.grad.inputs.iter().position(|x| *x == GradInput::Df);
            if let Some(k) = df_at {
                if !std::mem::replace(&mut df_seen[i], true) {
                    st.last_df = true;
                    if st.grad.elementwise[k] && st.grad.kernel.route() == "jit" {
                        st.in_place = Some(k);
                    }
                }
            }
            for input in &st.grad.inputs {
                let slot = match *input {
                    GradInput::Arg(k) => Slot::Arg(k),
                    GradInput::Out => Slot::Out,
                    GradInput::Df => continue,
                };
                if !slot_seen[i].contains(&slot) {
                    slot_seen[i].push(slot);
                    st.last_reads.push(slot);
                }
            }
        }
        // A node none of whose statements reads `df` drops it after its
        // last statement; mark first statements.
        let mut first_seen = vec![false; nodes.len()];
        for st in statements.iter_mut() {
            let i = st.node;
            if st.last_of_node && !df_seen[i] {
                st.last_df = true;
            }
            st.first_of_node = !std::mem::replace(&mut first_seen[i], true);
        }
        Ok(Schedule {
            nodes,
            root: root_ix,
            statements,
        })
    }
}

fn run(root: &Arc<Node>, seed: Arc<Storage>, retain_graph: bool) -> Result<(), Error> {
    let schedule = Schedule::new(root)?;
    let nodes = &schedule.nodes;
    let mut pending: Vec<Option<Arc<Storage>>> = vec![None; nodes.len()];
    pending[schedule.root] = Some(seed);
    for st in &schedule.statements {
        let node = &nodes[st.node];
        let mut saved = node.saved.lock().unwrap_or_else(|e| e.into_inner());
        if st.first_of_node && saved.released {
            return Err(autograd_error(
                "backward",
                format!(
                    "the graph through {} was already released by an earlier backward; call backward_retaining_graph() the first time to run backward twice",
                    node.op_name()
                ),
            ));
        }
        // Taken out while the statement runs, so that the only reference
        // to a pending gradient is this one (the in-place test below).
        let g = pending[st.node].take().ok_or_else(|| {
            autograd_error(
                "backward",
                format!(
                    "no gradient reached {} (internal scheduling error)",
                    node.op_name()
                ),
            )
        })?;
        let gp = &st.grad;
        let mut inputs: Vec<&Arc<Storage>> = Vec::with_capacity(gp.inputs.len());
        for input in &gp.inputs {
            let (s, version) = match *input {
                GradInput::Df => {
                    inputs.push(&g);
                    continue;
                }
                GradInput::Arg(k) => saved.args[k].as_ref(),
                GradInput::Out => saved.out.as_ref(),
            }
            .map(|(s, v)| (s, *v))
            .ok_or_else(|| {
                autograd_error(
                    "backward",
                    format!(
                        "{} did not save a value its derivative reads",
                        node.op_name()
                    ),
                )
            })?;
            if s.version() != version {
                return Err(autograd_error(
                    "backward",
                    format!(
                        "a value saved by {} was modified in place after it was saved; its derivative would be wrong",
                        node.op_name()
                    ),
                ));
            }
            inputs.push(s);
        }
        let in_place = match st.in_place {
            // SAFETY: `elementwise` says the derivative reads `df` only at
            // the output index, and nobody else holds `g`.
            Some(k) if Arc::strong_count(&g) == 1 => unsafe {
                exec::run_in_place(&gp.kernel, &inputs, k)?
            },
            _ => false,
        };
        let (dx, g) = if in_place {
            drop(inputs);
            (g, None)
        } else {
            let dx = exec::run_new(&gp.kernel, &inputs)?;
            drop(inputs);
            (dx, Some(g))
        };
        match (&node.edges[st.arg], st.target) {
            (Origin::Leaf(leaf), _) => leaf.accumulate(dx)?,
            (Origin::Op(_), Some(t)) => add_into(&mut pending[t], dx)?,
            _ => {}
        }
        if !retain_graph {
            for slot in &st.last_reads {
                match *slot {
                    Slot::Arg(k) => saved.args[k] = None,
                    Slot::Out => saved.out = None,
                }
                saved.released = true;
            }
            if st.last_of_node {
                saved.args.iter_mut().for_each(|s| *s = None);
                saved.out = None;
                saved.released = true;
            }
        }
        drop(saved);
        // In place, `g` became `dx` (and this was its last use).
        if !st.last_df {
            pending[st.node] = g;
        }
    }
    Ok(())
}

/// The nodes reachable from `root`, in recording order (node ids grow with
/// recording order, so this is a topological order, producers first).
fn reachable(root: &Arc<Node>) -> Vec<Arc<Node>> {
    let mut seen: HashMap<u64, Arc<Node>> = HashMap::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        if seen.contains_key(&n.id()) {
            continue;
        }
        for e in &n.edges {
            if let Origin::Op(m) = e {
                stack.push(m.clone());
            }
        }
        seen.insert(n.id(), n);
    }
    let mut order: Vec<Arc<Node>> = seen.into_values().collect();
    order.sort_by_key(|n| n.id());
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolic::IndexFn;
    use crate::trace::plan::reads_only_at_output;
    use crate::DType;

    #[test]
    fn element_wise_reads_are_recognised() {
        let sh = |s: &[usize]| s.to_vec();
        let f = IndexFn::parse(
            "f[i; j] = if {x[i; j] > 0} then (df[i; j]) else (df[i; j] * x[j; i])",
            &[("x", &sh(&[3, 3])[..]), ("df", &sh(&[3, 3])[..])],
        )
        .unwrap();
        assert!(reads_only_at_output(&f, 1)); // df, read at [i; j] only
        assert!(!reads_only_at_output(&f, 0)); // x, also read at [j; i]
        let g = IndexFn::parse_with_sizes(
            "f[i] = df[i + 1] * x[i]",
            &[("x", &[3][..]), ("df", &[4][..])],
            &[("i", 3)],
        )
        .unwrap();
        assert!(reads_only_at_output(&g, 0));
        assert!(!reads_only_at_output(&g, 1)); // shifted, other shape
        let h = IndexFn::parse(
            "f[i; j] = sum{k}_0^2 (df[i; j] * x[i; k])",
            &[("df", &[2, 2][..]), ("x", &[2, 3][..])],
        )
        .unwrap();
        assert!(reads_only_at_output(&h, 0)); // inside a sum, still at [i; j]
        let t = IndexFn::parse("f[i; j] = df[j; i]", &[("df", &[2, 2][..])]).unwrap();
        assert!(!reads_only_at_output(&t, 0)); // transposed
    }

    /// Every statement runs after all statements feeding its node's
    /// gradient, each node's first statement is marked, and release points
    /// are each node's last statement reading the slot.
    #[test]
    fn schedule_is_topological_with_release_points() {
        let t = |seed| {
            Tensor::randn(&[4], DType::F64, seed)
                .unwrap()
                .requires_grad()
        };
        let (a, b, c) = (t(1), t(2), t(3));
        // A diamond with a shared input and a value used twice.
        let u = a.mul(&b).unwrap();
        let v = u.tanh().unwrap();
        let w = u.mul(&c).unwrap().exp().unwrap();
        let s = v.add(&w).unwrap().mul(&v).unwrap().sum().unwrap();
        let Origin::Op(root) = s.origin() else {
            panic!("s is recorded")
        };
        let sched = Schedule::new(root).unwrap();
        let st = &sched.statements;
        let mut done_into = vec![0usize; sched.nodes.len()];
        let mut needed = vec![0usize; sched.nodes.len()];
        for x in st {
            if let Some(tg) = x.target {
                needed[tg] += 1;
            }
        }
        for (k, x) in st.iter().enumerate() {
            // Every contribution to this node's gradient came before.
            assert_eq!(done_into[x.node], needed[x.node], "statement {k}");
            if let Some(tg) = x.target {
                done_into[tg] += 1;
            }
            let earlier = st[..k].iter().any(|y| y.node == x.node);
            assert_eq!(x.first_of_node, !earlier);
            let later = st[k + 1..].iter().any(|y| y.node == x.node);
            assert_eq!(x.last_of_node, !later);
            for slot in &x.last_reads {
                let reads = |y: &Statement| {
                    y.grad.inputs.iter().any(|i| match (i, slot) {
                        (GradInput::Arg(a), Slot::Arg(b)) => a == b,
                        (GradInput::Out, Slot::Out) => true,
                        _ => false,
                    })
                };
                assert!(!st[k + 1..].iter().any(|y| y.node == x.node && reads(y)));
            }
            if x.in_place.is_some() {
                assert!(x.last_df);
            }
        }
        // Parameter statements in increasing height: `c`'s (height 4)
        // before `a`'s and `b`'s (height 5).
        let param_heights: Vec<usize> = st
            .iter()
            .filter(|x| x.target.is_none())
            .map(|x| x.height)
            .collect();
        assert_eq!(param_heights, [4, 5, 5]);
        s.backward().unwrap();
        for p in [&a, &b, &c] {
            assert!(p.grad().is_some());
        }
    }
}
