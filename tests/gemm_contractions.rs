//! Contractions → GEMM (`tenjin::jit::gemm`): which index functions are
//! recognised as (batched) matrix products, and that running them through
//! gemm equals the reference interpreter (f64 to 1e-12, f32 to 1e-4,
//! relative to the largest output value), with bitwise equal results for
//! 1, 2 and 3 threads. Functions that are not exactly a product of two
//! strided views under constant-range sums must be rejected.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenjin::planner::contraction::{detect, detect_scaled, Contraction};
use tenjin::planner::route::{route_for, Route, Target};
use tenjin::symbolic::IndexFn;
use tenjin::DType;

const TOL_F64: f64 = 1e-12;
const TOL_F32: f64 = 1e-4;

fn parse(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
    IndexFn::parse_with_sizes(src, args, sizes).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn random_inputs(f: &IndexFn, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = StdRng::seed_from_u64(seed);
    f.args()
        .iter()
        .map(|a| {
            let n: usize = a.shape.iter().product();
            (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
        })
        .collect()
}

fn max_abs(x: &[f64]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs()))
}

/// Asserts |got − want| ≤ tol · max|want| (1 when all of `want` is zero).
fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = match max_abs(want) {
        m if m > 0.0 => m,
        _ => 1.0,
    };
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {k}: gemm {g} vs reference {w} (scale {scale})"
        );
    }
}

fn run_f64(plan: &Contraction, f: &IndexFn, inputs: &[Vec<f64>]) -> Vec<f64> {
    let refs: Vec<&[f64]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut out = vec![f64::NAN; f.output_shape().iter().product()];
    plan.run_f64(&refs, &mut out);
    out
}

fn run_f32(plan: &Contraction, f: &IndexFn, inputs: &[Vec<f32>]) -> Vec<f32> {
    let refs: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
    let mut out = vec![f32::NAN; f.output_shape().iter().product()];
    plan.run_f32(&refs, &mut out);
    out
}

fn reference_f64(f: &IndexFn, inputs: &[Vec<f64>]) -> Vec<f64> {
    let named: Vec<(&str, &[f64])> = f
        .args()
        .iter()
        .zip(inputs)
        .map(|(a, d)| (a.name.as_str(), d.as_slice()))
        .collect();
    f.eval_f64(&named)
        .unwrap_or_else(|e| panic!("eval {f}: {e}"))
}

fn reference_f32(f: &IndexFn, inputs: &[Vec<f32>]) -> Vec<f32> {
    let named: Vec<(&str, &[f32])> = f
        .args()
        .iter()
        .zip(inputs)
        .map(|(a, d)| (a.name.as_str(), d.as_slice()))
        .collect();
    f.eval_f32(&named)
        .unwrap_or_else(|e| panic!("eval {f}: {e}"))
}

/// `detect` accepts `f`, and the plan equals the reference interpreter in
/// f64 and f32 at 1, 2 and 3 threads (bitwise equal across thread counts).
fn check_fn(f: &IndexFn, seed: u64) {
    let plan = detect(f).unwrap_or_else(|| panic!("not detected as a contraction: {f}"));
    check_plan(plan, f, seed);
}

/// `plan` (of `f`) equals the reference interpreter in f64 and f32 at 1, 2
/// and 3 threads, bitwise equal across thread counts.
fn check_plan(mut plan: Contraction, f: &IndexFn, seed: u64) {
    let inputs = random_inputs(f, seed);
    let want = reference_f64(f, &inputs);
    let inputs32: Vec<Vec<f32>> = inputs
        .iter()
        .map(|v| v.iter().map(|&x| x as f32).collect())
        .collect();
    let want32: Vec<f64> = reference_f32(f, &inputs32)
        .iter()
        .map(|&x| x as f64)
        .collect();
    let mut first: Option<(Vec<f64>, Vec<f32>)> = None;
    for threads in [1, 2, 3] {
        plan.set_threads(threads);
        let got = run_f64(&plan, f, &inputs);
        assert_close(
            &format!("f64, {threads} threads: {f}"),
            &got,
            &want,
            TOL_F64,
        );
        let got32 = run_f32(&plan, f, &inputs32);
        let wide: Vec<f64> = got32.iter().map(|&x| x as f64).collect();
        assert_close(
            &format!("f32, {threads} threads: {f}"),
            &wide,
            &want32,
            TOL_F32,
        );
        match &first {
            None => first = Some((got, got32)),
            Some((g64, g32)) => {
                let same64 = common::same_bits(g64, &got);
                let same32 = common::same_bits(g32, &got32);
                assert!(
                    same64 && same32,
                    "{threads} threads differ from 1 thread: {f}"
                );
            }
        }
    }
}

fn check(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) {
    check_fn(&parse(src, args, sizes), 42);
}

/// Products large enough to be cut into tiles (the larger of m and n is at
/// least 256), and batches of small ones: within tolerance of the reference and bitwise identical for
/// 1, 2 and 3 threads, in both orientations of the split and for a
/// transposed right-hand side (the layout of `x · wᵀ` in a linear layer).
#[test]
fn tiled_products_are_identical_for_any_thread_count() {
    check(
        "f[i; j] = sum{k}_0^40 (a[i; k] * b[j; k])",
        &[("a", &[19, 41]), ("b", &[300, 41])],
        &[],
    );
    check(
        "f[i; j] = sum{k}_0^40 (a[i; k] * b[k; j])",
        &[("a", &[290, 41]), ("b", &[41, 23])],
        &[],
    );
    check(
        "f[i; j] = sum{k}_0^8 (a[k; i] * b[k; j])",
        &[("a", &[9, 260]), ("b", &[9, 1030])],
        &[],
    );
    // Too small for a tile per thread but a batch of products (a
    // convolution's weight gradient, one product per tap): the batch is
    // split between the threads, each product whole.
    check(
        "f[b; i; j] = sum{k}_0^99 (a[b; i; k] * c[b; k; j])",
        &[("a", &[5, 20, 100]), ("c", &[5, 100, 24])],
        &[],
    );
    check(
        "w[o; c; k] = sum{t}_0^63 (x[c; k + t] * s[o; t])",
        &[("x", &[12, 68]), ("s", &[9, 64])],
        &[("k", 5)],
    );
}

/// Batches folded into M or N, their rows read through tables (a
/// convolution over a padded image: its output rows are consecutive, the
/// image's rows are not): one product each, split between threads,
/// against the reference and bitwise identical at 1, 2 and 3 threads.
#[test]
fn batches_folded_into_rows_read_through_tables() {
    let folded = |src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)], n: usize| {
        let f = parse(src, args, sizes);
        let plan = detect(&f).expect("a contraction");
        assert!(
            plan.gemm_shape()[0] > 1,
            "a batch of products before the fold: {f}"
        );
        assert_eq!(plan.folded_shape()[0], n, "products after the fold: {f}");
        check_fn(&f, 7);
    };
    // Forward: the 20 rows of the output image fold into N (400 columns).
    folded(
        "y[n; o; t; u] = sum{c}_0^2 (sum{k}_0^2 (sum{l}_0^2 (w[o; c; k; l] * x[n; c; t + k; u + l])))",
        &[("w", &[5, 3, 3, 3]), ("x", &[2, 3, 22, 22])],
        &[("t", 20), ("u", 20)],
        2,
    );
    // Weight gradient: channels and taps fold into N (270 columns), the
    // images and positions into one K.
    folded(
        "d[o; c; k; l] = sum{n}_0^1 (sum{t}_0^7 (sum{u}_0^7 (g[n; o; t; u] * x[n; c; t + k; u + l])))",
        &[("g", &[2, 4, 8, 8]), ("x", &[2, 30, 10, 10])],
        &[("k", 3), ("l", 3)],
        1,
    );
    // Input gradient, reading a padded gradient backwards.
    folded(
        "z[n; c; h; v] = sum{o}_0^3 (sum{k}_0^2 (sum{l}_0^2 (w[o; c; k; l] * g[n; o; 2 + h - k; 2 + v - l])))",
        &[("w", &[4, 6, 3, 3]), ("g", &[2, 4, 20, 20])],
        &[("h", 18), ("v", 18)],
        2,
    );
}

fn rejects(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) {
    let f = parse(src, args, sizes);
    assert!(
        detect(&f).is_none(),
        "wrongly detected as a contraction: {f}"
    );
}

/// (m, n, k) triples drawn from the odd sizes 1, 7, 33, 65.
const SHAPES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (1, 7, 33),
    (7, 1, 65),
    (7, 33, 1),
    (33, 65, 7),
    (65, 7, 33),
    (33, 33, 65),
];

fn sum_upto(k: usize) -> String {
    format!("_0^{}", k - 1)
}

#[test]
fn matmul() {
    for (m, n, k) in SHAPES {
        let src = format!("f[i; j] = sum{{k}}{} (a[i; k] * b[k; j])", sum_upto(k));
        check(&src, &[("a", &[m, k]), ("b", &[k, n])], &[]);
    }
}

#[test]
fn transposed_lhs_xt_y() {
    for (m, n, k) in SHAPES {
        let src = format!("f[i; j] = sum{{k}}{} (a[k; i] * b[k; j])", sum_upto(k));
        check(&src, &[("a", &[k, m]), ("b", &[k, n])], &[]);
    }
}

#[test]
fn transposed_rhs_x_yt() {
    for (m, n, k) in SHAPES {
        let src = format!("f[i; j] = sum{{k}}{} (a[i; k] * b[j; k])", sum_upto(k));
        check(&src, &[("a", &[m, k]), ("b", &[n, k])], &[]);
    }
}

#[test]
fn transposed_output() {
    for (m, n, k) in SHAPES {
        let src = format!("f[j; i] = sum{{k}}{} (a[i; k] * b[k; j])", sum_upto(k));
        check(&src, &[("a", &[m, k]), ("b", &[k, n])], &[]);
    }
}

#[test]
fn gram_matrix_same_argument_twice() {
    check(
        "f[i; j] = sum{k}_0^32 (a[i; k] * a[j; k])",
        &[("a", &[7, 33])],
        &[],
    );
}

#[test]
fn batched_matmul() {
    for (batch, (m, n, k)) in [
        (1, (7, 33, 1)),
        (3, (33, 7, 65)),
        (7, (1, 33, 7)),
        (2, (65, 1, 33)),
    ] {
        let src = format!(
            "f[n; i; j] = sum{{k}}{} (a[n; i; k] * b[n; k; j])",
            sum_upto(k)
        );
        check(&src, &[("a", &[batch, m, k]), ("b", &[batch, k, n])], &[]);
    }
}

#[test]
fn batched_matmul_batch_in_the_middle() {
    check(
        "f[i; n; j] = sum{k}_0^6 (a[n; i; k] * b[n; k; j])",
        &[("a", &[3, 7, 7]), ("b", &[3, 7, 33])],
        &[],
    );
}

#[test]
fn batched_with_broadcast_batch() {
    // The batch index is missing from `b`: it fuses with `i` into one M.
    for (batch, (m, n, k)) in [(3, (7, 33, 65)), (1, (33, 7, 1)), (7, (1, 7, 33))] {
        let src = format!(
            "f[n; i; j] = sum{{k}}{} (a[n; i; k] * b[k; j])",
            sum_upto(k)
        );
        check(&src, &[("a", &[batch, m, k]), ("b", &[k, n])], &[]);
    }
    // Missing from `a`: a loop over gemm calls.
    check(
        "f[n; i; j] = sum{k}_0^6 (a[i; k] * b[n; k; j])",
        &[("a", &[33, 7]), ("b", &[3, 7, 7])],
        &[],
    );
}

#[test]
fn two_index_contraction() {
    check(
        "f[i] = sum{j}_0^6 (sum{k}_0^32 (a[i; j; k] * b[j; k]))",
        &[("a", &[65, 7, 33]), ("b", &[7, 33])],
        &[],
    );
    check(
        "f[i; l] = sum{j}_0^6 (sum{k}_0^32 (a[i; j; k] * b[l; j; k]))",
        &[("a", &[7, 7, 33]), ("b", &[1, 7, 33])],
        &[],
    );
}

#[test]
fn two_index_contraction_that_does_not_fuse() {
    // `k` and `l` are in opposite orders in `a` and `b`: one is a gemm K,
    // the other a loop accumulating into the output.
    check(
        "f[i; j] = sum{k}_0^6 (sum{l}_0^32 (a[i; k; l] * b[l; k; j]))",
        &[("a", &[7, 7, 33]), ("b", &[33, 7, 65])],
        &[],
    );
}

#[test]
fn matrix_vector() {
    for (m, _, k) in SHAPES {
        let src = format!("f[i] = sum{{k}}{} (a[i; k] * x[k])", sum_upto(k));
        check(&src, &[("a", &[m, k]), ("x", &[k])], &[]);
        let src = format!("f[i] = sum{{k}}{} (x[k] * a[k; i])", sum_upto(k));
        check(&src, &[("a", &[k, m]), ("x", &[k])], &[]);
    }
}

#[test]
fn dot_product() {
    for k in [1, 7, 33, 65] {
        let src = format!("f[] = sum{{k}}{} (x[k] * y[k])", sum_upto(k));
        check(&src, &[("x", &[k]), ("y", &[k])], &[]);
    }
}

#[test]
fn constant_offset_sub_range() {
    check(
        "f[i; j] = sum{k}_1^3 (a[i; k] * b[k - 1; j])",
        &[("a", &[7, 5]), ("b", &[4, 33])],
        &[],
    );
    check(
        "f[i; j] = sum{k}_2^30 (a[i; k + 1] * b[j; k - 2])",
        &[("a", &[33, 32]), ("b", &[7, 29])],
        &[],
    );
}

#[test]
fn output_offsets_and_constant_slices() {
    check(
        "f[i; j] = sum{k}_0^6 (a[1; i + 2; k] * b[k; j + 1])",
        &[("a", &[3, 35, 7]), ("b", &[7, 66])],
        &[("i", 33), ("j", 65)],
    );
}

#[test]
fn output_index_in_neither_factor() {
    check(
        "f[i; j] = sum{k}_0^6 (a[i; k] * b[k])",
        &[("a", &[33, 7]), ("b", &[7])],
        &[("j", 3)],
    );
}

#[test]
fn scaled() {
    let args: &[(&str, &[usize])] = &[("a", &[7, 33]), ("b", &[33, 65])];
    check("f[i; j] = sum{k}_0^32 (a[i; k] * b[k; j]) / 4", args, &[]);
    check("f[i; j] = 2 * sum{k}_0^32 (a[i; k] * b[k; j])", args, &[]);
    check("f[i; j] = sum{k}_0^32 (a[i; k] * b[k; j]) * 3", args, &[]);
    check("f[i; j] = -sum{k}_0^32 (a[i; k] * b[k; j]) / 3", args, &[]);
    check(
        "f[i; j] = sum{k}_0^32 (0.5 * a[i; k] * (b[k; j] / 7))",
        args,
        &[],
    );
}

#[test]
fn empty_sum_range_gives_zeros() {
    check(
        "f[i; j] = sum{k}_3^2 (a[i; k] * b[k; j])",
        &[("a", &[7, 3]), ("b", &[3, 7])],
        &[],
    );
}

#[test]
fn empty_output() {
    let f = parse(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j])",
        &[("a", &[0, 3]), ("b", &[3, 7])],
        &[],
    );
    let plan = detect(&f).expect("detected");
    let mut out: Vec<f64> = vec![];
    plan.run_f64(&[&[], &[0.0; 21]], &mut out);
    assert_eq!(plan.flops(), 0);
}

#[test]
fn flops_count_multiply_adds_twice() {
    let f = parse(
        "f[n; i; j] = sum{k}_0^6 (a[n; i; k] * b[n; k; j])",
        &[("a", &[3, 5, 7]), ("b", &[3, 7, 11])],
        &[],
    );
    assert_eq!(detect(&f).unwrap().flops(), 2 * 3 * 5 * 11 * 7);
}

/// Large enough that gemm really splits the work across threads; compared
/// with a plain loop and bitwise across thread counts.
#[test]
fn large_matmul_threads_are_bitwise_equal() {
    let (m, n, k) = (150, 130, 300);
    let f = parse(
        "f[i; j] = sum{k}_0^299 (a[k; i] * b[k; j])",
        &[("a", &[k, m]), ("b", &[k, n])],
        &[],
    );
    let mut plan = detect(&f).unwrap();
    let inputs = random_inputs(&f, 7);
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k)
                .map(|p| inputs[0][p * m + i] * inputs[1][p * n + j])
                .sum();
        }
    }
    let inputs32: Vec<Vec<f32>> = inputs
        .iter()
        .map(|v| v.iter().map(|&x| x as f32).collect())
        .collect();
    let mut first: Option<(Vec<f64>, Vec<f32>)> = None;
    for threads in [1, 2, 3, 4] {
        plan.set_threads(threads);
        let got = run_f64(&plan, &f, &inputs);
        assert_close("large f64", &got, &want, TOL_F64);
        let got32 = run_f32(&plan, &f, &inputs32);
        let wide: Vec<f64> = got32.iter().map(|&x| x as f64).collect();
        assert_close("large f32", &wide, &want, TOL_F32);
        match &first {
            None => first = Some((got, got32)),
            Some((g64, g32)) => {
                assert!(g64
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
                assert!(g32
                    .iter()
                    .zip(&got32)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }
}

#[test]
fn rejects_triangular_sums() {
    rejects(
        "f[i] = sum{k}_0^(i) (a[i; k] * b[k])",
        &[("a", &[5, 5]), ("b", &[5])],
        &[],
    );
    rejects(
        "f[i; j] = sum{k}_(i)^4 (a[i; k] * b[k; j])",
        &[("a", &[5, 5]), ("b", &[5, 3])],
        &[],
    );
}

#[test]
fn a_sum_over_one_factor_is_rejected() {
    rejects(
        "f[i; j] = sum{k}_0^3 (a[i; i] * b[k; j])",
        &[("a", &[4, 4]), ("b", &[4, 3])],
        &[],
    );
}

#[test]
fn diagonals_strides_reversals_and_windows_are_strided_views() {
    // A diagonal: `i` walks `a` with stride 4 + 1.
    check(
        "f[j] = sum{i}_0^3 (a[i; i] * b[i; j])",
        &[("a", &[4, 4]), ("b", &[4, 3])],
        &[],
    );
    check(
        "f[i; j] = sum{k}_0^2 (a[2*i; k] * b[k; j])",
        &[("a", &[7, 3]), ("b", &[3, 4])],
        &[("i", 4)],
    );
    check(
        "f[i] = sum{k}_0^2 (a[4 - k] * b[k; i])",
        &[("a", &[5]), ("b", &[3, 2])],
        &[],
    );
    // Convolution windows: one GEMM per tap over a shifted view.
    check(
        "f[i] = sum{k}_0^2 (a[i + k] * b[k])",
        &[("a", &[7]), ("b", &[3])],
        &[("i", 5)],
    );
    check(
        "y[n; o; t] = sum{c}_0^4 (sum{k}_0^2 (x[n; c; 2*t + 3*k] * w[o; c; k]))",
        &[("x", &[3, 5, 40]), ("w", &[6, 5, 3])],
        &[("t", 17)],
    );
    check(
        "y[n; o; i; j] = sum{c}_0^2 (sum{p}_0^2 (sum{q}_0^1 (x[n; c; i + p; j + q] * w[o; c; p; q])))",
        &[("x", &[2, 3, 35, 20]), ("w", &[17, 3, 3, 2])],
        &[("i", 33), ("j", 19)],
    );
    // The input gradient of a convolution over a zero-padded copy: the
    // tap walks the padded gradient backwards.
    check(
        "dx[n; c; p] = sum{o}_0^6 (sum{k}_0^4 (w[o; c; k] * dy[n; o; p - k + 4]))",
        &[("w", &[7, 19, 5]), ("dy", &[2, 7, 140])],
        &[("p", 136)],
    );
}

#[test]
fn rejects_three_factor_products() {
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j] * c[k])",
        &[("a", &[2, 3]), ("b", &[3, 4]), ("c", &[3])],
        &[],
    );
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j]) * c[i]",
        &[("a", &[2, 3]), ("b", &[3, 4]), ("c", &[2])],
        &[],
    );
}

/// `detect_scaled` (the CPU's route): a product with a diagonal factor read
/// at the summed indices only, and which products are symmetric in M and
/// N (one triangle computed and mirrored); each checked as `check_fn`
/// does, with outputs of at least 256 rows so that they are cut into tiles.
#[test]
fn diagonal_factors_and_symmetric_products() {
    // (function, arguments, has a diagonal factor, symmetric)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a [usize])], bool, bool);
    let cases: &[Case] = &[
        (
            "h[a; b] = sum{i}_0^299 (x[i; a] * d[i] * x[i; b])",
            &[("x", &[300, 270]), ("d", &[300])],
            true,
            true,
        ),
        // The output the other way round: M is the output's contiguous
        // index, and the symmetric C is written with M's and N's output
        // strides swapped (its lower triangle, not the whole transpose).
        (
            "h[b; a] = sum{i}_0^299 (x[i; a] * d[i] * x[i; b])",
            &[("x", &[300, 270]), ("d", &[300])],
            true,
            true,
        ),
        (
            "h[a; b] = sum{i}_0^99 (d[2 * i + 1] * x[a; i] * x[b; i])",
            &[("x", &[260, 100]), ("d", &[201])],
            true,
            true,
        ),
        (
            "g[a; b] = sum{i}_0^99 (x[i; a] * x[i; b])",
            &[("x", &[100, 300])],
            false,
            true,
        ),
        (
            "g[t; a; b] = sum{i}_0^19 (x[t; i; a] * x[t; i; b])",
            &[("x", &[3, 20, 17])],
            false,
            true,
        ),
        (
            "f[m; n] = sum{i}_0^49 (a[i; m] * d[i] * b[i; n])",
            &[("a", &[50, 40]), ("d", &[50]), ("b", &[50, 270])],
            true,
            false,
        ),
        (
            "f[a; b] = sum{i}_0^49 (x[i; a] * d[i] * x[i + 1; b])",
            &[("x", &[51, 260]), ("d", &[50])],
            true,
            false,
        ),
        (
            "f[a; b] = sum{i}_0^49 (x[i; a] * x[i; 260 - b])",
            &[("x", &[50, 261])],
            false,
            false,
        ),
    ];
    for (seed, &(src, args, diagonal, symmetric)) in cases.iter().enumerate() {
        // `260 - b` does not size `b`.
        let sizes: &[(&str, usize)] = if src.contains("260 - b") {
            &[("b", 261)]
        } else {
            &[]
        };
        let f = parse(src, args, sizes);
        let plan = detect_scaled(&f).unwrap_or_else(|| panic!("not detected: {f}"));
        assert_eq!(plan.has_diagonal(), diagonal, "{f}");
        assert_eq!(plan.is_symmetric(), symmetric, "{f}");
        assert_eq!(detect(&f).is_some(), !diagonal, "{f}");
        check_plan(plan, &f, seed as u64);
    }
}

/// The CPU runs a weighted Gram matrix as one GEMM that scales while it
/// packs; a GPU, whose BLAS has no diagonal factor, materialises
/// `d[i] · x[i; b]` as a stage and runs a plain GEMM.
#[test]
fn a_weighted_gram_matrix_is_one_gemm_on_the_cpu() {
    let f = parse(
        "h[a; b] = sum{i}_0^199 (x[i; a] * d[i] * x[i; b])",
        &[("x", &[200, 64]), ("d", &[200])],
        &[],
    );
    let cpu = tenjin::planner::plan_function(&f, DType::F32).unwrap();
    let routes: Vec<&str> = cpu.stages.iter().map(|s| s.route.name()).collect();
    assert_eq!(routes, ["gemm"], "{f}");
    assert_eq!(
        route_for(&f, DType::F32, Target::Gpu).unwrap().name(),
        "loop"
    );
    let gpu = tenjin::planner::plan_function_for(&f, DType::F32, Target::Gpu).unwrap();
    let routes: Vec<&str> = gpu.stages.iter().map(|s| s.route.name()).collect();
    assert_eq!(routes, ["loop", "gemm"], "{f}");
}

/// A diagonal factor written as an expression (a logistic regression's
/// Hessian: the composed derivative's terms share the reads of `x`, taken
/// out of their difference by the CPU's normalisation) is cut alone on the
/// CPU, an [i] stage, and the rest is one scaled, symmetric GEMM.
#[test]
fn a_diagonal_expression_is_cut_alone_on_the_cpu() {
    let f = parse(
        "h[a; b] = sum{i}_0^199 (x[i; a] * exp (p[i]) * x[i; b] - x[i; a] * q[i] * p[i] * x[i; b])",
        &[("x", &[200, 300]), ("p", &[200]), ("q", &[200])],
        &[],
    );
    let cpu = tenjin::planner::plan_function(&f, DType::F32).unwrap();
    let stages: Vec<(&str, Vec<usize>)> = cpu
        .stages
        .iter()
        .map(|s| (s.route.name(), s.f.output_shape().to_vec()))
        .collect();
    assert_eq!(
        stages,
        [("loop", vec![200]), ("gemm", vec![300, 300])],
        "{cpu}"
    );
    let Route::Gemm(c) = &cpu.stages[1].route else {
        panic!("{cpu}")
    };
    assert!(c.has_diagonal() && c.is_symmetric(), "{cpu}");
    let reference = f
        .eval_f64(&[
            (
                "x",
                &(0..200 * 300)
                    .map(|k| (k % 17) as f64 / 17.0)
                    .collect::<Vec<_>>()[..],
            ),
            (
                "p",
                &(0..200).map(|k| (k % 5) as f64 / 5.0).collect::<Vec<_>>()[..],
            ),
            (
                "q",
                &(0..200).map(|k| (k % 3) as f64).collect::<Vec<_>>()[..],
            ),
        ])
        .unwrap();
    let planned = cpu
        .eval_f64(&[
            &(0..200 * 300)
                .map(|k| (k % 17) as f64 / 17.0)
                .collect::<Vec<_>>(),
            &(0..200).map(|k| (k % 5) as f64 / 5.0).collect::<Vec<_>>(),
            &(0..200).map(|k| (k % 3) as f64).collect::<Vec<_>>(),
        ])
        .unwrap();
    let last = planned.last().unwrap();
    for (a, b) in last.iter().zip(&reference) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} against {b}");
    }
    // The GPU's BLAS has no diagonal factor: no [i] stage is cut there.
    let gpu = tenjin::planner::plan_function_for(&f, DType::F32, Target::Gpu).unwrap();
    assert!(
        gpu.stages.iter().all(|s| s.f.output_shape() != [200]),
        "{gpu}"
    );
}

#[test]
fn rejects_guards() {
    rejects(
        "f[i; j] = sum{k}_0^2 (if {k >= 1} then (a[i; k] * b[k; j]) else (0))",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    rejects(
        "f[i; j] = if {i = j} then (sum{k}_0^2 (a[i; k] * b[k; j])) else (0)",
        &[("a", &[4, 3]), ("b", &[3, 4])],
        &[],
    );
}

#[test]
fn rejects_element_wise_functions() {
    rejects(
        "f[i; j] = exp (sum{k}_0^2 (a[i; k] * b[k; j]))",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    rejects(
        "f[i; j] = sum{k}_0^2 (exp a[i; k] * b[k; j])",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    rejects(
        "f[i; j] = max(sum{k}_0^2 (a[i; k] * b[k; j]), 0)",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j]) + 1",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
}

#[test]
fn rejects_what_is_not_a_two_sided_contraction() {
    // Outer product: no sum.
    rejects("f[i; j] = a[i] * b[j]", &[("a", &[3]), ("b", &[4])], &[]);
    // A sum over one factor only.
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[j])",
        &[("a", &[2, 3]), ("b", &[4])],
        &[],
    );
    // A sum of a product of sums (`k` bound twice).
    rejects(
        "f[i] = sum{k}_0^2 (x[i; k] * sum{k}_0^2 (y[k] * y[k]))",
        &[("x", &[3, 3]), ("y", &[3])],
        &[],
    );
    // Other reductions.
    rejects(
        "f[i; j] = max{k}_0^2 (a[i; k] * b[k; j])",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    // Division by zero is left to the generic kernel (it makes infinities).
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j]) / 0",
        &[("a", &[2, 3]), ("b", &[3, 4])],
        &[],
    );
    // Index values used as numbers.
    rejects(
        "f[i; j] = sum{k}_0^2 (a[i; k] * idx(k))",
        &[("a", &[2, 3])],
        &[("j", 2)],
    );
}

/// Every function of the shared catalogue and all their derivatives: what
/// `detect` accepts must compute exactly what the interpreter computes.
#[test]
fn catalogue_and_derivatives_are_sound() {
    let mut detected = Vec::new();
    for (name, case) in common::cases::all() {
        let f = case.parse();
        let mut fns = vec![f.clone()];
        for a in f.args() {
            if let Ok(d) = f.derive(&a.name) {
                fns.push(d);
            }
        }
        for (p, g) in fns.iter().enumerate() {
            if detect(g).is_some() {
                check_fn(g, 3 + p as u64);
                detected.push(format!("{name}/{p}"));
            }
        }
    }
    for expected in [
        "matmul/0",
        "matmul/1",
        "matmul/2",
        "batched_matmul/0",
        "einsum_two_index_contraction/0",
    ] {
        assert!(
            detected.iter().any(|d| d == expected),
            "{expected} not detected; detected: {detected:?}"
        );
    }
}

/// Throughput of the two shapes the issue tracks. Run with
/// `cargo test --release --test gemm_contractions -- --ignored --nocapture`
/// (prefix `taskset -c 0` for the one-core figure).
#[test]
#[ignore]
fn throughput_f32() {
    let threads: Vec<usize> = std::env::var("TENJIN_GEMM_BENCH_THREADS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    for (m, k, n) in [(512, 512, 512), (256, 784, 512)] {
        let src = format!("f[i; j] = sum{{k}}_0^{} (a[i; k] * b[k; j])", k - 1);
        let f = parse(&src, &[("a", &[m, k]), ("b", &[k, n])], &[]);
        let mut plan = detect(&f).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut out = vec![0.0f32; m * n];
        let mut first: Option<Vec<f32>> = None;
        for &t in &threads {
            plan.set_threads(t);
            for _ in 0..5 {
                plan.run_f32(&[&a, &b], &mut out);
            }
            let mut times = Vec::new();
            for _ in 0..100 {
                let start = std::time::Instant::now();
                plan.run_f32(&[&a, &b], &mut out);
                times.push(start.elapsed().as_secs_f64());
            }
            match &first {
                None => first = Some(out.clone()),
                Some(f) => assert!(
                    f.iter().zip(&out).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{t} threads differ bitwise from {} thread(s)",
                    threads[0]
                ),
            }
            times.sort_by(|x, y| x.total_cmp(y));
            let gf = |s: f64| plan.flops() as f64 / s / 1e9;
            println!(
                "f32 {m}x{k} · {k}x{n}, {t} thread(s): median {:.1}, 10th percentile {:.1}, best {:.1} GFLOP/s ({:.3} ms median)",
                gf(times[50]),
                gf(times[10]),
                gf(times[0]),
                times[50] * 1e3
            );
        }
    }
}
