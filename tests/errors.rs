//! Bad input gets an `Err` that says what is wrong, never a panic.

use tenjin::symbolic::IndexFn;
use tenjin::Error;

fn parse_err(src: &str, args: &[(&str, &[usize])]) -> Error {
    IndexFn::parse(src, args).expect_err(src)
}

#[test]
fn syntax_error_names_line_column_and_expectation() {
    match parse_err("f[i] = x[i] +\n  * 2", &[("x", &[3])]) {
        Error::Syntax {
            line,
            column,
            expected,
            found,
        } => {
            assert_eq!((line, column), (2, 3));
            assert!(!expected.is_empty());
            assert_eq!(found, "*");
        }
        e => panic!("expected a syntax error, got {e:?}"),
    }
    match parse_err("f[i] = x[i", &[("x", &[3])]) {
        Error::Syntax { found, .. } => assert_eq!(found, "end of input"),
        e => panic!("expected a syntax error, got {e:?}"),
    }
}

#[test]
fn unknown_argument() {
    let e = parse_err("f[i] = y[i]", &[("x", &[3])]);
    assert!(e.to_string().contains("unknown argument `y`"), "{e}");
}

#[test]
fn rank_mismatch() {
    let e = parse_err("f[i] = x[i; i]", &[("x", &[3])]);
    let msg = e.to_string();
    assert!(
        msg.contains('x') && msg.contains('1') && msg.contains('2'),
        "{msg}"
    );
}

#[test]
fn non_affine_and_non_integer_indices() {
    let e = parse_err("f[i; j] = x[i*j]", &[("x", &[9])]);
    assert!(e.to_string().contains("non-affine"), "{e}");
    let e = parse_err("f[i] = x[i/2]", &[("x", &[9])]);
    assert!(e.to_string().contains("non-integer"), "{e}");
}

#[test]
fn unsizable_index_is_named() {
    let e = parse_err("f[i; j] = x[i + j]", &[("x", &[9])]);
    let msg = e.to_string();
    assert!(
        msg.contains("`i`") && msg.contains("cannot be sized"),
        "{msg}"
    );
}

#[test]
fn unknown_index() {
    let e = parse_err("f[i] = x[j]", &[("x", &[3])]);
    assert!(e.to_string().contains("unknown index `j`"), "{e}");
}

#[test]
fn out_of_bounds_access_is_named() {
    let e = IndexFn::parse_with_sizes("f[i] = sum{k}_0^2 (x[i + k])", &[("x", &[5])], &[("i", 4)])
        .unwrap_err();
    match e {
        Error::OutOfBounds {
            access,
            dimension,
            size,
            ..
        } => {
            assert_eq!(access, "x[i + k]");
            assert_eq!((dimension, size), (0, 5));
        }
        e => panic!("expected OutOfBounds, got {e:?}"),
    }
    // Negative side, inside a dependent sum.
    let e = IndexFn::parse_with_sizes(
        "f[i] = sum{k}_0^(i) (x[i - k - 1])",
        &[("x", &[4])],
        &[("i", 4)],
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e:?}");
}

#[test]
fn guards_make_padded_accesses_valid() {
    IndexFn::parse_with_sizes(
        "f[i] = if {i - 1 >= 0} then (x[i - 1]) else (0)",
        &[("x", &[4])],
        &[("i", 4)],
    )
    .unwrap();
    // `!=` splits into two convex pieces.
    IndexFn::parse(
        "f[i] = if {i != 0} then (x[i] / i) else (x[0])",
        &[("x", &[4])],
    )
    .unwrap();
}

#[test]
fn evaluation_checks_inputs() {
    let f = IndexFn::parse("f[i] = x[i]", &[("x", &[3])]).unwrap();
    let e = f.eval_f64(&[("x", &[1.0, 2.0][..])]).unwrap_err();
    assert!(e.to_string().contains("needs 3 values, got 2"), "{e}");
    let e = f.eval_f64(&[]).unwrap_err();
    assert!(
        e.to_string().contains("no data given for argument `x`"),
        "{e}"
    );
    let e = f
        .eval_f64(&[("x", &[1.0; 3][..]), ("y", &[1.0][..])])
        .unwrap_err();
    assert!(e.to_string().contains("`y` is not an argument"), "{e}");
}

#[test]
fn derive_by_unknown_argument() {
    let f = IndexFn::parse("f[i] = x[i]", &[("x", &[3])]).unwrap();
    let e = f.derive("q").unwrap_err();
    assert!(e.to_string().contains("`q`"), "{e}");
}

#[test]
fn explicit_size_for_unknown_index() {
    let e = IndexFn::parse_with_sizes("f[i] = x[i]", &[("x", &[3])], &[("j", 3)]).unwrap_err();
    assert!(e.to_string().contains("`j`"), "{e}");
}

#[test]
fn conflicting_inferred_sizes() {
    let e = IndexFn::parse("f[i] = x[i] + y[i]", &[("x", &[3]), ("y", &[4])]).unwrap_err();
    assert!(e.to_string().contains("sized 3"), "{e}");
}

/// A dimension named twice in a reduction is an error, not a silent sum
/// over it once.
#[test]
fn a_duplicated_reduction_dimension_is_an_error() {
    let x = tenjin::Tensor::ones(&[2, 3], tenjin::DType::F32).unwrap();
    let e = x.sum_dims(&[1, 1], false).unwrap_err();
    assert!(e.to_string().contains("appears twice"), "{e}");
    assert!(x.mean_dims(&[0, 0], true).is_err());
    assert!(x.sum_dims(&[0, 1], false).is_ok());
}

/// A broadcast whose element count does not fit is refused (it used to
/// wrap, and `sum` of it returned 0).
#[test]
fn an_overflowing_broadcast_is_an_error() {
    let x = tenjin::Tensor::ones(&[2], tenjin::DType::F32).unwrap();
    let e = x.broadcast_to(&[usize::MAX, 2]).unwrap_err();
    assert!(e.to_string().contains("broadcast_to"), "{e}");
    assert!(x.broadcast_to(&[1 << 62, 4, 2]).is_err());
    assert_eq!(
        x.broadcast_to(&[3, 2])
            .unwrap()
            .sum()
            .unwrap()
            .to_vec_f64()
            .unwrap(),
        vec![6.0]
    );
}

/// Random tensors and initialisers too large for memory are
/// `OutOfMemory` errors, as `zeros` is, not aborts.
#[test]
fn huge_random_tensors_are_errors_not_aborts() {
    use tenjin::{nn::init, DType, Error, Tensor};
    let huge = [1_000_000usize, 1_000_000];
    let oom = |r: Result<Tensor, Error>| matches!(r, Err(Error::OutOfMemory { .. }));
    assert!(oom(Tensor::zeros(&huge, DType::F32)));
    assert!(oom(Tensor::randn(&huge, DType::F32, 0)));
    assert!(oom(Tensor::rand(&huge, DType::F64, 0)));
    assert!(oom(init::uniform(&huge, -1.0, 1.0, DType::F32, 0)));
    assert!(oom(init::normal(&huge, 0.0, 1.0, DType::F32, 0)));
    assert!(tenjin::nn::Linear::new(1_000_000, 1_000_000, 0).is_err());
}

/// Views through a rank-0 middle keep their rank (a map into rank 0 has no
/// rows to tell it): the cases of the issue, with values.
#[test]
fn rank_zero_views_of_non_scalars_compose() {
    use tenjin::{DType, Tensor};
    let x = Tensor::from_vec_f64(vec![1.0, 2.0, 3.0], &[3]).unwrap();
    let b = Tensor::full(&[], 10.0, DType::F64).unwrap();
    let y = x.narrow(0, 1, 1).unwrap().squeeze(0).unwrap();
    assert_eq!(y.to_vec_f64().unwrap(), vec![2.0]);
    assert_eq!(y.mul(&b).unwrap().to_vec_f64().unwrap(), vec![20.0]);
    let z = y.unsqueeze(0).unwrap();
    assert_eq!(z.shape(), &[1]);
    assert_eq!(z.exp().unwrap().to_vec_f64().unwrap(), vec![2f64.exp()]);
    let w = Tensor::from_vec_f64(vec![4.0], &[1]).unwrap();
    assert_eq!(
        w.squeeze(0)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .exp()
            .unwrap()
            .to_vec_f64()
            .unwrap(),
        vec![4f64.exp()]
    );
}

/// `f[i] = x[i] + x[i] + …` with 10,000 terms (and distinct shifted
/// terms) used to overflow the stack in `kernel::lower`, even on the main
/// thread; 4,000 distinct terms took 27 s in the register allocator. Long
/// chains are now balanced trees and very large kernels use the
/// single-pass allocator. Run on a 2 MiB thread, as a user's would be.
#[test]
fn long_sums_compile_and_differentiate_on_a_small_stack() {
    use tenjin::Tensor;
    let run = |n: usize, distinct: bool| -> Result<(Vec<f64>, Vec<f64>), Error> {
        let x =
            Tensor::from_vec_f64((0..n + 4).map(|i| i as f64).collect(), &[n + 4])?.requires_grad();
        let terms: Vec<String> = (0..n)
            .map(|k| {
                if distinct {
                    format!("x[i + {k}]")
                } else {
                    "x[i]".into()
                }
            })
            .collect();
        let src = format!("f[i] = {}", terms.join(" + "));
        let y = tenjin::index_fn_with_sizes(&src, &[("x", &x)], &[("i", 4)])?;
        y.sum()?.backward()?;
        Ok((
            y.to_vec_f64()?,
            x.grad().expect("x requires grad").to_vec_f64()?,
        ))
    };
    let on_small_stack = |n, distinct| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || run(n, distinct))
            .expect("spawn")
            .join()
            .expect("no panic")
            .expect("no error")
    };
    let (y, g) = on_small_stack(10_000, false);
    assert_eq!(y, vec![0.0, 10_000.0, 20_000.0, 30_000.0]);
    assert!(g[..4].iter().all(|&d| d == 10_000.0), "{:?}", &g[..4]);
    let start = std::time::Instant::now();
    let n = 4000;
    let (y, g) = on_small_stack(n, true);
    // f[i] = Σ_k (i + k): n·i + n(n-1)/2.
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, (n * i + n * (n - 1) / 2) as f64);
    }
    // x[j] is read by every output i ≤ j with j - i < n.
    for (j, d) in g.iter().enumerate() {
        let expected = (0..4).filter(|&i| i <= j && j - i < n).count() as f64;
        assert_eq!(*d, expected, "x[{j}]");
    }
    eprintln!(
        "4,000 distinct terms, forward and backward: {:?}",
        start.elapsed()
    );
    // One access read by 10,000 distinct products, `x[i] * 1 + x[i] * 2
    // + …`: its adjoint gathered 10,000 contributions in a chain (the
    // derivative's lowering then recursed 10,000 deep and aborted even an
    // 8 MiB main thread); they are summed as a balanced tree now.
    let products = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| -> Result<Vec<f64>, Error> {
            let x = tenjin::Tensor::from_vec_f64(vec![0.0, 1.0, 2.0, 3.0], &[4])?.requires_grad();
            let terms: Vec<String> = (1..=10_000).map(|k| format!("x[i] * {k}")).collect();
            let y = tenjin::index_fn(&format!("f[i] = {}", terms.join(" + ")), &[("x", &x)])?;
            y.sum()?.backward()?;
            x.grad().expect("x requires grad").to_vec_f64()
        })
        .expect("spawn")
        .join()
        .expect("no panic")
        .expect("no error");
    assert_eq!(products, vec![50_005_000.0; 4]);
}
