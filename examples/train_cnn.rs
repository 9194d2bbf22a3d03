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

use tenjin::Error;

fn main() -> Result<(), Error> {
    match device_arg::from_args() {
        device_arg::Where::Sim => return digits::compare_on_simulated_gpu(digits::cnn, 5),
        device_arg::Where::Cuda => tenjin::set_default_device(tenjin::Device::Cuda(0)),
        device_arg::Where::Cpu => {}
    }
    let model = digits::cnn()?;
    let mut opt = digits::nesterov_sgd(&model)?;
    if digits::train("train_cnn", &model, &mut opt, 30)? < 0.98 {
        eprintln!("test accuracy below 98%");
        std::process::exit(1);
    }
    Ok(())
}
