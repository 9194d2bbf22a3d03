//! Learning-rate schedules, as `torch.optim.lr_scheduler` computes them:
//! the same formulas in the same order of operations (PyTorch's
//! *chainable* forms, which read the optimizer's current rate), so a
//! schedule's rates match PyTorch's step for step to the last bits
//! (`tests/lr_scheduler.rs` holds them to 1e-12 against rates PyTorch
//! computed).
//!
//! | schedule | the rate after step `e` (`lr` the current rate, `base` the rate at construction) |
//! | --- | --- |
//! | [`StepLR`] | `lr·γ` when `e` is a multiple of `step_size`, else `lr` |
//! | [`MultiStepLR`] | `lr·γⁿ` when `e` is a milestone `n` times, else `lr` |
//! | [`ExponentialLR`] | `lr·γ` |
//! | [`LinearLR`] | `base·start_factor` at construction, then linearly to `base·end_factor` at `total_iters` |
//! | [`CosineAnnealingLR`] | `η_min + (base − η_min)(1 + cos(π·e/T_max))/2`, continued periodically |
//! | [`LambdaLR`] | `base·λ(e)` |
//! | [`OneCycleLR`] | up from `max_lr/div_factor` to `max_lr`, then down to `initial/final_div_factor` (cosine or linear, two or three phases), the momentum cycled the other way |
//! | [`ReduceLROnPlateau`] | `max(lr·factor, min_lr)` after `patience` steps without improvement of a metric |
//!
//! A schedule drives an [`Optimizer`] it does not own: it is passed to
//! each `step`, so the training loop keeps calling the optimizer's own
//! `step`. As in PyTorch, constructing a schedule sets the optimizer's
//! rate for step 0 (the rate the optimizer had becomes `base`), and `step`
//! is called after the optimizer's step. Setting a rate recompiles
//! nothing (it is a scalar tensor argument of the update kernels).
//! A schedule moves every parameter group's rate
//! ([`Optimizer::learning_rates`]), each from its own base rate, as PyTorch
//! does. State dicts hold the counters and hyperparameters by PyTorch's
//! attribute names (`last_epoch`, `_step_count`, `base_lrs.0`,
//! `_last_lr.0`, `gamma`, …; lists indexed by parameter group).
//!
//! ```
//! use tenjin::optim::lr_scheduler::{CosineAnnealingLR, LrScheduler};
//! use tenjin::optim::{Optimizer, SgdConfig, SGD};
//! use tenjin::Tensor;
//! let w = Tensor::from_vec_f64(vec![1.0, -2.0], &[2])?.requires_grad();
//! let mut opt = SGD::new(vec![w.clone()], SgdConfig { lr: 0.1, ..Default::default() })?;
//! let mut schedule = CosineAnnealingLR::new(&mut opt, 10, 0.0)?;
//! for _ in 0..10 {
//!     opt.zero_grad();
//!     w.mul(&w)?.sum()?.backward()?;
//!     opt.step()?;
//!     schedule.step(&mut opt)?;
//! }
//! assert!(opt.learning_rate().abs() < 1e-15); // the end of the half cosine
//! # Ok::<(), tenjin::Error>(())
//! ```
//!
//! Owns the schedules' arithmetic and state; must not touch parameters,
//! gradients or kernels (only `Optimizer::set_learning_rates` and
//! `set_momentum`).

mod epoch;
mod one_cycle;
mod plateau;

pub use epoch::{
    CosineAnnealingLR, ExponentialLR, Lambda, LambdaLR, LinearLR, MultiStepLR, StepLR,
};
pub use one_cycle::{Anneal, OneCycleConfig, OneCycleLR};
pub use plateau::{PlateauConfig, PlateauMode, ReduceLROnPlateau, ThresholdMode};

use super::{invalid, Optimizer};
use crate::Error;

/// A schedule stepped once per optimizer step (or per epoch: the unit is
/// the caller's).
pub trait LrScheduler {
    /// Advances the schedule by one step and sets `opt`'s rate (and, for
    /// [`OneCycleLR`], its momentum). On an error nothing has changed.
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<(), Error>;

    /// The rate the last step (or the constructor) set in the first
    /// parameter group: PyTorch's `get_last_lr()[0]`.
    fn last_lr(&self) -> f64 {
        self.last_lrs().first().copied().unwrap_or(f64::NAN)
    }

    /// The rates the last step (or the constructor) set, per parameter
    /// group: PyTorch's `get_last_lr()`.
    fn last_lrs(&self) -> Vec<f64>;

    /// Steps taken: 0 after the constructor (PyTorch's `last_epoch`).
    fn last_epoch(&self) -> i64;

    /// The counters and hyperparameters, by PyTorch's attribute names.
    fn state_dict(&self) -> Vec<(String, f64)>;

    /// Restores a state made by [`LrScheduler::state_dict`] of the same
    /// kind of schedule. A missing or unknown key, or a value out of its
    /// range, is an error, and then nothing has changed. The optimizer's
    /// rate is not touched (restore the optimizer's own state for that).
    fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<(), Error>;
}

/// What every schedule counts, by PyTorch's names.
#[derive(Clone, Debug, PartialEq)]
struct Counters {
    /// Each group's rate at construction (`base_lrs`).
    base_lrs: Vec<f64>,
    /// Steps taken (`last_epoch`; 0 after the constructor's step).
    last_epoch: i64,
    /// Calls of `step`, the constructor's included (`_step_count`).
    step_count: i64,
    /// The rates last set (`_last_lr`).
    last_lrs: Vec<f64>,
}

impl Counters {
    /// Before the constructor's step: `last_epoch = −1`.
    fn new(opt: &dyn Optimizer) -> Counters {
        let lrs = opt.learning_rates();
        Counters {
            base_lrs: lrs.clone(),
            last_epoch: -1,
            step_count: 0,
            last_lrs: lrs,
        }
    }

    /// The counters one step later.
    fn advanced(&self) -> Counters {
        Counters {
            last_epoch: self.last_epoch + 1,
            step_count: self.step_count + 1,
            ..self.clone()
        }
    }

    /// The state dict's names of the fields for `groups` parameter groups,
    /// in `entries`' order.
    fn names(groups: usize) -> Vec<String> {
        let mut out: Vec<String> = (0..groups).map(|g| format!("base_lrs.{g}")).collect();
        out.extend(["last_epoch".to_string(), "_step_count".to_string()]);
        out.extend((0..groups).map(|g| format!("_last_lr.{g}")));
        out
    }

    fn entries(&self) -> Vec<(String, f64)> {
        let mut v = self.base_lrs.clone();
        v.extend([self.last_epoch as f64, self.step_count as f64]);
        v.extend(&self.last_lrs);
        Counters::names(self.base_lrs.len())
            .into_iter()
            .zip(v)
            .collect()
    }

    /// Counters from `v` (in `names`' order for `groups` groups).
    fn read(schedule: &str, groups: usize, v: &[f64]) -> Result<Counters, Error> {
        let rate = |name: &str, x: f64| -> Result<f64, Error> {
            finite(schedule, name, x)?;
            super::check_non_negative(schedule, name, x)?;
            Ok(x)
        };
        let rates = |prefix: &str, at: usize| -> Result<Vec<f64>, Error> {
            (0..groups)
                .map(|g| rate(&format!("{prefix}.{g}"), v[at + g]))
                .collect()
        };
        Ok(Counters {
            base_lrs: rates("base_lrs", 0)?,
            last_epoch: count(schedule, "last_epoch", v[groups], 0)?,
            step_count: count(schedule, "_step_count", v[groups + 1], 1)?,
            last_lrs: rates("_last_lr", groups + 2)?,
        })
    }
}

/// A state dict read back: every key of `names` exactly once, nothing
/// else; the values in `names`' order.
fn read_state<S: AsRef<str>>(
    schedule: &str,
    names: &[S],
    state: &[(String, f64)],
) -> Result<Vec<f64>, Error> {
    let mut values = vec![None; names.len()];
    let groups = names
        .iter()
        .filter(|n| n.as_ref().starts_with("_last_lr."))
        .count();
    for (key, value) in state {
        let k = names
            .iter()
            .position(|n| n.as_ref() == key)
            .ok_or_else(|| {
                let hint = if key.starts_with("base_lrs.") || key.starts_with("_last_lr.") {
                    format!(" (this schedule drives {groups} parameter groups)")
                } else {
                    String::new()
                };
                invalid(schedule, format!("unknown state key `{key}`{hint}"))
            })?;
        if values[k].replace(*value).is_some() {
            return Err(invalid(schedule, format!("state key `{key}` given twice")));
        }
    }
    values
        .into_iter()
        .zip(names)
        .map(|(v, n)| {
            v.ok_or_else(|| invalid(schedule, format!("state key `{}` missing", n.as_ref())))
        })
        .collect()
}

/// `value` as a count (an integral f64 at least `min`).
fn count(schedule: &str, name: &str, value: f64, min: i64) -> Result<i64, Error> {
    if value.fract() == 0.0 && value >= min as f64 && value < 2f64.powi(53) {
        Ok(value as i64)
    } else {
        Err(invalid(
            schedule,
            format!("{name} must be an integer >= {min}, got {value}"),
        ))
    }
}

/// `value` must be finite.
fn finite(schedule: &str, name: &str, value: f64) -> Result<f64, Error> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(invalid(
            schedule,
            format!("{name} must be finite, got {value}"),
        ))
    }
}
