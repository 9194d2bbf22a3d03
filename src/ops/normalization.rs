//! `layer_norm` and `batch_norm`'s normalisation: one index function each
//! (mean and variance inline, derived as usual; no hand-written backward).

use super::formula::{access, define, indices};
use super::reduce::Reduction;
use super::shape::empty_like;
use super::statistics::variance_body;
use super::{apply, lit};
use crate::tensor::Tensor;
use crate::Error;

impl Tensor {
    /// Layer normalisation over the last `normalized` dimensions:
    /// `(x − mean) / √(var + eps) · weight + bias` with the biased variance
    /// (PyTorch's `layer_norm(x, x.shape[-normalized:], weight, bias, eps)`).
    /// `weight` and `bias` have the normalised dimensions' shape.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![1., 3., 2., 2.], &[2, 2])?;
    /// let y = x.layer_norm(1, None, None, 0.0)?.to_vec_f64()?;
    /// assert_eq!(y[..2], [-1., 1.]);
    /// assert!(y[2].is_nan()); // a constant row has no spread (eps = 0)
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn layer_norm(
        &self,
        normalized: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor, Error> {
        let r = self.rank();
        if normalized == 0 || normalized > r {
            return Err(Error::shape(
                "layer_norm",
                format!(
                    "input of shape {:?}: cannot normalise over the last {normalized} dimensions",
                    self.shape()
                ),
            ));
        }
        let inner = &self.shape()[r - normalized..];
        for (what, t) in [("weight", weight), ("bias", bias)] {
            if let Some(t) = t {
                if t.shape() != inner {
                    return Err(Error::shape(
                        "layer_norm",
                        format!(
                            "input of shape {:?}: the {what} has shape {:?}, the normalised dimensions {inner:?}",
                            self.shape(),
                            t.shape()
                        ),
                    ));
                }
            }
        }
        let dims: Vec<usize> = (r - normalized..r).collect();
        normalize("layer_norm", self, &dims, eps, weight, bias)
    }
}

/// `(x − mean) / √(var + eps) · weight + bias` over `dims`: one index
/// function of `x`, `weight` and `bias` (the last two broadcast to `x`'s
/// shape, as views). The planner materialises the mean and the variance
/// once per normalised group, in the forward pass and in the derivative;
/// the value is one pass over `x` after them, and the gradients of all
/// three arguments come from one backward program (the row sums the
/// derivative of `x` needs and the column sums of `weight` and `bias`).
pub(crate) fn normalize(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    eps: f64,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Tensor, Error> {
    if x.numel() == 0 {
        return empty_like(x.shape(), x);
    }
    let r = Reduction::new(op, x.shape(), dims, false)?;
    let ix = indices("i", x.rank());
    let mean = format!(
        "{} * {}",
        r.wrap("sum", "m"),
        lit(op, 1.0 / r.count() as f64)?
    );
    let var = variance_body(op, &r, 0)?;
    let mut body = format!(
        "({} - {mean}) / sqrt ({var} + {})",
        access("x", &ix),
        lit(op, eps)?
    );
    let mut args: Vec<(&str, Tensor)> = vec![("x", x.clone())];
    for (name, t, join) in [("w", weight, "*"), ("b", bias, "+")] {
        if let Some(t) = t {
            body = format!("{body} {join} {}", access(name, &ix));
            args.push((name, t.broadcast_to(x.shape())?));
        }
    }
    let args: Vec<(&str, &Tensor)> = args.iter().map(|(n, t)| (*n, t)).collect();
    apply(op, &define("f", &ix, body), &args, &[])
}
