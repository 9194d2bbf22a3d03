//! The PTX backend off the GPU: transcendental accuracy measured in the
//! test-only interpreter (the table of `tenjin::gpu::ptx::math`), and
//! kernels run on a real GPU when one is present (skipped with a message
//! otherwise).
#![cfg(feature = "cuda")]

#[path = "common/ptx_interp.rs"]
mod ptx_interp;

use ptx_interp::{Buf, Program};
use tenjin::gpu::ptx::{emit, emit_with, Access, Arch, IndexBits};
use tenjin::symbolic::IndexFn;
use tenjin::DType;

/// The outputs of `f[i] = body` (body over `x[i]`, and `y[i]` when given)
/// computed by the emitted PTX in the interpreter.
fn run(body: &str, x: &[f64], y: Option<&[f64]>, dtype: DType) -> Vec<f64> {
    let n = x.len();
    let shape = [n];
    let mut args: Vec<(&str, &[usize])> = vec![("x", &shape[..])];
    if y.is_some() {
        args.push(("y", &shape[..]));
    }
    let f = IndexFn::parse(&format!("f[i] = {body}"), &args).unwrap();
    // Scalar accesses: this interpreter is the independent oracle of the
    // arithmetic; vector accesses are the simulator's to check.
    let k = tenjin::kernel::lower(&f).unwrap();
    let text = emit_with(
        &k,
        dtype,
        Arch::Sm80,
        "k",
        IndexBits::Fitting,
        Access::Scalar,
    )
    .unwrap();
    let p = Program::parse(&text).unwrap();
    let buf = |v: &[f64], w: bool| match dtype {
        DType::F32 => Buf::f32(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), w),
        _ => Buf::f64(v, w),
    };
    let mut bufs = vec![buf(&vec![0.0; n], true), buf(x, false)];
    if let Some(y) = y {
        bufs.push(buf(y, false));
    }
    p.run(&mut bufs, (n as u32).div_ceil(256).min(64), 256)
        .unwrap();
    match dtype {
        DType::F32 => bufs[0].to_f32().into_iter().map(f64::from).collect(),
        _ => bufs[0].to_f64(),
    }
}

/// Distance in units in the last place of the type (f32 or f64) between
/// `got` and the exact value rounded to that type.
fn ulps(got: f64, exact: f64, dtype: DType) -> f64 {
    if got.is_nan() && exact.is_nan() || got == exact {
        return 0.0;
    }
    if got.is_nan() != exact.is_nan()
        || (dtype == DType::F64 && (got.is_infinite() || exact.is_infinite()))
    {
        return f64::INFINITY;
    }
    match dtype {
        DType::F32 => {
            let (g, e) = (got as f32, exact as f32);
            if g == e {
                return 0.0;
            }
            let ulp = (f32::from_bits(e.abs().to_bits() + 1) - e.abs()).max(f32::from_bits(1));
            ((g - e).abs() / ulp) as f64
        }
        _ => {
            let ulp =
                (f64::from_bits(exact.abs().to_bits() + 1) - exact.abs()).max(f64::from_bits(1));
            (got - exact).abs() / ulp
        }
    }
}

fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..=n)
        .map(|k| lo + (hi - lo) * k as f64 / n as f64)
        .collect()
}

fn log_sweep(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..=n)
        .map(|k| (a + (b - a) * k as f64 / n as f64).exp())
        .collect()
}

#[test]
fn transcendentals_match_std_within_the_table() {
    let wide = sweep(-745.0, 709.0, 20001);
    let trig = sweep(-1e5, 1e5, 20001);
    let small_trig = sweep(-10.0, 10.0, 20001);
    let mut positive = log_sweep(1e-300, 1e300, 20001);
    positive.extend([
        0.0,
        f64::MIN_POSITIVE / 8.0,
        f64::INFINITY,
        1.0,
        -1.0,
        f64::NAN,
    ]);
    let tanh_r = sweep(-30.0, 30.0, 20001);
    let pow_x = log_sweep(1e-6, 1e6, 20001);
    let near_zero: Vec<f64> = sweep(-0.9, 10.0, 20001)
        .into_iter()
        .chain(
            log_sweep(1e-300, 1e-3, 2001)
                .into_iter()
                .flat_map(|x| [x, -x]),
        )
        .chain([0.0, -0.0, f64::INFINITY, -1.0, f64::NAN])
        .collect();
    let expm1_r: Vec<f64> = sweep(-40.0, 709.0, 20001)
        .into_iter()
        .chain(
            log_sweep(1e-300, 1e-3, 2001)
                .into_iter()
                .flat_map(|x| [x, -x]),
        )
        .chain([0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
        .collect();
    let atan_r: Vec<f64> = sweep(-5.0, 5.0, 20001)
        .into_iter()
        .chain(
            log_sweep(1e-300, 1e300, 4001)
                .into_iter()
                .flat_map(|x| [x, -x]),
        )
        .chain([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
        .collect();
    let erf_r: Vec<f64> = sweep(-7.0, 7.0, 20001)
        .into_iter()
        .chain(
            log_sweep(1e-300, 1.0, 2001)
                .into_iter()
                .flat_map(|x| [x, -x]),
        )
        .chain([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
        .collect();
    type Case<'a> = (&'a str, &'a str, &'a [f64], fn(f64) -> f64, f64, f64);
    let cases: [Case; 12] = [
        ("exp", "exp(x[i])", &wide, f64::exp, 1.0, 1.0),
        ("log", "log(x[i])", &positive, f64::ln, 1.0, 1.0),
        ("log10", "log10(x[i])", &positive, f64::log10, 2.0, 2.0),
        ("tanh", "tanh(x[i])", &tanh_r, f64::tanh, 2.0, 1.0),
        ("sin", "sin(x[i])", &trig, f64::sin, 2.0, 1.0),
        ("cos", "cos(x[i])", &trig, f64::cos, 2.0, 1.0),
        (
            "sin (|x| ≤ 10)",
            "sin(x[i])",
            &small_trig,
            f64::sin,
            1.0,
            1.0,
        ),
        (
            "pow x^0.375",
            "x[i] ** 0.375",
            &pow_x,
            |x| x.powf(0.375),
            8.0,
            1.0,
        ),
        ("log1p", "log1p(x[i])", &near_zero, libm::log1p, 2.0, 2.0),
        ("expm1", "expm1(x[i])", &expm1_r, libm::expm1, 2.0, 2.0),
        ("atan", "atan(x[i])", &atan_r, libm::atan, 0.0, 1.0),
        ("erf", "erf(x[i])", &erf_r, libm::erf, 2.0, 1.0),
    ];
    let mut failures = Vec::new();
    for (name, body, xs, exact, bound64, bound32) in cases {
        for (dtype, bound) in [(DType::F64, bound64), (DType::F32, bound32)] {
            if let Some(f) = worst_ulps(name, body, xs, exact, dtype, bound) {
                failures.push(f);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Measures `body` over `xs` (rounded to `dtype`) against `exact` and
/// prints the worst error; a message when it exceeds `bound` ulp.
fn worst_ulps(
    name: &str,
    body: &str,
    xs: &[f64],
    exact: fn(f64) -> f64,
    dtype: DType,
    bound: f64,
) -> Option<String> {
    let xs_t: Vec<f64> = match dtype {
        DType::F32 => xs.iter().map(|&x| x as f32 as f64).collect(),
        _ => xs.to_vec(),
    };
    let got = run(body, &xs_t, None, dtype);
    let (mut worst, mut at) = (0.0f64, 0.0);
    for (&x, &g) in xs_t.iter().zip(&got) {
        let e = ulps(g, exact(x), dtype);
        if e > worst {
            (worst, at) = (e, x);
        }
    }
    eprintln!("{name} {dtype:?}: max {worst:.2} ulp (at x = {at:e}); bound {bound}");
    (worst > bound).then(|| format!("{name} {dtype:?}: {worst} ulp at {at:e} > {bound}"))
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The f32 sequences (`tenjin::gpu::ptx::math32`, musl's f32 tables in
/// `special`) over the ranges where f32 results are finite and not
/// trivially 0 or ±1, densely: the f32 column of the table in
/// `tenjin::gpu::ptx::math`.
#[test]
fn f32_sequences_hold_their_ulp_bounds() {
    const N: usize = 100_000;
    let mut tiny_both: Vec<f64> = log_sweep(1e-38, 1e-3, 4_000)
        .into_iter()
        .flat_map(|x| [x, -x])
        .collect();
    tiny_both.extend([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let with_tiny = |mut v: Vec<f64>| {
        v.extend(&tiny_both);
        v
    };
    let mut positive = log_sweep(1e-45, 3e38, N);
    positive.extend([0.0, 1.0, -1.0, f64::INFINITY, f64::NAN]);
    type Case<'a> = (&'a str, &'a str, Vec<f64>, fn(f64) -> f64, f64);
    let cases: Vec<Case> = vec![
        (
            "exp",
            "exp(x[i])",
            with_tiny(sweep(-104.0, 89.0, N)),
            f64::exp,
            1.0,
        ),
        ("log", "log(x[i])", positive.clone(), f64::ln, 1.0),
        (
            "log [0.5, 2]",
            "log(x[i])",
            sweep(0.5, 2.0, N),
            f64::ln,
            1.0,
        ),
        ("log10", "log10(x[i])", positive, f64::log10, 2.0),
        (
            "tanh",
            "tanh(x[i])",
            with_tiny(sweep(-10.0, 10.0, N)),
            f64::tanh,
            1.0,
        ),
        (
            "sigmoid",
            "sigmoid(x[i])",
            with_tiny(sweep(-104.0, 20.0, N)),
            sigmoid,
            2.0,
        ),
        (
            "log1p",
            "log1p(x[i])",
            with_tiny(sweep(-0.999, 100.0, N)),
            libm::log1p,
            2.0,
        ),
        (
            "expm1",
            "expm1(x[i])",
            with_tiny(sweep(-20.0, 88.0, N)),
            libm::expm1,
            2.0,
        ),
        (
            "atan",
            "atan(x[i])",
            with_tiny(sweep(-50.0, 50.0, N)),
            libm::atan,
            1.0,
        ),
        (
            "erf",
            "erf(x[i])",
            with_tiny(sweep(-6.0, 6.0, N)),
            libm::erf,
            1.0,
        ),
    ];
    // The fast f32 path up to its limit, and the f64 branch beyond it.
    let trig = with_tiny(sweep(-1e5, 1e5, N));
    let edge = sweep(105_000.0, 106_200.0, N);
    let far: Vec<f64> = log_sweep(105_616.0, 1e8, N / 10)
        .into_iter()
        .flat_map(|x| [x, -x])
        .collect();
    let cases = cases.into_iter().chain([
        (
            "sin",
            "sin(x[i])",
            trig.clone(),
            f64::sin as fn(f64) -> f64,
            1.0,
        ),
        ("cos", "cos(x[i])", trig, f64::cos, 1.0),
        (
            "sin [-4, 4]",
            "sin(x[i])",
            sweep(-4.0, 4.0, N),
            f64::sin,
            1.0,
        ),
        (
            "cos [-4, 4]",
            "cos(x[i])",
            sweep(-4.0, 4.0, N),
            f64::cos,
            1.0,
        ),
        ("sin at the limit", "sin(x[i])", edge.clone(), f64::sin, 1.0),
        ("cos at the limit", "cos(x[i])", edge, f64::cos, 1.0),
        ("sin beyond (f64)", "sin(x[i])", far.clone(), f64::sin, 1.0),
        ("cos beyond (f64)", "cos(x[i])", far, f64::cos, 1.0),
    ]);
    let failures: Vec<String> = cases
        .into_iter()
        .collect::<Vec<_>>()
        .iter()
        .filter_map(|(name, body, xs, exact, bound)| {
            worst_ulps(name, body, xs, *exact, DType::F32, *bound)
        })
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn pow_with_a_runtime_exponent_follows_the_cpu_rules() {
    let x = [2.0, -2.0, -2.0, 0.0, 0.0, 1.0, -1.0, 4.0, f64::NAN, -8.0];
    let y = [
        3.0,
        3.0,
        0.5,
        -1.0,
        2.0,
        f64::NAN,
        f64::INFINITY,
        -0.5,
        0.0,
        1.0 / 3.0,
    ];
    let got = run("x[i] ** y[i]", &x, Some(&y), DType::F64);
    for ((&a, &b), &g) in x.iter().zip(&y).zip(&got) {
        let want = tenjin::symbolic::expr::pow(a, b);
        assert!(
            (g.is_nan() && want.is_nan()) || g == want || (g - want).abs() <= 1e-15 * want.abs(),
            "{a} ** {b}: PTX {g}, CPU {want}"
        );
    }
}

#[test]
fn every_architecture_gets_its_version_and_target() {
    let f = IndexFn::parse("f[i] = x[i] + 1", &[("x", &[4][..])]).unwrap();
    let k = tenjin::kernel::lower(&f).unwrap();
    for (arch, v, t) in [
        (Arch::Sm70, "6.0", "sm_70"),
        (Arch::Sm80, "7.0", "sm_80"),
        (Arch::Sm90, "7.8", "sm_90"),
    ] {
        let text = emit(&k, DType::F32, arch, "k").unwrap();
        assert!(
            text.starts_with(&format!(".version {v}\n.target {t}\n")),
            "{text}"
        );
    }
    // A CPU-planned vector kernel is refused with a clear error.
    let mut vector = k.clone();
    if let Some(tenjin::kernel::Stmt::For(l)) = vector
        .body
        .iter_mut()
        .find(|s| matches!(s, tenjin::kernel::Stmt::For(_)))
    {
        l.vector = true;
    }
    let err = emit(&vector, DType::F32, Arch::Sm80, "k").unwrap_err();
    assert!(err.to_string().contains("vector loops"), "{err}");
}

#[test]
fn kernels_run_on_a_gpu_when_one_is_present() {
    if !tenjin::cuda::is_available() {
        eprintln!("skipped: no CUDA device (tenjin::cuda::is_available() is false)");
        assert!(matches!(
            tenjin::alloc::allocate_on(tenjin::Device::Cuda(0), 64),
            Err(tenjin::Error::Device { .. })
        ));
        return;
    }
    let n = 100_000;
    let x: Vec<f64> = (0..n).map(|i| (i as f64 - 5e4) * 1e-3).collect();
    let f = IndexFn::parse("f[i] = tanh(x[i]) * 2 + x[i] / 3", &[("x", &[n][..])]).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let inputs32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let values = match dtype {
            DType::F32 => tenjin::observe::Values::F32(&inputs32),
            _ => tenjin::observe::Values::F64(&x),
        };
        let kernel = tenjin::planner::passes::loop_kernel(
            &f,
            dtype,
            tenjin::planner::Target::Gpu,
            tenjin::planner::passes::LoopRole::Whole,
        )
        .unwrap();
        let got = tenjin::gpu::check::run_loop_kernel(0, &f, &kernel, dtype, &[values]).unwrap();
        let interp = run("tanh(x[i]) * 2 + x[i] / 3", &x, None, dtype);
        assert_eq!(got.len(), n);
        for i in 0..n {
            assert_eq!(
                got[i].to_bits(),
                interp[i].to_bits(),
                "element {i}: GPU {} interpreter {}",
                got[i],
                interp[i]
            );
        }
    }
    let st = tenjin::alloc::stats_for(tenjin::Device::Cuda(0));
    assert!(st.allocations > 0 && st.bytes_in_use == 0, "{st:?}");
}
