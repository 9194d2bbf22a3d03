//! The backward driver: runs the backward [`Schedule`] on storages,
//! accumulating gradients into leaves.
//!
//! Owns [`run`] (backward from a node, given its seed gradient) and the
//! executing [`Machine`]: kernels run through `exec`,
//! buffers are `Arc<Storage>` (held by nobody else when the reference count
//! is one), saved values come from the nodes with their versions checked.
//! When things run and are released is decided by `schedule` and
//! `interpret`, which the static memory plan replays too.
//!
//! **All or nothing.** Gradients for leaves are summed aside while the
//! schedule runs and committed only when every step succeeded: an error
//! midway (out of memory, a saved value modified in place) leaves every
//! leaf's gradient as it was, so a following `step()` never updates some
//! parameters and not others. The commit allocates everything it needs
//! before it changes the first leaf. (Saved values released by the steps
//! that ran stay released, as after any backward without `retain_graph`.)

use super::interpret::{replay, Machine};
use super::schedule::{Schedule, Slot, Step};
use super::{add_into, add_placed, autograd_error, Leaf, Placement};
use crate::runtime::exec;
use crate::runtime::Storage;
use crate::trace::Origin;
use crate::Error;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Told, during a backward, each leaf's gradient as soon as the schedule
/// will add nothing more to it: the leaf's address and the gradient this
/// backward computed for it (before it is added to one the leaf holds, and
/// before the all-or-nothing commit at the end).
pub(crate) type FinalGradients = Rc<dyn Fn(usize, &Arc<Storage>)>;

thread_local! {
    static OBSERVER: RefCell<Option<FinalGradients>> = const { RefCell::new(None) };
}

/// Runs `f` (which runs backward passes on this thread) with `observer`
/// told every leaf's final gradient as the schedule produces it: what a
/// data-parallel step needs to start reducing a bucket while backward goes
/// on. The previous observer is restored after `f`, even if it panics.
pub(crate) fn observing_final_gradients<R>(observer: FinalGradients, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<FinalGradients>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            OBSERVER.with(|o| *o.borrow_mut() = previous);
        }
    }
    let _restore = Restore(OBSERVER.with(|o| o.borrow_mut().replace(observer)));
    f()
}

struct Executor<'a> {
    schedule: &'a Schedule,
    /// The gradients for leaves, summed aside until `finish`, in order of
    /// first delivery.
    leaves: Vec<(Arc<Leaf>, Option<Arc<Storage>>)>,
    /// Leaf address → index in `leaves`.
    leaf_index: HashMap<usize, usize>,
    /// With an observer: each leaf's deliveries still to come, and whom to
    /// tell when a leaf's count reaches zero.
    observed: Option<(HashMap<usize, usize>, FinalGradients)>,
}

/// How many gradients `schedule` delivers to each leaf (by address).
fn deliveries(schedule: &Schedule) -> HashMap<usize, usize> {
    let mut count = HashMap::new();
    for step in &schedule.steps {
        for &e in &step.deliver {
            if schedule.targets[step.node][e].is_none() {
                if let Origin::Leaf(leaf) = &schedule.nodes[step.node].edges[e] {
                    *count.entry(Arc::as_ptr(leaf) as usize).or_insert(0) += 1;
                }
            }
        }
    }
    count
}

impl Executor<'_> {
    /// The leaf at edge `edge` of node `node`: its address and its index
    /// in `leaves` (added at its first delivery).
    fn leaf_slot(&mut self, node: usize, edge: usize) -> Result<(usize, usize), Error> {
        let Origin::Leaf(leaf) = &self.schedule.nodes[node].edges[edge] else {
            return Err(autograd_error(
                "backward",
                "internal: a gradient was delivered to an edge that is not a leaf".into(),
            ));
        };
        let next = self.leaves.len();
        let address = Arc::as_ptr(leaf) as usize;
        let k = *self.leaf_index.entry(address).or_insert(next);
        if k == next {
            self.leaves.push((leaf.clone(), None));
        }
        Ok((address, k))
    }

    /// One delivery to leaf `k` done: with an observer, tells it the
    /// leaf's gradient once no more will come.
    fn delivered(&mut self, address: usize, k: usize) {
        if let Some((remaining, observer)) = &mut self.observed {
            if let Some(left) = remaining.get_mut(&address) {
                *left -= 1;
                if *left == 0 {
                    if let Some(g) = &self.leaves[k].1 {
                        observer(address, g);
                    }
                }
            }
        }
    }
}

impl Machine for Executor<'_> {
    type Buf = Arc<Storage>;

    fn share(&mut self, b: &Arc<Storage>) -> Arc<Storage> {
        b.clone()
    }

    /// A window shares its root's memory: never written in place.
    fn is_unique(&self, b: &Arc<Storage>) -> bool {
        Arc::strong_count(b) == 1 && !b.is_window()
    }

    fn drop_buf(&mut self, b: Arc<Storage>) {
        drop(b)
    }

    fn check_node(&mut self, node: usize) -> Result<(), Error> {
        let n = &self.schedule.nodes[node];
        let saved = n.saved.lock().unwrap_or_else(|e| e.into_inner());
        if saved.released {
            return Err(autograd_error(
                "backward",
                format!(
                    "the graph through {} was already released by an earlier backward; call backward_retaining_graph() the first time to run backward twice",
                    n.op_name()
                ),
            ));
        }
        Ok(())
    }

    fn saved(&mut self, node: usize, slot: Slot) -> Result<Arc<Storage>, Error> {
        let n = &self.schedule.nodes[node];
        let saved = n.saved.lock().unwrap_or_else(|e| e.into_inner());
        let missing = || {
            autograd_error(
                "backward",
                format!("{} did not save a value its derivative reads", n.op_name()),
            )
        };
        let (s, version) = match slot {
            Slot::Arg(k) => saved
                .args
                .get(k)
                .and_then(|s| s.clone())
                .ok_or_else(missing)?,
            Slot::Out => saved.out.clone().ok_or_else(missing)?,
            Slot::Stage(k) => {
                return saved
                    .stages
                    .get(k)
                    .and_then(|s| s.clone())
                    .ok_or_else(missing)
            }
        };
        if s.version() != version {
            return Err(autograd_error(
                "backward",
                format!(
                    "a value saved by {} was modified in place after it was saved; its derivative would be wrong",
                    n.op_name()
                ),
            ));
        }
        Ok(s)
    }

    fn release_saved(&mut self, node: usize, slot: Slot) {
        let mut saved = self.schedule.nodes[node]
            .saved
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match slot {
            Slot::Arg(k) => saved.args[k] = None,
            Slot::Out => saved.out = None,
            Slot::Stage(k) => saved.stages[k] = None,
        }
        saved.released = true;
    }

    fn release_node(&mut self, node: usize) {
        let mut saved = self.schedule.nodes[node]
            .saved
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        saved.args.iter_mut().for_each(|s| *s = None);
        saved.stages.iter_mut().for_each(|s| *s = None);
        saved.out = None;
        saved.released = true;
    }

    fn run(
        &mut self,
        step: &Step,
        inputs: &[&Arc<Storage>],
        over: Option<usize>,
    ) -> Result<Option<Arc<Storage>>, Error> {
        if let Some(k) = over {
            // SAFETY: the schedule marks `k` only where the stage reads it
            // at its output index alone, and the interpreter checked that
            // nobody else holds the buffer.
            if unsafe { exec::run_in_place(&step.kernel, inputs, k)? } {
                return Ok(None);
            }
        }
        exec::run_new(&step.kernel, inputs).map(Some)
    }

    fn accumulate_leaf(
        &mut self,
        node: usize,
        edge: usize,
        g: Arc<Storage>,
        at: Option<&Placement>,
    ) -> Result<(), Error> {
        let (address, k) = self.leaf_slot(node, edge)?;
        match at {
            Some(at) => add_placed(&mut self.leaves[k].1, &g, at)?,
            None => add_into(&mut self.leaves[k].1, g)?,
        }
        self.delivered(address, k);
        Ok(())
    }

    fn take_leaf_sum(&mut self, node: usize, edge: usize) -> Result<Option<Arc<Storage>>, Error> {
        let (_, k) = self.leaf_slot(node, edge)?;
        Ok(self.leaves[k].1.take())
    }

    fn leaf_summed(&mut self, node: usize, edge: usize, sum: Arc<Storage>) -> Result<(), Error> {
        let (address, k) = self.leaf_slot(node, edge)?;
        self.leaves[k].1 = Some(sum);
        self.delivered(address, k);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), Error> {
        let pending: Vec<(Arc<Leaf>, Arc<Storage>)> = self
            .leaves
            .drain(..)
            .filter_map(|(leaf, g)| Some((leaf, g?)))
            .collect();
        // Everything that can fail happens before the first leaf changes.
        let prepared = pending
            .iter()
            .map(|(leaf, g)| leaf.prepare_sum(g))
            .collect::<Result<Vec<_>, Error>>()?;
        for ((leaf, g), sum) in pending.into_iter().zip(prepared) {
            leaf.commit_sum(g, sum)?;
        }
        Ok(())
    }

    fn add_into(
        &mut self,
        _target: usize,
        slot: &mut Option<Arc<Storage>>,
        g: Arc<Storage>,
        at: Option<&Placement>,
    ) -> Result<(), Error> {
        match at {
            Some(at) => add_placed(slot, &g, at),
            None => add_into(slot, g),
        }
    }
}

/// Runs backward from the output of `root` with gradient `seed`,
/// accumulating into every leaf that requires a gradient (all or
/// nothing). With `retain_graph` the saved values stay for another
/// backward; otherwise each is released right after its last use.
pub(crate) fn run(
    root: &Arc<super::Node>,
    seed: Arc<Storage>,
    retain_graph: bool,
) -> Result<(), Error> {
    let schedule = Schedule::new(root)?;
    let observed = OBSERVER
        .with(|o| o.borrow().clone())
        .map(|observer| (deliveries(&schedule), observer));
    replay(
        &schedule,
        &mut Executor {
            schedule: &schedule,
            leaves: Vec::new(),
            leaf_index: HashMap::new(),
            observed,
        },
        seed,
        retain_graph,
    )
}
