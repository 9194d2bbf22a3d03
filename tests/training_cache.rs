//! The cached fast path: after the first iteration of a training loop, a
//! step derives nothing and compiles nothing. Its own test binary: the
//! counters are process-wide.

use std::sync::Mutex;
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::optim::{Adam, AdamConfig, Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

/// The tests of this file read process-wide counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn data(batch: usize, features: usize, seed: u64) -> Result<(Tensor, Vec<usize>), Error> {
    let x = Tensor::randn(&[batch, features], DType::F32, seed)?;
    let y = (0..batch).map(|i| (i * 7 + seed as usize) % 10).collect();
    Ok((x, y))
}

fn step(
    model: &Sequential,
    opt: &mut dyn Optimizer,
    x: &Tensor,
    y: &[usize],
) -> Result<f64, Error> {
    opt.zero_grad();
    let loss = model.forward(x)?.cross_entropy(y)?;
    loss.backward()?;
    opt.step()?;
    loss.item()
}

#[test]
fn iterations_two_and_three_derive_and_compile_nothing() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let model = Sequential::new()
        .add(Linear::new(20, 32, 1)?)
        .add(ReLU)
        .add(Linear::new(32, 32, 2)?)
        .add(ReLU)
        .add(Linear::new(32, 10, 3)?);
    let config = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        weight_decay: 1e-4,
        ..Default::default()
    };
    let mut sgd = SGD::new(model.parameters(), config)?;
    let mut losses = vec![];
    let mut counters = vec![tenjin::stats()];
    for i in 0..3 {
        // New data every iteration (same shapes), as in a real loop.
        let (x, y) = data(16, 20, 100 + i)?;
        losses.push(step(&model, &mut sgd, &x, &y)?);
        counters.push(tenjin::stats());
    }
    let first = (
        counters[1].derivations - counters[0].derivations,
        counters[1].kernels_compiled - counters[0].kernels_compiled,
    );
    assert!(
        first.0 > 0 && first.1 > 0,
        "the first iteration derives and compiles: {first:?}"
    );
    for i in 2..=3 {
        let (a, b) = (counters[i - 1], counters[i]);
        assert_eq!(
            b.derivations, a.derivations,
            "iteration {i} derived something"
        );
        assert_eq!(
            b.kernels_compiled, a.kernels_compiled,
            "iteration {i} compiled something"
        );
        assert_eq!(
            b.op_plans_built, a.op_plans_built,
            "iteration {i} built an op plan"
        );
        assert!(b.op_cache_hits > a.op_cache_hits);
    }
    assert!(losses.iter().all(|l| l.is_finite()));

    // The same holds for Adam, whose bias corrections change every step
    // (they are kernel arguments, not constants in the kernel's text).
    let mut adam = Adam::new(model.parameters(), AdamConfig::default())?;
    let (x, y) = data(16, 20, 7)?;
    step(&model, &mut adam, &x, &y)?;
    let before = tenjin::stats();
    for _ in 0..2 {
        step(&model, &mut adam, &x, &y)?;
    }
    let after = tenjin::stats();
    assert_eq!(
        (after.derivations, after.kernels_compiled),
        (before.derivations, before.kernels_compiled)
    );
    Ok(())
}

#[test]
fn only_paths_to_leaves_that_need_a_gradient_are_derived() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A shape used nowhere else in this binary, so the counts are this test's.
    let w = Tensor::randn(&[3, 7], DType::F64, 1)?.requires_grad();
    let c = Tensor::randn(&[3, 7], DType::F64, 2)?; // constant
    let before = tenjin::stats();
    let loss = tenjin::index_fn(
        "f[] = sum{i}_0^2 (sum{j}_0^6 (sin (w[i; j]) * c[i; j] ** 3))",
        &[("w", &w), ("c", &c)],
    )?;
    loss.backward()?;
    let after = tenjin::stats();
    // One derivative (with respect to w); none with respect to c.
    assert_eq!(after.derivations - before.derivations, 1);
    assert!(w.grad().is_some());
    Ok(())
}
