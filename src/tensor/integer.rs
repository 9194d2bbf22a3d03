//! Integer tensors (`I32`, `I64`): index data such as labels and token ids.
//!
//! Owns their creation (`from_vec_i64`, `from_vec_i32`), reading back
//! (`to_vec_i64`), conversion between all dtypes (`to_dtype`), comparisons
//! between integer tensors, and copying an integer view into dense memory.
//! These run on the host (there are no integer kernels): views are walked
//! through their affine maps. Integer tensors take no part in
//! differentiation and no computing op accepts them
//! (`crate::dtype::not_computable`).

use super::{Origin, Tensor};
use crate::dtype::Element;
use crate::runtime::Storage;
use crate::{DType, Error};

type IntTest = fn(i64, i64) -> bool;

/// Comparisons between integer tensors, by method name.
const INT_COMPARE: &[(&str, IntTest)] = &[
    ("gt", |a, b| a > b),
    ("ge", |a, b| a >= b),
    ("lt", |a, b| a < b),
    ("le", |a, b| a <= b),
    ("eq", |a, b| a == b),
    ("ne", |a, b| a != b),
];

impl Tensor {
    /// An `I64` tensor holding `data` (row-major) with `shape`.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let ids = Tensor::from_vec_i64(vec![3, 0, 2], &[3])?;
    /// assert_eq!(ids.dtype(), DType::I64);
    /// assert_eq!(ids.to_vec_i64()?, vec![3, 0, 2]);
    /// assert_eq!(ids.to_dtype(DType::F32)?.to_vec()?, vec![3., 0., 2.]);
    /// assert!(ids.exp().is_err()); // no arithmetic on indices
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_vec_i64(data: Vec<i64>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec_i64", &data, shape)
    }

    /// An `I32` tensor holding `data` (row-major) with `shape`.
    pub fn from_vec_i32(data: Vec<i32>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec_i32", &data, shape)
    }

    /// A dense constant copy of `data` (any element type) with `shape`,
    /// on the default device.
    pub(crate) fn from_host<T: Element>(
        op: &str,
        data: &[T],
        shape: &[usize],
    ) -> Result<Tensor, Error> {
        Tensor::from_host_on(op, data, shape, super::default_device())
    }

    /// A dense constant copy of `data` (any element type) with `shape`,
    /// on `device`.
    pub(crate) fn from_host_on<T: Element>(
        op: &str,
        data: &[T],
        shape: &[usize],
        device: crate::alloc::Device,
    ) -> Result<Tensor, Error> {
        let n = super::create::numel_of(op, shape)?;
        if n != data.len() {
            return Err(Error::shape(
                op,
                format!(
                    "{} values cannot fill the shape {shape:?} ({n} elements)",
                    data.len()
                ),
            ));
        }
        Ok(Tensor::dense(
            shape.to_vec(),
            Storage::from_slice_on(device, data)?,
            Origin::Constant,
        ))
    }

    /// The elements of an integer tensor in row-major order, as `i64`.
    ///
    /// ```
    /// let t = tenjin::Tensor::from_vec_i32(vec![1, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(t.t()?.to_vec_i64()?, vec![1, 3, 2, 4]);
    /// assert!(tenjin::Tensor::from_vec(vec![1.], &[1])?.to_vec_i64().is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn to_vec_i64(&self) -> Result<Vec<i64>, Error> {
        if self.dtype().is_float() {
            return Err(Error::DType {
                op: "to_vec_i64".into(),
                message: format!(
                    "the tensor of shape {:?} is {:?}; convert with to_dtype(DType::I64) first",
                    self.shape(),
                    self.dtype()
                ),
            });
        }
        let (base, map) = self.base_and_map();
        let data = base
            .storage_and_origin()
            .0
            .to_i64_vec()?
            .ok_or_else(|| crate::dtype::not_computable("to_vec_i64", self.dtype()))?;
        let Some(map) = map else {
            return Ok(data);
        };
        // Walk the view's indices in row-major order through its map.
        let strides =
            crate::symbolic::index_fn::row_major_strides(base.shape()).ok_or_else(|| {
                Error::shape(
                    "to_vec_i64",
                    format!("the shape {:?} overflows", base.shape()),
                )
            })?;
        let mut out = Vec::with_capacity(self.numel());
        let mut index = vec![0i64; self.rank()];
        for _ in 0..self.numel() {
            let at: i64 = map
                .apply(&index)
                .iter()
                .zip(&strides)
                .map(|(i, s)| i * s)
                .sum();
            out.push(data[at as usize]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if (index[d] as usize) < self.shape()[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(out)
    }

    /// A dense copy of an integer tensor (a view's elements gathered).
    pub(crate) fn integer_contiguous(&self) -> Result<Tensor, Error> {
        let v = self.to_vec_i64()?;
        match self.dtype() {
            DType::I32 => {
                let v: Vec<i32> = v.into_iter().map(|x| x as i32).collect();
                Tensor::from_host_on("contiguous", &v, self.shape(), self.device())
            }
            _ => Tensor::from_host_on("contiguous", &v, self.shape(), self.device()),
        }
    }

    /// The data converted to `dtype` as a new constant tensor on the same
    /// device, by its backend (`Backend::cast`). Floats become integers by
    /// rounding toward zero (as PyTorch's `.long()`); NaN becomes 0 and
    /// values beyond the range saturate.
    pub(crate) fn convert(&self, dtype: DType) -> Result<Tensor, Error> {
        let dense = self.contiguous_detached()?;
        let out = dense.dense_storage()?.cast_to(dtype)?;
        Ok(Tensor::dense(self.shape().to_vec(), out, Origin::Constant))
    }

    /// `name` (`gt`, `eq`, ...) between two integer tensors broadcast to
    /// `shape`: an `I64` tensor of 0 and 1.
    pub(crate) fn integer_compare(
        &self,
        name: &str,
        other: &Tensor,
        shape: &[usize],
    ) -> Result<Tensor, Error> {
        if self.dtype().is_float() || other.dtype().is_float() {
            return Err(Error::DType {
                op: name.to_string(),
                message: format!(
                    "cannot compare {:?} {:?} with {:?} {:?}; convert one with to_dtype",
                    self.dtype(),
                    self.shape(),
                    other.dtype(),
                    other.shape()
                ),
            });
        }
        let a = self.broadcast_to(shape)?.to_vec_i64()?;
        let b = other.broadcast_to(shape)?.to_vec_i64()?;
        let test = INT_COMPARE
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| Error::shape(name, "not a comparison".into()))?;
        let v: Vec<i64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| i64::from(test(x, y)))
            .collect();
        Tensor::from_host_on(name, &v, shape, self.device())
    }
}
