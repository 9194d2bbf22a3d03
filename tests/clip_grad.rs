//! `nn::utils::clip_grad_norm` and `clip_grad_value` against PyTorch's
//! values in f64 and f32 (`bench/torch_clip_grad.py` →
//! `tests/data/torch_clip_grad.txt`),
//! `Tensor::set_grad`, and the errors.

use tenjin::nn::utils::{clip_grad_norm, clip_grad_value};
use tenjin::{DType, Error, Tensor};

const SHAPES: [&[usize]; 3] = [&[3, 4], &[5], &[2, 2]];

/// Leaves with the gradients of the Python script: `sin(0.7·k)·(1 + k mod 3)`
/// over the running element index `k`, set through `set_grad`.
fn params() -> Result<Vec<Tensor>, Error> {
    params_in(DType::F64)
}

/// As [`params`], in `dtype` (the f64 values rounded, as the script's).
fn params_in(dtype: DType) -> Result<Vec<Tensor>, Error> {
    let mut k = 0;
    let mut out = Vec::new();
    for shape in SHAPES {
        let n: usize = shape.iter().product();
        let g: Vec<f64> = (k..k + n)
            .map(|i| (0.7 * i as f64).sin() * (1 + i % 3) as f64)
            .collect();
        k += n;
        let p = Tensor::zeros(shape, dtype)?.requires_grad();
        p.set_grad(Some(&Tensor::from_vec_f64(g, shape)?.to_dtype(dtype)?))?;
        out.push(p);
    }
    Ok(out)
}

fn all_grads(ps: &[Tensor]) -> Result<Vec<f64>, Error> {
    let mut out = Vec::new();
    for p in ps {
        out.extend(p.grad().expect("a gradient").to_vec_f64()?);
    }
    Ok(out)
}

/// Within 1e-12 relative in f64; in f32 within 2 ulps-ish (the norm's
/// sum is ordered differently from PyTorch's).
fn close(got: f64, want: f64, dtype: DType) -> bool {
    let tol = if dtype == DType::F64 { 1e-12 } else { 3e-7 };
    (got - want).abs() <= tol * want.abs().max(1e-12)
}

fn numbers(line: &str) -> Vec<f64> {
    line.split(' ').map(|v| v.parse().unwrap()).collect()
}

#[test]
fn clipping_follows_pytorch() -> Result<(), Error> {
    let text = include_str!("data/torch_clip_grad.txt");
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let mut cases = 0;
    while let Some(head) = lines.next() {
        let want = numbers(lines.next().unwrap());
        let words: Vec<&str> = head.split(' ').collect();
        let dtype = if words.last() == Some(&"f32") {
            DType::F32
        } else {
            DType::F64
        };
        let ps = params_in(dtype)?;
        match words[0] {
            "norm" => {
                let [max_norm, norm_type, total] =
                    [1, 2, 3].map(|i| words[i].parse::<f64>().unwrap());
                let got = clip_grad_norm(&ps, max_norm, norm_type)?;
                assert!(got.shape().is_empty() && got.dtype() == dtype);
                assert!(
                    close(got.item()?, total, dtype),
                    "{head}: total {}",
                    got.item()?
                );
            }
            _ => clip_grad_value(&ps, words[1].parse().unwrap())?,
        }
        let got = all_grads(&ps)?;
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(*g, *w, dtype),
                "{head}: element {k}: {g} against PyTorch's {w}"
            );
        }
        cases += 1;
    }
    assert_eq!(cases, 14);
    Ok(())
}

#[test]
fn clipping_replaces_gradients_and_keeps_what_the_caller_holds() -> Result<(), Error> {
    let ps = params()?;
    let held = ps[0].grad().unwrap();
    let before = held.to_vec_f64()?;
    clip_grad_norm(&ps, 1.0, 2.0)?;
    assert_eq!(
        held.to_vec_f64()?,
        before,
        "a held gradient keeps its values"
    );
    let after = ps[0].grad().unwrap().to_vec_f64()?;
    assert!(after.iter().zip(&before).all(|(a, b)| a.abs() <= b.abs()));
    assert_ne!(after, before);
    // A parameter without a gradient is skipped; none at all gives 0.
    let bare = Tensor::zeros(&[2], DType::F32)?.requires_grad();
    assert_eq!(
        clip_grad_norm(std::slice::from_ref(&bare), 1.0, 2.0)?.item()?,
        0.0
    );
    assert!(bare.grad().is_none());
    Ok(())
}

#[test]
fn a_nan_gradient_propagates_as_in_pytorch() -> Result<(), Error> {
    let ps = params()?;
    ps[1].set_grad(Some(&Tensor::from_vec_f64(
        vec![1.0, f64::NAN, 0.0, 0.0, 0.0],
        &[5],
    )?))?;
    assert!(clip_grad_norm(&ps, 1.0, 2.0)?.item()?.is_nan());
    assert!(all_grads(&ps)?.iter().all(|g| g.is_nan()));
    Ok(())
}

#[test]
fn clipping_inside_a_training_step() -> Result<(), Error> {
    // The gradient of Σ w²/2 is w: clipped to norm 1, SGD with lr 1 moves
    // w by w/|w|.
    use tenjin::optim::{Optimizer, SgdConfig, SGD};
    let w = Tensor::from_vec_f64(vec![3.0, 4.0], &[2])?.requires_grad();
    let mut opt = SGD::new(
        vec![w.clone()],
        SgdConfig {
            lr: 1.0,
            ..Default::default()
        },
    )?;
    w.mul(&w)?.sum()?.mul_scalar(0.5)?.backward()?;
    let total = clip_grad_norm(std::slice::from_ref(&w), 1.0, 2.0)?;
    opt.step()?;
    assert_eq!(total.item()?, 5.0);
    let v = w.to_vec_f64()?;
    assert!(
        (v[0] - 2.4).abs() < 1e-6 && (v[1] - 3.2).abs() < 1e-6,
        "{v:?}"
    );
    Ok(())
}

#[test]
fn bad_arguments_are_errors_that_change_nothing() -> Result<(), Error> {
    let ps = params()?;
    let before = all_grads(&ps)?;
    for (e, needle) in [
        (clip_grad_norm(&ps, -1.0, 2.0).unwrap_err(), "max_norm"),
        (clip_grad_norm(&ps, 1.0, 0.5).unwrap_err(), "norm_type"),
        (clip_grad_value(&ps, f64::NAN).unwrap_err(), "clip_value"),
    ] {
        assert!(e.to_string().contains(needle), "{e}");
    }
    let not_leaf = ps[0].mul_scalar(2.0)?;
    let e = clip_grad_norm(&[ps[1].clone(), not_leaf], 1.0, 2.0).unwrap_err();
    assert!(e.to_string().contains("not a leaf"), "{e}");
    assert_eq!(all_grads(&ps)?, before);
    // set_grad checks shape, dtype and device.
    let e = ps[1]
        .set_grad(Some(&Tensor::zeros(&[5], DType::F32)?))
        .unwrap_err();
    assert!(e.to_string().contains("set_grad"), "{e}");
    let e = Tensor::zeros(&[5], DType::F64)?.set_grad(None).unwrap_err();
    assert!(e.to_string().contains("does not require a gradient"), "{e}");
    ps[2].set_grad(None)?;
    assert!(ps[2].grad().is_none());
    Ok(())
}
