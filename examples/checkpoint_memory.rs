//! Activation checkpointing, measured: a residual MLP of 8 blocks
//! `h + tanh(tanh(h·W + b)·W)` (width 512, batch 512, f32), one forward and
//! backward with and without `tenjin::checkpoint` around each block: the
//! allocator's peak of bytes in use above the baseline, the median step
//! time, and whether the gradients are bitwise equal (exits non-zero if
//! not).
//!
//! ```sh
//! cargo run --release --example checkpoint_memory
//! ```

use std::time::Instant;
use tenjin::{alloc, checkpoint, DType, Error, Tensor};

fn main() -> Result<(), Error> {
    let (width, batch, blocks) = (512, 512, 8);
    let mut params = Vec::new();
    for k in 0..blocks {
        let w = Tensor::randn(&[width, width], DType::F32, k)?
            .mul_scalar(0.03)?
            .requires_grad();
        let b = Tensor::randn(&[width], DType::F32, 100 + k)?.requires_grad();
        params.push((w, b));
    }
    let x = Tensor::randn(&[batch, width], DType::F32, 999)?.requires_grad();
    let step = |checkpointed: bool| -> Result<Vec<Vec<f32>>, Error> {
        let mut h = x.clone();
        for (w, b) in &params {
            let (w, b) = (w.clone(), b.clone());
            let f = move |t: &[Tensor]| -> Result<Tensor, Error> {
                let a = t[0].matmul(&w)?.add(&b)?.tanh()?;
                t[0].add(&a.matmul(&w)?.tanh()?)
            };
            h = if checkpointed {
                checkpoint(f, &[h])?
            } else {
                f(&[h])?
            };
        }
        h.square()?.mean()?.backward()?;
        let mut grads = Vec::new();
        for t in params.iter().flat_map(|(w, b)| [w, b]).chain([&x]) {
            grads.push(t.grad().expect("a gradient").to_vec()?);
            t.zero_grad();
        }
        Ok(grads)
    };
    println!("| mode | peak in use above baseline | median step | gradients |");
    println!("| --- | --- | --- | --- |");
    let reference = step(false)?;
    for checkpointed in [false, true] {
        step(checkpointed)?; // warm
        alloc::empty_cache();
        alloc::reset_peak();
        let base = alloc::stats().bytes_in_use;
        let grads = step(checkpointed)?;
        let peak = alloc::stats().peak_in_use - base;
        let mut times = Vec::new();
        for _ in 0..9 {
            let t = Instant::now();
            step(checkpointed)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {} | {:.1} MiB | {:.1} ms | {} |",
            if checkpointed {
                "checkpoint per block"
            } else {
                "plain"
            },
            peak as f64 / (1 << 20) as f64,
            times[4],
            if grads == reference {
                "bitwise equal to plain"
            } else {
                "DIFFER"
            }
        );
    }
    Ok(())
}
