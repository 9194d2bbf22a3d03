//! The tape: which operation produced which tensor, what it saved for its
//! derivatives, and the `backward` driver.
//!
//! Owns trace nodes (`Node`: one recorded operation, owning its inputs'
//! nodes through `Arc`, so a graph nobody holds frees itself), leaves'
//! gradient slots (`Leaf`), the thread-local no-grad scope, the backward
//! schedule (`schedule`, with pointwise gradients folded into their
//! producers when fusion is on: `fold`) and its one interpreter (`interpret`), run on
//! storages by `backward` and on block sizes by `memory_plan`, and
//! `explain`. A node holds its op's plan from the runtime's op-plan cache
//! (which makes the second iteration of a training loop free of symbolic
//! work), and backward runs its stages through the runtime
//! (`crate::runtime::exec`); it must not generate code, reach a backend or
//! contain a derivative rule of its own.

mod backward;
mod explain;
mod fold;
mod interpret;
mod memory_plan;
mod schedule;

pub(crate) use crate::runtime::op_plan::GraphDerivative;
pub use crate::runtime::{
    plan_cache_capacity, set_plan_cache_capacity, stats, Stats, DEFAULT_PLAN_CAPACITY,
};
pub(crate) use backward::run as run_backward;
pub(crate) use backward::{observing_final_gradients, FinalGradients};
pub(crate) use explain::explain_node;
pub use explain::{Explanation, StageLine};
pub(crate) use memory_plan::plan_backward;
pub use memory_plan::{MemoryPlan, Phase, PlanStep};

pub(crate) use crate::kernel::strided::Strided;
use crate::runtime::op_plan::{NodeGrad, OpPlan};
use crate::runtime::SavePolicy;
use crate::runtime::Storage;
use crate::Error;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIVE_NODES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static KEEP_INPUTS: Cell<bool> = const { Cell::new(false) };
}

/// Number of trace nodes alive in the process (recorded operations whose
/// outputs, or whose dependants' outputs, are still held somewhere).
///
/// ```
/// use tenjin::Tensor;
/// let before = tenjin::trace::live_nodes();
/// let w = Tensor::ones(&[3], tenjin::DType::F64)?.requires_grad();
/// let y = w.exp()?.sum()?;
/// assert!(tenjin::trace::live_nodes() >= before + 2);
/// drop(y); // nothing was kept: the graph frees itself
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn live_nodes() -> usize {
    LIVE_NODES.load(Relaxed)
}

/// Whether operations on this thread are recorded.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Runs `f` with recording switched off on this thread (like
/// `torch.no_grad()`): results of operations inside are constants.
///
/// ```
/// use tenjin::Tensor;
/// let w = Tensor::ones(&[2], tenjin::DType::F32)?.requires_grad();
/// let y = tenjin::no_grad(|| w.mul_scalar(2.0))?;
/// assert!(!y.is_requires_grad());
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// Switches recording off on this thread until dropped (restoring the
/// previous state).
pub struct NoGradGuard {
    previous: bool,
}

impl NoGradGuard {
    pub fn new() -> NoGradGuard {
        let previous = GRAD_ENABLED.with(|g| g.replace(false));
        NoGradGuard { previous }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        NoGradGuard::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// Runs `f` with recording switched on or off on this thread, restoring
/// the previous state afterwards.
pub(crate) fn with_grad_enabled<R>(enabled: bool, f: impl FnOnce() -> R) -> R {
    let previous = GRAD_ENABLED.with(|g| g.replace(enabled));
    let out = f();
    GRAD_ENABLED.with(|g| g.set(previous));
    out
}

/// Runs `f` with every operation recorded on this thread saving all its
/// inputs, in either memory mode, so that a graph of gradients can be
/// built over it later ([`crate::autograd::grad`] with `create_graph`) and
/// forward mode can run through it. A node otherwise saves only what its
/// staged backward reads: under its save policy it may keep a forward
/// value instead of an input it was computed from, and `exp` keeps its
/// output but not its input, which is enough for one backward but not for
/// differentiating that backward again or for a tangent.
///
/// The functional API (`hessian`, `hvp`, `jacobian`, `vjp`, `jvp`) runs
/// the functions it is given inside this scope.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![0.5, -1.0], &[2])?.requires_grad();
/// let y = autograd::keep_inputs(|| x.tanh()?.mul(&x)?.sum())?;
/// let g = autograd::grad(&[&y], &[&x], None, true)?;
/// let h = autograd::grad(&[&g[0].sum()?], &[&x], None, false)?;
/// assert_eq!(h[0].shape(), &[2]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn keep_inputs<R>(f: impl FnOnce() -> R) -> R {
    let previous = KEEP_INPUTS.with(|k| k.replace(true));
    let out = f();
    KEEP_INPUTS.with(|k| k.set(previous));
    out
}

pub(crate) fn autograd_error(op: &str, message: String) -> Error {
    Error::Autograd {
        op: op.to_string(),
        message,
    }
}

/// How a dense tensor came to be, for differentiation: an edge of the
/// tape (a tensor holds one; a node holds one per input).
#[derive(Clone)]
pub(crate) enum Origin {
    /// Data with no gradient: created, detached, or computed without any
    /// input that requires one.
    Constant,
    /// A leaf that requires a gradient; gradients accumulate into it.
    Leaf(Arc<Leaf>),
    /// The output of a recorded operation.
    Op(Arc<Node>),
}

impl Origin {
    pub(crate) fn requires_grad(&self) -> bool {
        !matches!(self, Origin::Constant)
    }
}

/// The gradient slot of a leaf that requires a gradient.
pub(crate) struct Leaf {
    grad: Mutex<Option<Arc<Storage>>>,
    /// Where the gradient came from when a backward with `create_graph`
    /// recorded it (its storage is `grad`): a node on the tape, so the
    /// gradient can be differentiated. (The node refers back to this leaf,
    /// a reference cycle that `zero_grad` breaks, as in PyTorch.)
    graph: Mutex<Option<Origin>>,
}

impl Leaf {
    pub(crate) fn new() -> Leaf {
        Leaf {
            grad: Mutex::new(None),
            graph: Mutex::new(None),
        }
    }

    pub(crate) fn grad(&self) -> Option<Arc<Storage>> {
        self.grad.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The gradient recorded by a backward with `create_graph`, if it is
    /// the current gradient.
    pub(crate) fn grad_graph(&self) -> Option<(Arc<Storage>, Origin)> {
        let graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let origin = graph.clone()?;
        let grad = self.grad.lock().unwrap_or_else(|e| e.into_inner());
        Some((grad.clone()?, origin))
    }

    /// Replaces the gradient with `g` (a constant: a recorded gradient's
    /// graph is dropped), or clears it.
    pub(crate) fn set(&self, g: Option<Arc<Storage>>) {
        // Locks in one order everywhere: `graph`, then `grad`.
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        *self.grad.lock().unwrap_or_else(|e| e.into_inner()) = g;
        *graph = None;
    }

    /// Runs `f` over the gradient's storage, holding the gradient's lock,
    /// when nobody but this leaf holds it (a gradient tensor someone holds
    /// never changes under them) and it is not a recorded one; returns
    /// what `f` returns, or `Ok(false)` without calling it.
    pub(crate) fn with_sole_grad(
        &self,
        f: impl FnOnce(&Arc<Storage>) -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        let graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let grad = self.grad.lock().unwrap_or_else(|e| e.into_inner());
        match grad.as_ref() {
            Some(g) if graph.is_none() && Arc::strong_count(g) == 1 => f(g),
            _ => Ok(false),
        }
    }

    pub(crate) fn clear(&self) {
        // Locks in one order everywhere: `graph`, then `grad`.
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        *self.grad.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *graph = None;
    }

    /// Adds `g` to the gradient. The sum is formed in place when nobody
    /// else holds the current gradient, otherwise in a new buffer (a
    /// gradient tensor the user holds never changes under them). A
    /// recorded gradient becomes a constant again.
    pub(crate) fn accumulate(&self, g: Arc<Storage>) -> Result<(), Error> {
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        add_into(&mut self.grad.lock().unwrap_or_else(|e| e.into_inner()), g)?;
        *graph = None;
        Ok(())
    }

    /// The first half of `grad += g` for an all-or-nothing commit of many
    /// leaves: the new buffer `grad + g` when the current gradient is
    /// shared (the only case that allocates), else `None`.
    pub(crate) fn prepare_sum(&self, g: &Arc<Storage>) -> Result<Option<PreparedSum>, Error> {
        let grad = self.grad.lock().unwrap_or_else(|e| e.into_inner());
        match grad.as_ref() {
            Some(current) if Arc::strong_count(current) > 1 => Ok(Some(PreparedSum {
                from: Arc::as_ptr(current),
                sum: sum_of(current, g)?,
            })),
            _ => Ok(None),
        }
    }

    /// The second half: `grad += g`, using `prepared` when the gradient is
    /// still the one it was made from. It allocates (and may fail) only if
    /// another thread changed the gradient in between.
    pub(crate) fn commit_sum(
        &self,
        g: Arc<Storage>,
        prepared: Option<PreparedSum>,
    ) -> Result<(), Error> {
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let mut grad = self.grad.lock().unwrap_or_else(|e| e.into_inner());
        match (grad.as_ref(), prepared) {
            (Some(current), Some(p)) if Arc::as_ptr(current) == p.from => *grad = Some(p.sum),
            _ => add_into(&mut grad, g)?,
        }
        *graph = None;
        Ok(())
    }

    /// Replaces the gradient by a recorded one: `storage`, computed by
    /// the op `origin` (`crate::autograd` forms the sum with the old one).
    pub(crate) fn set_recorded(&self, storage: Arc<Storage>, origin: Origin) {
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        *self.grad.lock().unwrap_or_else(|e| e.into_inner()) = Some(storage);
        *graph = Some(origin);
    }
}

/// A leaf's `grad + g`, made before any leaf changes (`Leaf::prepare_sum`).
pub(crate) struct PreparedSum {
    from: *const Storage,
    sum: Arc<Storage>,
}

/// `slot += g`: in place when nobody else holds the current value,
/// otherwise into a new buffer (memory a user or a saved value shares never
/// changes under them).
pub(crate) fn add_into(slot: &mut Option<Arc<Storage>>, g: Arc<Storage>) -> Result<(), Error> {
    match slot.as_mut() {
        None => *slot = Some(g),
        Some(current) if Arc::strong_count(current) == 1 && !current.is_window() => {
            current.add_assign(&g)?
        }
        Some(current) => *slot = Some(sum_of(current, &g)?),
    }
    Ok(())
}

/// `slot += g` placed at `at` (a window's gradient into its base's):
/// in place when nobody else holds the current value, otherwise into a
/// new buffer, zeros but for `g` when there is none yet.
pub(crate) fn add_placed(
    slot: &mut Option<Arc<Storage>>,
    g: &Storage,
    at: &Placement,
) -> Result<(), Error> {
    match slot.as_mut() {
        Some(current) if Arc::strong_count(current) == 1 && !current.is_window() => {
            at.add(current, g)
        }
        _ => {
            let sum = Storage::zeros_on(g.device(), g.dtype(), at.of)?;
            if let Some(current) = slot.as_ref() {
                sum.copy_from(current)?;
            }
            at.add(&sum, g)?;
            *slot = Some(sum);
            Ok(())
        }
    }
}

/// `a + g` in a new buffer (on their device).
fn sum_of(a: &Storage, g: &Storage) -> Result<Arc<Storage>, Error> {
    let sum = Storage::uninit_on(a.device(), a.dtype(), a.len())?;
    sum.copy_from(a)?;
    sum.add_assign(g)?;
    Ok(sum)
}

/// What a node keeps for its backward program: the inputs and the output
/// it reads, with the version each had when saved, and the forward values
/// (stages of the forward program) kept for it under its save policy.
struct Saved {
    args: Vec<Option<(Arc<Storage>, u64)>>,
    out: Option<(Arc<Storage>, u64)>,
    /// Per stage of the forward program: its value, when kept. Only the
    /// node holds these, so no version is needed.
    stages: Vec<Option<Arc<Storage>>>,
    released: bool,
}

/// One recorded operation.
pub(crate) struct Node {
    id: u64,
    pub(crate) plan: Arc<OpPlan>,
    /// The programs for the arguments that needed a gradient when the node
    /// was recorded.
    pub(crate) grad: Arc<NodeGrad>,
    /// Per argument of `plan.f`: where its gradient goes.
    pub(crate) edges: Vec<Origin>,
    saved: Mutex<Saved>,
    /// For a window's node (`crate::ops::window`): where its one argument,
    /// a block of the value its edge leads to, lies in that value; its
    /// gradient is added there rather than delivered whole.
    pub(crate) placed: Option<Placement>,
    /// The storages of the inputs (ordered like the plan's arguments) and
    /// of the output, weakly: their identity and size for the static memory
    /// plan (`memory_plan`); they keep no data alive.
    storages: Storages,
}

/// Where a window's elements lie in a value of `of` elements: a block of
/// consecutive elements from `start` on, or, with `strided`, element `v`
/// (a point of `strided.shape`) at `start + Σ_j strided.coeffs[j]·v[j]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) start: usize,
    pub(crate) of: usize,
    pub(crate) strided: Option<Arc<Strided>>,
}

impl Placement {
    /// `sum[positions] += g`, in place.
    pub(crate) fn add(&self, sum: &Storage, g: &Storage) -> Result<(), Error> {
        match &self.strided {
            None => sum.add_at(self.start, g),
            Some(s) => sum.add_strided(self.start, s, g),
        }
    }
}

struct Storages {
    inputs: Vec<Weak<Storage>>,
    out: Weak<Storage>,
    /// The version of each input and of the output when recorded: a
    /// storage read back for a graph of gradients must still hold the
    /// values the op read.
    versions: Vec<u64>,
    out_version: u64,
}

impl Node {
    /// Records `plan` applied to `inputs` (storages ordered like the
    /// plan's arguments) giving `out`, with the forward values `kept` (by
    /// forward stage). Exactly what `grad`'s backward program reads
    /// under `policy` is saved. Not yet shared: a window's node sets its
    /// placement first.
    pub(crate) fn record(
        plan: Arc<OpPlan>,
        grad: Arc<NodeGrad>,
        edges: Vec<Origin>,
        inputs: &[&Arc<Storage>],
        out: &Arc<Storage>,
        kept: Vec<Option<Arc<Storage>>>,
        policy: SavePolicy,
    ) -> Result<Node, Error> {
        let needs = grad.needs(policy);
        let keep_inputs = KEEP_INPUTS.with(Cell::get);
        let keep = |s: &Arc<Storage>| (s.clone(), s.version());
        let stage_count = grad.forward.program.stages.len();
        let mut stages: Vec<Option<Arc<Storage>>> = vec![None; stage_count];
        for (k, v) in kept.into_iter().enumerate() {
            if needs.stages.get(k).copied().unwrap_or(false) {
                stages[k] = v;
            }
        }
        // The value stage of the forward program is the output itself.
        for &o in &grad.forward.program.outputs {
            if needs.stages.get(o).copied().unwrap_or(false) {
                stages[o] = Some(out.clone());
            }
        }
        let saved = Saved {
            args: inputs
                .iter()
                .enumerate()
                .map(|(i, s)| (needs.args[i] || keep_inputs).then(|| keep(s)))
                .collect(),
            out: needs.out.then(|| keep(out)),
            stages,
            released: false,
        };
        LIVE_NODES.fetch_add(1, Relaxed);
        Ok(Node {
            id: NEXT_ID.fetch_add(1, Relaxed),
            plan,
            grad,
            edges,
            saved: Mutex::new(saved),
            storages: Storages {
                inputs: inputs.iter().map(|s| Arc::downgrade(s)).collect(),
                out: Arc::downgrade(out),
                versions: inputs.iter().map(|s| s.version()).collect(),
                out_version: out.version(),
            },
            placed: None,
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn op_name(&self) -> &str {
        &self.plan.op
    }

    /// The storage of input `i` with the values the op read: the saved
    /// one, or the one still alive elsewhere if nothing wrote to it since.
    /// `None` when it was freed or modified in place.
    pub(crate) fn input_storage(&self, i: usize) -> Option<Arc<Storage>> {
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some((s, v))) = saved.args.get(i) {
            return (s.version() == *v).then(|| s.clone());
        }
        let s = self.storages.inputs.get(i)?.upgrade()?;
        (s.version() == self.storages.versions[i]).then_some(s)
    }

    /// The storage of the output, as [`Node::input_storage`].
    pub(crate) fn output_storage(&self) -> Option<Arc<Storage>> {
        let s = self.storages.out.upgrade()?;
        (s.version() == self.storages.out_version).then_some(s)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        LIVE_NODES.fetch_sub(1, Relaxed);
        // Free the chain of inputs iteratively: a long trace must not
        // recurse once per node.
        let mut stack: Vec<Arc<Node>> = Vec::new();
        let take = |edges: &mut Vec<Origin>, stack: &mut Vec<Arc<Node>>| {
            for e in std::mem::take(edges) {
                if let Origin::Op(n) = e {
                    stack.push(n);
                }
            }
        };
        take(&mut self.edges, &mut stack);
        while let Some(n) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(n) {
                take(&mut node.edges, &mut stack);
            }
        }
    }
}
