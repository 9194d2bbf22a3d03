//! Half-precision tensors (`BF16`, `F16`): conversions round to nearest
//! even as PyTorch's do, every op computes in f32 and rounds its result
//! once, gradients reach half tensors as half tensors, views are read in
//! place, types mix as in PyTorch, and results are bitwise identical at 1,
//! 2 and 3 threads. (Values against PyTorch's own: `half_vs_torch.rs`.)

use tenjin::{bf16, f16, DType, Error, Tensor};

const HALVES: [DType; 2] = [DType::BF16, DType::F16];

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

#[test]
fn conversions_round_to_nearest_even_and_keep_ieee_specials() {
    // bf16: 1 + 2⁻⁸ is a tie between 1 and 1 + 2⁻⁷ (to even: 1); 1 + 3·2⁻⁸
    // a tie between 1 + 2⁻⁷ and 1 + 2⁻⁶ (to even: 1 + 2⁻⁶); just above a
    // tie rounds up; f32::MAX is past bf16's largest finite: ∞.
    let x = f32s(&[
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        f32::from_bits((1.0f32 + 1.0 / 256.0).to_bits() + 1),
        f32::MAX,
        -0.0,
        f32::NEG_INFINITY,
        1e-40, // an f32 subnormal: bf16 keeps its exponent range
    ]);
    let b = x.to_dtype(DType::BF16).unwrap().to_vec().unwrap();
    assert_eq!(b[0], 1.0);
    assert_eq!(b[1], 1.0 + 4.0 / 256.0);
    assert_eq!(b[2], 1.0 + 2.0 / 256.0);
    assert_eq!(b[3], f32::INFINITY);
    assert!(b[4] == 0.0 && b[4].is_sign_negative());
    assert_eq!(b[5], f32::NEG_INFINITY);
    assert!(b[6] > 0.0 && b[6].is_subnormal());
    // f16: 65504 is the largest finite, 65520 the tie with ∞ (to ∞);
    // 2⁻²⁴ the least subnormal, 2⁻²⁶ rounds to 0.
    let h = f32s(&[
        65504.0,
        65519.0,
        65520.0,
        2f32.powi(-24),
        2f32.powi(-26),
        1.0 + 1.0 / 2048.0,
    ])
    .to_dtype(DType::F16)
    .unwrap()
    .to_vec()
    .unwrap();
    assert_eq!(
        h,
        vec![65504.0, 65504.0, f32::INFINITY, 2f32.powi(-24), 0.0, 1.0]
    );
    // NaN stays NaN both ways, and in every op.
    for d in HALVES {
        let n = f32s(&[f32::NAN]).to_dtype(d).unwrap();
        assert!(n.to_vec().unwrap()[0].is_nan());
        assert!(n.exp().unwrap().to_vec().unwrap()[0].is_nan());
        assert!(n.to_dtype(DType::F64).unwrap().to_vec_f64().unwrap()[0].is_nan());
    }
}

#[test]
fn doubles_and_integers_become_half_through_f32_as_in_pytorch() {
    // 1 + 2⁻⁸ + 2⁻³⁰ rounds to f32 as 1 + 2⁻⁸ (a bf16 tie, to even: 1);
    // rounded directly it would be 1 + 2⁻⁷. PyTorch goes through f32.
    let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
    // Filled the same way (a fill's value is an f64).
    assert_eq!(
        Tensor::full(&[1], v, DType::BF16)
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![1.0]
    );
    let above = f64::from(1.0f32 + 1.0 / 256.0 + f32::EPSILON); // above the tie in f32
    assert_eq!(
        Tensor::full(&[1], above, DType::BF16)
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![1.0 + 2.0 / 256.0]
    );
    let x = Tensor::from_vec_f64(vec![v], &[1]).unwrap();
    assert_eq!(
        x.to_dtype(DType::BF16).unwrap().to_vec().unwrap(),
        vec![1.0]
    );
    let ids = Tensor::from_vec_i64(vec![257, -3, 1 << 40], &[3]).unwrap();
    // 257 is a bf16 tie between 256 and 258: to even (256).
    assert_eq!(
        ids.to_dtype(DType::BF16).unwrap().to_vec().unwrap(),
        vec![256.0, -3.0, (1u64 << 40) as f32]
    );
    let back = f32s(&[2.75, -2.75, f32::NAN])
        .to_dtype(DType::F16)
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap();
    assert_eq!(back.to_vec_i64().unwrap(), vec![2, -2, 0]);
    // Read back as the element types themselves.
    let b = Tensor::from_vec_bf16(vec![bf16::from_f32(0.1)], &[1]).unwrap();
    assert_eq!(
        b.to_vec_bf16().unwrap()[0].to_bits(),
        bf16::from_f32(0.1).to_bits()
    );
    assert!(b.to_vec_f16().is_err());
    let h = Tensor::from_vec_f16(vec![f16::from_f32(0.1)], &[1]).unwrap();
    assert_eq!(h.to_vec_f16().unwrap()[0], f16::from_f32(0.1));
}

/// Ops of one and two arguments, and reductions, each written once.
type Op = fn(&Tensor, &Tensor) -> Result<Tensor, Error>;
const OPS: &[(&str, Op)] = &[
    ("exp", |a, _| a.exp()),
    ("tanh", |a, _| a.tanh()),
    ("sigmoid", |a, _| a.sigmoid()),
    ("gelu", |a, _| a.gelu()),
    ("add", |a, b| a.add(b)),
    ("mul", |a, b| a.mul(b)),
    ("div", |a, b| a.div(b)),
    ("matmul", |a, b| a.matmul(&b.t()?)),
    ("sum", |a, _| a.sum()),
    ("mean rows", |a, _| a.mean_dims(&[1], false)),
    ("softmax", |a, _| a.softmax(1)),
    ("log_softmax", |a, _| a.log_softmax(0)),
    ("layer_norm", |a, _| a.layer_norm(1, None, None, 1e-5)),
    ("transposed view", |a, b| a.t()?.mul(&b.t()?)),
    ("narrowed view", |a, _| a.narrow(1, 2, 5)?.exp()),
];

fn inputs(d: DType) -> (Tensor, Tensor) {
    let a = Tensor::randn(&[6, 9], DType::F32, 3)
        .unwrap()
        .to_dtype(d)
        .unwrap();
    let b = Tensor::rand(&[6, 9], DType::F32, 4)
        .unwrap()
        .add_scalar(0.5)
        .unwrap()
        .to_dtype(d)
        .unwrap();
    (a, b)
}

#[test]
fn every_op_on_half_tensors_is_its_f32_form_rounded_once() {
    for d in HALVES {
        let (a, b) = inputs(d);
        let (wa, wb) = (
            a.to_dtype(DType::F32).unwrap(),
            b.to_dtype(DType::F32).unwrap(),
        );
        for (name, op) in OPS {
            let got = op(&a, &b).unwrap();
            assert_eq!(got.dtype(), d, "{name} {d:?}");
            let want = op(&wa, &wb).unwrap().to_dtype(d).unwrap();
            assert_eq!(got.shape(), want.shape(), "{name} {d:?}");
            assert_eq!(bits(&got), bits(&want), "{name} {d:?}");
        }
    }
}

#[test]
fn gradients_reach_half_tensors_as_half_tensors_near_the_exact_ones() {
    for d in HALVES {
        let (a, b) = inputs(d);
        let (a, b) = (a.requires_grad(), b.requires_grad());
        // tanh(a·bᵀ) summed with weights, softmax rows, and a view of a.
        let f = |a: &Tensor, b: &Tensor| -> Result<Tensor, Error> {
            let y = a.matmul(&b.t()?)?.tanh()?.softmax(1)?;
            let w = Tensor::arange(36, DType::F32)?
                .mul_scalar(1.0 / 18.0)?
                .add_scalar(-1.0)?
                .to_dtype(y.dtype())?
                .reshape(&[6, 6])?;
            y.mul(&w)?.sum()?.add(&a.narrow(1, 0, 3)?.exp()?.sum()?)
        };
        f(&a, &b).unwrap().backward().unwrap();
        let (ga, gb) = (a.grad().unwrap(), b.grad().unwrap());
        assert_eq!((ga.dtype(), gb.dtype()), (d, d));
        // The exact gradient at the same (half) points, in f64.
        let a64 = a.detach().to_dtype(DType::F64).unwrap().requires_grad();
        let b64 = b.detach().to_dtype(DType::F64).unwrap().requires_grad();
        f(&a64, &b64).unwrap().backward().unwrap();
        // A few roundings of the half type, relative to the largest entry.
        let ulp = if d == DType::BF16 {
            2f64.powi(-8)
        } else {
            2f64.powi(-11)
        };
        for (got, want) in [(ga, a64.grad().unwrap()), (gb, b64.grad().unwrap())] {
            let (g, w) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
            let scale = w.iter().fold(0f64, |m, v| m.max(v.abs()));
            let err = g
                .iter()
                .zip(&w)
                .fold(0f64, |m, (g, w)| m.max((g - w).abs()));
            assert!(
                err <= 8.0 * ulp * scale,
                "{d:?}: error {err:e}, scale {scale:e}"
            );
        }
    }
}

#[test]
fn half_types_mix_with_f32_as_in_pytorch_and_not_with_f64() {
    let x = f32s(&[1.5, 2.0]);
    let b = x.to_dtype(DType::BF16).unwrap();
    let h = x.to_dtype(DType::F16).unwrap();
    assert_eq!(b.add(&x).unwrap().dtype(), DType::F32);
    assert_eq!(b.mul(&h).unwrap().dtype(), DType::F32);
    assert_eq!(b.mul(&h).unwrap().to_vec().unwrap(), vec![2.25, 4.0]);
    let err = b
        .add(&x.to_dtype(DType::F64).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("add") && err.contains("F64"), "{err}");
    // Integer ids index half tables (computed in f32, rounded back).
    let table = Tensor::randn(&[5, 3], DType::F32, 1)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let ids = Tensor::from_vec_i64(vec![4, 0, 4], &[3]).unwrap();
    let rows = table.index_select(0, &ids).unwrap();
    assert_eq!(rows.dtype(), DType::BF16);
    assert_eq!(
        bits(&rows.narrow(0, 0, 1).unwrap()),
        bits(&table.narrow(0, 4, 1).unwrap())
    );
}

#[test]
fn what_has_no_half_form_says_so() {
    let w = Tensor::zeros(&[3], DType::BF16).unwrap().requires_grad();
    w.sum().unwrap().backward().unwrap();
    let config = tenjin::optim::SgdConfig {
        lr: 0.1,
        ..Default::default()
    };
    let err = tenjin::optim::SGD::new(vec![w.clone()], config)
        .err()
        .expect("an optimizer of BF16 parameters is refused")
        .to_string();
    assert!(err.contains("BF16") && err.contains("autocast"), "{err}");
    // (Checkpointed half blocks are `tests/checkpoint.rs`'s.)
}

#[test]
fn half_results_are_bitwise_identical_at_one_two_and_three_threads() {
    let a = Tensor::randn(&[64, 300], DType::F32, 9).unwrap();
    let mut runs = Vec::new();
    for threads in 1..=3 {
        tenjin::jit::set_num_threads(threads);
        let mut run = Vec::new();
        for d in HALVES {
            let x = a.to_dtype(d).unwrap().requires_grad();
            let y = x
                .matmul(&x.t().unwrap())
                .unwrap()
                .softmax(1)
                .unwrap()
                .sum()
                .unwrap();
            y.backward().unwrap();
            run.push((bits(&y), bits(&x.grad().unwrap())));
        }
        runs.push(run);
    }
    tenjin::jit::set_num_threads(2);
    assert!(runs.windows(2).all(|w| w[0] == w[1]));
}

/// The JIT on half tensors equals the reference interpreter on the
/// widened values, rounded once, bit for bit: a user's own index function
/// (a sum, transcendentals, a guard and a strided read).
#[test]
fn the_jit_on_half_tensors_equals_the_interpreter_rounded_once() {
    let src = "f[i; j] = if {i < j} then (tanh (sum{k}_0^6 (a[i; k] * b[2*j; k]))) else (exp (-(a[i; j] ** 2)) / (1 + b[j + i; 3]))";
    let (a, b): (Vec<f32>, Vec<f32>) = (
        (0..5 * 7)
            .map(|k| ((k as f32) * 0.61).sin() * 1.3)
            .collect(),
        (0..14 * 7)
            .map(|k| ((k as f32) * 0.37).cos() * 0.9 + 0.2)
            .collect(),
    );
    let f = tenjin::symbolic::IndexFn::parse(src, &[("a", &[5, 7]), ("b", &[14, 7])]).unwrap();
    for d in HALVES {
        let (ah, bh) = (
            Tensor::from_vec(a.clone(), &[5, 7])
                .unwrap()
                .to_dtype(d)
                .unwrap(),
            Tensor::from_vec(b.clone(), &[14, 7])
                .unwrap()
                .to_dtype(d)
                .unwrap(),
        );
        let jit = tenjin::index_fn(src, &[("a", &ah), ("b", &bh)]).unwrap();
        assert_eq!(jit.dtype(), d);
        let (wa, wb) = (ah.to_vec().unwrap(), bh.to_vec().unwrap());
        let interp = f.eval_f32(&[("a", &wa), ("b", &wb)]).unwrap();
        let want = Tensor::from_vec(interp, jit.shape())
            .unwrap()
            .to_dtype(d)
            .unwrap();
        assert_eq!(bits(&jit), bits(&want), "{d:?}");
    }
}

/// Products of bf16 tensors run as bf16 products with f32 accumulation
/// where the CPU has `avx512_bf16` (forward and both gradients; products
/// of 2²¹ terms or more), their
/// values within one rounding of the f32 product's, the same bits at 1, 2
/// and 3 threads; f16 and mixed products do not.
#[test]
fn products_of_bf16_tensors_run_as_bf16_pairs_where_the_cpu_can() {
    let a = Tensor::randn(&[128, 256], DType::F32, 5).unwrap();
    let b = Tensor::randn(&[256, 96], DType::F32, 6).unwrap();
    let pairs = tenjin::jit::gemm::kernel_name(DType::BF16).is_some();
    let mut runs = Vec::new();
    for threads in 1..=3 {
        tenjin::jit::set_num_threads(threads);
        let (ab, bb) = (
            a.to_dtype(DType::BF16).unwrap().requires_grad(),
            b.to_dtype(DType::BF16).unwrap().requires_grad(),
        );
        let before = tenjin::jit::gemm::bf16_products_run();
        let y = ab.matmul(&bb).unwrap();
        y.mul(&y).unwrap().sum().unwrap().backward().unwrap();
        let ran = tenjin::jit::gemm::bf16_products_run() - before;
        // The product and its two gradients.
        assert_eq!(ran >= 3, pairs, "{ran} bf16 products");
        let want = ab
            .detach()
            .to_dtype(DType::F32)
            .unwrap()
            .matmul(&bb.detach().to_dtype(DType::F32).unwrap())
            .unwrap();
        let (g, w) = (y.to_vec().unwrap(), want.to_vec().unwrap());
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = g
            .iter()
            .zip(&w)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(err <= scale * 2f32.powi(-8), "error {err}, scale {scale}");
        runs.push((
            bits(&y),
            bits(&ab.grad().unwrap()),
            bits(&bb.grad().unwrap()),
        ));
    }
    tenjin::jit::set_num_threads(2);
    assert!(runs.windows(2).all(|w| w[0] == w[1]));
    let before = tenjin::jit::gemm::bf16_products_run();
    let h = a.to_dtype(DType::F16).unwrap();
    h.matmul(&b.to_dtype(DType::F16).unwrap()).unwrap();
    a.to_dtype(DType::BF16).unwrap().matmul(&b).unwrap(); // mixed: f32
    assert_eq!(tenjin::jit::gemm::bf16_products_run(), before);
}
