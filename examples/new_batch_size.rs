//! What a step at a never-seen batch size costs (issue 28): an MLP
//! 784-512-10 forward+backward at 60 batch sizes it has not seen, each
//! run three times: the first step at a size against the best of the two
//! after it at the same size (the steady step there); the medians over the
//! sizes, and per new size what was compiled, how much of it reused code
//! compiled for another size, and what was derived and planned.
//!
//! `TENJIN_NUM_THREADS=1 taskset -c 0 cargo run --release --example new_batch_size`

use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::{DType, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

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
    let (mut first, mut steady, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let mut counted = tenjin::stats();
    let (mut compiled, mut shared, mut derived, mut planned) = (0, 0, 0, 0);
    for b in new_sizes.clone() {
        let new = step(b)?;
        let after = tenjin::stats();
        compiled += after.kernels_compiled - counted.kernels_compiled;
        shared += after.cpu_code_shared - counted.cpu_code_shared;
        derived += after.derivations - counted.derivations;
        planned += after.op_plans_built - counted.op_plans_built;
        let again = step(b)?.min(step(b)?);
        counted = tenjin::stats();
        first.push(new);
        steady.push(again);
        extra.push(new - again);
    }
    let per = |n: u64| n as f64 / new_sizes.len() as f64;
    println!(
        "a new batch size {:.3} ms, the steady step at that size {:.3} ms: {:.3} ms more (medians over {} sizes); \
         per new size: {:.1} kernels compiled, {:.1} of them reusing code, {:.1} derivations, {:.1} op plans",
        median(first),
        median(steady),
        median(extra),
        new_sizes.len(),
        per(compiled),
        per(shared),
        per(derived),
        per(planned),
    );
    Ok(())
}
