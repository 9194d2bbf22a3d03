use tenjin::{DType, Tensor};

#[test]
fn issue_api_paper_function() -> Result<(), tenjin::Error> {
    let mk = |n: usize, shape: &[usize], seed: u64| {
        Tensor::randn(shape, DType::F64, seed)
            .map(|t| t.mul_scalar(0.3).unwrap().requires_grad())
            .map(|t| {
                let _ = n;
                t
            })
    };
    let a = mk(15, &[3, 5], 1)?;
    let b = mk(20, &[4, 5], 2)?;
    let c = mk(9, &[3, 3], 3)?;
    let d = mk(8, &[8], 4)?;
    let f = tenjin::index_fn(
        "f[i;j] = exp(-sum{k}_0^4 ((a[i;k] + b[j;k])**2 * c[i;i] + d[i+k]**3))",
        &[("a", &a), ("b", &b), ("c", &c), ("d", &d)],
    )?;
    let g = Tensor::randn(&[3, 4], DType::F64, 5)?;
    let loss = f.mul(&g)?.sum()?;
    loss.backward()?;
    let ga: Vec<f64> = a.grad().expect("a requires grad").to_vec_f64()?;
    assert_eq!(ga.len(), 15);
    // central differences on a
    let av = a.to_vec_f64()?;
    let eval = |av: &[f64]| -> f64 {
        let a2 = Tensor::from_vec_f64(av.to_vec(), &[3, 5]).unwrap();
        let f = tenjin::index_fn(
            "f[i;j] = exp(-sum{k}_0^4 ((a[i;k] + b[j;k])**2 * c[i;i] + d[i+k]**3))",
            &[
                ("a", &a2),
                ("b", &b.detach()),
                ("c", &c.detach()),
                ("d", &d.detach()),
            ],
        )
        .unwrap();
        f.mul(&g).unwrap().sum().unwrap().item().unwrap()
    };
    for i in 0..15 {
        let mut p = av.clone();
        p[i] += 1e-6;
        let mut m = av.clone();
        m[i] -= 1e-6;
        let fd = (eval(&p) - eval(&m)) / 2e-6;
        assert!(
            (fd - ga[i]).abs() < 1e-6 * (1.0 + fd.abs()),
            "{i}: {fd} vs {}",
            ga[i]
        );
    }
    let f = tenjin::index_fn_with_sizes("f[i] = x[i + 2]", &[("x", &d)], &[("i", 6)])?;
    assert_eq!(f.shape(), &[6]);
    Ok(())
}

#[test]
fn views_and_matmul() -> Result<(), tenjin::Error> {
    let a = Tensor::randn(&[4, 3], DType::F64, 1)?.requires_grad();
    let b = Tensor::randn(&[4, 5], DType::F64, 2)?.requires_grad();
    let y = a.t()?.matmul(&b)?; // [3,5]
    let loss = y.relu()?.sum()?;
    loss.backward()?;
    assert_eq!(a.grad().unwrap().shape(), &[4, 3]);
    let s = tenjin::stats();
    println!("{s}");
    Ok(())
}
