//! Trains a multi-layer perceptron on handwritten digits, end to end in
//! tenjin: eager tensors, derived gradients, cached JIT kernels.
//!
//! `cargo run --release --example train_mlp [-- --device cpu|cuda|sim] [--autocast bf16|f16]`
//!
//! `--device cuda` trains on CUDA device 0 (a message and exit status 2
//! where there is none); `--device sim` runs 20 steps on the CPU and on
//! the simulated GPU and compares their losses (exit status 1 when they
//! differ). `--autocast bf16` runs the forward under `tenjin::autocast`
//! (products in bf16, the loss in f32, f32 master weights); `f16` also
//! scales the loss with a `GradScaler`.
//!
//! The data (see `examples/digits`) is embedded in the binary. The model
//! is 64-128-10 with ReLU, softmax cross-entropy and SGD with Nesterov
//! momentum. The first step compiles every kernel and derives every
//! gradient; later steps run from the caches (see the statistics printed
//! at the end).

mod curves;
mod device_arg;
mod digits;

use tenjin::nn::{Linear, ReLU, Sequential};
use tenjin::Error;

fn model() -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::new(digits::FEATURES, 128, 1)?)
        .add(ReLU)
        .add(Linear::new(128, digits::CLASSES, 2)?))
}

fn main() -> Result<(), Error> {
    match device_arg::from_args() {
        device_arg::Where::Sim => return digits::compare_on_simulated_gpu(model, 20),
        device_arg::Where::Cuda => tenjin::set_default_device(tenjin::Device::Cuda(0)),
        device_arg::Where::Cpu => {}
    }
    let model = model()?;
    let mut opt = digits::nesterov_sgd(&model)?;
    if digits::train("train_mlp", &model, &mut opt, 40)? < 0.95 {
        eprintln!("test accuracy below 95%");
        std::process::exit(1);
    }
    Ok(())
}
