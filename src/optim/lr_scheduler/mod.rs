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
//! State dicts hold the counters and hyperparameters by PyTorch's
//! attribute names (`last_epoch`, `_step_count`, `base_lrs.0`,
//! `_last_lr.0`, `gamma`, …; lists indexed by parameter group, of which
//! tenjin's optimizers have one).
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
//! gradients or kernels (only `Optimizer::set_learning_rate` and
//! `set_momentum`).

mod epoch;
mod one_cycle;
mod plateau;

pub use epoch::{CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR, MultiStepLR, StepLR};
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

    /// The rate the last step (or the constructor) set: PyTorch's
    /// `get_last_lr()[0]`.
    fn last_lr(&self) -> f64;

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
#[derive(Clone, Copy, Debug, PartialEq)]
struct Counters {
    /// The rate at construction (`base_lrs[0]`).
    base_lr: f64,
    /// Steps taken (`last_epoch`; 0 after the constructor's step).
    last_epoch: i64,
    /// Calls of `step`, the constructor's included (`_step_count`).
    step_count: i64,
    /// The rate last set (`_last_lr[0]`).
    last_lr: f64,
}

impl Counters {
    /// Before the constructor's step: `last_epoch = −1`.
    fn new(opt: &dyn Optimizer) -> Counters {
        let lr = opt.learning_rate();
        Counters {
            base_lr: lr,
            last_epoch: -1,
            step_count: 0,
            last_lr: lr,
        }
    }

    /// The counters one step later.
    fn advanced(&self) -> Counters {
        Counters {
            last_epoch: self.last_epoch + 1,
            step_count: self.step_count + 1,
            ..*self
        }
    }

    /// The state dict's names of the fields, in `entries`' order.
    const NAMES: [&'static str; 4] = ["base_lrs.0", "last_epoch", "_step_count", "_last_lr.0"];

    fn entries(&self) -> [(&'static str, f64); 4] {
        let v = [
            self.base_lr,
            self.last_epoch as f64,
            self.step_count as f64,
            self.last_lr,
        ];
        [0, 1, 2, 3].map(|i| (Self::NAMES[i], v[i]))
    }
}

/// A state dict read back: every key of `names` exactly once, nothing
/// else; the values in `names`' order.
fn read_state(schedule: &str, names: &[&str], state: &[(String, f64)]) -> Result<Vec<f64>, Error> {
    let mut values = vec![None; names.len()];
    for (key, value) in state {
        let k = names
            .iter()
            .position(|n| n == key)
            .ok_or_else(|| invalid(schedule, format!("unknown state key `{key}`")))?;
        if values[k].replace(*value).is_some() {
            return Err(invalid(schedule, format!("state key `{key}` given twice")));
        }
    }
    values
        .into_iter()
        .zip(names)
        .map(|(v, n)| v.ok_or_else(|| invalid(schedule, format!("state key `{n}` missing"))))
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
