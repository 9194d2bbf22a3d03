//! Normalisations and losses: `softmax log_softmax cross_entropy
//! cross_entropy_soft mse_loss`.
//!
//! Each is one index function, numerically stable where it exponentiates:
//! log-sum-exp subtracts the row maximum `m` first
//! (`m + log Σ exp(x − m)`, exact for any `m`), written inline for any
//! row length. No op here splits itself by hand: the planner materialises
//! the row statistics (maximum, sum of exponentials) once per row, in the
//! forward pass and in the derivative, so value and gradient stay linear
//! in the row length. The maximum is only a shift (`detach`ed), so the
//! derivative has no argmax in it, and a softmax's derivative reads its
//! saved output and the incoming gradient only (`exp(x − m) / Σ exp(x −
//! m)` found again in it: `crate::symbolic` reuses the output there).

use super::formula::{access, define, indices, reduce, sum_to};
use super::shape::empty_like;
use super::{apply, lit};
use crate::tensor::Dim;
use crate::tensor::Tensor;
use crate::DType;
use crate::Error;

/// `targets` as a one-hot `[B, C]` constant in `dtype`.
fn one_hot(
    targets: &[usize],
    classes: usize,
    dtype: DType,
    device: crate::alloc::Device,
) -> Result<Tensor, Error> {
    let shape = [targets.len(), classes];
    let mut v = vec![0.0f64; targets.len() * classes];
    for (i, &t) in targets.iter().enumerate() {
        v[i * classes + t] = 1.0;
    }
    match dtype {
        DType::F64 => Tensor::from_vec_f64_on(v, &shape, device),
        DType::F32 => {
            Tensor::from_vec_on(v.into_iter().map(|x| x as f32).collect(), &shape, device)
        }
        // 0 and 1 are exact in the half types.
        d if d.is_half() => one_hot(targets, classes, DType::F32, device)?.to_dtype(d),
        d => Err(crate::dtype::not_computable("cross_entropy", d)),
    }
}

/// The cross-entropy of logits `x` `[B, C]` with targets `y` of the same
/// shape, `mean_i (lse_i · Σ_c y[i; c] − Σ_c y[i; c] · x[i; c])` with
/// `lse_i` the stable log-sum-exp of row `i`; `Σ_c y[i; c]` is dropped for
/// one-hot targets (`rows_sum_to_one`).
fn cross_entropy_fn(
    op: &str,
    x: &Tensor,
    y: &Tensor,
    rows_sum_to_one: bool,
) -> Result<Tensor, Error> {
    let (b, c) = (x.shape()[0], x.shape()[1]);
    let (_, lse) = row_statistics(|v| access("x", &["i", v]), c);
    let weighted = if rows_sum_to_one {
        lse
    } else {
        format!("{lse} * {}", sum_to("c", c, "y[i; c]"))
    };
    let row = format!("{weighted} - {}", sum_to("c", c, "y[i; c] * x[i; c]"));
    let body = format!("{} * {}", sum_to("i", b, row), lit(op, 1.0 / b as f64)?);
    let src = define::<&str>("l", &[], body);
    apply(op, &src, &[("x", x), ("y", y)], &[])
}

/// The maximum and the stable log-sum-exp of a row of `n` elements whose
/// element at index variable `v` is `at(v)`, as index-function text. The
/// shift `m` of `m + log Σ exp(x − m)` is `detach`ed: the value does not
/// depend on it, so neither does the derivative, which then reads no
/// argmax and no terms that cancel (JAX's `logsumexp` does the same).
pub(super) fn row_statistics(at: impl Fn(&str) -> String, n: usize) -> (String, String) {
    let max = format!("detach ({})", reduce("max", "m", 0, n as i64 - 1, at("m")));
    let lse = format!(
        "({max} + log ({}))",
        sum_to("k", n, format!("exp ({} - {max})", at("k")))
    );
    (max, lse)
}

/// `f[i…] = body` over `x`, `body` a template where `{x}` is `x` at the
/// output index, `{max}` the maximum along `dim` and `{lse}` the stable
/// log-sum-exp along `dim` (both at the output index's row).
fn along(op: &str, x: &Tensor, dim: usize, body: &str) -> Result<Tensor, Error> {
    if dim >= x.rank() {
        return Err(Error::shape(
            op,
            format!(
                "input of shape {:?}: dimension {dim} does not exist (rank {})",
                x.shape(),
                x.rank()
            ),
        ));
    }
    if x.numel() == 0 {
        return empty_like(x.shape(), x);
    }
    let ix = indices("i", x.rank());
    let at = |var: &str| {
        let mut idx = ix.clone();
        idx[dim] = var.to_string();
        access("x", &idx)
    };
    let (max, lse) = row_statistics(at, x.shape()[dim]);
    let body = body
        .replace("{x}", &access("x", &ix))
        .replace("{max}", &max)
        .replace("{lse}", &lse);
    apply(op, &define("f", &ix, body), &[("x", x)], &[])
}

fn check_logits(op: &str, x: &Tensor, what: &str) -> Result<(usize, usize), Error> {
    let s = x.shape();
    if s.len() != 2 {
        return Err(Error::shape(
            op,
            format!("logits {s:?} and {what}: the logits must be [batch, classes]"),
        ));
    }
    if s[0] == 0 || s[1] == 0 {
        return Err(Error::shape(
            op,
            format!("logits {s:?} and {what}: the mean over an empty batch or over no classes is undefined"),
        ));
    }
    Ok((s[0], s[1]))
}

impl Tensor {
    /// `exp(x) / Σ exp(x)` along `dim`, computed stably (the maximum along
    /// `dim` is subtracted first).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![1000., 1000., 0., 2f64.ln()], &[2, 2])?;
    /// let p = x.softmax(1)?.to_vec_f64()?;
    /// assert!((p[0] - 0.5).abs() < 1e-12 && (p[3] - 2. / 3.).abs() < 1e-12);
    /// assert!(x.softmax(2).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn softmax(&self, dim: impl Dim) -> Result<Tensor, Error> {
        let dim = dim.resolve("softmax", self.shape())?;
        along("softmax", self, dim, "exp ({x} - {lse})")
    }

    /// `x − log Σ exp(x)` along `dim`, computed stably.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![0., 0., 0., 0.], &[4])?;
    /// let l = x.log_softmax(0)?.to_vec_f64()?;
    /// assert!(l.iter().all(|v| (v + 4f64.ln()).abs() < 1e-12));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Tensor, Error> {
        let dim = dim.resolve("log_softmax", self.shape())?;
        along("log_softmax", self, dim, "{x} - {lse}")
    }

    /// The cross-entropy of logits `[B, C]` with class labels (one per
    /// row, each `< C`), averaged over the batch: the mean of
    /// `−log_softmax(x)[i, targets[i]]`, as `torch.nn.functional.cross_entropy`.
    /// One index function (log-sum-exp inside) over the logits and a
    /// constant one-hot matrix.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![0., 0., 5., 1., 1., 1.], &[2, 3])?;
    /// let l = x.cross_entropy(&[2, 0])?.item()?;
    /// let want = ((1. + 1. + 5f64.exp()).ln() - 5. + 3f64.ln()) / 2.;
    /// assert!((l - want).abs() < 1e-12);
    /// assert!(x.cross_entropy(&[3, 0]).is_err()); // label out of range
    /// assert!(x.cross_entropy(&[0]).is_err()); // one label per row
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn cross_entropy(&self, targets: &[usize]) -> Result<Tensor, Error> {
        let what = format!("{} targets", targets.len());
        let (b, c) = check_logits("cross_entropy", self, &what)?;
        if targets.len() != b {
            return Err(Error::shape(
                "cross_entropy",
                format!(
                    "logits {:?} and {what}: one target per row of the logits ({b}) is needed",
                    self.shape()
                ),
            ));
        }
        if let Some(i) = targets.iter().position(|&t| t >= c) {
            return Err(Error::shape(
                "cross_entropy",
                format!(
                    "logits {:?}: target {i} is class {}, but there are only {c} classes (0..{c})",
                    self.shape(),
                    targets[i]
                ),
            ));
        }
        let y = one_hot(targets, c, self.dtype(), self.device())?;
        cross_entropy_fn("cross_entropy", self, &y, true)
    }

    /// The cross-entropy of logits `[B, C]` with target probabilities of
    /// the same shape, averaged over the batch:
    /// `mean_i Σ_c −p[i, c] · log_softmax(x)[i, c]`. Gradients flow into
    /// both arguments.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![0., 0.], &[1, 2])?;
    /// let p = Tensor::from_vec_f64(vec![0.25, 0.75], &[1, 2])?;
    /// assert!((x.cross_entropy_soft(&p)?.item()? - 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn cross_entropy_soft(&self, probs: &Tensor) -> Result<Tensor, Error> {
        let what = format!("targets {:?}", probs.shape());
        check_logits("cross_entropy_soft", self, &what)?;
        if probs.shape() != self.shape() {
            return Err(Error::shape(
                "cross_entropy_soft",
                format!(
                    "logits {:?} and {what}: the target probabilities must have the shape of the logits",
                    self.shape()
                ),
            ));
        }
        cross_entropy_fn("cross_entropy_soft", self, probs, false)
    }

    /// The mean squared difference of two tensors of one shape (no
    /// broadcasting), as `torch.nn.functional.mse_loss`.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let p = Tensor::from_vec_f64(vec![1., 2., 3.], &[3])?;
    /// let t = Tensor::from_vec_f64(vec![1., 0., 0.], &[3])?;
    /// assert!((p.mse_loss(&t)?.item()? - 13. / 3.).abs() < 1e-12);
    /// assert!(p.mse_loss(&Tensor::from_vec_f64(vec![1.], &[1])?).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn mse_loss(&self, target: &Tensor) -> Result<Tensor, Error> {
        if self.shape() != target.shape() {
            return Err(Error::shape(
                "mse_loss",
                format!(
                    "lhs {:?} and rhs {:?}: the prediction and the target must have the same shape (mse_loss does not broadcast)",
                    self.shape(),
                    target.shape()
                ),
            ));
        }
        let n = self.numel();
        if n == 0 {
            return Err(Error::shape(
                "mse_loss",
                format!(
                    "lhs {:?} and rhs {:?}: the mean over no elements is undefined",
                    self.shape(),
                    target.shape()
                ),
            ));
        }
        let ix = indices("i", self.rank());
        let square = format!("({} - {}) ** 2", access("a", &ix), access("b", &ix));
        let total = ix
            .iter()
            .zip(self.shape())
            .rev()
            .fold(square, |body, (i, &s)| sum_to(i, s, body));
        let src = define::<&str>(
            "l",
            &[],
            format!("{total} * {}", lit("mse_loss", 1.0 / n as f64)?),
        );
        apply("mse_loss", &src, &[("a", self), ("b", target)], &[])
    }
}
