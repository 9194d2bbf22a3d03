//! The backward schedule: every stage that runs, in order, with what it
//! reads, where its value goes and what is released after it.
//!
//! Owns [`Schedule`] and [`Step`]. One schedule is built per backward from
//! the recorded nodes reachable from the output; the backward driver and
//! the static memory plan both replay it through the one interpreter
//! (`interpret`), so the release points and in-place decisions exist once.
//!
//! **Statements.** A *statement* `(node, edge)` computes the gradient a
//! node sends along one edge: the stages of the node's backward program
//! that this gradient needs and no earlier statement of the node ran. Each
//! forward value a stage reads is taken from the tape when the node kept it
//! (as its save policy said) or recomputed by the node's forward stage right
//! before its first reader (otherwise). A node's intermediate
//! stages are shared by its statements.
//!
//! **Order (height heuristic, DeepDSL §4.3).** A statement's height is 0
//! for the output's node and otherwise one more than the highest statement
//! feeding the node's incoming gradient (all statements of a node share
//! it). Statements for leaves (parameter gradients) are taken in increasing
//! height; before each, its not yet scheduled ancestors are scheduled in
//! increasing height. Parents have smaller heights than children, so this
//! is a topological order; it computes each parameter gradient as soon as
//! its node's incoming gradient exists, before the gradient that flows
//! further back, so values only the parameter gradient reads are released
//! before the next large buffer is allocated. Ties: later nodes first, then
//! (within a node) the statement needing the fewest stages, then edge
//! order.
//!
//! **Release.** A value of a node (its incoming gradient, a saved input or
//! output, a kept or recomputed forward value, an intermediate stage) is
//! released right after the last step of the node that reads it; the
//! node's saved values are all released after its last step (unless the
//! graph is retained).
//!
//! **In place.** A step whose stage reads an intermediate value or the
//! incoming gradient only at its own output index (element-wise), runs as
//! a loop (not a GEMM) and is that value's last reader may write its
//! result over it, when at run time nobody else holds that buffer
//! (Zhabinski et al.; DeepDSL §4.4).

use super::Node;
use crate::planner::Source;
use crate::runtime::CompiledKernel;
use crate::trace::Origin;
use crate::Error;
use std::collections::HashMap;
use std::sync::Arc;

/// A value a node saved on the tape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Slot {
    /// The forward function's argument `k`.
    Arg(usize),
    /// The forward output.
    Out,
    /// The value of stage `k` of the forward program, kept by the forward
    /// pass.
    Stage(usize),
}

/// Which program of a node a step runs a stage of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Prog {
    /// The forward program (a forward value recomputed for backward).
    Forward,
    Backward,
}

/// A value a step of a node reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Val {
    /// The gradient flowing into the node's output.
    Df,
    Saved(Slot),
    /// The value of an earlier step of the node.
    Temp(Prog, usize),
    /// A value another node saved: a step that a later node's
    /// element-wise gradient step was folded into reads what that step
    /// read (`fold`). Never released by the reader: the node that saved it
    /// releases it after its own last step, which comes later.
    SavedBy(usize, Slot),
}

/// Whose gradient, summed so far, a step's kernel adds its value to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SumInto {
    /// The incoming gradient of a node.
    Node(usize),
    /// The gradient of the leaf at edge `edge` of node `node`, as the
    /// backward sums it aside: the step's own edge, or the edge of a later
    /// step that passes this step's value on to that leaf. A step
    /// delivering to that leaf with this mark delivers the whole sum.
    Leaf { node: usize, edge: usize },
}

/// One stage run.
pub(super) struct Step {
    /// The node (index into [`Schedule::nodes`]).
    pub node: usize,
    pub prog: Prog,
    /// The stage, in `prog`.
    pub stage: usize,
    pub kernel: Arc<CompiledKernel>,
    /// Per argument of the stage's function.
    pub inputs: Vec<Val>,
    /// An input the result may be written over (see the module
    /// documentation), when its buffer is held by nobody else at run time.
    pub in_place: Option<usize>,
    /// An input the value *is*, element for element (the gradient `da = df`
    /// of an addition; an alias's gradient, such as a reshape's, is the
    /// incoming one reinterpreted): the step shares that buffer and runs
    /// no kernel.
    pub passes: Option<usize>,
    /// Edges of the node whose gradient this value is.
    pub deliver: Vec<usize>,
    /// The gradient the kernel adds this value to: its last input is that
    /// gradient as summed so far, and its value is the sum (`fold`).
    pub into: Option<SumInto>,
    /// Whether a later step of the node reads this value.
    pub kept: bool,
    /// Values of the node read for the last time here.
    pub release: Vec<Val>,
    pub first_of_node: bool,
    pub last_of_node: bool,
}

/// The steps of one backward, in the order they run.
pub(super) struct Schedule {
    /// The nodes reachable from the output, in recording order.
    pub nodes: Vec<Arc<Node>>,
    /// Index of the output's node.
    pub root: usize,
    pub height: Vec<usize>,
    /// Per node and edge: the node the edge leads to, `None` for a leaf.
    pub targets: Vec<Vec<Option<usize>>>,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The schedule of a backward from `root`'s output.
    pub(super) fn new(root: &Arc<Node>) -> Result<Schedule, Error> {
        let nodes = reachable(root);
        let index: HashMap<u64, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
        let root_ix = index[&root.id()];
        let targets: Vec<Vec<Option<usize>>> = nodes
            .iter()
            .map(|n| {
                n.edges
                    .iter()
                    .map(|e| match e {
                        Origin::Op(m) => Some(index[&m.id()]),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        // Heights: consumers are recorded after their inputs, so reverse
        // recording order visits every consumer before its producers.
        let mut height = vec![0usize; nodes.len()];
        for c in (0..nodes.len()).rev() {
            for t in targets[c].iter().flatten() {
                height[*t] = height[*t].max(height[c] + 1);
            }
        }
        let statements = statement_order(&nodes, &targets, &height);
        let mut pools: Vec<Option<NodeSteps>> = (0..nodes.len()).map(|_| None).collect();
        let mut steps: Vec<Step> = Vec::new();
        for (i, b) in statements {
            if pools[i].is_none() {
                pools[i] = Some(node_steps(i, &nodes[i])?);
            }
            let pool = pools[i].as_mut().expect("just built");
            let Some(&out) = pool.output_of.get(&b) else {
                continue; // an edge this node's programs do not cover
            };
            let mut wanted = vec![out];
            let mut closure: Vec<usize> = Vec::new();
            while let Some(k) = wanted.pop() {
                if pool.emitted[k] || closure.contains(&k) {
                    continue;
                }
                closure.push(k);
                wanted.extend(pool.deps[k].iter().copied());
            }
            closure.sort_unstable();
            for k in closure {
                pool.emitted[k] = true;
                let st = pool.steps[k].take().expect("emitted once");
                steps.push(st);
            }
        }
        finish(&mut steps, &nodes);
        super::fold::fold(&mut steps, &nodes, &targets)?;
        Ok(Schedule {
            nodes,
            root: root_ix,
            height,
            targets,
            steps,
        })
    }
}

/// Statements `(node, edge)` in the order of the height heuristic (see the
/// module documentation).
fn statement_order(
    nodes: &[Arc<Node>],
    targets: &[Vec<Option<usize>>],
    height: &[usize],
) -> Vec<(usize, usize)> {
    // Consumers feed a node's gradient: (consumer, its edge).
    let mut feeders: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
    for (c, t) in targets.iter().enumerate() {
        for (b, t) in t.iter().enumerate() {
            if let Some(t) = t {
                feeders[*t].push((c, b));
            }
        }
    }
    let mut all: Vec<(usize, usize)> = Vec::new();
    let mut by_node: Vec<Vec<Option<usize>>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let mut row = vec![None; n.edges.len()];
        for &b in &n.grad.plan.wrt {
            row[b] = Some(all.len());
            all.push((i, b));
        }
        by_node.push(row);
    }
    // Within a node, the statement needing the fewest stages first: values
    // the node's statements share reach their last reader sooner (and may
    // then be overwritten in place).
    let key = |s: usize| {
        let (i, b) = all[s];
        (height[i], std::cmp::Reverse(i), nodes[i].grad.closure(b), b)
    };
    let mut params: Vec<usize> = (0..all.len())
        .filter(|&s| {
            let (i, b) = all[s];
            targets[i][b].is_none()
        })
        .collect();
    params.sort_by_key(|&s| key(s));
    let mut scheduled = vec![false; all.len()];
    let mut order: Vec<usize> = Vec::with_capacity(all.len());
    // Nodes visited by the search for parameter statement `p`'s ancestors
    // are stamped `p + 1`.
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
                if let Some(s) = by_node[c][b] {
                    if !scheduled[s] {
                        scheduled[s] = true;
                        found.push(s);
                        stack.push(c);
                    }
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
    order.into_iter().map(|s| all[s]).collect()
}

/// The steps one node may run, in program order, not yet scheduled.
struct NodeSteps {
    steps: Vec<Option<Step>>,
    /// Per step: the steps of the node whose values it reads.
    deps: Vec<Vec<usize>>,
    emitted: Vec<bool>,
    /// Per edge: the step computing its gradient.
    output_of: HashMap<usize, usize>,
}

/// Release points, kept values, in-place decisions and the first and last
/// step of every node, over the steps in their final order.
fn finish(steps: &mut [Step], nodes: &[Arc<Node>]) {
    let mut seen: HashMap<usize, Vec<Val>> = HashMap::new();
    let mut last_seen: HashMap<usize, usize> = HashMap::new();
    for k in (0..steps.len()).rev() {
        let i = steps[k].node;
        let seen = seen.entry(i).or_default();
        let me = Val::Temp(steps[k].prog, steps[k].stage);
        steps[k].kept = seen.contains(&me);
        let mut release = Vec::new();
        for v in steps[k].inputs.clone() {
            if !seen.contains(&v) {
                seen.push(v);
                release.push(v);
            }
        }
        steps[k].release = release;
        steps[k].last_of_node = !last_seen.contains_key(&i);
        last_seen.insert(i, k);
    }
    for &k in last_seen.values() {
        steps[k].first_of_node = true;
    }
    for st in steps.iter_mut() {
        if st.kernel.route() != crate::kernel::RouteKind::Jit {
            continue;
        }
        let grad = &nodes[st.node].grad;
        let elementwise = match st.prog {
            Prog::Forward => &grad.forward.elementwise[st.stage],
            Prog::Backward => &grad.backward.elementwise[st.stage],
        };
        st.passes = passes_through(st.kernel.source(), elementwise).or_else(|| {
            // An alias's gradient is the incoming one, reinterpreted.
            let delivered = st.prog == Prog::Backward && !st.deliver.is_empty();
            (grad.alias && delivered)
                .then(|| st.inputs.iter().position(|v| *v == Val::Df))
                .flatten()
        });
        st.in_place = (0..st.inputs.len()).find(|&p| {
            matches!(st.inputs[p], Val::Df | Val::Temp(..))
                && elementwise.get(p).copied().unwrap_or(false)
                && st.release.contains(&st.inputs[p])
        });
    }
}

/// The argument `f` is, element for element: `f[i; j] = a[i; j]` with `a`
/// of `f`'s shape (`elementwise` says which arguments are read at the
/// output index alone and have its shape).
fn passes_through(f: &crate::symbolic::IndexFn, elementwise: &[bool]) -> Option<usize> {
    match f.graph.node(f.root) {
        crate::symbolic::Node::Access { arg, .. } if elementwise.get(*arg) == Some(&true) => {
            Some(*arg)
        }
        _ => None,
    }
}

/// Every step node `i` may run, in program order (see the module
/// documentation); release points are set later by `finish`.
fn node_steps(i: usize, node: &Node) -> Result<NodeSteps, Error> {
    let grad = &node.grad;
    let plan = &grad.plan;
    let n = plan.forward.inputs.len();
    let kept_forward: Vec<bool> = {
        let saved = node.saved.lock().unwrap_or_else(|e| e.into_inner());
        saved.stages.iter().map(Option::is_some).collect()
    };
    let missing = |what: String| super::autograd_error("backward", format!("internal: {what}"));
    let mut steps: Vec<Step> = Vec::new();

    // Forward values, resolved on first use: (value, the step computing it).
    let mut forward_val: HashMap<usize, (Val, Option<usize>)> = HashMap::new();
    fn resolve(
        t: usize,
        i: usize,
        node: &Node,
        kept: &[bool],
        forward_val: &mut HashMap<usize, (Val, Option<usize>)>,
        steps: &mut Vec<Step>,
    ) -> Result<(Val, Option<usize>), Error> {
        if let Some(v) = forward_val.get(&t) {
            return Ok(*v);
        }
        if kept.get(t).copied().unwrap_or(false) {
            let v = (Val::Saved(Slot::Stage(t)), None);
            forward_val.insert(t, v);
            return Ok(v);
        }
        let fwd = &node.grad.forward;
        let mut inputs = Vec::new();
        for src in &fwd.program.stages[t].sources {
            inputs.push(match *src {
                Source::Input(k) => Val::Saved(Slot::Arg(k)),
                Source::Stage(j) => resolve(j, i, node, kept, forward_val, steps)?.0,
            });
        }
        let kernel = fwd.kernels[t].clone().ok_or_else(|| {
            super::autograd_error(
                "backward",
                format!(
                    "internal: forward stage {t} of {} has no kernel",
                    node.op_name()
                ),
            )
        })?;
        steps.push(step(i, Prog::Forward, t, kernel, inputs, Vec::new()));
        let v = (Val::Temp(Prog::Forward, t), Some(steps.len() - 1));
        forward_val.insert(t, v);
        Ok(v)
    }

    let back = &grad.backward;
    let mut val_of: Vec<Option<(Val, Option<usize>)>> = vec![None; back.program.stages.len()];
    let mut output_of: HashMap<usize, usize> = HashMap::new();
    for (j, stage) in back.program.stages.iter().enumerate() {
        if stage.forward.is_some() {
            continue; // resolved when read
        }
        let mut inputs = Vec::with_capacity(stage.sources.len());
        for src in &stage.sources {
            inputs.push(match *src {
                Source::Input(k) if k < n => (Val::Saved(Slot::Arg(k)), None),
                Source::Input(k) if k == n => (Val::Df, None),
                Source::Input(_) => (Val::Saved(Slot::Out), None),
                Source::Stage(l) => match (val_of[l], back.program.stages[l].forward) {
                    (Some(v), _) => v,
                    (None, Some(t)) => {
                        let v = resolve(t, i, node, &kept_forward, &mut forward_val, &mut steps)?;
                        val_of[l] = Some(v);
                        v
                    }
                    (None, None) => return Err(missing(format!("stage {l} read before it ran"))),
                },
            });
        }
        let deliver: Vec<usize> = back
            .program
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, &o)| o == j)
            .map(|(p, _)| plan.wrt[p])
            .collect();
        let kernel = back.kernels[j]
            .clone()
            .ok_or_else(|| missing(format!("backward stage {j} has no kernel")))?;
        let vals = inputs.iter().map(|v| v.0).collect();
        steps.push(step(i, Prog::Backward, j, kernel, vals, deliver.clone()));
        let me = steps.len() - 1;
        for e in deliver {
            output_of.insert(e, me);
        }
        val_of[j] = Some((Val::Temp(Prog::Backward, j), Some(me)));
    }
    // Dependencies: the steps computing the temporaries each step reads.
    let producer: HashMap<Val, usize> = steps
        .iter()
        .enumerate()
        .map(|(k, s)| (Val::Temp(s.prog, s.stage), k))
        .collect();
    let deps = steps
        .iter()
        .map(|s| {
            s.inputs
                .iter()
                .filter_map(|v| producer.get(v).copied())
                .collect()
        })
        .collect();
    let count = steps.len();
    Ok(NodeSteps {
        steps: steps.into_iter().map(Some).collect(),
        deps,
        emitted: vec![false; count],
        output_of,
    })
}

fn step(
    node: usize,
    prog: Prog,
    stage: usize,
    kernel: Arc<CompiledKernel>,
    inputs: Vec<Val>,
    deliver: Vec<usize>,
) -> Step {
    Step {
        node,
        prog,
        stage,
        kernel,
        inputs,
        in_place: None,
        passes: None,
        deliver,
        into: None,
        kept: false,
        release: Vec::new(),
        first_of_node: false,
        last_of_node: false,
    }
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
