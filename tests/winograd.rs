//! Winograd's F(2×2, 3×3) and F(3×3, 2×2), opt in (`tenjin::set_winograd`):
//! the planner gives a 3×3 stride-1 convolution's forward, input gradient
//! and weight gradient (the op, or a line written by hand) the `winograd`
//! route on the CPU and nothing else; results match the direct sum in f64 to rounding, its f32 error
//! stays within the bound `BENCHMARKS.md` documents, results are bitwise
//! identical at 1, 2 and 3 threads, and turning it off gives back the
//! direct bits.
//!
//! The switch is process-wide, so the tests here take turns (`LOCK`).

use std::sync::Mutex;
use tenjin::{gradcheck, index_fn_with_sizes, set_winograd, DType, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

/// Runs `body` with Winograd `on`, the other tests of this file waiting.
fn with_winograd<R>(on: bool, body: impl FnOnce() -> R) -> R {
    let _turn = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    set_winograd(on);
    let r = body();
    set_winograd(false);
    r
}

/// `[n, c, h, w]` as `[n; c; h; w]`-ordered f64 values.
struct Conv {
    x: Vec<f64>,
    w: Vec<f64>,
    dy: Vec<f64>,
    n: usize,
    c: usize,
    o: usize,
    h: usize,
    wd: usize,
    pad: usize,
}

impl Conv {
    fn out(&self) -> (usize, usize) {
        (self.h + 2 * self.pad - 2, self.wd + 2 * self.pad - 2)
    }

    /// The image at `(n, c, y, x)` of the padded image (0 outside).
    fn xp(&self, n: usize, c: usize, y: usize, x: usize) -> f64 {
        let (y, x) = (
            y as isize - self.pad as isize,
            x as isize - self.pad as isize,
        );
        if y < 0 || x < 0 || y >= self.h as isize || x >= self.wd as isize {
            return 0.0;
        }
        self.x[((n * self.c + c) * self.h + y as usize) * self.wd + x as usize]
    }

    fn wt(&self, o: usize, c: usize, a: usize, b: usize) -> f64 {
        self.w[((o * self.c + c) * 3 + a) * 3 + b]
    }

    /// The forward by the direct sum, and `Σ |x·w|` of each output's terms.
    fn forward(&self) -> (Vec<f64>, Vec<f64>) {
        let (ho, wo) = self.out();
        let (mut y, mut mag) = (Vec::new(), Vec::new());
        for n in 0..self.n {
            for o in 0..self.o {
                for i in 0..ho {
                    for j in 0..wo {
                        let (mut s, mut m) = (0.0, 0.0);
                        for c in 0..self.c {
                            for a in 0..3 {
                                for b in 0..3 {
                                    let t = self.xp(n, c, i + a, j + b) * self.wt(o, c, a, b);
                                    s += t;
                                    m += t.abs();
                                }
                            }
                        }
                        y.push(s);
                        mag.push(m);
                    }
                }
            }
        }
        (y, mag)
    }

    /// The weight gradient by the direct sum: `dw[o; c; a; b] = Σ_n Σ_i
    /// Σ_j x_p[n; c; i + a; j + b] · dy[n; o; i; j]`.
    fn weight_gradient(&self) -> Vec<f64> {
        let (ho, wo) = self.out();
        let mut dw = Vec::new();
        for o in 0..self.o {
            for c in 0..self.c {
                for a in 0..3 {
                    for b in 0..3 {
                        let mut s = 0.0;
                        for n in 0..self.n {
                            for i in 0..ho {
                                for j in 0..wo {
                                    s += self.xp(n, c, i + a, j + b)
                                        * self.dy[((n * self.o + o) * ho + i) * wo + j];
                                }
                            }
                        }
                        dw.push(s);
                    }
                }
            }
        }
        dw
    }

    /// The input gradient by the direct sum: `dx[n; c; u; v] = Σ_o Σ_{a, b}
    /// w[o; c; a; b] · dy[n; o; u + p − a; v + p − b]`.
    fn input_gradient(&self) -> Vec<f64> {
        let (ho, wo) = self.out();
        let mut dx = Vec::new();
        for n in 0..self.n {
            for c in 0..self.c {
                for u in 0..self.h {
                    for v in 0..self.wd {
                        let mut s = 0.0;
                        for o in 0..self.o {
                            for a in 0..3 {
                                for b in 0..3 {
                                    let (i, j) = (u + self.pad, v + self.pad);
                                    if i < a || j < b || i - a >= ho || j - b >= wo {
                                        continue;
                                    }
                                    s += self.wt(o, c, a, b)
                                        * self.dy[((n * self.o + o) * ho + i - a) * wo + j - b];
                                }
                            }
                        }
                        dx.push(s);
                    }
                }
            }
        }
        dx
    }
}

fn values(shape: &[usize], seed: u64) -> Vec<f64> {
    Tensor::randn(shape, DType::F64, seed)
        .unwrap()
        .to_vec_f64()
        .unwrap()
}

fn problem([n, c, o, h, wd, pad]: [usize; 6]) -> Conv {
    let (ho, wo) = (h + 2 * pad - 2, wd + 2 * pad - 2);
    Conv {
        x: values(&[n, c, h, wd], 1),
        w: values(&[o, c, 3, 3], 2),
        dy: values(&[n, o, ho, wo], 3),
        n,
        c,
        o,
        h,
        wd,
        pad,
    }
}

/// The op's forward, input and weight gradients in `dtype`, and its plan.
fn run(p: &Conv, dtype: DType) -> (Vec<f64>, Vec<f64>, Vec<f64>, tenjin::Explanation) {
    let (ho, wo) = p.out();
    let t = |v: &[f64], s: &[usize]| {
        Tensor::from_vec_f64(v.to_vec(), s)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .requires_grad()
    };
    let x = t(&p.x, &[p.n, p.c, p.h, p.wd]);
    let w = t(&p.w, &[p.o, p.c, 3, 3]);
    let dy = t(&p.dy, &[p.n, p.o, ho, wo]).detach();
    let y = x
        .conv2d(&w, None, [1, 1], [p.pad, p.pad], [1, 1], 1)
        .unwrap();
    y.backward_with(&dy).unwrap();
    let e = tenjin::explain(&y).unwrap();
    let v = |t: &Tensor| t.to_vec_f64().unwrap();
    (v(&y), v(&x.grad().unwrap()), v(&w.grad().unwrap()), e)
}

fn max_gap(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs() / (1.0 + q.abs()))
        .fold(0.0, f64::max)
}

#[test]
fn the_forward_and_both_gradients_run_by_winograd_and_match_the_direct_sum() {
    // Odd and even sides (edge tiles), padding 0, 1 and 2, rectangles,
    // one image, rows of more than 16 tiles.
    for shape in [
        [2, 8, 12, 9, 11, 1],
        [1, 16, 8, 14, 12, 0],
        [3, 8, 8, 7, 40, 2],
    ] {
        let p = problem(shape);
        let (y, dx, dw, e) = with_winograd(true, || run(&p, DType::F64));
        let winograd = |stages: &[tenjin::trace::StageLine]| {
            stages.iter().filter(|s| s.route == "winograd").count()
        };
        assert_eq!(winograd(&e.forward), 1, "{shape:?}: {e}");
        assert_eq!(winograd(&e.backward), 2, "{shape:?}: {e}");
        assert!(
            e.forward
                .iter()
                .any(|s| s.algorithm.starts_with("Winograd F(2×2, 3×3)")),
            "{e}"
        );
        assert!(
            e.backward
                .iter()
                .any(|s| s.role == "gradient of w"
                    && s.algorithm.starts_with("Winograd F(3×3, 2×2)")),
            "{e}"
        );
        let (want, _) = p.forward();
        assert!(
            max_gap(&y, &want) < 1e-12,
            "{shape:?}: y {}",
            max_gap(&y, &want)
        );
        let want_dx = p.input_gradient();
        assert!(
            max_gap(&dx, &want_dx) < 1e-12,
            "{shape:?}: dx {}",
            max_gap(&dx, &want_dx)
        );
        let want_dw = p.weight_gradient();
        assert!(
            max_gap(&dw, &want_dw) < 1e-12,
            "{shape:?}: dw {}",
            max_gap(&dw, &want_dw)
        );
    }
}

#[test]
fn its_f32_error_is_within_the_documented_bound() {
    // Rows of 32 columns: runs of 16 tiles by the host's vector kernels.
    let p = problem([2, 64, 64, 12, 32, 1]);
    let (exact, magnitude) = p.forward();
    let (y, dx, dw, _) = with_winograd(true, || run(&p, DType::F32));
    let (direct, direct_dx, direct_dw, _) = with_winograd(false, || run(&p, DType::F32));
    // The error relative to Σ |x·w| of each output's terms.
    let relative = |y: &[f64]| {
        y.iter()
            .zip(&exact)
            .zip(&magnitude)
            .map(|((a, b), m)| (a - b).abs() / m)
            .fold(0.0, f64::max)
    };
    let (wino, plain) = (relative(&y), relative(&direct));
    // Documented in BENCHMARKS.md: below 4e-7 · Σ |x·w| (the direct f32
    // sum: below 1e-7).
    eprintln!("f32 error / Σ|x·w|: Winograd {wino:e}, direct {plain:e}");
    assert!(
        wino < 4e-7,
        "Winograd's f32 error {wino:e} (direct {plain:e})"
    );
    assert!(plain < 4e-7, "{plain:e}");
    assert!(wino > 0.0, "Winograd's rounding differs from the exact sum");
    let dx_gap = max_gap(&dx, &direct_dx);
    assert!(dx_gap < 1e-4, "dx: {dx_gap:e}");
    // The weight gradient: sums over 2 · 12 · 32 positions.
    let exact_dw = p.weight_gradient();
    let (wino_dw, plain_dw) = (max_gap(&dw, &exact_dw), max_gap(&direct_dw, &exact_dw));
    eprintln!("dw: Winograd {wino_dw:e}, direct {plain_dw:e}");
    assert!(
        plain_dw < 1e-4 && wino_dw < 2.0 * plain_dw,
        "dw: Winograd {wino_dw:e}, direct {plain_dw:e}"
    );
}

#[test]
fn results_are_bitwise_identical_at_one_two_and_three_threads() {
    let p = problem([4, 16, 16, 10, 36, 1]);
    let bits = |threads| {
        tenjin::jit::set_num_threads(threads);
        let (y, dx, dw, _) = run(&p, DType::F32);
        y.iter()
            .chain(&dx)
            .chain(&dw)
            .map(|v| (*v as f32).to_bits())
            .collect::<Vec<_>>()
    };
    let same = with_winograd(true, || {
        tenjin::jit::set_min_parallel_work(0);
        let one = bits(1);
        let same = bits(2) == one && bits(3) == one;
        tenjin::jit::set_min_parallel_work(tenjin::jit::DEFAULT_MIN_PARALLEL_WORK);
        tenjin::jit::set_num_threads(2);
        same
    });
    assert!(same, "Winograd's results differ between thread counts");
}

#[test]
fn turning_it_off_gives_back_the_direct_bits() {
    let p = problem([2, 8, 8, 8, 8, 1]);
    let (before, ..) = with_winograd(false, || run(&p, DType::F32));
    let (during, ..) = with_winograd(true, || run(&p, DType::F32));
    let (after, _, _, e) = with_winograd(false, || run(&p, DType::F32));
    assert_ne!(before, during, "Winograd rounds otherwise");
    assert_eq!(before, after);
    assert!(e.forward.iter().all(|s| s.route != "winograd"), "{e}");
}

#[test]
fn its_gradients_pass_gradcheck() {
    let x = Tensor::randn(&[1, 8, 5, 7], DType::F64, 4).unwrap();
    let w = Tensor::randn(&[8, 8, 3, 3], DType::F64, 5).unwrap();
    let report = with_winograd(true, || {
        gradcheck(
            |t| {
                t[0].conv2d(&t[1], None, [1, 1], [1, 1], [1, 1], 1)?
                    .tanh()?
                    .sum()
            },
            &[x, w],
        )
    })
    .unwrap();
    assert!(report.compared > 0, "{report:?}");
}

#[test]
fn a_line_written_by_hand_gets_it_and_other_filters_do_not() {
    let x = Tensor::randn(&[2, 8, 10, 10], DType::F64, 6)
        .unwrap()
        .requires_grad();
    let w3 = Tensor::randn(&[8, 8, 3, 3], DType::F64, 7)
        .unwrap()
        .requires_grad();
    let w5 = Tensor::randn(&[8, 8, 5, 5], DType::F64, 8).unwrap();
    let line = "y[n; o; i; j] = sum{c}_0^7 (sum{a}_0^2 (sum{b}_0^2 (x[n; c; i + a; j + b] * w[o; c; a; b])))";
    let (by_hand, op, five, strided) = with_winograd(true, || {
        let y = index_fn_with_sizes(line, &[("x", &x), ("w", &w3)], &[("i", 8), ("j", 8)]).unwrap();
        let op = x.conv2d(&w3, None, [1, 1], [0, 0], [1, 1], 1).unwrap();
        let five = x.conv2d(&w5, None, [1, 1], [2, 2], [1, 1], 1).unwrap();
        let strided = x.conv2d(&w3, None, [2, 2], [1, 1], [1, 1], 1).unwrap();
        let routes = |t: &Tensor| {
            let e = tenjin::explain(t).unwrap();
            e.forward.iter().map(|s| s.route).collect::<Vec<_>>()
        };
        (
            (routes(&y), y.to_vec_f64().unwrap()),
            op.to_vec_f64().unwrap(),
            routes(&five),
            routes(&strided),
        )
    });
    assert_eq!(by_hand.0, ["winograd"]);
    assert_eq!(by_hand.1, op, "the line and the op: the same kernel");
    assert!(!five.contains(&"winograd"), "{five:?}");
    assert!(!strided.contains(&"winograd"), "{strided:?}");
}

#[test]
fn a_bias_and_an_activation_run_after_it_in_place() {
    let p = problem([2, 8, 8, 9, 10, 1]);
    let (want, _) = p.forward();
    let (ho, wo) = p.out();
    let bias: Vec<f64> = (0..p.o).map(|o| o as f64 * 0.25 - 1.0).collect();
    let x = Tensor::from_vec_f64(p.x.clone(), &[p.n, p.c, p.h, p.wd])
        .unwrap()
        .requires_grad();
    let w = Tensor::from_vec_f64(p.w.clone(), &[p.o, p.c, 3, 3]).unwrap();
    let b = Tensor::from_vec_f64(bias.clone(), &[p.o]).unwrap();
    let line = "y[n; o; i; j] = max(sum{c}_0^7 (sum{a}_0^2 (sum{q}_0^2 (\
        if {i + a >= 1} then (if {i + a <= 9} then (if {j + q >= 1} then (if {j + q <= 10} \
        then (x[n; c; i + a - 1; j + q - 1] * w[o; c; a; q]) else (0)) else (0)) else (0)) else (0)))) + b[o], 0)";
    let (op, relu, routes) = with_winograd(true, || {
        let op = x.conv2d(&w, Some(&b), [1, 1], [1, 1], [1, 1], 1).unwrap();
        let relu = index_fn_with_sizes(
            line,
            &[("x", &x), ("w", &w), ("b", &b)],
            &[("i", ho), ("j", wo)],
        )
        .unwrap();
        let e = tenjin::explain(&op).unwrap();
        let routes: Vec<&str> = e.forward.iter().map(|s| s.route).collect();
        (op.to_vec_f64().unwrap(), relu.to_vec_f64().unwrap(), routes)
    });
    assert!(routes.contains(&"winograd+loop"), "{routes:?}");
    let per_channel = ho * wo;
    for (k, (&y, &r)) in op.iter().zip(&relu).enumerate() {
        let expect = want[k] + bias[(k / per_channel) % p.o];
        assert!((y - expect).abs() < 1e-12, "y[{k}]: {y} vs {expect}");
        assert!(
            (r - expect.max(0.0)).abs() < 1e-12,
            "relu[{k}]: {r} vs {expect}"
        );
    }
}
