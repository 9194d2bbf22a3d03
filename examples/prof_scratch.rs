use tenjin::{DType, Tensor};
fn main() -> Result<(), tenjin::Error> {
    let which = std::env::args().nth(1).unwrap_or("softmax".into());
    let (src, shapes): (String, Vec<(&str, Vec<usize>)>) = match which.as_str() {
        "softmax" => ("p[i; j] = exp (x[i; j] - max{m}_0^1023 (x[i; m])) / sum{k}_0^1023 (exp (x[i; k] - max{m}_0^1023 (x[i; m])))".into(), vec![("x", vec![256, 1024])]),
        "logsoftmax" => ("p[i; j] = x[i; j] - max{m}_0^1023 (x[i; m]) - log (sum{k}_0^1023 (exp (x[i; k] - max{m}_0^1023 (x[i; m]))))".into(), vec![("x", vec![256, 1024])]),
        _ => {
            let r: usize = std::env::var("ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
            let d: usize = std::env::var("D").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
            (format!("y[i; j] = (x[i; j] - sum{{m}}_0^{l} (x[i; m]) / {d}) / sqrt (sum{{k}}_0^{l} ((x[i; k] - sum{{q}}_0^{l} (x[i; q]) / {d}) ** 2) / {d} + 0.00001) * g[j] + b[j]", l = d - 1), vec![("x", vec![r, d]), ("g", vec![d]), ("b", vec![d])])
        }
    };
    let ps: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, (_, s))| {
            Tensor::randn(s, DType::F32, i as u64 + 1)
                .unwrap()
                .requires_grad()
        })
        .collect();
    let args: Vec<(&str, &Tensor)> = shapes.iter().zip(&ps).map(|((n, _), t)| (*n, t)).collect();
    let y = tenjin::index_fn(&src, &args)?;
    let g = Tensor::randn(y.shape(), DType::F32, 9)?;
    y.backward_with(&g)?;
    for _ in 0..3 {
        for p in &ps {
            p.zero_grad();
        }
        let t = std::time::Instant::now();
        let y = tenjin::index_fn(&src, &args)?;
        let tf = t.elapsed();
        eprintln!("-- forward {:.3} ms; backward:", tf.as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        y.backward_with(&g)?;
        eprintln!("-- backward {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    let t = std::time::Instant::now();
    tenjin::no_grad(|| tenjin::index_fn(&src, &args))?;
    eprintln!("-- plain forward {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}
