//! A PyTorch training script ported to tenjin line for line
//! (`tests/ports/cnn.py`): `Conv2d → BatchNorm → ReLU → MaxPool2d →
//! Flatten → Linear` trained by SGD with Nesterov momentum and weight decay
//! in train mode, then evaluated in eval mode (`model.eval()` reaching the
//! BatchNorm inside the `Sequential`), in f64.
//!
//! From PyTorch's initial state (running statistics and
//! `num_batches_tracked` included, loaded strictly) the six losses, the
//! eval-mode loss and the final state match PyTorch's to 1e-9; from its
//! state and momentum buffers after three steps, the rest do too.

mod common;

use common::ports::{close, load, value};
use tenjin::nn::{
    BatchNorm, Conv2d, Conv2dConfig, Flatten, Linear, MaxPool2d, Module, ReLU, Sequential,
};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

const N: usize = 16;
const STEPS: usize = 6;
const MID: usize = 3;

fn model() -> Result<Sequential, Error> {
    let conv = Conv2dConfig {
        padding: [1, 1],
        ..Default::default()
    };
    Ok(Sequential::new()
        .add(Conv2d::with_config(1, 4, [3, 3], conv, DType::F64, 0)?)
        .add(BatchNorm::new(4, 1e-5, 0.1, DType::F64)?)
        .add(ReLU)
        .add(MaxPool2d::new([2, 2]))
        .add(Flatten)
        .add(Linear::with_options(4 * 4 * 4, 10, true, DType::F64, 1)?))
}

/// The script's batch of `step`: images and labels.
fn batch(step: usize) -> Result<(Tensor, Vec<usize>), Error> {
    let x: Vec<f64> = (0..N * 64)
        .map(|k| (k as f64 * 0.37 + step as f64).sin())
        .collect();
    let y = (0..N).map(|k| (k * 3 + step) % 10).collect();
    Ok((Tensor::from_vec_f64(x, &[N, 1, 8, 8])?, y))
}

fn sgd(model: &Sequential) -> Result<SGD, Error> {
    let config = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        weight_decay: 1e-4,
        ..Default::default()
    };
    SGD::new(model.parameters(), config)
}

/// Training steps `range` in train mode, then the eval-mode loss.
fn run(
    model: &Sequential,
    opt: &mut SGD,
    range: std::ops::Range<usize>,
) -> Result<(Vec<f64>, f64), Error> {
    model.train();
    let mut losses = Vec::new();
    for step in range {
        let (x, y) = batch(step)?;
        opt.zero_grad();
        let loss = model.forward(&x)?.cross_entropy(&y)?;
        loss.backward()?;
        opt.step()?;
        losses.push(loss.item()?);
    }
    model.eval();
    let (x, y) = batch(100)?;
    let eval = tenjin::no_grad(|| model.forward(&x)?.cross_entropy(&y))?.item()?;
    Ok((losses, eval))
}

fn check(model: &Sequential, losses: &[f64], eval: f64, from: usize) -> Result<(), Error> {
    let out = load("cnn_out.safetensors");
    close("losses", losses, &value(&out, "losses")[from..]);
    close("eval-mode loss", &[eval], &value(&out, "eval_loss"));
    let state = model.state_dict();
    assert_eq!(state.len(), out.len() - 2, "every entry compared");
    for (name, t) in &state {
        close(name, &t.to_vec_f64()?, &value(&out, name));
    }
    assert_eq!(value(&out, "1.num_batches_tracked"), vec![STEPS as f64]);
    Ok(())
}

#[test]
fn from_pytorchs_initial_state_the_run_is_pytorchs() -> Result<(), Error> {
    let model = model()?;
    model.load_state_dict(&load("cnn_init.safetensors"))?;
    let mut opt = sgd(&model)?;
    let (losses, eval) = run(&model, &mut opt, 0..STEPS)?;
    check(&model, &losses, eval, 0)
}

#[test]
fn from_pytorchs_state_and_momentum_it_resumes() -> Result<(), Error> {
    let mid = load("cnn_mid.safetensors");
    let (opt_state, weights): (Vec<_>, Vec<_>) =
        mid.into_iter().partition(|(n, _)| n.starts_with("opt."));
    let model = model()?;
    model.load_state_dict(&weights)?;
    let mut opt = sgd(&model)?;
    let opt_state: Vec<(String, Tensor)> = opt_state
        .into_iter()
        .map(|(n, t)| (n["opt.".len()..].to_string(), t))
        .collect();
    opt.load_state_dict(&opt_state)?;
    let (losses, eval) = run(&model, &mut opt, MID..STEPS)?;
    check(&model, &losses, eval, MID)
}
