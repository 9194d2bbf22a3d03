//! Trains a multi-layer perceptron on handwritten digits, end to end in
//! tenjin: eager tensors, derived gradients, cached JIT kernels.
//!
//! `cargo run --release --example train_mlp`
//!
//! The data (see `examples/digits`) is embedded in the binary. The model
//! is 64-128-10 with ReLU, softmax cross-entropy and SGD with Nesterov
//! momentum. The first step compiles every kernel and derives every
//! gradient; later steps run from the caches (see the statistics printed
//! at the end).

mod digits;

use tenjin::nn::{Linear, ReLU, Sequential};
use tenjin::Error;

fn main() -> Result<(), Error> {
    let model = Sequential::new()
        .add(Linear::new(digits::FEATURES, 128, 1)?)
        .add(ReLU)
        .add(Linear::new(128, digits::CLASSES, 2)?);
    let mut opt = digits::nesterov_sgd(&model)?;
    if digits::train(&model, &mut opt, 40)? < 0.95 {
        eprintln!("test accuracy below 95%");
        std::process::exit(1);
    }
    Ok(())
}
