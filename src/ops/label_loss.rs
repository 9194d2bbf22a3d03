//! Losses over integer class labels: `nll_loss` and `cross_entropy_with`
//! (label smoothing, `ignore_index`, [`LossReduction`]), as PyTorch's.
//!
//! The picked log-probabilities come from [`Tensor::gather`] (a host
//! stage, see `super::indexing`): `O(B)` work for the pick and its
//! gradient, no one-hot matrix. The rest is ordinary recorded ops.

use super::LossReduction;
use crate::tensor::Tensor;
use crate::Error;

/// Options of [`Tensor::cross_entropy_with`] (PyTorch's keyword
/// arguments; the defaults are PyTorch's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// `ε`: the target is `(1 − ε)` on the label plus `ε / C` on every
    /// class.
    pub label_smoothing: f64,
    /// Rows with this label contribute nothing (and are not counted by
    /// the mean).
    pub ignore_index: Option<i64>,
    pub reduction: LossReduction,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            label_smoothing: 0.0,
            ignore_index: None,
            reduction: LossReduction::Mean,
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
            LossReduction::Mean if self.kept == 0 => Err(Error::shape(
                op,
                "every row is ignored: the mean over no rows is undefined".into(),
            )),
            LossReduction::Mean => masked.sum()?.div_scalar(self.kept as f64),
        }
    }
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
        let lp = self.log_softmax(1)?;
        let nll = lp.gather(1, &l.ids)?.reshape(&[l.ids.numel()])?.neg()?;
        let per_row = if eps > 0.0 {
            let smooth = lp.mean_dims(&[1], false)?.neg()?;
            nll.mul_scalar(1.0 - eps)?.add(&smooth.mul_scalar(eps)?)?
        } else {
            nll
        };
        l.reduce(op, per_row, options.reduction)
    }
}
