//! Ops on bf16 and f16 tensors against PyTorch's own (CPU) values and
//! gradients, from `tests/data/torch_half_ops.safetensors` (made once by
//! `bench/torch_half_ops.py` with the venv of `../shared/bench/setup.sh`;
//! no Python needed here). Both compute in f32 and round to the half type,
//! so they differ only where the f32 steps differ (PyTorch's vectorised
//! `exp`, its order of a sum) and a result lands near a rounding
//! boundary: the tolerances below, in units in the last place of the half
//! type, are stated per op class.

mod common;

use tenjin::{DType, Error, Tensor};

type Op = fn(&[Tensor]) -> Result<Tensor, Error>;

/// Ops in the order of the file, with their class's tolerance in ulps of
/// the half type (for values, then for gradients), measured at the
/// largest magnitude of the reference tensor.
const CASES: &[(&str, Op, [f64; 2])] = &[
    // Element-wise: one rounding of the same f32 value, so equal unless
    // the f32 functions differ in their last bit next to a rounding
    // boundary (measured: every value equal). Gradients: PyTorch's
    // derivatives read the rounded output (`1 − y²` of the half `y`),
    // tenjin's the f32 value before rounding: 1 ulp.
    ("exp", |x| x[0].exp(), [1.0, 1.0]),
    ("tanh", |x| x[0].tanh(), [1.0, 1.0]),
    ("sigmoid", |x| x[0].sigmoid(), [1.0, 1.0]),
    ("gelu", |x| x[0].gelu(), [1.0, 1.0]),
    ("relu", |x| x[0].relu(), [0.0, 0.0]), // exact arithmetic: equal
    ("log", |x| x[0].log(), [1.0, 1.0]),
    ("sqrt", |x| x[0].sqrt(), [1.0, 1.0]),
    ("add", |x| x[0].add(&x[1]), [0.0, 0.0]),
    ("mul", |x| x[0].mul(&x[1]), [0.0, 0.0]),
    ("div", |x| x[0].div(&x[1]), [0.0, 1.0]),
    // Sums of products, reductions, and ops built on them: the f32 sums
    // are taken in other orders (measured: values within 1 ulp, gradients
    // within 1, the f16 convolution's input gradient 2).
    ("matmul", |x| x[0].matmul(&x[1]), [1.0, 2.0]),
    ("sum_rows", |x| x[0].sum_dims(&[1], false), [1.0, 2.0]),
    ("mean", |x| x[0].mean(), [1.0, 2.0]),
    ("softmax", |x| x[0].softmax(1), [1.0, 2.0]),
    ("log_softmax", |x| x[0].log_softmax(1), [1.0, 2.0]),
    (
        "layer_norm",
        |x| x[0].layer_norm(1, Some(&x[1]), Some(&x[2]), 1e-5),
        [1.0, 2.0],
    ),
    (
        "cross_entropy",
        |x| x[0].cross_entropy(&[3, 0, 7, 1, 1, 5]),
        [1.0, 2.0],
    ),
    (
        "conv2d",
        |x| x[0].conv2d(&x[1], None, [1, 1], [1, 1], [1, 1], 1),
        [1.0, 2.0],
    ),
];

fn ulp(d: DType, magnitude: f64) -> f64 {
    let bits = if d == DType::BF16 { 8 } else { 11 };
    let m = magnitude.max(if d == DType::BF16 { 1e-30 } else { 6.1e-5 });
    2f64.powi(m.log2().floor() as i32 - (bits - 1))
}

/// The largest difference of `got` from `want` in ulps of `want`'s
/// largest magnitude.
fn ulps(d: DType, got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.dtype(), d);
    assert_eq!(got.shape(), want.shape());
    let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    let scale = w.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (g, w)| m.max((g - w).abs()));
    err / ulp(d, scale)
}

#[test]
fn half_values_and_gradients_match_pytorchs() {
    check_against_pytorch(None);
}

/// The same ops on the simulated GPU (its kernels in f32 between the
/// device's own half conversions), within the same tolerances;
/// `TENJIN_GPU_TESTS=cuda` runs them on a real GPU.
#[test]
fn half_values_and_gradients_match_pytorchs_on_the_gpu() {
    check_against_pytorch(Some(common::gpu()));
}

/// Runs every case on `device` (the CPU for `None`).
fn check_against_pytorch(device: Option<tenjin::Device>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch_half_ops.safetensors"
    );
    let file = tenjin::safetensors::load(path).unwrap();
    let get = |name: &str| {
        file.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .1
            .clone()
    };
    let (mut report, mut failures) = (Vec::new(), Vec::new());
    for (tag, d) in [("bf16", DType::BF16), ("f16", DType::F16)] {
        for (name, op, [value_tol, grad_tol]) in CASES {
            let key = format!("{tag}.{name}");
            let inputs: Vec<Tensor> = (0..)
                .map_while(|k| {
                    file.iter()
                        .find(|(n, _)| *n == format!("{key}.in{k}"))
                        .map(|(_, t)| match device {
                            Some(d) => t.to_device(d).unwrap().requires_grad(),
                            None => t.clone().requires_grad(),
                        })
                })
                .collect();
            let y = op(&inputs).unwrap();
            assert_eq!(y.device(), device.unwrap_or(tenjin::Device::Cpu), "{key}");
            let e = ulps(d, &y, &get(&format!("{key}.out")));
            report.push(format!("{key} value {e}"));
            if e > *value_tol {
                failures.push(format!("{key}: value {e} ulps"));
            }
            let cotangent = get(&format!("{key}.cotangent"));
            let cotangent = match device {
                Some(d) => cotangent.to_device(d).unwrap(),
                None => cotangent,
            };
            y.mul(&cotangent)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            for (k, x) in inputs.iter().enumerate() {
                let g = x.grad().unwrap();
                let e = ulps(d, &g, &get(&format!("{key}.grad{k}")));
                report.push(format!("{key} grad{k} {e}"));
                if e > *grad_tol {
                    failures.push(format!("{key}: gradient {k} {e} ulps"));
                }
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{failures:?}");
}
