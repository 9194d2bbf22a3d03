//! Half precision's speed beside f32, side by side in one process: a
//! 1024³ matrix product with bf16 operands (and f16) against f32, and a
//! training step of the MLP 784-512-512-10 (batch 256, SGD) under
//! `autocast(BF16)` against the f32 step, the two steps alternating.
//! Prints the medians and their ratios (the targets of `BENCHMARKS.md`'s
//! half-precision rows).
//!
//! `TENJIN_NUM_THREADS=1 cargo run --release --example half_speed [-- smoke]`

#[allow(dead_code)]
mod bench_common;

use bench_common::{data, median_ms, mlp, sgd};
use tenjin::nn::Module;
use tenjin::optim::Optimizer;
use tenjin::{autocast, DType, Error, Tensor};

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let (n, reps, batch) = if smoke { (128, 3, 16) } else { (1024, 11, 256) };
    let a = Tensor::from_vec(data(n * n, 1, 1.0), &[n, n])?;
    let b = Tensor::from_vec(data(n * n, 2, 1.0), &[n, n])?;
    let f32_ms = median_ms(reps, || a.matmul(&b).map(drop))?;
    println!("matmul {n}³ f32: {f32_ms:.3} ms");
    for d in [DType::BF16, DType::F16] {
        let (ah, bh) = (a.to_dtype(d)?, b.to_dtype(d)?);
        let ms = median_ms(reps, || ah.matmul(&bh).map(drop))?;
        println!(
            "matmul {n}³ {d:?} operands: {ms:.3} ms ({:.2}× f32)",
            ms / f32_ms
        );
    }
    let x = Tensor::from_vec(data(batch * 784, 3, 1.0), &[batch, 784])?;
    let labels: Vec<usize> = (0..batch).map(|i| (i * 7) % 10).collect();
    // The two steps alternate, so that the machine's drift falls on both.
    let runs = [None, Some(DType::BF16)].map(|half| -> Result<_, Error> {
        let model = mlp()?;
        let opt = sgd(model.parameters())?;
        Ok((half, model, opt, Vec::new()))
    });
    let mut runs: Vec<_> = runs.into_iter().collect::<Result<_, _>>()?;
    for rep in 0..=2 * reps {
        for (half, model, opt, times) in &mut runs {
            let t = std::time::Instant::now();
            opt.zero_grad();
            let forward = || model.forward(&x)?.cross_entropy(&labels);
            let loss = match half {
                Some(d) => autocast(*d, forward)?,
                None => forward()?,
            };
            loss.backward()?;
            opt.step()?;
            loss.item()?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let f32_step = median(&mut runs[0].3);
    for (half, _, _, times) in &mut runs {
        let ms = median(times);
        let what = half.map_or("f32".to_string(), |d| format!("autocast {d:?}"));
        println!(
            "MLP 784-512-512-10 step, batch {batch}, {what}: {ms:.3} ms ({:.2}× f32)",
            ms / f32_step
        );
    }
    Ok(())
}
