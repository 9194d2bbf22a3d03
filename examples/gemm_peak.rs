//! GEMM speed on the shapes tenjin runs, in GFLOP/s: tenjin's own GEMM
//! (`tenjin::jit::gemm`, through the planner's contraction) beside the
//! `gemm` crate it replaced (0.19, single-threaded calls), one JSON line
//! per shape, dtype and system; `bf16`: products of bf16 operands on
//! `avx512_bf16`, where the host has it. `bench/gemm_peak.sh` runs it with the
//! FMA-peak loop of `../shared/bench/csrc/peak.c` and prints the table of
//! `BENCHMARKS.md` ("GEMM near the peak").
//!
//! `TENJIN_NUM_THREADS=1 cargo run --release --example gemm_peak [-- smoke | -- SHAPE]`

// Shared with the peer benchmarks; this one prints its own lines.
#[allow(dead_code)]
mod bench_common;

use bench_common::median_ms;
use tenjin::jit::gemm as tenjin_gemm;
use tenjin::planner::contraction::{detect, detect_scaled, Contraction};
use tenjin::symbolic::IndexFn;
use tenjin::DType;

/// (name, m, n, k, A transposed (k-major), B transposed (n-major)).
const SHAPES: &[(&str, usize, usize, usize, bool, bool)] = &[
    ("square 1024", 1024, 1024, 1024, false, false),
    ("mlp layer x·wᵀ b64", 64, 512, 784, false, true),
    ("mlp layer x·wᵀ b256", 256, 512, 784, false, true),
    ("weight grad dyᵀ·x b256", 512, 784, 256, true, false),
    ("conv gemm 32x32x32 576→64", 32768, 64, 576, false, false),
    (
        "conv weight grad 64x576 k32768",
        64,
        576,
        32768,
        true,
        false,
    ),
    ("hessian Xᵀ·X 1000x1000x2000", 1000, 1000, 2000, true, false),
];

fn plan(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> (IndexFn, Contraction) {
    let a = if ta { "a[p; i]" } else { "a[i; p]" };
    let b = if tb { "b[j; p]" } else { "b[p; j]" };
    let sa = if ta { [k, m] } else { [m, k] };
    let sb = if tb { [n, k] } else { [k, n] };
    let src = format!("f[i; j] = sum{{p}}_0^{} ({a} * {b})", k - 1);
    let f = IndexFn::parse(&src, &[("a", &sa[..]), ("b", &sb[..])]).expect("parse");
    let c = detect(&f).expect("a contraction");
    (f, c)
}

fn line(name: &str, dtype: &str, system: &str, threads: usize, flops: f64, ms: f64) {
    let kernel = match (system, dtype) {
        ("tenjin", "f32") => tenjin_gemm::kernel_name(DType::F32),
        ("tenjin", "bf16") => tenjin_gemm::kernel_name(DType::BF16),
        ("tenjin", _) => tenjin_gemm::kernel_name(DType::F64),
        _ => None,
    };
    println!(
        "{{\"workload\": \"gemm\", \"shape\": \"{name}\", \"dtype\": \"{dtype}\", \"system\": \"{system}\", \"kernel\": \"{}\", \"threads\": {threads}, \"median_ms\": {ms:.4}, \"gflops\": {:.2}}}",
        kernel.unwrap_or("-"),
        flops / ms / 1e6
    );
}

macro_rules! measure {
    ($t:ty, $dtype:literal, $name:expr, $m:expr, $n:expr, $k:expr, $ta:expr, $tb:expr, $threads:expr) => {{
        let (m, n, k, ta, tb) = ($m, $n, $k, $ta, $tb);
        let (_, mut c) = plan(m, n, k, ta, tb);
        c.set_threads($threads);
        // bf16 operands (the values below are bf16 values): f32 buffers,
        // multiplied as bf16 pairs where the host can.
        c.set_half_operands(($dtype == "bf16").then_some(tenjin::DType::BF16));
        let a: Vec<$t> = (0..m * k)
            .map(|i| ((i * 7 % 13) as $t - 6.0) / 8.0)
            .collect();
        let b: Vec<$t> = (0..k * n)
            .map(|i| ((i * 5 % 11) as $t - 5.0) / 8.0)
            .collect();
        let mut out = vec![0 as $t; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let reps = ((4e9 / flops) as usize).clamp(5, 200);
        let ms = median_ms(reps, || {
            c.run_with(&[&a, &b], &mut out);
            Ok(())
        })
        .unwrap();
        line($name, $dtype, "tenjin", $threads, flops, ms);
        if $threads == 1 && $dtype != "bf16" {
            // The gemm crate, called as tenjin called it (single-threaded).
            let (rs_a, cs_a) = if ta { (1, m as isize) } else { (k as isize, 1) };
            let (rs_b, cs_b) = if tb { (1, k as isize) } else { (n as isize, 1) };
            let ms = median_ms(reps, || {
                // SAFETY: the strides describe the row-major buffers above.
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        out.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        cs_a,
                        rs_a,
                        b.as_ptr(),
                        cs_b,
                        rs_b,
                        1 as $t,
                        1 as $t,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
                Ok(())
            })
            .unwrap();
            line($name, $dtype, "gemm crate 0.19", 1, flops, ms);
        }
    }};
}

/// The same 4-GFLOP product as the "hessian" shape, written as what it
/// is, `Σ_i x[i; a] · d[i] · x[i; b]`: symmetric, so one triangle is
/// computed, and `d` is applied while packing. GFLOP/s count the full
/// product's flops, so they compare with the row above.
macro_rules! measure_symmetric {
    ($t:ty, $dtype:literal, $threads:expr) => {{
        let (n, m) = (1000, 2000);
        let src = format!("h[a; b] = sum{{i}}_0^{} (x[i; a] * d[i] * x[i; b])", m - 1);
        let f = IndexFn::parse(&src, &[("x", &[m, n][..]), ("d", &[m][..])]).expect("parse");
        let mut c = detect_scaled(&f).expect("a symmetric product");
        assert!(c.is_symmetric() && c.has_diagonal());
        c.set_threads($threads);
        let x: Vec<$t> = (0..m * n)
            .map(|i| ((i * 7 % 13) as $t - 6.0) / 8.0)
            .collect();
        let d: Vec<$t> = (0..m).map(|i| ((i % 5) as $t + 1.0) / 4.0).collect();
        let mut out = vec![0 as $t; n * n];
        let flops = 2.0 * (n * n * m) as f64;
        let ms = median_ms(11, || {
            c.run_with(&[&x, &d], &mut out);
            Ok(())
        })
        .unwrap();
        line(
            "hessian xᵀ·diag(d)·x, symmetric",
            $dtype,
            "tenjin",
            $threads,
            flops,
            ms,
        );
    }};
}

trait RunWith<T> {
    fn run_with(&self, inputs: &[&[T]], out: &mut [T]);
}
impl RunWith<f32> for Contraction {
    fn run_with(&self, inputs: &[&[f32]], out: &mut [f32]) {
        self.run_f32(inputs, out)
    }
}
impl RunWith<f64> for Contraction {
    fn run_with(&self, inputs: &[&[f64]], out: &mut [f64]) {
        self.run_f64(inputs, out)
    }
}

fn main() {
    let threads = tenjin::jit::num_threads();
    // `smoke` (CI): one small shape; any other argument: the shapes whose
    // names contain it.
    let only: Option<String> =
        std::env::args()
            .nth(1)
            .map(|a| if a == "smoke" { "b64".into() } else { a });
    for &(name, m, n, k, ta, tb) in SHAPES {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        measure!(f32, "f32", name, m, n, k, ta, tb, threads);
        if tenjin_gemm::kernel_name(DType::BF16).is_some() {
            measure!(f32, "bf16", name, m, n, k, ta, tb, threads);
        }
        measure!(f64, "f64", name, m, n, k, ta, tb, threads);
    }
    if only.as_deref().is_none_or(|o| "hessian".contains(o)) {
        measure_symmetric!(f32, "f32", threads);
        measure_symmetric!(f64, "f64", threads);
    }
}
