//! Half-precision tensors (`BF16`, `F16`): creation from and reading back
//! to the [`bf16`] and [`f16`] element types.
//!
//! Owns only moving their values in and out; conversion is `to_dtype`
//! (`crate::ops`), and every op computes on them in f32 (`crate::ops::half`).

use super::Tensor;
use crate::dtype::Element;
use crate::{bf16, f16, Error};

impl Tensor {
    /// A `BF16` tensor holding `data` (row-major) with `shape`.
    ///
    /// ```
    /// use tenjin::{bf16, DType, Tensor};
    /// let x = Tensor::from_vec_bf16(vec![bf16::from_f32(1.5), bf16::from_f32(-2.0)], &[2])?;
    /// assert_eq!(x.dtype(), DType::BF16);
    /// assert_eq!(x.mul(&x)?.to_vec()?, vec![2.25, 4.0]); // computed in f32
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_vec_bf16(data: Vec<bf16>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec_bf16", &data, shape)
    }

    /// An `F16` tensor holding `data` (row-major) with `shape`.
    pub fn from_vec_f16(data: Vec<f16>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec_f16", &data, shape)
    }

    /// The elements of a `BF16` tensor in row-major order (an error
    /// naming its dtype for another; [`Tensor::to_vec`] reads any float
    /// tensor as f32).
    ///
    /// ```
    /// use tenjin::{bf16, DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, 1.00390625], &[2])?.to_dtype(DType::BF16)?;
    /// // 1 + 2⁻⁸ is a tie between 1 and 1 + 2⁻⁷: rounded to the even one.
    /// assert_eq!(x.to_vec_bf16()?, vec![bf16::ONE, bf16::ONE]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn to_vec_bf16(&self) -> Result<Vec<bf16>, Error> {
        self.to_vec_of("to_vec_bf16")
    }

    /// The elements of an `F16` tensor in row-major order.
    pub fn to_vec_f16(&self) -> Result<Vec<f16>, Error> {
        self.to_vec_of("to_vec_f16")
    }

    fn to_vec_of<T: Element>(&self, op: &str) -> Result<Vec<T>, Error> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DType {
                op: op.into(),
                message: format!(
                    "the tensor of shape {:?} is {:?}; convert with to_dtype(DType::{:?}) first",
                    self.shape(),
                    self.dtype(),
                    T::DTYPE
                ),
            });
        }
        let mut out = vec![T::ZERO; self.numel()];
        self.read_into(&mut out)?;
        Ok(out)
    }
}
