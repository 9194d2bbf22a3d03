//! `optim::lr_scheduler` against PyTorch: every schedule's rates in two
//! parameter groups (and OneCycleLR's momentum) after the constructor and
//! after each of 40 steps, as `torch.optim.lr_scheduler` computed them
//! (`bench/torch_lr_schedulers.py` → `tests/data/torch_lr_schedulers.txt`);
//! state dicts that resume a schedule exactly; errors that change nothing.

use std::collections::HashMap;
use std::f64::consts::PI;
use tenjin::optim::lr_scheduler::{
    Anneal, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR, LrScheduler, MultiStepLR,
    OneCycleConfig, OneCycleLR, PlateauConfig, PlateauMode, ReduceLROnPlateau, StepLR,
    ThresholdMode,
};
use tenjin::optim::{Adam, AdamConfig, Optimizer, ParamGroup, SgdConfig, SGD};
use tenjin::{Error, Tensor};

const STEPS: usize = 40;

/// Per case, PyTorch's `(lr, momentum, second group's lr)` after the
/// constructor and each step.
type Rows = HashMap<String, Vec<(f64, f64, f64)>>;

/// PyTorch's rows per case, and the metric sequence of the plateau cases.
fn reference() -> (Rows, Vec<f64>) {
    let text = include_str!("data/torch_lr_schedulers.txt");
    let mut cases = Rows::new();
    let mut metric = Vec::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(m) = line.strip_prefix("metric ") {
            metric = m.split(' ').map(|v| v.parse().unwrap()).collect();
        } else if let Some(name) = line.strip_prefix("case ") {
            current = name.to_string();
        } else {
            let v: Vec<f64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
            cases
                .entry(current.clone())
                .or_default()
                .push((v[0], v[1], v[2]));
        }
    }
    (cases, metric)
}

/// The optimizer every case drives: SGD, momentum 0.9, two parameter
/// groups with rates 0.1 and 0.03.
fn sgd() -> Result<SGD, Error> {
    let p = Tensor::from_vec_f64(vec![0.0], &[1])?.requires_grad();
    let q = Tensor::from_vec_f64(vec![0.0], &[1])?.requires_grad();
    let c = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    SGD::with_groups(vec![
        ParamGroup::new(vec![p], c),
        ParamGroup::new(vec![q], SgdConfig { lr: 0.03, ..c }),
    ])
}

type Make = fn(&mut SGD) -> Result<Box<dyn LrScheduler>, Error>;

fn boxed<S: LrScheduler + 'static>(s: Result<S, Error>) -> Result<Box<dyn LrScheduler>, Error> {
    Ok(Box::new(s?))
}

/// The cases of the reference file, written in tenjin.
fn cases() -> Vec<(&'static str, Make)> {
    vec![
        ("step", |o| boxed(StepLR::new(o, 7, 0.5))),
        ("multistep", |o| {
            boxed(MultiStepLR::new(o, &[3, 10, 10, 25], 0.3))
        }),
        ("exponential", |o| boxed(ExponentialLR::new(o, 0.93))),
        ("cosine", |o| boxed(CosineAnnealingLR::new(o, 15, 0.001))),
        ("cosine_zero_min", |o| {
            boxed(CosineAnnealingLR::new(o, 10, 0.0))
        }),
        ("linear", |o| boxed(LinearLR::new(o, 0.25, 1.0, 12))),
        ("linear_decay", |o| boxed(LinearLR::new(o, 1.0, 0.1, 30))),
        ("lambda", |o| {
            boxed(LambdaLR::new(o, |e| {
                (((e + 1) as f64) / 10.0).min(1.0)
                    * 0.5
                    * (1.0 + (PI * e as f64 / STEPS as f64).cos())
            }))
        }),
        ("one_cycle_cos", |o| {
            boxed(OneCycleLR::new(o, OneCycleConfig::new(0.5, STEPS)))
        }),
        ("one_cycle_linear_three_phase", |o| {
            let c = OneCycleConfig {
                pct_start: 0.2,
                anneal_strategy: Anneal::Linear,
                three_phase: true,
                div_factor: 10.0,
                final_div_factor: 100.0,
                base_momentum: 0.8,
                max_momentum: 0.9,
                ..OneCycleConfig::new(0.5, STEPS)
            };
            boxed(OneCycleLR::new(o, c))
        }),
        ("one_cycle_no_momentum", |o| {
            let c = OneCycleConfig {
                cycle_momentum: false,
                ..OneCycleConfig::new(0.3, STEPS)
            };
            boxed(OneCycleLR::new(o, c))
        }),
    ]
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-12 * want.abs().max(1e-300)
}

#[test]
fn every_schedule_follows_pytorchs_rates_step_for_step() -> Result<(), Error> {
    let (reference, _) = reference();
    let (mut checked, mut worst, mut exact) = (0, 0f64, 0);
    for (name, make) in cases() {
        let want = &reference[name];
        assert_eq!(want.len(), STEPS + 1, "{name}");
        let mut opt = sgd()?;
        let mut s = make(&mut opt)?;
        for (k, &(lr, momentum, lr1)) in want.iter().enumerate() {
            if k > 0 && lr < 0.0 {
                // PyTorch extrapolates one step past the last phase of a
                // linear OneCycleLR to a negative rate; tenjin refuses it.
                let e = s.step(&mut opt).unwrap_err().to_string();
                assert!(e.contains("negative rate is refused"), "{e}");
                checked += 1;
                continue;
            }
            if k > 0 {
                s.step(&mut opt)?;
            }
            let (got_lr, got_m) = (opt.learning_rate(), opt.momentum().unwrap());
            let got_lr1 = opt.learning_rates()[1];
            for (g, w) in [(got_lr, lr), (got_m, momentum), (got_lr1, lr1)] {
                worst = worst.max((g - w).abs() / w.abs().max(1e-300));
                exact += (g == w) as usize;
            }
            assert!(
                close(got_lr, lr) && close(got_m, momentum) && close(got_lr1, lr1),
                "{name}, after step {k}: lr {got_lr:e} momentum {got_m} second group {got_lr1:e}, \
                 PyTorch {lr:e} {momentum} {lr1:e}"
            );
            assert_eq!(s.last_lrs(), vec![got_lr, got_lr1], "{name}: last_lrs");
            assert_eq!(s.last_epoch(), k as i64, "{name}: last_epoch");
            checked += 1;
        }
    }
    assert_eq!(checked, 11 * (STEPS + 1));
    eprintln!(
        "{exact} of {} values bit for bit PyTorch's; worst relative difference {worst:e}",
        3 * (checked - 1)
    );
    Ok(())
}

/// The script's `plateau_min` case: mode min, relative threshold, a
/// cool-down and a floor.
fn plateau_min() -> PlateauConfig {
    PlateauConfig {
        mode: PlateauMode::Min,
        factor: 0.5,
        patience: 2,
        threshold: 1e-3,
        cooldown: 1,
        min_lr: 0.004,
        ..PlateauConfig::default()
    }
}

#[test]
fn reduce_on_plateau_follows_pytorch() -> Result<(), Error> {
    let (reference, metric) = reference();
    let cases = [
        ("plateau_min", plateau_min(), 1.0),
        (
            "plateau_max_abs",
            PlateauConfig {
                mode: PlateauMode::Max,
                factor: 0.1,
                patience: 1,
                threshold: 0.01,
                threshold_mode: ThresholdMode::Abs,
                ..PlateauConfig::default()
            },
            -1.0,
        ),
    ];
    for (name, config, sign) in cases {
        let want = &reference[name];
        let mut opt = sgd()?;
        let mut s = ReduceLROnPlateau::new(&opt, config)?;
        let mut reductions = 0;
        for (k, &(lr, _, lr1)) in want.iter().enumerate() {
            if k > 0 {
                let before = opt.learning_rate();
                s.step(&mut opt, sign * metric[k - 1])?;
                reductions += (opt.learning_rate() < before) as usize;
            }
            let got = opt.learning_rates();
            assert!(
                close(got[0], lr) && close(got[1], lr1),
                "{name}, after step {k}: {got:?} against PyTorch's {lr}, {lr1}"
            );
            assert_eq!(s.last_lrs(), got);
        }
        assert!(reductions >= 2, "{name}: the case reduces the rate");
    }
    Ok(())
}

/// ReduceLROnPlateau restored from its state dict mid-plateau (its best
/// value, bad-epoch count and cooldown inside) reduces at the same steps
/// as the original.
#[test]
fn a_restored_plateau_schedule_continues_exactly() -> Result<(), Error> {
    let (_, metric) = reference();
    let config = plateau_min();
    for cut in [9, 12, 17, 23] {
        let mut opt = sgd()?;
        let mut s = ReduceLROnPlateau::new(&opt, config)?;
        for &m in &metric[..cut] {
            s.step(&mut opt, m)?;
        }
        let state = s.state_dict();
        let mut opt2 = sgd()?;
        let mut s2 = ReduceLROnPlateau::new(&opt2, config)?;
        s2.load_state_dict(&state)?;
        assert_eq!(s2.state_dict(), state, "cut at {cut}");
        opt2.set_learning_rates(&opt.learning_rates())?;
        for (k, &m) in metric[cut..].iter().enumerate() {
            s.step(&mut opt, m)?;
            s2.step(&mut opt2, m)?;
            assert_eq!(
                opt.learning_rates(),
                opt2.learning_rates(),
                "cut at {cut}: step {k} after restoring"
            );
            assert_eq!(
                (s.best(), s.num_bad_epochs()),
                (s2.best(), s2.num_bad_epochs())
            );
        }
    }
    // A state from another mode or with a missing entry is refused.
    let opt = sgd()?;
    let mut s = ReduceLROnPlateau::new(&opt, config)?;
    let state = s.state_dict();
    assert!(s.load_state_dict(&state[1..]).is_err());
    assert_eq!(s.state_dict(), state, "a refused state changes nothing");
    Ok(())
}

/// A schedule restored from its state dict into a fresh one continues
/// with the same rates as the original.
#[test]
fn a_restored_schedule_continues_exactly() -> Result<(), Error> {
    for (name, make) in cases() {
        let mut opt = sgd()?;
        let mut s = make(&mut opt)?;
        for _ in 0..17 {
            s.step(&mut opt)?;
        }
        let state = s.state_dict();
        let (lrs, momentum) = (opt.learning_rates(), opt.momentum());
        let mut opt2 = sgd()?;
        let mut s2 = make(&mut opt2)?;
        s2.load_state_dict(&state)?;
        assert_eq!(s2.state_dict(), state, "{name}");
        opt2.set_learning_rates(&lrs)?;
        if let Some(m) = momentum {
            opt2.set_momentum(m)?;
        }
        for k in 0..10 {
            s.step(&mut opt)?;
            s2.step(&mut opt2)?;
            assert_eq!(
                (opt.learning_rates(), opt.momentum()),
                (opt2.learning_rates(), opt2.momentum()),
                "{name}: step {k} after restoring"
            );
        }
    }
    Ok(())
}

#[test]
fn bad_options_and_states_are_errors_that_change_nothing() -> Result<(), Error> {
    let mut opt = sgd()?;
    let message = |e: Error| e.to_string();
    let e = message(StepLR::new(&mut opt, 0, 0.5).err().unwrap());
    assert!(e.contains("StepLR") && e.contains("step_size"), "{e}");
    let e = message(LinearLR::new(&mut opt, 0.0, 1.0, 5).err().unwrap());
    assert!(e.contains("start_factor"), "{e}");
    let e = message(ExponentialLR::new(&mut opt, f64::NAN).err().unwrap());
    assert!(e.contains("gamma"), "{e}");
    assert_eq!(opt.learning_rate(), 0.1, "a refused schedule set no rate");

    // OneCycleLR cycling momentum needs an optimizer with one.
    let p = Tensor::from_vec_f64(vec![0.0], &[1])?.requires_grad();
    let mut plain = SGD::new(vec![p], SgdConfig::default())?;
    let e = message(
        OneCycleLR::new(&mut plain, OneCycleConfig::new(0.5, 10))
            .err()
            .unwrap(),
    );
    assert!(e.contains("cycle_momentum"), "{e}");
    assert_eq!(plain.learning_rate(), SgdConfig::default().lr);

    // Past its total steps, OneCycleLR refuses (as PyTorch) and changes nothing.
    let mut s = OneCycleLR::new(&mut opt, OneCycleConfig::new(0.5, 3))?;
    for _ in 0..3 {
        s.step(&mut opt)?;
    }
    let (lr, m, state) = (opt.learning_rate(), opt.momentum(), s.state_dict());
    let e = message(s.step(&mut opt).unwrap_err());
    assert!(e.contains("total steps is 3"), "{e}");
    assert_eq!((opt.learning_rate(), opt.momentum()), (lr, m));
    assert_eq!(s.state_dict(), state);

    // A state dict with an unknown, a missing or a bad key loads nothing.
    let mut s = StepLR::new(&mut opt, 3, 0.5)?;
    s.step(&mut opt)?;
    let good = s.state_dict();
    let mut unknown = good.clone();
    unknown.push(("gama".into(), 0.5));
    let mut missing = good.clone();
    missing.retain(|(k, _)| k != "gamma");
    let mut bad = good.clone();
    bad.iter_mut().find(|(k, _)| k == "last_epoch").unwrap().1 = 2.5;
    // A state of a schedule over three parameter groups: this one drives two.
    let mut third = good.clone();
    third.push(("base_lrs.2".into(), 0.1));
    for (state, needle) in [
        (unknown, "unknown state key `gama`"),
        (missing, "`gamma` missing"),
        (bad, "last_epoch"),
        (
            third,
            "`base_lrs.2` (this schedule drives 2 parameter groups)",
        ),
    ] {
        let e = message(s.load_state_dict(&state).unwrap_err());
        assert!(e.contains(needle), "{e}");
        assert_eq!(s.state_dict(), good);
    }

    // Per-group functions: one per group, or one for all.
    let lambdas: Vec<tenjin::optim::lr_scheduler::Lambda> =
        vec![Box::new(|_| 1.0), Box::new(|_| 0.5), Box::new(|_| 0.25)];
    let e = message(LambdaLR::per_group(&mut opt, lambdas).err().unwrap());
    assert!(e.contains("3 lr_lambdas for 2 parameter groups"), "{e}");
    let before = opt.learning_rates();
    let lambdas: Vec<tenjin::optim::lr_scheduler::Lambda> =
        vec![Box::new(|_| 1.0), Box::new(|e| 0.5f64.powi(e as i32))];
    let mut s = LambdaLR::per_group(&mut opt, lambdas)?;
    s.step(&mut opt)?;
    assert_eq!(opt.learning_rates(), vec![before[0], before[1] * 0.5]);
    // Rates for another number of groups than the optimizer's.
    let e = message(opt.set_learning_rates(&[0.1]).unwrap_err());
    assert!(e.contains("1 learning rates for 2 parameter groups"), "{e}");
    Ok(())
}

/// Adam's momentum is its β₁: OneCycleLR cycles it, and the update uses
/// it without recompiling anything.
#[test]
fn one_cycle_cycles_adams_beta1() -> Result<(), Error> {
    let p = Tensor::from_vec_f64(vec![1.0, -2.0], &[2])?.requires_grad();
    let mut opt = Adam::new(vec![p.clone()], AdamConfig::default())?;
    let mut s = OneCycleLR::new(&mut opt, OneCycleConfig::new(0.01, 20))?;
    assert_eq!(opt.momentum(), Some(0.95));
    let mut betas = Vec::new();
    let mut misses = 0;
    for step in 0..20 {
        opt.zero_grad();
        p.mul(&p)?.sum()?.backward()?;
        opt.step()?;
        s.step(&mut opt)?;
        betas.push(opt.momentum().unwrap());
        if step == 1 {
            misses = tenjin::jit::stats().misses;
        }
    }
    let min = betas.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        (min - 0.85).abs() < 1e-3,
        "β₁ falls to base_momentum: {min}"
    );
    assert!(betas.last().unwrap() > &0.94, "and rises again: {betas:?}");
    assert_eq!(tenjin::jit::stats().misses, misses, "nothing recompiled");
    Ok(())
}
