//! tenjin's side of `bench/hessian.sh`: the full Hessians of
//! `../shared/bench/workloads.py` (logistic regression `Σ log(exp(−y·Xw)+1)`
//! with respect to `w`, n = 1000, m = 2000; matrix factorisation
//! `‖T − U·Vᵀ‖²` with respect to `U`, m = n = 300, k = 5), in f32, one JSON
//! line each with the median time in ms (compilation excluded: the first
//! call is a warm-up); and forward mode, `jvp` of the per-sample losses of
//! the same logistic regression along one direction.
//!
//! `cargo run --release --example hessian_peers [-- smoke]`

mod bench_common;

use bench_common::{data, median_ms, report};
use tenjin::{autograd, Error, Tensor};

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let reps = if smoke { 1 } else { 11 };

    let n = if smoke { 100 } else { 1000 };
    let m = 2 * n;
    let x = Tensor::from_vec(data(m * n, 1, 1.0 / (n as f32).sqrt()), &[m, n])?;
    let y = Tensor::from_vec(data(m, 2, 1.0), &[m])?.sign()?;
    let w = Tensor::from_vec(data(n, 3, 0.1), &[n])?;
    let logreg = |w: &Tensor| -> Result<Tensor, Error> {
        let z = x.matmul(&w.reshape(&[n, 1])?)?.reshape(&[m])?;
        y.neg()?.mul(&z)?.exp()?.add_scalar(1.0)?.log()?.sum()
    };
    let ms = median_ms(reps, || autograd::hessian(logreg, &w).map(drop))?;
    report("logreg_hessian", &format!("n={n},m={m}"), "median_ms", ms);

    // Forward mode: the per-sample losses' Jacobian along a direction.
    let losses = |w: &Tensor| -> Result<Tensor, Error> {
        let z = x.matmul(&w.reshape(&[n, 1])?)?.reshape(&[m])?;
        y.neg()?.mul(&z)?.exp()?.add_scalar(1.0)?.log()
    };
    let dir = Tensor::from_vec(data(n, 7, 1.0), &[n])?;
    let ms = median_ms(reps, || autograd::jvp(losses, &w, &dir).map(drop))?;
    report("logreg_jvp", &format!("n={n},m={m}"), "median_ms", ms);

    let (mn, k) = if smoke { (30, 5) } else { (300, 5) };
    let t = Tensor::from_vec(data(mn * mn, 4, 1.0), &[mn, mn])?;
    let u = Tensor::from_vec(data(mn * k, 5, 1.0), &[mn, k])?;
    let v = Tensor::from_vec(data(mn * k, 6, 1.0), &[mn, k])?;
    let mf = |u: &Tensor| -> Result<Tensor, Error> {
        let r = t.sub(&u.matmul(&v.transpose(0, 1)?)?)?;
        r.mul(&r)?.sum()
    };
    let ms = median_ms(reps, || autograd::hessian(mf, &u).map(drop))?;
    report("mf_hessian", &format!("m=n={mn},k={k}"), "median_ms", ms);
    Ok(())
}
