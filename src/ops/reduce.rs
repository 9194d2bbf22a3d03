//! Reductions over axes: `sum mean max min logsumexp`, with `keepdim`.
//!
//! Each is one index function: kept dimensions are output indices, reduced
//! ones are bound by nested `sum{..}`/`max{..}`/`min{..}` with constant
//! ranges.

use super::{apply, lit, shape_error};
use crate::tensor::Tensor;
use crate::Error;

/// The index text of a reduction of `shape` over `dims`.
struct Reduction {
    /// Output indices (`i0; j1; i2` with `j1` a kept size-1 dimension).
    out: String,
    /// The input access with reduced dimensions read through `{k}`-named
    /// variables, as a template where `{r}` is replaced by a per-use suffix.
    access: String,
    /// `(variable, size)` of each reduced dimension, in order.
    reduced: Vec<(String, usize)>,
    /// Sizes of kept size-1 output indices (not inferable from the body).
    sizes: Vec<(String, usize)>,
    out_shape: Vec<usize>,
}

impl Reduction {
    fn new(op: &str, shape: &[usize], dims: &[usize], keepdim: bool) -> Result<Reduction, Error> {
        let mut reduced_dims = vec![false; shape.len()];
        for &d in dims {
            if d >= shape.len() {
                return Err(shape_error(
                    op,
                    format!(
                        "input of shape {shape:?}: dimension {d} does not exist (rank {})",
                        shape.len()
                    ),
                ));
            }
            if std::mem::replace(&mut reduced_dims[d], true) {
                return Err(shape_error(
                    op,
                    format!("input of shape {shape:?}: dimension {d} appears twice in {dims:?}"),
                ));
            }
        }
        let (mut out, mut access, mut reduced, mut sizes, mut out_shape) =
            (vec![], vec![], vec![], vec![], vec![]);
        for (d, &n) in shape.iter().enumerate() {
            if reduced_dims[d] {
                access.push(format!("k{d}{{r}}"));
                reduced.push((format!("k{d}"), n));
                if keepdim {
                    out.push(format!("j{d}"));
                    sizes.push((format!("j{d}"), 1));
                    out_shape.push(1);
                }
            } else {
                access.push(format!("i{d}"));
                out.push(format!("i{d}"));
                out_shape.push(n);
            }
        }
        Ok(Reduction {
            out: out.join("; "),
            access: format!("x[{}]", access.join("; ")),
            reduced,
            sizes,
            out_shape,
        })
    }

    /// `op{k..}(body)` nested over every reduced dimension, with variables
    /// suffixed by `suffix` (so several reductions can sit in one body).
    fn wrap(&self, op: &str, suffix: &str) -> String {
        let mut body = self.access.replace("{r}", suffix);
        for (v, n) in self.reduced.iter().rev() {
            body = format!("{op}{{{v}{suffix}}}_0^{} ({body})", *n as i64 - 1);
        }
        body
    }

    fn count(&self) -> usize {
        self.reduced.iter().map(|(_, n)| n).product()
    }

    fn run(&self, op: &str, x: &Tensor, body: &str) -> Result<Tensor, Error> {
        let sizes: Vec<(&str, usize)> = self.sizes.iter().map(|(v, n)| (v.as_str(), *n)).collect();
        let t = apply(
            op,
            &format!("f[{}] = {body}", self.out),
            &[("x", x)],
            &sizes,
        )?;
        debug_assert_eq!(t.shape(), &self.out_shape[..]);
        Ok(t)
    }
}

fn all_dims(x: &Tensor) -> Vec<usize> {
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
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn sum_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
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
    pub fn mean_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
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
    pub fn max_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
        self.extremum("max", dims, keepdim)
    }

    /// The smallest element.
    pub fn min(&self) -> Result<Tensor, Error> {
        self.min_dims(&all_dims(self), false)
    }

    /// Minima over `dims`.
    pub fn min_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
        self.extremum("min", dims, keepdim)
    }

    fn extremum(&self, op: &str, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
        let r = Reduction::new(op, self.shape(), dims, keepdim)?;
        if r.count() == 0 {
            return Err(shape_error(
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
    pub fn logsumexp(&self, dims: &[usize], keepdim: bool) -> Result<Tensor, Error> {
        let r = Reduction::new("logsumexp", self.shape(), dims, keepdim)?;
        if r.count() == 0 {
            return Err(shape_error(
                "logsumexp",
                format!("input of shape {:?}: no elements to reduce", self.shape()),
            ));
        }
        let m = r.wrap("max", "m");
        let inner = r.access.replace("{r}", "s");
        let mut sum = format!("exp ({inner} - {m})");
        for (v, n) in r.reduced.iter().rev() {
            sum = format!("sum{{{v}s}}_0^{} ({sum})", *n as i64 - 1);
        }
        r.run("logsumexp", self, &format!("{m} + log ({sum})"))
    }
}
