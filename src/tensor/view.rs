//! Views: tensors whose elements are an affine image of another tensor's
//! data (transpose, permute, narrow, slice with step, flip, broadcast,
//! unsqueeze/squeeze, diagonal), and reshape of dense data.
//!
//! Owns the construction and validation of view maps. A view costs nothing
//! when created; an operation that reads it composes the map into its own
//! index function (`IndexFn::compose_arg`), so no copy is ever made and the
//! gradient flows straight to the viewed tensor. `reshape` of dense data
//! shares the storage and is recorded as an alias whose derivative, like
//! every other, is derived.

use super::{Layout, Tensor};
use crate::symbolic::compose::AffineMap;
use crate::tensor::{resolve_dims, Dim};
use crate::Error;

pub(crate) fn view_error(op: &str, shape: &[usize], message: String) -> Error {
    Error::Shape {
        op: op.to_string(),
        message: format!("input of shape {shape:?}: {message}"),
    }
}

impl Tensor {
    /// A view of this tensor: `new[v] = self[inner(v)]`.
    fn view(&self, shape: Vec<usize>, inner: AffineMap) -> Tensor {
        match &self.0.layout {
            Layout::Dense { .. } => Tensor::view_of(self, shape, inner),
            Layout::View { base, map } => {
                let map = map.compose_to(&inner, shape.len());
                Tensor::view_of(base, shape, map)
            }
        }
    }

    fn check_dim(&self, op: &str, dim: usize) -> Result<(), Error> {
        if dim >= self.rank() {
            return Err(view_error(
                op,
                self.shape(),
                format!("dimension {dim} does not exist (rank {})", self.rank()),
            ));
        }
        Ok(())
    }

    /// Dimensions reordered: result dimension `j` is dimension `dims[j]`
    /// (negative ones count from the back).
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(6, tenjin::DType::F32)?.reshape(&[1, 2, 3])?;
    /// let y = x.permute(&[2, 0, 1])?;
    /// assert_eq!(y.shape(), &[3, 1, 2]);
    /// assert_eq!(y.to_vec()?, vec![0., 3., 1., 4., 2., 5.]);
    /// assert_eq!(x.permute(&[-1, 0, 1])?.to_vec()?, y.to_vec()?);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn permute<D: Dim>(&self, dims: &[D]) -> Result<Tensor, Error> {
        let dims = &resolve_dims("permute", self.shape(), dims)?;
        let mut seen = vec![false; self.rank()];
        let ok = dims.len() == self.rank()
            && dims
                .iter()
                .all(|&d| d < self.rank() && !std::mem::replace(&mut seen[d], true));
        if !ok {
            return Err(view_error(
                "permute",
                self.shape(),
                format!("{dims:?} is not a permutation of 0..{}", self.rank()),
            ));
        }
        let shape = dims.iter().map(|&d| self.shape()[d]).collect();
        Ok(self.view(shape, AffineMap::permutation(dims)))
    }

    /// Dimensions `a` and `b` swapped.
    pub fn transpose(&self, a: impl Dim, b: impl Dim) -> Result<Tensor, Error> {
        let (a, b) = (
            a.resolve("transpose", self.shape())?,
            b.resolve("transpose", self.shape())?,
        );
        self.check_dim("transpose", a)?;
        self.check_dim("transpose", b)?;
        let mut dims: Vec<usize> = (0..self.rank()).collect();
        dims.swap(a, b);
        self.permute(&dims)
    }

    /// The transpose of a matrix.
    ///
    /// ```
    /// let m = tenjin::Tensor::from_vec(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
    /// assert_eq!(m.t()?.to_vec()?, vec![1., 4., 2., 5., 3., 6.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn t(&self) -> Result<Tensor, Error> {
        if self.rank() != 2 {
            return Err(view_error(
                "t",
                self.shape(),
                "t() needs a matrix (rank 2)".into(),
            ));
        }
        self.transpose(0, 1)
    }

    /// Elements `start..start + len` along `dim`.
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(5, tenjin::DType::F64)?;
    /// assert_eq!(x.narrow(0, 1, 3)?.to_vec_f64()?, vec![1., 2., 3.]);
    /// assert!(x.narrow(0, 3, 3).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Tensor, Error> {
        let dim = dim.resolve("narrow", self.shape())?;
        self.slice(dim, start, start.saturating_add(len), 1)
    }

    /// Views of `split_size` elements each along `dim` (the last one
    /// shorter when `split_size` does not divide the dimension), as
    /// PyTorch's `split(int)`.
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(5, tenjin::DType::F64)?;
    /// let parts = x.split(2, -1)?;
    /// assert_eq!(parts.iter().map(|p| p.shape()[0]).collect::<Vec<_>>(), [2, 2, 1]);
    /// assert_eq!(parts[2].to_vec_f64()?, vec![4.0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn split(&self, split_size: usize, dim: impl Dim) -> Result<Vec<Tensor>, Error> {
        let dim = dim.resolve("split", self.shape())?;
        let n = self.shape()[dim];
        if split_size == 0 && n > 0 {
            return Err(view_error(
                "split",
                self.shape(),
                "split_size must be > 0 for a non-empty dimension".into(),
            ));
        }
        let sizes: Vec<usize> = (0..n)
            .step_by(split_size.max(1))
            .map(|start| split_size.min(n - start))
            .collect();
        self.split_sizes(&sizes, dim)
    }

    /// Views of `sizes[k]` elements along `dim`, one after the other; the
    /// sizes must add up to the dimension (PyTorch's `split(list)`).
    pub fn split_sizes(&self, sizes: &[usize], dim: impl Dim) -> Result<Vec<Tensor>, Error> {
        let dim = dim.resolve("split", self.shape())?;
        let n = self.shape()[dim];
        let total: usize = sizes.iter().sum();
        if total != n {
            return Err(view_error(
                "split",
                self.shape(),
                format!("sizes {sizes:?} add up to {total}, not to dimension {dim}'s {n}"),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let part = self.narrow(dim, start, len);
                start += len;
                part
            })
            .collect()
    }

    /// `chunks` views along `dim` of `⌈size / chunks⌉` elements each (the
    /// last shorter, and fewer than `chunks` when the size runs out), as
    /// PyTorch's `chunk`.
    ///
    /// ```
    /// let x = tenjin::Tensor::zeros(&[3, 4], tenjin::DType::F32)?;
    /// let parts = x.chunk(3, 1)?; // ⌈4/3⌉ = 2: two chunks of 2, as PyTorch
    /// assert_eq!(parts.len(), 2);
    /// assert!(x.chunk(0, 1).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn chunk(&self, chunks: usize, dim: impl Dim) -> Result<Vec<Tensor>, Error> {
        let dim = dim.resolve("chunk", self.shape())?;
        if chunks == 0 {
            return Err(view_error(
                "chunk",
                self.shape(),
                "chunks must be > 0".into(),
            ));
        }
        let n = self.shape()[dim];
        if n == 0 {
            return Ok(vec![self.clone(); chunks]);
        }
        self.split(n.div_ceil(chunks), dim)
    }

    /// Elements `start, start + step, ...` below `end` along `dim`
    /// (`x[start:end:step]`).
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(7, tenjin::DType::F64)?;
    /// assert_eq!(x.slice(0, 1, 7, 2)?.to_vec_f64()?, vec![1., 3., 5.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn slice(
        &self,
        dim: impl Dim,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<Tensor, Error> {
        let dim = dim.resolve("slice", self.shape())?;
        let size = self.shape()[dim];
        if step == 0 || start > end || end > size {
            return Err(view_error(
                "slice",
                self.shape(),
                format!("{start}..{end} step {step} is not a valid range of dimension {dim} (size {size}, step ≥ 1)"),
            ));
        }
        let mut map = AffineMap::identity(self.rank());
        map.coeffs[dim][dim] = step as i64;
        map.offsets[dim] = start as i64;
        let mut shape = self.shape().to_vec();
        shape[dim] = (end - start).div_ceil(step);
        Ok(self.view(shape, map))
    }

    /// Every slice of `size` elements along `dim`, `step` apart, as a new
    /// last dimension (PyTorch's `Tensor.unfold`): dimension `dim` becomes
    /// the `(n − size) / step + 1` window starts, and element `[…; w; …; j]`
    /// is element `step·w + j` of the original dimension. A view: nothing is
    /// copied, and the windows' gradients add up where they overlap.
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(7, tenjin::DType::F64)?;
    /// let w = x.unfold(0, 3, 2)?; // starts 0, 2, 4
    /// assert_eq!(w.shape(), &[3, 3]);
    /// assert_eq!(w.to_vec_f64()?, vec![0., 1., 2., 2., 3., 4., 4., 5., 6.]);
    /// assert!(x.unfold(0, 8, 1).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn unfold(&self, dim: impl Dim, size: usize, step: usize) -> Result<Tensor, Error> {
        let d = dim.resolve("unfold", self.shape())?;
        let n = self.shape()[d];
        if step == 0 || size > n {
            return Err(view_error(
                "unfold",
                self.shape(),
                format!("windows of {size} every {step} do not fit dimension {d} of size {n} (size ≤ {n}, step ≥ 1)"),
            ));
        }
        let r = self.rank();
        let mut map = AffineMap::identity(r);
        for row in map.coeffs.iter_mut() {
            row.push(0);
        }
        map.coeffs[d][d] = step as i64;
        map.coeffs[d][r] = 1;
        let mut shape = self.shape().to_vec();
        shape[d] = (n - size) / step + 1;
        shape.push(size);
        Ok(self.view(shape, map))
    }

    /// The order of elements reversed along each of `dims` (negative ones
    /// count from the back).
    ///
    /// ```
    /// let x = tenjin::Tensor::arange(3, tenjin::DType::F64)?;
    /// assert_eq!(x.flip(&[0])?.to_vec_f64()?, vec![2., 1., 0.]);
    /// assert_eq!(x.flip(&[-1])?.to_vec_f64()?, vec![2., 1., 0.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn flip<D: Dim>(&self, dims: &[D]) -> Result<Tensor, Error> {
        let mut map = AffineMap::identity(self.rank());
        for d in resolve_dims("flip", self.shape(), dims)? {
            map.coeffs[d][d] = -map.coeffs[d][d];
            map.offsets[d] = self.shape()[d] as i64 - 1 - map.offsets[d];
        }
        Ok(self.view(self.shape().to_vec(), map))
    }

    /// This tensor repeated along new leading dimensions and along its
    /// size-1 dimensions to `shape` (NumPy broadcasting), without copying.
    ///
    /// ```
    /// let b = tenjin::Tensor::from_vec(vec![1., 2.], &[2])?;
    /// assert_eq!(b.broadcast_to(&[3, 2])?.to_vec()?, vec![1., 2., 1., 2., 1., 2.]);
    /// assert!(b.broadcast_to(&[3]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor, Error> {
        if shape == self.shape() {
            return Ok(self.clone());
        }
        super::create::numel_of("broadcast_to", shape)?;
        let r = shape.len();
        if r < self.rank() {
            return Err(view_error(
                "broadcast_to",
                self.shape(),
                format!("cannot broadcast to {shape:?}, which has fewer dimensions"),
            ));
        }
        let lead = r - self.rank();
        let mut coeffs = vec![vec![0i64; r]; self.rank()];
        for (d, &n) in self.shape().iter().enumerate() {
            let target = shape[lead + d];
            if n == target {
                coeffs[d][lead + d] = 1;
            } else if n != 1 {
                return Err(view_error(
                    "broadcast_to",
                    self.shape(),
                    format!(
                        "dimension {d} (size {n}) cannot broadcast to size {target} of {shape:?}"
                    ),
                ));
            }
        }
        let offsets = vec![0; self.rank()];
        Ok(self.view(shape.to_vec(), AffineMap { coeffs, offsets }))
    }

    /// A new dimension of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Tensor, Error> {
        let dim = dim.resolve_among("unsqueeze", self.shape(), self.rank() + 1)?;
        if dim > self.rank() {
            return Err(view_error(
                "unsqueeze",
                self.shape(),
                format!("dimension {dim} is past rank {}", self.rank()),
            ));
        }
        let r = self.rank() + 1;
        let coeffs = (0..self.rank())
            .map(|d| {
                (0..r)
                    .map(|j| i64::from(j == if d < dim { d } else { d + 1 }))
                    .collect()
            })
            .collect();
        let mut shape = self.shape().to_vec();
        shape.insert(dim, 1);
        Ok(self.view(
            shape,
            AffineMap {
                coeffs,
                offsets: vec![0; self.rank()],
            },
        ))
    }

    /// Dimension `dim`, which must have size 1, removed.
    pub fn squeeze(&self, dim: impl Dim) -> Result<Tensor, Error> {
        let dim = dim.resolve("squeeze", self.shape())?;
        self.check_dim("squeeze", dim)?;
        if self.shape()[dim] != 1 {
            return Err(view_error(
                "squeeze",
                self.shape(),
                format!("dimension {dim} has size {}, not 1", self.shape()[dim]),
            ));
        }
        let r = self.rank() - 1;
        let coeffs = (0..self.rank())
            .map(|d| {
                (0..r)
                    .map(|j| {
                        i64::from(d != dim && j == if d < dim { d } else { d.wrapping_sub(1) })
                    })
                    .collect()
            })
            .collect();
        let mut shape = self.shape().to_vec();
        shape.remove(dim);
        Ok(self.view(
            shape,
            AffineMap {
                coeffs,
                offsets: vec![0; self.rank()],
            },
        ))
    }

    /// The diagonal of a matrix, `offset` above (> 0) or below (< 0) the
    /// main one.
    ///
    /// ```
    /// let m = tenjin::Tensor::arange(6, tenjin::DType::F64)?.reshape(&[2, 3])?;
    /// assert_eq!(m.diagonal(0)?.to_vec_f64()?, vec![0., 4.]);
    /// assert_eq!(m.diagonal(1)?.to_vec_f64()?, vec![1., 5.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn diagonal(&self, offset: i64) -> Result<Tensor, Error> {
        if self.rank() != 2 {
            return Err(view_error(
                "diagonal",
                self.shape(),
                "diagonal needs a matrix (rank 2)".into(),
            ));
        }
        let (r, c) = (self.shape()[0] as i64, self.shape()[1] as i64);
        let (r0, c0) = if offset >= 0 {
            (0, offset)
        } else {
            (-offset, 0)
        };
        let n = (r - r0).min(c - c0).max(0) as usize;
        let map = AffineMap {
            coeffs: vec![vec![1], vec![1]],
            offsets: vec![r0, c0],
        };
        Ok(self.view(vec![n], map))
    }

    /// The storage of a dense tensor.
    pub(crate) fn dense_storage(&self) -> Result<std::sync::Arc<super::Storage>, Error> {
        match &self.0.layout {
            Layout::Dense { storage, .. } => Ok(storage.clone()),
            Layout::View { .. } => Err(view_error(
                "storage",
                self.shape(),
                "a view has no dense storage of its own".into(),
            )),
        }
    }
}
