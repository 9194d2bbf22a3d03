//! [`Dim`]: a dimension as PyTorch takes one — counted from the front
//! (`0, 1, …`) or, when negative, from the back (`-1` is the last), so
//! `x.softmax(-1)` and `x.transpose(-2, -1)` read as they do in PyTorch.
//!
//! Owns the resolution of a dimension against a rank and its error; must
//! not know about any op.

use crate::Error;

/// A dimension index: any integer type; a negative one counts from the
/// back. An integer literal takes `i32`, so `softmax(-1)` and
/// `softmax(1)` both work, and so does a `usize` variable.
///
/// ```
/// use tenjin::Tensor;
/// let x = Tensor::from_vec(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
/// assert_eq!(x.softmax(-1)?.to_vec()?, x.softmax(1)?.to_vec()?);
/// assert_eq!(x.transpose(-2, -1)?.shape(), &[3, 2]);
/// let e = x.softmax(-3).unwrap_err().to_string();
/// assert!(e.contains("softmax") && e.contains("-3"), "{e}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub trait Dim: Copy + std::fmt::Display {
    /// The dimension as an index into a shape of `positions` dimensions
    /// (the tensor's rank, or its rank + 1 for ops that insert one such as
    /// `unsqueeze` and `stack`); an error naming `op` and `shape`
    /// otherwise.
    fn resolve_among(self, op: &str, shape: &[usize], positions: usize) -> Result<usize, Error>;

    /// The dimension as an index below the rank of `shape`.
    fn resolve(self, op: &str, shape: &[usize]) -> Result<usize, Error> {
        self.resolve_among(op, shape, shape.len())
    }
}

fn out_of_range(op: &str, shape: &[usize], d: impl std::fmt::Display, positions: usize) -> Error {
    Error::shape(
        op,
        format!(
            "dimension {d} is out of range for a tensor of shape {shape:?} (expected one of -{positions}..{positions})"
        ),
    )
}

macro_rules! signed_dims {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn resolve_among(self, op: &str, shape: &[usize], positions: usize) -> Result<usize, Error> {
                let d = self as i128;
                let n = positions as i128;
                let k = if d < 0 { d + n } else { d };
                if (0..n).contains(&k) {
                    Ok(k as usize)
                } else {
                    Err(out_of_range(op, shape, self, positions))
                }
            }
        }
    )*};
}

macro_rules! unsigned_dims {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn resolve_among(self, op: &str, shape: &[usize], positions: usize) -> Result<usize, Error> {
                if (self as u128) < positions as u128 {
                    Ok(self as usize)
                } else {
                    Err(out_of_range(op, shape, self, positions))
                }
            }
        }
    )*};
}

/// Each of `dims` resolved against `shape` (for the ops that take a list
/// of dimensions, such as `sum_dims(&[-2, -1], …)`).
pub(crate) fn resolve_dims<D: Dim>(
    op: &str,
    shape: &[usize],
    dims: &[D],
) -> Result<Vec<usize>, Error> {
    dims.iter().map(|d| d.resolve(op, shape)).collect()
}

signed_dims!(i32, i64, isize);
unsigned_dims!(u32, u64, usize);
