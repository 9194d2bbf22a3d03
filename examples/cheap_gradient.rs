//! The cheap-gradient principle, measured: for index functions written the
//! way a user writes them (one `tenjin::index_fn` line each), the time of
//! value + gradient over the time of the value alone, f32.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example cheap_gradient          # the table
//! TENJIN_NUM_THREADS=1 cargo run --release --example cheap_gradient -- smoke # one repetition each
//! ```
//!
//! Each row: the median over repetitions of (a) the forward alone under
//! `no_grad`, (b) the forward recorded and `backward_with` a fixed random
//! incoming gradient, to every argument. The first call of each
//! (derive, plan, compile) is not timed.

use std::time::Instant;
use tenjin::{DType, Error, Tensor};

struct Case {
    name: &'static str,
    src: String,
    args: Vec<(&'static str, Vec<usize>)>,
    sizes: Vec<(&'static str, usize)>,
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let k = 512;
    v.push(Case {
        name: "dense layer, fused bias and relu (B=128, K=512, O=256)",
        src: format!(
            "h[b; o] = max(sum{{k}}_0^{} (x[b; k] * w[o; k]) + c[o], 0)",
            k - 1
        ),
        args: vec![("x", vec![128, k]), ("w", vec![256, k]), ("c", vec![256])],
        sizes: vec![],
    });
    let (rows, n) = (256, 1024);
    let l = n - 1;
    let max = |var: &str| format!("max{{{var}}}_0^{l} (x[i; {var}])");
    v.push(Case {
        name: "softmax over rows (256 x 1024)",
        src: format!(
            "p[i; j] = exp (x[i; j] - {}) / sum{{k}}_0^{l} (exp (x[i; k] - {}))",
            max("m"),
            max("m")
        ),
        args: vec![("x", vec![rows, n])],
        sizes: vec![],
    });
    v.push(Case {
        name: "log-softmax over rows (256 x 1024)",
        src: format!(
            "p[i; j] = x[i; j] - {} - log (sum{{k}}_0^{l} (exp (x[i; k] - {})))",
            max("m"),
            max("m")
        ),
        args: vec![("x", vec![rows, n])],
        sizes: vec![],
    });
    v.push(Case {
        name: "logsumexp over rows (256 x 1024)",
        src: format!(
            "s[i] = {} + log (sum{{k}}_0^{l} (exp (x[i; k] - {})))",
            max("m"),
            max("m")
        ),
        args: vec![("x", vec![rows, n])],
        sizes: vec![],
    });
    let d = 512;
    let dl = d - 1;
    let mean = |var: &str| format!("sum{{{var}}}_0^{dl} (x[i; {var}]) / {d}");
    v.push(Case {
        name: "layer norm over rows (256 x 512)",
        src: format!(
            "y[i; j] = (x[i; j] - {}) / sqrt (sum{{k}}_0^{dl} ((x[i; k] - {}) ** 2) / {d} + 0.00001) * g[j] + b[j]",
            mean("m"),
            mean("q")
        ),
        args: vec![("x", vec![256, d]), ("g", vec![d]), ("b", vec![d])],
        sizes: vec![],
    });
    v.push(Case {
        name: "attention in one expression (N=512, E=64)",
        src: "o[i; d] = sum{j}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[j; e])) / sum{m}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[m; e]))) * v[j; d])".into(),
        args: vec![("q", vec![512, 64]), ("k", vec![512, 64]), ("v", vec![512, 64])],
        sizes: vec![],
    });
    v.push(Case {
        name: "conv1d with fused bias and relu (B=8, C=O=64, T=512, K=5)",
        src:
            "y[b; o; t] = max(sum{c}_0^63 (sum{k}_0^4 (x[b; c; t + k] * w[o; c; k])) + bias[o], 0)"
                .into(),
        args: vec![
            ("x", vec![8, 64, 516]),
            ("w", vec![64, 64, 5]),
            ("bias", vec![64]),
        ],
        sizes: vec![("t", 512)],
    });
    let (b, c) = (256, 1000);
    let cl = c - 1;
    let ymax = format!("max{{m}}_0^{cl} (y[b; m])");
    v.push(Case {
        name: "cross-entropy in one expression (B=256, V=1000)",
        src: format!(
            "l[] = sum{{b}}_0^{} ({ymax} + log (sum{{c}}_0^{cl} (exp (y[b; c] - {ymax}))) - sum{{c}}_0^{cl} (t[b; c] * y[b; c])) / {b}",
            b - 1
        ),
        args: vec![("y", vec![b, c]), ("t", vec![b, c])],
        sizes: vec![],
    });
    v.push(Case {
        name: "mean squared error in one expression (256 x 1024)",
        src: "l[] = sum{b}_0^255 (sum{j}_0^1023 ((y[b; j] - t[b; j]) ** 2)) / 262144".into(),
        args: vec![("y", vec![256, 1024]), ("t", vec![256, 1024])],
        sizes: vec![],
    });
    v.push(Case {
        name: "Gram matrix (512 x 512)",
        src: "g[i; j] = sum{k}_0^511 (x[i; k] * x[j; k])".into(),
        args: vec![("x", vec![512, 512])],
        sizes: vec![],
    });
    v.push(Case {
        name: "RBF kernel matrix (256 x 256, D=512)",
        src: "r[i; j] = exp (-sum{d}_0^511 ((x[i; d] - y[j; d]) ** 2) / 1024)".into(),
        args: vec![("x", vec![256, 512]), ("y", vec![256, 512])],
        sizes: vec![],
    });
    v
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let reps = if smoke { 1 } else { 9 };
    println!(
        "| function | value ms | value + grad ms | ratio | threads |\n| --- | --- | --- | --- | --- |"
    );
    for case in cases() {
        let inputs: Vec<Tensor> = case
            .args
            .iter()
            .enumerate()
            .map(|(i, (_, s))| Tensor::randn(s, DType::F32, 10 + i as u64))
            .collect::<Result<_, _>>()?;
        let params: Vec<Tensor> = inputs.iter().map(|t| t.detach().requires_grad()).collect();
        let named = |ts: &[Tensor]| -> Vec<(&str, Tensor)> {
            case.args
                .iter()
                .zip(ts)
                .map(|((n, _), t)| (*n, t.clone()))
                .collect()
        };
        let value = |ts: &[Tensor]| -> Result<Tensor, Error> {
            let n = named(ts);
            let refs: Vec<(&str, &Tensor)> = n.iter().map(|(a, t)| (*a, t)).collect();
            tenjin::index_fn_with_sizes(&case.src, &refs, &case.sizes)
        };
        let out_shape = tenjin::no_grad(|| value(&inputs))?.shape().to_vec();
        let g = Tensor::randn(&out_shape, DType::F32, 99)?;
        let step = || -> Result<(), Error> {
            for p in &params {
                p.zero_grad();
            }
            value(&params)?.backward_with(&g)
        };
        // First calls: derive, plan, compile.
        tenjin::no_grad(|| value(&inputs))?;
        step()?;
        let (mut tv, mut tg) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            tenjin::no_grad(|| value(&inputs))?;
            tv.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            step()?;
            tg.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (v, vg) = (median(tv), median(tg));
        println!(
            "| {} | {v:.3} | {vg:.3} | {:.2} | {} |",
            case.name,
            vg / v,
            tenjin::jit::num_threads()
        );
    }
    Ok(())
}
