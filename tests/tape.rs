//! The tracing tape through the public API: gradients of the issue's
//! example against finite differences, accumulation, zero_grad, detach,
//! no_grad, views, released graphs and autograd errors.

use tenjin::{DType, Error, Tensor};

const PAPER: &str = "f[i;j] = exp(-sum{k}_0^4 ((a[i;k] + b[j;k])**2 * c[i;i] + d[i+k]**3))";

fn randn(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    Tensor::randn(shape, DType::F64, seed)
        .unwrap()
        .mul_scalar(scale)
        .unwrap()
}

#[test]
fn the_issue_example_matches_finite_differences() -> Result<(), Error> {
    let a = randn(&[3, 5], 1, 0.3).requires_grad();
    let b = randn(&[4, 5], 2, 0.3).requires_grad();
    let c = randn(&[3, 3], 3, 0.3).requires_grad();
    let d = randn(&[8], 4, 0.3).requires_grad();
    let g = randn(&[3, 4], 5, 1.0);
    let f = tenjin::index_fn(PAPER, &[("a", &a), ("b", &b), ("c", &c), ("d", &d)])?;
    let loss = f.mul(&g)?.sum()?;
    assert_eq!(loss.shape(), &[] as &[usize]);
    loss.backward()?;
    let report = tenjin::gradcheck(
        |t| {
            tenjin::index_fn(
                PAPER,
                &[("a", &t[0]), ("b", &t[1]), ("c", &t[2]), ("d", &t[3])],
            )?
            .mul(&g)?
            .sum()
        },
        &[a.detach(), b.detach(), c.detach(), d.detach()],
    )?;
    assert!(report.full_jacobian && report.compared == 15 + 20 + 9 + 8);
    // The gradients backward left in the leaves are the ones gradcheck checked.
    let by_fd = |t: &Tensor, i: usize| -> f64 {
        let base = [&a, &b, &c, &d].map(|x| x.to_vec_f64().unwrap());
        let eval = |delta: f64| {
            let mut v = base.clone();
            let k = [&a, &b, &c, &d]
                .iter()
                .position(|x| x.shares_data_with(t))
                .unwrap();
            v[k][i] += delta;
            let ts: Vec<Tensor> = v
                .iter()
                .zip([&a, &b, &c, &d])
                .map(|(v, x)| Tensor::from_vec_f64(v.clone(), x.shape()).unwrap())
                .collect();
            tenjin::index_fn(
                PAPER,
                &[("a", &ts[0]), ("b", &ts[1]), ("c", &ts[2]), ("d", &ts[3])],
            )
            .unwrap()
            .mul(&g)
            .unwrap()
            .sum()
            .unwrap()
            .item()
            .unwrap()
        };
        (eval(1e-6) - eval(-1e-6)) / 2e-6
    };
    let gd = d.grad().expect("d requires grad").to_vec_f64()?;
    for (i, gi) in gd.iter().enumerate() {
        assert!((gi - by_fd(&d, i)).abs() < 1e-7, "d[{i}]");
    }
    let f = tenjin::index_fn_with_sizes("f[i] = x[i + 2]", &[("x", &d)], &[("i", 6)])?;
    assert_eq!(f.to_vec_f64()?, d.to_vec_f64()?[2..].to_vec());
    Ok(())
}

#[test]
fn gradients_accumulate_until_zero_grad() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![1., 2., 3.], &[3])?.requires_grad();
    x.square()?.sum()?.backward()?;
    x.square()?.sum()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![4., 8., 12.]);
    // A gradient the user holds does not change under them.
    let held = x.grad().unwrap();
    x.sum()?.backward()?;
    assert_eq!(held.to_vec_f64()?, vec![4., 8., 12.]);
    assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![5., 9., 13.]);
    x.zero_grad();
    assert!(x.grad().is_none());
    x.sum()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![1., 1., 1.]);
    Ok(())
}

#[test]
fn a_value_used_twice_gets_both_gradients() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![0.5, -1.0], &[2])?.requires_grad();
    let y = x.exp()?;
    let loss = y.mul(&y)?.add(&y)?.sum()?; // e^{2x} + e^x
    loss.backward()?;
    let g = x.grad().unwrap().to_vec_f64()?;
    for (gi, xi) in g.iter().zip([0.5f64, -1.0]) {
        assert!((gi - (2.0 * (2.0 * xi).exp() + xi.exp())).abs() < 1e-12);
    }
    Ok(())
}

#[test]
fn views_are_read_in_place_and_their_gradients_reach_the_base() -> Result<(), Error> {
    let m = Tensor::arange(12, DType::F64)?
        .reshape(&[3, 4])?
        .requires_grad();
    let t = m.t()?;
    assert!(t.is_view() && t.shares_data_with(&m));
    let slice = m.slice(1, 1, 4, 2)?; // columns 1 and 3
    let diag = m.diagonal(1)?; // (0,1), (1,2), (2,3)
    let loss = t
        .sum()?
        .add(&slice.mul_scalar(10.0)?.sum()?)?
        .add(&diag.mul_scalar(100.0)?.sum()?)?;
    loss.backward()?;
    let g = m.grad().unwrap().to_vec_f64()?;
    let mut expected = vec![1.0; 12];
    for r in 0..3 {
        expected[r * 4 + 1] += 10.0;
        expected[r * 4 + 3] += 10.0;
        expected[r * 4 + r + 1] += 100.0;
    }
    assert_eq!(g, expected);
    assert!(matches!(t.try_grad(), Err(Error::Autograd { .. })));
    Ok(())
}

#[test]
fn detach_and_no_grad_stop_gradients() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![2.0], &[1])?.requires_grad();
    let y = x.mul(&x.detach())?.sum()?; // d/dx (x · c) = c
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![2.0]);
    let z = tenjin::no_grad(|| x.square())?;
    assert!(!z.is_requires_grad());
    assert!(matches!(z.sum()?.backward(), Err(Error::Autograd { .. })));
    {
        let _guard = tenjin::NoGradGuard::new();
        assert!(!tenjin::trace::is_grad_enabled());
    }
    assert!(tenjin::trace::is_grad_enabled());
    Ok(())
}

#[test]
fn a_released_graph_refuses_a_second_backward() -> Result<(), Error> {
    let x = Tensor::from_vec_f64(vec![1., 2.], &[2])?.requires_grad();
    let loss = x.exp()?.sum()?;
    loss.backward()?;
    let e = loss.backward().unwrap_err();
    assert!(matches!(e, Error::Autograd { .. }), "{e}");
    assert!(e.to_string().contains("already released"), "{e}");
    // Retaining the graph allows it.
    let loss = x.exp()?.sum()?;
    x.zero_grad();
    loss.backward_retaining_graph(None)?;
    loss.backward()?;
    let g = x.grad().unwrap().to_vec_f64()?;
    assert!((g[0] - 2.0 * 1f64.exp()).abs() < 1e-12);
    Ok(())
}

#[test]
fn autograd_errors_are_errors() -> Result<(), Error> {
    let x = Tensor::ones(&[2, 2], DType::F64)?;
    // grad of a tensor that does not require one
    let e = x.try_grad().unwrap_err();
    assert!(e.to_string().contains("does not require a gradient"), "{e}");
    assert!(x.grad().is_none());
    // grad of a non-leaf
    let w = x.clone().requires_grad();
    let y = w.exp()?;
    assert!(y.try_grad().unwrap_err().to_string().contains("not a leaf"));
    // backward on a non-scalar without a gradient
    let e = y.backward().unwrap_err();
    assert!(e.to_string().contains("backward_with"), "{e}");
    // a gradient of the wrong shape or dtype
    assert!(matches!(
        y.backward_with(&Tensor::ones(&[4], DType::F64)?),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        y.backward_with(&Tensor::ones(&[2, 2], DType::F32)?),
        Err(Error::DType { .. })
    ));
    // backward on a tensor nothing requires a gradient for
    assert!(matches!(x.sum()?.backward(), Err(Error::Autograd { .. })));
    Ok(())
}

#[test]
fn shape_and_dtype_errors_name_the_op_the_shapes_and_the_dimension() -> Result<(), Error> {
    let a = Tensor::zeros(&[64, 784], DType::F32)?;
    let b = Tensor::zeros(&[512, 784], DType::F32)?;
    assert_eq!(
        a.matmul(&b).unwrap_err().to_string(),
        "matmul: lhs [64, 784] and rhs [512, 784]: dimension 1 of lhs (784) must equal dimension 0 of rhs (512)"
    );
    let e = a.add(&Tensor::zeros(&[3], DType::F32)?).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }));
    assert!(
        e.to_string().contains("[64, 784]")
            && e.to_string().contains("[3]")
            && e.to_string().contains("dimension 1"),
        "{e}"
    );
    let e = a.add(&Tensor::zeros(&[64, 784], DType::F64)?).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    assert!(e.to_string().starts_with("add:"), "{e}");
    assert!(Tensor::from_vec(vec![1.0; 5], &[2, 3]).is_err());
    assert!(a.reshape(&[7]).is_err());
    assert!(a.narrow(1, 780, 5).is_err());
    assert!(a.permute(&[0, 0]).is_err());
    assert!(a.sum_dims(&[2], false).is_err());
    // A user index function with an out-of-bounds access is refused.
    let x = Tensor::zeros(&[5], DType::F64)?;
    assert!(matches!(
        tenjin::index_fn_with_sizes("f[i] = x[i + 1]", &[("x", &x)], &[("i", 5)]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        tenjin::index_fn("f[i] = x[i", &[("x", &x)]),
        Err(Error::Syntax { .. })
    ));
    Ok(())
}

#[test]
fn creation_and_reading_back() -> Result<(), Error> {
    let t = Tensor::from_vec_f64(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
    assert_eq!(t.t()?.to_vec_f64()?, vec![1., 4., 2., 5., 3., 6.]);
    assert_eq!(
        t.to_dtype(DType::F32)?.to_vec()?,
        vec![1., 2., 3., 4., 5., 6.]
    );
    assert_eq!(Tensor::eye(3, DType::F64)?.sum()?.item()?, 3.0);
    assert_eq!(
        Tensor::full(&[2], 1.5, DType::F32)?.to_vec()?,
        vec![1.5, 1.5]
    );
    assert_ne!(
        Tensor::randn(&[4], DType::F32, 1)?.to_vec()?,
        Tensor::randn(&[4], DType::F32, 2)?.to_vec()?
    );
    let s = Tensor::scalar(4.0, DType::F64)?;
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.sqrt()?.item()?, 2.0);
    Ok(())
}
