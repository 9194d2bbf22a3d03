//! Pooling: `avg_pool1d max_pool1d avg_pool2d max_pool2d` (stride,
//! padding, dilation, `ceil_mode`, `count_include_pad`: [`Pool2d`]) and
//! `adaptive_avg_pool2d`.
//!
//! A pool is one index function: the window's `max{k}` or `sum{k}` of the
//! input at `stride·t + dilation·k − padding`, guarded where a window can
//! leave the input (−∞ for a maximum, 0 for a sum), so no padded copy is
//! made. Each dimension's guards sit right inside that dimension's
//! reduction, so they become its bounds. An average divides by the constant window size, or, with
//! `ceil_mode` or without `count_include_pad`, by the count of the
//! window's positions inside the (padded) input, itself a guarded sum of
//! ones in the same function.

use super::conv::position;
use super::formula::{access, cmp, define, guard, indices, reduce, size_refs};
use super::shape::empty_like;
use super::{apply, lit};
use crate::tensor::Tensor;
use crate::Error;

/// The options of [`Tensor::max_pool2d_with`] and
/// [`Tensor::avg_pool2d_with`], with PyTorch's names and defaults
/// ([`Pool2d::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    pub kernel_size: [usize; 2],
    pub stride: [usize; 2],
    /// On each side, at most half the (dilated) kernel.
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Output sizes rounded up: a last window may start in the right or
    /// bottom padding's reach and run past the input.
    pub ceil_mode: bool,
    /// Averages count padded positions (default `true`).
    pub count_include_pad: bool,
    /// Averages divide by this instead of the window's count (PyTorch's
    /// `divisor_override`, ≥ 1; average pooling only).
    pub divisor_override: Option<usize>,
}

impl Pool2d {
    /// Windows of `kernel_size`, stride = kernel size, no padding, no
    /// dilation, floor mode, padding counted.
    pub fn new(kernel_size: [usize; 2]) -> Pool2d {
        Pool2d {
            kernel_size,
            stride: kernel_size,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }

    /// Windows of `kernel_size` moved by `stride` over `padding`, the
    /// other options PyTorch's defaults.
    fn padded(kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> Pool2d {
        Pool2d {
            stride,
            padding,
            ..Pool2d::new(kernel_size)
        }
    }

    fn spec(&self) -> PoolSpec<'_> {
        PoolSpec {
            kernel: &self.kernel_size,
            stride: &self.stride,
            padding: &self.padding,
            dilation: &self.dilation,
            ceil_mode: self.ceil_mode,
            count_include_pad: self.count_include_pad,
            divisor_override: self.divisor_override,
        }
    }
}

/// The validated-on-use options of one pool, per spatial dimension.
struct PoolSpec<'a> {
    kernel: &'a [usize],
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<usize>,
}

const ONES: [usize; 3] = [1, 1, 1];

impl<'a> PoolSpec<'a> {
    /// No dilation, floor mode, padding counted.
    fn plain(kernel: &'a [usize], stride: &'a [usize], padding: &'a [usize]) -> PoolSpec<'a> {
        PoolSpec {
            kernel,
            stride,
            padding,
            dilation: &ONES[..kernel.len()],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }

    /// PyTorch's `pooling_output_shape` for spatial dimension `d` of size
    /// `n`, or `None` when the dilated kernel does not fit.
    fn out_size(&self, d: usize, n: usize) -> Option<usize> {
        let (k, s, p, dil) = (
            self.kernel[d],
            self.stride[d],
            self.padding[d],
            self.dilation[d],
        );
        let span = (n + 2 * p).checked_sub(dil * (k - 1) + 1)?;
        let mut out = if self.ceil_mode {
            span.div_ceil(s) + 1
        } else {
            span / s + 1
        };
        // The last window must start inside the input or its left padding.
        if self.ceil_mode && (out - 1) * s >= n + p {
            out -= 1;
        }
        Some(out)
    }
}

/// `[n, size]`: row `i` averages `⌊i·size/n⌋ … ⌈(i+1)·size/n⌉ − 1`.
fn averaging_matrix(
    n: usize,
    size: usize,
    dtype: crate::DType,
    device: crate::alloc::Device,
) -> Result<Tensor, Error> {
    let mut v = vec![0.0; n * size];
    for i in 0..n {
        let (lo, hi) = (i * size / n, ((i + 1) * size).div_ceil(n));
        for j in lo..hi {
            v[i * size + j] = 1.0 / (hi - lo) as f64;
        }
    }
    Tensor::from_vec_f64_on(v, &[n, size], device)?.to_dtype(dtype)
}

#[derive(Clone, Copy)]
enum Pool {
    Avg,
    Max,
}

/// Pooling over the last `spec.kernel.len()` dimensions; see the module
/// documentation.
fn pool_nd(op: &str, x: &Tensor, spec: &PoolSpec, kind: Pool) -> Result<Tensor, Error> {
    let s = spec.kernel.len();
    let xs = x.shape();
    if xs.len() < s {
        return Err(Error::shape(
            op,
            format!(
                "input of shape {xs:?}: pooling over {s} dimension(s) needs rank ≥ {s} (e.g. [N, C{}])",
                if s == 1 { ", L" } else { ", H, W" }
            ),
        ));
    }
    let (kernel, stride, padding, dilation) =
        (spec.kernel, spec.stride, spec.padding, spec.dilation);
    match (kind, spec.divisor_override) {
        (Pool::Max, Some(_)) => {
            return Err(Error::shape(
                op,
                format!("input of shape {xs:?}: divisor_override is an option of average pooling"),
            ))
        }
        (Pool::Avg, Some(0)) => {
            return Err(Error::shape(
                op,
                format!("input of shape {xs:?}: divisor_override must not be zero"),
            ))
        }
        _ => {}
    }
    let lead = xs.len() - s;
    let mut out_shape = xs[..lead].to_vec();
    for d in 0..s {
        if kernel[d] == 0 || stride[d] == 0 || dilation[d] == 0 {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {xs:?}: kernel {kernel:?}, stride {stride:?} and dilation {dilation:?} must be ≥ 1 (spatial dimension {d})"
                ),
            ));
        }
        let reach = dilation[d] * (kernel[d] - 1) + 1;
        if 2 * padding[d] > reach {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {xs:?}: padding {padding:?} exceeds half the kernel {kernel:?} in spatial dimension {d} (as PyTorch requires)"
                ),
            ));
        }
        let n = xs[lead + d];
        let size = spec.out_size(d, n).filter(|_| n > 0).ok_or_else(|| {
            Error::shape(
                op,
                format!(
                    "input of shape {xs:?}: kernel size {} (dilated {reach}) exceeds dimension {} ({} with padding)",
                    kernel[d],
                    lead + d,
                    n + 2 * padding[d]
                ),
            )
        })?;
        out_shape.push(size);
    }
    if out_shape.contains(&0) {
        return empty_like(&out_shape, x);
    }
    // y[a…; t…] = op_k… x[a…; stride·t + dilation·k − pad] (guards where a
    // window can leave the input).
    let (t, k) = (indices("t", s), indices("k", s));
    let mut out_idx = indices("a", lead);
    let mut x_index = out_idx.clone();
    let mut guards: Vec<Vec<String>> = Vec::new();
    let mut counts = Vec::new();
    for d in 0..s {
        out_idx.push(t[d].clone());
        let p = position(stride[d], &t[d], dilation[d], &k[d], padding[d]);
        let (n, pad) = (xs[lead + d], padding[d]);
        // The largest `stride·t + dilation·k` of any window.
        let last = (out_shape[lead + d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1);
        let mut inside_input = Vec::new();
        if pad > 0 {
            inside_input.push(cmp(&p, ">=", 0));
        }
        if last - pad > n - 1 {
            inside_input.push(cmp(&p, "<=", n - 1));
        }
        guards.push(inside_input.clone());
        // The divisor's factor for this dimension: the window's positions
        // inside the padded input (or the input), where that can vary.
        let counted: Vec<String> = if !spec.count_include_pad {
            inside_input
        } else if last > n - 1 + 2 * pad {
            vec![cmp(&p, "<=", n - 1 + pad)]
        } else {
            Vec::new()
        };
        counts.push(if counted.is_empty() {
            kernel[d].to_string()
        } else {
            let one = counted
                .iter()
                .rev()
                .fold("1".to_string(), |b, c| guard(c, b, 0));
            reduce("sum", &k[d], 0, kernel[d] as i64 - 1, one)
        });
        x_index.push(p);
    }
    let (red, outside) = match kind {
        Pool::Avg => ("sum", "0"),
        Pool::Max => ("max", "-inf"),
    };
    // Each dimension's guards sit right inside its own reduction, where
    // they are linear in its variable and become its bounds
    // (`crate::planner::guard_bounds`): the window loops then run no
    // branch, and the output loop a vector interior.
    let mut body = (0..s).rev().fold(access("x", &x_index), |body, d| {
        let guarded = guards[d]
            .iter()
            .rev()
            .fold(body, |body, c| guard(c, body, outside));
        reduce(red, &k[d], 0, kernel[d] as i64 - 1, guarded)
    });
    if let Pool::Avg = kind {
        if let Some(divisor) = spec.divisor_override {
            body = format!("{body} * {}", lit(op, 1.0 / divisor as f64)?);
        } else if counts.iter().all(|c| c.parse::<usize>().is_ok()) {
            let count: usize = kernel.iter().product();
            body = format!("{body} * {}", lit(op, 1.0 / count as f64)?);
        } else {
            body = format!("{body} / ({})", counts.join(" * "));
        }
    }
    let sizes: Vec<(String, usize)> = out_idx
        .iter()
        .cloned()
        .zip(out_shape.iter().copied())
        .collect();
    apply(
        op,
        &define("y", &out_idx, body),
        &[("x", x)],
        &size_refs(&sizes),
    )
}

impl Tensor {
    /// Average pooling over the last dimension (`[.., L]`, e.g. `[N, C, L]`)
    /// with windows of `kernel` elements every `stride`, no padding.
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 3., 5., 7., 9.], &[1, 1, 5])?;
    /// assert_eq!(x.avg_pool1d(2, 2)?.to_vec()?, vec![2., 6.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn avg_pool1d(&self, kernel: usize, stride: usize) -> Result<Tensor, Error> {
        pool_nd(
            "avg_pool1d",
            self,
            &PoolSpec::plain(&[kernel], &[stride], &[0]),
            Pool::Avg,
        )
    }

    /// Max pooling over the last dimension (the gradient goes to the first
    /// maximiser of each window).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 3., 5., 2., 9.], &[1, 5])?;
    /// assert_eq!(x.max_pool1d(3, 1)?.to_vec()?, vec![5., 5., 9.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_pool1d(&self, kernel: usize, stride: usize) -> Result<Tensor, Error> {
        pool_nd(
            "max_pool1d",
            self,
            &PoolSpec::plain(&[kernel], &[stride], &[0]),
            Pool::Max,
        )
    }

    /// Average pooling over the last two dimensions (`[.., H, W]`).
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::arange(16, DType::F32)?.reshape(&[1, 1, 4, 4])?;
    /// assert_eq!(x.avg_pool2d([2, 2], [2, 2])?.to_vec()?, vec![2.5, 4.5, 10.5, 12.5]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn avg_pool2d(&self, kernel: [usize; 2], stride: [usize; 2]) -> Result<Tensor, Error> {
        self.avg_pool2d_padded(kernel, stride, [0, 0])
    }

    /// Max pooling over the last two dimensions (`[.., H, W]`).
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::arange(16, DType::F32)?.reshape(&[1, 4, 4])?;
    /// assert_eq!(x.max_pool2d([2, 2], [2, 2])?.to_vec()?, vec![5., 7., 13., 15.]);
    /// assert!(x.max_pool2d([5, 1], [1, 1]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_pool2d(&self, kernel: [usize; 2], stride: [usize; 2]) -> Result<Tensor, Error> {
        self.max_pool2d_padded(kernel, stride, [0, 0])
    }

    /// [`Tensor::avg_pool2d`] with `padding` zeros on each side, counted
    /// in every window's mean (PyTorch's default `count_include_pad=True`);
    /// `padding` at most half the kernel.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::ones(&[1, 1, 2, 2], DType::F32)?;
    /// assert_eq!(x.avg_pool2d_padded([2, 2], [2, 2], [1, 1])?.to_vec()?, vec![0.25; 4]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn avg_pool2d_padded(
        &self,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Result<Tensor, Error> {
        self.avg_pool2d_with(&Pool2d::padded(kernel, stride, padding))
    }

    /// [`Tensor::max_pool2d`] with `padding` on each side that no window's
    /// maximum takes (PyTorch pads with −∞); `padding` at most half the
    /// kernel.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::arange(4, DType::F32)?.reshape(&[1, 1, 2, 2])?.neg()?;
    /// assert_eq!(x.max_pool2d_padded([2, 2], [1, 1], [1, 1])?.to_vec()?,
    ///            vec![0., 0., -1., 0., 0., -1., -2., -2., -3.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_pool2d_padded(
        &self,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Result<Tensor, Error> {
        self.max_pool2d_with(&Pool2d::padded(kernel, stride, padding))
    }

    /// Average pooling to an `[oh, ow]` output (PyTorch's
    /// `adaptive_avg_pool2d`): output cell `i` averages rows
    /// `⌊i·H/oh⌋ … ⌈(i+1)·H/oh⌉ − 1` (and the same for columns). The
    /// windows as two constant averaging matrices: `P · x · Qᵀ` (weights
    /// `1/count`, so a mean of three elements may differ from PyTorch's
    /// `sum / 3` in the last bit).
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::arange(9, DType::F64)?.reshape(&[1, 1, 3, 3])?;
    /// assert!((x.adaptive_avg_pool2d([1, 1])?.item()? - 4.0).abs() < 1e-15);
    /// assert_eq!(x.adaptive_avg_pool2d([2, 2])?.to_vec_f64()?, vec![2., 3., 5., 6.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn adaptive_avg_pool2d(&self, out: [usize; 2]) -> Result<Tensor, Error> {
        let xs = self.shape();
        if xs.len() < 2 || out.contains(&0) {
            return Err(Error::shape(
                "adaptive_avg_pool2d",
                format!("input of shape {xs:?} to output {out:?}: needs rank ≥ 2 and a non-empty output"),
            ));
        }
        let (h, w) = (xs[xs.len() - 2], xs[xs.len() - 1]);
        let p = averaging_matrix(out[0], h, self.dtype(), self.device())?;
        let q = averaging_matrix(out[1], w, self.dtype(), self.device())?;
        p.matmul(&self.matmul(&q.t()?)?)
    }

    /// Max pooling over `[.., H, W]` with every option of PyTorch's
    /// `F.max_pool2d`: padding (never taken), dilation and `ceil_mode`
    /// (windows that start inside the padded input may run past it).
    ///
    /// ```
    /// use tenjin::{DType, Pool2d, Tensor};
    /// let x = Tensor::arange(25, DType::F32)?.reshape(&[1, 1, 5, 5])?;
    /// let o = Pool2d { dilation: [2, 2], ceil_mode: true, ..Pool2d::new([2, 2]) };
    /// // Windows at rows/columns {0, 2} and {2, 4}: ⌈(5 − 3) / 2⌉ + 1 = 2.
    /// assert_eq!(x.max_pool2d_with(&o)?.to_vec()?, vec![12., 14., 22., 24.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_pool2d_with(&self, o: &Pool2d) -> Result<Tensor, Error> {
        pool_nd("max_pool2d", self, &o.spec(), Pool::Max)
    }

    /// [`Tensor::max_pool2d_with`] and, for each output, where its maximum
    /// is: the flat index `h·W + w` into its input plane (PyTorch's
    /// `return_indices=True`, the first maximum in window order). The
    /// indices are `i64` with no gradient; the values' gradient is the max
    /// pool's.
    ///
    /// ```
    /// use tenjin::{DType, Pool2d, Tensor};
    /// let x = Tensor::from_vec(vec![1., 5., 2., 0., 3., 9., 4., 4., 7.], &[1, 1, 3, 3])?;
    /// let (y, at) = x.max_pool2d_with_indices(&Pool2d { stride: [1, 1], ..Pool2d::new([2, 2]) })?;
    /// assert_eq!(y.to_vec()?, vec![5., 9., 4., 9.]);
    /// assert_eq!(at.to_vec_i64()?, vec![1, 5, 6, 5]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn max_pool2d_with_indices(&self, o: &Pool2d) -> Result<(Tensor, Tensor), Error> {
        let values = self.max_pool2d_with(o)?;
        if values.numel() == 0 {
            let none = Tensor::zeros_on(values.shape(), crate::DType::I64, self.device())?;
            return Ok((values, none));
        }
        let xs = self.shape();
        let (r, ys) = (xs.len(), values.shape().to_vec());
        let (h, w) = (xs[r - 2], xs[r - 1]);
        let (oh, ow) = (ys[r - 2], ys[r - 1]);
        let [kh, kw] = o.kernel_size;
        let [sh, sw] = o.stride;
        let [ph, pw] = o.padding;
        let [dh, dw] = o.dilation;
        // The input padded with the lowest finite value (an element of the
        // input wins every tie with padding unless it is −∞), wide enough
        // for the last window (ceil mode may reach past the right padding),
        // cut into windows.
        let (reach_h, reach_w) = (dh * (kh - 1) + 1, dw * (kw - 1) + 1);
        let (right_h, right_w) = (
            ((oh - 1) * sh + reach_h).saturating_sub(h + ph),
            ((ow - 1) * sw + reach_w).saturating_sub(w + pw),
        );
        let mut pads = vec![(0, 0); r - 2];
        pads.extend([(ph, right_h), (pw, right_w)]);
        let padded = self.detach().pad(&pads, f64::MIN)?;
        let windows = padded
            .unfold(r - 2, reach_h, sh)?
            .unfold(r - 1, reach_w, sw)?
            .slice(r, 0, reach_h, dh)?
            .slice(r + 1, 0, reach_w, dw)?
            .narrow(r - 2, 0, oh)?
            .narrow(r - 1, 0, ow)?;
        let mut flat = ys.clone();
        flat.push(kh * kw);
        let k = windows.contiguous()?.reshape(&flat)?.argmax(-1, false)?;
        // Window position k = (i, j) of output (t, u) is input row
        // t·sh + i·dh − ph and column u·sw + j·dw − pw.
        let at: Vec<i64> = k
            .to_vec_i64()?
            .into_iter()
            .enumerate()
            .map(|(e, k)| {
                let (t, u) = ((e / ow) % oh, e % ow);
                let (i, j) = (k as usize / kw, k as usize % kw);
                let row = (t * sh + i * dh) as i64 - ph as i64;
                let col = (u * sw + j * dw) as i64 - pw as i64;
                row * w as i64 + col
            })
            .collect();
        let at = Tensor::from_vec_i64(at, &ys)?.to_device(self.device())?;
        Ok((values, at))
    }

    /// Average pooling over `[.., H, W]` with PyTorch's `F.avg_pool2d`
    /// options: padding, `ceil_mode`, `count_include_pad` (a window's
    /// divisor counts its positions inside the padded input, or inside the
    /// input only) and `divisor_override`. Dilation must be 1, as PyTorch
    /// has none for averages.
    ///
    /// ```
    /// use tenjin::{DType, Pool2d, Tensor};
    /// let x = Tensor::ones(&[1, 1, 3, 3], DType::F64)?;
    /// let o = Pool2d { ceil_mode: true, count_include_pad: false, ..Pool2d::new([2, 2]) };
    /// // The last window of each row and column holds one element.
    /// assert_eq!(x.avg_pool2d_with(&o)?.to_vec_f64()?, vec![1.0; 4]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn avg_pool2d_with(&self, o: &Pool2d) -> Result<Tensor, Error> {
        if o.dilation != [1, 1] {
            return Err(Error::shape(
                "avg_pool2d",
                format!(
                    "input of shape {:?}: dilation {:?}: average pooling has no dilation (as PyTorch)",
                    self.shape(),
                    o.dilation
                ),
            ));
        }
        pool_nd("avg_pool2d", self, &o.spec(), Pool::Avg)
    }
}
