//! What a step at a never-seen batch size costs (issue 28): an MLP
//! 784-512-10 forward+backward at batch 64 (steady, cached), then at 60
//! batch sizes it has not seen, each once; the median, and per new size
//! what was compiled, how much of it reused code compiled for another
//! size, and what was derived and planned.
//!
//! `TENJIN_NUM_THREADS=1 taskset -c 0 cargo run --release --example new_batch_size`

use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::{DType, Tensor};

fn main() -> Result<(), tenjin::Error> {
    let model = Sequential::new()
        .add(Linear::new(784, 512, 1)?)
        .add(ReLU)
        .add(Linear::new(512, 10, 2)?);
    let new_sizes = 100..160usize;
    let inputs: Vec<Tensor> = (0..new_sizes.end)
        .map(|b| Tensor::randn(&[b.max(1), 784], DType::F32, b as u64))
        .collect::<Result<_, _>>()?;
    let step = |b: usize| -> Result<f64, tenjin::Error> {
        let t = std::time::Instant::now();
        model.forward(&inputs[b])?.sum()?.backward()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for _ in 0..3 {
        step(64)?;
    }
    let mut steady: Vec<f64> = (0..21).map(|_| step(64)).collect::<Result<_, _>>()?;
    steady.sort_by(f64::total_cmp);
    let before = tenjin::stats();
    let mut new: Vec<f64> = new_sizes.clone().map(step).collect::<Result<_, _>>()?;
    new.sort_by(f64::total_cmp);
    let after = tenjin::stats();
    let per = |a: u64, b: u64| (a - b) as f64 / new.len() as f64;
    println!(
        "steady step {:.3} ms; a new batch size {:.3} ms (medians); per new size: {:.1} kernels compiled, {:.1} of them reusing code, {:.1} derivations, {:.1} op plans",
        steady[steady.len() / 2],
        new[new.len() / 2],
        per(after.kernels_compiled, before.kernels_compiled),
        per(after.cpu_code_shared, before.cpu_code_shared),
        per(after.derivations, before.derivations),
        per(after.op_plans_built, before.op_plans_built),
    );
    Ok(())
}
