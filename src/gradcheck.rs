//! `gradcheck`: derived gradients against central finite differences, in
//! f64, through the public API (like `torch.autograd.gradcheck`).
//!
//! Owns the comparison of the Jacobian that `backward` computes with the
//! one finite differences estimate. Small problems compare the whole
//! Jacobian; large ones compare random projections `vᵀJ` (two per input),
//! which catch any wrong entry with probability one.

use crate::autograd::{grad, keep_inputs};
use crate::tensor::Tensor;
use crate::trace::{no_grad, with_grad_enabled};
use crate::{DType, Error};

/// Tolerances of [`gradcheck_with`]; the defaults are PyTorch's.
#[derive(Clone, Copy, Debug)]
pub struct GradcheckOptions {
    /// Finite-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (of the finite-difference value).
    pub rtol: f64,
    /// Compare the whole Jacobian when it has at most this many entries,
    /// otherwise random projections.
    pub full_jacobian_limit: usize,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
            full_jacobian_limit: 4096,
        }
    }
}

/// What a passing [`gradcheck`] compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradcheckReport {
    /// Jacobian entries (or projected entries) compared.
    pub compared: usize,
    /// Largest `|analytic − numeric|`.
    pub max_abs_error: f64,
    /// Whether the whole Jacobian was compared (otherwise projections).
    pub full_jacobian: bool,
}

/// Checks the gradients of `f` at `inputs` (f64 tensors) against central
/// finite differences. `f` is called on leaves that require a gradient and,
/// for the finite differences, on perturbed constants. Returns a report, or
/// `Err(Error::Autograd)` naming the input, the element and both values of
/// the first mismatch.
///
/// ```
/// use tenjin::Tensor;
/// let x = Tensor::randn(&[3, 4], tenjin::DType::F64, 0)?;
/// let w = Tensor::randn(&[4], tenjin::DType::F64, 1)?;
/// let report = tenjin::gradcheck(|t| t[0].mul(&t[1])?.tanh(), &[x, w])?;
/// assert!(report.max_abs_error < 1e-6);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn gradcheck<F>(f: F, inputs: &[Tensor]) -> Result<GradcheckReport, Error>
where
    F: Fn(&[Tensor]) -> Result<Tensor, Error>,
{
    gradcheck_with(f, inputs, GradcheckOptions::default())
}

/// [`gradcheck`] with explicit tolerances.
pub fn gradcheck_with<F>(
    f: F,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<GradcheckReport, Error>
where
    F: Fn(&[Tensor]) -> Result<Tensor, Error>,
{
    let values: Vec<Vec<f64>> = inputs
        .iter()
        .map(|t| {
            if t.dtype() != DType::F64 {
                return Err(Error::DType {
                    op: "gradcheck".into(),
                    message: format!(
                        "gradcheck runs in f64; an input of shape {:?} is {:?}",
                        t.shape(),
                        t.dtype()
                    ),
                });
            }
            t.to_vec_f64()
        })
        .collect::<Result<_, _>>()?;
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    let constants = |vals: &[Vec<f64>]| -> Result<Vec<Tensor>, Error> {
        vals.iter()
            .zip(&shapes)
            .map(|(v, s)| Tensor::from_vec_f64(v.clone(), s))
            .collect()
    };
    let eval = |vals: &[Vec<f64>]| -> Result<Vec<f64>, Error> {
        no_grad(|| f(&constants(vals)?)?.to_vec_f64())
    };

    let leaves: Vec<Tensor> = constants(&values)?
        .into_iter()
        .map(Tensor::requires_grad)
        .collect();
    let y = f(&leaves)?;
    let n_out = y.numel();
    let n_in: usize = values.iter().map(Vec::len).sum();
    let full = n_out * n_in <= opts.full_jacobian_limit;
    // Output-space directions: unit vectors (whole Jacobian) or two random ones.
    let directions: Vec<Vec<f64>> = if full {
        (0..n_out)
            .map(|j| (0..n_out).map(|k| f64::from(u8::from(j == k))).collect())
            .collect()
    } else {
        (0..2)
            .map(|s| Tensor::randn(&[n_out], DType::F64, 0x9e37 + s).and_then(|t| t.to_vec_f64()))
            .collect::<Result<_, _>>()?
    };
    let mut report = GradcheckReport {
        compared: 0,
        max_abs_error: 0.0,
        full_jacobian: full,
    };
    // Derived: one backward per direction, vᵀJ for every input element.
    let mut analytic: Vec<Vec<Vec<f64>>> = Vec::with_capacity(directions.len());
    for v in &directions {
        leaves.iter().for_each(Tensor::zero_grad);
        // An output no input reaches has a zero Jacobian (the derivative of
        // `sign`, say): finite differences must find zeros too.
        if y.is_requires_grad() {
            y.backward_retaining_graph(Some(&Tensor::from_vec_f64(v.clone(), y.shape())?))?;
        }
        let per_input = leaves
            .iter()
            .zip(&values)
            .map(|(leaf, x)| match leaf.grad() {
                Some(g) => g.to_vec_f64(),
                None => Ok(vec![0.0; x.len()]),
            })
            .collect::<Result<Vec<_>, _>>()?;
        analytic.push(per_input);
    }
    // Numeric: two evaluations per input element give a Jacobian column,
    // projected on every direction.
    for i in 0..values.len() {
        for e in 0..values[i].len() {
            let mut plus = values.to_vec();
            plus[i][e] += opts.eps;
            let mut minus = values.to_vec();
            minus[i][e] -= opts.eps;
            let (fp, fm) = (eval(&plus)?, eval(&minus)?);
            for (d, v) in directions.iter().enumerate() {
                let numeric: f64 = fp
                    .iter()
                    .zip(&fm)
                    .zip(v)
                    .map(|((p, m), w)| (p - m) / (2.0 * opts.eps) * w)
                    .sum();
                let derived = analytic[d][i][e];
                let err = (derived - numeric).abs();
                // Negated on purpose: a NaN on either side fails the check.
                let within = err <= opts.atol + opts.rtol * numeric.abs();
                if !within {
                    return Err(Error::Autograd {
                        op: "gradcheck".into(),
                        message: format!(
                            "input {i} (shape {:?}), element {e}, output direction {d}: derived gradient {derived} but finite differences give {numeric} (|difference| {err})",
                            shapes[i]
                        ),
                    });
                }
                report.max_abs_error = report.max_abs_error.max(err);
                report.compared += 1;
            }
        }
    }
    Ok(report)
}

/// Checks second derivatives: the gradients of `f` at `inputs`, contracted
/// with a fixed random `v` of the output's shape, are themselves checked
/// with [`gradcheck`] as a function of the inputs and of `v` (like
/// `torch.autograd.gradgradcheck`). The gradients are built with
/// [`crate::autograd::grad`] and `create_graph`, so what is compared is
/// tenjin's derivative of its own recorded derivative.
///
/// ```
/// use tenjin::Tensor;
/// let x = Tensor::randn(&[3], tenjin::DType::F64, 0)?;
/// let report = tenjin::gradgradcheck(|t| t[0].tanh()?.mul(&t[0]), &[x])?;
/// assert!(report.compared > 0);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn gradgradcheck<F>(f: F, inputs: &[Tensor]) -> Result<GradcheckReport, Error>
where
    F: Fn(&[Tensor]) -> Result<Tensor, Error>,
{
    gradgradcheck_with(f, inputs, GradcheckOptions::default())
}

/// [`gradgradcheck`] with explicit tolerances.
pub fn gradgradcheck_with<F>(
    f: F,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<GradcheckReport, Error>
where
    F: Fn(&[Tensor]) -> Result<Tensor, Error>,
{
    let n = inputs.len();
    let out_shape = no_grad(|| f(inputs))?.shape().to_vec();
    let count: usize = out_shape.iter().product();
    let v = Tensor::randn(&[count], DType::F64, 0x5eed)?.reshape(&out_shape)?;
    let grads = |t: &[Tensor]| -> Result<Tensor, Error> {
        let recording = t.iter().any(Tensor::is_requires_grad);
        with_grad_enabled(true, || {
            let xs: Vec<Tensor> = t[..n]
                .iter()
                .map(|x| {
                    if x.is_requires_grad() {
                        x.clone()
                    } else {
                        x.detach().requires_grad()
                    }
                })
                .collect();
            let y = keep_inputs(|| f(&xs))?;
            let flat: Vec<Tensor> = if y.is_requires_grad() {
                let refs: Vec<&Tensor> = xs.iter().collect();
                grad(&[&y], &refs, Some(&[&t[n]]), recording)?
            } else {
                xs.iter()
                    .map(|x| Tensor::zeros(x.shape(), x.dtype()))
                    .collect::<Result<_, _>>()?
            }
            .iter()
            .map(|g| g.reshape(&[g.numel()]))
            .collect::<Result<_, _>>()?;
            let refs: Vec<&Tensor> = flat.iter().collect();
            Tensor::cat(&refs, 0)
        })
    };
    let mut all = inputs.to_vec();
    all.push(v);
    gradcheck_with(grads, &all, opts)
}
