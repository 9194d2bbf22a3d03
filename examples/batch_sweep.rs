//! A training loop over every batch size from 1 to 500, each once (issue
//! 28): an MLP 784-512-10 forward+backward. Prints how many loop nests
//! Cranelift compiled per loop kernel of a step, how many kernels ran code
//! compiled for another size, and what was derived and planned.
//!
//! `TENJIN_NUM_THREADS=1 taskset -c 0 cargo run --release --example batch_sweep [mean] [sim] [specialised | dynamic]`
//! (`mean`: the loss is the mean over the batch, not the sum; `sim`: on
//! the simulated GPU, an MLP 64-32-10, printing the PTX modules its loop
//! kernels loaded and shared; `specialised`: every kernel's sizes compiled
//! in, for the comparison; `dynamic`: the loop in a `jit::dynamic_sizes`
//! scope, every size dynamic from the first)

use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::{Device, Tensor};

fn main() -> Result<(), tenjin::Error> {
    let args: Vec<String> = std::env::args().collect();
    // `mean`: the loss is the mean over the batch (its `1/B`, a float
    // constant, read at run time), else the sum.
    let mean = args.iter().any(|a| a == "mean");
    // `sim`: the simulated GPU interprets every instruction, so a
    // narrower model, whose kernels are the same ops.
    let sim = args.iter().any(|a| a == "sim");
    let (inputs, hidden) = if sim { (64, 32) } else { (784, 512) };
    if args.iter().any(|a| a == "specialised") {
        tenjin::jit::set_run_time_constants(false);
    }
    let _dynamic = args
        .iter()
        .any(|a| a == "dynamic")
        .then(tenjin::jit::dynamic_sizes);
    if sim {
        tenjin::cuda::simulate()?;
        tenjin::set_default_device(Device::Cuda(0));
    }
    let model = Sequential::new()
        .add(Linear::new(inputs, hidden, 1)?)
        .add(ReLU)
        .add(Linear::new(hidden, 10, 2)?);
    let sizes = 1..=500usize;
    // Host data, so that making a batch runs no kernel of its own.
    let data: Vec<f32> = (0..*sizes.end() * inputs)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let before = tenjin::stats();
    let t = std::time::Instant::now();
    for b in sizes.clone() {
        let x = Tensor::from_vec(data[..b * inputs].to_vec(), &[b, inputs])?
            .to_device(tenjin::default_device())?;
        let y = model.forward(&x)?;
        if mean { y.mean()? } else { y.sum()? }.backward()?;
    }
    let seconds = t.elapsed().as_secs_f64();
    let after = tenjin::stats();
    // A step runs 8 loop kernels: ReLU and its gradient, the two bias
    // epilogues, the two bias gradients, the loss and its gradient.
    let loop_kernels = 8.0;
    let n = sizes.clone().count() as f64;
    if sim {
        println!(
            "{n} sizes in {seconds:.2} s on the simulated GPU: {:.1} PTX modules loaded per loop kernel ({} in all), {:.2} kernels sharing a module per step, {:.1} derivations and {:.1} op plans per step",
            (after.ptx_modules_loaded - before.ptx_modules_loaded) as f64 / loop_kernels,
            after.ptx_modules_loaded - before.ptx_modules_loaded,
            (after.ptx_modules_shared - before.ptx_modules_shared) as f64 / n,
            (after.derivations - before.derivations) as f64 / n,
            (after.op_plans_built - before.op_plans_built) as f64 / n,
        );
        return Ok(());
    }
    println!(
        "{} sizes in {:.2} s: {:.1} Cranelift compilations per loop kernel ({} in all), {:.2} kernels reusing code per step, {:.1} derivations and {:.1} op plans per step",
        n,
        seconds,
        (after.cpu_code_compiled - before.cpu_code_compiled) as f64 / loop_kernels,
        after.cpu_code_compiled - before.cpu_code_compiled,
        (after.cpu_code_shared - before.cpu_code_shared) as f64 / n,
        (after.derivations - before.derivations) as f64 / n,
        (after.op_plans_built - before.op_plans_built) as f64 / n,
    );
    Ok(())
}
