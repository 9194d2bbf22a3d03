//! Long expressions on the process's own main thread (an ordinary 8 MiB
//! stack, not a test harness worker): `harness = false`, so `main` below
//! is the thread that builds, derives, compiles and runs them.
//!
//! Sums of 10,000 terms and 10,000 products sharing one access compile and
//! differentiate; a product of hundreds of distinct factors does too; a
//! product of 10,000 distinct factors, whose derivative grows with the
//! square of its length, is an `Err` naming the limit, returned in about a
//! second, with nothing recorded.

use std::time::Instant;
use tenjin::{Error, Tensor};

/// `f[i] = x[i] * 1 + x[i] * 2 + … + x[i] * n`: every product reads one
/// access, so its adjoint sums `n` contributions.
fn shared_products(n: usize) -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.0, 1.0, 2.0, 3.0], &[4])?.requires_grad();
    let terms: Vec<String> = (1..=n).map(|k| format!("x[i] * {k}")).collect();
    let y = tenjin::index_fn(&format!("f[i] = {}", terms.join(" + ")), &[("x", &x)])?;
    y.sum()?.backward()?;
    let s = (n * (n + 1) / 2) as f64;
    assert_eq!(y.to_vec_f64()?, vec![0.0, s, 2.0 * s, 3.0 * s]);
    assert_eq!(x.grad().expect("a gradient").to_vec_f64()?, vec![s; 4]);
    Ok(())
}

/// `f[i] = x[i] + x[i + 1] + … + x[i + n − 1]`: `n` distinct accesses.
fn shifted_sum(n: usize) -> Result<(), Error> {
    let x = Tensor::from_vec_f64((0..n + 3).map(|i| i as f64).collect(), &[n + 3])?.requires_grad();
    let terms: Vec<String> = (0..n).map(|k| format!("x[i + {k}]")).collect();
    let y = tenjin::index_fn_with_sizes(
        &format!("f[i] = {}", terms.join(" + ")),
        &[("x", &x)],
        &[("i", 4)],
    )?;
    y.sum()?.backward()?;
    for (i, v) in y.to_vec_f64()?.iter().enumerate() {
        assert_eq!(*v, (n * i + n * (n - 1) / 2) as f64);
    }
    for (j, d) in x
        .grad()
        .expect("a gradient")
        .to_vec_f64()?
        .iter()
        .enumerate()
    {
        let reads = (0..4).filter(|&i| i <= j && j - i < n).count();
        assert_eq!(*d, reads as f64, "x[{j}]");
    }
    Ok(())
}

/// `f[i] = x[i] · x[i + 1] · … · x[i + n − 1]` over 4 outputs.
fn product(n: usize) -> Result<(Tensor, Result<Tensor, Error>), Error> {
    let values: Vec<f64> = (0..n + 3).map(|i| 1.0 + 1e-3 * (i % 7) as f64).collect();
    let x = Tensor::from_vec_f64(values, &[n + 3])?.requires_grad();
    let factors: Vec<String> = (0..n).map(|k| format!("x[i + {k}]")).collect();
    let y = tenjin::index_fn_with_sizes(
        &format!("f[i] = {}", factors.join(" * ")),
        &[("x", &x)],
        &[("i", 4)],
    );
    Ok((x, y))
}

fn distinct_product(n: usize) -> Result<(), Error> {
    let (x, y) = product(n)?;
    let y = y?;
    y.sum()?.backward()?;
    let v = x.detach().to_vec_f64()?;
    let f: Vec<f64> = (0..4).map(|i| v[i..i + n].iter().product()).collect();
    for (got, want) in y.to_vec_f64()?.iter().zip(&f) {
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "{got} against {want}"
        );
    }
    // d/dx[j] Σ_i f[i] = Σ_{i ≤ j < i + n} f[i] / x[j] (no factor is zero).
    let g = x.grad().expect("a gradient").to_vec_f64()?;
    for (j, d) in g.iter().enumerate() {
        let want: f64 = (0..4)
            .filter(|&i| i <= j && j < i + n)
            .map(|i| f[i] / v[j])
            .sum();
        assert!(
            (d - want).abs() <= 1e-10 * want.abs().max(1.0),
            "x[{j}]: {d} against {want}"
        );
    }
    Ok(())
}

fn too_long_a_product(n: usize) -> Result<(), Error> {
    let start = Instant::now();
    let (x, y) = product(n)?;
    let e = y.expect_err("the derivative is over the limit").to_string();
    assert!(
        e.contains("more than 200000 distinct expressions") && e.contains("split it"),
        "{e}"
    );
    assert!(x.grad().is_none(), "nothing recorded");
    assert!(
        start.elapsed().as_secs() < 30,
        "refused in {:?}",
        start.elapsed()
    );
    Ok(())
}

/// One case: builds, derives, compiles, runs and checks.
type Case = dyn Fn() -> Result<(), Error>;

fn main() -> Result<(), Error> {
    assert_eq!(
        std::thread::current().name(),
        Some("main"),
        "runs on the main thread"
    );
    let cases: [(&str, &Case); 5] = [
        ("10,000 products sharing one access", &|| {
            shared_products(10_000)
        }),
        ("a sum of 10,000 identical terms", &|| identical_sum(10_000)),
        ("a sum of 2,000 distinct terms", &|| shifted_sum(2_000)),
        ("a product of 250 distinct factors", &|| {
            distinct_product(250)
        }),
        ("a product of 10,000 distinct factors is refused", &|| {
            too_long_a_product(10_000)
        }),
    ];
    for (what, case) in cases {
        let start = Instant::now();
        case()?;
        println!("ok: {what} ({:.2?})", start.elapsed());
    }
    Ok(())
}

/// `f[i] = x[i] + x[i] + …`, `n` times.
fn identical_sum(n: usize) -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.0, 1.0, 2.0, 3.0], &[4])?.requires_grad();
    let y = tenjin::index_fn(
        &format!("f[i] = {}", vec!["x[i]"; n].join(" + ")),
        &[("x", &x)],
    )?;
    y.sum()?.backward()?;
    assert_eq!(
        y.to_vec_f64()?,
        vec![0.0, n as f64, 2.0 * n as f64, 3.0 * n as f64]
    );
    assert_eq!(
        x.grad().expect("a gradient").to_vec_f64()?,
        vec![n as f64; 4]
    );
    Ok(())
}
