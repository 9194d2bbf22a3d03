//! Reductions over axes: `sum mean max min logsumexp`, with `keepdim`.
//!
//! Each is one index function: kept dimensions are output indices, reduced
//! ones are bound by nested `sum{..}`/`max{..}`/`min{..}` with constant
//! ranges.

use super::{apply, formula, lit};
use crate::tensor::{resolve_dims, Dim, Tensor};
use crate::Error;

/// The index text of a reduction of `shape` over `dims`.
pub(super) struct Reduction {
    /// Output indices (`i0; j1; i2` with `j1` a kept size-1 dimension).
    out: Vec<String>,
    /// Per input dimension: the index it is read at, and whether that is
    /// a reduction variable.
    index: Vec<(String, bool)>,
    /// `(variable, size)` of each reduced dimension, in order.
    reduced: Vec<(String, usize)>,
    /// Sizes of kept size-1 output indices (not inferable from the body).
    sizes: Vec<(String, usize)>,
    out_shape: Vec<usize>,
}

impl Reduction {
    pub(super) fn new(
        op: &str,
        shape: &[usize],
        dims: &[usize],
        keepdim: bool,
    ) -> Result<Reduction, Error> {
        let mut reduced_dims = vec![false; shape.len()];
        for &d in dims {
            if d >= shape.len() {
                return Err(Error::shape(
                    op,
                    format!(
                        "input of shape {shape:?}: dimension {d} does not exist (rank {})",
                        shape.len()
                    ),
                ));
            }
            if std::mem::replace(&mut reduced_dims[d], true) {
                return Err(Error::shape(
                    op,
                    format!("input of shape {shape:?}: dimension {d} appears twice in {dims:?}"),
                ));
            }
        }
        let i = formula::indices("i", shape.len());
        let j = formula::indices("j", shape.len());
        let k = formula::indices("k", shape.len());
        let mut r = Reduction {
            out: vec![],
            index: vec![],
            reduced: vec![],
            sizes: vec![],
            out_shape: vec![],
        };
        for (d, &n) in shape.iter().enumerate() {
            if reduced_dims[d] {
                r.index.push((k[d].clone(), true));
                r.reduced.push((k[d].clone(), n));
                if keepdim {
                    r.out.push(j[d].clone());
                    r.sizes.push((j[d].clone(), 1));
                    r.out_shape.push(1);
                }
            } else {
                r.index.push((i[d].clone(), false));
                r.out.push(i[d].clone());
                r.out_shape.push(n);
            }
        }
        Ok(r)
    }

    /// `x[…]` with the reduced dimensions read through their variables,
    /// suffixed by `suffix` (so several reductions can sit in one body).
    pub(super) fn access(&self, suffix: &str) -> String {
        let index: Vec<String> = self
            .index
            .iter()
            .map(|(v, reduced)| match reduced {
                true => format!("{v}{suffix}"),
                false => v.clone(),
            })
            .collect();
        formula::access("x", &index)
    }

    /// `body` reduced by `op` over every reduced dimension (variables
    /// suffixed by `suffix`).
    pub(super) fn nest(&self, op: &str, suffix: &str, body: String) -> String {
        self.reduced.iter().rev().fold(body, |body, (k, n)| {
            formula::reduce(op, format!("{k}{suffix}"), 0, *n as i64 - 1, body)
        })
    }

    /// `op{k…}(x[…])` over every reduced dimension.
    pub(super) fn wrap(&self, op: &str, suffix: &str) -> String {
        self.nest(op, suffix, self.access(suffix))
    }

    pub(super) fn count(&self) -> usize {
        self.reduced.iter().map(|(_, n)| n).product()
    }

    pub(super) fn run(&self, op: &str, x: &Tensor, body: &str) -> Result<Tensor, Error> {
        let sizes = formula::size_refs(&self.sizes);
        let t = apply(
            op,
            &formula::define("f", &self.out, body),
            &[("x", x)],
            &sizes,
        )?;
        debug_assert_eq!(t.shape(), &self.out_shape[..]);
        Ok(t)
    }
}

pub(super) fn all_dims(x: &Tensor) -> Vec<usize> {
    (0..x.rank()).collect()
}

impl Tensor {
    /// The sum of all elements: a scalar (shape `[]`).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
    /// assert_eq!(x.sum()?.item()?, 10.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn sum(&self) -> Result<Tensor, Error> {
        self.sum_dims(&all_dims(self), false)
    }

    /// Sums over `dims`, keeping them as size-1 dimensions if `keepdim`.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
    /// assert_eq!(x.sum_dims(&[1], false)?.to_vec()?, vec![6., 15.]);
    /// assert_eq!(x.sum_dims(&[0], true)?.shape(), &[1, 3]);
    /// // Negative dimensions count from the back, as in PyTorch.
    /// assert_eq!(x.sum_dims(&[-1], false)?.to_vec()?, vec![6., 15.]);
    /// assert_eq!(x.sum_dims(&[-2, -1], false)?.item()?, 21.0);
    /// assert!(x.sum_dims(&[1, -1], false).is_err()); // the same dimension twice
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn sum_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("sum", self.shape(), dims)?;
        let r = Reduction::new("sum", self.shape(), dims, keepdim)?;
        r.run("sum", self, &r.wrap("sum", ""))
    }

    /// The mean of all elements.
    pub fn mean(&self) -> Result<Tensor, Error> {
        self.mean_dims(&all_dims(self), false)
    }

    /// Means over `dims`.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 2., 3., 5.], &[2, 2])?;
    /// assert_eq!(x.mean_dims(&[0], false)?.to_vec()?, vec![2., 3.5]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn mean_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("mean", self.shape(), dims)?;
        let r = Reduction::new("mean", self.shape(), dims, keepdim)?;
        let scale = lit("mean", 1.0 / r.count().max(1) as f64)?;
        r.run("mean", self, &format!("{} * {scale}", r.wrap("sum", "")))
    }

    /// The largest element (the gradient goes to the first maximiser).
    pub fn max(&self) -> Result<Tensor, Error> {
        self.max_dims(&all_dims(self), false)
    }

    /// Maxima over `dims`.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 7., 3., 4.], &[2, 2])?;
    /// assert_eq!(x.max_dims(&[1], false)?.to_vec()?, vec![7., 4.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("max", self.shape(), dims)?;
        self.extremum("max", dims, keepdim)
    }

    /// The smallest element.
    pub fn min(&self) -> Result<Tensor, Error> {
        self.min_dims(&all_dims(self), false)
    }

    /// Minima over `dims`.
    pub fn min_dims<D: Dim>(&self, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("min", self.shape(), dims)?;
        self.extremum("min", dims, keepdim)
    }

    fn extremum(&self, op: &str, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
        let r = Reduction::new(op, self.shape(), dims, keepdim)?;
        if r.count() == 0 {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {:?}: {op} of an empty set of elements",
                    self.shape()
                ),
            ));
        }
        r.run(op, self, &r.wrap(op, ""))
    }

    /// `log Σ exp(x)` over `dims`, computed stably as
    /// `m + log Σ exp(x − m)` with `m` the maximum.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![1000., 1000.], &[2])?;
    /// let l = x.logsumexp(&[0], false)?.item()?;
    /// assert!((l - (1000. + 2f64.ln())).abs() < 1e-9);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn logsumexp<D: Dim>(&self, dims: &[D], keepdim: bool) -> Result<Tensor, Error> {
        let dims = &resolve_dims("logsumexp", self.shape(), dims)?;
        let r = Reduction::new("logsumexp", self.shape(), dims, keepdim)?;
        if r.count() == 0 {
            return Err(Error::shape(
                "logsumexp",
                format!("input of shape {:?}: no elements to reduce", self.shape()),
            ));
        }
        // The shift is held constant: the value does not depend on it.
        let m = format!("detach ({})", r.wrap("max", "m"));
        let sum = r.nest("sum", "s", format!("exp ({} - {m})", r.access("s")));
        r.run("logsumexp", self, &format!("{m} + log ({sum})"))
    }
}
