//! Winograd's F(2×2, 3×3) for 3×3 stride-1 convolutions, and F(3×3, 2×2)
//! for their filter gradients, opt in.
//!
//! Owns the switch ([`set_enabled`], [`enabled`]; the user's is
//! `tenjin::set_winograd`) and [`plan`]: the recognition, on an index
//! function over constant ranges (what `window` leaves of a padded
//! `conv2d`, of its input gradient and of its weight gradient, or a
//! hand-written line), of either form as a [`WinogradConv`]. It reads the
//! function's contraction (`contraction::detect`) and sorts its dimensions
//! by where they index. A convolution (the other operand: the weights):
//!
//! | dimension | image | weights | output | sum |
//! | --- | --- | --- | --- | --- |
//! | batch `n` | yes | no | yes | no |
//! | output channel `o` | no | yes | yes | no |
//! | input channel `c` | yes | yes | no | yes |
//! | rows `y`, columns `x` | yes | no | yes | no |
//! | taps `ky`, `kx` (3 each) | ± the stride of `y`, `x` | yes | no | yes |
//!
//! A filter gradient (the other operand: the output gradient `dy`):
//!
//! | dimension | image | `dy` | output | sum |
//! | --- | --- | --- | --- | --- |
//! | batch `n` | yes | yes | no | yes |
//! | output channel `o` | no | yes | yes | no |
//! | input channel `c` | yes | no | yes | no |
//! | rows `y`, columns `x` | yes | yes | no | yes |
//! | taps `ky`, `kx` (3 each) | the stride of `y`, `x` | no | yes | no |
//!
//! A convolution's tap whose image stride is minus its position's (an
//! input gradient's flipped filter, `dy[u − k]`) is read as `2 − k`.
//! Anything else (other filter sizes, a stride, a dilation, a guard left
//! in the function, few channels) is not Winograd's, and keeps its GEMM.
//!
//! **Off by default.** The transforms add and subtract, so results differ
//! from the direct sum by rounding (measured: `BENCHMARKS.md`); exact
//! results and bitwise reproducibility across releases of the algorithm
//! choice hold unless the user asks. Within one setting, results are still
//! bitwise identical at every thread count. The CPU runs it; a GPU keeps
//! its GEMM routes. Must not run anything.

use super::contraction;
use crate::kernel::contraction::{Contraction, Dim};
use crate::kernel::winograd::{Axis, Form, WinogradConv};
use crate::symbolic::IndexFn;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;

/// Channels (input and output) below which the transforms cost more than
/// the products save.
pub const MIN_CHANNELS: usize = 8;

/// 0: the default (`TENJIN_WINOGRAD`, else off); 1 on; 2 off.
static SETTING: AtomicU8 = AtomicU8::new(0);

/// Turns Winograd's algorithm on or off for the plans made from now on
/// (the runtime's `tenjin::set_winograd` also drops the plans made before).
pub fn set_enabled(on: bool) {
    SETTING.store(if on { 1 } else { 2 }, Relaxed);
}

/// Whether 3×3 stride-1 convolutions are planned with Winograd's
/// algorithm on the CPU: as set by [`set_enabled`], else as the
/// environment variable `TENJIN_WINOGRAD` (`1`) says, else off.
pub fn enabled() -> bool {
    static FROM_ENV: OnceLock<bool> = OnceLock::new();
    match SETTING.load(Relaxed) {
        1 => true,
        2 => false,
        _ => *FROM_ENV.get_or_init(|| std::env::var("TENJIN_WINOGRAD").as_deref() == Ok("1")),
    }
}

/// `f` as a Winograd convolution, when it is a 3×3 stride-1 convolution
/// over constant ranges with at least [`MIN_CHANNELS`] input and output
/// channels (see the module documentation), whatever the switch says.
///
/// ```
/// use tenjin::planner::winograd::plan;
/// use tenjin::symbolic::IndexFn;
/// let conv = IndexFn::parse_with_sizes(
///     "y[n; o; i; j] = sum{c}_0^15 (sum{a}_0^2 (sum{b}_0^2 (x[n; c; i + a; j + b] * w[o; c; a; b])))",
///     &[("x", &[2, 16, 10, 10][..]), ("w", &[8, 16, 3, 3][..])],
///     &[("i", 8), ("j", 8)])?;
/// let w = plan(&conv).expect("a 3x3 stride-1 convolution");
/// assert_eq!(w.sizes(), [2, 8, 16, 8, 8]);
/// let strided = IndexFn::parse_with_sizes(
///     "y[n; o; i; j] = sum{c}_0^15 (sum{a}_0^2 (sum{b}_0^2 (x[n; c; 2*i + a; j + b] * w[o; c; a; b])))",
///     &[("x", &[2, 16, 17, 10][..]), ("w", &[8, 16, 3, 3][..])],
///     &[("i", 8), ("j", 8)])?;
/// assert!(plan(&strided).is_none());
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn plan(f: &IndexFn) -> Option<WinogradConv> {
    of_contraction(&contraction::detect(f)?)
}

/// Whether the route of `f` is Winograd's (alone, or then an epilogue)
/// when the switch is on: `f` is a convolution, or one with element-wise
/// work around it.
pub fn applies(f: &IndexFn) -> bool {
    plan(f).is_some()
        || super::epilogue::split(f).is_some_and(|s| of_contraction(&s.contraction).is_some())
}

/// A contraction (a whole function's, or the one an epilogue is split
/// from) as a Winograd convolution, when it is one (see [`plan`]).
pub(crate) fn of_contraction(c: &Contraction) -> Option<WinogradConv> {
    if c.diag.is_some() || c.accumulate.is_some() || !c.scale.is_finite() {
        return None;
    }
    let dims: Vec<Dim> = c
        .batch
        .iter()
        .chain([&c.m, &c.n, &c.k])
        .chain(&c.k_outer)
        .copied()
        .filter(|d| d.len > 1)
        .collect();
    // Either operand may be the image, and either form may fit.
    let (a, b) = (|d: &Dim| d.a, |d: &Dim| d.b);
    let (a_image, b_image) = (
        (c.arg_a, c.base_a, c.arg_b, c.base_b),
        (c.arg_b, c.base_b, c.arg_a, c.base_a),
    );
    let (form, conv, (image_arg, image_base, other_arg, other_base)) = [
        (Form::Convolution, classify(&dims, a, b), a_image),
        (Form::Convolution, classify(&dims, b, a), b_image),
        (Form::FilterGradient, classify_filter(&dims, a, b), a_image),
        (Form::FilterGradient, classify_filter(&dims, b, a), b_image),
    ]
    .into_iter()
    .find_map(|(form, conv, args)| Some((form, conv?, args)))?;
    let Classified {
        batch,
        out_channels,
        in_channels,
        rows,
        cols,
        image_shift,
        other_shift,
    } = conv;
    if in_channels.len < MIN_CHANNELS || out_channels.len < MIN_CHANNELS {
        return None;
    }
    Some(WinogradConv {
        form,
        image_arg,
        other_arg,
        arg_lens: c.arg_lens.clone(),
        out_len: c.out_len,
        image_base: isize::try_from(image_base).ok()? + image_shift,
        other_base: isize::try_from(other_base).ok()? + other_shift,
        batch,
        out_channels,
        in_channels,
        rows,
        cols,
        scale: c.scale,
    })
}

/// The dimensions sorted into the form's, with the offsets that flipping
/// the taps adds to the image's and the weights' bases.
struct Classified {
    batch: Axis,
    out_channels: Axis,
    in_channels: Axis,
    rows: Axis,
    cols: Axis,
    image_shift: isize,
    other_shift: isize,
}

/// A dimension absent from the function (a batch or a channel of one).
const UNIT: Axis = Axis {
    len: 1,
    image: 0,
    other: 0,
    out: 0,
};

/// The dimensions as axes with image strides `image(d)` and other strides
/// `other(d)`: `(outputs, sums)`.
fn axes(
    dims: &[Dim],
    image: impl Fn(&Dim) -> isize,
    other: impl Fn(&Dim) -> isize,
) -> (Vec<Axis>, Vec<Axis>) {
    let axis = |d: &Dim| Axis {
        len: d.len,
        image: image(d),
        other: other(d),
        out: d.out,
    };
    dims.iter().map(axis).partition(|a| a.out != 0)
}

/// The convolution whose image strides are `image(d)` and weight strides
/// `weight(d)` (see the module documentation's table), or `None`.
fn classify(
    dims: &[Dim],
    image: impl Fn(&Dim) -> isize,
    weight: impl Fn(&Dim) -> isize,
) -> Option<Classified> {
    let (outs, sums) = axes(dims, image, weight);
    // The output channel: the one output dimension of the weights only.
    let mut out_channels = outs.iter().filter(|a| a.other != 0);
    let o = *out_channels.next()?;
    if out_channels.next().is_some() || o.image != 0 {
        return None;
    }
    // Taps: sums of three whose image stride is ± that of an output
    // dimension of the image only.
    let positions: Vec<Axis> = outs
        .iter()
        .copied()
        .filter(|a| a.other == 0 && a.image != 0)
        .collect();
    let mut taps: Vec<(Axis, Axis)> = Vec::new(); // (position, tap)
    let mut rest: Vec<Axis> = Vec::new();
    for s in &sums {
        if s.image == 0 || s.other == 0 {
            return None;
        }
        let partner = positions
            .iter()
            .find(|p| s.len == 3 && p.len >= 2 && s.image.abs() == p.image.abs());
        match partner {
            Some(p) if !taps.iter().any(|(q, _)| q == p) => taps.push((*p, *s)),
            _ => rest.push(*s),
        }
    }
    if taps.len() != 2 || rest.len() > 1 || positions.len() > 3 {
        return None;
    }
    let in_channels = rest.first().copied().unwrap_or(UNIT);
    let batch = match positions
        .iter()
        .find(|p| !taps.iter().any(|(q, _)| q == *p))
    {
        Some(b) if positions.len() == 3 => *b,
        None if positions.len() == 2 => UNIT,
        _ => return None,
    };
    // A flipped tap `image[y − k]` is read as `k′ = 2 − k`.
    let (mut image_shift, mut other_shift) = (0, 0);
    let mut spatial = taps.iter().map(|&(p, t)| {
        if t.image == -p.image {
            image_shift += 2 * t.image;
            other_shift += 2 * t.other;
            Axis {
                other: -t.other,
                ..p
            }
        } else {
            Axis {
                other: t.other,
                ..p
            }
        }
    });
    let (first, second) = (spatial.next()?, spatial.next()?);
    let (rows, cols) = if first.image.abs() <= second.image.abs() {
        (second, first)
    } else {
        (first, second)
    };
    Some(Classified {
        batch,
        out_channels: o,
        in_channels,
        rows,
        cols,
        image_shift,
        other_shift,
    })
}

/// The filter gradient whose image strides are `image(d)` and output
/// gradient strides `other(d)` (see the module documentation's second
/// table), or `None`. Taps are not flipped here (no function `window`
/// leaves has them so).
fn classify_filter(
    dims: &[Dim],
    image: impl Fn(&Dim) -> isize,
    other: impl Fn(&Dim) -> isize,
) -> Option<Classified> {
    let (outs, sums) = axes(dims, image, other);
    if sums.iter().any(|s| s.image == 0 || s.other == 0) {
        return None;
    }
    // The output channel: the one output dimension of `dy` only.
    let mut out_channels = outs.iter().filter(|a| a.other != 0);
    let o = *out_channels.next()?;
    if out_channels.next().is_some() || o.image != 0 {
        return None;
    }
    // Taps: outputs of three of the image only, whose image stride is a
    // summed position's.
    let mut spatial: Vec<Axis> = Vec::new();
    let mut channels: Vec<Axis> = Vec::new();
    for t in outs.iter().filter(|a| a.other == 0) {
        let partner = sums.iter().find(|p| {
            t.len == 3
                && p.len >= 2
                && t.image == p.image
                && !spatial.iter().any(|q| q.image == p.image)
        });
        match partner {
            Some(p) => spatial.push(Axis { out: t.out, ..*p }),
            None => channels.push(*t),
        }
    }
    let batch: Vec<&Axis> = sums
        .iter()
        .filter(|s| !spatial.iter().any(|q| q.image == s.image))
        .collect();
    if spatial.len() != 2
        || channels.len() > 1
        || batch.len() > 1
        || channels.iter().any(|c| c.image == 0)
    {
        return None;
    }
    let (rows, cols) = if spatial[0].image.abs() <= spatial[1].image.abs() {
        (spatial[1], spatial[0])
    } else {
        (spatial[0], spatial[1])
    };
    Some(Classified {
        batch: batch.first().map_or(UNIT, |b| **b),
        out_channels: o,
        in_channels: channels.first().copied().unwrap_or(UNIT),
        rows,
        cols,
        image_shift: 0,
        other_shift: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
        IndexFn::parse_with_sizes(text, args, sizes).unwrap()
    }

    #[test]
    fn an_input_gradient_reads_its_filter_flipped() {
        // The stride-1 input gradient `window` leaves: dy padded by 2.
        let f = parse(
            "dx[n; c; u; v] = sum{a}_0^2 (sum{b}_0^2 (sum{o}_0^15 (w[o; c; a; b] * p[n; o; 2 + u - a; 2 + v - b])))",
            &[("w", &[16, 8, 3, 3]), ("p", &[2, 16, 12, 12])],
            &[("u", 10), ("v", 10)],
        );
        let w = plan(&f).expect("Winograd's");
        assert_eq!(w.sizes(), [2, 8, 16, 10, 10]);
        assert_eq!((w.image_arg, w.other_arg), (1, 0));
        // Taps read as 2 − a: the image from (0, 0), the weights from the
        // last tap backwards.
        assert_eq!(w.image_base, 0);
        assert_eq!(w.other_base, 2 * 3 + 2);
        assert_eq!((w.rows.other, w.cols.other), (-3, -1));
        assert_eq!((w.rows.image, w.cols.image), (12, 1));
    }

    #[test]
    fn a_weight_gradient_is_the_filter_form() {
        // The weight gradient `window` leaves: x padded by 1.
        let f = parse(
            "dw[o; c; a; b] = sum{y}_0^9 (sum{x}_0^9 (sum{n}_0^1 (dy[n; o; y; x] * p[n; c; y + a; x + b])))",
            &[("dy", &[2, 16, 10, 10]), ("p", &[2, 8, 12, 12])],
            &[("a", 3), ("b", 3)],
        );
        let w = plan(&f).expect("Winograd's");
        assert_eq!(w.form, Form::FilterGradient);
        assert_eq!(w.sizes(), [2, 16, 8, 10, 10]);
        assert_eq!((w.image_arg, w.other_arg), (1, 0));
        // Rows: the image's stride 12, dy's 10, the tap's 3 in dw.
        assert_eq!((w.rows.image, w.rows.other, w.rows.out), (12, 10, 3));
        assert_eq!((w.cols.image, w.cols.other, w.cols.out), (1, 1, 1));
        assert_eq!(w.batch.len, 2);
    }

    #[test]
    fn other_shapes_keep_their_gemm() {
        let x = [2, 16, 12, 12];
        for (text, w) in [
            // 5×5 taps.
            ("y[n; o; i; j] = sum{c}_0^15 (sum{a}_0^4 (sum{b}_0^4 (x[n; c; i + a; j + b] * w[o; c; a; b])))", [8, 16, 5, 5]),
            // A dilation.
            ("y[n; o; i; j] = sum{c}_0^15 (sum{a}_0^2 (sum{b}_0^2 (x[n; c; i + 2*a; j + b] * w[o; c; a; b])))", [8, 16, 3, 3]),
            // Too few output channels.
            ("y[n; o; i; j] = sum{c}_0^15 (sum{a}_0^2 (sum{b}_0^2 (x[n; c; i + a; j + b] * w[o; c; a; b])))", [4, 16, 3, 3]),
        ] {
            let f = parse(text, &[("x", &x[..]), ("w", &w[..])], &[("i", 4), ("j", 4)]);
            assert!(plan(&f).is_none(), "{text}");
        }
    }
}
