//! What the side-by-side benchmark examples (`peers`, `staged_peers`,
//! `clip_step`, `ddp_step`, …) share: their data, their timing, their JSON
//! lines and the MLP of the training-step rows. Not an example itself (a
//! folder without `main.rs`).

use std::time::Instant;
use tenjin::nn::{Linear, ReLU, Sequential};
use tenjin::optim::{SgdConfig, SGD};
use tenjin::{jit, Error, Tensor};

/// The MLP 784-512-512-10 of the training-step rows (ReLU between the
/// layers, f32, seeds 1, 2, 3), as `bench/models.py` writes it for the
/// peers.
#[allow(dead_code)] // not every benchmark trains it
pub fn mlp() -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::new(784, 512, 1)?)
        .add(ReLU)
        .add(Linear::new(512, 512, 2)?)
        .add(ReLU)
        .add(Linear::new(512, 10, 3)?))
}

/// Plain SGD at rate 1e-3, the training-step rows' optimizer (as
/// `bench/models.py`'s `torch_sgd_step`).
#[allow(dead_code)] // not every benchmark trains
pub fn sgd(params: Vec<Tensor>) -> Result<SGD, Error> {
    SGD::new(
        params,
        SgdConfig {
            lr: 1e-3,
            ..Default::default()
        },
    )
}

/// Deterministic values in [-scale, scale).
pub fn data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Median wall time in ms of `reps` calls after one warm-up call; the
/// first error stops the measurement.
pub fn median_ms(reps: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// One JSON line: tenjin's `key` (`median_ms`, a byte count, ...) for
/// `workload` at `size`, with the thread count.
pub fn report(workload: &str, size: &str, key: &str, value: f64) {
    println!(
        r#"{{"system": "tenjin", "workload": "{workload}", "size": "{size}", "threads": {}, "simd": "{}", "{key}": {value:.4}}}"#,
        jit::num_threads(),
        jit::vector_width()
    );
}
