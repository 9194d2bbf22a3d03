//! Contractions with element-wise work around them run as one GEMM plus one
//! fused element-wise kernel, and agree with the reference interpreter.

mod common;
use common::{assert_close, eval, random_inputs};
use rand::{rngs::StdRng, SeedableRng};
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

fn check(src: &str, args: &[(&str, &[usize])], route: &str) {
    let f = IndexFn::parse(src, args).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let inputs = random_inputs(&f, &mut rng, false);
    let want = eval(&f, &inputs);
    let k = jit::compile(&f, DType::F64).unwrap();
    assert_eq!(k.route().to_string(), route, "{src}");
    let named: Vec<(&str, &[f64])> = inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    assert_close(src, &k.run_f64(&named).unwrap(), &want, 1e-12);
    let k32 = jit::compile(&f, DType::F32).unwrap();
    let single: Vec<(String, Vec<f32>)> = inputs
        .iter()
        .map(|(n, d)| (n.clone(), d.iter().map(|&x| x as f32).collect()))
        .collect();
    let named32: Vec<(&str, &[f32])> = single
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let got: Vec<f64> = k32
        .run_f32(&named32)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    assert_close(src, &got, &want, 1e-4);
}

#[test]
fn relu_of_matmul_plus_bias() {
    check(
        "f[i; j] = max(sum{k}_0^39 (a[i; k] * w[k; j]) + b[j], 0)",
        &[("a", &[33, 40]), ("w", &[40, 50]), ("b", &[50])],
        "gemm+jit",
    );
}

#[test]
fn transcendental_epilogue_of_a_transposed_product() {
    check(
        "f[i; j] = tanh (sum{k}_0^31 (a[k; i] * b[k; j]) / 8) * c[i; j]",
        &[("a", &[32, 20]), ("b", &[32, 24]), ("c", &[20, 24])],
        "gemm+jit",
    );
}

#[test]
fn plain_contractions_and_element_wise_functions_keep_their_routes() {
    check(
        "f[i; j] = sum{k}_0^39 (a[i; k] * w[k; j])",
        &[("a", &[33, 40]), ("w", &[40, 50])],
        "gemm",
    );
    check("f[i] = exp x[i]", &[("x", &[17])], "jit");
    // A sum that is not a contraction stays in the generic kernel.
    check(
        "f[i] = exp (sum{k}_0^(i) (x[k])) + x[i]",
        &[("x", &[17])],
        "jit",
    );
}

#[test]
fn derivatives_of_a_relu_layer_agree_with_the_interpreter() {
    let f = IndexFn::parse(
        "f[i; j] = max(sum{k}_0^39 (a[i; k] * w[k; j]) + b[j], 0)",
        &[("a", &[33, 40]), ("w", &[40, 50]), ("b", &[50])],
    )
    .unwrap();
    for arg in ["a", "w", "b"] {
        let d = f.derive(arg).unwrap();
        let mut rng = StdRng::seed_from_u64(9);
        let inputs = random_inputs(&d, &mut rng, false);
        let named: Vec<(&str, &[f64])> = inputs
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let k = jit::compile(&d, DType::F64).unwrap();
        assert_close(
            &d.to_string(),
            &k.run_f64(&named).unwrap(),
            &eval(&d, &inputs),
            1e-12,
        );
    }
}
