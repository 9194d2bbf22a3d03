//! The one interpreter of a backward [`Schedule`]: the backward driver
//! runs it on storages, the static memory plan on block sizes.
//!
//! Owns [`replay`] and the [`Machine`] interface. Every rule about *when*
//! (which value is held, when it is released, when a result may overwrite
//! its input, how gradients are summed) lives here once; a machine only
//! says *what* an action does: run a kernel, or count the bytes it would
//! allocate. Whether a buffer is held by anyone else, the condition of
//! every in-place decision, is asked of the machine, which knows
//! (reference counts of storages) or models them (the plan's counts).

use super::schedule::{Prog, Schedule, Slot, Step, SumInto, Val};
use super::Placement;
use crate::Error;
use std::collections::HashMap;

/// The actions of a backward (see the module documentation).
pub(super) trait Machine {
    type Buf;
    /// Another reference to `b`.
    fn share(&mut self, b: &Self::Buf) -> Self::Buf;
    /// Whether nobody but the holder of `b` holds its buffer.
    fn is_unique(&self, b: &Self::Buf) -> bool;
    /// Drops a reference.
    fn drop_buf(&mut self, b: Self::Buf);
    /// Fails when node `node` was released by an earlier backward.
    fn check_node(&mut self, node: usize) -> Result<(), Error>;
    /// A reference to what node `node` saved in `slot` (checked unchanged).
    fn saved(&mut self, node: usize, slot: Slot) -> Result<Self::Buf, Error>;
    /// Node `node` drops what it saved in `slot`.
    fn release_saved(&mut self, node: usize, slot: Slot);
    /// Node `node` drops everything it saved and is marked released.
    fn release_node(&mut self, node: usize);
    /// Runs `step` on `inputs`: into a new buffer, or over `inputs[k]` when
    /// `over` is `Some(k)` (`Ok(None)`: done in place).
    fn run(
        &mut self,
        step: &Step,
        inputs: &[&Self::Buf],
        over: Option<usize>,
    ) -> Result<Option<Self::Buf>, Error>;
    /// Adds `g` into edge `edge` of node `node`, a leaf's gradient (at
    /// `at` in it, for a window's node).
    fn accumulate_leaf(
        &mut self,
        node: usize,
        edge: usize,
        g: Self::Buf,
        at: Option<&Placement>,
    ) -> Result<(), Error>;
    /// Takes the gradient summed so far for the leaf at edge `edge` of
    /// node `node` (reached by an earlier step), for a step whose kernel
    /// adds its value to it (`SumInto::Leaf`); [`Machine::leaf_summed`]
    /// gives the sum back when that edge's gradient is delivered.
    fn take_leaf_sum(&mut self, node: usize, edge: usize) -> Result<Option<Self::Buf>, Error>;
    /// Delivers `sum`, the leaf's gradient so far plus a new term, as
    /// that leaf's gradient: a delivery, as [`Machine::accumulate_leaf`]
    /// makes one.
    fn leaf_summed(&mut self, node: usize, edge: usize, sum: Self::Buf) -> Result<(), Error>;
    /// `slot += g`, the pending gradient of node `target` (at `at` in it,
    /// for a window's node): in place when the slot's buffer is held by
    /// nobody else, otherwise into a new buffer.
    fn add_into(
        &mut self,
        target: usize,
        slot: &mut Option<Self::Buf>,
        g: Self::Buf,
        at: Option<&Placement>,
    ) -> Result<(), Error>;
    /// Called once after the last step: the leaves' gradients, held back
    /// until every step succeeded, are committed (all or none).
    fn finish(&mut self) -> Result<(), Error>;
    /// Delivers `g`, which already is the sum of `target`'s incoming
    /// gradient so far and a new term (a step with `Step::into`), into
    /// its empty `slot`.
    fn summed_into(&mut self, target: usize, slot: &mut Option<Self::Buf>, g: Self::Buf) {
        let _ = target;
        *slot = Some(g);
    }
    /// Called after each step (for accounting).
    fn step_done(&mut self, step: &Step, in_place: bool) {
        let _ = (step, in_place);
    }
}

/// Runs `schedule` on `machine`, starting from `seed`, the gradient
/// flowing into the output. With `retain_graph`, nothing saved is
/// released.
pub(super) fn replay<M: Machine>(
    schedule: &Schedule,
    machine: &mut M,
    seed: M::Buf,
    retain_graph: bool,
) -> Result<(), Error> {
    let mut pending: Vec<Option<M::Buf>> = (0..schedule.nodes.len()).map(|_| None).collect();
    pending[schedule.root] = Some(seed);
    // The values of the nodes being run (a node's steps may interleave
    // with other nodes').
    let mut state: HashMap<usize, NodeState<M::Buf>> = HashMap::new();
    for step in &schedule.steps {
        let i = step.node;
        if step.first_of_node {
            machine.check_node(i)?;
            let df = pending[i].take().ok_or_else(|| {
                super::autograd_error(
                    "backward",
                    format!(
                        "no gradient reached {} (internal scheduling error)",
                        schedule.nodes[i].op_name()
                    ),
                )
            })?;
            state.insert(
                i,
                NodeState {
                    df: Some(df),
                    temps: HashMap::new(),
                    saved: HashMap::new(),
                },
            );
        }
        let st = state.get_mut(&i).ok_or_else(|| {
            super::autograd_error(
                "backward",
                "internal: a node ran before its first step".into(),
            )
        })?;
        for v in &step.inputs {
            if let Val::Saved(slot) = *v {
                if let std::collections::hash_map::Entry::Vacant(e) = st.saved.entry(slot) {
                    e.insert(machine.saved(i, slot)?);
                }
            }
        }
        // Values other nodes saved, for the step's run alone.
        let mut others = Vec::new();
        for v in &step.inputs {
            if let Val::SavedBy(node, slot) = *v {
                others.push((*v, machine.saved(node, slot)?));
            }
        }
        let (result, in_place) = match step.passes {
            // No kernel: the value is that input's buffer, shared.
            Some(p) => {
                let input = st.value(&step.inputs[p]).ok_or_else(|| {
                    super::autograd_error(
                        "backward",
                        "internal: a passed input has no value".into(),
                    )
                })?;
                (machine.share(input), false)
            }
            None => match step.into {
                Some(SumInto::Node(t)) => run_adding(machine, st, step, &others, &mut pending[t])?,
                Some(SumInto::Leaf { node, edge }) => {
                    let mut sum = machine.take_leaf_sum(node, edge)?;
                    run_adding(machine, st, step, &others, &mut sum)?
                }
                None => run_step(machine, st, step, &others)?,
            },
        };
        for (_, b) in others {
            machine.drop_buf(b);
        }
        // A window's gradient goes to its block of the base's.
        let at = schedule.nodes[i].placed.as_ref();
        for &e in &step.deliver {
            let g = machine.share(&result);
            match schedule.targets[i][e] {
                Some(t) if step.into == Some(SumInto::Node(t)) => {
                    machine.summed_into(t, &mut pending[t], g)
                }
                Some(t) => machine.add_into(t, &mut pending[t], g, at)?,
                None if step.into == Some(SumInto::Leaf { node: i, edge: e }) => {
                    machine.leaf_summed(i, e, g)?
                }
                None => machine.accumulate_leaf(i, e, g, at)?,
            }
        }
        if step.kept {
            st.temps.insert((step.prog, step.stage), result);
        } else {
            machine.drop_buf(result);
        }
        for v in &step.release {
            match *v {
                Val::Df => {
                    if let Some(b) = st.df.take() {
                        machine.drop_buf(b);
                    }
                }
                Val::Temp(prog, k) => {
                    if let Some(b) = st.temps.remove(&(prog, k)) {
                        machine.drop_buf(b);
                    }
                }
                Val::Saved(slot) => {
                    if let Some(b) = st.saved.remove(&slot) {
                        machine.drop_buf(b);
                    }
                    if !retain_graph {
                        machine.release_saved(i, slot);
                    }
                }
                Val::SavedBy(..) => {}
            }
        }
        if step.last_of_node {
            if let Some(mut st) = state.remove(&i) {
                if let Some(b) = st.df.take() {
                    machine.drop_buf(b);
                }
                for (_, b) in st.temps.drain() {
                    machine.drop_buf(b);
                }
                for (_, b) in st.saved.drain() {
                    machine.drop_buf(b);
                }
            }
            if !retain_graph {
                machine.release_node(i);
            }
        }
        machine.step_done(step, in_place);
    }
    machine.finish()
}

/// Runs `step`'s kernel on its inputs (over one of them when the schedule
/// allows and its buffer is unique): the value, and whether it was made in
/// place.
fn run_step<M: Machine>(
    machine: &mut M,
    st: &mut NodeState<M::Buf>,
    step: &Step,
    others: &[(Val, M::Buf)],
) -> Result<(M::Buf, bool), Error> {
    let over = step.in_place.filter(|&p| {
        st.value(&step.inputs[p])
            .is_some_and(|b| machine.is_unique(b))
    });
    let inputs = st.inputs(step, others)?;
    let produced = machine.run(step, &inputs, over)?;
    drop(inputs);
    Ok(match (produced, over) {
        (Some(b), _) => (b, false),
        (None, Some(p)) => {
            let taken = match step.inputs[p] {
                Val::Df => st.df.take(),
                Val::Temp(prog, k) => st.temps.remove(&(prog, k)),
                Val::Saved(_) | Val::SavedBy(..) => None,
            };
            let b = taken.ok_or_else(|| {
                super::autograd_error("backward", "internal: in-place target vanished".into())
            })?;
            (b, true)
        }
        (None, None) => {
            return Err(super::autograd_error(
                "backward",
                "internal: a step produced nothing".into(),
            ))
        }
    })
}

/// Runs a step whose kernel adds its value to `slot`, the gradient its
/// target has summed so far (`Step::into`): that gradient is the kernel's
/// last input, written over when nobody else holds it.
fn run_adding<M: Machine>(
    machine: &mut M,
    st: &NodeState<M::Buf>,
    step: &Step,
    others: &[(Val, M::Buf)],
    slot: &mut Option<M::Buf>,
) -> Result<(M::Buf, bool), Error> {
    let sum = slot.take().ok_or_else(|| {
        super::autograd_error(
            "backward",
            "internal: a gradient to add into has no value".into(),
        )
    })?;
    let over = machine.is_unique(&sum).then_some(step.inputs.len());
    let mut inputs = st.inputs(step, others)?;
    inputs.push(&sum);
    let produced = machine.run(step, &inputs, over)?;
    drop(inputs);
    Ok(match produced {
        Some(b) => {
            machine.drop_buf(sum);
            (b, false)
        }
        None => (sum, true),
    })
}

/// The values of one node while its steps run.
struct NodeState<B> {
    df: Option<B>,
    temps: HashMap<(Prog, usize), B>,
    saved: HashMap<Slot, B>,
}

impl<B> NodeState<B> {
    /// The values `step` reads, in its inputs' order (`others`: those
    /// other nodes saved).
    fn inputs<'a>(&'a self, step: &Step, others: &'a [(Val, B)]) -> Result<Vec<&'a B>, Error> {
        step.inputs
            .iter()
            .map(|v| {
                let other = || others.iter().find(|(o, _)| o == v).map(|(_, b)| b);
                self.value(v).or_else(other).ok_or_else(|| {
                    super::autograd_error("backward", format!("internal: {v:?} has no value"))
                })
            })
            .collect()
    }

    fn value(&self, v: &Val) -> Option<&B> {
        match *v {
            Val::Df => self.df.as_ref(),
            Val::Temp(prog, k) => self.temps.get(&(prog, k)),
            Val::Saved(slot) => self.saved.get(&slot),
            Val::SavedBy(..) => None,
        }
    }
}
