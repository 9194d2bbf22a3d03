//! A training loop over every batch size from 1 to 500, each once (issue
//! 28): an MLP 784-512-10 forward+backward. Prints how many loop nests
//! Cranelift compiled per loop kernel of a step, how many kernels ran code
//! compiled for another size, and what was derived and planned.
//!
//! `TENJIN_NUM_THREADS=1 taskset -c 0 cargo run --release --example batch_sweep [mean] [sim] [specialised | dynamic]`
//! (`mean`: the loss is the mean over the batch, not the sum; `sim`: on
//! the simulated GPU, an MLP 64-32-10, printing the PTX modules its loop
//! kernels loaded and shared; `cuda`: on the real GPU, the full MLP, with
//! the time a new size costs and a steady step's at batch 64 and 256;
//! `specialised`: every kernel's sizes compiled in, for the comparison;
//! `dynamic`: the loop in a `jit::dynamic_sizes` scope, every size dynamic
//! from the first)

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
    // `cuda`: the real device 0, the full MLP.
    let cuda = args.iter().any(|a| a == "cuda");
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
    }
    if sim || cuda {
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
    let step = |b: usize| -> Result<(), tenjin::Error> {
        let x = Tensor::from_vec(data[..b * inputs].to_vec(), &[b, inputs])?
            .to_device(tenjin::default_device())?;
        let y = model.forward(&x)?;
        if mean { y.mean()? } else { y.sum()? }.backward()
    };
    let before = tenjin::stats();
    let pool = tenjin::alloc::stats_for(tenjin::default_device());
    let t = std::time::Instant::now();
    for b in sizes.clone() {
        step(b)?;
    }
    tenjin::cuda::synchronize(tenjin::default_device())?;
    let seconds = t.elapsed().as_secs_f64();
    let after = tenjin::stats();
    let pool_after = tenjin::alloc::stats_for(tenjin::default_device());
    // Blocks the pool took from the device (or the system) for new sizes.
    let fresh = pool_after.allocations - pool.allocations;
    // A step runs 8 loop kernels: ReLU and its gradient, the two bias
    // epilogues, the two bias gradients, the loss and its gradient.
    let loop_kernels = 8.0;
    let n = sizes.clone().count() as f64;
    if sim || cuda {
        let on = if sim { "the simulated GPU" } else { "the GPU" };
        println!(
            "{n} sizes in {seconds:.2} s on {on} ({:.2} ms a new size): {:.1} PTX modules loaded per loop kernel ({} in all), {:.2} kernels sharing a module per step, {:.1} derivations and {:.1} op plans per step, {fresh} blocks allocated from the device",
            seconds * 1e3 / n,
            (after.ptx_modules_loaded - before.ptx_modules_loaded) as f64 / loop_kernels,
            after.ptx_modules_loaded - before.ptx_modules_loaded,
            (after.ptx_modules_shared - before.ptx_modules_shared) as f64 / n,
            (after.derivations - before.derivations) as f64 / n,
            (after.op_plans_built - before.op_plans_built) as f64 / n,
        );
        // On the card, a steady step at sizes already seen: the median of
        // 50, each waited for (the simulator's times say nothing).
        for b in [64, 256].into_iter().filter(|_| cuda) {
            let mut times = Vec::new();
            for rep in 0..60 {
                let t = std::time::Instant::now();
                step(b)?;
                tenjin::cuda::synchronize(tenjin::default_device())?;
                if rep >= 10 {
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            times.sort_by(f64::total_cmp);
            println!(
                "steady step at batch {b}: {:.3} ms (median of 50)",
                times[25]
            );
        }
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
