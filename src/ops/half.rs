//! Ops on half-precision tensors (`BF16`, `F16`): computed in f32.
//!
//! Owns the one rule every op follows when a float argument is a half
//! type: the arguments are widened to f32 (exactly: every half value is an
//! f32 value), the op runs as its f32 form, and its result is rounded to
//! nearest even into the half type once, when every float argument was
//! that type. A half type mixed with f32, or the two half types mixed,
//! give f32, as in PyTorch. So a half op's value is that of one kernel
//! that loads half, computes in f32 and stores half, bit for bit. On a
//! GPU it is that kernel for an element-wise op: a conversion there is a
//! loop kernel with a half buffer, which fusion takes into the op's own
//! (`super::convert`, `super::fuse`); elsewhere the widening and rounding
//! run as conversions of their own around the f32 kernel (`to_dtype`),
//! not inside it. One exception: the products of
//! an op on tensors of one half type alone are marked ([`half_products`])
//! and run as products of that type with f32 accumulation where the
//! hardware has them: bf16 pairs where the CPU has `avx512_bf16`, the
//! tensor cores on a GPU (the same exact products, summed in another
//! order: within the f32 sums' rounding of the f32 kernel's value, not bit
//! for bit; subnormal bf16 operands count as zero in `vdpbf16ps`).
//!
//! The conversions are recorded `to_dtype` nodes, so gradients flow back
//! through them: the gradient reaching a half tensor is rounded to its
//! type, and everything between is computed in f32. Must not know how
//! ops are planned or run: it only converts tensors around them.

use crate::tensor::Tensor;
use crate::{DType, Error};
use std::cell::Cell;

thread_local! {
    /// The half type of an op whose float arguments are all of that type,
    /// while it runs as its f32 form.
    static HALF_ARGS: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The half type, when the op being planned on this thread is the f32
/// form of an op on tensors of that half type alone: its arguments are
/// values of that type, and so are the gradients its backward multiplies
/// (they arrive through the rounding's derivative), so its products may
/// run as products of that type with f32 accumulation
/// (`Contraction::set_half_operands`: `vdpbf16ps` for bf16 where the CPU
/// has `avx512_bf16`, cuBLAS's tensor cores on a GPU; within f32 sums of
/// the same exact products).
pub(super) fn half_products() -> Option<DType> {
    HALF_ARGS.with(Cell::get)
}

/// The dtype of an op's result when its float arguments include a half
/// type (`None` when none does: the op runs as it is). Mixing a half type
/// with `F64` is an error naming every argument.
pub(super) fn result_dtype(op: &str, args: &[(&str, &Tensor)]) -> Result<Option<DType>, Error> {
    let Some((_, first_half)) = args.iter().find(|(_, t)| t.dtype().is_half()) else {
        return Ok(None);
    };
    let mut out = first_half.dtype();
    // (Integer arguments, such as ids, are not computed on.)
    for (_, t) in args.iter().filter(|(_, t)| t.dtype().is_float()) {
        match t.dtype() {
            d if d == out => {}
            DType::BF16 | DType::F16 | DType::F32 => out = DType::F32,
            _ => {
                return Err(Error::DType {
                    op: op.to_string(),
                    message: format!(
                        "a half-precision tensor mixes with F32 (computed in F32) or its own type, not {:?} ({}); convert with to_dtype",
                        t.dtype(),
                        super::describe(args)
                    ),
                });
            }
        }
    }
    Ok(Some(out))
}

/// `t` as f32 when it is a half type (a view stays a view: its base is
/// widened and read through the same map, so nothing is gathered twice),
/// `t` itself otherwise.
pub(super) fn widen(t: &Tensor) -> Result<Tensor, Error> {
    if !t.dtype().is_half() {
        return Ok(t.clone());
    }
    through_base(t, |base| base.to_dtype(DType::F32))
}

/// `convert` applied to `t`'s base, read through `t`'s view map when it
/// is a view (an element-wise conversion commutes with the map).
fn through_base(
    t: &Tensor,
    convert: impl FnOnce(&Tensor) -> Result<Tensor, Error>,
) -> Result<Tensor, Error> {
    match t.base_and_map() {
        (_, None) => convert(t),
        (base, Some(map)) => Ok(Tensor::view_of(
            &convert(base)?,
            t.shape().to_vec(),
            map.clone(),
        )),
    }
}

/// Runs `f32_op` on `args` as values of the half type `half` held in f32
/// and rounds its result to `half`: autocast's lowering of an op, with the
/// values of `x.to_dtype(half)?` and then `through_f32`, bit for bit,
/// gradients included, in fewer passes. An f32 argument is rounded to
/// `half` values in one pass (`round_to_half`) where converting it and
/// widening it back took two; a `half` argument is widened; the other
/// half type goes through f32 as `to_dtype` does. The op's products are
/// marked as `half` products ([`half_products`]). Other arguments
/// (integers) pass as they are.
pub(super) fn through_half_values(
    args: &[(&str, &Tensor)],
    half: DType,
    f32_op: impl FnOnce(&[(&str, &Tensor)]) -> Result<Tensor, Error>,
) -> Result<Tensor, Error> {
    // (A half tensor and its deferred widening would let a GPU's half
    // product read half buffers here too, but each gradient would then be
    // cast twice where `round_to_half`'s is rounded once: BENCHMARKS.md,
    // "Half precision", third session.)
    let round = |x: &Tensor| x.round_to_half(half);
    let values: Vec<Tensor> = args
        .iter()
        .map(|(_, t)| match t.dtype() {
            // A view reading its whole base or more (a transpose, a
            // weight broadcast over a batch) is read through the rounded
            // base, so a broadcast is never materialised; a view of part
            // of its base is gathered first.
            DType::F32 => match t.base_and_map() {
                (base, Some(_)) if base.numel() <= t.numel() => through_base(t, round),
                _ => round(t),
            },
            d if d == half => widen(t),
            d if d.is_half() => through_base(&widen(t)?, |base| base.round_to_half(half)),
            _ => Ok((*t).clone()),
        })
        .collect::<Result<_, _>>()?;
    let named: Vec<(&str, &Tensor)> = args.iter().map(|(n, _)| *n).zip(&values).collect();
    marked(&named, half, Some(half), f32_op)
}

/// Runs `f32_op` on `args` widened and rounds its result to `out` (a half
/// type; an `F32` result is returned as it is).
pub(super) fn through_f32(
    args: &[(&str, &Tensor)],
    out: DType,
    f32_op: impl FnOnce(&[(&str, &Tensor)]) -> Result<Tensor, Error>,
) -> Result<Tensor, Error> {
    let wide: Vec<Tensor> = args
        .iter()
        .map(|(_, t)| widen(t))
        .collect::<Result<_, _>>()?;
    let named: Vec<(&str, &Tensor)> = args.iter().map(|(n, _)| *n).zip(&wide).collect();
    let alone = out.is_half()
        && args
            .iter()
            .all(|(_, t)| !t.dtype().is_float() || t.dtype() == out);
    marked(&named, out, alone.then_some(out), f32_op)
}

/// Runs `f32_op` on `wide` (f32 arguments) with its products marked as
/// `products` ([`half_products`]) and rounds its result to `out` (a half
/// type; an `F32` result is returned as it is).
fn marked(
    wide: &[(&str, &Tensor)],
    out: DType,
    products: Option<DType>,
    f32_op: impl FnOnce(&[(&str, &Tensor)]) -> Result<Tensor, Error>,
) -> Result<Tensor, Error> {
    let before = HALF_ARGS.with(|b| b.replace(products));
    let y = f32_op(wide);
    HALF_ARGS.with(|b| b.set(before));
    let y = y?;
    if out.is_half() && y.dtype() == DType::F32 {
        y.to_dtype(out)
    } else {
        Ok(y)
    }
}
