//! Optimizers: [`SGD`] (momentum, dampening, Nesterov, weight decay),
//! [`Adam`], [`AdamW`] and [`RMSprop`], with PyTorch's update formulas,
//! and their state by PyTorch's names ([`Optimizer::state_dict`]). Each
//! takes one list of parameters (`new`) or [`ParamGroup`]s with their own
//! options (`with_groups`, PyTorch's `param_groups`).
//!
//! Every update is an index function like any op's, compiled once per
//! parameter size: **one fused kernel per parameter and step**. The
//! parameter's storage keeps its identity (tensors sharing it see the new
//! values; its version is bumped, so a graph that saved the old values
//! refuses a second backward). Hyperparameters that vary (the learning
//! rate, Adam's bias corrections) are scalar tensors (`lr[]`) the optimizer
//! owns and overwrites each step, never text baked into the source.
//! Optimizer state and the kernels are created by the constructor, so
//! `step` parses, derives and compiles nothing.
//!
//! | optimizer | the one kernel per parameter |
//! | --- | --- |
//! | `SGD`, no momentum | `p ← p − lr·d`, written in place over `p` |
//! | `SGD` with momentum (also Nesterov) | rows `[p; v]` of the parameter's block → a fresh block that replaces it |
//! | `Adam`, `AdamW` | rows `[p; m; v]` of the parameter's block → a fresh block that replaces it |
//! | `RMSprop` | rows `[p; square_avg; (grad_avg); (momentum_buffer)]` → a fresh block |
//!
//! With state, the state lives in the parameter's own block, after its `n`
//! elements (the tensor sees only those): the kernel reads the stacked
//! block and writes all rows of the new one, each row reading only column
//! `i` of the old block, so no element is read after it was overwritten and
//! the rows can run on any thread. The old block returns to the allocator
//! (a cached block in runtime-efficient mode: no system allocation after
//! the first step).
//!
//! ```
//! use tenjin::optim::{Optimizer, SgdConfig, SGD};
//! use tenjin::Tensor;
//! let w = Tensor::from_vec_f64(vec![1.0, -2.0], &[2])?.requires_grad();
//! let mut opt = SGD::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() })?;
//! for _ in 0..3 {
//!     opt.zero_grad();
//!     w.mul(&w)?.sum()?.backward()?; // d/dw = 2w
//!     opt.step()?;                   // w ← w − 0.1·2w = 0.8·w
//! }
//! let v = w.to_vec_f64()?;
//! assert!((v[0] - 0.512).abs() < 1e-12 && (v[1] + 1.024).abs() < 1e-12);
//! # Ok::<(), tenjin::Error>(())
//! ```

mod adam;
mod groups;
pub mod lr_scheduler;
mod rmsprop;
mod sgd;

pub use adam::{Adam, AdamConfig, AdamW};
pub use groups::ParamGroup;
pub use rmsprop::{RMSprop, RmspropConfig};
pub use sgd::{SgdConfig, SGD};

use crate::alloc::Device;
use crate::runtime::exec;
use crate::runtime::Storage;
use crate::runtime::{compile_for, CompiledKernel};
use crate::symbolic::IndexFn;
use crate::tensor::Tensor;
use crate::trace::Origin;
use crate::DType;
use crate::Error;
use std::sync::Arc;

/// Updates parameters from their gradients.
///
/// A training step is `zero_grad`, forward, `backward`, `step`.
pub trait Optimizer {
    /// Updates every parameter that has a gradient, in place. Parameters
    /// without a gradient (not reached by `backward`) are left alone.
    fn step(&mut self) -> Result<(), Error>;

    /// Clears the gradients of all parameters (they become `None`, as
    /// PyTorch's `set_to_none=True`).
    fn zero_grad(&self);

    /// The current learning rate (of the first parameter group).
    fn learning_rate(&self) -> f64;

    /// Changes the learning rate used by the following steps, in every
    /// parameter group. No kernel is recompiled: the rate is a scalar
    /// tensor argument.
    fn set_learning_rate(&mut self, lr: f64) -> Result<(), Error>;

    /// The learning rate of each parameter group (PyTorch's
    /// `[g["lr"] for g in opt.param_groups]`).
    fn learning_rates(&self) -> Vec<f64> {
        vec![self.learning_rate()]
    }

    /// Sets each parameter group's rate: exactly one per group, all
    /// checked before any is set.
    fn set_learning_rates(&mut self, lrs: &[f64]) -> Result<(), Error> {
        match lrs {
            [lr] => self.set_learning_rate(*lr),
            _ => Err(invalid(
                "set_learning_rates",
                format!("{} learning rates for 1 parameter group", lrs.len()),
            )),
        }
    }

    /// The momentum a schedule may cycle (`lr_scheduler::OneCycleLR`):
    /// SGD's and RMSprop's `momentum` when they were built with one,
    /// Adam's `betas.0`; `None` for an optimizer without it.
    fn momentum(&self) -> Option<f64> {
        None
    }

    /// Changes that momentum for the following steps (a scalar tensor
    /// argument, like the rate: nothing is recompiled). An optimizer
    /// without one (SGD built with `momentum: 0` updates in place and keeps
    /// no buffer) returns an error and is left as it was.
    fn set_momentum(&mut self, momentum: f64) -> Result<(), Error> {
        Err(invalid(
            "set_momentum",
            format!("this optimizer has no momentum to set to {momentum}"),
        ))
    }

    /// The per-parameter state with PyTorch's names: `state.{k}.{name}`
    /// for parameter `k` (SGD: `momentum_buffer`; Adam: `step`, `exp_avg`,
    /// `exp_avg_sq`; RMSprop: `step`, `square_avg`, `grad_avg`,
    /// `momentum_buffer`), entries that appear once the state exists
    /// (after the first step); and each group's current rate,
    /// `param_groups.{g}.lr` (PyTorch's `param_groups[g]["lr"]`), so a
    /// resumed run continues at the rate a schedule had set. The other
    /// hyperparameters are the configuration's.
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>, Error>;

    /// Restores a state made by [`Optimizer::state_dict`] for the same
    /// parameters; a parameter with no entries starts afresh, and the
    /// rates are left as they are when no `param_groups` entry is given
    /// (then every group needs one). A wrong shape or an unknown key is
    /// an error, and then nothing has changed.
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<(), Error>;
}

/// The gradient an update follows, `d` in the optimizers' documentation,
/// as index-function text: `g[i]` (`(-g[i])` with `maximize`), plus
/// `wd[] * {param}` with L2 weight decay on `param`'s element.
pub(crate) fn update_gradient(maximize: bool, decay_of: Option<&str>) -> String {
    let g = if maximize { "(-g[i])" } else { "g[i]" };
    match decay_of {
        Some(p) => format!("({g} + wd[] * {p})"),
        None => g.to_string(),
    }
}

pub(crate) fn invalid(op: &str, message: String) -> Error {
    Error::Invalid {
        function: op.to_string(),
        message,
    }
}

/// `value` must be finite and at least zero.
pub(crate) fn check_non_negative(op: &str, name: &str, value: f64) -> Result<(), Error> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} must be finite and >= 0, got {value}"),
        ))
    }
}

/// A new momentum for an optimizer built with `built` (SGD's, RMSprop's):
/// one built with a momentum keeps a buffer, so its momentum stays above
/// 0; one built without keeps none and cannot get one.
pub(crate) fn checked_momentum(op: &str, built: f64, momentum: f64) -> Result<f64, Error> {
    check_non_negative(op, "momentum", momentum)?;
    if built == 0.0 {
        return Err(invalid(
            op,
            format!("built with momentum 0 (no momentum buffer): cannot set momentum {momentum}; build it with momentum > 0"),
        ));
    }
    if momentum == 0.0 {
        return Err(invalid(
            op,
            "built with a momentum buffer: its momentum must stay > 0, got 0".into(),
        ));
    }
    Ok(momentum)
}

/// A parameter an optimizer updates: a dense leaf that requires a gradient.
pub(crate) struct Param {
    tensor: Tensor,
    leaf: Arc<crate::trace::Leaf>,
}

impl Param {
    /// Validates `params`: dense leaves that require a gradient, each
    /// listed once (a parameter listed twice would be updated twice).
    pub(crate) fn collect(op: &str, params: Vec<Tensor>) -> Result<Vec<Param>, Error> {
        if params.is_empty() {
            return Err(invalid(
                op,
                "no parameters to optimize (a custom module lists its parameters by implementing Module::named_parameters, or its children by named_children)".into(),
            ));
        }
        let mut out: Vec<Param> = Vec::with_capacity(params.len());
        for (i, t) in params.into_iter().enumerate() {
            let p = Param::new(op, i, t)?;
            if let Some(j) = out.iter().position(|q| Arc::ptr_eq(&q.leaf, &p.leaf)) {
                return Err(invalid(
                    op,
                    format!("parameter {i} is parameter {j} again; list each parameter once"),
                ));
            }
            out.push(p);
        }
        Ok(out)
    }

    fn new(op: &str, index: usize, t: Tensor) -> Result<Param, Error> {
        if t.is_view() {
            return Err(invalid(
                op,
                format!(
                    "parameter {index} (shape {:?}) is a view; pass the leaf tensor itself",
                    t.shape()
                ),
            ));
        }
        let leaf = match t.origin() {
            Origin::Leaf(leaf) => leaf.clone(),
            _ => {
                return Err(invalid(
                    op,
                    format!(
                        "parameter {index} (shape {:?}) is not a leaf that requires a gradient; create it with .requires_grad()",
                        t.shape()
                    ),
                ))
            }
        };
        Ok(Param { tensor: t, leaf })
    }

    pub(crate) fn storage(&self) -> &Arc<Storage> {
        self.tensor.storage_and_origin().0
    }

    pub(crate) fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }

    pub(crate) fn numel(&self) -> usize {
        self.storage().len()
    }

    /// The device holding the parameter.
    pub(crate) fn device(&self) -> Device {
        self.storage().device()
    }

    pub(crate) fn dtype(&self) -> DType {
        self.tensor.dtype()
    }

    /// The accumulated gradient, checked against the parameter.
    pub(crate) fn grad(&self, op: &str) -> Result<Option<Arc<Storage>>, Error> {
        let Some(g) = self.leaf.grad() else {
            return Ok(None);
        };
        if g.len() != self.numel() || g.dtype() != self.dtype() {
            return Err(invalid(
                op,
                format!(
                    "the gradient of a parameter of shape {:?} ({:?}) has {} {:?} elements",
                    self.tensor.shape(),
                    self.dtype(),
                    g.len(),
                    g.dtype()
                ),
            ));
        }
        Ok(Some(g))
    }

    pub(crate) fn zero_grad(&self) {
        self.leaf.clear();
    }
}

/// Where a set of hyperparameter storages lives.
type ScalarsKey = (DType, Device);

/// Hyperparameter tensors (scalars `lr[]`, small vectors `beta[j]`), one
/// storage per name, dtype and device (where the parameters they update
/// live), created once and overwritten in place before an update where
/// their values changed (on a GPU an unchanged learning rate costs
/// nothing, a changed one a fill kernel: no copy and no wait).
pub(crate) struct Scalars {
    /// Name and number of elements of each tensor.
    layout: &'static [(&'static str, usize)],
    /// Per dtype and device: one storage per entry of `layout`, and the
    /// values they hold (empty before the first `set`).
    slots: Vec<(ScalarsKey, Vec<Arc<Storage>>, Vec<f64>)>,
}

impl Scalars {
    pub(crate) fn new(layout: &'static [(&'static str, usize)]) -> Scalars {
        Scalars {
            layout,
            slots: Vec::new(),
        }
    }

    /// The slot of `param`'s dtype and device, its storages allocated
    /// once.
    fn prepare(&mut self, param: &Param) -> Result<usize, Error> {
        let key = (param.dtype(), param.device());
        if key.0.is_half() {
            return Err(Error::DType {
                op: "optimizer".into(),
                message: format!(
                    "a {:?} parameter: optimizers update F32 or F64 master weights; keep the parameters in F32 and compute in half precision under tenjin::autocast",
                    key.0
                ),
            });
        }
        if !key.0.kernels_compute_in() {
            return Err(crate::dtype::not_computable("optimizer", key.0));
        }
        if let Some(k) = self.slots.iter().position(|(k, ..)| *k == key) {
            return Ok(k);
        }
        let storages = self
            .layout
            .iter()
            .map(|&(_, len)| Storage::zeros_on(key.1, key.0, len))
            .collect::<Result<_, Error>>()?;
        self.slots.push((key, storages, Vec::new()));
        Ok(self.slots.len() - 1)
    }

    /// Allocates the storages for the dtypes and devices of `params`
    /// (once each).
    pub(crate) fn prepare_for(&mut self, params: &[Param]) -> Result<(), Error> {
        for p in params {
            self.prepare(p)?;
        }
        Ok(())
    }

    /// Writes `values` (all tensors' elements, in layout order) into the
    /// storages for `param`'s dtype and device: each element that changed
    /// by a fill (on a GPU, a launch with the value as its parameter: no
    /// copy, no wait).
    pub(crate) fn set(&mut self, param: &Param, values: &[f64]) -> Result<(), Error> {
        let layout = self.layout;
        debug_assert_eq!(values.len(), layout.iter().map(|(_, n)| n).sum::<usize>());
        let k = self.prepare(param)?;
        let (_, storages, held) = &mut self.slots[k];
        if held.as_slice() == values {
            return Ok(());
        }
        let before = std::mem::take(held);
        let mut at = 0;
        for (s, &(_, len)) in storages.iter().zip(layout) {
            for j in 0..len {
                let v = values[at + j];
                // Compared as bits: a NaN hyperparameter is written once.
                if before.get(at + j).map(|b| b.to_bits()) != Some(v.to_bits()) {
                    s.fill_span(j, 1, v)?;
                }
            }
            at += len;
        }
        held.extend_from_slice(values);
        Ok(())
    }

    /// The storage of the tensor called `name` for `param` (after `set`).
    pub(crate) fn get(&self, param: &Param, name: &str) -> Option<&Arc<Storage>> {
        let key = (param.dtype(), param.device());
        let slots = &self.slots.iter().find(|(k, ..)| *k == key)?.1;
        let k = self.layout.iter().position(|(n, _)| *n == name)?;
        slots.get(k)
    }
}

/// One compiled update of a parameter together with its optimizer state:
/// the parameter's block holds `rows` rows of `n` elements (the parameter,
/// then the state); the kernel computes all of them from the argument `s`
/// (the stacked block) into a fresh block that replaces the old one.
pub(crate) struct StackedUpdate {
    kernel: Arc<CompiledKernel>,
    rows: usize,
    /// This update's mark on the parameter's storage: another optimizer
    /// that moves the parameter into a block of its own replaces it, and
    /// this update then refuses to run rather than read foreign state.
    token: u64,
}

static NEXT_TOKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl StackedUpdate {
    /// Compiles `src` (output `[rows, n]` with the row index `r`, the
    /// stacked block as `s[r; i]`) for `param`, and moves `param` into a
    /// block with `rows` rows: its values in row 0, zero state after them.
    pub(crate) fn new(
        src: &str,
        args: &[(&str, &[usize])],
        rows: usize,
        param: &Param,
    ) -> Result<StackedUpdate, Error> {
        let f = IndexFn::parse_with_sizes(src, args, &[("r", rows)])?;
        let kernel = compile_for(&f, param.dtype(), param.storage().device())?;
        let stacked = Storage::zeros_on(
            param.storage().device(),
            param.dtype(),
            rows * param.numel(),
        )?;
        stacked.copy_from(param.storage())?; // row 0
        let block = stacked
            .into_buffer()
            .ok_or_else(|| invalid("optimizer", "a fresh block is shared".into()))?;
        let token = NEXT_TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(param.storage().replace_buffer(block, token)?);
        Ok(StackedUpdate {
            kernel,
            rows,
            token,
        })
    }

    /// Runs the update for `param`, `arg` giving the other arguments'
    /// storages by name.
    pub(crate) fn run<'a>(
        &self,
        param: &'a Param,
        arg: impl Fn(&str) -> Option<&'a Arc<Storage>>,
    ) -> Result<(), Error> {
        let stacked = self.rows * param.numel();
        self.check_owner(param)?;
        let inputs = self
            .kernel
            .args()
            .iter()
            .map(|a| match a.name.as_str() {
                "s" => Ok((param.storage(), stacked)),
                name => arg(name).map(|s| (s, s.len())).ok_or_else(|| {
                    invalid(
                        self.kernel.name(),
                        format!("no storage for argument `{name}`"),
                    )
                }),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let out = exec::run_new_extended(&self.kernel, &inputs)?;
        let block = out
            .into_buffer()
            .ok_or_else(|| invalid(self.kernel.name(), "a fresh block is shared".into()))?;
        drop(param.storage().replace_buffer(block, self.token)?);
        Ok(())
    }
}

/// One compiled element-wise update that overwrites one of its arguments.
impl StackedUpdate {
    fn check_owner(&self, param: &Param) -> Result<(), Error> {
        if param.storage().owner() != self.token
            || param.storage().capacity() < self.rows * param.numel()
        {
            return Err(invalid(
                self.kernel.name(),
                format!(
                    "the parameter of shape {:?} no longer holds this optimizer's state: another optimizer created for the same parameter took it over (use one stateful optimizer per parameter)",
                    param.tensor.shape()
                ),
            ));
        }
        Ok(())
    }

    /// State row `r` (≥ 1) of the parameter's block, in the parameter's
    /// shape and dtype.
    pub(crate) fn row(&self, param: &Param, r: usize) -> Result<Tensor, Error> {
        self.check_owner(param)?;
        let n = param.numel();
        let v = param
            .storage()
            .read_span(r * n, n)?
            .ok_or_else(|| invalid(self.kernel.name(), format!("no state row {r}")))?;
        Tensor::from_vec_f64(v, param.tensor.shape())?.to_dtype(param.dtype())
    }

    /// Zeros every state row (a fresh start).
    pub(crate) fn clear_rows(&self, param: &Param) -> Result<(), Error> {
        self.check_owner(param)?;
        let n = param.numel();
        param
            .storage()
            .write_span(n, &vec![0.0; (self.rows - 1) * n])?;
        Ok(())
    }

    /// Overwrites state row `r` (≥ 1) with `value` (the parameter's shape).
    pub(crate) fn set_row(&self, param: &Param, r: usize, value: &Tensor) -> Result<(), Error> {
        self.check_owner(param)?;
        let v = value.to_vec_f64()?;
        if !param.storage().write_span(r * param.numel(), &v)? {
            return Err(invalid(self.kernel.name(), format!("no state row {r}")));
        }
        Ok(())
    }
}

/// An optimizer's state by PyTorch's names, `state.{k}.{name}` for the
/// parameter `k`, read back by [`StateDict::take`] when loading.
pub(crate) struct StateDict<'a> {
    op: &'a str,
    given: &'a [(String, Tensor)],
    used: Vec<bool>,
}

impl<'a> StateDict<'a> {
    pub(crate) fn new(op: &'a str, given: &'a [(String, Tensor)]) -> StateDict<'a> {
        StateDict {
            op,
            given,
            used: vec![false; given.len()],
        }
    }

    /// The entry `state.{k}.{name}`, checked against `shape`.
    pub(crate) fn take(
        &mut self,
        k: usize,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<&'a Tensor>, Error> {
        let key = format!("state.{k}.{name}");
        let Some(i) = self.given.iter().position(|(n, _)| *n == key) else {
            return Ok(None);
        };
        self.used[i] = true;
        let t = &self.given[i].1;
        if t.shape() != shape {
            return Err(invalid(
                self.op,
                format!(
                    "`{key}` has shape {:?}, the parameter's state {shape:?}",
                    t.shape()
                ),
            ));
        }
        Ok(Some(t))
    }

    /// An error naming the first entry no parameter took.
    pub(crate) fn finish(&self) -> Result<(), Error> {
        match self.used.iter().position(|u| !u) {
            Some(i) => Err(invalid(
                self.op,
                format!(
                    "unexpected key `{}` in the optimizer state",
                    self.given[i].0
                ),
            )),
            None => Ok(()),
        }
    }
}

/// The state of a parameter of an optimizer that counts its steps (Adam,
/// RMSprop): the update of its stacked block and the step count.
pub(crate) struct StepState {
    pub(crate) update: StackedUpdate,
    pub(crate) steps: u64,
}

impl StepState {
    pub(crate) fn new(update: StackedUpdate) -> StepState {
        StepState { update, steps: 0 }
    }
}

/// A parameter's named state rows, `(name, row)`, by its number.
pub(crate) type RowsOf<'a> = &'a dyn Fn(usize) -> Vec<(&'static str, usize)>;

/// `state.{k}.step` and each of `rows(k)` (`(name, row)`) of every
/// parameter `k` that has taken a step.
pub(crate) fn stepped_state_dict(
    params: &[Param],
    states: &[Option<StepState>],
    rows: RowsOf<'_>,
) -> Result<Vec<(String, Tensor)>, Error> {
    let mut out = Vec::new();
    for (k, (p, s)) in params.iter().zip(states).enumerate() {
        let Some(s) = s.as_ref().filter(|s| s.steps > 0) else {
            continue;
        };
        out.push((
            format!("state.{k}.step"),
            Tensor::scalar(s.steps as f64, DType::F64)?,
        ));
        for (name, r) in rows(k) {
            out.push((format!("state.{k}.{name}"), s.update.row(p, r)?));
        }
    }
    Ok(out)
}

/// Loads what [`stepped_state_dict`] made: every entry checked first, then
/// each parameter's rows zeroed (a fresh start) or set, with its count.
pub(crate) fn load_stepped_state(
    op: &str,
    params: &[Param],
    states: &mut [Option<StepState>],
    rows: RowsOf<'_>,
    state: &[(String, Tensor)],
) -> Result<(), Error> {
    let mut given = StateDict::new(op, state);
    let mut loads = Vec::new();
    for (k, p) in params.iter().enumerate() {
        let step = given.take(k, "step", &[])?;
        let rows = rows(k);
        let mut found = Vec::new();
        for &(name, r) in &rows {
            if let Some(t) = given.take(k, name, p.shape())? {
                found.push((r, t));
            }
        }
        match step {
            None if found.is_empty() => {}
            Some(step) if found.len() == rows.len() && states[k].is_some() => {
                let t = step.item()?;
                if !(t >= 1.0 && t.fract() == 0.0) {
                    return Err(invalid(
                        op,
                        format!("`state.{k}.step` is {t}, not a step count ≥ 1"),
                    ));
                }
                loads.push((k, t as u64, found));
            }
            _ => {
                let names: Vec<&str> = rows.iter().map(|(n, _)| *n).collect();
                return Err(invalid(
                    op,
                    format!("parameter {k}: the state needs step and {names:?} together"),
                ));
            }
        }
    }
    given.finish()?;
    for (p, s) in params.iter().zip(states.iter_mut()) {
        if let Some(s) = s {
            s.update.clear_rows(p)?;
            s.steps = 0;
        }
    }
    for (k, steps, found) in loads {
        if let Some(s) = &mut states[k] {
            for (r, t) in found {
                s.update.set_row(&params[k], r, t)?;
            }
            s.steps = steps;
        }
    }
    Ok(())
}

pub(crate) struct Update {
    kernel: Arc<CompiledKernel>,
    /// The kernel argument written over.
    aliased: usize,
}

impl Update {
    /// Compiles `src`, whose arguments are `args` (name, shape), for
    /// `dtype` on `device`, to be run over the argument named `target`.
    /// `src` must read `target` only at the output index: every update in
    /// this module (and `nn::utils`' gradient scaling) is written that way.
    pub(crate) fn new(
        src: &str,
        args: &[(&str, &[usize])],
        target: &str,
        (dtype, device): (DType, Device),
    ) -> Result<Update, Error> {
        let f = IndexFn::parse_with_sizes(src, args, &[])?;
        let kernel = compile_for(&f, dtype, device)?;
        let aliased = kernel
            .args()
            .iter()
            .position(|a| a.name == target)
            .ok_or_else(|| invalid("optimizer", format!("`{target}` is not read by {src}")))?;
        Ok(Update { kernel, aliased })
    }

    /// Runs the update, `arg` giving the storage of each argument by name,
    /// writing over the target.
    pub(crate) fn run<'a>(
        &self,
        arg: impl Fn(&str) -> Option<&'a Arc<Storage>>,
    ) -> Result<(), Error> {
        let inputs = self
            .kernel
            .args()
            .iter()
            .map(|a| {
                arg(&a.name).ok_or_else(|| {
                    invalid(
                        self.kernel.name(),
                        format!("no storage for argument `{}`", a.name),
                    )
                })
            })
            .collect::<Result<Vec<&Arc<Storage>>, Error>>()?;
        // SAFETY: every update function reads its target only at the output
        // index (see the sources in `sgd` and `adam`), and `run_in_place`
        // write-locks the target for the whole launch.
        let done = unsafe { exec::run_in_place(&self.kernel, &inputs, self.aliased)? };
        if !done {
            // Not an element-wise route (never the case for these
            // functions): compute into a temporary and copy it back.
            let out = exec::run_new(&self.kernel, &inputs)?;
            inputs[self.aliased].copy_from(&out)?;
        }
        Ok(())
    }
}
