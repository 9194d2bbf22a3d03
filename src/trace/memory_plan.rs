//! The static memory plan of a recorded trace (DeepDSL thesis §4.4,
//! "static memory analysis", and Fig. 4.8): the bytes live after each step
//! of forward and backward and the predicted peak, in the allocator's
//! block sizes.
//!
//! Owns [`MemoryPlan`], [`PlanStep`] and [`Tensor::memory_plan`]. It runs
//! nothing and allocates no tensor memory: backward is replayed from the
//! very [`Schedule`] the backward driver executes (same order, same release
//! points, same in-place decisions), so the backward half is what
//! `backward()` will do; the forward half is a model of what the forward
//! did (see [`MemoryPlan`]).

use super::backward::{Schedule, Slot};
use super::{autograd_error, Leaf};
use crate::alloc::{self, AllocMode};
use crate::jit::DType;
use crate::tensor::storage::dtype_size;
use crate::tensor::{Origin, Storage, Tensor};
use crate::Error;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Forward or backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A recorded operation.
    Forward,
    /// The seed gradient or one derivative kernel.
    Backward,
}

/// One step of a [`MemoryPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanStep {
    pub phase: Phase,
    /// What runs: `y3 = linear` (forward step 3 produces `y3`), `z3 = dlinear/dx`
    /// (a derivative kernel producing the gradient `z3` flowing into `y3`,
    /// `+=` when it adds to an existing one), `grad w of linear` for a
    /// parameter gradient; `[in place]` when written over the incoming
    /// gradient.
    pub op: String,
    /// The height of the statement in the DAG of forward and backward
    /// statements (DeepDSL §4.3): 0 for steps reading no computed value,
    /// otherwise one more than the highest statement it reads.
    pub height: usize,
    /// Bytes allocated by the step.
    pub allocated_bytes: usize,
    /// Bytes freed after the step.
    pub freed_bytes: usize,
    /// Bytes live at the step's high point (after its allocations, before
    /// its frees).
    pub peak_bytes: usize,
    /// Bytes live after the step.
    pub live_bytes: usize,
    /// The intermediate tensors live after the step (forward values `yk`,
    /// pending gradients `zk`); the baseline and parameter gradients are
    /// counted in the bytes but not listed, as in Fig. 4.8.
    pub live: Vec<String>,
}

/// The bytes live after each step of forward and backward of a recorded
/// trace, and the predicted peak (DeepDSL thesis §4.4, "static memory
/// analysis"), from [`Tensor::memory_plan`]. Printing it gives the table of
/// the thesis's Fig. 4.8: step, phase, height, op, bytes allocated, the
/// step's high point, bytes live after it, and the live tensors.
///
/// # What is modelled
///
/// Sizes are allocator blocks: [`size_class`](crate::alloc::size_class) in
/// runtime-efficient mode, [`exact_size`](crate::alloc::exact_size) in
/// memory-efficient mode, for every allocation the plan predicts; buffers
/// that exist already are counted with their actual block size. The trace
/// is the set of nodes reachable from the tensor the plan is asked of (the
/// loss); they are the forward steps, in recording order.
///
/// - **Baseline** (live throughout): storages read by the trace that no
///   step of it produced (parameters, inputs, targets, constants) and that
///   something outside the trace holds when the plan is made, and the
///   parameters' existing gradients.
/// - **Constants made by an op for itself**: a storage read by the trace,
///   produced by no step and held only by values the trace saved (like the
///   one-hot targets `cross_entropy` builds) is allocated just before its
///   first consumer's step and freed when the last node saving it releases
///   it.
/// - **Forward values**: a step's output is allocated at that step (a
///   reshape alias allocates nothing and shares its input's value). It lives
///   until the *latest* of: its last consumer's step in forward; its
///   release in backward, if a node of the trace saved it (released right
///   after the last derivative kernel of that node that reads it, when the
///   last such node releases it); forever (to the end of the plan), if
///   something outside the trace holds it when the plan is made (a tensor
///   the caller keeps, such as the loss itself, or a node of another
///   trace). Freed values are assumed freed at that point, which is what
///   happens when the caller keeps no intermediate tensor (e.g. the forward
///   runs in a function that returns the loss).
/// - **Backward**: `backward()` without retaining the graph: a one-element
///   seed gradient, then each derivative kernel in the scheduled order: its
///   result is allocated, unless it is written in place over its incoming
///   gradient; it is added in place into the pending gradient or the
///   parameter's gradient when one exists (a parameter gradient someone
///   else holds gets a new buffer); saved values and pending gradients are
///   freed at their last use; parameter gradients are kept.
///
/// Not modelled: operations the trace does not record (under `no_grad`),
/// tensors created during the step that are dropped before the plan is made
/// and read by no saved value, and memory outside tensor buffers (the GEMM
/// crate's packing buffers, kernels, the trace itself).
///
/// ```
/// use tenjin::{DType, Tensor};
/// let x = Tensor::randn(&[64, 32], DType::F32, 1)?;
/// let w = Tensor::randn(&[16, 32], DType::F32, 2)?.requires_grad();
/// let loss = x.linear(&w, None)?.relu()?.sum()?;
/// let plan = loss.memory_plan()?;
/// assert_eq!(plan.steps.len(), 3 + 1 + 3); // 3 forward, the seed, 3 derivatives
/// assert!(plan.peak_bytes >= plan.baseline_bytes);
/// println!("{plan}"); // step, op, live tensors, bytes (Fig. 4.8)
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The mode whose block sizes the plan uses.
    pub mode: AllocMode,
    /// Bytes live before the first forward step.
    pub baseline_bytes: usize,
    pub steps: Vec<PlanStep>,
    /// The highest bytes live at any point (at least the baseline).
    pub peak_bytes: usize,
    /// The index in `steps` where the peak is reached (`None`: the baseline).
    pub peak_step: Option<usize>,
}

impl MemoryPlan {
    /// The highest bytes live during forward steps (or the baseline).
    pub fn forward_peak_bytes(&self) -> usize {
        self.phase_peak(Phase::Forward)
    }

    /// The highest bytes live during backward steps (or the baseline).
    pub fn backward_peak_bytes(&self) -> usize {
        self.phase_peak(Phase::Backward)
    }

    fn phase_peak(&self, phase: Phase) -> usize {
        self.steps
            .iter()
            .filter(|s| s.phase == phase)
            .map(|s| s.peak_bytes)
            .fold(self.baseline_bytes, usize::max)
    }
}

impl Tensor {
    /// The static memory plan of this tensor's trace, for `backward()`
    /// from it, in the host allocator's current mode's block sizes; see
    /// [`MemoryPlan`].
    pub fn memory_plan(&self) -> Result<MemoryPlan, Error> {
        self.memory_plan_for(alloc::mode())
    }

    /// As [`Tensor::memory_plan`], with the block sizes of `mode`.
    pub fn memory_plan_for(&self, mode: AllocMode) -> Result<MemoryPlan, Error> {
        if self.is_view() {
            return Err(autograd_error(
                "memory_plan",
                format!(
                    "the tensor of shape {:?} is a view; plan the dense tensor it views, or a contiguous copy",
                    self.shape()
                ),
            ));
        }
        match self.origin() {
            Origin::Op(node) => Planner::new(mode).run(&Schedule::new(node)?, self),
            _ => Err(autograd_error(
                "memory_plan",
                format!(
                    "the tensor of shape {:?} was not computed by a recorded operation: there is no trace to plan",
                    self.shape()
                ),
            )),
        }
    }
}

/// A buffer the plan tracks.
struct Buf {
    bytes: usize,
    /// Listed in the live tensors under this name.
    name: Option<String>,
    live: bool,
}

/// A parameter's gradient slot during the replay.
#[derive(Clone, Copy)]
enum LeafGrad {
    None,
    /// Held by the slot alone (accumulated into in place).
    Own,
    /// Also held outside (a new buffer on the next accumulation).
    Shared,
}

struct Planner {
    mode: AllocMode,
    bufs: Vec<Buf>,
    live: usize,
    step_start: usize,
    step_peak: usize,
    step_alloc: usize,
    peak: usize,
    peak_step: Option<usize>,
    steps: Vec<PlanStep>,
}

impl Planner {
    fn new(mode: AllocMode) -> Planner {
        Planner {
            mode,
            bufs: Vec::new(),
            live: 0,
            step_start: 0,
            step_peak: 0,
            step_alloc: 0,
            peak: 0,
            peak_step: None,
            steps: Vec::new(),
        }
    }

    /// The block a storage of `len` elements gets in this mode.
    fn block(&self, len: usize, dtype: DType) -> usize {
        let bytes = len.saturating_mul(dtype_size(dtype));
        match self.mode {
            AllocMode::RuntimeEfficient => alloc::size_class(bytes),
            AllocMode::MemoryEfficient => alloc::exact_size(bytes),
        }
        .unwrap_or(usize::MAX)
    }

    /// A buffer live from the start.
    fn existing(&mut self, bytes: usize) -> usize {
        self.bufs.push(Buf {
            bytes,
            name: None,
            live: true,
        });
        self.live += bytes;
        self.peak = self.peak.max(self.live);
        self.bufs.len() - 1
    }

    fn alloc(&mut self, bytes: usize, name: Option<String>) -> usize {
        self.bufs.push(Buf {
            bytes,
            name,
            live: true,
        });
        self.live = self.live.saturating_add(bytes);
        self.step_alloc = self.step_alloc.saturating_add(bytes);
        self.step_peak = self.step_peak.max(self.live);
        self.bufs.len() - 1
    }

    fn free(&mut self, b: usize) {
        if std::mem::replace(&mut self.bufs[b].live, false) {
            self.live -= self.bufs[b].bytes;
        }
    }

    fn begin(&mut self) {
        self.step_start = self.live;
        self.step_peak = self.live;
        self.step_alloc = 0;
    }

    fn end(&mut self, phase: Phase, op: String, height: usize) {
        let freed = (self.step_start + self.step_alloc).saturating_sub(self.live);
        if self.step_peak > self.peak {
            self.peak = self.step_peak;
            self.peak_step = Some(self.steps.len());
        }
        let live = self
            .bufs
            .iter()
            .filter(|b| b.live)
            .filter_map(|b| b.name.clone())
            .collect();
        self.steps.push(PlanStep {
            phase,
            op,
            height,
            allocated_bytes: self.step_alloc,
            freed_bytes: freed,
            peak_bytes: self.step_peak,
            live_bytes: self.live,
            live,
        });
    }

    fn run(mut self, schedule: &Schedule, root: &Tensor) -> Result<MemoryPlan, Error> {
        let nodes = &schedule.nodes;
        // Saved values: which storage each (node, slot) holds, and how many
        // slots of the trace hold each storage. No strong reference is
        // taken, so the counts below are the caller's.
        let mut saved_at: HashMap<(usize, Slot), usize> = HashMap::new();
        let mut saved_refs: HashMap<usize, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let s = n.saved.lock().unwrap_or_else(|e| e.into_inner());
            let slots = s
                .args
                .iter()
                .enumerate()
                .map(|(k, a)| (Slot::Arg(k), a))
                .chain(std::iter::once((Slot::Out, &s.out)));
            for (slot, v) in slots {
                if let Some((st, _)) = v {
                    let p = Arc::as_ptr(st) as usize;
                    saved_at.insert((i, slot), p);
                    *saved_refs.entry(p).or_default() += 1;
                }
            }
        }
        // Held outside the trace's saved slots (by tensors, other traces).
        let outside = |p: usize, strong: usize| strong > saved_refs.get(&p).copied().unwrap_or(0);

        // Forward values, by storage address, and the node producing each
        // (an alias shares its input's storage: the input's value, or a
        // baseline storage).
        let mut value_of: HashMap<usize, usize> = HashMap::new(); // ptr -> producing node
        for (j, n) in nodes.iter().enumerate() {
            if n.plan.kernel.is_some() {
                value_of.insert(n.storages.out.as_ptr() as usize, j);
            }
        }
        let mut last_use: HashMap<usize, usize> = HashMap::new(); // ptr -> last consumer
        for (j, n) in nodes.iter().enumerate() {
            for w in &n.storages.inputs {
                let p = w.as_ptr() as usize;
                if value_of.contains_key(&p) {
                    last_use.insert(p, j);
                }
            }
        }
        let mut last_uses: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (&p, &j) in &last_use {
            last_uses[j].push(p);
        }
        let index: HashMap<u64, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
        // Inputs no node produced, alive now: held outside the trace, they
        // are the baseline; held only by saved slots (constants an op made
        // for itself, like cross_entropy's one-hot targets), they are
        // created just before their first consumer's step.
        let mut buf_of: HashMap<usize, usize> = HashMap::new(); // ptr -> buf
        let mut held_outside: HashMap<usize, bool> = HashMap::new();
        let mut created_at: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
        for (j, n) in nodes.iter().enumerate() {
            for w in &n.storages.inputs {
                let p = w.as_ptr() as usize;
                if value_of.contains_key(&p) || held_outside.contains_key(&p) {
                    continue;
                }
                let strong = w.strong_count();
                if strong == 0 {
                    continue;
                }
                let held = outside(p, strong);
                held_outside.insert(p, held);
                let bytes = w.upgrade().map_or(0, |s: Arc<Storage>| s.block_bytes());
                if held {
                    let b = self.existing(bytes);
                    buf_of.insert(p, b);
                } else {
                    created_at[j].push((p, bytes));
                }
            }
        }
        let mut leaves: Vec<(Arc<Leaf>, LeafGrad)> = Vec::new();
        let mut leaf_of: HashMap<usize, usize> = HashMap::new(); // Leaf ptr -> index
        for n in nodes.iter() {
            for e in &n.edges {
                if let Origin::Leaf(leaf) = e {
                    let p = Arc::as_ptr(leaf) as usize;
                    if leaf_of.contains_key(&p) {
                        continue;
                    }
                    let state = match leaf.grad() {
                        None => LeafGrad::None,
                        // One reference is the one just returned.
                        Some(g) if Arc::strong_count(&g) > 2 => {
                            self.existing(g.block_bytes());
                            LeafGrad::Shared
                        }
                        Some(g) => {
                            self.existing(g.block_bytes());
                            LeafGrad::Own
                        }
                    };
                    leaf_of.insert(p, leaves.len());
                    leaves.push((leaf.clone(), state));
                }
            }
        }
        let baseline = self.live;

        // Forward.
        let mut fwd_height = vec![0usize; nodes.len()];
        for (j, n) in nodes.iter().enumerate() {
            self.begin();
            let p = n.storages.out.as_ptr() as usize;
            fwd_height[j] = n
                .edges
                .iter()
                .filter_map(|e| match e {
                    Origin::Op(m) => Some(fwd_height[index[&m.id()]] + 1),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            for &(q, bytes) in &created_at[j] {
                let b = self.alloc(bytes, None);
                buf_of.insert(q, b);
            }
            let mut dead: Vec<usize> = Vec::new();
            let op = if value_of.get(&p) == Some(&j) {
                let len: usize = n.plan.f.output_shape().iter().product();
                let bytes = self.block(len, n.plan.dtype);
                let b = self.alloc(bytes, Some(format!("y{}", j + 1)));
                buf_of.insert(p, b);
                let held = outside(p, n.storages.out.strong_count());
                held_outside.insert(p, held);
                // Used by no later step, saved by no node, held by no one:
                // it was dropped at once.
                if !held && !last_use.contains_key(&p) && !saved_refs.contains_key(&p) {
                    dead.push(b);
                }
                format!("y{} = {}", j + 1, n.op_name())
            } else {
                match value_of.get(&p) {
                    Some(k) => format!("y{} = {} (alias of y{})", j + 1, n.op_name(), k + 1),
                    None => format!("y{} = {} (alias of an input)", j + 1, n.op_name()),
                }
            };
            // Values whose last forward use this was, saved by no node and
            // held by no one: freed now.
            for q in &last_uses[j] {
                if !saved_refs.contains_key(q) && !held_outside[q] {
                    dead.push(buf_of[q]);
                }
            }
            for b in dead {
                self.free(b);
            }
            self.end(Phase::Forward, op, fwd_height[j]);
        }

        // Backward, replayed from the schedule the driver runs.
        let h0 = fwd_height[schedule.root] + 1;
        let mut pending: Vec<Option<usize>> = vec![None; nodes.len()];
        let mut released: HashMap<(usize, Slot), bool> = HashMap::new();
        self.begin();
        let seed = self.block(root.numel(), root.dtype());
        pending[schedule.root] = Some(self.alloc(seed, Some(format!("z{}", schedule.root + 1))));
        self.end(
            Phase::Backward,
            format!("z{} = ones (seed)", schedule.root + 1),
            h0,
        );
        let mut release = |me: &mut Planner, i: usize, slot: Slot| {
            if std::mem::replace(released.entry((i, slot)).or_default(), true) {
                return;
            }
            let Some(&p) = saved_at.get(&(i, slot)) else {
                return;
            };
            let r = saved_refs.get_mut(&p).expect("counted above");
            *r -= 1;
            if *r == 0 && !held_outside.get(&p).copied().unwrap_or(true) {
                if let Some(&b) = buf_of.get(&p) {
                    me.free(b);
                }
            }
        };
        for st in &schedule.statements {
            self.begin();
            let n = &nodes[st.node];
            let g = pending[st.node].ok_or_else(|| {
                autograd_error(
                    "memory_plan",
                    "no gradient reached a node (internal scheduling error)".into(),
                )
            })?;
            let kernel = &st.grad.kernel;
            let len: usize = kernel.output_shape().iter().product();
            let dname = format!("d{}/d{}", n.op_name(), n.plan.f.args()[st.arg].name);
            let dx = match st.in_place {
                Some(_) => g,
                None => {
                    let bytes = self.block(len, kernel.dtype());
                    self.alloc(bytes, None)
                }
            };
            let mut op = match (&n.edges[st.arg], st.target) {
                (Origin::Leaf(leaf), _) => {
                    let k = leaf_of[&(Arc::as_ptr(leaf) as usize)];
                    self.bufs[dx].name = None;
                    match leaves[k].1 {
                        LeafGrad::None => leaves[k].1 = LeafGrad::Own,
                        LeafGrad::Own => self.free(dx),
                        LeafGrad::Shared => {
                            let bytes = self.block(len, kernel.dtype());
                            let sum = self.alloc(bytes, None);
                            self.free(dx);
                            self.bufs[sum].name = None;
                            leaves[k].1 = LeafGrad::Own;
                        }
                    }
                    format!(
                        "grad {} of {} = {dname}",
                        n.plan.f.args()[st.arg].name,
                        n.op_name()
                    )
                }
                (_, Some(t)) => match pending[t] {
                    None => {
                        self.bufs[dx].name = Some(format!("z{}", t + 1));
                        pending[t] = Some(dx);
                        format!("z{} = {dname}", t + 1)
                    }
                    Some(_) => {
                        self.free(dx);
                        format!("z{} += {dname}", t + 1)
                    }
                },
                _ => dname,
            };
            if st.in_place.is_some() {
                op.push_str(" [in place]");
            }
            for &slot in &st.last_reads {
                release(&mut self, st.node, slot);
            }
            if st.last_of_node {
                for slot in (0..n.edges.len()).map(Slot::Arg).chain([Slot::Out]) {
                    release(&mut self, st.node, slot);
                }
            }
            if st.last_df {
                pending[st.node] = None;
                if st.in_place.is_none() {
                    self.free(g);
                }
            }
            self.end(Phase::Backward, op, h0 + 1 + st.height);
        }
        Ok(MemoryPlan {
            mode: self.mode,
            baseline_bytes: baseline,
            peak_bytes: self.peak,
            peak_step: self.peak_step,
            steps: self.steps,
        })
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            AllocMode::RuntimeEfficient => "runtime-efficient",
            AllocMode::MemoryEfficient => "memory-efficient",
        };
        writeln!(
            f,
            "memory plan ({mode} blocks): baseline {} B, peak {} B{}",
            self.baseline_bytes,
            self.peak_bytes,
            match self.peak_step {
                Some(s) => format!(" at step {}", s + 1),
                None => String::new(),
            }
        )?;
        let w = self
            .steps
            .iter()
            .map(|s| s.op.len())
            .max()
            .unwrap_or(2)
            .max(2);
        writeln!(
            f,
            "{:>4}  {:<8} {:>6}  {:<w$}  {:>12} {:>12} {:>12}  live tensors",
            "step", "phase", "height", "op", "allocated", "peak", "live"
        )?;
        for (i, s) in self.steps.iter().enumerate() {
            let phase = match s.phase {
                Phase::Forward => "forward",
                Phase::Backward => "backward",
            };
            writeln!(
                f,
                "{:>4}  {:<8} {:>6}  {:<w$}  {:>12} {:>12} {:>12}  {}",
                i + 1,
                phase,
                s.height,
                s.op,
                s.allocated_bytes,
                s.peak_bytes,
                s.live_bytes,
                s.live.join(", ")
            )?;
        }
        Ok(())
    }
}
