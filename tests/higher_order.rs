//! Derivatives of derivatives through the `Tensor` API: `autograd::grad`
//! with `create_graph` against the symbolic core's second derivatives,
//! `hessian` against JAX's own values (`tests/data/jax_hessians.txt`,
//! made by `bench/jax_hessians.py`), the functional API against itself,
//! and the structure of a Hessian's plan (one GEMM for logistic
//! regression).

use std::collections::HashMap;
use tenjin::symbolic::IndexFn;
use tenjin::{autograd, index_fn, DType, Error, Tensor};

/// A reference array: its shape and values.
type Array = (Vec<usize>, Vec<f64>);
/// `case -> name -> array`.
type Cases = HashMap<String, HashMap<String, Array>>;

/// The JAX reference file, read.
fn jax_data() -> Cases {
    let text = include_str!("data/jax_hessians.txt");
    let mut out: Cases = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, values) = line.split_once(" : ").expect("`head : values`");
        let mut parts = head.split_whitespace();
        let (case, name, shape) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let shape: Vec<usize> = shape
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        let values: Vec<f64> = values
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        out.entry(case.into())
            .or_default()
            .insert(name.into(), (shape, values));
    }
    out
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: element {k}: {a} against {b}"
        );
    }
}

#[test]
fn hessians_equal_jax_in_f64() -> Result<(), Error> {
    let data = jax_data();
    let t = |case: &str, name: &str| -> Tensor {
        let (shape, v) = &data[case][name];
        Tensor::from_vec_f64(v.clone(), shape).unwrap()
    };
    let check = |case: &str, h: Result<Tensor, Error>, x: &Tensor| {
        let h = h.unwrap_or_else(|e| panic!("{case}: {e}"));
        let (shape, want) = &data[case]["hessian"];
        let expect: Vec<usize> = x.shape().iter().chain(x.shape()).copied().collect();
        assert_eq!(h.shape(), &expect[..], "{case}");
        assert_eq!(shape, &expect, "{case}");
        close(case, &h.to_vec_f64().unwrap(), want, 1e-10);
    };

    let (x, y, w) = (t("logreg", "X"), t("logreg", "y"), t("logreg", "w"));
    let logreg = |w: &Tensor| {
        let z = x.matmul(&w.reshape(&[5, 1])?)?.reshape(&[8])?;
        y.neg()?.mul(&z)?.exp()?.add_scalar(1.0)?.log()?.sum()
    };
    check("logreg", autograd::hessian(logreg, &w), &w);

    let (tt, v, u) = (t("mf", "T"), t("mf", "V"), t("mf", "U"));
    let mf = |u: &Tensor| {
        let r = tt.sub(&u.matmul(&v.transpose(0, 1)?)?)?;
        r.mul(&r)?.sum()
    };
    check("mf", autograd::hessian(mf, &u), &u);

    let (x, yy, w) = (
        t("softmax_ce", "X"),
        t("softmax_ce", "Y"),
        t("softmax_ce", "W"),
    );
    let ce = |w: &Tensor| {
        x.matmul(w)?
            .log_softmax(1)?
            .mul(&yy)?
            .sum()?
            .mul_scalar(-1.0 / 6.0)
    };
    check("softmax_ce", autograd::hessian(ce, &w), &w);

    let (x, w2, target, w1) = (
        t("mlp_tanh", "X"),
        t("mlp_tanh", "W2"),
        t("mlp_tanh", "T"),
        t("mlp_tanh", "W1"),
    );
    let mlp = |w1: &Tensor| {
        let r = x.matmul(w1)?.tanh()?.matmul(&w2)?.sub(&target)?;
        r.mul(&r)?.sum()?.mul_scalar(0.5)
    };
    check("mlp_tanh", autograd::hessian(mlp, &w1), &w1);
    Ok(())
}

/// The Tensor API's grad of grad equals the symbolic core's second
/// derivative, `d(dx·w)/dx`, evaluated by the reference interpreter.
#[test]
fn grad_of_grad_equals_the_symbolic_second_derivative() -> Result<(), Error> {
    let cases: &[(&str, &[usize])] = &[
        (
            "f[i] = exp (sum{k}_0^3 (x[i; k] * x[i; k])) * x[i; 0]",
            &[3, 4],
        ),
        (
            "f[i; j] = tanh (x[i; j] * x[j; i]) + sigmoid (x[i; j])",
            &[3, 3],
        ),
        ("f[i] = sum{k}_0^2 (x[i + k] ** 3 * x[2 * i])", &[7]),
        ("f[i] = log (sum{k}_0^3 (exp (x[i; k])))", &[2, 4]),
    ];
    for (k, (src, shape)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let xv: Vec<f64> = (0..n)
            .map(|e| 0.3 * ((e * 7 + k) % 11) as f64 / 11.0 - 0.1)
            .collect();
        let f = IndexFn::parse(src, &[("x", shape)])
            .or_else(|_| IndexFn::parse_with_sizes(src, &[("x", shape)], &[("i", 3)]))?;
        let m: usize = f.output_shape().iter().product();
        let v: Vec<f64> = (0..m).map(|e| 1.0 + 0.5 * e as f64).collect();
        let w: Vec<f64> = (0..n).map(|e| (e as f64 * 0.37).sin()).collect();

        let dx = f.derive("x")?;
        let seed = format!("d{}", f.name());
        let ddx = dx.derive("x")?;
        let want = ddx.eval_f64(&[("x", &xv[..]), (seed.as_str(), &v[..]), ("ddx", &w[..])])?;

        let x = Tensor::from_vec_f64(xv.clone(), shape)?.requires_grad();
        let sizes: Vec<(&str, usize)> = if f.output_shape().len() == 1 {
            vec![("i", f.output_shape()[0])]
        } else {
            vec![]
        };
        let y = autograd::keep_inputs(|| tenjin::index_fn_with_sizes(src, &[("x", &x)], &sizes))?;
        let vt = Tensor::from_vec_f64(v, f.output_shape())?;
        let g = autograd::grad(&[&y], &[&x], Some(&[&vt]), true)?;
        let wt = Tensor::from_vec_f64(w, shape)?;
        let h = autograd::grad(&[&g[0]], &[&x], Some(&[&wt]), false)?;
        close(src, &h[0].to_vec_f64()?, &want, 1e-12);
    }
    Ok(())
}

#[test]
fn functional_api_agrees_with_the_hessian_and_jacobian() -> Result<(), Error> {
    let a = Tensor::randn(&[4, 3], DType::F64, 11)?;
    let f = |x: &Tensor| a.matmul(&x.reshape(&[3, 1])?)?.reshape(&[4])?.tanh();
    let scalar = |x: &Tensor| f(x)?.mul(&f(x)?)?.sum();
    let x = Tensor::randn(&[3], DType::F64, 12)?;
    let v3 = Tensor::randn(&[3], DType::F64, 13)?;
    let v4 = Tensor::randn(&[4], DType::F64, 14)?;

    let j = autograd::jacobian(f, &x)?; // [4, 3]
    assert_eq!(j.shape(), &[4, 3]);
    let (_, jv) = autograd::jvp(f, &x, &v3)?;
    let want = j.matmul(&v3.reshape(&[3, 1])?)?.reshape(&[4])?;
    close("jvp = J·v", &jv.to_vec_f64()?, &want.to_vec_f64()?, 1e-12);
    let (_, vj) = autograd::vjp(f, &x, &v4)?;
    let want = v4.reshape(&[1, 4])?.matmul(&j)?.reshape(&[3])?;
    close("vjp = vᵀ·J", &vj.to_vec_f64()?, &want.to_vec_f64()?, 1e-12);

    let h = autograd::hessian(scalar, &x)?;
    let (_, hv) = autograd::hvp(scalar, &x, &v3)?;
    let want = h.matmul(&v3.reshape(&[3, 1])?)?.reshape(&[3])?;
    close("hvp = H·v", &hv.to_vec_f64()?, &want.to_vec_f64()?, 1e-12);
    let hv = h.to_vec_f64()?;
    for r in 0..3 {
        for c in 0..3 {
            assert!((hv[r * 3 + c] - hv[c * 3 + r]).abs() < 1e-12, "symmetric");
        }
    }
    // Finite differences of the gradient give the Hessian's columns.
    let eps = 1e-6;
    let grad_at = |x: &Tensor| -> Result<Vec<f64>, Error> {
        let (_, g) = autograd::vjp(scalar, x, &Tensor::ones(&[], DType::F64)?)?;
        g.to_vec_f64()
    };
    let x0 = x.to_vec_f64()?;
    for c in 0..3 {
        let mut p = x0.clone();
        p[c] += eps;
        let mut m = x0.clone();
        m[c] -= eps;
        let (gp, gm) = (
            grad_at(&Tensor::from_vec_f64(p, &[3])?)?,
            grad_at(&Tensor::from_vec_f64(m, &[3])?)?,
        );
        for r in 0..3 {
            let fd = (gp[r] - gm[r]) / (2.0 * eps);
            assert!(
                (fd - hv[r * 3 + c]).abs() < 1e-7,
                "H[{r}, {c}]: {} against {fd}",
                hv[r * 3 + c]
            );
        }
    }
    Ok(())
}

/// `backward_create_graph` leaves a recorded gradient in `grad()`.
#[test]
fn backward_with_create_graph_records_the_gradient() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.5, -1.5, 2.0], &[3])?.requires_grad();
    let y = autograd::keep_inputs(|| x.sin()?.mul(&x)?.sum())?;
    y.backward_create_graph(None)?;
    let g = x.grad().unwrap();
    assert!(g.is_requires_grad());
    let xs = x.to_vec_f64()?;
    let want: Vec<f64> = xs.iter().map(|x| x.cos() * x + x.sin()).collect();
    close("grad", &g.to_vec_f64()?, &want, 1e-14);
    x.zero_grad();
    g.sum()?.backward()?;
    let want: Vec<f64> = xs.iter().map(|x| -x.sin() * x + 2.0 * x.cos()).collect();
    close(
        "grad of grad",
        &x.grad().unwrap().to_vec_f64()?,
        &want,
        1e-14,
    );
    Ok(())
}

/// Without `keep_inputs`, in runtime-efficient mode, a freed input is
/// reported by name instead of giving a wrong second derivative.
#[test]
fn a_missing_input_is_an_error_naming_it() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.5, 1.0], &[2])?.requires_grad();
    let y = x.exp()?.mul_scalar(2.0)?.sum()?;
    y.backward()?; // releases what backward saved
    let e = autograd::grad(&[&y], &[&x], None, true).unwrap_err();
    assert!(
        e.to_string().contains("exp") && e.to_string().contains("keep_inputs"),
        "{e}"
    );
    Ok(())
}

/// The Hessian of logistic regression is planned as the contraction
/// `Xᵀ·diag(σ(1−σ))·X`: its last op is a GEMM over `[n, n]`, and no
/// value of `n·n·m` elements is ever formed.
#[test]
fn the_logistic_regression_hessian_is_one_gemm() -> Result<(), Error> {
    let (n, m) = (48, 96);
    let x = Tensor::randn(&[m, n], DType::F32, 1)?;
    let y = Tensor::randn(&[m], DType::F32, 2)?.sign()?;
    let w = Tensor::randn(&[n], DType::F32, 3)?
        .mul_scalar(0.1)?
        .requires_grad();
    let loss = autograd::keep_inputs(|| {
        let z = index_fn(
            "z[i] = sum{j}_0^47 (x[i; j] * w[j])",
            &[("x", &x), ("w", &w)],
        )?;
        y.neg()?.mul(&z)?.exp()?.add_scalar(1.0)?.log()?.sum()
    })?;
    let g = autograd::grad(&[&loss], &[&w], None, true)?;
    let h = autograd::jacobian_of(&g[0], &w, true)?;
    assert_eq!(h.shape(), &[n, n]);
    let e = tenjin::explain(&h)?;
    assert!(
        e.forward
            .iter()
            .any(|s| s.route == "gemm" && s.domain == [n, n]),
        "{e}"
    );
    let work: u64 = e.forward.iter().map(|s| s.work).sum();
    // The GEMM and one element-wise pass of a few operations per element.
    assert!(work <= (n * n * m + 16 * n * m) as u64, "work {work}: {e}");
    // And it is the Hessian: symmetric, equal to Xᵀ·diag(σ(1−σ))·X.
    let hv = h.to_vec_f64()?;
    let (xv, yv, wv) = (x.to_vec_f64()?, y.to_vec_f64()?, w.to_vec_f64()?);
    for a in 0..n {
        for b in 0..n {
            let mut s = 0.0;
            for i in 0..m {
                let z: f64 = (0..n).map(|j| xv[i * n + j] * wv[j]).sum();
                let p = 1.0 / (1.0 + (yv[i] * z).exp());
                s += p * (1.0 - p) * xv[i * n + a] * xv[i * n + b];
            }
            assert!(
                (hv[a * n + b] - s).abs() < 1e-4 * (1.0 + s.abs()),
                "H[{a}, {b}] = {} against {s}",
                hv[a * n + b]
            );
        }
    }
    Ok(())
}

/// `grad` with respect to an intermediate tensor gives the gradient
/// flowing into it; bad requests are errors that say what is wrong.
#[test]
fn grad_of_intermediates_and_its_errors() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.5, -1.0, 2.0], &[3])?.requires_grad();
    let h = x.mul_scalar(3.0)?; // intermediate
    let y = h.tanh()?.sum()?;
    let g = autograd::grad(&[&y], &[&h, &x], None, false)?;
    let hv = h.to_vec_f64()?;
    let dh: Vec<f64> = hv.iter().map(|h| 1.0 - h.tanh().powi(2)).collect();
    close("d y / d h", &g[0].to_vec_f64()?, &dh, 1e-14);
    let dx: Vec<f64> = dh.iter().map(|d| 3.0 * d).collect();
    close("d y / d x", &g[1].to_vec_f64()?, &dx, 1e-14);
    // An input no gradient reaches gets zeros.
    let unused = Tensor::ones(&[2], DType::F64)?.requires_grad();
    let g = autograd::grad(&[&y], &[&unused], None, false)?;
    assert_eq!(g[0].to_vec_f64()?, vec![0.0, 0.0]);

    let constant = Tensor::ones(&[3], DType::F64)?;
    let e = autograd::grad(&[&y], &[&constant], None, false).unwrap_err();
    assert!(e.to_string().contains("does not require a gradient"), "{e}");
    let view = x.narrow(0, 0, 2)?;
    let e = autograd::grad(&[&y], &[&view], None, false).unwrap_err();
    assert!(e.to_string().contains("view"), "{e}");
    let e = autograd::grad(&[&h], &[&x], None, false).unwrap_err();
    assert!(e.to_string().contains("grad_outputs"), "{e}");
    let wrong = Tensor::ones(&[2], DType::F64)?;
    let e = autograd::grad(&[&h], &[&x], Some(&[&wrong]), false).unwrap_err();
    assert!(
        e.to_string().contains("[2]") && e.to_string().contains("[3]"),
        "{e}"
    );
    let e = autograd::hessian(|x| x.exp(), &x).unwrap_err();
    assert!(e.to_string().contains("one element"), "{e}");
    // A function that ignores its input has zero derivatives.
    let h = autograd::hessian(|x| Tensor::ones(&[], x.dtype()), &x)?;
    assert_eq!(h.shape(), &[3, 3]);
    assert!(h.to_vec_f64()?.iter().all(|&v| v == 0.0));
    Ok(())
}
