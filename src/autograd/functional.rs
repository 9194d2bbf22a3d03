//! The functional API of `torch.autograd.functional`, for a function of
//! one tensor: `vjp`, `jvp`, `hvp`, `jacobian`, `hessian`.
//!
//! Owns the evaluation of the user's function on a fresh leaf (inside
//! [`keep_inputs`](crate::trace::keep_inputs), so that its trace can be
//! differentiated twice) and the composition of gradient walks each
//! function needs. Results are constants (no graph is kept).

use super::forward::tangent;
use super::{grad, jacobian_of};
use crate::tensor::Tensor;
use crate::trace::{self, keep_inputs, no_grad};
use crate::Error;

/// `x` as a new leaf, and `f` evaluated on it with recording on.
fn traced(
    f: impl Fn(&Tensor) -> Result<Tensor, Error>,
    x: &Tensor,
) -> Result<(Tensor, Tensor), Error> {
    let leaf = x.detach().contiguous()?.requires_grad();
    let y = trace::with_grad_enabled(true, || keep_inputs(|| f(&leaf)))?;
    Ok((leaf, y))
}

/// An output that depends on the input, or a zero derivative.
fn depends(y: &Tensor) -> bool {
    y.is_requires_grad()
}

fn scalar(op: &str, y: &Tensor) -> Result<(), Error> {
    if y.numel() != 1 {
        return Err(trace::autograd_error(
            op,
            format!(
                "the function must return one element; it returned shape {:?}",
                y.shape()
            ),
        ));
    }
    Ok(())
}

/// `(f(x), vᵀ·J)`: the vector-Jacobian product, `v` of `f(x)`'s shape.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?;
/// let v = Tensor::from_vec_f64(vec![1.0, 10.0], &[2])?;
/// let (y, g) = autograd::vjp(|x| x.mul(x), &x, &v)?;
/// assert_eq!(y.to_vec_f64()?, vec![1.0, 4.0]);
/// assert_eq!(g.to_vec_f64()?, vec![2.0, 40.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn vjp(
    f: impl Fn(&Tensor) -> Result<Tensor, Error>,
    x: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor), Error> {
    let (leaf, y) = traced(f, x)?;
    if !depends(&y) {
        return Ok((
            y.detach(),
            Tensor::zeros_on(x.shape(), x.dtype(), x.device())?,
        ));
    }
    let g = grad(&[&y], &[&leaf], Some(&[v]), false)?.remove(0);
    Ok((y.detach(), g))
}

/// `(f(x), J·v)`: the Jacobian-vector product, `v` of `x`'s shape, by
/// forward mode: each recorded op's tangent function
/// (`IndexFn::tangent`, the directional derivative as an index function)
/// applied in one pass in the order the ops ran.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0, 3.0], &[3])?;
/// let v = Tensor::from_vec_f64(vec![1.0, 0.0, 1.0], &[3])?;
/// // f(x) = (x₀x₁, x₁x₂): J·v = (x₁·1 + x₀·0, x₂·0 + x₁·1).
/// let f = |x: &Tensor| tenjin::index_fn_with_sizes("f[i] = x[i] * x[i + 1]", &[("x", x)], &[("i", 2)]);
/// let (_, jv) = autograd::jvp(f, &x, &v)?;
/// assert_eq!(jv.to_vec_f64()?, vec![2.0, 2.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn jvp(
    f: impl Fn(&Tensor) -> Result<Tensor, Error>,
    x: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor), Error> {
    let (leaf, y) = traced(f, x)?;
    let jv = match no_grad(|| tangent(&y, &leaf, &v.detach()))? {
        Some(t) => t,
        None => Tensor::zeros_on(y.shape(), y.dtype(), y.device())?,
    };
    Ok((y.detach(), jv))
}

/// `(f(x), H·v)`: the Hessian-vector product of a function returning one
/// element, `v` of `x`'s shape.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?;
/// let v = Tensor::from_vec_f64(vec![1.0, 1.0], &[2])?;
/// // f = Σ x³: H = diag(6x).
/// let (_, hv) = autograd::hvp(|x| x.mul(x)?.mul(x)?.sum(), &x, &v)?;
/// assert_eq!(hv.to_vec_f64()?, vec![6.0, 12.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn hvp(
    f: impl Fn(&Tensor) -> Result<Tensor, Error>,
    x: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor), Error> {
    let (leaf, y) = traced(f, x)?;
    scalar("hvp", &y)?;
    if !depends(&y) {
        return Ok((
            y.detach(),
            Tensor::zeros_on(x.shape(), x.dtype(), x.device())?,
        ));
    }
    let g = grad(&[&y], &[&leaf], None, true)?.remove(0);
    if !g.is_requires_grad() {
        return Ok((
            y.detach(),
            Tensor::zeros_on(x.shape(), x.dtype(), x.device())?,
        ));
    }
    let hv = grad(&[&g], &[&leaf], Some(&[v]), false)?.remove(0);
    Ok((y.detach(), hv))
}

/// The Jacobian of `f` at `x`, of shape `f(x).shape() ++ x.shape()`.
///
/// One walk of the trace carries every row at once (a batch of incoming
/// gradients), and the identity that seeds it is folded into the first
/// derivatives symbolically: no `n` backward passes, no identity matrix.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let a = Tensor::from_vec_f64(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
/// let x = Tensor::from_vec_f64(vec![1., 0., -1.], &[3])?;
/// let j = autograd::jacobian(|x| a.matmul(&x.reshape(&[3, 1])?)?.reshape(&[2]), &x)?;
/// assert_eq!(j.shape(), &[2, 3]);
/// assert_eq!(j.to_vec_f64()?, a.to_vec_f64()?);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn jacobian(f: impl Fn(&Tensor) -> Result<Tensor, Error>, x: &Tensor) -> Result<Tensor, Error> {
    let (leaf, y) = traced(f, x)?;
    let shape: Vec<usize> = y.shape().iter().chain(x.shape()).copied().collect();
    if !depends(&y) {
        return Tensor::zeros_on(&shape, x.dtype(), x.device());
    }
    let j = jacobian_of(&y, &leaf, false)?;
    Ok(j.detach())
}

/// The Hessian of `f` (returning one element) at `x`, of shape
/// `x.shape() ++ x.shape()`.
///
/// The gradient is recorded as index functions; the Jacobian of that
/// gradient is one batched walk with the identity folded in (see
/// [`jacobian`]). For logistic regression the result is the one
/// contraction `Xᵀ·diag(σ(1−σ))·X`, run as a GEMM.
///
/// ```
/// use tenjin::{autograd, Tensor};
/// let x = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?;
/// // f = x₀²·x₁: H = [[2x₁, 2x₀], [2x₀, 0]].
/// let h = autograd::hessian(|x| {
///     tenjin::index_fn("f[] = x[0] * x[0] * x[1]", &[("x", x)])
/// }, &x)?;
/// assert_eq!(h.shape(), &[2, 2]);
/// assert_eq!(h.to_vec_f64()?, vec![4.0, 2.0, 2.0, 0.0]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn hessian(f: impl Fn(&Tensor) -> Result<Tensor, Error>, x: &Tensor) -> Result<Tensor, Error> {
    let (leaf, y) = traced(f, x)?;
    scalar("hessian", &y)?;
    let shape: Vec<usize> = x.shape().iter().chain(x.shape()).copied().collect();
    if !depends(&y) {
        return Tensor::zeros_on(&shape, x.dtype(), x.device());
    }
    let g = grad(&[&y], &[&leaf], None, true)?.remove(0);
    if !g.is_requires_grad() {
        return Tensor::zeros_on(&shape, x.dtype(), x.device());
    }
    let h = jacobian_of(&g, &leaf, false)?;
    Ok(h.detach())
}
