//! Staged execution (issue "Staged execution"): value, and value and
//! gradient, of index functions written the way a user writes them, through
//! `tenjin::index_fn` and `backward_with` (f32). The ratio of each pair is
//! the cheap-gradient principle's measure (target: at most 5); the full
//! table, with more kinds, is `examples/cheap_gradient.rs`. Planning, with
//! the plan cache cleared, is timed too.
//!
//! `cargo bench --bench staged` (a quick smoke run: `cargo bench --bench staged -- --test`).
//! Threads: `TENJIN_NUM_THREADS` (default: all cores).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::time::Duration;
use tenjin::symbolic::IndexFn;
use tenjin::{DType, Tensor};

struct Case {
    name: &'static str,
    src: &'static str,
    args: &'static [(&'static str, &'static [usize])],
}

const CASES: [Case; 3] = [
    Case {
        name: "dense layer max(x·wᵀ + c, 0), B=128 K=512 O=256",
        src: "h[b; o] = max(sum{k}_0^511 (x[b; k] * w[o; k]) + c[o], 0)",
        args: &[("x", &[128, 512]), ("w", &[256, 512]), ("c", &[256])],
    },
    Case {
        name: "softmax over rows, 256 x 1024",
        src: "p[i; j] = exp (x[i; j] - max{m}_0^1023 (x[i; m])) / sum{k}_0^1023 (exp (x[i; k] - max{m}_0^1023 (x[i; m])))",
        args: &[("x", &[256, 1024])],
    },
    Case {
        name: "attention in one line, N=512 E=64",
        src: "o[i; d] = sum{j}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[j; e])) / sum{m}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[m; e]))) * v[j; d])",
        args: &[("q", &[512, 64]), ("k", &[512, 64]), ("v", &[512, 64])],
    },
];

fn staged(c: &mut Criterion) {
    let mut g = c.benchmark_group("staged");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for case in &CASES {
        let inputs: Vec<Tensor> = case
            .args
            .iter()
            .enumerate()
            .map(|(i, (_, s))| {
                Tensor::randn(s, DType::F32, i as u64 + 1)
                    .and_then(|t| t.mul_scalar(0.1))
                    .map(|t| t.detach().requires_grad())
                    .unwrap()
            })
            .collect();
        let named: Vec<(&str, &Tensor)> = case.args.iter().map(|(n, _)| *n).zip(&inputs).collect();
        let y = tenjin::no_grad(|| tenjin::index_fn(case.src, &named)).unwrap();
        let dy = Tensor::randn(y.shape(), DType::F32, 99).unwrap();
        g.bench_function(format!("value: {}", case.name), |b| {
            b.iter(|| black_box(tenjin::no_grad(|| tenjin::index_fn(case.src, &named)).unwrap()))
        });
        g.bench_function(format!("value and gradient: {}", case.name), |b| {
            b.iter(|| {
                for t in &inputs {
                    t.zero_grad();
                }
                tenjin::index_fn(case.src, &named)
                    .unwrap()
                    .backward_with(&dy)
                    .unwrap()
            })
        });
        let shapes: Vec<(&str, &[usize])> = case.args.to_vec();
        let f = IndexFn::parse(case.src, &shapes).unwrap();
        let all: Vec<usize> = (0..f.args().len()).collect();
        g.bench_function(format!("plan forward and backward: {}", case.name), |b| {
            b.iter(|| black_box(tenjin::planner::plan_node(&f, &all, DType::F32).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, staged);
criterion_main!(benches);
