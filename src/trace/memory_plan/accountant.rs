//! The [`Machine`] that counts bytes: the backward half of a memory plan.
//! Each action of the backward driver is replayed on buffers of the
//! allocator's block sizes (`super::Planner`), with modelled references,
//! so the plan follows exactly what `backward()` will do. Owns the
//! accounting of saved values, pending and committed leaf gradients, and
//! the step labels; must not run anything.

use super::{Phase, Planner};
use crate::trace::interpret::Machine;
use crate::trace::schedule::{Prog, Schedule, Slot, Step};
use crate::trace::{autograd_error, Origin, Placement};
use crate::Error;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The [`Machine`] that counts bytes: each action of the backward driver
/// on buffers of the allocator's block sizes, with modelled references.
pub(super) struct Accountant<'a> {
    pub(super) p: &'a mut Planner,
    pub(super) schedule: &'a Schedule,
    pub(super) saved_at: &'a HashMap<(usize, Slot), usize>,
    pub(super) buf_of: &'a HashMap<usize, usize>,
    pub(super) released: BTreeSet<(usize, Slot)>,
    /// Per leaf: its gradient's buffer.
    pub(super) leaves: Vec<Option<usize>>,
    /// Per leaf: the gradient summed aside until `finish` (as the driver
    /// commits all leaves at once).
    pub(super) pending: Vec<Option<usize>>,
    pub(super) leaf_of: &'a HashMap<usize, usize>,
    /// Per delivery of the current step: whether it created the gradient.
    pub(super) new_slot: Vec<bool>,
    pub(super) h0: usize,
}

impl Accountant<'_> {
    fn slot_buf(&self, node: usize, slot: Slot) -> Option<usize> {
        let p = self.saved_at.get(&(node, slot))?;
        self.buf_of.get(p).copied()
    }

    /// The index of the leaf at edge `edge` of node `node`.
    fn leaf_index(&self, node: usize, edge: usize) -> Result<usize, Error> {
        match &self.schedule.nodes[node].edges[edge] {
            Origin::Leaf(leaf) => Ok(self.leaf_of[&(Arc::as_ptr(leaf) as usize)]),
            _ => Err(autograd_error(
                "memory_plan",
                "internal: a gradient was delivered to an edge that is not a leaf".into(),
            )),
        }
    }

    fn sum_into(&mut self, slot: &mut Option<usize>, g: usize, at: Option<&Placement>) {
        if let Some(at) = at {
            return self.place_into(slot, g, at);
        }
        match *slot {
            None => {
                *slot = Some(g);
                self.new_slot.push(true);
            }
            Some(cur) if self.p.bufs[cur].refs == 1 => {
                self.p.unref(g);
                self.new_slot.push(false);
            }
            Some(cur) => {
                let (len, dtype) = (self.p.bufs[cur].len, self.p.bufs[cur].dtype);
                let sum = self.p.alloc(len, dtype, None);
                let name = self.p.bufs[cur].name.clone();
                self.p.unref(cur);
                self.p.unref(g);
                self.p.name(sum, name);
                *slot = Some(sum);
                self.new_slot.push(false);
            }
        }
    }

    /// `slot += g` placed at `at` (`trace::add_placed`): in place when the
    /// slot's buffer is unique, else into a new buffer of the whole.
    fn place_into(&mut self, slot: &mut Option<usize>, g: usize, at: &Placement) {
        match *slot {
            Some(cur) if self.p.bufs[cur].refs == 1 => {
                self.p.unref(g);
                self.new_slot.push(false);
            }
            cur => {
                let dtype = self.p.bufs[g].dtype;
                let sum = self.p.alloc(at.of, dtype, None);
                if let Some(cur) = cur {
                    let name = self.p.bufs[cur].name.clone();
                    self.p.unref(cur);
                    self.p.name(sum, name);
                }
                self.p.unref(g);
                *slot = Some(sum);
                self.new_slot.push(cur.is_none());
            }
        }
    }
}

impl Machine for Accountant<'_> {
    type Buf = usize;

    fn share(&mut self, b: &usize) -> usize {
        self.p.share(*b)
    }

    fn is_unique(&self, b: &usize) -> bool {
        self.p.bufs[*b].refs == 1
    }

    fn drop_buf(&mut self, b: usize) {
        self.p.unref(b)
    }

    fn check_node(&mut self, _node: usize) -> Result<(), Error> {
        Ok(())
    }

    fn saved(&mut self, node: usize, slot: Slot) -> Result<usize, Error> {
        let b = self.slot_buf(node, slot).ok_or_else(|| {
            autograd_error(
                "memory_plan",
                format!(
                    "{} did not save a value its derivative reads",
                    self.schedule.nodes[node].op_name()
                ),
            )
        })?;
        Ok(self.p.share(b))
    }

    fn release_saved(&mut self, node: usize, slot: Slot) {
        if !self.released.insert((node, slot)) {
            return;
        }
        if let Some(b) = self.slot_buf(node, slot) {
            self.p.unref(b);
        }
    }

    fn release_node(&mut self, node: usize) {
        let slots: Vec<Slot> = self
            .saved_at
            .keys()
            .filter(|(i, _)| *i == node)
            .map(|(_, s)| *s)
            .collect();
        for slot in slots {
            self.release_saved(node, slot);
        }
    }

    fn run(
        &mut self,
        step: &Step,
        _inputs: &[&usize],
        over: Option<usize>,
    ) -> Result<Option<usize>, Error> {
        self.p.begin();
        self.new_slot.clear();
        if over.is_some() {
            return Ok(None);
        }
        let len: usize = step.kernel.output_shape().iter().product();
        Ok(Some(self.p.alloc(len, step.kernel.dtype(), None)))
    }

    fn accumulate_leaf(
        &mut self,
        node: usize,
        edge: usize,
        g: usize,
        at: Option<&Placement>,
    ) -> Result<(), Error> {
        let k = self.leaf_index(node, edge)?;
        let mut slot = self.pending[k];
        self.sum_into(&mut slot, g, at);
        if let Some(b) = slot {
            self.p.name(b, None);
        }
        self.pending[k] = slot;
        Ok(())
    }

    fn take_leaf_sum(&mut self, node: usize, edge: usize) -> Result<Option<usize>, Error> {
        let k = self.leaf_index(node, edge)?;
        Ok(self.pending[k].take())
    }

    fn leaf_summed(&mut self, node: usize, edge: usize, sum: usize) -> Result<(), Error> {
        let k = self.leaf_index(node, edge)?;
        self.p.name(sum, None);
        self.new_slot.push(false);
        self.pending[k] = Some(sum);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), Error> {
        // Committing into leaves without a gradient moves buffers; into
        // existing gradients it adds (a step of its own).
        let adds = self
            .leaves
            .iter()
            .zip(&self.pending)
            .any(|(l, p)| l.is_some() && p.is_some());
        if adds {
            self.p.begin();
        }
        for k in 0..self.leaves.len() {
            if let Some(g) = self.pending[k].take() {
                let mut slot = self.leaves[k];
                self.sum_into(&mut slot, g, None);
                self.leaves[k] = slot;
            }
        }
        self.new_slot.clear();
        if adds {
            let height = self.h0 + 1 + self.schedule.height.iter().copied().max().unwrap_or(0);
            self.p.end(
                Phase::Backward,
                "leaves' gradients += summed gradients".into(),
                height,
            );
        }
        Ok(())
    }

    fn add_into(
        &mut self,
        target: usize,
        slot: &mut Option<usize>,
        g: usize,
        at: Option<&Placement>,
    ) -> Result<(), Error> {
        self.sum_into(slot, g, at);
        if let Some(b) = *slot {
            self.p.name(b, Some(format!("z{}", target + 1)));
        }
        Ok(())
    }

    fn summed_into(&mut self, target: usize, slot: &mut Option<usize>, g: usize) {
        self.p.name(g, Some(format!("z{}", target + 1)));
        self.new_slot.push(false);
        *slot = Some(g);
    }

    fn step_done(&mut self, step: &Step, in_place: bool) {
        let n = &self.schedule.nodes[step.node];
        let args = n.plan.f.args();
        let mut parts: Vec<String> = Vec::new();
        for (d, &e) in step.deliver.iter().enumerate() {
            let dname = format!("d{}/d{}", n.op_name(), args[e].name);
            let created = self.new_slot.get(d).copied().unwrap_or(true);
            parts.push(match self.schedule.targets[step.node][e] {
                None => format!("grad {} of {} = {dname}", args[e].name, n.op_name()),
                Some(t) if created => format!("z{} = {dname}", t + 1),
                Some(t) => format!("z{} += {dname}", t + 1),
            });
        }
        let mut op = if parts.is_empty() {
            match step.prog {
                Prog::Forward => {
                    format!("{}: forward stage {} (recomputed)", n.op_name(), step.stage)
                }
                Prog::Backward => format!("{}: stage {}", n.op_name(), step.stage),
            }
        } else {
            parts.join(", ")
        };
        if in_place {
            op.push_str(" [in place]");
        }
        let height = self.h0 + 1 + self.schedule.height[step.node];
        self.p.end(Phase::Backward, op, height);
    }
}
