//! What clipping gradients by their total norm adds to a training step:
//! the MLP 784-512-512-10 at batch 64 with AdamW, f32, one step with and
//! one without `nn::utils::clip_grad_norm(max_norm 1.0)`, alternated so
//! the machine's drift hits both alike. Prints the medians and the ratio.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example clip_step
//! cargo run --release --example clip_step -- smoke   # a few steps, untimed
//! ```

use std::time::Instant;
use tenjin::nn::utils::clip_grad_norm;
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::optim::{AdamConfig, AdamW, Optimizer};
use tenjin::{DType, Error, Tensor};

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let rounds = if smoke { 3 } else { 101 };
    let model = Sequential::new()
        .add(Linear::new(784, 512, 1)?)
        .add(ReLU)
        .add(Linear::new(512, 512, 2)?)
        .add(ReLU)
        .add(Linear::new(512, 10, 3)?);
    let params = model.parameters();
    let mut opt = AdamW::new(params.clone(), AdamConfig::adamw())?;
    let x = Tensor::randn(&[64, 784], DType::F32, 4)?;
    let labels: Vec<usize> = (0..64).map(|i| (i * 7) % 10).collect();
    let mut step = |clip: bool| -> Result<f64, Error> {
        let t = Instant::now();
        opt.zero_grad();
        let loss = model.forward(&x)?.cross_entropy(&labels)?;
        loss.backward()?;
        if clip {
            clip_grad_norm(&params, 1.0, 2.0)?;
        }
        opt.step()?;
        loss.item()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    step(false)?; // compiles
    step(true)?;
    let (mut plain, mut clipped) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(step(false)?);
        clipped.push(step(true)?);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, c) = (median(plain), median(clipped));
    println!(
        "{{\"workload\": \"mlp_adamw_step\", \"size\": \"784-512-512-10,batch=64\", \"plain_ms\": {p:.3}, \"clipped_ms\": {c:.3}, \"ratio\": {:.3}}}",
        c / p
    );
    Ok(())
}
