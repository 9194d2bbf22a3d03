use std::time::Instant;
fn main() -> Result<(), tenjin::Error> {
    let ns: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    for n in ns {
        let x = tenjin::Tensor::from_vec_f64(
            (0..n + 4).map(|i| 1.0 + 1e-3 * i as f64).collect(),
            &[n + 4],
        )?
        .requires_grad();
        let terms: Vec<String> = (0..n).map(|k| format!("x[i + {k}]")).collect();
        let src = format!("f[i] = {}", terms.join(" * "));
        let t = Instant::now();
        let y = tenjin::index_fn_with_sizes(&src, &[("x", &x)], &[("i", 4)])?;
        let fwd = t.elapsed();
        let t = Instant::now();
        y.sum()?.backward()?;
        let bwd = t.elapsed();
        println!(
            "n={n} forward {fwd:?} backward {bwd:?} g0 {}",
            x.grad().unwrap().to_vec_f64()?[0]
        );
    }
    Ok(())
}
