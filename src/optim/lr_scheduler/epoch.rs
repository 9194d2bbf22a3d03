//! The schedules whose rate is a function of the step count alone:
//! [`StepLR`], [`MultiStepLR`], [`ExponentialLR`], [`LinearLR`],
//! [`CosineAnnealingLR`], [`LambdaLR`] — each PyTorch's `get_lr` (the
//! chainable form, from the optimizer's current rate), one `rate` per type,
//! and the shared stepping and state dict of [`Rule`].

use super::{count, finite, invalid, read_state, Counters, LrScheduler, Optimizer};
use crate::Error;
use std::f64::consts::PI;

/// One schedule's arithmetic and hyperparameters (crate-private: the
/// public face is [`LrScheduler`]).
pub(super) trait Rule {
    /// PyTorch's class name, for errors.
    const NAME: &'static str;
    fn counters(&self) -> &Counters;
    fn counters_mut(&mut self) -> &mut Counters;
    /// The rate of parameter group `g` for step `c.last_epoch` given its
    /// current rate `lr` (`initial`: the constructor's step).
    fn rate(&self, c: &Counters, g: usize, lr: f64, initial: bool) -> Result<f64, Error>;
    /// The hyperparameters by PyTorch's names.
    fn hyper(&self) -> Vec<(String, f64)>;
    /// Sets them from `values` (in [`Rule::hyper`]'s order), all or none.
    fn set_hyper(&mut self, values: &[f64]) -> Result<(), Error>;
}

/// One step of `r`: the counters advance and the optimizer gets the rate;
/// on an error neither changes.
pub(super) fn step_rule<R: Rule>(
    r: &mut R,
    opt: &mut dyn Optimizer,
    initial: bool,
) -> Result<(), Error> {
    let c = r.counters().advanced();
    let current = opt.learning_rates();
    if current.len() != c.base_lrs.len() {
        return Err(invalid(
            R::NAME,
            format!(
                "built for {} parameter groups, the optimizer has {}",
                c.base_lrs.len(),
                current.len()
            ),
        ));
    }
    let lrs = current
        .iter()
        .enumerate()
        .map(|(g, &lr)| r.rate(&c, g, lr, initial))
        .collect::<Result<Vec<f64>, Error>>()?;
    opt.set_learning_rates(&lrs)?;
    *r.counters_mut() = Counters { last_lrs: lrs, ..c };
    Ok(())
}

pub(super) fn state_of<R: Rule>(r: &R) -> Vec<(String, f64)> {
    let mut out = r.counters().entries();
    out.extend(r.hyper());
    out
}

pub(super) fn load_into<R: Rule>(r: &mut R, state: &[(String, f64)]) -> Result<(), Error> {
    let groups = r.counters().base_lrs.len();
    let mut names = Counters::names(groups);
    names.extend(r.hyper().into_iter().map(|(k, _)| k));
    let v = read_state(R::NAME, &names, state)?;
    let c = Counters::read(R::NAME, groups, &v)?;
    r.set_hyper(&v[2 * groups + 2..])?;
    *r.counters_mut() = c;
    Ok(())
}

/// `LrScheduler` for a [`Rule`] type: stepping by `step_rule` (or by the
/// given function, for a schedule that moves more than the rate), the
/// counters and the state dict shared.
macro_rules! scheduler {
    ($t:ty) => {
        scheduler!($t, |s: &mut $t, opt: &mut dyn Optimizer| step_rule(
            s, opt, false
        ));
    };
    ($t:ty, $step:expr) => {
        impl LrScheduler for $t {
            fn step(&mut self, opt: &mut dyn Optimizer) -> Result<(), Error> {
                ($step)(self, opt)
            }

            fn last_lrs(&self) -> Vec<f64> {
                self.c.last_lrs.clone()
            }

            fn last_epoch(&self) -> i64 {
                self.c.last_epoch
            }

            fn state_dict(&self) -> Vec<(String, f64)> {
                state_of(self)
            }

            fn load_state_dict(&mut self, state: &[(String, f64)]) -> Result<(), Error> {
                load_into(self, state)
            }
        }
    };
}
pub(super) use scheduler;

scheduler!(StepLR);
scheduler!(MultiStepLR);
scheduler!(ExponentialLR);
scheduler!(LinearLR);
scheduler!(CosineAnnealingLR);
scheduler!(LambdaLR);

/// A new schedule `r` with its constructor's step taken on `opt`.
fn started<R: Rule>(mut r: R, opt: &mut dyn Optimizer) -> Result<R, Error> {
    step_rule(&mut r, opt, true)?;
    Ok(r)
}

fn check_gamma(name: &str, gamma: f64) -> Result<f64, Error> {
    if gamma.is_finite() && gamma > 0.0 {
        Ok(gamma)
    } else {
        Err(invalid(
            name,
            format!("gamma must be finite and > 0, got {gamma}"),
        ))
    }
}

/// Decays the rate by `gamma` every `step_size` steps.
pub struct StepLR {
    c: Counters,
    step_size: i64,
    gamma: f64,
}

impl StepLR {
    pub fn new(opt: &mut dyn Optimizer, step_size: usize, gamma: f64) -> Result<StepLR, Error> {
        let step_size = count(Self::NAME, "step_size", step_size as f64, 1)?;
        let gamma = check_gamma(Self::NAME, gamma)?;
        let r = StepLR {
            c: Counters::new(opt),
            step_size,
            gamma,
        };
        started(r, opt)
    }
}

impl Rule for StepLR {
    const NAME: &'static str = "StepLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, _: usize, lr: f64, _: bool) -> Result<f64, Error> {
        let e = c.last_epoch;
        Ok(if e == 0 || e % self.step_size != 0 {
            lr
        } else {
            lr * self.gamma
        })
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        vec![
            ("step_size".into(), self.step_size as f64),
            ("gamma".into(), self.gamma),
        ]
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        let step_size = count(Self::NAME, "step_size", v[0], 1)?;
        self.gamma = check_gamma(Self::NAME, v[1])?;
        self.step_size = step_size;
        Ok(())
    }
}

/// Decays the rate by `gamma` at each milestone (by `gammaⁿ` at one listed
/// `n` times).
pub struct MultiStepLR {
    c: Counters,
    /// Sorted, repeats kept.
    milestones: Vec<i64>,
    gamma: f64,
}

impl MultiStepLR {
    pub fn new(
        opt: &mut dyn Optimizer,
        milestones: &[usize],
        gamma: f64,
    ) -> Result<MultiStepLR, Error> {
        let mut m: Vec<i64> = milestones
            .iter()
            .map(|&x| count(Self::NAME, "a milestone", x as f64, 0))
            .collect::<Result<_, _>>()?;
        m.sort_unstable();
        let r = MultiStepLR {
            c: Counters::new(opt),
            milestones: m,
            gamma: check_gamma(Self::NAME, gamma)?,
        };
        started(r, opt)
    }
}

impl Rule for MultiStepLR {
    const NAME: &'static str = "MultiStepLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, _: usize, lr: f64, _: bool) -> Result<f64, Error> {
        let n = self
            .milestones
            .iter()
            .filter(|&&m| m == c.last_epoch)
            .count();
        Ok(if n == 0 {
            lr
        } else {
            lr * self.gamma.powf(n as f64)
        })
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        let mut h = vec![("gamma".to_string(), self.gamma)];
        h.extend(
            self.milestones
                .iter()
                .enumerate()
                .map(|(i, &m)| (format!("milestones.{i}"), m as f64)),
        );
        h
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        let gamma = check_gamma(Self::NAME, v[0])?;
        let mut m: Vec<i64> = v[1..]
            .iter()
            .map(|&x| count(Self::NAME, "a milestone", x, 0))
            .collect::<Result<_, _>>()?;
        m.sort_unstable();
        (self.gamma, self.milestones) = (gamma, m);
        Ok(())
    }
}

/// Multiplies the rate by `gamma` every step.
pub struct ExponentialLR {
    c: Counters,
    gamma: f64,
}

impl ExponentialLR {
    pub fn new(opt: &mut dyn Optimizer, gamma: f64) -> Result<ExponentialLR, Error> {
        let r = ExponentialLR {
            c: Counters::new(opt),
            gamma: check_gamma(Self::NAME, gamma)?,
        };
        started(r, opt)
    }
}

impl Rule for ExponentialLR {
    const NAME: &'static str = "ExponentialLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, _: &Counters, _: usize, lr: f64, initial: bool) -> Result<f64, Error> {
        Ok(if initial { lr } else { lr * self.gamma })
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        vec![("gamma".into(), self.gamma)]
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        self.gamma = check_gamma(Self::NAME, v[0])?;
        Ok(())
    }
}

/// Scales the rate linearly from `start_factor` to `end_factor` of the
/// base rate over `total_iters` steps (a warm-up with `start_factor < 1`),
/// then keeps it.
pub struct LinearLR {
    c: Counters,
    start_factor: f64,
    end_factor: f64,
    total_iters: i64,
}

impl LinearLR {
    pub fn new(
        opt: &mut dyn Optimizer,
        start_factor: f64,
        end_factor: f64,
        total_iters: usize,
    ) -> Result<LinearLR, Error> {
        let mut r = LinearLR {
            c: Counters::new(opt),
            start_factor: 0.0,
            end_factor: 0.0,
            total_iters: 0,
        };
        r.set_hyper(&[start_factor, end_factor, total_iters as f64])?;
        started(r, opt)
    }
}

impl Rule for LinearLR {
    const NAME: &'static str = "LinearLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, _: usize, lr: f64, initial: bool) -> Result<f64, Error> {
        let e = c.last_epoch;
        let (s, f) = (self.start_factor, self.end_factor);
        Ok(if e == 0 {
            lr * s
        } else if initial || e > self.total_iters {
            lr
        } else {
            lr * (1.0 + (f - s) / (self.total_iters as f64 * s + (e - 1) as f64 * (f - s)))
        })
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        vec![
            ("start_factor".into(), self.start_factor),
            ("end_factor".into(), self.end_factor),
            ("total_iters".into(), self.total_iters as f64),
        ]
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        let (s, f) = (v[0], v[1]);
        if !(s > 0.0 && s <= 1.0) {
            return Err(invalid(
                Self::NAME,
                format!("start_factor must be in (0, 1], got {s}"),
            ));
        }
        if !(0.0..=1.0).contains(&f) {
            return Err(invalid(
                Self::NAME,
                format!("end_factor must be in [0, 1], got {f}"),
            ));
        }
        let total = count(Self::NAME, "total_iters", v[2], 0)?;
        (self.start_factor, self.end_factor, self.total_iters) = (s, f, total);
        Ok(())
    }
}

/// The rate follows half a cosine from the base rate down to `eta_min`
/// over `t_max` steps, and continues periodically (SGDR without restarts).
pub struct CosineAnnealingLR {
    c: Counters,
    t_max: i64,
    eta_min: f64,
}

impl CosineAnnealingLR {
    pub fn new(
        opt: &mut dyn Optimizer,
        t_max: usize,
        eta_min: f64,
    ) -> Result<CosineAnnealingLR, Error> {
        let mut r = CosineAnnealingLR {
            c: Counters::new(opt),
            t_max: 1,
            eta_min: 0.0,
        };
        r.set_hyper(&[t_max as f64, eta_min])?;
        started(r, opt)
    }
}

impl Rule for CosineAnnealingLR {
    const NAME: &'static str = "CosineAnnealingLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, g: usize, lr: f64, initial: bool) -> Result<f64, Error> {
        let (e, t, min, base) = (c.last_epoch, self.t_max, self.eta_min, c.base_lrs[g]);
        Ok(if initial {
            lr
        } else if (e - 1 - t).rem_euclid(2 * t) == 0 {
            lr + (base - min) * (1.0 - (PI / t as f64).cos()) / 2.0
        } else {
            (1.0 + (PI * e as f64 / t as f64).cos())
                / (1.0 + (PI * (e - 1) as f64 / t as f64).cos())
                * (lr - min)
                + min
        })
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        vec![
            ("T_max".into(), self.t_max as f64),
            ("eta_min".into(), self.eta_min),
        ]
    }
    fn set_hyper(&mut self, v: &[f64]) -> Result<(), Error> {
        let t = count(Self::NAME, "T_max", v[0], 1)?;
        self.eta_min = finite(Self::NAME, "eta_min", v[1])?;
        self.t_max = t;
        Ok(())
    }
}

/// A factor of the step count (`LambdaLR`'s function).
pub type Lambda = Box<dyn Fn(i64) -> f64 + Send + Sync>;

/// The base rate times `lambda(step)` (a warm-up, or any shape the
/// caller writes). Its state dict holds the counters only: the function
/// is code.
pub struct LambdaLR {
    c: Counters,
    /// One for every group, or one per group.
    lambdas: Vec<Lambda>,
}

impl LambdaLR {
    /// The same function for every parameter group.
    pub fn new(
        opt: &mut dyn Optimizer,
        lambda: impl Fn(i64) -> f64 + Send + Sync + 'static,
    ) -> Result<LambdaLR, Error> {
        LambdaLR::per_group(opt, vec![Box::new(lambda)])
    }

    /// One function per parameter group (PyTorch's list of `lr_lambda`s);
    /// another count than the optimizer's groups is an error (one function
    /// applies to all).
    pub fn per_group(opt: &mut dyn Optimizer, lambdas: Vec<Lambda>) -> Result<LambdaLR, Error> {
        let groups = opt.learning_rates().len();
        if lambdas.is_empty() || (lambdas.len() != 1 && lambdas.len() != groups) {
            return Err(invalid(
                Self::NAME,
                format!(
                    "{} lr_lambdas for {groups} parameter groups (give one, or one per group)",
                    lambdas.len()
                ),
            ));
        }
        let r = LambdaLR {
            c: Counters::new(opt),
            lambdas,
        };
        started(r, opt)
    }
}

impl Rule for LambdaLR {
    const NAME: &'static str = "LambdaLR";
    fn counters(&self) -> &Counters {
        &self.c
    }
    fn counters_mut(&mut self) -> &mut Counters {
        &mut self.c
    }
    fn rate(&self, c: &Counters, g: usize, _: f64, _: bool) -> Result<f64, Error> {
        let lambda = &self.lambdas[g.min(self.lambdas.len() - 1)];
        let factor = lambda(c.last_epoch);
        finite(Self::NAME, "lambda's factor", factor)?;
        Ok(c.base_lrs[g] * factor)
    }
    fn hyper(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
    fn set_hyper(&mut self, _: &[f64]) -> Result<(), Error> {
        Ok(())
    }
}
