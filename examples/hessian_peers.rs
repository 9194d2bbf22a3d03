//! Hessians side by side with JAX (`bench/hessian.sh`): the full Hessian
//! of logistic regression and of matrix factorisation, the workloads
//! `logreg` and `mf` of `../shared/bench/workloads.py`, in f32.
//!
//! `cargo run --release --example hessian_peers [-- smoke]` prints one
//! line per workload with the median time of repeated calls.

use std::time::Instant;
use tenjin::{autograd, DType, Error, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time(reps: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<(f64, f64), Error> {
    let t = Instant::now();
    f()?;
    let first = t.elapsed().as_secs_f64() * 1e3;
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((first, median(times)))
}

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let reps = if smoke { 1 } else { 15 };
    let n = if smoke { 100 } else { 1000 };
    let m = 2 * n;
    let x = Tensor::randn(&[m, n], DType::F32, 1)?.mul_scalar(1.0 / (n as f64).sqrt())?;
    let y = Tensor::randn(&[m], DType::F32, 2)?.sign()?;
    let w = Tensor::randn(&[n], DType::F32, 3)?.mul_scalar(0.1)?;
    let logreg = |w: &Tensor| -> Result<Tensor, Error> {
        let z = x.matmul(&w.reshape(&[n, 1])?)?.reshape(&[m])?;
        y.neg()?.mul(&z)?.exp()?.add_scalar(1.0)?.log()?.sum()
    };
    let (first, med) = time(reps, || autograd::hessian(logreg, &w).map(drop))?;
    println!("logreg_hessian n={n},m={m}: first {first:.1} ms, median {med:.2} ms");

    let (mn, k) = if smoke { (30, 5) } else { (300, 5) };
    let t = Tensor::randn(&[mn, mn], DType::F32, 4)?;
    let u = Tensor::randn(&[mn, k], DType::F32, 5)?;
    let v = Tensor::randn(&[mn, k], DType::F32, 6)?;
    let mf = |u: &Tensor| -> Result<Tensor, Error> {
        let r = t.sub(&u.matmul(&v.transpose(0, 1)?)?)?;
        r.mul(&r)?.sum()
    };
    let (first, med) = time(reps, || autograd::hessian(mf, &u).map(drop))?;
    println!("mf_hessian m=n={mn},k={k}: first {first:.1} ms, median {med:.2} ms");
    Ok(())
}
