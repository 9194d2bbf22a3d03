//! Element-wise f32 kernels at the vector width of this process
//! (`tenjin::jit::vector_width`: the widest the host has, or the one
//! `TENJIN_SIMD` names), one JSON line per kernel and size with the median
//! time per element. `bench/vector_width.sh` runs it at every width and
//! prints the table of `BENCHMARKS.md` ("Element-wise code at full width").
//!
//! `TENJIN_SIMD=f32x4 TENJIN_NUM_THREADS=1 cargo run --release --example vector_width`

// Shared with the peer benchmarks; this one prints its own lines.
#[allow(dead_code)]
mod bench_common;

use bench_common::{data, median_ms};
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

const CHAIN: &str = "tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))";

/// (name, body over `x[i]`, differentiate the sum of it).
const KERNELS: &[(&str, &str, bool)] = &[
    ("exp", "exp x[i]", false),
    ("tanh", "tanh x[i]", false),
    ("sigmoid", "sigmoid x[i]", false),
    ("log", "log (abs x[i] + 1)", false),
    (
        "gelu (tanh form)",
        "0.5 * x[i] * (1 + tanh (0.7978846 * (x[i] + 0.044715 * x[i] ** 3)))",
        false,
    ),
    (
        "gelu (tanh form), gradient",
        "0.5 * x[i] * (1 + tanh (0.7978846 * (x[i] + 0.044715 * x[i] ** 3)))",
        true,
    ),
    (
        "gelu (erf form)",
        "0.5 * x[i] * (1 + erf (x[i] * 0.70710677))",
        false,
    ),
    (
        "gelu (erf form), gradient",
        "0.5 * x[i] * (1 + erf (x[i] * 0.70710677))",
        true,
    ),
    ("chain", CHAIN, false),
    ("chain, gradient", CHAIN, true),
    (
        "arithmetic only",
        "x[i] * 3 + x[i] * x[i] - 2 / (x[i] + 4)",
        false,
    ),
];

fn main() -> Result<(), tenjin::Error> {
    for n in [1usize << 16, 1 << 20] {
        let x = data(n, 1, 2.0);
        let seed = [1f32];
        let mut y = vec![0f32; n];
        for &(name, body, grad) in KERNELS {
            let map = IndexFn::parse(&format!("f[i] = {body}"), &[("x", &[n][..])])?;
            let f = if grad {
                let sum = IndexFn::parse(
                    &format!("s[] = sum{{i}}_0^{} ({body})", n - 1),
                    &[("x", &[n][..])],
                )?;
                sum.derive("x")?
            } else {
                map
            };
            let k = jit::compile(&f, DType::F32)?;
            let args: Vec<&[f32]> = if grad { vec![&x, &seed] } else { vec![&x] };
            // Medians of five medians: the machine is shared.
            let mut runs = Vec::new();
            for _ in 0..5 {
                runs.push(median_ms(21, || k.run_into_f32(&args, &mut y))?);
            }
            runs.sort_by(|a, b| a.total_cmp(b));
            println!(
                r#"{{"kernel": "{name}", "n": {n}, "simd": "{}", "threads": {}, "wide_loops": {}, "ns_per_element": {:.4}}}"#,
                jit::vector_width(),
                jit::num_threads(),
                k.wide_loops(),
                runs[2] * 1e6 / n as f64
            );
        }
    }
    Ok(())
}
