//! A model whose main layer is one line of index notation, trained end to
//! end: a dilated (3), strided (2) 1-D convolution written by the user,
//!
//! ```text
//! y[b; o; t] = sum{c}_0^{C-1} (sum{k}_0^{K-1} (x[b; c; 2*t + 3*k] * w[o; c; k])) + bias[o]
//! ```
//!
//! followed by ReLU, a max over time and a linear readout. The task: tell
//! noisy two-channel sequences that contain a pattern (four taps three
//! steps apart, with a fixed sign code on each channel) from sequences that
//! contain the same taps with a scrambled code. No backward was written for
//! the convolution: its derivative is derived from the line above, and
//! printed at the end.
//!
//! Run with `cargo run --release --example custom_op`.

use std::time::Instant;
use tenjin::nn::{Lambda, Linear, Module, ReLU, Sequential};
use tenjin::optim::{Adam, AdamConfig, Optimizer};
use tenjin::symbolic::IndexFn;
use tenjin::{DType, Error, Tensor};

const C: usize = 2; // input channels
const L: usize = 64; // sequence length
const K: usize = 4; // taps
const O: usize = 8; // output channels
/// Output positions: the last reads `2·(T−1) + 3·(K−1) ≤ L − 1`.
const T: usize = (L - 1 - 3 * (K - 1)) / 2 + 1;

/// The user's layer: the convolution as one index function.
struct DilatedConv {
    w: Tensor,
    bias: Tensor,
}

fn conv_source() -> String {
    format!(
        "y[b; o; t] = sum{{c}}_0^{} (sum{{k}}_0^{} (x[b; c; 2*t + 3*k] * w[o; c; k])) + bias[o]",
        C - 1,
        K - 1
    )
}

impl DilatedConv {
    fn new(seed: u64) -> Result<DilatedConv, Error> {
        let fan_in = C * K;
        Ok(DilatedConv {
            w: tenjin::nn::init::fan_in_uniform(&[O, C, K], fan_in, DType::F32, seed)?
                .requires_grad(),
            bias: tenjin::nn::init::fan_in_uniform(&[O], fan_in, DType::F32, seed + 1)?
                .requires_grad(),
        })
    }
}

impl Module for DilatedConv {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        tenjin::index_fn_with_sizes(
            &conv_source(),
            &[("x", x), ("w", &self.w), ("bias", &self.bias)],
            &[("t", T)],
        )
    }

    /// Registered once: `parameters()` and `state_dict()` derive from it.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("weight".into(), self.w.clone()),
            ("bias".into(), self.bias.clone()),
        ]
    }
}

/// A small reproducible generator for the data set.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `n` sequences `[n, C, L]` of noise, each with the taps at an even
/// offset: with the true sign code (label 1) or a scrambled one (label 0).
fn data(n: usize, seed: u64) -> Result<(Tensor, Vec<usize>), Error> {
    const CODE: [[f32; K]; C] = [[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]];
    let mut rng = Rng(seed);
    let mut x = Tensor::randn(&[n, C, L], DType::F32, seed)?
        .mul_scalar(0.7)?
        .to_vec()?;
    let mut labels = Vec::with_capacity(n);
    for s in 0..n {
        let label = rng.below(2);
        let start = 2 * rng.below(T);
        // The decoy: the same taps, each channel's code in another order.
        let order: [usize; K] = if label == 1 {
            [0, 1, 2, 3]
        } else {
            [[1, 0, 3, 2], [2, 3, 0, 1], [3, 2, 1, 0]][rng.below(3)]
        };
        for c in 0..C {
            for k in 0..K {
                x[(s * C + c) * L + start + 3 * k] += 1.2 * CODE[c][order[k]];
            }
        }
        labels.push(label);
    }
    Ok((Tensor::from_vec(x, &[n, C, L])?, labels))
}

fn accuracy(logits: &Tensor, labels: &[usize]) -> Result<f64, Error> {
    let z = logits.to_vec()?;
    let hits = labels
        .iter()
        .enumerate()
        .filter(|(i, &y)| usize::from(z[2 * i + 1] > z[2 * i]) == y)
        .count();
    Ok(hits as f64 / labels.len() as f64)
}

fn main() -> Result<(), Error> {
    let t0 = Instant::now();
    let (x_train, y_train) = data(512, 1)?;
    let (x_test, y_test) = data(512, 2)?;

    let model = Sequential::new()
        .add(DilatedConv::new(10)?)
        .add(ReLU)
        .add(Lambda::new(|h: &Tensor| h.max_dims(&[2], false))) // max over time
        .add(Linear::new(O, 2, 20)?);
    let mut opt = Adam::new(
        model.parameters(),
        AdamConfig {
            lr: 0.03,
            ..Default::default()
        },
    )?;

    println!("y = {}  (T = {T})", conv_source());
    let steps = 200;
    let mut after_first = None;
    for step in 0..steps {
        opt.zero_grad();
        let loss = model.forward(&x_train)?.cross_entropy(&y_train)?;
        loss.backward()?;
        opt.step()?;
        if step == 0 {
            after_first = Some(tenjin::stats());
        }
        if step % 20 == 0 || step == steps - 1 {
            println!("step {step:3}: loss {:.4}", loss.item()?);
        }
    }
    let acc_train = tenjin::no_grad(|| accuracy(&model.forward(&x_train)?, &y_train))?;
    let acc_test = tenjin::no_grad(|| accuracy(&model.forward(&x_test)?, &y_test))?;
    println!(
        "accuracy: train {:.1}%, test {:.1}%",
        100.0 * acc_train,
        100.0 * acc_test
    );

    let first = after_first.expect("at least one step");
    let now = tenjin::stats();
    println!(
        "after the first step: {} derivations, {} kernels compiled (whole run: {now})",
        now.derivations - first.derivations,
        now.kernels_compiled - first.kernels_compiled
    );

    // The derivative the tape used, never written by hand.
    let f = IndexFn::parse_with_sizes(
        &conv_source(),
        &[
            ("x", &[512, C, L][..]),
            ("w", &[O, C, K][..]),
            ("bias", &[O][..]),
        ],
        &[("t", T)],
    )?;
    println!("\nderived ∂/∂w:\n  {}", f.derive("w")?);
    println!("derived ∂/∂x:\n  {}", f.derive("x")?);
    println!("\n{:.2} s", t0.elapsed().as_secs_f64());
    Ok(())
}
