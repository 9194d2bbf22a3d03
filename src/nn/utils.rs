//! Gradient clipping between `backward` and an optimizer's `step`:
//! [`clip_grad_norm`] and [`clip_grad_value`], PyTorch's
//! `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_`
//! ([`clip_grad_norm_error_if_nonfinite`] with `error_if_nonfinite=True`).
//!
//! Everything stays on the gradients' device: the total norm is a scalar
//! tensor there, the clipping coefficient is computed there (one kernel
//! for the norm of all gradients, one for the coefficient), and each
//! gradient is scaled by one element-wise kernel (no value is read back to
//! the host, so a GPU step does not wait). A gradient is scaled in place
//! when only its parameter holds it; one the caller still holds keeps its
//! values (as gradient accumulation promises) and the parameter gets a
//! new, scaled one. Parameters without a gradient are skipped.
//!
//! Owns the clipping arithmetic; reaches gradients through `Tensor::grad`,
//! `Tensor::set_grad` and, to scale one in place, the leaf's
//! `with_sole_grad` with the optimizers' in-place `optim::Update`.

use crate::alloc::Device;
use crate::optim::Update;
use crate::trace::Origin;
use crate::{DType, Error, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Scales the gradients of `params` so that their total `norm_type`-norm
/// (the norm of all their elements together) is at most `max_norm`: each
/// is multiplied by `min(max_norm / (total + 1e-6), 1)`, as PyTorch does.
/// Returns the total norm before clipping, a scalar tensor on the
/// gradients' device. `norm_type` is any `p ≥ 1` or `f64::INFINITY` (the
/// largest magnitude). A non-finite total (a NaN or ∞ in a gradient)
/// propagates into every gradient, as in PyTorch with
/// `error_if_nonfinite=False`.
///
/// ```
/// use tenjin::nn::utils::clip_grad_norm;
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![3.0, 4.0], &[2])?.requires_grad();
/// w.mul(&w)?.sum()?.div_scalar(2.0)?.backward()?;     // gradient (3, 4), norm 5
/// let total = clip_grad_norm(&[w.clone()], 1.0, 2.0)?;
/// assert_eq!(total.item()?, 5.0);
/// let g = w.grad().unwrap().to_vec_f64()?;
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64, norm_type: f64) -> Result<Tensor, Error> {
    clip_norm(params, max_norm, norm_type, false)
}

/// [`clip_grad_norm`] with PyTorch's `error_if_nonfinite=True`: a NaN or
/// infinite total norm is an error naming it, and the gradients are left
/// as they were. Checking reads the total back to the host, so on a GPU
/// the step waits for it here, as PyTorch's does.
///
/// ```
/// use tenjin::nn::utils::clip_grad_norm_error_if_nonfinite;
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?.requires_grad();
/// w.set_grad(Some(&Tensor::from_vec_f64(vec![f64::INFINITY, 1.0], &[2])?))?;
/// let e = clip_grad_norm_error_if_nonfinite(&[w.clone()], 1.0, 2.0).unwrap_err();
/// assert!(e.to_string().contains("non-finite"), "{e}");
/// assert_eq!(w.grad().unwrap().to_vec_f64()?[1], 1.0); // unchanged
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn clip_grad_norm_error_if_nonfinite(
    params: &[Tensor],
    max_norm: f64,
    norm_type: f64,
) -> Result<Tensor, Error> {
    clip_norm(params, max_norm, norm_type, true)
}

fn clip_norm(
    params: &[Tensor],
    max_norm: f64,
    norm_type: f64,
    error_if_nonfinite: bool,
) -> Result<Tensor, Error> {
    if !(max_norm.is_finite() && max_norm >= 0.0) {
        return Err(invalid(format!(
            "max_norm must be finite and >= 0, got {max_norm}"
        )));
    }
    if norm_type.is_nan() || norm_type < 1.0 {
        return Err(invalid(format!(
            "norm_type must be >= 1 (or infinite), got {norm_type}"
        )));
    }
    let grads = gradients(params)?;
    if grads.is_empty() {
        return Tensor::scalar(0.0, crate::DType::F32);
    }
    // One kernel over every gradient: Σ|g|ᵖ (or max |g|) of each,
    // combined and rooted.
    let flat: Vec<Tensor> = grads
        .iter()
        .map(|(_, g)| g.reshape(&[g.numel()]))
        .collect::<Result<_, _>>()?;
    let names: Vec<String> = (0..flat.len()).map(|k| format!("g{k}")).collect();
    let term = |k: usize| {
        let (g, last) = (&names[k], flat[k].numel().saturating_sub(1));
        if norm_type == f64::INFINITY {
            format!("max{{i}}_0^{last} (abs {g}[i])")
        } else if norm_type == 2.0 {
            format!("sum{{i}}_0^{last} ({g}[i] * {g}[i])")
        } else {
            format!("sum{{i}}_0^{last} (abs {g}[i] ** {norm_type:?})")
        }
    };
    let terms: Vec<String> = (0..flat.len()).map(term).collect();
    let body = if norm_type == f64::INFINITY {
        terms
            .into_iter()
            .reduce(|a, b| format!("max({a}, {b})"))
            .unwrap_or_default()
    } else if norm_type == 2.0 {
        format!("sqrt ({})", terms.join(" + "))
    } else {
        format!("({}) ** {:?}", terms.join(" + "), 1.0 / norm_type)
    };
    let args: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&flat).collect();
    let norm = crate::index_fn(&format!("n[] = {body}"), &args)?;
    if error_if_nonfinite {
        let total = norm.item()?;
        if !total.is_finite() {
            return Err(invalid(format!(
                "the total norm of order {norm_type} of the gradients of {} parameters is non-finite ({total}), so they cannot be clipped (error_if_nonfinite)",
                params.len()
            )));
        }
    }
    let coef = crate::index_fn(
        &format!("c[] = min({max_norm:?} / (n[] + 0.000001), 1)"),
        &[("n", &norm)],
    )?;
    drop((flat, grads)); // so that each gradient is the leaf's alone
    for p in params {
        scale_grad(p, &coef)?;
    }
    Ok(norm)
}

/// Clamps every gradient element of `params` to `[-clip_value,
/// clip_value]` (PyTorch's `clip_grad_value_`), one element-wise pass per
/// gradient; NaN stays NaN.
///
/// ```
/// use tenjin::nn::utils::clip_grad_value;
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![3.0, -0.5], &[2])?.requires_grad();
/// w.mul(&w)?.sum()?.backward()?;                       // gradient (6, -1)
/// clip_grad_value(&[w.clone()], 2.0)?;
/// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![2.0, -1.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn clip_grad_value(params: &[Tensor], clip_value: f64) -> Result<(), Error> {
    if !(clip_value.is_finite() && clip_value >= 0.0) {
        return Err(invalid(format!(
            "clip_value must be finite and >= 0, got {clip_value}"
        )));
    }
    for (p, g) in gradients(params)? {
        p.set_grad(Some(&g.clamp(-clip_value, clip_value)?))?;
    }
    Ok(())
}

/// `grad ← grad·coef` for `p` (a leaf; skipped without a gradient): one
/// element-wise pass over the gradient's own block when only the leaf
/// holds it (the optimizers' in-place `Update`), else into a new block
/// that replaces it.
pub(crate) fn scale_grad(p: &Tensor, coef: &Tensor) -> Result<(), Error> {
    let Origin::Leaf(leaf) = p.origin() else {
        return Ok(()); // `gradients` accepted only leaves
    };
    let update = scale_update(p.numel(), p.dtype(), p.device())?;
    let c = coef.storage_and_origin().0;
    let done = leaf.with_sole_grad(|g| {
        if g.len() != p.numel() || g.dtype() != p.dtype() {
            return Ok(false);
        }
        update.run(|name| if name == "g" { Some(g) } else { Some(c) })?;
        Ok(true)
    })?;
    match p.try_grad()? {
        Some(g) if !done => p.set_grad(Some(&g.mul(coef)?)),
        _ => Ok(()),
    }
}

/// The compiled in-place `g[i] = g[i] * c[]` for `n` elements of `dtype`
/// on `device`, made once per size.
fn scale_update(n: usize, dtype: DType, device: Device) -> Result<Arc<Update>, Error> {
    type Updates = Mutex<HashMap<(usize, DType, Device), Arc<Update>>>;
    static UPDATES: OnceLock<Updates> = OnceLock::new();
    let updates = UPDATES.get_or_init(Default::default);
    let key = (n, dtype, device);
    if let Some(u) = updates.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(u.clone());
    }
    let shape = [n];
    let u = Arc::new(Update::new(
        "scale[i] = g[i] * c[]",
        &[("g", &shape[..]), ("c", &[][..])],
        "g",
        (dtype, device),
    )?);
    updates
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, u.clone());
    Ok(u)
}

/// The parameters that have a gradient, with it; an error for a tensor
/// that is not a leaf requiring a gradient.
pub(crate) fn gradients(params: &[Tensor]) -> Result<Vec<(&Tensor, Tensor)>, Error> {
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        if let Some(g) = p.try_grad()? {
            out.push((p, g));
        }
    }
    Ok(out)
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        function: "clip_grad".into(),
        message,
    }
}
