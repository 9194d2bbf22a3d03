//! Speed of the CPU JIT: compile latency of the paper's derivative `dd`
//! (target < 5 ms), cost of a cache hit (target < 2 µs), and throughput of
//! an element-wise chain on 16M f32 and of the paper's function at
//! I = J = 256, K = 64 (forward, f32).
//!
//! `cargo bench --bench jit` (a quick smoke run: `cargo bench --bench jit -- --test`).
//! Threads: `TENJIN_NUM_THREADS` (default: all cores).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::time::Duration;
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

const PAPER: &str =
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";
const PAPER_256: &str =
    "f[i; j] = exp (-sum{k}_0^63 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";
const CHAIN: &str = "f[i] = tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))";

fn paper() -> IndexFn {
    IndexFn::parse(
        PAPER,
        &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
    )
    .unwrap()
}

/// Deterministic values in (-1, 1).
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

fn latency(c: &mut Criterion) {
    let f = paper();
    let dd = f.derive("d").unwrap();
    let mut g = c.benchmark_group("jit latency");
    g.sample_size(20);
    g.bench_function("compile dd (paper example, f64, cache cleared)", |b| {
        b.iter(|| {
            jit::clear();
            black_box(jit::compile(&dd, DType::F64).unwrap())
        })
    });
    jit::compile(&f, DType::F32).unwrap();
    g.bench_function("cache hit: compile f (paper example)", |b| {
        b.iter(|| black_box(jit::compile(black_box(&f), DType::F32).unwrap()))
    });
    g.finish();
}

fn throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("jit throughput");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));

    let n = 16 << 20;
    let chain = IndexFn::parse(CHAIN, &[("x", &[n][..])]).unwrap();
    let k = jit::compile(&chain, DType::F32).unwrap();
    let x = data(n, 1);
    let mut y = vec![0f32; n];
    g.bench_function("element-wise chain, 16M f32", |b| {
        b.iter(|| k.run_into_f32(&[&x], &mut y).unwrap())
    });

    let (i, j, kk) = (256, 256, 64);
    let f = IndexFn::parse(
        PAPER_256,
        &[
            ("a", &[i, kk][..]),
            ("b", &[j, kk][..]),
            ("c", &[i, i][..]),
            ("d", &[i + kk - 1][..]),
        ],
    )
    .unwrap();
    let k = jit::compile(&f, DType::F32).unwrap();
    let (a, bb, cc, d) = (
        data(i * kk, 2),
        data(j * kk, 3),
        data(i * i, 4),
        data(i + kk - 1, 5),
    );
    let mut out = vec![0f32; i * j];
    g.bench_function("paper function forward, I = J = 256, K = 64, f32", |b| {
        b.iter(|| k.run_into_f32(&[&a, &bb, &cc, &d], &mut out).unwrap())
    });
    g.finish();
}

criterion_group!(benches, latency, throughput);
criterion_main!(benches);
