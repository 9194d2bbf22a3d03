//! Reductions built on the plain ones: `var std norm prod cumsum` and
//! `argmax argmin`.
//!
//! `var`, `std` and `norm` are one index function each (the mean inside
//! `var` is a nested sum the planner computes once per row, as softmax's
//! row statistics). `prod` is a tree of products of strided halves (the
//! notation has no product reduction; the tree keeps exact gradients where
//! elements are zero). `cumsum` is a triangular sum. `argmax` and `argmin`
//! are the notation's `argmax`/`argmin` reductions, returned as `i64`.

use super::reduce::Reduction;
use super::{apply, formula, lit};
use crate::dtype::DType;
use crate::tensor::{resolve_dims, Dim, Tensor};
use crate::Error;

/// How a `norm` is taken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// `(Σ |x|^p)^(1/p)`; `P(2.0)` is the Euclidean norm.
    P(f64),
    /// `max |x|`.
    Inf,
}

impl Tensor {
    /// The variance over `dims` with Bessel's `correction` (PyTorch's
    /// `var(dim, correction=1)`): `Σ (x − mean)² / (n − correction)`.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![1., 2., 3., 4.], &[2, 2])?;
    /// assert_eq!(x.var(&[1], 1, false)?.to_vec_f64()?, vec![0.5, 0.5]);
    /// assert_eq!(x.var(&[0, 1], 0, false)?.item()?, 1.25);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn var<D: Dim>(
        &self,
        dims: &[D],
        correction: usize,
        keepdim: bool,
    ) -> Result<Tensor, Error> {
        let dims = &resolve_dims("var", self.shape(), dims)?;
        let r = Reduction::new("var", self.shape(), dims, keepdim)?;
        r.run("var", self, &variance_body("var", &r, correction)?)
    }

    /// The standard deviation: `√var` (see [`Tensor::var`]).
    pub fn std<D: Dim>(
        &self,
        dims: &[D],
        correction: usize,
        keepdim: bool,
    ) -> Result<Tensor, Error> {
        let dims = &resolve_dims("std", self.shape(), dims)?;
        let r = Reduction::new("std", self.shape(), dims, keepdim)?;
        let body = format!("sqrt ({})", variance_body("std", &r, correction)?);
        r.run("std", self, &body)
    }

    /// The vector norm over `dims` (all dimensions when `dims` is empty is
    /// *not* implied: pass them). `Norm::P(2.0)` is `√Σ x²`; its gradient at
    /// an all-zero row is NaN (PyTorch returns 0 there).
    ///
    /// ```
    /// use tenjin::{Norm, Tensor};
    /// let x = Tensor::from_vec_f64(vec![3., -4.], &[2])?;
    /// assert_eq!(x.norm(Norm::P(2.0), &[0], false)?.item()?, 5.0);
    /// assert_eq!(x.norm(Norm::P(1.0), &[0], false)?.item()?, 7.0);
    /// assert_eq!(x.norm(Norm::Inf, &[0], false)?.item()?, 4.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn norm<D: Dim>(&self, p: Norm, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("norm", self.shape(), dims)?;
        let r = Reduction::new("norm", self.shape(), dims, keepdim)?;
        let x = r.access("");
        let body = match p {
            Norm::Inf => r.nest("max", "", format!("abs ({x})")),
            Norm::P(2.0) => format!("sqrt ({})", r.nest("sum", "", format!("{x} ** 2"))),
            Norm::P(1.0) => r.nest("sum", "", format!("abs ({x})")),
            Norm::P(p) if p > 0.0 && p.is_finite() => {
                let (pl, inv) = (lit("norm", p)?, lit("norm", 1.0 / p)?);
                let inner = r.nest("sum", "", format!("abs ({x}) ** {pl}"));
                format!("({inner}) ** {inv}")
            }
            Norm::P(p) => {
                return Err(Error::shape(
                    "norm",
                    format!("input of shape {:?}: the order p = {p} must be a positive finite number (or Norm::Inf)", self.shape()),
                ))
            }
        };
        r.run("norm", self, &body)
    }

    /// The product of the elements along `dim` (PyTorch's `prod(dim)`),
    /// computed as a tree of products of the even and odd halves.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![1., 2., 3., 4., 5., 0.], &[2, 3])?;
    /// assert_eq!(x.prod(1, false)?.to_vec_f64()?, vec![6., 0.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn prod(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor, Error> {
        let dim = dim.resolve("prod", self.shape())?;
        Reduction::new("prod", self.shape(), &[dim], keepdim)?;
        let mut t = self.clone();
        if t.shape()[dim] == 0 {
            let mut shape = t.shape().to_vec();
            shape[dim] = 1;
            t = Tensor::ones_on(&shape, t.dtype(), t.device())?;
        }
        while t.shape()[dim] > 1 {
            let n = t.shape()[dim];
            let even = t.slice(dim, 0, n - n % 2, 2)?;
            let odd = t.slice(dim, 1, n, 2)?;
            let mut p = even.mul(&odd)?;
            if n % 2 == 1 {
                p = Tensor::cat(&[&p, &t.narrow(dim, n - 1, 1)?], dim)?;
            }
            t = p;
        }
        if keepdim {
            Ok(t)
        } else {
            t.squeeze(dim)
        }
    }

    /// The product of all elements.
    pub fn prod_all(&self) -> Result<Tensor, Error> {
        self.flatten()?.prod(0, false)
    }

    /// Running sums along `dim`: `y[…; i; …] = Σ_{k ≤ i} x[…; k; …]`, one
    /// triangular sum (O(n²) work per row; its gradient is the reversed
    /// running sum, derived).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![1., 2., 3., 4.], &[2, 2])?;
    /// assert_eq!(x.cumsum(1)?.to_vec_f64()?, vec![1., 3., 3., 7.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn cumsum(&self, dim: impl Dim) -> Result<Tensor, Error> {
        let dim = dim.resolve("cumsum", self.shape())?;
        Reduction::new("cumsum", self.shape(), &[dim], false)?;
        if self.numel() == 0 {
            return super::shape::empty_like(self.shape(), self);
        }
        let ix = formula::indices("i", self.rank());
        let mut at = ix.clone();
        at[dim] = "k".into();
        let body = formula::sum("k", 0, &ix[dim], formula::access("x", &at));
        let sizes = formula::sizes("i", self.shape());
        apply(
            "cumsum",
            &formula::define("f", &ix, body),
            &[("x", self)],
            &formula::size_refs(&sizes),
        )
    }

    /// The index of the first maximum along `dim`, as `i64` (no gradient).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 7., 7., 4., 0., 2.], &[2, 3])?;
    /// assert_eq!(x.argmax(1, false)?.to_vec_i64()?, vec![1, 0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn argmax(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor, Error> {
        let dim = dim.resolve("argmax", self.shape())?;
        self.arg_extremum("argmax", dim, keepdim)
    }

    /// The index of the first minimum along `dim`, as `i64`.
    pub fn argmin(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor, Error> {
        let dim = dim.resolve("argmin", self.shape())?;
        self.arg_extremum("argmin", dim, keepdim)
    }

    fn arg_extremum(&self, op: &str, dim: usize, keepdim: bool) -> Result<Tensor, Error> {
        let r = Reduction::new(op, self.shape(), &[dim], keepdim)?;
        if r.count() == 0 {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {:?}: {op} of an empty dimension {dim}",
                    self.shape()
                ),
            ));
        }
        // The index as a value, in f64 (exact for any index).
        let x = crate::trace::no_grad(|| self.to_dtype(DType::F64))?;
        r.run(op, &x, &r.wrap(op, ""))?.to_dtype(DType::I64)
    }
}

/// `Σ (x − mean)² · 1/(n − correction)` as index text.
pub(super) fn variance_body(op: &str, r: &Reduction, correction: usize) -> Result<String, Error> {
    let n = r.count();
    let mean = format!(
        "{} * {}",
        r.wrap("sum", "m"),
        lit(op, 1.0 / n.max(1) as f64)?
    );
    let squares = r.nest("sum", "s", format!("({} - {mean}) ** 2", r.access("s")));
    // n ≤ correction divides by zero or a negative count, as PyTorch does
    // (inf or NaN, never an error).
    let denom = n as f64 - correction as f64;
    Ok(match denom {
        d if d > 0.0 => format!("{squares} * {}", lit(op, 1.0 / d)?),
        d => format!("{squares} / {}", lit(op, d)?),
    })
}
