//! The JIT against the reference interpreter, through the public API: every
//! case of the shared catalogue, forward and every derivative, in f64
//! (relative error < 1e-12, scaled by max |value| ∨ 1) and f32 (< 1e-5), at
//! 1, 2 and 3 threads with bitwise equal results; odd, size-1 and empty
//! shapes; the paper's example; bad input; the kernel cache.
//!
//! Every test holds `SERIAL`: thread counts, the parallel threshold and the
//! cache statistics are process-wide.

mod common;

use common::{cases, random_inputs, random_vec, Inputs};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::{Arc, Mutex, MutexGuard};
use tenjin::jit::{self, MissReason};
use tenjin::symbolic::IndexFn;
use tenjin::DType;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Max |got − want| / (max |want| ∨ 1).
fn scaled_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g == w || (g.is_nan() && w.is_nan()) {
                0.0
            } else {
                (g - w).abs() / scale
            }
        })
        .fold(0.0, f64::max)
}

fn named(inputs: &Inputs) -> Vec<(&str, &[f64])> {
    inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect()
}

/// Checks `f` on `inputs`: f64 and f32 against the interpreter, at 1, 2 and
/// 3 threads, with bitwise equal results across thread counts.
fn check(f: &IndexFn, inputs: &Inputs) {
    let want = f
        .eval_f64(&named(inputs))
        .unwrap_or_else(|e| panic!("interpreter on {f}: {e}"));
    let inputs32: Vec<(String, Vec<f32>)> = inputs
        .iter()
        .map(|(n, d)| (n.clone(), d.iter().map(|&x| x as f32).collect()))
        .collect();
    let named32: Vec<(&str, &[f32])> = inputs32
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    let want32: Vec<f64> = f
        .eval_f32(&named32)
        .unwrap()
        .iter()
        .map(|&x| x as f64)
        .collect();
    let k64 = jit::compile(f, DType::F64).unwrap_or_else(|e| panic!("compile {f}: {e}"));
    let k32 = jit::compile(f, DType::F32).unwrap_or_else(|e| panic!("compile {f}: {e}"));
    let mut first: Option<(Vec<f64>, Vec<f32>)> = None;
    for threads in [1, 2, 3] {
        jit::set_num_threads(threads);
        let got = k64.run_f64(&named(inputs)).unwrap();
        let err = scaled_error(&got, &want);
        assert!(
            err < 1e-12,
            "f64 {f} at {threads} threads: error {err:e}\n got  {got:?}\n want {want:?}\n{k64}"
        );
        let got32 = k32.run_f32(&named32).unwrap();
        let wide: Vec<f64> = got32.iter().map(|&x| x as f64).collect();
        let err = scaled_error(&wide, &want32);
        assert!(
            err < 1e-5,
            "f32 {f} at {threads} threads: error {err:e}\n got  {got32:?}\n want {want32:?}\n{k32}"
        );
        match &first {
            None => first = Some((got, got32)),
            Some((g64, g32)) => {
                let same64 = common::same_bits(g64, &got);
                let same32 = common::same_bits(g32, &got32);
                assert!(same64 && same32, "{f}: results differ at {threads} threads");
            }
        }
    }
    jit::set_num_threads(1);
}

/// `f` and each derivative, on random inputs.
fn check_with_derivatives(f: &IndexFn, seed: u64, positive: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let inputs = random_inputs(f, &mut rng, positive);
    check(f, &inputs);
    for a in f.args() {
        let d = f
            .derive(&a.name)
            .unwrap_or_else(|e| panic!("derive {f} by {}: {e}", a.name));
        let mut with_grad = inputs.clone();
        let n_out: usize = f.output_shape().iter().product();
        with_grad.push((format!("d{}", f.name()), random_vec(&mut rng, n_out, false)));
        check(&d, &with_grad);
    }
}

/// Splits even the smallest kernels across threads while it lives.
struct FineSplit;

impl FineSplit {
    fn new() -> FineSplit {
        jit::set_min_parallel_work(0);
        FineSplit
    }
}

impl Drop for FineSplit {
    fn drop(&mut self) {
        jit::set_min_parallel_work(jit::DEFAULT_MIN_PARALLEL_WORK);
        jit::set_num_threads(1);
    }
}

#[test]
fn every_case_and_derivative_matches_the_interpreter() {
    let _s = serial();
    let _split = FineSplit::new();
    for (k, (name, case)) in cases::all().into_iter().enumerate() {
        let f = case.parse();
        eprintln!("{name}");
        check_with_derivatives(&f, 100 + k as u64, case.positive);
    }
}

const PAPER: &str =
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";

#[test]
fn paper_example_and_its_derivatives() {
    let _s = serial();
    let _split = FineSplit::new();
    let f = IndexFn::parse(
        PAPER,
        &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
    )
    .unwrap();
    check_with_derivatives(&f, 1, false);
    // Larger, with odd sizes, through the default threshold too.
    let big = "f[i; j] = exp (-sum{k}_0^8 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";
    let g = IndexFn::parse(
        big,
        &[
            ("a", &[37, 9]),
            ("b", &[29, 9]),
            ("c", &[37, 37]),
            ("d", &[45]),
        ],
    )
    .unwrap();
    check_with_derivatives(&g, 2, false);
}

#[test]
fn odd_size_one_and_empty_shapes() {
    let _s = serial();
    let _split = FineSplit::new();
    let chain = "f[i] = tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))";
    for n in [0usize, 1, 2, 7, 33, 1000] {
        let f = IndexFn::parse(chain, &[("x", &[n][..])]).unwrap();
        check_with_derivatives(&f, n as u64, false);
    }
    let outer = "f[i; j] = x[i; j] * y[j] + exp (x[i; j]) - y[j] ** 3";
    for (m, n) in [(1, 5), (5, 1), (0, 3), (3, 0), (1, 1), (7, 33), (33, 7)] {
        let f = IndexFn::parse(outer, &[("x", &[m, n][..]), ("y", &[n][..])]).unwrap();
        check_with_derivatives(&f, (m * 100 + n) as u64, false);
    }
    // Transposed, strided and broadcast reads with odd sizes.
    for (m, n) in [(1, 1), (3, 5), (9, 4), (17, 33)] {
        let t = "f[i; j] = x[j; 2*i] * z[i] + sum{k}_0^2 (x[j; 2*i + k - 2*i] * z[i])";
        let f = IndexFn::parse_with_sizes(
            t,
            &[("x", &[n, 2 * m + 2][..]), ("z", &[m][..])],
            &[("i", m), ("j", n)],
        )
        .unwrap();
        check_with_derivatives(&f, (m + n) as u64, false);
    }
    // Matmul with odd sizes, and a reduction over an empty range.
    for (m, k, n) in [(1, 1, 1), (7, 33, 5), (5, 1, 9), (16, 17, 3)] {
        let src = format!("f[i; j] = sum{{k}}_0^{} (a[i; k] * b[k; j])", k - 1);
        let f = IndexFn::parse(&src, &[("a", &[m, k][..]), ("b", &[k, n][..])]).unwrap();
        check_with_derivatives(&f, (m * k * n) as u64, false);
    }
    let empty = IndexFn::parse_with_sizes(
        "f[i] = sum{k}_0^(-1) (x[i; k]) + 1",
        &[("x", &[3, 0][..])],
        &[("i", 3)],
    )
    .unwrap();
    check(&empty, &vec![("x".to_string(), vec![])]);
}

#[test]
fn reductions_and_selects_on_larger_inputs() {
    let _s = serial();
    let _split = FineSplit::new();
    let srcs = [
        "f[i] = argmax{k}_0^30 (x[i; k])",
        "f[i] = argmin{k}_0^30 (x[i; k])",
        "f[i] = max{k}_0^30 (x[i; k]) - min{k}_0^30 (x[i; k])",
        "f[i; j] = if {x[i; j] > 0} then (x[i; j]) else (0.1 * x[i; j])",
        "f[i; j] = if {i - j >= 0} then (x[i; j]) else (-x[i; j])",
        "f[i; j] = if {1/3*(i + j) is int} then (x[i; j]) else (idx(i - j))",
    ];
    for (k, src) in srcs.iter().enumerate() {
        let f = IndexFn::parse(src, &[("x", &[23, 31][..])]).unwrap();
        let mut rng = StdRng::seed_from_u64(k as u64);
        let inputs = random_inputs(&f, &mut rng, false);
        check(&f, &inputs);
    }
}

/// Output loops reading with a stride (a pool's windows at stride 2, a
/// flipped read, a stride past the vector) run as vector code whose lanes
/// load one at a time; the results are the interpreter's, at every
/// thread count.
#[test]
fn strided_reads_in_vector_loops_match_the_interpreter() {
    let _s = serial();
    type Case<'a> = (&'a str, &'a [usize], &'a [(&'a str, usize)]);
    let cases: [Case; 4] = [
        (
            "f[a; t; u] = max{i}_0^2 (max{j}_0^2 (x[a; 2*t + i; 2*u + j]))",
            &[3, 33, 37],
            &[("t", 16), ("u", 18)],
        ),
        ("f[i; j] = x[i; 40 - j] * 2", &[5, 41], &[("j", 41)]),
        (
            "f[i; j] = x[i; 3*j + 1] + x[i; 3*j]",
            &[4, 100],
            &[("j", 33)],
        ),
        (
            "f[i; j] = sum{k}_0^3 (if {2*j + k - 1 >= 0} then (x[i; 2*j + k - 1]) else (0))",
            &[4, 64],
            &[("j", 31)],
        ),
    ];
    for (k, (src, shape, sizes)) in cases.iter().enumerate() {
        let f = IndexFn::parse_with_sizes(src, &[("x", shape)], sizes).unwrap();
        let k32 = tenjin::planner::passes::loop_kernel(
            &f,
            DType::F32,
            tenjin::planner::route::Target::Cpu,
            tenjin::planner::passes::LoopRole::Whole,
        )
        .unwrap();
        assert!(
            k32.to_string().contains("(vector)"),
            "{src}: not vectorised\n{k32}"
        );
        let mut rng = StdRng::seed_from_u64(100 + k as u64);
        let inputs = random_inputs(&f, &mut rng, false);
        check(&f, &inputs);
    }
}

/// Derivatives of strided reads (a strided convolution's or a pool's
/// input gradient) sum one or two terms by the parity of their index, with
/// bounds that divide by the stride: their output loops are split by
/// residue (`planner::residues`), each phase's sliding sum shifted, and the
/// interior runs as vector code with strided stores. Every derivative
/// matches the interpreter (f64 to 1e-12, f32 to its rounding), bitwise
/// equal at 1, 2 and 3 threads, at odd and even lengths.
#[test]
fn strided_derivatives_split_by_residue_match_the_interpreter() {
    let _s = serial();
    let _split = FineSplit::new();
    // (The pool's derivative recomputes the window's argmax inline, its
    // padding guard on the shifted sum's index: not vectorised here; the
    // planner cuts the argmax as a stage of its own.)
    let bodies: [(&str, usize, usize); 4] = [
        ("y[t] = sum{k}_0^2 (x[2*t + k] * w[k])", 2, 3),
        ("y[t] = sum{k}_0^4 (x[3*t + k] * w[k])", 3, 5),
        (
            "y[i; t] = max{k}_0^2 (if {2*t + k - 1 >= 0} then (x[i; 2*t + k - 1]) else (-inf))",
            2,
            3,
        ),
        (
            "y[i; t; u] = sum{k}_0^2 (sum{l}_0^2 (x[i; 2*t + k; 2*u + l] * w[k; l]))",
            2,
            3,
        ),
    ];
    for (body, stride, taps) in bodies {
        for n in [1usize, 6, 21] {
            let len = stride * (n - 1) + taps;
            type Shapes<'a> = Vec<(&'a str, Vec<usize>)>;
            let (args, sizes): (Shapes, Vec<(&str, usize)>) = if body.contains("w[k; l]") {
                (
                    vec![("x", vec![2, len, len]), ("w", vec![3, 3])],
                    vec![("t", n), ("u", n)],
                )
            } else if body.contains("x[i;") {
                (vec![("x", vec![2, len])], vec![("i", 2), ("t", n)])
            } else {
                (vec![("x", vec![len]), ("w", vec![taps])], vec![("t", n)])
            };
            let args: Vec<(&str, &[usize])> = args.iter().map(|(a, s)| (*a, &s[..])).collect();
            let f = IndexFn::parse_with_sizes(body, &args, &sizes).unwrap();
            let dx = f.derive("x").unwrap();
            let k32 = tenjin::planner::passes::loop_kernel(
                &dx,
                DType::F32,
                tenjin::planner::route::Target::Cpu,
                tenjin::planner::passes::LoopRole::Whole,
            )
            .unwrap();
            // No sum divides any more (the loops' own `[start, end)` may).
            let text = k32.to_string();
            let mut sums = text
                .lines()
                .filter(|l| l.contains("= sum") || l.contains("= max"));
            assert!(
                sums.all(|l| !l.contains(&format!("/{stride})"))),
                "{dx}: divisions left\n{text}"
            );
            if n >= 21 && !body.contains("max{") {
                assert!(text.contains("(vector)"), "{dx}: not vectorised\n{text}");
            }
            check_with_derivatives(&f, n as u64, false);
        }
    }
}

#[test]
fn bad_buffers_are_rejected_before_running() {
    let _s = serial();
    let f = IndexFn::parse("f[i] = x[i] + y[i]", &[("x", &[3][..]), ("y", &[3][..])]).unwrap();
    let k = jit::compile(&f, DType::F64).unwrap();
    let mut out = vec![-7.0; 3];
    let err = k
        .run_into_f64(&[&[1., 2., 3.], &[1., 2.]], &mut out)
        .unwrap_err();
    assert!(err.to_string().contains("`y`"), "{err}");
    assert_eq!(out, vec![-7.0; 3], "nothing may run before the checks");
    let err = k.run_into_f64(&[&[1., 2., 3.]], &mut out).unwrap_err();
    assert!(err.to_string().contains("1 buffers given for 2"), "{err}");
    assert!(k
        .run_into_f64(&[&[1., 2., 3.], &[1., 2., 3.]], &mut out[..2])
        .is_err());
    let err = k
        .run_f64(&[("x", &[1., 2., 3.][..]), ("z", &[1., 2., 3.][..])])
        .unwrap_err();
    assert!(err.to_string().contains("`z` is not an argument"), "{err}");
    let err = k.run_f64(&[("x", &[1., 2., 3.][..])]).unwrap_err();
    assert!(
        err.to_string().contains("no data given for argument `y`"),
        "{err}"
    );
    let mut out32 = vec![0f32; 3];
    let err = k
        .run_into_f32(&[&[1., 2., 3.], &[1., 2., 3.]], &mut out32)
        .unwrap_err();
    assert!(err.to_string().contains("compiled for F64"), "{err}");
    assert_eq!(out, vec![-7.0; 3]);
}

#[test]
fn cache_hits_misses_reasons_and_clear() {
    let _s = serial();
    jit::clear();
    let src = "f[i] = x[i] * 3 + sin x[i]";
    let f = IndexFn::parse(src, &[("x", &[5][..])]).unwrap();
    let s0 = jit::stats();
    let k1 = jit::compile(&f, DType::F64).unwrap();
    let s1 = jit::stats();
    assert_eq!(s1.misses - s0.misses, 1);
    assert_eq!(s1.kernels_compiled - s0.kernels_compiled, 1);
    assert_eq!(
        s1.misses_by(MissReason::NewExpression) - s0.misses_by(MissReason::NewExpression),
        1
    );
    assert!(s1.compile_time > s0.compile_time);

    let k2 = jit::compile(&f, DType::F64).unwrap();
    let renamed = IndexFn::parse("f[q] = x[q] * 3 + sin x[q]", &[("x", &[5][..])]).unwrap();
    let k3 = jit::compile(&renamed, DType::F64).unwrap();
    let s2 = jit::stats();
    assert!(Arc::ptr_eq(&k1, &k2) && Arc::ptr_eq(&k1, &k3));
    assert_eq!(s2.hits - s1.hits, 2);
    assert_eq!(s2.kernels_compiled, s1.kernels_compiled);

    let wider = IndexFn::parse(src, &[("x", &[6][..])]).unwrap();
    jit::compile(&wider, DType::F64).unwrap();
    let s3 = jit::stats();
    assert_eq!(
        s3.misses_by(MissReason::NewShapes) - s2.misses_by(MissReason::NewShapes),
        1
    );

    jit::compile(&f, DType::F32).unwrap();
    let s4 = jit::stats();
    assert_eq!(
        s4.misses_by(MissReason::NewDtype) - s3.misses_by(MissReason::NewDtype),
        1
    );
    assert_eq!(s4.cached, 3);

    jit::clear();
    assert_eq!(jit::stats().cached, 0);
    // A kernel still held keeps working after `clear`.
    assert_eq!(k1.run_f64(&[("x", &[0.; 5][..])]).unwrap(), vec![0.; 5]);
    jit::compile(&f, DType::F64).unwrap();
    let s5 = jit::stats();
    assert_eq!(
        s5.misses_by(MissReason::NewExpression) - s4.misses_by(MissReason::NewExpression),
        1
    );

    // Eviction keeps the most recently used kernels.
    jit::set_cache_capacity(2);
    let g = IndexFn::parse("g[i] = x[i] - 1", &[("x", &[5][..])]).unwrap();
    let h = IndexFn::parse("h[i] = x[i] - 2", &[("x", &[5][..])]).unwrap();
    jit::compile(&g, DType::F64).unwrap();
    jit::compile(&f, DType::F64).unwrap(); // touch f: g is now the oldest
    jit::compile(&h, DType::F64).unwrap();
    let s6 = jit::stats();
    assert_eq!(s6.evictions - s5.evictions, 1);
    assert_eq!(s6.cached, 2);
    jit::compile(&f, DType::F64).unwrap();
    assert_eq!(jit::stats().hits, s6.hits + 1, "f should have survived");
    jit::set_cache_capacity(4096);
    jit::clear();
}

#[test]
fn kernels_print_their_loop_nest() {
    let _s = serial();
    let f = IndexFn::parse(
        PAPER,
        &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
    )
    .unwrap();
    let k = jit::compile(&f, DType::F32).unwrap();
    let text = k.to_string();
    assert!(text.contains("sum v"), "{text}");
    assert!(text.contains("load c["), "{text}");
}

/// Element-wise bodies whose innermost loop runs as f32x4 code, with
/// whether their inputs must be positive.
const VECTOR_BODIES: [(&str, bool); 9] = [
    (
        "tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))",
        false,
    ),
    ("log x[i] + log10 (y[i]) * sqrt (x[i]) - x[i] ** (-3)", true),
    (
        "max (x[i], y[i]) - min (x[i], 0.5) * sgn (y[i]) + abs (x[i])",
        false,
    ),
    (
        "if {x[i] > y[i]} then (exp x[i]) else (0.1 * y[i] - tanh y[i])",
        false,
    ),
    ("sin x[i] * cos (y[i]) + x[i] ** y[i]", true),
    ("x[i] * y[0] + exp (y[2]) * sigmoid x[i]", false),
    ("exp (-x[i] * x[i]) / (1 + y[i] * y[i])", false),
    (
        "if {x[i] >= 0} then (x[i] * y[i]) else (0.01 * x[i])",
        false,
    ),
    ("sigmoid (x[i] * 8) - tanh (y[i] * 8)", false),
];

/// Inputs spread wide enough to reach every branch of the vector
/// functions: (-12, 12), or (1e-3, 40) when positive.
fn wide_inputs(f: &IndexFn, seed: u64, positive: bool) -> Inputs {
    let mut rng = StdRng::seed_from_u64(seed);
    random_inputs(f, &mut rng, positive)
        .into_iter()
        .map(|(n, d)| {
            let d = d
                .into_iter()
                .map(|x| {
                    if positive {
                        (x - 0.5) * 40.0 + 1e-3
                    } else {
                        x * 12.0
                    }
                })
                .collect();
            (n, d)
        })
        .collect()
}

#[test]
fn vectorised_kernels_match_the_interpreter_at_every_length() {
    let _s = serial();
    let _split = FineSplit::new();
    for (b, &(body, positive)) in VECTOR_BODIES.iter().enumerate() {
        for n in 0..=70usize {
            let src = format!("f[i] = {body}");
            let m = n.max(3);
            let f = IndexFn::parse(&src, &[("x", &[n][..]), ("y", &[m][..])])
                .or_else(|_| IndexFn::parse(&src, &[("x", &[n][..]), ("y", &[n][..])]))
                .unwrap_or_else(|e| panic!("{src}: {e}"));
            if n > 0 {
                let k = jit::compile(&f, DType::F32).unwrap();
                assert!(k.is_vectorized(), "not vectorised: {k}");
            }
            check(&f, &wide_inputs(&f, (b * 100 + n) as u64, positive));
            // Derivatives (element-wise too) on the inputs of the tests above.
            if n % 7 == 3 {
                check_with_derivatives(&f, (b * 1000 + n) as u64, positive);
            }
        }
    }
}

#[test]
fn vectorised_kernels_on_large_inputs_at_odd_offsets() {
    let _s = serial();
    let _split = FineSplit::new();
    let mut rng = StdRng::seed_from_u64(77);
    for (b, &(body, positive)) in VECTOR_BODIES.iter().enumerate().step_by(2) {
        use rand::Rng;
        let n = (1usize << 18) + rng.gen_range(0..64usize);
        let src = format!("f[i] = {body}");
        let f = IndexFn::parse(&src, &[("x", &[n][..]), ("y", &[n][..])])
            .unwrap_or_else(|e| panic!("{src}: {e}"));
        check(&f, &wide_inputs(&f, b as u64, positive));
    }
    // A 2-D kernel: each row is a vector loop with a tail, rows split
    // across threads; a broadcast along i.
    for (m, n) in [(3, 1000), (67, 35), (1000, 17), (5, 16)] {
        let f = IndexFn::parse(
            "f[i; j] = x[i; j] * y[j] + exp (x[i; j]) - tanh (y[j]) ** 3",
            &[("x", &[m, n][..]), ("y", &[n][..])],
        )
        .unwrap();
        assert!(jit::compile(&f, DType::F32).unwrap().is_vectorized());
        check_with_derivatives(&f, (m * n) as u64, false);
        // A guard invariant in the inner loop, with loads in its branches.
        let g = IndexFn::parse(
            "f[i; j] = if {i - 1 >= 0} then (x[i; j] * 2) else (exp x[i; j])",
            &[("x", &[m, n][..])],
        )
        .unwrap();
        let k = jit::compile(&g, DType::F32).unwrap();
        assert!(k.is_vectorized(), "{k}");
        check(&g, &wide_inputs(&g, m as u64, false));
    }
}

#[test]
fn f32_loops_are_vectorised_where_their_lanes_can_load() {
    let _s = serial();
    const CHAIN: &str = "f[i] = tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))";
    let chain = IndexFn::parse(CHAIN, &[("x", &[1 << 10][..])]).unwrap();
    assert!(jit::compile(&chain, DType::F32).unwrap().is_vectorized());
    assert!(!jit::compile(&chain, DType::F64).unwrap().is_vectorized());
    let back = chain.derive("x").unwrap();
    let k = jit::compile(&back, DType::F32).unwrap();
    assert!(k.is_vectorized(), "the chain's derivative: {k}");
    // Reads with a stride along the inner loop (a transpose, stride 3; a
    // reduction reading strided memory along it) vectorise too: their
    // lanes load one at a time.
    for (src, shape) in [
        ("f[i; j] = exp (x[j; i])", [3usize, 3]),
        ("f[i; j] = sum{k}_0^2 (x[k; i] * x[j; k])", [3, 3]),
    ] {
        let f = IndexFn::parse(src, &[("x", &shape[..])]).unwrap();
        let k = jit::compile(&f, DType::F32).unwrap();
        assert!(k.is_vectorized(), "{src} should be vectorised: {k}");
    }
    let no = [
        // A guard on the inner index protecting loads, with no interior
        // left to peel (`i = 4` only).
        (
            "f[i] = if {i - 4 = 0} then (x[i]) else (y[i])",
            vec![("x", vec![9usize]), ("y", vec![9])],
        ),
        // A sum reading strided memory along its own index (only an
        // output loop's lanes load one at a time), in an output loop whose
        // reads are further apart than `MAX_STRIDE`.
        ("f[i] = sum{k}_0^99 (x[i; 2*k])", vec![("x", vec![2, 200])]),
    ];
    for (src, args) in no {
        let args: Vec<(&str, &[usize])> = args.iter().map(|(n, s)| (*n, s.as_slice())).collect();
        let f = IndexFn::parse(src, &args).unwrap();
        let k = jit::compile(&f, DType::F32).unwrap();
        assert!(!k.is_vectorized(), "{src} should stay scalar: {k}");
    }
}

/// Reduction bounds that depend on the output index (the input gradient of
/// a convolution, a causal window) are split off: scalar boundary
/// iterations, a vectorised interior; every length, every thread count.
#[test]
fn loops_with_index_dependent_sum_bounds_vectorise_their_interior() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        // The input gradient of a 1-D convolution (T outputs, K taps).
        "f[c; s] = sum{k}_(max [0; s - (T1)])^(min [(K1); s]) (sum{o}_0^1 (dy[o; s - k] * w[o; c; k]))",
        // A causal window: only the lower bound depends on s.
        "f[c; s] = sum{k}_(max [0; s - 3])^(min [s; (T1)]) (dy[0; k] * w[0; c; 0])",
        // A reversed dependence: the upper bound falls with s.
        "f[c; s] = sum{k}_0^(min [(K1); (T1) - s]) (dy[1; s + k] * 2)",
    ];
    for body in bodies {
        for (t, k) in [(1usize, 1usize), (3, 2), (9, 5), (40, 3), (7, 9)] {
            let src = body
                .replace("(T1)", &format!("({})", t as i64 - 1))
                .replace("(K1)", &format!("({})", k as i64 - 1));
            let n = t + k - 1;
            let f = IndexFn::parse_with_sizes(
                &src,
                &[("dy", &[2, t][..]), ("w", &[2, 3, k][..])],
                &[("c", 3), ("s", n)],
            )
            .unwrap_or_else(|e| panic!("{src}: {e}"));
            let kern = jit::compile(&f, DType::F32).unwrap();
            if n >= 8 {
                assert!(kern.is_vectorized(), "{src}: {kern}");
            }
            let mut rng = StdRng::seed_from_u64((t * 10 + k) as u64);
            check(&f, &random_inputs(&f, &mut rng, false));
        }
    }
}

/// Guards on the inner index (the zero padding of an im2col copy, a
/// causal mask) are peeled like dependent sum bounds: scalar boundary
/// iterations with the guard, a vectorised interior where it holds; every
/// length, every thread count.
#[test]
fn guards_on_the_inner_index_vectorise_their_interior() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        // im2col of a zero-padded row: taps q, positions j.
        "f[q; j] = if {j + q - 1 >= 0} then (if {(N) - j - q >= 0} then (x[0; j + q - 1]) else (0)) else (0)",
        // A strict and a non-strict guard, a shifted read.
        "f[q; j] = if {j > q} then (if {j <= (N) - 1} then (x[1; j - q] * 2) else (-1)) else (x[0; q])",
    ];
    for body in bodies {
        for n in [1usize, 2, 7, 9, 33] {
            let src = body.replace("(N)", &format!("({n})"));
            let f =
                IndexFn::parse_with_sizes(&src, &[("x", &[2, n + 3][..])], &[("q", 3), ("j", n)])
                    .unwrap_or_else(|e| panic!("{src}: {e}"));
            let kern = jit::compile(&f, DType::F32).unwrap();
            if n >= 9 {
                assert!(kern.is_vectorized(), "{src}: {kern}");
            }
            let mut rng = StdRng::seed_from_u64(n as u64);
            check(&f, &random_inputs(&f, &mut rng, false));
        }
    }
}

/// A guard on an outer index (concatenation along rows, a stacked
/// update's row selector) is a branch all lanes take alike: the inner loop
/// still runs as vector code, loads under the guard included.
#[test]
fn guards_on_outer_indices_keep_the_inner_loop_vectorised() {
    let _s = serial();
    let _split = FineSplit::new();
    for (src, args, sizes) in [
        (
            "f[i; j] = if {i - 2 >= 0} then (x[i - 2; j] * 2) else (y[i; j])",
            vec![("x", [3usize, 21]), ("y", [2, 21])],
            vec![("i", 5usize)],
        ),
        (
            "f[r; j] = if {r = 0} then (s[0; j] - s[1; j] * g[0; j]) else (s[1; j] * 0.9 + g[0; j])",
            vec![("s", [2, 37]), ("g", [1, 37])],
            vec![("r", 2)],
        ),
    ] {
        let args: Vec<(&str, &[usize])> = args.iter().map(|(n, s)| (*n, &s[..])).collect();
        let f = IndexFn::parse_with_sizes(src, &args, &sizes).unwrap();
        let k = jit::compile(&f, DType::F32).unwrap();
        assert!(k.is_vectorized(), "{src}: {k}");
        let mut rng = StdRng::seed_from_u64(3);
        check(&f, &random_inputs(&f, &mut rng, false));
    }
}

/// An argmax or argmin inside a vectorised output loop (a pool's window,
/// its padding guard on the inner index peeled off) runs per lane with
/// its own index and best value: the interpreter's first index of a
/// strictly better value, a NaN better than any number, ties and −∞
/// included, at every length and thread count.
#[test]
fn argmax_and_argmin_run_per_lane_in_vector_loops() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        "f[i; j] = argmax{k}_0^2 (if {2*j + k - 1 >= 0} then (x[i; 2*j + k - 1]) else (-inf))",
        "f[i; j] = argmin{k}_0^2 (x[i; 2*j + k])",
        "f[i; j] = argmax{k}_0^2 (if {2*j + k - 1 >= 0} then (max{l}_0^1 (x[l; 2*j + k - 1] * (i + 1))) else (-inf))",
    ];
    for body in bodies {
        for n in [1usize, 5, 9, 33] {
            let sizes = [("i", 2), ("j", n)];
            let f = IndexFn::parse_with_sizes(body, &[("x", &[2, 2 * n + 2][..])], &sizes)
                .unwrap_or_else(|e| panic!("{body}: {e}"));
            let kern = jit::compile(&f, DType::F32).unwrap();
            if n >= 9 {
                assert!(kern.is_vectorized(), "{body}: {kern}");
            }
            // Few distinct values (ties in most windows), a NaN, −∞.
            let mut rng = StdRng::seed_from_u64(n as u64);
            let mut inputs = random_inputs(&f, &mut rng, false);
            for (i, v) in inputs[0].1.iter_mut().enumerate() {
                *v = match i % 11 {
                    3 => f64::NAN,
                    7 => f64::NEG_INFINITY,
                    _ => (*v * 2.0).round(),
                };
            }
            check(&f, &inputs);
        }
    }
}

/// Reductions inside a contiguous output loop whose own loads are strided
/// (column sums `Σ_i x[i; j]`, a bias gradient; max/min over a column; a
/// small matmul) run with one accumulator per lane in index order: the
/// same bits as the scalar loop, for every length, strip and thread count.
#[test]
fn strided_reductions_run_per_lane_in_contiguous_output_loops() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        "f[j] = sum{i}_0^(N) (x[i; j])",
        "f[j] = max{i}_0^(N) (x[i; j] * 2)",
        "f[j] = min{i}_0^(N) (x[i; j]) + sum{i}_0^(N) (if {i - 1 >= 0} then (x[i; j]) else (0))",
        "f[i; j] = sum{k}_0^(N) (y[k; i] * x[k; j])",
    ];
    for body in bodies {
        for n in [0usize, 1, 3, 7, 33] {
            let src = body.replace("(N)", &format!("({})", n as i64 - 1));
            let (m, w) = (3, 21); // 21 columns: 16 + 4 + 1 lanes
            let f = IndexFn::parse_with_sizes(
                &src,
                &[("x", &[n, w][..]), ("y", &[n, m][..])],
                &[("i", m), ("j", w)][usize::from(!src.starts_with("f[i;"))..],
            )
            .unwrap_or_else(|e| panic!("{src}: {e}"));
            let k = jit::compile(&f, DType::F32).unwrap();
            assert!(n == 0 || k.is_vectorized(), "{src}: {k}");
            let mut rng = StdRng::seed_from_u64(n as u64);
            let inputs = random_inputs(&f, &mut rng, false);
            check(&f, &inputs);
            if body == bodies[0] {
                // The column sum is the scalar loop's, bit for bit: each
                // lane adds its column in index order, in f32.
                let x: Vec<f32> = inputs[0].1.iter().map(|&v| v as f32).collect();
                let got = k
                    .run_f32(&[("x", &x[..]), ("y", &vec![0f32; n * m][..])])
                    .unwrap();
                for (j, g) in got.iter().enumerate() {
                    let want = (0..n).fold(0f32, |acc, i| acc + x[i * w + j]);
                    assert_eq!(g.to_bits(), want.to_bits(), "{src}: column {j}");
                }
            }
        }
    }
}

/// Sums whose reduction loop reads contiguous memory run as f32x4 code in
/// a fixed order: every range length from 0 to 40, constant and dependent
/// bounds, loads broadcast along an output index, and a guard invariant in
/// the reduction; within tolerance of the interpreter and bitwise equal
/// across thread counts (`check`).
#[test]
fn contiguous_f32_sums_are_vectorised_at_every_length() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        // A row sum.
        ("f[i] = sum{k}_0^(N) (x[i; k])", 1usize),
        // A dependent lower bound; y broadcast along i.
        ("f[i] = sum{k}_(i)^(N) (x[i; k] * y[k] + exp (y[k]))", 1),
        // Two output indices, not a contraction; z[i] invariant in k.
        (
            "f[i; j] = sum{k}_0^(N) ((x[i; k] - x[j; k]) ** 2 * z[i] + tanh y[k])",
            1,
        ),
        // A guard invariant in k, and a value guard, without loads inside.
        (
            "f[i] = sum{k}_0^(N) (if {i - 1 >= 0} then (x[i; k] * 2) else (y[k]) + max (x[i; k], 0))",
            1,
        ),
        // A dependent upper bound.
        ("f[i] = sum{k}_0^(N - i) (x[i; k] * y[k])", 0),
    ];
    for (b, &(body, min_len)) in bodies.iter().enumerate() {
        for n in 0..=40usize {
            let src = body
                .replace("(N)", &format!("({})", n as i64 - 1))
                .replace("(N - i)", &format!("({} - i)", n as i64 - 1));
            let m = 5;
            let sizes = [("i", m), ("j", m)];
            let f = IndexFn::parse_with_sizes(
                &src,
                &[("x", &[m, n][..]), ("y", &[n][..]), ("z", &[m][..])],
                &sizes[..if src.contains("f[i; j]") { 2 } else { 1 }],
            )
            .unwrap_or_else(|e| panic!("{src}: {e}"));
            let k = jit::compile(&f, DType::F32).unwrap();
            let loop_ok = jit::compile(&f, DType::F64)
                .unwrap()
                .vectorized_reductions()
                == 0;
            assert!(loop_ok, "f64 sums stay scalar: {src}");
            if n >= 4 + min_len {
                assert!(
                    k.vectorized_reductions() >= 1,
                    "not vectorised at n = {n}: {k}"
                );
                assert!(k.is_vectorized());
            }
            let mut rng = StdRng::seed_from_u64((b * 100 + n) as u64);
            let inputs = random_inputs(&f, &mut rng, false);
            check(&f, &inputs);
        }
    }
}

#[test]
fn the_paper_function_sums_vectorised_in_f32() {
    let _s = serial();
    let _split = FineSplit::new();
    let src = "f[i; j] = exp (-sum{k}_0^36 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";
    let f = IndexFn::parse(
        src,
        &[
            ("a", &[17, 37]),
            ("b", &[17, 37]),
            ("c", &[17, 17]),
            ("d", &[53]),
        ],
    )
    .unwrap();
    let k = jit::compile(&f, DType::F32).unwrap();
    assert_eq!(k.vectorized_reductions(), 1, "{k}");
    // Small values, so that exp(-sum) is not 0 everywhere.
    let mut rng = StdRng::seed_from_u64(17);
    let inputs: Inputs = random_inputs(&f, &mut rng, false)
        .into_iter()
        .map(|(n, d)| (n, d.into_iter().map(|x| x * 0.2).collect()))
        .collect();
    check(&f, &inputs);
    check_with_derivatives(&f, 37, false);
    // A strided sum (a transpose along k) stays scalar.
    let t = IndexFn::parse("f[i] = sum{k}_0^8 (exp (x[k; i]))", &[("x", &[9, 9][..])]).unwrap();
    assert_eq!(
        jit::compile(&t, DType::F32)
            .unwrap()
            .vectorized_reductions(),
        0
    );
}

/// An index used as a number may vary along the vectorised loop: each lane
/// converts its own value (the softmax derivative compares the column with
/// the row's argmax), at every length and thread count.
#[test]
fn index_values_varying_along_the_vector_loop() {
    let _s = serial();
    let _split = FineSplit::new();
    let bodies = [
        "f[i; j] = x[i; j] * j - i",
        "f[i; j] = if {idx(j) = argmax{m}_0^(N) (x[i; m])} then (x[i; j]) else (idx(2 * j - 3))",
    ];
    for body in bodies {
        for n in [1usize, 3, 4, 5, 17, 21, 40] {
            let src = body.replace("(N)", &format!("({})", n as i64 - 1));
            let f = IndexFn::parse(&src, &[("x", &[3, n][..])])
                .unwrap_or_else(|e| panic!("{src}: {e}"));
            let k = jit::compile(&f, DType::F32).unwrap();
            assert!(k.is_vectorized(), "{src}: {k}");
            let mut rng = StdRng::seed_from_u64(n as u64 + 7);
            let inputs = random_inputs(&f, &mut rng, false);
            check(&f, &inputs);
        }
    }
}
