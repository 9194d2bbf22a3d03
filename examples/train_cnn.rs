//! Trains a small convolutional network on handwritten digits, end to end
//! in tenjin: convolutions routed to GEMM by the planner (im2col with zero
//! padding, or a GEMM per tap), derived gradients, cached JIT kernels.
//!
//! `cargo run --release --example train_cnn [-- --device cpu|cuda|sim]`
//!
//! `--device cuda` trains on CUDA device 0 (a message and exit status 2
//! where there is none); `--device sim` runs 5 steps on the CPU and on the
//! simulated GPU and compares their losses (exit status 1 when they
//! differ).
//!
//! The data (see `examples/digits`) is embedded in the binary. The model:
//! conv 3×3 (1 → 16 channels, padding 1), ReLU, 2×2 max pool, conv 3×3
//! (16 → 32, padding 1), ReLU, 2×2 max pool, linear 128 → 10; softmax
//! cross-entropy and SGD with Nesterov momentum. It must reach 98 % test
//! accuracy (the process fails otherwise).

mod curves;
mod device_arg;
mod digits;

use tenjin::nn::{Conv2d, Conv2dConfig, Flatten, Lambda, Linear, ReLU, Sequential};
use tenjin::{DType, Error};

fn model() -> Result<Sequential, Error> {
    let padded = Conv2dConfig {
        padding: [1, 1],
        ..Default::default()
    };
    Ok(Sequential::new()
        .add(Lambda::new(|x| x.reshape(&[x.shape()[0], 1, 8, 8])))
        .add(Conv2d::with_config(1, 16, [3, 3], padded, DType::F32, 1)?)
        .add(ReLU)
        .add(Lambda::new(|x| x.max_pool2d([2, 2], [2, 2])))
        .add(Conv2d::with_config(16, 32, [3, 3], padded, DType::F32, 2)?)
        .add(ReLU)
        .add(Lambda::new(|x| x.max_pool2d([2, 2], [2, 2])))
        .add(Flatten)
        .add(Linear::new(32 * 2 * 2, digits::CLASSES, 3)?))
}

fn main() -> Result<(), Error> {
    match device_arg::from_args() {
        device_arg::Where::Sim => return digits::compare_on_simulated_gpu(model, 5),
        device_arg::Where::Cuda => tenjin::set_default_device(tenjin::Device::Cuda(0)),
        device_arg::Where::Cpu => {}
    }
    let model = model()?;
    let mut opt = digits::nesterov_sgd(&model)?;
    if digits::train("train_cnn", &model, &mut opt, 30)? < 0.98 {
        eprintln!("test accuracy below 98%");
        std::process::exit(1);
    }
    Ok(())
}
