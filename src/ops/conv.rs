//! Convolutions: `conv1d conv2d` (stride, zero padding, dilation, groups,
//! optional bias) and `conv_transpose2d`; pooling is `super::pool`.
//!
//! A convolution is one index function:
//! `y[n; o; t] = sum{c}_0^2 (sum{k}_0^2 (if {2*t + k - 1 >= 0} then (x[n; c; 2*t + k - 1] * w[o; c; k]) else (0))) + b[o]`.
//! Zero padding is a guard, so no padded copy is made. With groups the
//! output channel `o` reads input channels `g·Cg + c` with `g = o / Q`
//! (`Q = O / groups`), which is not affine in `o`; the function writes the
//! channel as two indices `(g, q)`, giving `[N, groups, Q, ...]`, and the
//! result is a free reshape of that to `[N, O, ...]`.

use super::apply;
use super::formula::{access, cmp, define, guard, indices, size_refs, sum_to};
use super::shape::empty_of;
use crate::tensor::Tensor;
use crate::Error;

/// `c·v`, or `v` when `c` is 1, or nothing when `c` is 0.
fn term(c: usize, v: &str) -> Option<String> {
    match c {
        0 => None,
        1 => Some(v.to_string()),
        _ => Some(format!("{c}*{v}")),
    }
}

/// `a·t + b·k - p` as index text.
pub(super) fn position(stride: usize, t: &str, dilation: usize, k: &str, pad: usize) -> String {
    let mut s: Vec<String> = [term(stride, t), term(dilation, k)]
        .into_iter()
        .flatten()
        .collect();
    if s.is_empty() {
        s.push("0".into());
    }
    let mut out = s.join(" + ");
    if pad > 0 {
        out = format!("{out} - {pad}");
    }
    out
}

/// Validated hyper-parameters of an `S`-dimensional convolution.
struct ConvGeometry {
    n: usize,
    o: usize,
    cg: usize,
    q: usize,
    groups: usize,
    input: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    out: Vec<usize>,
}

#[allow(clippy::too_many_arguments)]
fn spatial_out(
    op: &str,
    what: &str,
    size: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    dim: usize,
) -> Result<usize, Error> {
    let checked = || -> Option<(usize, usize)> {
        let padded = size.checked_add(padding.checked_mul(2)?)?;
        let span = dilation
            .checked_mul(kernel.checked_sub(1)?)?
            .checked_add(1)?;
        Some((padded, span))
    };
    let Some((padded, span)) = checked() else {
        return Err(Error::shape(
            op,
            format!("{what}: the sizes of spatial dimension {dim} overflow"),
        ));
    };
    if span > padded {
        return Err(Error::shape(
            op,
            format!(
                "{what}: the kernel spans {span} elements (size {kernel}, dilation {dilation}) along spatial dimension {dim}, more than the padded input's {padded} (size {size}, padding {padding} on each side)"
            ),
        ));
    }
    Ok((padded - span) / stride + 1)
}

/// A convolution's hyperparameters, one entry per spatial dimension.
struct ConvSpec<'a> {
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    groups: usize,
}

fn geometry(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    spec: &ConvSpec,
) -> Result<ConvGeometry, Error> {
    let ConvSpec {
        stride,
        padding,
        dilation,
        groups,
    } = *spec;
    let s = stride.len();
    let (xs, ws) = (x.shape(), w.shape());
    let what = format!("input {xs:?} and weight {ws:?}");
    let layout = if s == 1 { "[N, C, L]" } else { "[N, C, H, W]" };
    let wlayout = if s == 1 {
        "[O, C/groups, K]"
    } else {
        "[O, C/groups, KH, KW]"
    };
    if xs.len() != s + 2 {
        return Err(Error::shape(
            op,
            format!("{what}: the input must have rank {} ({layout})", s + 2),
        ));
    }
    if ws.len() != s + 2 {
        return Err(Error::shape(
            op,
            format!("{what}: the weight must have rank {} ({wlayout})", s + 2),
        ));
    }
    for (name, v) in [("stride", stride), ("dilation", dilation)] {
        if let Some(d) = v.iter().position(|&v| v == 0) {
            return Err(Error::shape(
                op,
                format!("{what}: {name} {v:?} is 0 in spatial dimension {d} (must be ≥ 1)"),
            ));
        }
    }
    if groups == 0 {
        return Err(Error::shape(
            op,
            format!("{what}: groups must be ≥ 1, not 0"),
        ));
    }
    let (n, c, o, cg) = (xs[0], xs[1], ws[0], ws[1]);
    if c == 0 {
        return Err(Error::shape(
            op,
            format!("{what}: the input has no channels (dimension 1 is 0)"),
        ));
    }
    if c % groups != 0 {
        return Err(Error::shape(
            op,
            format!(
                "{what}: dimension 1 of input ({c} channels) is not divisible by groups ({groups})"
            ),
        ));
    }
    if o % groups != 0 {
        return Err(Error::shape(
            op,
            format!("{what}: dimension 0 of weight ({o} output channels) is not divisible by groups ({groups})"),
        ));
    }
    if cg != c / groups {
        return Err(Error::shape(
            op,
            format!(
                "{what}: dimension 1 of weight ({cg}) must equal dimension 1 of input ({c}) / groups ({groups}) = {}",
                c / groups
            ),
        ));
    }
    if let Some(b) = b {
        if b.shape() != [o] {
            return Err(Error::shape(
                op,
                format!(
                    "weight {ws:?} and bias {:?}: the bias must have shape [{o}]",
                    b.shape()
                ),
            ));
        }
    }
    let mut out = Vec::with_capacity(s);
    for d in 0..s {
        if xs[2 + d] == 0 {
            return Err(Error::shape(
                op,
                format!("{what}: dimension {} of input (spatial) is 0", 2 + d),
            ));
        }
        if ws[2 + d] == 0 {
            return Err(Error::shape(
                op,
                format!("{what}: dimension {} of weight (kernel size) is 0", 2 + d),
            ));
        }
        out.push(spatial_out(
            op,
            &what,
            xs[2 + d],
            ws[2 + d],
            stride[d],
            padding[d],
            dilation[d],
            d,
        )?);
    }
    Ok(ConvGeometry {
        n,
        o,
        cg,
        q: o / groups,
        groups,
        input: xs[2..].to_vec(),
        kernel: ws[2..].to_vec(),
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        out,
    })
}

fn conv_nd(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    spec: &ConvSpec,
) -> Result<Tensor, Error> {
    let g = geometry(op, x, w, b, spec)?;
    let final_shape: Vec<usize> = [&[g.n, g.o][..], &g.out].concat();
    if final_shape.contains(&0) {
        let inputs: Vec<&Tensor> = [Some(x), Some(w), b].into_iter().flatten().collect();
        return empty_of(&final_shape, &inputs);
    }
    let (src, sizes) = conv_source(&g, b.is_some());
    let sizes = size_refs(&sizes);
    let y = match b {
        Some(b) => apply(op, &src, &[("x", x), ("w", w), ("b", b)], &sizes)?,
        None => apply(op, &src, &[("x", x), ("w", w)], &sizes)?,
    };
    if g.groups > 1 {
        y.reshape(&final_shape)
    } else {
        Ok(y)
    }
}

/// The convolution of `g` as index-function text over `x`, `w` (and `b`),
/// with the explicit sizes of its output indices.
fn conv_source(g: &ConvGeometry, bias: bool) -> (String, Vec<(String, usize)>) {
    let s = g.out.len();
    let grouped = g.groups > 1;
    let (out_ch, in_ch) = if grouped {
        (format!("{}*g + q", g.q), format!("{}*g + c", g.cg))
    } else {
        ("o".to_string(), "c".to_string())
    };
    // y[n; o; t…] = Σ_c Σ_k… [padding guards] x[n; c; stride·t + dilation·k − pad] · w[o; c; k…] (+ b[o])
    let t = indices("t", s);
    let k = indices("k", s);
    let mut x_index = vec!["n".to_string(), in_ch];
    let mut guards = Vec::new();
    for d in 0..s {
        let p = position(g.stride[d], &t[d], g.dilation[d], &k[d], g.padding[d]);
        if g.padding[d] > 0 {
            guards.push(cmp(&p, ">=", 0));
        }
        let last = g.stride[d] * (g.out[d] - 1) + g.dilation[d] * (g.kernel[d] - 1);
        if last > g.padding[d] + g.input[d] - 1 {
            guards.push(cmp(&p, "<=", g.input[d] - 1));
        }
        x_index.push(p);
    }
    let w_index = [&[out_ch.clone(), "c".to_string()][..], &k].concat();
    let product = format!("{} * {}", access("x", &x_index), access("w", &w_index));
    let guarded = guards
        .iter()
        .rev()
        .fold(product, |body, c| guard(c, body, 0));
    let taps = (0..s)
        .rev()
        .fold(guarded, |body, d| sum_to(&k[d], g.kernel[d], body));
    let mut body = sum_to("c", g.cg, taps);
    if bias {
        body = format!("{body} + {}", access("b", &[&out_ch]));
    }
    let mut out_idx = vec!["n".to_string()];
    let mut sizes: Vec<(String, usize)> = vec![("n".into(), g.n)];
    if grouped {
        out_idx.extend(["g".to_string(), "q".to_string()]);
        sizes.extend([("g".to_string(), g.groups), ("q".to_string(), g.q)]);
    } else {
        out_idx.push("o".into());
        sizes.push(("o".into(), g.o));
    }
    for (td, &n) in t.iter().zip(&g.out) {
        out_idx.push(td.clone());
        sizes.push((td.clone(), n));
    }
    (define("y", &out_idx, body), sizes)
}

impl Tensor {
    /// 1-D convolution (cross-correlation, as `torch.nn.functional.conv1d`)
    /// of `self` `[N, C, L]` with `w` `[O, C/groups, K]` and an optional
    /// bias `[O]`, giving `[N, O, ⌊(L + 2·padding − dilation·(K − 1) − 1) /
    /// stride⌋ + 1]`. Zero padding is a guard inside the one index function.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec(vec![1., 2., 3., 4.], &[1, 1, 4])?;
    /// let w = Tensor::from_vec(vec![1., 0., -1.], &[1, 1, 3])?;
    /// let y = x.conv1d(&w, None, 1, 1, 1, 1)?;
    /// assert_eq!(y.to_vec()?, vec![-2., -2., -2., 3.]);
    /// let e = x.conv1d(&w, None, 1, 0, 1, 2).unwrap_err().to_string();
    /// assert!(e.contains("not divisible by groups"), "{e}");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn conv1d(
        &self,
        w: &Tensor,
        b: Option<&Tensor>,
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
    ) -> Result<Tensor, Error> {
        let spec = ConvSpec {
            stride: &[stride],
            padding: &[padding],
            dilation: &[dilation],
            groups,
        };
        conv_nd("conv1d", self, w, b, &spec)
    }

    /// 2-D convolution (as `torch.nn.functional.conv2d`) of `self`
    /// `[N, C, H, W]` with `w` `[O, C/groups, KH, KW]` and an optional bias
    /// `[O]`; `stride`, `padding`, `dilation` are per spatial dimension.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::arange(16, DType::F32)?.reshape(&[1, 1, 4, 4])?;
    /// let w = Tensor::ones(&[2, 1, 2, 2], DType::F32)?;
    /// let b = Tensor::from_vec(vec![0., 100.], &[2])?;
    /// let y = x.conv2d(&w, Some(&b), [2, 2], [0, 0], [1, 1], 1)?;
    /// assert_eq!(y.shape(), &[1, 2, 2, 2]);
    /// assert_eq!(y.to_vec()?, vec![10., 18., 42., 50., 110., 118., 142., 150.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn conv2d(
        &self,
        w: &Tensor,
        b: Option<&Tensor>,
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Tensor, Error> {
        let spec = ConvSpec {
            stride: &stride,
            padding: &padding,
            dilation: &dilation,
            groups,
        };
        conv_nd("conv2d", self, w, b, &spec)
    }
}

impl Tensor {
    /// 2-D transposed convolution (PyTorch's `conv_transpose2d`, groups 1)
    /// of `self` `[N, Cin, H, W]` with `w` `[Cin, Cout, KH, KW]` and an
    /// optional bias `[Cout]`, giving `[N, Cout, Ho, Wo]` with
    /// `Ho = (H − 1)·stride − 2·padding + dilation·(KH − 1) + output_padding + 1`.
    ///
    /// It is the gradient of `conv2d` with respect to its input, and is
    /// computed as exactly that: the convolution `[N, Cout, Ho, Wo] →
    /// [N, Cin, H, W]` is written as an index function and derived by the
    /// symbolic core, whose derivative has its strided sums solved exactly
    /// (no zero-stuffed input, no scatter). Its own gradients are derived in
    /// turn as for any op.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1., 2.], &[1, 1, 1, 2])?;
    /// let w = Tensor::from_vec(vec![1., 10., 100.], &[1, 1, 1, 3])?;
    /// let y = x.conv_transpose2d(&w, None, [1, 2], [0, 0], [0, 0], [1, 1])?;
    /// assert_eq!(y.shape(), &[1, 1, 1, 5]);
    /// assert_eq!(y.to_vec()?, vec![1., 10., 102., 20., 200.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose2d(
        &self,
        w: &Tensor,
        b: Option<&Tensor>,
        stride: [usize; 2],
        padding: [usize; 2],
        output_padding: [usize; 2],
        dilation: [usize; 2],
    ) -> Result<Tensor, Error> {
        let op = "conv_transpose2d";
        let (xs, ws) = (self.shape(), w.shape());
        let what = format!("input {xs:?} and weight {ws:?}");
        if xs.len() != 4 || ws.len() != 4 || xs[1] != ws[0] {
            return Err(Error::shape(
                op,
                format!(
                    "{what}: expected [N, Cin, H, W] and [Cin, Cout, KH, KW] with the same Cin"
                ),
            ));
        }
        let mut out = Vec::with_capacity(2);
        for d in 0..2 {
            if stride[d] == 0 || dilation[d] == 0 || ws[2 + d] == 0 || xs[2 + d] == 0 {
                return Err(Error::shape(
                    op,
                    format!("{what}: stride {stride:?}, dilation {dilation:?}, the kernel and the input must be ≥ 1 in spatial dimension {d}"),
                ));
            }
            if output_padding[d] >= stride[d].max(dilation[d]) {
                return Err(Error::shape(
                    op,
                    format!("{what}: output_padding {output_padding:?} must be smaller than the stride or the dilation in spatial dimension {d}"),
                ));
            }
            let full =
                (xs[2 + d] - 1) * stride[d] + dilation[d] * (ws[2 + d] - 1) + output_padding[d] + 1;
            if full <= 2 * padding[d] {
                return Err(Error::shape(
                    op,
                    format!(
                        "{what}: padding {padding:?} leaves no output in spatial dimension {d}"
                    ),
                ));
            }
            out.push(full - 2 * padding[d]);
        }
        if let Some(b) = b {
            if b.shape() != [ws[1]] {
                return Err(Error::shape(
                    op,
                    format!(
                        "{what}: the bias has shape {:?}, expected [{}]",
                        b.shape(),
                        ws[1]
                    ),
                ));
            }
        }
        // The convolution whose input gradient this is: input [N, Cout, Ho, Wo],
        // weight w as [O = Cin, C = Cout, KH, KW], output [N, Cin, H, W].
        let g = ConvGeometry {
            n: xs[0],
            o: ws[0],
            cg: ws[1],
            q: ws[0],
            groups: 1,
            input: out.clone(),
            kernel: ws[2..].to_vec(),
            stride: stride.to_vec(),
            padding: padding.to_vec(),
            dilation: dilation.to_vec(),
            out: xs[2..].to_vec(),
        };
        let (src, sizes) = conv_source(&g, false);
        let x_shape = [xs[0], ws[1], out[0], out[1]];
        let f = crate::symbolic::IndexFn::parse_with_sizes(
            &src,
            &[("x", &x_shape[..]), ("w", ws)],
            &size_refs(&sizes),
        )?;
        let (dx, kept) = f.derive("x")?.without_unused_args();
        // The derivative's arguments: x (unused, dropped), w, then dy.
        let inputs: Vec<&Tensor> = kept
            .iter()
            .map(|&k| match k {
                1 => Ok(w),
                2 => Ok(self),
                _ => Err(Error::shape(
                    op,
                    "internal: the derivative reads the convolution's input".into(),
                )),
            })
            .collect::<Result<_, Error>>()?;
        let y = super::apply_index_fn(
            op,
            &dx,
            &dx.to_string(),
            &inputs,
            self.dtype(),
            self.device(),
        )?;
        match b {
            Some(b) => y.add(&b.reshape(&[1, ws[1], 1, 1])?),
            None => Ok(y),
        }
    }
}
