//! A PyTorch training script with `Dropout` ported to tenjin line for line
//! (`tests/ports/dropout_mlp.py`): an MLP with `Dropout` between its
//! layers, Adam and a cosine schedule, in f64.
//!
//! PyTorch's random stream is not tenjin's, so with dropout on the run is
//! held to what a stream must give: the same losses from the same seed
//! (and other ones from another), each step's loss over 32 seeds with
//! PyTorch's mean and spread over its 32, the kept fraction and scale of
//! the masks, no effect in eval mode. With `p = 0` the whole trajectory
//! matches PyTorch's to 1e-9, and so does a run resumed from PyTorch's
//! Adam and schedule state after five steps, which checks the rest of the
//! port.

mod common;

use common::ports::{close, load, mid_run, value, MidRun};
use tenjin::nn::{Dropout, Linear, Module, ReLU, Sequential};
use tenjin::optim::lr_scheduler::{CosineAnnealingLR, LrScheduler};
use tenjin::optim::{Adam, AdamConfig, Optimizer};
use tenjin::{DType, Error, Tensor};

const STEPS: usize = 10;
const MID: usize = 5;
const SEEDS: usize = 32;

fn make(p: f64) -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::with_options(8, 32, true, DType::F64, 0)?)
        .add(ReLU)
        .add(Dropout::new(p)?)
        .add(Linear::with_options(32, 3, true, DType::F64, 1)?))
}

fn data() -> Result<(Tensor, Vec<usize>), Error> {
    let x: Vec<f64> = (0..32 * 8).map(|k| (k as f64 * 0.61).sin()).collect();
    Ok((
        Tensor::from_vec_f64(x, &[32, 8])?,
        (0..32).map(|k| k * 7 % 3).collect(),
    ))
}

/// The script's `train`: the losses of `STEPS` Adam steps with a cosine
/// schedule, in train mode.
fn train(model: &Sequential) -> Result<Vec<f64>, Error> {
    train_from(model, 0, None)
}

/// Steps `start..STEPS` of the script's `train`, from the optimizer and
/// schedule state of `state` when given (PyTorch's, as the script saved
/// them after `MID` steps).
fn train_from(model: &Sequential, start: usize, state: Option<&MidRun>) -> Result<Vec<f64>, Error> {
    let (x, y) = data()?;
    let config = AdamConfig {
        lr: 1e-2,
        ..Default::default()
    };
    let mut opt = Adam::new(model.parameters(), config)?;
    let mut schedule = CosineAnnealingLR::new(&mut opt, STEPS, 0.0)?;
    if let Some(state) = state {
        opt.load_state_dict(&state.optimizer)?;
        schedule.load_state_dict(&state.schedule)?;
    }
    model.train();
    let mut losses = Vec::new();
    for _ in start..STEPS {
        opt.zero_grad();
        let loss = model.forward(&x)?.cross_entropy(&y)?;
        loss.backward()?;
        opt.step()?;
        schedule.step(&mut opt)?;
        losses.push(loss.item()?);
    }
    Ok(losses)
}

fn from_init(p: f64) -> Result<Sequential, Error> {
    let model = make(p)?;
    model.load_state_dict(&load("dropout_mlp_init.safetensors"))?;
    Ok(model)
}

#[test]
fn without_dropout_the_run_is_pytorchs() -> Result<(), Error> {
    let model = from_init(0.0)?;
    let losses = train(&model)?;
    let out = load("dropout_mlp_out.safetensors");
    close("losses", &losses, &value(&out, "losses"));
    for (name, t) in model.state_dict() {
        close(&name, &t.to_vec_f64()?, &value(&out, &name));
    }
    Ok(())
}

#[test]
fn from_pytorchs_optimizer_and_schedule_state_it_resumes() -> Result<(), Error> {
    let mid = mid_run(&load("dropout_mlp_mid.safetensors"));
    let model = make(0.0)?;
    model.load_state_dict(&mid.weights)?;
    let losses = train_from(&model, MID, Some(&mid))?;
    let out = load("dropout_mlp_out.safetensors");
    close("losses", &losses, &value(&out, "losses")[MID..]);
    for (name, t) in model.state_dict() {
        close(&name, &t.to_vec_f64()?, &value(&out, &name));
    }
    Ok(())
}

/// With dropout on, each step's loss over 32 seeds has PyTorch's mean (over
/// its own 32 seeds) within four standard errors of the difference: the
/// masks act as PyTorch's do, whatever stream draws them.
#[test]
fn with_dropout_the_losses_have_pytorchs_statistics() -> Result<(), Error> {
    let out = load("dropout_mlp_out.safetensors");
    let (want_mean, want_sd) = (
        value(&out, "dropout_loss_mean"),
        value(&out, "dropout_loss_std"),
    );
    let runs: Vec<Vec<f64>> = (0..SEEDS as u64)
        .map(|seed| {
            tenjin::manual_seed(1000 + seed);
            train(&from_init(0.3)?)
        })
        .collect::<Result<_, _>>()?;
    let n = SEEDS as f64;
    for step in 0..STEPS {
        let losses: Vec<f64> = runs.iter().map(|r| r[step]).collect();
        let mean = losses.iter().sum::<f64>() / n;
        let var = losses.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let se = ((var + want_sd[step].powi(2)) / n).sqrt();
        assert!(
            (mean - want_mean[step]).abs() <= 4.0 * se,
            "step {step}: mean loss {mean} (sd {}) against PyTorch's {} (sd {})",
            var.sqrt(),
            want_mean[step],
            want_sd[step]
        );
        let ratio = var.sqrt() / want_sd[step];
        assert!(
            (0.5..2.0).contains(&ratio),
            "step {step}: spread {ratio} of PyTorch's"
        );
    }
    Ok(())
}

#[test]
fn with_dropout_the_run_is_reproducible_from_its_seed() -> Result<(), Error> {
    let run = |seed| -> Result<Vec<f64>, Error> {
        tenjin::manual_seed(seed);
        train(&from_init(0.3)?)
    };
    let a = run(1)?;
    assert_eq!(a, run(1)?, "the same seed, the same losses bit for bit");
    assert_ne!(a, run(2)?, "another seed, other masks");
    let plain = train(&from_init(0.0)?)?;
    assert_ne!(a, plain, "dropout acts in training mode");
    assert!(a.iter().all(|l| l.is_finite()));
    Ok(())
}

#[test]
fn the_masks_keep_one_minus_p_and_eval_mode_is_the_identity() -> Result<(), Error> {
    let model = from_init(0.3)?;
    let dropout = &model.layers()[2];
    tenjin::manual_seed(5);
    let ones = Tensor::ones(&[32, 32], DType::F64)?;
    let mut kept = 0usize;
    for _ in 0..STEPS {
        let y = dropout.forward(&ones)?.to_vec_f64()?;
        assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-15));
        kept += y.iter().filter(|&&v| v != 0.0).count();
    }
    let n = (STEPS * 32 * 32) as f64;
    let sd = (0.3 * 0.7 / n).sqrt();
    let fraction = kept as f64 / n;
    assert!((fraction - 0.7).abs() < 5.0 * sd, "kept {fraction}");
    // Eval mode: the model with dropout computes what the one without does.
    let (x, _) = data()?;
    model.eval();
    let plain = from_init(0.0)?;
    plain.eval();
    assert_eq!(
        model.forward(&x)?.to_vec_f64()?,
        plain.forward(&x)?.to_vec_f64()?
    );
    Ok(())
}
