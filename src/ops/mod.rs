//! Operations on tensors, each one an [`IndexFn`](crate::symbolic::IndexFn)
//! written in the notation of the symbolic core.
//!
//! Owns the op library (one file per family) and [`apply`], the single path
//! every op takes: look up (or build) the op's plan for these shapes, views
//! and dtype, run its kernel into a fresh buffer, and record a trace node
//! when an input requires a gradient. No op has backward code: derivatives
//! are derived from the op's index function by `trace`.

mod conv;
mod custom;
mod elementwise;
mod linalg;
mod loss;
mod reduce;
mod shape;

pub use custom::{index_fn, index_fn_with_sizes};

use crate::tensor::{Origin, Storage, Tensor};
use crate::trace::plan::{self, OpPlan};
use crate::trace::{self, Node};
use crate::{exec, Error};
use std::fmt::Write;
use std::sync::Arc;

/// Applies the index function `src` (arguments named as in `args`, output
/// sizes not inferable from them in `sizes`) to tensors. Views among `args`
/// are composed into the function, so they are read in place.
pub(crate) fn apply(
    op: &str,
    src: &str,
    args: &[(&str, &Tensor)],
    sizes: &[(&str, usize)],
) -> Result<Tensor, Error> {
    let dtype = common_dtype(op, args)?;
    let mut key = String::with_capacity(src.len() + 32 * args.len() + 16);
    let _ = write!(key, "{op}\u{1}{src}\u{1}{dtype:?}");
    for (n, v) in sizes {
        let _ = write!(key, "|{n}={v}");
    }
    for (name, t) in args {
        let (base, map) = t.base_and_map();
        let _ = write!(key, "|{name}{:?}", t.shape());
        if let Some(m) = map {
            let _ = write!(key, "@{:?}{:?}{:?}", base.shape(), m.coeffs, m.offsets);
        }
    }
    let plan = plan::cached(key, || {
        let shapes: Vec<(&str, &[usize])> = args.iter().map(|(n, t)| (*n, t.shape())).collect();
        let mut f = crate::symbolic::IndexFn::parse_with_sizes(src, &shapes, sizes)?;
        for (i, (_, t)) in args.iter().enumerate() {
            if let (base, Some(map)) = t.base_and_map() {
                f = f.compose_arg(i, base.shape(), map)?;
            }
        }
        OpPlan::new(op, f, dtype, false)
    })?;
    let inputs: Vec<&Arc<Storage>> = args.iter().map(|(_, t)| t.storage_and_origin().0).collect();
    let kernel = plan.kernel.as_ref().expect("non-alias plans have a kernel");
    let out = exec::run_new(kernel, &inputs)?;
    let shape = plan.f.output_shape().to_vec();
    let origin = record(&plan, args.iter().map(|(_, t)| *t), &inputs, &out)?;
    Ok(Tensor::dense(shape, out, origin))
}

/// The origin of an op's output: a new trace node when recording is on and
/// an input requires a gradient, otherwise a constant.
fn record<'a>(
    plan: &Arc<OpPlan>,
    args: impl Iterator<Item = &'a Tensor>,
    inputs: &[&Arc<Storage>],
    out: &Arc<Storage>,
) -> Result<Origin, Error> {
    if !trace::is_grad_enabled() {
        return Ok(Origin::Constant);
    }
    let edges: Vec<Origin> = args.map(|t| t.origin().clone()).collect();
    if !edges.iter().any(Origin::requires_grad) {
        return Ok(Origin::Constant);
    }
    Ok(Origin::Op(Node::record(plan.clone(), edges, inputs, out)?))
}

/// `x` (dense) with another shape, sharing its storage; recorded as
/// `y[i…] = x[flat(i…)]` so the gradient is derived like any other.
pub(crate) fn reshape_dense(x: &Tensor, shape: &[usize]) -> Result<Tensor, Error> {
    let storage = x.storage_and_origin().0.clone();
    if !(trace::is_grad_enabled() && x.is_requires_grad()) {
        return Ok(Tensor::dense(shape.to_vec(), storage, Origin::Constant));
    }
    let names: Vec<String> = (0..shape.len()).map(|d| format!("i{d}")).collect();
    let mut flat = String::new();
    let mut stride = 1usize;
    for d in (0..shape.len()).rev() {
        let term = if stride == 1 {
            names[d].clone()
        } else {
            format!("{stride}*{}", names[d])
        };
        flat = if flat.is_empty() {
            term
        } else {
            format!("{term} + {flat}")
        };
        stride *= shape[d];
    }
    if flat.is_empty() {
        flat = "0".into();
    }
    let src = format!("y[{}] = x[{flat}]", names.join("; "));
    let n = x.numel();
    let dtype = x.dtype();
    let key = format!("reshape\u{1}{src}\u{1}{dtype:?}|{n}");
    let plan = plan::cached(key, || {
        let sizes: Vec<(&str, usize)> = names
            .iter()
            .map(String::as_str)
            .zip(shape.iter().copied())
            .collect();
        let f = crate::symbolic::IndexFn::parse_with_sizes(&src, &[("x", &[n][..])], &sizes)?;
        OpPlan::new("reshape", f, dtype, true)
    })?;
    let origin = record(&plan, std::iter::once(x), &[&storage], &storage)?;
    Ok(Tensor::dense(shape.to_vec(), storage, origin))
}

fn common_dtype(op: &str, args: &[(&str, &Tensor)]) -> Result<crate::jit::DType, Error> {
    let first = args
        .first()
        .map(|(_, t)| t.dtype())
        .unwrap_or(crate::jit::DType::F32);
    if let Some((name, t)) = args.iter().find(|(_, t)| t.dtype() != first) {
        let all: Vec<String> = args
            .iter()
            .map(|(n, t)| format!("{n}: {:?} {:?}", t.dtype(), t.shape()))
            .collect();
        return Err(Error::DType {
            op: op.to_string(),
            message: format!(
                "`{name}` is {:?} but `{}` is {first:?} ({}); convert with to_dtype",
                t.dtype(),
                args[0].0,
                all.join(", ")
            ),
        });
    }
    Ok(first)
}

/// A number as index-function text (`2.5`, `(-1e-5)`); non-finite values
/// are refused.
pub(crate) fn lit(op: &str, x: f64) -> Result<String, Error> {
    if !x.is_finite() {
        return Err(Error::Invalid {
            function: op.to_string(),
            message: format!("the constant {x} is not finite"),
        });
    }
    Ok(if x < 0.0 {
        format!("(-{:?})", -x)
    } else {
        format!("{x:?}")
    })
}

/// `op: lhs [..] and rhs [..]: message` shape errors.
pub(crate) fn shape_error(op: &str, message: String) -> Error {
    Error::Shape {
        op: op.to_string(),
        message,
    }
}
