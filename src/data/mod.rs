//! Data loading: a [`Dataset`] of samples read in batches, and the
//! [`DataLoader`] that walks it in shuffled batches, collating them on a
//! worker thread ahead of the training loop (PyTorch's
//! `torch.utils.data`).
//!
//! Owns the `Dataset` trait, [`TensorDataset`] (rows of tensors that share
//! their first dimension), [`Collated`] (samples read one at a time and a
//! collate function, as PyTorch's map-style data sets with a `collate_fn`)
//! and the loader (`loader.rs`). A data set collates its own batches
//! (`Dataset::batch` takes the indices of a batch), so a batch of 64
//! images can be one copy of 64 rows, not 64 tensors stacked. Batches are built with host copies only (no kernel runs on the
//! worker thread) on the default device. Must not touch parameters,
//! gradients or the tape.
//!
//! ```
//! use tenjin::data::{DataLoader, TensorDataset};
//! use tenjin::Tensor;
//! let x = Tensor::from_vec((0..10).map(|v| v as f32).collect(), &[5, 2])?;
//! let y = Tensor::from_vec_i64(vec![0, 1, 0, 1, 1], &[5])?;
//! let loader = DataLoader::new(TensorDataset::new(vec![x, y])?, 2)?.shuffle(7).drop_last(true);
//! let mut rows = 0;
//! for batch in loader.epoch(0) {
//!     let batch = batch?; // [x rows, y rows]
//!     assert_eq!(batch[0].shape(), &[2, 2]);
//!     rows += batch[1].shape()[0];
//! }
//! assert_eq!(rows, 4); // the last, partial batch dropped
//! # Ok::<(), tenjin::Error>(())
//! ```

mod loader;

pub use loader::{Batches, DataLoader};

use crate::tensor::Tensor;
use crate::{DType, Error};

/// Samples read in batches: `len` samples, numbered from 0.
pub trait Dataset: Send + Sync + 'static {
    /// What one batch is (tensors, labels, anything the loop takes).
    type Batch: Send + 'static;

    /// The number of samples.
    fn len(&self) -> usize;

    /// Whether there is no sample.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The samples `indices` (each below `len`), collated into one batch.
    fn batch(&self, indices: &[usize]) -> Result<Self::Batch, Error>;
}

/// A data set read one sample at a time and collated by a function: PyTorch's
/// map-style `Dataset` (`__getitem__`) with a `DataLoader`'s `collate_fn`.
/// `sample(i)` reads sample `i`; `collate` makes the samples of a batch,
/// in the batch's order, into one batch. Both run on the loader's worker
/// thread when it prefetches.
///
/// ```
/// use tenjin::data::{Collated, DataLoader};
/// use tenjin::Tensor;
/// // Samples are (feature row, label); a batch stacks the rows.
/// let data = Collated::new(
///     10,
///     |i| Ok((vec![i as f32, 2.0 * i as f32], i % 3)),
///     |samples: Vec<(Vec<f32>, usize)>| {
///         let n = samples.len();
///         let (rows, labels): (Vec<Vec<f32>>, Vec<usize>) = samples.into_iter().unzip();
///         Ok((Tensor::from_vec(rows.concat(), &[n, 2])?, labels))
///     },
/// );
/// let loader = DataLoader::new(data, 4)?;
/// let (x, y) = loader.epoch(0).next().unwrap()?;
/// assert_eq!((x.shape(), y), (&[4, 2][..], vec![0, 1, 2, 0]));
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Collated<S, C> {
    len: usize,
    sample: S,
    collate: C,
}

impl<T, B, S, C> Collated<S, C>
where
    S: Fn(usize) -> Result<T, Error>,
    C: Fn(Vec<T>) -> Result<B, Error>,
{
    /// `len` samples read by `sample`, batched by `collate`.
    pub fn new(len: usize, sample: S, collate: C) -> Collated<S, C> {
        Collated {
            len,
            sample,
            collate,
        }
    }
}

impl<T, B, S, C> Dataset for Collated<S, C>
where
    S: Fn(usize) -> Result<T, Error> + Send + Sync + 'static,
    C: Fn(Vec<T>) -> Result<B, Error> + Send + Sync + 'static,
    B: Send + 'static,
{
    type Batch = B;

    fn len(&self) -> usize {
        self.len
    }

    /// Each sample read in the batch's order, then collated; an index at
    /// or past `len` is an error naming it.
    fn batch(&self, indices: &[usize]) -> Result<B, Error> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.len) {
            return Err(Error::Invalid {
                function: "Collated".into(),
                message: format!("sample {bad} of a data set of {} samples", self.len),
            });
        }
        let samples = indices
            .iter()
            .map(|&i| (self.sample)(i))
            .collect::<Result<Vec<T>, Error>>()?;
        (self.collate)(samples)
    }
}

/// Tensors that share their first dimension, a sample being one row of
/// each (PyTorch's `TensorDataset`); a batch is those rows of every tensor,
/// in the order asked, as new tensors on the default device. The values
/// are read to the host once, when the data set is made.
pub struct TensorDataset {
    columns: Vec<Column>,
    len: usize,
}

/// One tensor's values on the host and the shape of one of its rows.
struct Column {
    values: Values,
    row: Vec<usize>,
}

enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    /// `BF16` or `F16` values, widened.
    Half(Vec<f32>, DType),
}

impl TensorDataset {
    /// The rows of `tensors` (at least one, of rank ≥ 1, all with the same
    /// first dimension).
    pub fn new(tensors: Vec<Tensor>) -> Result<TensorDataset, Error> {
        let err = |message: String| Error::Invalid {
            function: "TensorDataset".into(),
            message,
        };
        let Some(first) = tensors.first() else {
            return Err(err("no tensor: a data set needs at least one".into()));
        };
        let len = *first
            .shape()
            .first()
            .ok_or_else(|| err("a scalar tensor has no rows: tensors of rank 1 or more".into()))?;
        let mut columns = Vec::with_capacity(tensors.len());
        for (k, t) in tensors.iter().enumerate() {
            if t.shape().first() != Some(&len) {
                return Err(err(format!(
                    "tensor {k} of shape {:?}: its first dimension is not the {len} rows of tensor 0 (shape {:?})",
                    t.shape(),
                    first.shape()
                )));
            }
            let values = match t.dtype() {
                DType::F32 => Values::F32(t.to_vec()?),
                DType::F64 => Values::F64(t.to_vec_f64()?),
                DType::I64 => Values::I64(t.to_vec_i64()?),
                DType::I32 => Values::I32(t.to_vec_i64()?.into_iter().map(|v| v as i32).collect()),
                // Half values are f32 values: held widened, narrowed back
                // exactly when a batch is made.
                half => Values::Half(t.to_vec()?, half),
            };
            columns.push(Column {
                values,
                row: t.shape()[1..].to_vec(),
            });
        }
        Ok(TensorDataset { columns, len })
    }
}

/// The rows `indices` of `values` (rows of `width` elements).
fn gather<T: Copy>(values: &[T], width: usize, indices: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(indices.len() * width);
    for &i in indices {
        out.extend_from_slice(&values[i * width..(i + 1) * width]);
    }
    out
}

impl Dataset for TensorDataset {
    type Batch = Vec<Tensor>;

    fn len(&self) -> usize {
        self.len
    }

    fn batch(&self, indices: &[usize]) -> Result<Vec<Tensor>, Error> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.len) {
            return Err(Error::Invalid {
                function: "TensorDataset".into(),
                message: format!("sample {bad} of a data set of {} samples", self.len),
            });
        }
        self.columns
            .iter()
            .map(|c| {
                let width: usize = c.row.iter().product();
                let shape: Vec<usize> = std::iter::once(indices.len())
                    .chain(c.row.iter().copied())
                    .collect();
                match &c.values {
                    Values::F32(v) => Tensor::from_vec(gather(v, width, indices), &shape),
                    Values::F64(v) => Tensor::from_vec_f64(gather(v, width, indices), &shape),
                    Values::I64(v) => Tensor::from_vec_i64(gather(v, width, indices), &shape),
                    Values::I32(v) => Tensor::from_vec_i32(gather(v, width, indices), &shape),
                    Values::Half(v, dtype) => {
                        Tensor::from_vec(gather(v, width, indices), &shape)?.to_dtype(*dtype)
                    }
                }
            })
            .collect()
    }
}
