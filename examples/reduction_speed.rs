//! Reductions at one thread: medians of 15 runs (ms) of a full sum, row
//! and column sums, softmax and logsumexp forward+backward. Used to check
//! that accurate (blocked, f64-accumulated) f32 sums cost no speed; the
//! numbers are in BENCHMARKS.md ("Reliability").
//!
//! `cargo run --release --example reduction_speed`

use std::time::Instant;
use tenjin::{DType, Tensor};
fn time(name: &str, f: &dyn Fn() -> Result<(), tenjin::Error>) {
    f().unwrap();
    let mut ts = vec![];
    for _ in 0..15 {
        let t = Instant::now();
        f().unwrap();
        ts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name:40} {:8.3} ms", ts[7]);
}
fn main() {
    tenjin::jit::set_num_threads(1);
    let a = Tensor::randn(&[10_000_000], DType::F32, 1).unwrap();
    let m = Tensor::randn(&[1024, 4096], DType::F32, 2).unwrap();
    let c = Tensor::randn(&[4096, 1024], DType::F32, 3).unwrap();
    let big = Tensor::randn(&[20000, 64], DType::F32, 4).unwrap();
    time("sum of 1e7", &|| {
        a.sum()?.item()?;
        Ok(())
    });
    time("row sums [1024,4096]", &|| {
        m.sum_dims(&[1], false)?;
        Ok(())
    });
    time("softmax rows [1024,4096]", &|| {
        m.softmax(1)?;
        Ok(())
    });
    time("column sums [4096,1024]", &|| {
        c.sum_dims(&[0], false)?;
        Ok(())
    });
    time("column sums [20000,64]", &|| {
        big.sum_dims(&[0], false)?;
        Ok(())
    });
    let w = Tensor::randn(&[1024, 4096], DType::F32, 5)
        .unwrap()
        .requires_grad();
    time("logsumexp fwd+bwd [1024,4096]", &|| {
        w.logsumexp(&[1], false)?.sum()?.backward()?;
        w.zero_grad();
        Ok(())
    });
}
