//! How fast the simulated device's interpreter (PTX decoded once) runs
//! kernels, against the test interpreter it replaced
//! (`common/ptx_interp.rs`, which matches every instruction as text on
//! every step): the same emitted modules, the same inputs and grids, the
//! same outputs. Ignored by default (a measurement, not a check):
//!
//! `cargo test --release --test sim_speed -- --ignored --nocapture`

#[path = "common/ptx_interp.rs"]
mod ptx_interp;

use std::time::Instant;
use tenjin::gpu::ptx::{module, Arch};
use tenjin::kernel::backend::Values;
use tenjin::planner::passes::{loop_kernel, LoopRole};
use tenjin::planner::Target;
use tenjin::symbolic::IndexFn;
use tenjin::DType;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

#[test]
#[ignore]
fn decoding_once_against_the_text_interpreter() {
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a [(&'a str, &'a [usize])],
        &'a [(&'a str, usize)],
    );
    let cases: &[Case] = &[
        (
            "element-wise chain",
            "f[i] = tanh(x[i]) * 2 + exp(x[i]) / (1 + x[i] * x[i])",
            &[("x", &[4096])],
            &[],
        ),
        (
            "row softmax",
            "f[i; j] = exp(x[i; j]) / sum{k}_0^127 (exp(x[i; k]))",
            &[("x", &[32, 128])],
            &[],
        ),
        (
            "matmul as a loop",
            "f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j])",
            &[("a", &[32, 64]), ("b", &[64, 32])],
            &[],
        ),
        (
            "conv1d as a loop",
            "f[b; o; t] = sum{c}_0^7 (sum{k}_0^4 (x[b; c; t + k] * w[o; c; k]))",
            &[("x", &[4, 8, 68]), ("w", &[8, 8, 5])],
            &[("t", 64)],
        ),
    ];
    println!("| kernel | elements | text interpreter ms | decoded once ms | speed-up |");
    println!("| --- | --- | --- | --- | --- |");
    let mut speedups = Vec::new();
    for (name, src, args, sizes) in cases {
        let f = IndexFn::parse_with_sizes(src, args, sizes).unwrap();
        let k = loop_kernel(&f, DType::F32, Target::Gpu, LoopRole::Whole).unwrap();
        let text = module(0, &k, DType::F32, Arch::Sm80).unwrap();
        let inputs: Vec<Vec<f32>> = args
            .iter()
            .map(|(_, s)| {
                (0..s.iter().product::<usize>())
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect()
            })
            .collect();
        let n: usize = f.output_shape().iter().product();
        let (grid, block) = (8, 128);
        let old = || {
            let program = ptx_interp::Program::parse(&text).unwrap();
            let mut bufs = vec![ptx_interp::Buf::f32(&vec![0.0; n], true)];
            bufs.extend(inputs.iter().map(|x| ptx_interp::Buf::f32(x, false)));
            program.run(&mut bufs, grid, block).unwrap();
            bufs[0].to_f32()
        };
        let values: Vec<Values> = inputs.iter().map(|x| Values::F32(x)).collect();
        let new = || {
            tenjin::gpu::check::simulate_module(&text, DType::F32, &values, n, (grid, block), &[])
                .unwrap()
        };
        let (a, b) = (old(), new());
        assert!(
            a.iter()
                .zip(&b)
                .all(|(x, y)| (*x as f64).to_bits() == y.to_bits() || (*x as f64 - y).abs() == 0.0),
            "{name}: different outputs"
        );
        let time = |f: &dyn Fn()| {
            median(
                (0..5)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect(),
            )
        };
        let (t_old, t_new) = (time(&|| drop(old())), time(&|| drop(new())));
        speedups.push(t_old / t_new);
        println!(
            "| {name} | {n} | {t_old:.2} | {t_new:.2} | {:.1}× |",
            t_old / t_new
        );
    }
    println!("median speed-up {:.1}×", median(speedups));
}
