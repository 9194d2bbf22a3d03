//! Losses over integer class labels: `nll_loss` (`nll_loss_weighted`) and
//! `cross_entropy_with` (label smoothing, `ignore_index`, class weights,
//! [`LossReduction`]), as PyTorch's.
//!
//! `nll_loss` picks its log-probabilities with [`Tensor::gather`] (a host
//! stage, see `super::indexing`): `O(B)` work for the pick and its
//! gradient, no one-hot matrix. `cross_entropy_with` is one index
//! function over the logits and the labels as values (`if {t[i] = c}`):
//! its forward pass writes the row statistics only and its derivative is
//! one pass over the logits (`fused`); f32 logits of more than 2²⁴ classes,
//! whose indices f32 cannot compare exactly, take the gathered form.

use super::formula::{access, define, guard, sum_to};
use super::{apply, lit, LossReduction};
use crate::tensor::Tensor;
use crate::Error;

/// Options of [`Tensor::cross_entropy_with`] (PyTorch's keyword
/// arguments; the defaults are PyTorch's).
#[derive(Clone, Copy, Debug)]
pub struct CrossEntropyOptions<'a> {
    /// `ε`: the target is `(1 − ε)` on the label plus `ε / C` on every
    /// class.
    pub label_smoothing: f64,
    /// Rows with this label contribute nothing (and are not counted by
    /// the mean).
    pub ignore_index: Option<i64>,
    pub reduction: LossReduction,
    /// A weight per class `[C]` (PyTorch's `weight`): a row's loss is
    /// scaled by its label's weight (each smoothed class term by its
    /// class's), and the mean divides by the kept rows' label weights
    /// summed. No gradient flows to it.
    pub weight: Option<&'a Tensor>,
}

impl Default for CrossEntropyOptions<'_> {
    fn default() -> Self {
        CrossEntropyOptions {
            label_smoothing: 0.0,
            ignore_index: None,
            reduction: LossReduction::Mean,
            weight: None,
        }
    }
}

/// Integer labels checked against `[B, C]` scores, as the gather reads
/// them (`[B, 1]`, ignored rows pointing at class 0), with the rows kept.
struct Labels {
    ids: Tensor,
    /// The kept-row mask `[B]` when a row is ignored (`None`: all kept).
    mask: Option<Tensor>,
    kept: usize,
}

impl Labels {
    fn new(op: &str, x: &Tensor, labels: &Tensor, ignore: Option<i64>) -> Result<Labels, Error> {
        let s = x.shape();
        if s.len() != 2 || labels.shape() != [s[0]] || labels.dtype().is_float() {
            return Err(Error::shape(
                op,
                format!(
                    "input {s:?} and labels {:?} ({:?}): expected [B, C] scores and B integer labels",
                    labels.shape(),
                    labels.dtype()
                ),
            ));
        }
        // Labels on a device whose range is known from the host are used
        // where they are: no transfer, no wait.
        // (The range is the storage's: a view's labels lie inside it.)
        if let Some((lo, hi)) = super::indexing::known_range(labels) {
            let ignored = ignore.is_some_and(|i| (lo..=hi).contains(&i));
            let in_range = lo >= 0 && (hi as u64) < s[1] as u64;
            if labels.device() != crate::Device::Cpu && in_range && !ignored {
                return Ok(Labels {
                    ids: labels.reshape(&[s[0], 1])?,
                    mask: None,
                    kept: s[0],
                });
            }
        }
        let mut ids = labels.to_vec_i64()?;
        let mut keep = vec![1.0; ids.len()];
        for (k, id) in ids.iter_mut().enumerate() {
            if Some(*id) == ignore {
                keep[k] = 0.0;
                *id = 0;
            } else if *id < 0 || *id as usize >= s[1] {
                return Err(Error::shape(
                    op,
                    format!("label {id} at row {k} is out of range for {} classes", s[1]),
                ));
            }
        }
        let n = ids.len();
        let kept = keep.iter().filter(|&&k| k == 1.0).count();
        let mask = match kept < n {
            true => Some(Tensor::from_vec_f64_on(keep, &[n], x.device())?.to_dtype(x.dtype())?),
            false => None,
        };
        Ok(Labels {
            ids: Tensor::from_host_on("cross_entropy", &ids, &[n, 1], x.device())?,
            mask,
            kept,
        })
    }

    /// Each row's label weight `w[t_i]` (0 on ignored rows) for class
    /// weights `w` `[C]` of `x`'s dtype; an error naming the shapes
    /// otherwise.
    fn label_weights(&self, op: &str, x: &Tensor, w: &Tensor) -> Result<Tensor, Error> {
        let c = x.shape()[1];
        if w.shape() != [c] || w.dtype() != x.dtype() {
            return Err(Error::shape(
                op,
                format!(
                    "class weights {:?} ({:?}) for scores {:?} ({:?}): expected [{c}] of the scores' dtype",
                    w.shape(),
                    w.dtype(),
                    x.shape(),
                    x.dtype()
                ),
            ));
        }
        let n = self.ids.numel();
        let picked = w.detach().index_select(0, &self.ids.reshape(&[n])?)?;
        match &self.mask {
            Some(m) => picked.mul(m),
            None => Ok(picked),
        }
    }

    /// `per_row` (already weighted, ignored rows zeroed) reduced as
    /// PyTorch reduces a class-weighted loss: the mean divides by the sum
    /// of the kept rows' label weights `label_w`.
    fn reduce_weighted(
        &self,
        op: &str,
        per_row: Tensor,
        label_w: &Tensor,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        match reduction {
            LossReduction::None => Ok(per_row),
            LossReduction::Sum => per_row.sum(),
            LossReduction::Mean if self.kept == 0 => Err(no_rows_kept(op)),
            LossReduction::Mean => per_row.sum()?.div(&label_w.sum()?),
        }
    }

    /// `per_row` with ignored rows zeroed, reduced: the mean divides by
    /// the kept rows.
    fn reduce(&self, op: &str, per_row: Tensor, reduction: LossReduction) -> Result<Tensor, Error> {
        let masked = match &self.mask {
            Some(m) => per_row.mul(m)?,
            None => per_row,
        };
        match reduction {
            LossReduction::None => Ok(masked),
            LossReduction::Sum => masked.sum(),
            LossReduction::Mean if self.kept == 0 => Err(no_rows_kept(op)),
            LossReduction::Mean => masked.sum()?.div_scalar(self.kept as f64),
        }
    }
}

/// Whether every class index `< classes` is exact as a value of `dtype`
/// (f32 holds the integers up to 2²⁴), so [`fused`] may compare labels
/// with class indices as numbers.
fn exact_class_values(dtype: crate::DType, classes: usize) -> bool {
    let digits = match dtype {
        crate::DType::F32 => f32::MANTISSA_DIGITS,
        _ => f64::MANTISSA_DIGITS,
    };
    classes as u64 <= 1u64 << digits
}

/// The cross-entropy as one index function over the logits `x` `[B, C]`
/// and the labels as values `t` `[B]`: per row
/// `w_i · (lse_i − (1 − ε)·Σ_c [t_i = c]·x[i; c] − (ε/C)·Σ_c x[i; c])`
/// (`w` the kept-row mask where a row is ignored), then reduced.
///
/// Nothing of size `[B, C]` is written in the forward pass (the row
/// statistics only), and the derivative is one pass,
/// `dx[i; c] = g_i·w_i·(exp(x[i; c] − lse_i) − (1 − ε)·[t_i = c] − ε/C)`:
/// no dense log-probabilities, no scattered one-hot gradient to add.
fn fused(
    op: &str,
    x: &Tensor,
    l: &Labels,
    eps: f64,
    reduction: LossReduction,
) -> Result<Tensor, Error> {
    let (b, c) = (x.shape()[0], x.shape()[1]);
    let t = l.ids.reshape(&[b])?.to_dtype(x.dtype())?;
    let (_, lse) = super::loss::row_statistics(|v| access("x", &["i", v]), c);
    let mut row = lse;
    if eps < 1.0 {
        let pick = sum_to("c", c, guard("t[i] = c", "x[i; c]", "0"));
        row = format!("{row} - {} * {pick}", lit(op, 1.0 - eps)?);
    }
    if eps > 0.0 {
        let all = sum_to("c", c, "x[i; c]");
        row = format!("{row} - {} * {all}", lit(op, eps / c as f64)?);
    }
    let mut args = vec![("x", x), ("t", &t)];
    if let Some(w) = &l.mask {
        row = format!("w[i] * ({row})");
        args.push(("w", w));
    }
    let src = match reduction {
        LossReduction::None => define("l", &["i"], row),
        LossReduction::Sum => define::<&str>("l", &[], sum_to("i", b, row)),
        LossReduction::Mean if l.kept == 0 => return Err(no_rows_kept(op)),
        LossReduction::Mean => define::<&str>(
            "l",
            &[],
            format!(
                "{} * {}",
                sum_to("i", b, row),
                lit(op, 1.0 / l.kept as f64)?
            ),
        ),
    };
    apply(op, &src, &args, &[])
}

/// The cross-entropy from gathered log-probabilities (a dense
/// `log_softmax`, the labels' entries picked): for f32 logits of more
/// than 2²⁴ classes, whose indices [`fused`] could not compare exactly.
fn gathered(
    op: &str,
    x: &Tensor,
    l: &Labels,
    eps: f64,
    reduction: LossReduction,
) -> Result<Tensor, Error> {
    let lp = x.log_softmax(1)?;
    let nll = lp.gather(1, &l.ids)?.reshape(&[l.ids.numel()])?.neg()?;
    let per_row = if eps > 0.0 {
        let smooth = lp.mean_dims(&[1], false)?.neg()?;
        nll.mul_scalar(1.0 - eps)?.add(&smooth.mul_scalar(eps)?)?
    } else {
        nll
    };
    l.reduce(op, per_row, reduction)
}

/// The class-weighted cross-entropy (PyTorch's `weight`), from dense
/// log-probabilities: per row `(1 − ε)·w[t_i]·(−lp[i; t_i]) + (ε/C)·Σ_c
/// w[c]·(−lp[i; c])`, ignored rows zeroed, the mean over `Σ w[t_i]`.
fn class_weighted(
    op: &str,
    x: &Tensor,
    l: &Labels,
    w: &Tensor,
    eps: f64,
    reduction: LossReduction,
) -> Result<Tensor, Error> {
    let label_w = l.label_weights(op, x, w)?;
    let lp = x.log_softmax(1)?;
    let nll = lp.gather(1, &l.ids)?.reshape(&[l.ids.numel()])?.neg()?;
    let mut per_row = nll.mul(&label_w)?.mul_scalar(1.0 - eps)?;
    if eps > 0.0 {
        let smooth = lp.mul(&w.detach())?.sum_dims(&[1], false)?.neg()?;
        let smooth = match &l.mask {
            Some(m) => smooth.mul(m)?,
            None => smooth,
        };
        per_row = per_row.add(&smooth.mul_scalar(eps / x.shape()[1] as f64)?)?;
    }
    l.reduce_weighted(op, per_row, &label_w, reduction)
}

fn no_rows_kept(op: &str) -> Error {
    Error::shape(
        op,
        "every row is ignored: the mean over no rows is undefined".into(),
    )
}

impl Tensor {
    /// The negative log-likelihood of log-probabilities `[B, C]` at integer
    /// `labels` `[B]` (PyTorch's `nll_loss`), with `ignore_index` and
    /// `reduction`.
    ///
    /// ```
    /// use tenjin::{LossReduction, Tensor};
    /// let lp = Tensor::from_vec_f64(vec![-1., -2., -3., -4.], &[2, 2])?;
    /// let y = Tensor::from_vec_i64(vec![1, 0], &[2])?;
    /// assert_eq!(lp.nll_loss(&y, None, LossReduction::Mean)?.item()?, 2.5);
    /// assert_eq!(lp.nll_loss(&y, Some(0), LossReduction::Mean)?.item()?, 2.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn nll_loss(
        &self,
        labels: &Tensor,
        ignore_index: Option<i64>,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        let l = Labels::new("nll_loss", self, labels, ignore_index)?;
        let picked = self.gather(1, &l.ids)?.reshape(&[l.ids.numel()])?;
        l.reduce("nll_loss", picked.neg()?, reduction)
    }

    /// [`Tensor::nll_loss`] with a weight per class `[C]` (PyTorch's
    /// `nll_loss(weight=…)`): each row's term scaled by its label's weight,
    /// the mean divided by the kept rows' weights summed.
    ///
    /// ```
    /// use tenjin::{LossReduction, Tensor};
    /// let lp = Tensor::from_vec_f64(vec![-1., -2., -3., -4.], &[2, 2])?;
    /// let y = Tensor::from_vec_i64(vec![1, 0], &[2])?;
    /// let w = Tensor::from_vec_f64(vec![1., 3.], &[2])?;
    /// // (3·2 + 1·3) / (3 + 1)
    /// assert_eq!(lp.nll_loss_weighted(&y, &w, None, LossReduction::Mean)?.item()?, 2.25);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn nll_loss_weighted(
        &self,
        labels: &Tensor,
        weight: &Tensor,
        ignore_index: Option<i64>,
        reduction: LossReduction,
    ) -> Result<Tensor, Error> {
        let op = "nll_loss";
        let l = Labels::new(op, self, labels, ignore_index)?;
        let label_w = l.label_weights(op, self, weight)?;
        let picked = self.gather(1, &l.ids)?.reshape(&[l.ids.numel()])?;
        l.reduce_weighted(op, picked.neg()?.mul(&label_w)?, &label_w, reduction)
    }

    /// The cross-entropy of logits `[B, C]` with integer `labels` `[B]`,
    /// with PyTorch's `label_smoothing`, `ignore_index` and `reduction`
    /// ([`CrossEntropyOptions`]): `(1 − ε)·nll + ε·mean_c(−log_softmax)`
    /// per row. The label's log-probability is gathered (no one-hot matrix).
    ///
    /// ```
    /// use tenjin::{CrossEntropyOptions, Tensor};
    /// let x = Tensor::from_vec_f64(vec![0., 0., 5., 1., 1., 1.], &[2, 3])?;
    /// let y = Tensor::from_vec_i64(vec![2, 0], &[2])?;
    /// let l = x.cross_entropy_with(&y, CrossEntropyOptions::default())?.item()?;
    /// assert!((l - x.cross_entropy(&[2, 0])?.item()?).abs() < 1e-12);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn cross_entropy_with(
        &self,
        labels: &Tensor,
        options: CrossEntropyOptions,
    ) -> Result<Tensor, Error> {
        let op = "cross_entropy";
        let eps = options.label_smoothing;
        if !(0.0..=1.0).contains(&eps) {
            return Err(Error::shape(
                op,
                format!("label_smoothing {eps} must be in [0, 1]"),
            ));
        }
        let l = Labels::new(op, self, labels, options.ignore_index)?;
        if let Some(w) = options.weight {
            class_weighted(op, self, &l, w, eps, options.reduction)
        } else if exact_class_values(self.dtype(), self.shape()[1]) {
            fused(op, self, &l, eps, options.reduction)
        } else {
            gathered(op, self, &l, eps, options.reduction)
        }
    }
}

/// The gathered form is the fallback only f32 logits of more than 2²⁴
/// classes take; here both forms run on the same small inputs.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_and_gathered_forms_agree_in_value_and_gradient() -> Result<(), Error> {
        assert!(exact_class_values(crate::DType::F32, 1 << 24));
        assert!(!exact_class_values(crate::DType::F32, (1 << 24) + 1));
        assert!(exact_class_values(crate::DType::F64, 1 << 40));
        let logits: Vec<f64> = (0..20).map(|k| ((k * 7) % 11) as f64 / 3.0 - 1.5).collect();
        let labels = Tensor::from_vec_i64(vec![3, 0, 4, 1], &[4])?;
        for (eps, ignore, reduction) in [
            (0.0, None, LossReduction::Mean),
            (0.2, Some(0), LossReduction::Mean),
            (0.1, Some(4), LossReduction::None),
            (1.0, None, LossReduction::Sum),
        ] {
            let run =
                |form: fn(&str, &Tensor, &Labels, f64, LossReduction) -> Result<Tensor, Error>| {
                    let x = Tensor::from_vec_f64(logits.clone(), &[4, 5])?.requires_grad();
                    let l = Labels::new("cross_entropy", &x, &labels, ignore)?;
                    let loss = form("cross_entropy", &x, &l, eps, reduction)?;
                    loss.sum()?.backward()?;
                    Ok::<_, Error>((loss.to_vec_f64()?, x.grad().unwrap().to_vec_f64()?))
                };
            let (fused_value, fused_grad) = run(fused)?;
            let (gathered_value, gathered_grad) = run(gathered)?;
            for (a, b) in fused_value
                .iter()
                .chain(&fused_grad)
                .zip(gathered_value.iter().chain(&gathered_grad))
            {
                assert!(
                    (a - b).abs() < 1e-12,
                    "eps {eps} ignore {ignore:?}: {a} against {b}"
                );
            }
        }
        Ok(())
    }
}
