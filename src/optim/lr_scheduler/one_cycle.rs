//! [`OneCycleLR`]: the 1cycle policy (Smith & Topin) as PyTorch computes
//! it — the rate climbs from `max_lr/div_factor` to `max_lr` over the
//! first `pct_start` of the steps and falls to `initial/final_div_factor`
//! (or, in three phases, back to the initial rate and then to the minimum),
//! by a cosine or linearly, while the momentum (SGD's or RMSprop's
//! `momentum`, Adam's `β₁`) runs the other way between `max_momentum` and
//! `base_momentum`.

use super::epoch::{load_into, scheduler, state_of, step_rule, Rule};
use super::{count, finite, invalid, Counters, LrScheduler, Optimizer};
use crate::Error;
use std::f64::consts::PI;

/// How a phase moves between its ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anneal {
    /// `end + (start − end)/2·(cos(π·pct) + 1)` (PyTorch's `"cos"`).
    Cos,
    /// `(end − start)·pct + start` (`"linear"`).
    Linear,
}

/// [`OneCycleLR`]'s options, by PyTorch's names; [`OneCycleConfig::new`]
/// gives PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneCycleConfig {
    pub max_lr: f64,
    pub total_steps: usize,
    pub pct_start: f64,
    pub anneal_strategy: Anneal,
    pub cycle_momentum: bool,
    pub base_momentum: f64,
    pub max_momentum: f64,
    pub div_factor: f64,
    pub final_div_factor: f64,
    pub three_phase: bool,
}

impl OneCycleConfig {
    /// `max_lr` over `total_steps` steps with PyTorch's defaults:
    /// `pct_start` 0.3, cosine, momentum cycled between 0.85 and 0.95,
    /// `div_factor` 25, `final_div_factor` 1e4, two phases.
    pub fn new(max_lr: f64, total_steps: usize) -> OneCycleConfig {
        OneCycleConfig {
            max_lr,
            total_steps,
            pct_start: 0.3,
            anneal_strategy: Anneal::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
        }
    }
}

/// The value a phase starts or ends at.
#[derive(Clone, Copy, Debug)]
enum End {
    InitialLr,
    MaxLr,
    MinLr,
    MaxMomentum,
    BaseMomentum,
}

/// One phase: until step `end_step`, from `lr.0` to `lr.1` and from
/// `momentum.0` to `momentum.1`.
#[derive(Clone, Copy, Debug)]
struct Phase {
    end_step: f64,
    lr: (End, End),
    momentum: (End, End),
}

/// The 1cycle schedule; see the module documentation.
pub struct OneCycleLR {
    c: Counters,
    config: OneCycleConfig,
    /// `max_lr / div_factor` and that `/ final_div_factor`.
    initial_lr: f64,
    min_lr: f64,
    phases: Vec<Phase>,
}

impl OneCycleLR {
    /// Sets `opt`'s rate (and, with `cycle_momentum`, its momentum) for
    /// step 0. With `cycle_momentum`, an optimizer without a momentum
    /// ([`Optimizer::momentum`] is `None`) is an error.
    pub fn new(opt: &mut dyn Optimizer, config: OneCycleConfig) -> Result<OneCycleLR, Error> {
        let mut r = OneCycleLR::planned(Counters::new(opt), config)?;
        r.c.base_lrs.fill(r.initial_lr);
        if config.cycle_momentum {
            if opt.momentum().is_none() {
                return Err(invalid(
                    Self::NAME,
                    "cycle_momentum needs an optimizer with a momentum (SGD or RMSprop built with momentum > 0, Adam, AdamW); pass cycle_momentum: false".into(),
                ));
            }
            opt.set_momentum(config.max_momentum)?;
        }
        step_rule(&mut r, opt, true)?;
        if config.cycle_momentum {
            opt.set_momentum(r.momentum_at(0))?;
        }
        Ok(r)
    }

    /// The schedule of `config` (checked) with counters `c`.
    fn planned(c: Counters, config: OneCycleConfig) -> Result<OneCycleLR, Error> {
        let name = Self::NAME;
        let total = count(name, "total_steps", config.total_steps as f64, 1)? as f64;
        let positive = |what: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(invalid(
                    name,
                    format!("{what} must be finite and > 0, got {v}"),
                ))
            }
        };
        positive("max_lr", config.max_lr)?;
        positive("div_factor", config.div_factor)?;
        positive("final_div_factor", config.final_div_factor)?;
        finite(name, "base_momentum", config.base_momentum)?;
        finite(name, "max_momentum", config.max_momentum)?;
        if !(0.0..=1.0).contains(&config.pct_start) {
            return Err(invalid(
                name,
                format!("pct_start must be in [0, 1], got {}", config.pct_start),
            ));
        }
        let up = config.pct_start * total - 1.0;
        let phases = if config.three_phase {
            vec![
                Phase {
                    end_step: up,
                    lr: (End::InitialLr, End::MaxLr),
                    momentum: (End::MaxMomentum, End::BaseMomentum),
                },
                Phase {
                    end_step: 2.0 * config.pct_start * total - 2.0,
                    lr: (End::MaxLr, End::InitialLr),
                    momentum: (End::BaseMomentum, End::MaxMomentum),
                },
                Phase {
                    end_step: total - 1.0,
                    lr: (End::InitialLr, End::MinLr),
                    momentum: (End::MaxMomentum, End::MaxMomentum),
                },
            ]
        } else {
            vec![
                Phase {
                    end_step: up,
                    lr: (End::InitialLr, End::MaxLr),
                    momentum: (End::MaxMomentum, End::BaseMomentum),
                },
                Phase {
                    end_step: total - 1.0,
                    lr: (End::MaxLr, End::MinLr),
                    momentum: (End::BaseMomentum, End::MaxMomentum),
                },
            ]
        };
        let initial_lr = config.max_lr / config.div_factor;
        Ok(OneCycleLR {
            c,
            config,
            initial_lr,
            min_lr: initial_lr / config.final_div_factor,
            phases,
        })
    }

    fn value(&self, end: End) -> f64 {
        match end {
            End::InitialLr => self.initial_lr,
            End::MaxLr => self.config.max_lr,
            End::MinLr => self.min_lr,
            End::MaxMomentum => self.config.max_momentum,
            End::BaseMomentum => self.config.base_momentum,
        }
    }

    fn anneal(&self, (start, end): (End, End), pct: f64) -> f64 {
        let (start, end) = (self.value(start), self.value(end));
        match self.config.anneal_strategy {
            Anneal::Cos => end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0),
            Anneal::Linear => (end - start) * pct + start,
        }
    }

    /// The phase of step `e` and how far into it `e` is.
    fn phase(&self, e: i64) -> (Phase, f64) {
        let mut start = 0.0;
        let last = self.phases.len() - 1;
        for (i, p) in self.phases.iter().enumerate() {
            if e as f64 <= p.end_step || i == last {
                return (*p, (e as f64 - start) / (p.end_step - start));
            }
            start = p.end_step;
        }
        unreachable!("the last phase is always taken")
    }

    fn momentum_at(&self, e: i64) -> f64 {
        let (p, pct) = self.phase(e);
        self.anneal(p.momentum, pct)
    }
}

impl Rule for OneCycleLR {
    const NAME: &'static str = "OneCycleLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, _: usize, _: f64, _: bool) -> Result<f64, Error> {
        let e = c.last_epoch;
        if e > self.config.total_steps as i64 {
            return Err(invalid(
                Self::NAME,
                format!(
                    "tried to step {e} times; the specified number of total steps is {}",
                    self.config.total_steps
                ),
            ));
        }
        let (p, pct) = self.phase(e);
        let lr = self.anneal(p.lr, pct);
        if lr < 0.0 {
            // PyTorch allows one step past the last phase's end and
            // extrapolates it: linearly, that can fall below zero.
            return Err(invalid(
                Self::NAME,
                format!(
                    "step {e} lies past the end of the last phase (step {}), where the rate extrapolates to {lr}; a negative rate is refused",
                    self.config.total_steps - 1
                ),
            ));
        }
        Ok(lr)
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        let c = &self.config;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        vec![
            ("max_lr".into(), c.max_lr),
            ("total_steps".into(), c.total_steps as f64),
            ("pct_start".into(), c.pct_start),
            (
                "anneal_linear".into(),
                flag(c.anneal_strategy == Anneal::Linear),
            ),
            ("cycle_momentum".into(), flag(c.cycle_momentum)),
            ("base_momentum".into(), c.base_momentum),
            ("max_momentum".into(), c.max_momentum),
            ("div_factor".into(), c.div_factor),
            ("final_div_factor".into(), c.final_div_factor),
            ("three_phase".into(), flag(c.three_phase)),
        ]
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        let flag = |name: &str, x: f64| match x {
            0.0 => Ok(false),
            1.0 => Ok(true),
            _ => Err(invalid(
                Self::NAME,
                format!("{name} must be 0 or 1, got {x}"),
            )),
        };
        let config = OneCycleConfig {
            max_lr: v[0],
            total_steps: count(Self::NAME, "total_steps", v[1], 1)? as usize,
            pct_start: v[2],
            anneal_strategy: if flag("anneal_linear", v[3])? {
                Anneal::Linear
            } else {
                Anneal::Cos
            },
            cycle_momentum: flag("cycle_momentum", v[4])?,
            base_momentum: v[5],
            max_momentum: v[6],
            div_factor: v[7],
            final_div_factor: v[8],
            three_phase: flag("three_phase", v[9])?,
        };
        *self = OneCycleLR::planned(self.c.clone(), config)?;
        Ok(())
    }
}

impl OneCycleLR {
    /// One step: the momentum first (when cycled), then the rate; on an
    /// error the optimizer's momentum is put back and nothing has changed.
    fn step_with_momentum(&mut self, opt: &mut dyn Optimizer) -> Result<(), Error> {
        let e = self.c.last_epoch + 1;
        // The rate's checks first, so that an error changes nothing.
        self.rate(&self.c.advanced(), 0, 0.0, false)?;
        let before = opt.momentum();
        if self.config.cycle_momentum {
            opt.set_momentum(self.momentum_at(e))?;
        }
        step_rule(self, opt, false).inspect_err(|_| {
            if let (true, Some(m)) = (self.config.cycle_momentum, before) {
                let _ = opt.set_momentum(m);
            }
        })
    }
}

scheduler!(OneCycleLR, OneCycleLR::step_with_momentum);
