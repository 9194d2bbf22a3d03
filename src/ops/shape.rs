//! Building tensors out of others: `cat`, `stack`, `pad`, `repeat`.
//!
//! Each is one index function: `cat` selects its source with a balanced
//! tree of index guards (`if {i1 < 3} then (x0[i0; i1]) else (x1[i0; i1 - 3])`),
//! `pad` guards the shifted read of its input, `repeat` writes the output as
//! (repetition, element) index pairs and is a free reshape of that. The
//! gradients are derived like any other (guards become guards, shifts
//! become shifts).

use super::formula::{self, access, cmp, define, guard, indices, shifted, size_refs};
use super::{apply, lit};
use crate::tensor::Dim;
use crate::tensor::Tensor;
use crate::Error;

/// An empty tensor of `shape` computed from `like` (see [`empty_of`]).
pub(crate) fn empty_like(shape: &[usize], like: &Tensor) -> Result<Tensor, Error> {
    empty_of(shape, &[like])
}

/// A tensor of `shape`, which has no elements, computed from `inputs`:
/// nothing to compute, but recorded when an input requires a gradient, so
/// that the result requires one too and backward gives each input a zero
/// gradient (as PyTorch). The output has no elements, so the reads of the
/// inputs' first elements in its function are never made.
pub(crate) fn empty_of(shape: &[usize], inputs: &[&Tensor]) -> Result<Tensor, Error> {
    let dtype = inputs.first().map_or(crate::DType::F32, |t| t.dtype());
    let device = inputs
        .first()
        .map_or_else(crate::tensor::default_device, |t| t.device());
    let recorded = shape.contains(&0)
        && crate::trace::is_grad_enabled()
        && inputs.iter().any(|t| t.is_requires_grad());
    if !recorded {
        return Tensor::zeros_on(shape, dtype, device);
    }
    let sizes = formula::sizes("o", shape);
    let names = indices("x", inputs.len());
    let reads: Vec<String> = names
        .iter()
        .zip(inputs)
        .map(|(n, t)| format!("0 * {}", access(n, &vec!["0"; t.rank()])))
        .collect();
    let src = define("f", &indices("o", shape.len()), reads.join(" + "));
    let args: Vec<(&str, &Tensor)> = names
        .iter()
        .map(String::as_str)
        .zip(inputs.iter().copied())
        .collect();
    super::apply("empty", &src, &args, &size_refs(&sizes))
}

/// The selection of `cat`: sources `parts[lo..hi]`, each `(arg name,
/// offset along dim, size along dim)`, as a balanced tree of guards on the
/// output index `var` (depth `log2` of the number of sources).
fn select_tree(
    parts: &[(String, usize, usize)],
    lo: usize,
    hi: usize,
    access: &dyn Fn(usize) -> String,
    var: &str,
) -> String {
    if hi - lo == 1 {
        return access(lo);
    }
    let mid = lo + (hi - lo) / 2;
    guard(
        cmp(var, "<", parts[mid].1),
        select_tree(parts, lo, mid, access, var),
        select_tree(parts, mid, hi, access, var),
    )
}

impl Tensor {
    /// Concatenates `tensors` along `dim`; all other dimensions must agree
    /// (as `torch.cat`). One index function whose guards pick the source of
    /// each element; the gradient of each input is the matching slice of
    /// the output gradient.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let a = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![5., 6.], &[2, 1])?;
    /// let c = Tensor::cat(&[&a, &b], 1)?;
    /// assert_eq!(c.shape(), &[2, 3]);
    /// assert_eq!(c.to_vec()?, vec![1., 2., 5., 3., 4., 6.]);
    /// let e = Tensor::cat(&[&a, &b], 0).unwrap_err().to_string();
    /// assert!(e.contains("dimension 1"), "{e}");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor, Error> {
        let Some(first) = tensors.first() else {
            return Err(Error::shape(
                "cat",
                "no tensors to concatenate (cat needs at least one)".into(),
            ));
        };
        let dim = dim.resolve("cat", first.shape())?;
        let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape()).collect();
        let rank = first.rank();
        if dim >= rank {
            return Err(Error::shape(
                "cat",
                format!("inputs {shapes:?}: dimension {dim} does not exist (rank {rank})"),
            ));
        }
        for (k, s) in shapes.iter().enumerate() {
            if s.len() != rank {
                return Err(Error::shape(
                    "cat",
                    format!(
                        "inputs {shapes:?}: input {k} has rank {} but input 0 has rank {rank}",
                        s.len()
                    ),
                ));
            }
            if let Some(d) = (0..rank).find(|&d| d != dim && s[d] != shapes[0][d]) {
                return Err(Error::shape(
                    "cat",
                    format!(
                        "inputs {shapes:?}: dimension {d} of input {k} ({}) must equal dimension {d} of input 0 ({}) (only dimension {dim} may differ)",
                        s[d], shapes[0][d]
                    ),
                ));
            }
        }
        let mut out_shape = shapes[0].to_vec();
        out_shape[dim] = shapes.iter().map(|s| s[dim]).sum();
        // Sources that contribute elements, with their offsets.
        let mut parts: Vec<(String, usize, usize)> = Vec::new();
        let mut args: Vec<&Tensor> = Vec::new();
        let mut offset = 0;
        for t in tensors {
            let n = t.shape()[dim];
            if n > 0 {
                parts.push((format!("x{}", parts.len()), offset, n));
                args.push(t);
            }
            offset += n;
        }
        if out_shape.contains(&0) || args.is_empty() {
            // Nothing to select from; dtypes must still agree.
            if let Some(t) = tensors.iter().find(|t| t.dtype() != first.dtype()) {
                return Err(Error::DType {
                    op: "cat".into(),
                    message: format!(
                        "input of shape {:?} is {:?} but input 0 is {:?}",
                        t.shape(),
                        t.dtype(),
                        first.dtype()
                    ),
                });
            }
            return empty_of(&out_shape, tensors);
        }
        let ix = indices("i", rank);
        let read = |p: usize| {
            let (name, off, _) = &parts[p];
            let mut idx = ix.clone();
            idx[dim] = shifted(&ix[dim], -(*off as i64));
            access(name, &idx)
        };
        let body = select_tree(&parts, 0, parts.len(), &read, &ix[dim]);
        let src = define("f", &ix, body);
        let named: Vec<(&str, &Tensor)> = parts
            .iter()
            .zip(&args)
            .map(|((n, _, _), t)| (n.as_str(), *t))
            .collect();
        let sizes = formula::sizes("i", &out_shape);
        apply("cat", &src, &named, &size_refs(&sizes))
    }

    /// Stacks tensors of one shape along a new dimension `dim` (as
    /// `torch.stack`): each is unsqueezed at `dim` (a view) and the views
    /// are concatenated.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let a = Tensor::from_vec(vec![1., 2.], &[2])?;
    /// let b = Tensor::from_vec(vec![3., 4.], &[2])?;
    /// assert_eq!(Tensor::stack(&[&a, &b], 0)?.to_vec()?, vec![1., 2., 3., 4.]);
    /// assert_eq!(Tensor::stack(&[&a, &b], 1)?.to_vec()?, vec![1., 3., 2., 4.]);
    /// assert_eq!(Tensor::stack(&[&a, &b], 1)?.shape(), &[2, 2]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn stack(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor, Error> {
        let Some(first) = tensors.first() else {
            return Err(Error::shape(
                "stack",
                "no tensors to stack (stack needs at least one)".into(),
            ));
        };
        let dim = dim.resolve_among("stack", first.shape(), first.rank() + 1)?;
        let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape()).collect();
        if let Some(k) = shapes.iter().position(|s| *s != first.shape()) {
            return Err(Error::shape(
                "stack",
                format!(
                    "inputs {shapes:?}: input {k} has shape {:?} but input 0 has shape {:?} (stack needs equal shapes)",
                    shapes[k],
                    first.shape()
                ),
            ));
        }
        if dim > first.rank() {
            return Err(Error::shape(
                "stack",
                format!(
                    "inputs of shape {:?}: the new dimension {dim} is past rank {} (at most {})",
                    first.shape(),
                    first.rank(),
                    first.rank()
                ),
            ));
        }
        let views = tensors
            .iter()
            .map(|t| t.unsqueeze(dim))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Tensor> = views.iter().collect();
        Tensor::cat(&refs, dim)
    }

    /// Pads with `value`: `pads[d] = (before, after)` elements added to
    /// dimension `d`, one pair per dimension (use `(0, 0)` to leave a
    /// dimension alone). One index function with guards; the gradient of
    /// the input is the interior of the output gradient.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
    /// let y = x.pad(&[(0, 1), (1, 0)], -1.0)?;
    /// assert_eq!(y.shape(), &[3, 3]);
    /// assert_eq!(y.to_vec()?, vec![-1., 1., 2., -1., 3., 4., -1., -1., -1.]);
    /// assert!(x.pad(&[(1, 1)], 0.0).is_err()); // one pair per dimension
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor, Error> {
        let out_shape = padded_shape("pad", self.shape(), pads)?;
        let v = lit("pad", value)?;
        if out_shape.contains(&0) {
            return empty_like(&out_shape, self);
        }
        // An empty input padded to a non-empty output is all padding; when
        // recorded, the same guarded function below (whose read of the
        // input never runs) gives the input its empty zero gradient.
        if self.numel() == 0 && !(crate::trace::is_grad_enabled() && self.is_requires_grad()) {
            return Tensor::full_on(&out_shape, value, self.dtype(), self.device());
        }
        let ix = indices("i", self.rank());
        let mut idx = ix.clone();
        let mut guards = Vec::new();
        for (d, (&n, &(b, a))) in self.shape().iter().zip(pads).enumerate() {
            idx[d] = shifted(&ix[d], -(b as i64));
            if b > 0 {
                guards.push(cmp(&ix[d], ">=", b));
            }
            if a > 0 {
                guards.push(cmp(&ix[d], "<=", b + n - 1));
            }
        }
        let body = guards
            .iter()
            .rev()
            .fold(access("x", &idx), |body, g| guard(g, body, &v));
        let sizes = formula::sizes("i", &out_shape);
        apply(
            "pad",
            &define("f", &ix, body),
            &[("x", self)],
            &size_refs(&sizes),
        )
    }

    /// The tensor tiled `reps[d]` times along each dimension (as
    /// `torch.Tensor.repeat`): `reps` may be longer than the rank, adding
    /// leading dimensions. One index function writes (repetition, element)
    /// index pairs; the result is a free reshape of it.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec(vec![1., 2.], &[2])?;
    /// assert_eq!(x.repeat(&[3])?.to_vec()?, vec![1., 2., 1., 2., 1., 2.]);
    /// let y = x.repeat(&[2, 2])?;
    /// assert_eq!(y.shape(), &[2, 4]);
    /// assert_eq!(y.to_vec()?, vec![1., 2., 1., 2., 1., 2., 1., 2.]);
    /// assert!(x.repeat(&[]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn repeat(&self, reps: &[usize]) -> Result<Tensor, Error> {
        if reps.len() < self.rank() {
            return Err(Error::shape(
                "repeat",
                format!(
                    "input of shape {:?}: {} repetition counts {reps:?} for {} dimensions (at least one per dimension)",
                    self.shape(),
                    reps.len(),
                    self.rank()
                ),
            ));
        }
        let lead = reps.len() - self.rank();
        let mut out_shape = Vec::with_capacity(reps.len());
        for (d, &r) in reps.iter().enumerate() {
            let n = if d < lead { 1 } else { self.shape()[d - lead] };
            out_shape.push(r.checked_mul(n).ok_or_else(|| {
                Error::shape(
                    "repeat",
                    format!(
                        "input of shape {:?}: repeating dimension {d} {r} times overflows",
                        self.shape()
                    ),
                )
            })?);
        }
        if out_shape.contains(&0) {
            return empty_like(&out_shape, self);
        }
        // f[r0; r1; i1; ...]: a repetition index per output dimension and,
        // for the input's own dimensions, the element index after it.
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        let mut pair_shape = Vec::new();
        let (r_ix, i_ix) = (indices("r", reps.len()), indices("i", self.rank()));
        for (d, &r) in reps.iter().enumerate() {
            out.push(r_ix[d].clone());
            sizes.push((r_ix[d].clone(), r));
            pair_shape.push(r);
            if d >= lead {
                out.push(i_ix[d - lead].clone());
                pair_shape.push(self.shape()[d - lead]);
            }
        }
        let src = define("f", &out, access("x", &i_ix));
        let t = apply("repeat", &src, &[("x", self)], &size_refs(&sizes))?;
        debug_assert_eq!(t.shape(), &pair_shape[..]);
        t.reshape(&out_shape)
    }
}

/// The shape of `shape` padded by `pads` (one `(before, after)` pair per
/// dimension), or an error naming `op`.
pub(super) fn padded_shape(
    op: &str,
    shape: &[usize],
    pads: &[(usize, usize)],
) -> Result<Vec<usize>, Error> {
    if pads.len() != shape.len() {
        return Err(Error::shape(
            op,
            format!(
                "input of shape {shape:?}: {} (before, after) pairs given for {} dimensions (one pair per dimension)",
                pads.len(),
                shape.len()
            ),
        ));
    }
    let mut out = Vec::with_capacity(shape.len());
    for (d, (&n, &(b, a))) in shape.iter().zip(pads).enumerate() {
        let size = n.checked_add(b).and_then(|s| s.checked_add(a));
        out.push(size.ok_or_else(|| {
            Error::shape(
                op,
                format!("input of shape {shape:?}: padding ({b}, {a}) of dimension {d} overflows"),
            )
        })?);
    }
    Ok(out)
}
