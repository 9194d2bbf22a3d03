//! Padding by the input's own values: reflect, replicate and circular
//! ([`Tensor::pad_mode`], PyTorch's `F.pad` modes and `Conv2d`'s
//! `padding_mode`); constant padding is `Tensor::pad` (`super::shape`).
//!
//! One index function with guards: along a padded dimension the output
//! index `i` reads the input at one of three affine positions (before,
//! inside, after the input), so the derivative is again an index function
//! that gathers every output position mapping to an input element (the
//! edges of a replicate pad sum their whole strip), with no atomics.

use super::formula::{access, cmp, define, guard, indices, size_refs};
use super::{apply, formula};
use crate::tensor::Tensor;
use crate::Error;

/// How positions outside the input are filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PaddingMode {
    /// Zeros (PyTorch's `'zeros'` / `'constant'` with 0).
    #[default]
    Zeros,
    /// The input mirrored at its edges, the edge not repeated
    /// (`[a b c]` → `c b | a b c | b a`).
    Reflect,
    /// The edge element repeated (`a a | a b c | c c`).
    Replicate,
    /// The input wrapped around (`b c | a b c | a b`).
    Circular,
}

impl PaddingMode {
    fn name(self) -> &'static str {
        match self {
            PaddingMode::Zeros => "zeros",
            PaddingMode::Reflect => "reflect",
            PaddingMode::Replicate => "replicate",
            PaddingMode::Circular => "circular",
        }
    }

    /// The input positions read before and after an input of `n` along a
    /// dimension padded by `before`, for output index `i`: `(before,
    /// after)` as index text; `None` when `n` is too small for the pads.
    fn sources(self, i: &str, n: usize, before: usize, after: usize) -> Option<(String, String)> {
        let (n, b) = (n as i64, before as i64);
        let fits = match self {
            PaddingMode::Zeros => true,
            PaddingMode::Reflect => before < n as usize && after < n as usize,
            PaddingMode::Replicate => n > 0,
            PaddingMode::Circular => before <= n as usize && after <= n as usize,
        };
        if !fits {
            return None;
        }
        Some(match self {
            // Not used: zeros are `Tensor::pad`.
            PaddingMode::Zeros => ("0".into(), "0".into()),
            // j = i − b: −j before, 2(n−1) − j after.
            PaddingMode::Reflect => (format!("{b} - {i}"), format!("{} - {i}", 2 * (n - 1) + b)),
            PaddingMode::Replicate => ("0".into(), format!("{}", n - 1)),
            PaddingMode::Circular => (format!("{i} + {}", n - b), format!("{i} - {}", n + b)),
        })
    }
}

impl Tensor {
    /// Pads with `mode`: `pads[d] = (before, after)` positions added to
    /// dimension `d`, one pair per dimension. Reflect needs each pad
    /// smaller than its dimension, circular at most its size (as PyTorch).
    ///
    /// ```
    /// use tenjin::{PaddingMode, Tensor};
    /// let x = Tensor::from_vec(vec![1., 2., 3.], &[3])?;
    /// let pad = |m| x.pad_mode(&[(2, 2)], m).and_then(|t| t.to_vec());
    /// assert_eq!(pad(PaddingMode::Reflect)?, vec![3., 2., 1., 2., 3., 2., 1.]);
    /// assert_eq!(pad(PaddingMode::Replicate)?, vec![1., 1., 1., 2., 3., 3., 3.]);
    /// assert_eq!(pad(PaddingMode::Circular)?, vec![2., 3., 1., 2., 3., 1., 2.]);
    /// assert!(x.pad_mode(&[(3, 0)], PaddingMode::Reflect).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn pad_mode(&self, pads: &[(usize, usize)], mode: PaddingMode) -> Result<Tensor, Error> {
        if mode == PaddingMode::Zeros {
            return self.pad(pads, 0.0);
        }
        let op = format!("pad ({})", mode.name());
        let out_shape = super::shape::padded_shape(&op, self.shape(), pads)?;
        let ix = indices("i", self.rank());
        // Per padded dimension: the positions read before, inside and
        // after the input.
        let mut choices: Vec<Option<(String, String, String)>> = Vec::new();
        for (d, (&n, &(b, a))) in self.shape().iter().zip(pads).enumerate() {
            if b == 0 && a == 0 {
                choices.push(None);
                continue;
            }
            let (before, after) = mode.sources(&ix[d], n, b, a).ok_or_else(|| {
                Error::shape(
                    &op,
                    format!(
                        "input of shape {:?}: padding ({b}, {a}) of dimension {d} (size {n}) is too large for {} padding",
                        self.shape(),
                        mode.name()
                    ),
                )
            })?;
            choices.push(Some((before, formula::shifted(&ix[d], -(b as i64)), after)));
        }
        if out_shape.contains(&0) {
            return super::shape::empty_like(&out_shape, self);
        }
        let body = nest(&ix, &choices, pads, self.shape(), 0, &mut ix.clone());
        let sizes = formula::sizes("i", &out_shape);
        apply(
            "pad",
            &define("f", &ix, body),
            &[("x", self)],
            &size_refs(&sizes),
        )
    }
}

/// The body from dimension `d` on: the input at `at`, with each padded
/// dimension's position chosen by guards on `i_d − before`.
fn nest(
    ix: &[String],
    choices: &[Option<(String, String, String)>],
    pads: &[(usize, usize)],
    shape: &[usize],
    d: usize,
    at: &mut Vec<String>,
) -> String {
    if d == ix.len() {
        return access("x", at);
    }
    let Some((before, inside, after)) = &choices[d] else {
        at[d] = ix[d].clone();
        return nest(ix, choices, pads, shape, d + 1, at);
    };
    let (b, a) = pads[d];
    let branch = |pos: &str, at: &mut Vec<String>| {
        at[d] = pos.to_string();
        nest(ix, choices, pads, shape, d + 1, at)
    };
    let mut body = branch(inside, at);
    if a > 0 {
        let last = b + shape[d] - 1;
        body = guard(cmp(&ix[d], "<=", last), body, branch(after, at));
    }
    if b > 0 {
        body = guard(cmp(&ix[d], ">=", b), body, branch(before, at));
    }
    body
}
