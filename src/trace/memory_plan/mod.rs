//! The static memory plan of a recorded trace (DeepDSL thesis §4.4,
//! "static memory analysis", and Fig. 4.8): the bytes live after each step
//! of forward and backward and the predicted peak, in the allocator's
//! block sizes.
//!
//! Owns [`MemoryPlan`], [`PlanStep`] and the planning behind
//! [`Tensor::memory_plan`](crate::Tensor::memory_plan). It runs
//! nothing and allocates no tensor memory: backward is replayed from the
//! very [`Schedule`] the backward driver executes (same order, same release
//! points, same in-place decisions), so the backward half is what
//! `backward()` will do; the forward half is a model of what the forward
//! did (see [`MemoryPlan`]).

mod accountant;

use super::interpret::replay;
use super::schedule::{Schedule, Slot};
use super::Node;
use crate::alloc::{self, AllocMode};
use crate::runtime::Storage;
use crate::trace::Origin;
use crate::DType;
use crate::Error;
use accountant::Accountant;
use std::collections::{BTreeSet, HashMap};
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
/// analysis"), from [`Tensor::memory_plan`](crate::Tensor::memory_plan). Printing it gives the table of
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

/// The plan of `backward()` from the output of `node` (`numel` elements of
/// `dtype`) in the block sizes of `mode`.
pub(crate) fn plan_backward(
    node: &Arc<Node>,
    numel: usize,
    dtype: DType,
    mode: AllocMode,
) -> Result<MemoryPlan, Error> {
    Planner::new(mode).run(&Schedule::new(node)?, numel, dtype)
}

/// A buffer the plan tracks, with the references a real one would have.
struct Buf {
    bytes: usize,
    /// Elements, for a buffer that may be summed into (a new buffer of the
    /// same size).
    len: usize,
    dtype: DType,
    /// Listed in the live tensors under this name.
    name: Option<String>,
    live: bool,
    refs: usize,
}

struct Planner {
    mode: AllocMode,
    bufs: Vec<Buf>,
    /// Named buffers now live (kept incrementally: listing them is linear
    /// in the live ones, not in every buffer of the plan).
    named_live: BTreeSet<usize>,
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
            named_live: BTreeSet::new(),
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
        let bytes = len.saturating_mul(dtype.size());
        match self.mode {
            AllocMode::RuntimeEfficient => alloc::size_class(bytes),
            AllocMode::MemoryEfficient => alloc::exact_size(bytes),
        }
        .unwrap_or(usize::MAX)
    }

    /// A buffer live from the start, with `refs` holders.
    fn existing(&mut self, bytes: usize, refs: usize) -> usize {
        self.bufs.push(Buf {
            bytes,
            len: 0,
            dtype: DType::F32,
            name: None,
            live: true,
            refs,
        });
        self.live += bytes;
        self.peak = self.peak.max(self.live);
        self.bufs.len() - 1
    }

    /// A new buffer of `len` elements with one holder.
    fn alloc(&mut self, len: usize, dtype: DType, name: Option<String>) -> usize {
        let bytes = self.block(len, dtype);
        self.alloc_bytes(bytes, len, dtype, name)
    }

    fn alloc_bytes(
        &mut self,
        bytes: usize,
        len: usize,
        dtype: DType,
        name: Option<String>,
    ) -> usize {
        self.bufs.push(Buf {
            bytes,
            len,
            dtype,
            name,
            live: true,
            refs: 1,
        });
        let b = self.bufs.len() - 1;
        if self.bufs[b].name.is_some() {
            self.named_live.insert(b);
        }
        self.live = self.live.saturating_add(bytes);
        self.step_alloc = self.step_alloc.saturating_add(bytes);
        self.step_peak = self.step_peak.max(self.live);
        b
    }

    fn name(&mut self, b: usize, name: Option<String>) {
        self.bufs[b].name = name;
        if self.bufs[b].name.is_some() && self.bufs[b].live {
            self.named_live.insert(b);
        } else {
            self.named_live.remove(&b);
        }
    }

    fn share(&mut self, b: usize) -> usize {
        self.bufs[b].refs += 1;
        b
    }

    /// Drops one reference; the block is freed with the last.
    fn unref(&mut self, b: usize) {
        let buf = &mut self.bufs[b];
        buf.refs = buf.refs.saturating_sub(1);
        if buf.refs == 0 && std::mem::replace(&mut buf.live, false) {
            self.live -= buf.bytes;
            self.named_live.remove(&b);
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
            .named_live
            .iter()
            .filter_map(|&b| self.bufs[b].name.clone())
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

    fn run(mut self, schedule: &Schedule, numel: usize, dtype: DType) -> Result<MemoryPlan, Error> {
        let nodes = &schedule.nodes;
        // Saved values: which storage each (node, slot) holds, and how many
        // slots of the trace hold each storage. No strong reference is
        // taken, so the counts below are the caller's.
        let mut saved_at: HashMap<(usize, Slot), usize> = HashMap::new();
        let mut saved_refs: HashMap<usize, usize> = HashMap::new();
        // Per node: whether its forward ran the recording program (it kept
        // forward values), and the storage of each kept stage.
        let mut recorded: Vec<bool> = vec![false; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let s = n.saved.lock().unwrap_or_else(|e| e.into_inner());
            let mut slots: Vec<(Slot, Option<&Arc<Storage>>)> = s
                .args
                .iter()
                .enumerate()
                .map(|(k, a)| (Slot::Arg(k), a.as_ref().map(|x| &x.0)))
                .collect();
            slots.push((Slot::Out, s.out.as_ref().map(|x| &x.0)));
            for (k, st) in s.stages.iter().enumerate() {
                slots.push((Slot::Stage(k), st.as_ref()));
                recorded[i] |= st.is_some();
            }
            for (slot, v) in slots {
                if let Some(st) = v {
                    let p = Arc::as_ptr(st) as usize;
                    saved_at.insert((i, slot), p);
                    *saved_refs.entry(p).or_default() += 1;
                }
            }
        }
        let refs_of = |p: usize| saved_refs.get(&p).copied().unwrap_or(0);
        // Held outside the trace's saved slots (by tensors, other traces).
        let outside = |p: usize, strong: usize| strong > refs_of(p);

        // Forward values, by storage address, and the node producing each
        // (an alias shares its input's storage: the input's value, or a
        // baseline storage).
        let mut value_of: HashMap<usize, usize> = HashMap::new(); // ptr -> producing node
        for (j, n) in nodes.iter().enumerate() {
            if !n.plan.is_alias() {
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
        let mut created_at: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
        let mut known: BTreeSet<usize> = BTreeSet::new();
        for (j, n) in nodes.iter().enumerate() {
            for w in &n.storages.inputs {
                let p = w.as_ptr() as usize;
                if value_of.contains_key(&p) || !known.insert(p) {
                    continue;
                }
                let strong = w.strong_count();
                if strong == 0 {
                    continue;
                }
                let bytes = w.upgrade().map_or(0, |s: Arc<Storage>| s.block_bytes());
                if outside(p, strong) {
                    // Never freed: one reference stands for the outside.
                    let b = self.existing(bytes, refs_of(p) + 1);
                    buf_of.insert(p, b);
                } else {
                    created_at[j].push((p, bytes));
                }
            }
        }
        // Leaves' gradients: held by the leaf (and, when shared, outside).
        let mut leaves: Vec<Option<usize>> = Vec::new();
        let mut leaf_of: HashMap<usize, usize> = HashMap::new(); // Leaf ptr -> index
        for n in nodes.iter() {
            for e in &n.edges {
                if let Origin::Leaf(leaf) = e {
                    let p = Arc::as_ptr(leaf) as usize;
                    if leaf_of.contains_key(&p) {
                        continue;
                    }
                    let slot = leaf.grad().map(|g| {
                        // One reference is the one just returned.
                        let refs = if Arc::strong_count(&g) > 2 { 2 } else { 1 };
                        let b = self.existing(g.block_bytes(), refs);
                        self.bufs[b].len = g.len();
                        self.bufs[b].dtype = g.dtype();
                        b
                    });
                    leaf_of.insert(p, leaves.len());
                    leaves.push(slot);
                }
            }
        }
        let baseline = self.live;

        // Forward: each node's program, its temporaries freed at their
        // last use, its output and kept values referenced by their holders.
        let mut fwd_height = vec![0usize; nodes.len()];
        for (j, n) in nodes.iter().enumerate() {
            self.begin();
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
                let b = self.alloc_bytes(bytes, 0, n.plan.dtype, None);
                self.bufs[b].refs = refs_of(q);
                buf_of.insert(q, b);
            }
            let p = n.storages.out.as_ptr() as usize;
            let op = if value_of.get(&p) == Some(&j) {
                let program = match (&n.plan.plain, recorded[j]) {
                    (Some(plain), false) => plain,
                    _ => &n.grad.forward,
                };
                let kept: Vec<Option<usize>> = (0..program.program.stages.len())
                    .map(|k| saved_at.get(&(j, Slot::Stage(k))).copied())
                    .collect();
                let stages = &program.program.stages;
                let mut bufs: Vec<Option<usize>> = vec![None; stages.len()];
                for (k, stage) in stages.iter().enumerate() {
                    let out_stage = program.program.outputs.contains(&k);
                    let name = out_stage.then(|| format!("y{}", j + 1));
                    let b = self.alloc(stage.len(), n.plan.dtype, name);
                    bufs[k] = Some(b);
                    // Temporaries whose last reader this was.
                    for src in &stage.sources {
                        if let crate::planner::Source::Stage(l) = *src {
                            if program.last_use[l] == k && !program.program.outputs.contains(&l) {
                                if let Some(bl) = bufs[l] {
                                    self.unref(bl);
                                }
                            }
                        }
                    }
                    if out_stage {
                        // The value: its holders are the saved slots, the
                        // outside, and the forward code until its last
                        // consumer (the program's own reference).
                        let held = outside(p, n.storages.out.strong_count());
                        let mut refs = refs_of(p) + usize::from(held);
                        if last_use.contains_key(&p) {
                            refs += 1;
                        }
                        buf_of.insert(p, b);
                        self.bufs[b].refs = refs;
                        if refs == 0 {
                            self.bufs[b].refs = 1;
                            self.unref(b);
                        }
                    } else if let Some(q) = kept[k] {
                        // Kept for backward: held by the node's slot (and
                        // the program until its last use).
                        if program.last_use[k] == k {
                            self.bufs[b].refs = refs_of(q);
                        } else {
                            self.bufs[b].refs += refs_of(q);
                        }
                        buf_of.insert(q, b);
                    } else if program.last_use[k] == k {
                        self.unref(b); // read by nothing
                    }
                }
                if stages.len() > 1 {
                    format!("y{} = {} ({} stages)", j + 1, n.op_name(), stages.len())
                } else {
                    format!("y{} = {}", j + 1, n.op_name())
                }
            } else {
                match value_of.get(&p) {
                    Some(k) => format!("y{} = {} (alias of y{})", j + 1, n.op_name(), k + 1),
                    None => format!("y{} = {} (alias of an input)", j + 1, n.op_name()),
                }
            };
            // Values whose last forward use this was: the forward code
            // drops its reference.
            for q in &last_uses[j] {
                if let Some(&b) = buf_of.get(q) {
                    self.unref(b);
                }
            }
            self.end(Phase::Forward, op, fwd_height[j]);
        }

        // Backward, replayed from the schedule the driver runs.
        let h0 = fwd_height[schedule.root] + 1;
        self.begin();
        let seed = self.alloc(numel, dtype, Some(format!("z{}", schedule.root + 1)));
        self.end(
            Phase::Backward,
            format!("z{} = ones (seed)", schedule.root + 1),
            h0,
        );
        let mut accountant = Accountant {
            p: &mut self,
            schedule,
            saved_at: &saved_at,
            buf_of: &buf_of,
            released: BTreeSet::new(),
            pending: vec![None; leaves.len()],
            leaves,
            leaf_of: &leaf_of,
            new_slot: Vec::new(),
            h0,
        };
        replay(schedule, &mut accountant, seed, false)?;
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
