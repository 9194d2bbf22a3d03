//! [`ReduceLROnPlateau`]: the rate falls by `factor` once a metric has
//! not improved for `patience` steps, as PyTorch's scheduler of the same
//! name decides it (relative or absolute thresholds, a cool-down, a floor,
//! and `eps` below which a reduction is skipped).

use super::{count, finite, invalid, read_state, Optimizer};
use crate::Error;

/// Whether a smaller or a larger metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlateauMode {
    Min,
    Max,
}

/// How `threshold` measures an improvement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThresholdMode {
    /// Better than `best·(1 ∓ threshold)`.
    Rel,
    /// Better than `best ∓ threshold`.
    Abs,
}

/// [`ReduceLROnPlateau`]'s options, by PyTorch's names (its defaults in
/// `Default`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlateauConfig {
    pub mode: PlateauMode,
    pub factor: f64,
    pub patience: usize,
    pub threshold: f64,
    pub threshold_mode: ThresholdMode,
    pub cooldown: usize,
    pub min_lr: f64,
    pub eps: f64,
}

impl Default for PlateauConfig {
    fn default() -> PlateauConfig {
        PlateauConfig {
            mode: PlateauMode::Min,
            factor: 0.1,
            patience: 10,
            threshold: 1e-4,
            threshold_mode: ThresholdMode::Rel,
            cooldown: 0,
            min_lr: 0.0,
            eps: 1e-8,
        }
    }
}

/// Reduces the rate when a metric stops improving. Stepped with the
/// metric ([`ReduceLROnPlateau::step`]), so it is not an
/// [`LrScheduler`](super::LrScheduler); its state dict has the same form.
pub struct ReduceLROnPlateau {
    config: PlateauConfig,
    best: f64,
    num_bad_epochs: i64,
    cooldown_counter: i64,
    last_epoch: i64,
    /// Per parameter group.
    last_lrs: Vec<f64>,
}

const NAME: &str = "ReduceLROnPlateau";

impl ReduceLROnPlateau {
    /// Leaves `opt`'s rate as it is (as PyTorch does).
    pub fn new(opt: &dyn Optimizer, config: PlateauConfig) -> Result<ReduceLROnPlateau, Error> {
        check(&config)?;
        Ok(ReduceLROnPlateau {
            config,
            best: worst(config.mode),
            num_bad_epochs: 0,
            cooldown_counter: 0,
            last_epoch: 0,
            last_lrs: opt.learning_rates(),
        })
    }

    /// One step with this step's `metric`: counts a step without
    /// improvement, and after more than `patience` of them (outside a
    /// cool-down) sets each group's rate to `max(rate·factor, min_lr)`
    /// unless that changes it by `eps` or less. A NaN metric is never an
    /// improvement. On an error nothing has changed.
    pub fn step(&mut self, opt: &mut dyn Optimizer, metric: f64) -> Result<(), Error> {
        let mut next = ReduceLROnPlateau {
            last_lrs: Vec::new(),
            ..*self
        };
        next.last_epoch += 1;
        if next.is_better(metric) {
            next.best = metric;
            next.num_bad_epochs = 0;
        } else {
            next.num_bad_epochs += 1;
        }
        if next.cooldown_counter > 0 {
            next.cooldown_counter -= 1;
            next.num_bad_epochs = 0;
        }
        if next.num_bad_epochs > next.config.patience as i64 {
            let c = next.config;
            let lrs: Vec<f64> = opt
                .learning_rates()
                .into_iter()
                .map(|old| {
                    let new = (old * c.factor).max(c.min_lr);
                    if old - new > c.eps {
                        new
                    } else {
                        old
                    }
                })
                .collect();
            opt.set_learning_rates(&lrs)?;
            next.cooldown_counter = next.config.cooldown as i64;
            next.num_bad_epochs = 0;
        }
        next.last_lrs = opt.learning_rates();
        *self = next;
        Ok(())
    }

    fn is_better(&self, a: f64) -> bool {
        let (best, t) = (self.best, self.config.threshold);
        match (self.config.mode, self.config.threshold_mode) {
            (PlateauMode::Min, ThresholdMode::Rel) => a < best * (1.0 - t),
            (PlateauMode::Min, ThresholdMode::Abs) => a < best - t,
            (PlateauMode::Max, ThresholdMode::Rel) => a > best * (t + 1.0),
            (PlateauMode::Max, ThresholdMode::Abs) => a > best + t,
        }
    }

    /// The rate after the last step (PyTorch's `get_last_lr()[0]`).
    pub fn last_lr(&self) -> f64 {
        self.last_lrs.first().copied().unwrap_or(f64::NAN)
    }

    /// The rates after the last step, per parameter group (PyTorch's
    /// `get_last_lr()`).
    pub fn last_lrs(&self) -> Vec<f64> {
        self.last_lrs.clone()
    }

    /// The best metric so far (∓∞ before the first step).
    pub fn best(&self) -> f64 {
        self.best
    }

    /// Steps without improvement since the last improvement or reduction.
    pub fn num_bad_epochs(&self) -> usize {
        self.num_bad_epochs as usize
    }

    /// The counters by PyTorch's attribute names (the options are the
    /// configuration's).
    pub fn state_dict(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = [
            ("best", self.best),
            ("num_bad_epochs", self.num_bad_epochs as f64),
            ("cooldown_counter", self.cooldown_counter as f64),
            ("last_epoch", self.last_epoch as f64),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        out.extend(
            self.last_lrs
                .iter()
                .enumerate()
                .map(|(g, &v)| (format!("_last_lr.{g}"), v)),
        );
        out
    }

    /// Restores [`ReduceLROnPlateau::state_dict`]'s counters; a missing or
    /// unknown key is an error, and then nothing has changed.
    pub fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<(), Error> {
        let mut names: Vec<String> = ["best", "num_bad_epochs", "cooldown_counter", "last_epoch"]
            .map(String::from)
            .to_vec();
        let groups = self.last_lrs.len();
        names.extend((0..groups).map(|g| format!("_last_lr.{g}")));
        let v = read_state(NAME, &names, state)?;
        if v[0].is_nan() {
            return Err(invalid(NAME, "best must not be NaN".into()));
        }
        let loaded = ReduceLROnPlateau {
            config: self.config,
            best: v[0],
            num_bad_epochs: count(NAME, "num_bad_epochs", v[1], 0)?,
            cooldown_counter: count(NAME, "cooldown_counter", v[2], 0)?,
            last_epoch: count(NAME, "last_epoch", v[3], 0)?,
            last_lrs: (0..groups)
                .map(|g| finite(NAME, &format!("_last_lr.{g}"), v[4 + g]))
                .collect::<Result<_, _>>()?,
        };
        *self = loaded;
        Ok(())
    }
}

fn worst(mode: PlateauMode) -> f64 {
    match mode {
        PlateauMode::Min => f64::INFINITY,
        PlateauMode::Max => f64::NEG_INFINITY,
    }
}

fn check(c: &PlateauConfig) -> Result<(), Error> {
    if !(c.factor.is_finite() && c.factor >= 0.0 && c.factor < 1.0) {
        return Err(invalid(
            NAME,
            format!("factor must be in [0, 1), got {}", c.factor),
        ));
    }
    for (name, v) in [
        ("threshold", c.threshold),
        ("min_lr", c.min_lr),
        ("eps", c.eps),
    ] {
        super::super::check_non_negative(NAME, name, v)?;
    }
    Ok(())
}
