//! What the `DataLoader` costs a training step: `train_cnn`'s network on
//! the digits, batches of 64, SGD with Nesterov momentum, per step
//! (batch included) three ways, epoch after epoch in turn so the
//! machine's drift hits all alike:
//!
//! - `inline`: the batch collated on the training thread just before its
//!   step (what the examples did by hand before the loader);
//! - `loader`: the batch from `DataLoader` (shuffled, two batches
//!   prefetched on its worker thread);
//! - `reused`: one batch collated once and reused, the step alone.
//!
//! Prints the median per step of each and the ratio loader / inline
//! (the target is at most 1.05: prefetching hides the collation).
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 taskset -c 0,1 cargo run --release --example loader_step
//! cargo run --release --example loader_step -- smoke   # one epoch each, untimed
//! ```

// The digits module's training loop (and so the curves and the device
// comparison) is train_cnn's; this example uses its data and model only.
#[allow(dead_code)]
mod curves;
#[allow(dead_code)]
mod device_arg;
#[allow(dead_code)]
mod digits;

use std::time::Instant;
use tenjin::nn::Module;
use tenjin::optim::Optimizer;
use tenjin::Error;

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let epochs = if smoke { 1 } else { 12 };
    let (loader, data, _) = digits::training_batches()?;
    let rows = loader.dataset().rows.clone();
    let model = digits::cnn()?;
    let mut opt = digits::nesterov_sgd(&model)?;
    let mut step = |x: &tenjin::Tensor, y: &[usize]| -> Result<(), Error> {
        opt.zero_grad();
        let loss = model.forward(x)?.cross_entropy(y)?;
        loss.backward()?;
        opt.step()?;
        loss.item().map(|_| ())
    };
    let (x0, y0) = data.batch(&rows[..64])?;
    step(&x0, &y0)?; // compiles
    let (mut inline, mut loaded, mut reused) = (Vec::new(), Vec::new(), Vec::new());
    for epoch in 0..epochs {
        // inline: collate, then step, on this thread.
        let order = loader.order(epoch as u64);
        let mut t = Instant::now();
        for chunk in order.chunks_exact(64) {
            let picked: Vec<usize> = chunk.iter().map(|&i| rows[i]).collect();
            let (x, y) = data.batch(&picked)?;
            step(&x, &y)?;
            inline.push(t.elapsed().as_secs_f64() * 1e3);
            t = Instant::now();
        }
        // loader: the next prefetched batch, then step.
        let mut t = Instant::now();
        for batch in loader.epoch(epoch as u64) {
            let (x, y) = batch?;
            step(&x, &y)?;
            loaded.push(t.elapsed().as_secs_f64() * 1e3);
            t = Instant::now();
        }
        // reused: the step alone.
        for _ in 0..loader.len() {
            let t = Instant::now();
            step(&x0, &y0)?;
            reused.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (i, l, r) = (
        median(&mut inline),
        median(&mut loaded),
        median(&mut reused),
    );
    println!(
        "{{\"workload\": \"train_cnn_step_with_batch\", \"steps\": {}, \"inline_ms\": {i:.3}, \"loader_ms\": {l:.3}, \"reused_batch_ms\": {r:.3}, \"loader_over_inline\": {:.3}}}",
        loaded.len(),
        l / i
    );
    Ok(())
}
