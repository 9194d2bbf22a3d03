//! Losses that compare a prediction with a target element by element:
//! `l1_loss mse_loss_with smooth_l1_loss binary_cross_entropy_with_logits`,
//! each with a
//! [`LossReduction`] (PyTorch's `reduction=`).
//!
//! Each loss is a table row: the element's loss as text over `{x}` (the
//! prediction) and `{y}` (the target); the reduction wraps it in sums, so
//! the whole loss is one index function.

use super::formula::{access, define, indices, sum_to};
use super::{apply, lit};
use crate::tensor::Tensor;
use crate::Error;

/// How a loss reduces its per-element values (PyTorch's `reduction=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReduction {
    /// The per-element losses, in the input's shape.
    None,
    Sum,
    Mean,
}

/// Per-element losses: name and body over `{x}`, `{y}` and `{beta}`.
const POINTWISE: &[(&str, &str)] = &[
    ("l1_loss", "abs ({x} - {y})"),
    ("mse_loss", "({x} - {y}) * ({x} - {y})"),
    (
        "smooth_l1_loss",
        "if {abs ({x} - {y}) < {beta}} then (0.5 * ({x} - {y}) ** 2 / {beta}) else (abs ({x} - {y}) - 0.5 * {beta})",
    ),
    // max(x, 0) − x·y + log(1 + e^(−|x|)), stable for any logit, written
    // per sign so that each branch's derivative is exactly σ(x) − y (the
    // `max`/`abs` form would send 1/2 too much at x = 0).
    (
        "binary_cross_entropy_with_logits",
        "if {{x} >= 0} then ((1 - {y}) * {x} + log1p (exp (-{x}))) else (log1p (exp ({x})) - {x} * {y})",
    ),
];

fn pointwise(
    name: &str,
    x: &Tensor,
    y: &Tensor,
    beta: f64,
    reduction: LossReduction,
) -> Result<Tensor, Error> {
    if x.shape() != y.shape() {
        return Err(Error::shape(
            name,
            format!(
                "lhs {:?} and rhs {:?}: the prediction and the target must have the same shape ({name} does not broadcast)",
                x.shape(),
                y.shape()
            ),
        ));
    }
    let n = x.numel();
    if n == 0 && reduction == LossReduction::Mean {
        return Err(Error::shape(
            name,
            format!(
                "lhs {:?}: the mean over no elements is undefined",
                x.shape()
            ),
        ));
    }
    let template = POINTWISE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .ok_or_else(|| Error::shape(name, "not a pointwise loss".into()))?;
    let ix = indices("i", x.rank());
    let body = template
        .replace("{x}", &access("x", &ix))
        .replace("{y}", &access("y", &ix))
        .replace("{beta}", &lit(name, beta)?);
    let args = [("x", x), ("y", y)];
    if reduction == LossReduction::None {
        let sizes = super::formula::sizes("i", x.shape());
        return apply(
            name,
            &define("f", &ix, body),
            &args,
            &super::formula::size_refs(&sizes),
        );
    }
    let total = ix
        .iter()
        .zip(x.shape())
        .rev()
        .fold(body, |body, (i, &s)| sum_to(i, s, body));
    let total = match reduction {
        LossReduction::Mean => format!("{total} * {}", lit(name, 1.0 / n as f64)?),
        _ => total,
    };
    apply(name, &define::<&str>("l", &[], total), &args, &[])
}

impl Tensor {
    /// `|x − y|`, reduced (PyTorch's `l1_loss`).
    ///
    /// ```
    /// use tenjin::{LossReduction, Tensor};
    /// let p = Tensor::from_vec_f64(vec![1., 2.], &[2])?;
    /// let t = Tensor::from_vec_f64(vec![0., 4.], &[2])?;
    /// assert_eq!(p.l1_loss(&t, LossReduction::Mean)?.item()?, 1.5);
    /// assert_eq!(p.l1_loss(&t, LossReduction::None)?.to_vec_f64()?, vec![1., 2.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn l1_loss(&self, target: &Tensor, reduction: LossReduction) -> Result<Tensor, Error> {
        pointwise("l1_loss", self, target, 1.0, reduction)
    }

    /// `(x − y)²` per element, reduced as asked (PyTorch's
    /// `mse_loss(reduction=…)`; [`Tensor::mse_loss`] is the mean).
    ///
    /// ```
    /// use tenjin::{LossReduction, Tensor};
    /// let p = Tensor::from_vec_f64(vec![1., 2.], &[2])?;
    /// let t = Tensor::from_vec_f64(vec![0., 4.], &[2])?;
    /// assert_eq!(p.mse_loss_with(&t, LossReduction::Sum)?.item()?, 5.0);
    /// assert_eq!(p.mse_loss_with(&t, LossReduction::None)?.to_vec_f64()?, vec![1., 4.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn mse_loss_with(
        &self,
        target: &Tensor,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        pointwise("mse_loss", self, target, 1.0, reduction)
    }

    /// Huber-like smooth L1: `0.5·d²/β` where `|d| < β`, else `|d| − β/2`,
    /// `d = x − y` (PyTorch's `smooth_l1_loss(beta=β)`; `β > 0`).
    pub fn smooth_l1_loss(
        &self,
        target: &Tensor,
        beta: f64,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        if beta.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Err(Error::shape(
                "smooth_l1_loss",
                format!("beta = {beta} must be positive (β = 0 is l1_loss)"),
            ));
        }
        pointwise("smooth_l1_loss", self, target, beta, reduction)
    }

    /// Binary cross-entropy of logits `x` against probabilities `y`:
    /// `max(x, 0) − x·y + log(1 + e^(−|x|))`, stable for any logit, with the
    /// gradient `σ(x) − y` everywhere
    /// (PyTorch's `binary_cross_entropy_with_logits`).
    ///
    /// ```
    /// use tenjin::{LossReduction, Tensor};
    /// let x = Tensor::from_vec_f64(vec![0.0, 1000.0], &[2])?;
    /// let y = Tensor::from_vec_f64(vec![1.0, 1.0], &[2])?;
    /// let l = x.binary_cross_entropy_with_logits(&y, LossReduction::None)?.to_vec_f64()?;
    /// assert!((l[0] - 2f64.ln()).abs() < 1e-15 && l[1] == 0.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn binary_cross_entropy_with_logits(
        &self,
        target: &Tensor,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        pointwise(
            "binary_cross_entropy_with_logits",
            self,
            target,
            1.0,
            reduction,
        )
    }
}
