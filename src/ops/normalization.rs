//! `layer_norm` and `batch_norm`, composed of reductions and broadcasting
//! element-wise ops (each derived as usual; no hand-written backward).

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
        normalize(self, &dims, eps, weight, bias)
    }
}

/// `(x − mean) / √(var + eps) · weight + bias` over `dims`, the
/// statistics kept as size-1 dimensions and broadcast back.
pub(crate) fn normalize(
    x: &Tensor,
    dims: &[usize],
    eps: f64,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Tensor, Error> {
    let mean = x.mean_dims(dims, true)?;
    let centred = x.sub(&mean)?;
    let var = centred.square()?.mean_dims(dims, true)?;
    let mut y = centred.mul(&var.add_scalar(eps)?.rsqrt()?)?;
    if let Some(w) = weight {
        y = y.mul(w)?;
    }
    if let Some(b) = bias {
        y = y.add(b)?;
    }
    Ok(y)
}
