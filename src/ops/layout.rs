//! `reshape` and `contiguous`: the two layout changes that may copy (a
//! view is copied, recorded, before it is reshaped). Views that never copy
//! are `crate::tensor::view`'s.

use super::formula::{access, define, indices};
use crate::tensor::view::view_error;
use crate::tensor::Tensor;
use crate::Error;

impl Tensor {
    /// The same elements in row-major order with another shape. Dense data
    /// is shared (no copy); a view is copied first.
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(6, tenjin::DType::F32)?;
    /// let m = x.reshape(&[2, 3])?;
    /// assert!(m.shares_data_with(&x));
    /// assert!(x.reshape(&[4, 2]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor, Error> {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            return Err(view_error(
                "reshape",
                self.shape(),
                format!(
                    "{} elements cannot take the shape {shape:?} ({n} elements)",
                    self.numel()
                ),
            ));
        }
        if self.is_view() {
            return self.contiguous()?.reshape(shape);
        }
        if shape == self.shape() {
            return Ok(self.clone());
        }
        super::reshape_dense(self, shape)
    }

    /// All dimensions merged into one.
    pub fn flatten(&self) -> Result<Tensor, Error> {
        self.reshape(&[self.numel()])
    }

    /// Dense data of its own: views are copied (the copy is recorded, so
    /// gradients flow through it), dense tensors are returned as they are.
    pub fn contiguous(&self) -> Result<Tensor, Error> {
        if !self.is_view() {
            return Ok(self.clone());
        }
        if !self.dtype().is_float() {
            return self.integer_contiguous(); // indices: copied on the host
        }
        let ix = indices("i", self.rank());
        super::apply(
            "contiguous",
            &define("y", &ix, access("x", &ix)),
            &[("x", self)],
            &[],
        )
    }

    /// As [`Tensor::contiguous`], never recorded.
    pub(crate) fn contiguous_detached(&self) -> Result<Tensor, Error> {
        self.detach().contiguous() // a constant: nothing is recorded
    }
}
