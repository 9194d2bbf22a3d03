//! Convolutions routed to GEMM by the planner (`planner::window`): the
//! padded forward, the weight gradient and the input gradient of a conv2d
//! run as GEMMs over zero-padded copies of the image (read as windows:
//! implicit GEMM, no im2col), the forward's padded copy is the weight
//! gradient's, and a convolution written by hand as one `index_fn`
//! line gets the same routes and the same values as the op. (Exactness of
//! every conv case against the reference interpreter is in the gradcheck
//! suite.)

use tenjin::{index_fn_with_sizes, DType, Tensor};

/// The stride-1, padding-1 3×3 conv2d of `[2, 16, 8, 8]` by `[16, 16, 3, 3]`.
const LINE: &str = "y[n; o; i; j] = sum{c}_0^15 (sum{p}_0^2 (sum{q}_0^2 (\
    if {i + p >= 1} then (if {i + p <= 8} then (if {j + q >= 1} then (if {j + q <= 8} \
    then (x[n; c; i + p - 1; j + q - 1] * w[o; c; p; q]) else (0)) else (0)) else (0)) else (0))))";

/// A random f64 leaf of `shape` that requires its gradient.
fn leaf(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, seed)
        .unwrap()
        .requires_grad()
}

fn inputs() -> (Tensor, Tensor) {
    (leaf(&[2, 16, 8, 8], 1), leaf(&[16, 16, 3, 3], 2))
}

fn routes(y: &Tensor) -> (Vec<&'static str>, Vec<&'static str>, Vec<String>) {
    let e = tenjin::explain(y).unwrap();
    let f = e.forward.iter().map(|s| s.route).collect();
    let b = e.backward.iter().map(|s| s.route).collect();
    let roles = e.backward.iter().map(|s| s.role.clone()).collect();
    (f, b, roles)
}

#[test]
fn a_padded_conv2d_and_its_gradients_run_as_gemms_over_padded_copies() {
    let (x, w) = inputs();
    let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1).unwrap();
    let (fwd, bwd, roles) = routes(&y);
    let e = tenjin::explain(&y).unwrap();
    assert_eq!(fwd, ["loop", "gemm"], "{e}");
    // The copy is the padded image, 10 × 10 per plane, not im2col's
    // [2, 16, 3, 3, 8, 8]: the GEMM reads its windows straight from it.
    assert_eq!(e.forward[0].domain, [2, 16, 10, 10], "{e}");
    // dy padded, dx by GEMM, the forward's padded x from the tape, dw by GEMM.
    assert_eq!(bwd.iter().filter(|r| **r == "gemm").count(), 2, "{e}");
    assert!(roles.iter().any(|r| r.contains("forward stage")), "{e}");
    let grads = roles
        .iter()
        .zip(&bwd)
        .filter(|(r, _)| r.starts_with("gradient"));
    assert!(
        grads.clone().count() == 2 && grads.into_iter().all(|(_, r)| *r == "gemm"),
        "{e}"
    );
    // `explain` names the algorithm: the padded copy, then one product per
    // image over its windows (implicit GEMM), for the forward and both
    // gradients.
    assert_eq!(e.forward[0].algorithm, "padded copy", "{e}");
    assert!(
        e.forward[1]
            .algorithm
            .starts_with("implicit GEMM: 2 × (16×64×144), rows read through a table"),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("output: implicit GEMM"), "{text}");
    for role in ["gradient of x", "gradient of w"] {
        let s = e.backward.iter().find(|s| s.role == role).unwrap();
        assert!(s.algorithm.starts_with("implicit GEMM"), "{role}: {e}");
    }
}

/// The input gradient of a stride-2 convolution runs as four stride-1
/// convolutions of `dy` (one per parity of the position: 1, 2, 2 and 4
/// taps), each an implicit GEMM, and one strided copy that interleaves
/// them: no col2im product over every (tap, position) pair.
#[test]
fn a_strided_input_gradient_runs_as_one_stride_one_gemm_per_phase() {
    let x = leaf(&[2, 32, 32, 32], 1);
    let w = leaf(&[32, 32, 3, 3], 2);
    let y = x.conv2d(&w, None, [2, 2], [1, 1], [1, 1], 1).unwrap();
    let e = tenjin::explain(&y).unwrap();
    let (fwd, bwd, roles) = routes(&y);
    assert_eq!(fwd, ["loop", "gemm"], "{e}");
    let dx = roles.iter().position(|r| r == "gradient of x").unwrap();
    assert_eq!(bwd[dx], "loop", "{e}");
    assert_eq!(
        e.backward[dx].algorithm, "phases interleaved: strided copies",
        "{e}"
    );
    // Four products, each over a quarter of the positions of dx, with K
    // the channels times the phase's taps.
    let phases: Vec<&str> = e.backward[..dx]
        .iter()
        .filter(|s| s.route == "gemm")
        .map(|s| s.algorithm.as_str())
        .collect();
    assert_eq!(phases.len(), 4, "{e}");
    for k in [32, 64, 64, 128] {
        assert!(
            phases.iter().any(|a| a.contains(&format!("×{k})"))),
            "K = {k}: {e}"
        );
    }
    assert!(
        e.backward.iter().all(|s| s.domain.len() <= 4),
        "no col2im product over taps and positions: {e}"
    );
}

/// The phases compute the input gradient of the convolution: against the
/// sum written out in f64, and bitwise the same at 1, 2 and 3 threads.
#[test]
fn a_strided_input_gradient_by_phases_is_exact_and_independent_of_threads() {
    let (b, c, o, hw) = (2, 32, 32, 32);
    let run = |dtype: DType| {
        let x = Tensor::randn(&[b, c, hw, hw], dtype, 1)
            .unwrap()
            .requires_grad();
        let w = Tensor::randn(&[o, c, 3, 3], dtype, 2).unwrap();
        let y = x.conv2d(&w, None, [2, 2], [1, 1], [1, 1], 1).unwrap();
        let g = Tensor::randn(y.shape(), dtype, 3).unwrap();
        y.backward_with(&g).unwrap();
        (
            x.grad().unwrap().to_vec_f64().unwrap(),
            w.to_vec_f64().unwrap(),
            g.to_vec_f64().unwrap(),
        )
    };
    let (dx, w, g) = run(DType::F64);
    let t = hw / 2;
    let mut want = vec![0.0; dx.len()];
    for n in 0..b {
        for ci in 0..c {
            for u in 0..hw {
                for v in 0..hw {
                    let mut acc = 0.0;
                    for oi in 0..o {
                        for k0 in 0..3 {
                            for k1 in 0..3 {
                                // u = 2·t0 + k0 − 1
                                let (a0, a1) = (u + 1, v + 1);
                                if a0 < k0 || a1 < k1 || (a0 - k0) % 2 != 0 || (a1 - k1) % 2 != 0 {
                                    continue;
                                }
                                let (t0, t1) = ((a0 - k0) / 2, (a1 - k1) / 2);
                                if t0 >= t || t1 >= t {
                                    continue;
                                }
                                acc += w[((oi * c + ci) * 3 + k0) * 3 + k1]
                                    * g[((n * o + oi) * t + t0) * t + t1];
                            }
                        }
                    }
                    want[((n * c + ci) * hw + u) * hw + v] = acc;
                }
            }
        }
    }
    for (k, (p, q)) in dx.iter().zip(&want).enumerate() {
        assert!(
            (p - q).abs() <= 1e-12 * (1.0 + q.abs()),
            "dx[{k}]: {p} vs {q}"
        );
    }
    // The only test here that sets the thread count (every other result
    // is independent of it anyway).
    tenjin::jit::set_min_parallel_work(0); // split even small loops
    let bits = |threads| {
        tenjin::jit::set_num_threads(threads);
        let (dx, _, _) = run(DType::F32);
        dx.iter().map(|x| (*x as f32).to_bits()).collect::<Vec<_>>()
    };
    let one = bits(1);
    let same = bits(2) == one && bits(3) == one;
    tenjin::jit::set_min_parallel_work(tenjin::jit::DEFAULT_MIN_PARALLEL_WORK);
    tenjin::jit::set_num_threads(2);
    assert!(same, "dx differs between thread counts");
}

/// A grouped convolution's result is a reshape of its `[N, groups, Q, …]`
/// index function: `explain` says that the reshape runs no kernel, forward
/// or backward; the depthwise function itself is a direct loop.
#[test]
fn a_depthwise_convolution_is_a_direct_loop_and_its_reshape_an_alias() {
    let x = leaf(&[2, 8, 10, 10], 1);
    let w = leaf(&[8, 1, 3, 3], 2);
    let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 8).unwrap();
    let e = tenjin::explain(&y).unwrap();
    assert!(
        e.forward
            .iter()
            .chain(&e.backward)
            .all(|s| s.algorithm.starts_with("alias:") && s.algorithm.contains("no kernel")),
        "{e}"
    );
    // The depthwise function itself, written by hand: 9 taps per output
    // stay a loop nest, with no im2col.
    let line = "y[n; c; i; j] = sum{p}_0^2 (sum{q}_0^2 (if {i + p >= 1} then (if {i + p <= 10} \
        then (if {j + q >= 1} then (if {j + q <= 10} then (x[n; c; i + p - 1; j + q - 1] * w[c; p; q]) \
        else (0)) else (0)) else (0)) else (0)))";
    let w3 = w.reshape(&[8, 3, 3]).unwrap();
    let z = index_fn_with_sizes(line, &[("x", &x), ("w", &w3)], &[("i", 10), ("j", 10)]).unwrap();
    let e = tenjin::explain(&z).unwrap();
    let out = e.forward.last().unwrap();
    assert_eq!(out.algorithm, "direct loop", "{e}");
    assert!(
        e.forward.iter().all(|s| !s.algorithm.starts_with("im2col")),
        "{e}"
    );
}

#[test]
fn the_same_convolution_written_as_one_line_gets_the_same_routes_and_values() {
    let (x, w) = inputs();
    let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1).unwrap();
    let z = index_fn_with_sizes(LINE, &[("x", &x), ("w", &w)], &[("i", 8), ("j", 8)]).unwrap();
    assert_eq!(routes(&y).0, routes(&z).0);
    assert_eq!(routes(&y).1, routes(&z).1);
    // The same algorithms, chosen on the index functions, not the op's name.
    let algorithms = |t: &Tensor| {
        let e = tenjin::explain(t).unwrap();
        let names = |l: &[tenjin::trace::StageLine]| -> Vec<String> {
            l.iter().map(|s| s.algorithm.clone()).collect()
        };
        (names(&e.forward), names(&e.backward))
    };
    assert_eq!(algorithms(&y), algorithms(&z));
    let g = Tensor::randn(&[2, 16, 8, 8], DType::F64, 3).unwrap();
    y.backward_with(&g).unwrap();
    let (gx, gw) = (
        x.grad().unwrap().to_vec_f64().unwrap(),
        w.grad().unwrap().to_vec_f64().unwrap(),
    );
    let (yv, zv) = (y.to_vec_f64().unwrap(), z.to_vec_f64().unwrap());
    x.zero_grad();
    w.zero_grad();
    z.backward_with(&g).unwrap();
    let close = |a: &[f64], b: &[f64], what: &str| {
        for (k, (p, q)) in a.iter().zip(b).enumerate() {
            assert!(
                (p - q).abs() <= 1e-12 * (1.0 + q.abs()),
                "{what}[{k}]: {p} vs {q}"
            );
        }
    };
    close(&zv, &yv, "y");
    close(&x.grad().unwrap().to_vec_f64().unwrap(), &gx, "dx");
    close(&w.grad().unwrap().to_vec_f64().unwrap(), &gw, "dw");
}

#[test]
fn a_fused_conv_bias_relu_line_reads_its_masked_gradient_through_a_padded_stage() {
    // The mask of the ReLU is cut as a stage; what is left of the input
    // gradient is a windowed sum over that stage, rewritten like the
    // plain convolution's: a zero-padded copy and one GEMM, not a GEMM
    // into [B, C, K, T] read back through solved ranges (col2im).
    let x = leaf(&[4, 32, 132], 1);
    let w = leaf(&[32, 32, 5], 2);
    let b = leaf(&[32], 3);
    let src = "y[n; o; t] = max(sum{c}_0^31 (sum{k}_0^4 (x[n; c; t + k] * w[o; c; k])) + b[o], 0)";
    let y = index_fn_with_sizes(src, &[("x", &x), ("w", &w), ("b", &b)], &[("t", 128)]).unwrap();
    let e = tenjin::explain(&y).unwrap();
    let dx = e
        .backward
        .iter()
        .find(|s| s.role == "gradient of x")
        .unwrap();
    assert_eq!(dx.route, "gemm", "{e}");
    assert!(
        e.backward.iter().all(|s| s.domain.len() <= 3),
        "no [B, C, K, T] stage: {e}"
    );
    assert!(
        e.backward.iter().any(|s| s.domain == [4, 32, 136]),
        "the padded gradient: {e}"
    );
    // The same gradients as the op-by-op route.
    let g = Tensor::randn(y.shape(), DType::F64, 4).unwrap();
    y.backward_with(&g).unwrap();
    let got: Vec<Vec<f64>> = [&x, &w, &b]
        .iter()
        .map(|t| t.grad().unwrap().to_vec_f64().unwrap())
        .collect();
    let (x2, w2, b2) = (
        x.detach().requires_grad(),
        w.detach().requires_grad(),
        b.detach().requires_grad(),
    );
    x2.conv1d(&w2, Some(&b2), 1, 0, 1, 1)
        .unwrap()
        .relu()
        .unwrap()
        .backward_with(&g)
        .unwrap();
    for (got, t) in got.iter().zip([&x2, &w2, &b2]) {
        for (a, e) in got.iter().zip(t.grad().unwrap().to_vec_f64().unwrap()) {
            assert!((a - e).abs() <= 1e-12 * e.abs().max(1.0), "{a} against {e}");
        }
    }
}
