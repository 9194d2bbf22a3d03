//! Autocast: a scope in which matrix products and convolutions run in a
//! half-precision type, and ops that need the range or precision of f32
//! run in f32, as `torch.autocast` does.
//!
//! Owns the scope (per thread) and the two op tables, taken from
//! PyTorch's autocast lists for the ops tenjin has. `super::apply_as` asks
//! [`cast_args`] how to convert an op's float arguments before anything
//! else; every other op runs in its arguments' types (a half type mixed
//! with f32 gives f32, `super::half`). Conversions are recorded (an f32
//! argument of a lowered op as one rounding to the half type's values,
//! the same values as converting it and back), so an f32 weight's
//! gradient arrives in f32: master weights stay f32 and optimizers update
//! them in f32. The backward runs in the
//! types the forward chose. Must not plan or run anything itself.

use crate::tensor::Tensor;
use crate::{DType, Error};
use std::cell::Cell;

/// Ops run in the scope's half type: their f32 (and other half-type)
/// float arguments are converted to it (PyTorch's "lower precision" list:
/// `mm`, `matmul`, `linear`, `conv*`, `scaled_dot_product_attention`).
const LOWER: &[&str] = &[
    "matmul",
    "linear",
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "attention_scores",
];

/// Ops run in f32: their half-type arguments are widened (PyTorch's "fp32"
/// list: reductions that can overflow, transcendentals whose half result
/// loses too much, softmax, norms and losses).
const TO_F32: &[&str] = &[
    "exp",
    "log",
    "log1p",
    "expm1",
    "rsqrt",
    "recip",
    "sinh",
    "cosh",
    "tan",
    "asin",
    "pow",
    "pow_scalar",
    "softplus",
    "sum",
    "cumsum",
    "logsumexp",
    "var",
    "std",
    "norm",
    "softmax",
    "log_softmax",
    "causal_softmax",
    "layer_norm",
    "cross_entropy",
    "cross_entropy_soft",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "binary_cross_entropy_with_logits",
];

thread_local! {
    static SCOPE: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Restores the enclosing scope when dropped (also on unwinding).
struct Restore(Option<DType>);

impl Drop for Restore {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(self.0));
    }
}

/// Runs `f` with autocast to `dtype` (`BF16` or `F16`) on this thread:
/// matrix products and convolutions compute in `dtype` (with f32
/// accumulation), softmax, norms, losses and long reductions in f32, and
/// the other ops in their arguments' types. Scopes nest; the enclosing one
/// is restored when `f` returns.
///
/// ```
/// use tenjin::{autocast, DType, Tensor};
/// let x = Tensor::randn(&[4, 8], DType::F32, 0)?;
/// let w = Tensor::randn(&[3, 8], DType::F32, 1)?.requires_grad();
/// let loss = autocast(DType::BF16, || {
///     let logits = x.linear(&w, None)?; // in bf16
///     assert_eq!(logits.dtype(), DType::BF16);
///     logits.cross_entropy(&[0, 2, 1, 0]) // in f32
/// })?;
/// assert_eq!(loss.dtype(), DType::F32);
/// loss.backward()?;
/// assert_eq!(w.grad().unwrap().dtype(), DType::F32); // the master weight's type
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
    if !dtype.is_half() {
        return Err(Error::DType {
            op: "autocast".into(),
            message: format!("autocast computes in BF16 or F16, not {dtype:?}"),
        });
    }
    let _restore = Restore(SCOPE.with(|s| s.replace(Some(dtype))));
    f()
}

/// The half type of the innermost autocast scope on this thread, if any.
pub fn autocast_dtype() -> Option<DType> {
    SCOPE.with(Cell::get)
}

/// How an op runs under the current scope ([`cast_args`]).
pub(super) enum Cast {
    /// On these arguments, converted.
    Args(Vec<Tensor>),
    /// On its arguments' values rounded to this half type, in f32, its
    /// result rounded to it (`super::half::through_half_values`: the
    /// values of converting each argument, in fewer passes).
    Lower(DType),
}

/// How `op` runs under the current scope; `None` when nothing changes (no
/// scope, an op in neither table, or arguments already of the types
/// wanted). f64 arguments are never converted, as in PyTorch.
pub(super) fn cast_args(op: &str, args: &[(&str, &Tensor)]) -> Result<Option<Cast>, Error> {
    let Some(half) = autocast_dtype() else {
        return Ok(None);
    };
    let want = if LOWER.contains(&op) {
        half
    } else if TO_F32.contains(&op) {
        DType::F32
    } else {
        return Ok(None);
    };
    let converts = |t: &Tensor| {
        let d = t.dtype();
        d != want && (d == DType::F32 || d.is_half())
    };
    if !args.iter().any(|(_, t)| converts(t)) {
        return Ok(None);
    }
    if want.is_half() && args.iter().all(|(_, t)| t.dtype() != DType::F64) {
        return Ok(Some(Cast::Lower(want)));
    }
    args.iter()
        .map(|(_, t)| match converts(t) {
            true if want == DType::F32 => super::half::widen(t),
            true => t.to_dtype(want),
            false => Ok((*t).clone()),
        })
        .collect::<Result<_, _>>()
        .map(|args| Some(Cast::Args(args)))
}
