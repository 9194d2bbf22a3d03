//! The fixed cost of one op and of one small backward, where the kernels
//! do almost nothing (16 elements): what the runtime itself costs per
//! call (plan look-up, checks, allocation, launch, recording). One JSON
//! line per workload with the median of 7 rounds, in µs.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example op_overhead
//! cargo run --release --example op_overhead -- smoke   # one short round
//! ```

use std::time::Instant;
use tenjin::{DType, Error, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median over `rounds` of the mean time of `f` over `n` calls, µs.
fn time(rounds: usize, n: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    f()?; // the first call plans and compiles
    let mut per = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        per.push(t.elapsed().as_secs_f64() / n as f64 * 1e6);
    }
    Ok(median(per))
}

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let (rounds, n) = if smoke { (1, 100) } else { (7, 50_000) };
    let x = Tensor::ones(&[16], DType::F32)?;
    let y = Tensor::ones(&[16], DType::F32)?;
    let w = Tensor::ones(&[16], DType::F32)?.requires_grad();
    let report = |workload: &str, us: f64| {
        println!(
            "{{\"system\": \"tenjin\", \"workload\": \"{workload}\", \"size\": \"16 f32\", \"threads\": {}, \"median_us\": {us:.4}}}",
            tenjin::jit::num_threads()
        )
    };
    report("add, no gradient", time(rounds, n, || x.add(&y).map(drop))?);
    report(
        "mul, sum, backward",
        time(rounds, n / 4, || w.mul(&x)?.sum()?.backward())?,
    );
    report(
        "full",
        time(rounds, n, || Tensor::full(&[16], 2.0, DType::F32).map(drop))?,
    );
    Ok(())
}
