//! Operations on tensors, each one an [`IndexFn`](crate::symbolic::IndexFn)
//! written in the notation of the symbolic core.
//!
//! Owns the op library (one file per family) and [`apply`], the single path
//! every op takes: look up (or build) the op's plan for these shapes, views
//! and dtype, run its kernel into a fresh buffer, and record a trace node
//! when an input requires a gradient. No op has backward code: derivatives
//! are derived from the op's index function by `trace`.

mod attention;
mod autocast;
mod conv;
mod convert;
mod custom;
mod elementwise;
mod formula;
pub(crate) mod fuse;
mod half;
mod indexing;
mod label_loss;
mod layout;
mod linalg;
mod loss;
mod normalization;
mod pad;
mod pointwise_loss;
mod pool;
mod random;
mod reduce;
mod shape;
mod statistics;
mod triangle;
pub(crate) mod window;

pub use attention::AttentionOptions;
pub use autocast::{autocast, autocast_dtype};
pub use label_loss::CrossEntropyOptions;
pub(crate) use normalization::normalize;
pub use pad::PaddingMode;
pub use pointwise_loss::LossReduction;
pub use pool::Pool2d;
pub use random::{default_generator, manual_seed, set_default_generator, Generator};
pub use statistics::Norm;

pub use custom::{index_fn, index_fn_with_sizes};
pub use fuse::{fusion, set_fusion};

use crate::alloc::Device;
use crate::runtime::op_plan::{self as plan, OpPlan};
use crate::runtime::Storage;
use crate::symbolic::index_fn::row_major_strides;
use crate::symbolic::IndexFn;
use crate::tensor::{Producer, Tensor};
use crate::trace::Origin;
use crate::trace::{self, Node};
use crate::DType;
use crate::Error;
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
    apply_as(op, Def::Text { src, sizes }, args, Output::Fresh)
}

/// Applies an index function built by the runtime itself (a derivative
/// recorded for a graph of gradients) to tensors given in the order of its
/// arguments, on `device` (where the arguments must be; the device of a
/// function of no arguments). `text` is `f` as printed: it keys the plan
/// cache exactly as an op's source text does.
pub(crate) fn apply_index_fn(
    op: &str,
    f: &IndexFn,
    text: &str,
    args: &[&Tensor],
    dtype: DType,
    device: Device,
) -> Result<Tensor, Error> {
    if f.args().len() != args.len() {
        return Err(Error::Invalid {
            function: op.to_string(),
            message: format!(
                "internal: {} takes {} arguments, {} given",
                f.name(),
                f.args().len(),
                args.len()
            ),
        });
    }
    let named: Vec<(&str, &Tensor)> = f
        .args()
        .iter()
        .zip(args)
        .map(|(d, t)| (d.name.as_str(), *t))
        .collect();
    for ((name, t), d) in named.iter().zip(f.args()) {
        if t.shape() != &d.shape[..] {
            return Err(Error::shape(
                op,
                format!(
                    "internal: `{name}` of {} has shape {:?}, the tensor {:?}",
                    f.name(),
                    d.shape,
                    t.shape()
                ),
            ));
        }
    }
    apply_as(
        op,
        Def::Function {
            f,
            text,
            dtype,
            device,
        },
        &named,
        Output::Fresh,
    )
}

/// What an op computes: its source text, or a function built already.
#[derive(Clone, Copy)]
enum Def<'a> {
    Text {
        src: &'a str,
        sizes: &'a [(&'a str, usize)],
    },
    Function {
        f: &'a IndexFn,
        text: &'a str,
        /// The element type (a function may read no argument).
        dtype: DType,
        /// Where it runs (the arguments must be there too).
        device: Device,
    },
}

/// Where an op's result lives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    /// A new buffer its kernel writes.
    Fresh,
    /// The storage of its one (dense) argument, reinterpreted: nothing
    /// runs forward; the op is recorded for its derivative.
    SharesInput,
}

/// The one path of every op: plan look-up (or build), run, record.
/// Under an autocast scope, an op's float arguments are first converted
/// as its table says (`autocast`); half-precision arguments are computed
/// in f32 (`half`).
fn apply_as(op: &str, def: Def, args: &[(&str, &Tensor)], output: Output) -> Result<Tensor, Error> {
    // (Built functions are the runtime's derivatives: they run in the
    // types the forward chose.)
    if let Def::Text { .. } = def {
        match autocast::cast_args(op, args)? {
            Some(autocast::Cast::Args(cast)) => {
                let named: Vec<(&str, &Tensor)> = args.iter().map(|(n, _)| *n).zip(&cast).collect();
                return apply_typed(op, def, &named, output);
            }
            Some(autocast::Cast::Lower(half)) => {
                return half::through_half_values(args, half, |values| {
                    apply_computed(op, def, values, output)
                });
            }
            None => {}
        }
    }
    apply_typed(op, def, args, output)
}

/// [`apply_as`] past autocast: half-precision arguments computed in f32.
fn apply_typed(
    op: &str,
    def: Def,
    args: &[(&str, &Tensor)],
    output: Output,
) -> Result<Tensor, Error> {
    let half = match def {
        Def::Function { dtype, .. } if args.is_empty() && dtype.is_half() => Some(dtype),
        _ => half::result_dtype(op, args)?,
    };
    if let Some(out) = half {
        let def = match def {
            Def::Function {
                f, text, device, ..
            } => Def::Function {
                f,
                text,
                dtype: DType::F32,
                device,
            },
            text => text,
        };
        return half::through_f32(args, out, |wide| apply_computed(op, def, wide, output));
    }
    apply_computed(op, def, args, output)
}

/// [`apply_as`] on arguments of the types kernels compute in.
fn apply_computed(
    op: &str,
    def: Def,
    args: &[(&str, &Tensor)],
    output: Output,
) -> Result<Tensor, Error> {
    let dtype = match def {
        Def::Function { dtype, .. } if args.is_empty() => dtype,
        _ => common_dtype(op, args)?,
    };
    let device = match def {
        Def::Function { device, .. } if args.is_empty() => device,
        _ => common_device(op, args)?,
    };
    let (src, sizes) = match def {
        Def::Text { src, sizes } => (src, sizes),
        Def::Function { text, .. } => (text, &[][..]),
    };
    // Views at run-time positions are read through windows of their
    // bases: the plan below does not depend on the positions.
    let windows = window::windowed(args)?;
    let rebased: Vec<(&str, &Tensor)>;
    let args = match &windows {
        Some(w) => {
            rebased = w.iter().map(|(n, t)| (*n, t)).collect();
            &rebased[..]
        }
        None => args,
    };
    let half_products = half::half_products();
    let mut key = String::with_capacity(src.len() + 32 * args.len() + 16);
    let _ = write!(key, "{op}\u{1}{src}\u{1}{dtype:?}");
    if let Some(half) = half_products {
        let _ = write!(key, "\u{1}{half:?} products");
    }
    push_device(&mut key, device);
    for (n, v) in sizes {
        let _ = write!(key, "|{n}={v}");
    }
    if let Def::Function { f, .. } = def {
        // The text leaves out sizes it could infer when parsed; a built
        // function carries them.
        let _ = write!(key, "|out={:?}", f.output_shape());
    }
    for (name, t) in args {
        let (base, map) = t.base_and_map();
        let _ = write!(key, "|{name}{:?}", t.shape());
        if let Some(m) = map {
            let _ = write!(key, "@{:?}{:?}{:?}", base.shape(), m.coeffs, m.offsets);
        }
    }
    let plan = plan::cached(&key, || {
        // An op about to be recorded builds its node plan with its plan.
        let needs_grad: Vec<bool> = args
            .iter()
            .map(|(_, t)| t.origin().requires_grad())
            .collect();
        let recording = trace::is_grad_enabled().then_some(&needs_grad[..]);
        let mut f = match def {
            Def::Text { src, sizes } => {
                let shapes: Vec<(&str, &[usize])> =
                    args.iter().map(|(n, t)| (*n, t.shape())).collect();
                IndexFn::parse_with_sizes(src, &shapes, sizes)?
            }
            Def::Function { f, .. } => f.clone(),
        };
        for (i, (_, t)) in args.iter().enumerate() {
            if let (base, Some(map)) = t.base_and_map() {
                f = f.compose_arg(i, base.shape(), map)?;
            }
        }
        OpPlan::new(
            op,
            f,
            dtype,
            device,
            output == Output::SharesInput,
            half_products,
            recording,
        )
    })?;
    let fused = match output {
        Output::Fresh => fuse::inline_deferred(op, &plan, &key, args, dtype, device)?,
        Output::SharesInput => None,
    };
    run_and_record(op, &plan, args, output, Some(&key), fused.as_ref())
}

/// Applies an op run by host stages (see `crate::planner::host`) to dense
/// tensors; `key` names everything its programs depend on beyond the
/// arguments' shapes and dtypes (the op's parameters). Half-precision
/// arguments are computed in f32 (`half`), the result in `dtype`'s
/// compute type rounded to `dtype`.
pub(crate) fn apply_host(
    op: &str,
    key: &str,
    host: impl FnOnce() -> Arc<dyn crate::planner::host::HostOp>,
    args: &[(&str, &Tensor)],
    dtype: DType,
) -> Result<Tensor, Error> {
    let out = match half::result_dtype(op, args)? {
        Some(half) => Some(half),
        None if dtype.is_half() => Some(dtype),
        None => None,
    };
    match out {
        Some(out) => half::through_f32(args, out, |wide| {
            apply_host_as_typed(op, key, host, wide, dtype.compute())
        }),
        None => apply_host_as_typed(op, key, host, args, dtype),
    }
}

/// As [`apply_host`], its host kernels taking the arguments' dtypes as
/// they are and writing `dtype` (a conversion's).
pub(crate) fn apply_host_as_typed(
    op: &str,
    key: &str,
    host: impl FnOnce() -> Arc<dyn crate::planner::host::HostOp>,
    args: &[(&str, &Tensor)],
    dtype: DType,
) -> Result<Tensor, Error> {
    let device = common_device(op, args)?;
    let mut full = format!("{op}\u{1}host\u{1}{key}\u{1}{dtype:?}");
    push_device(&mut full, device);
    for (name, t) in args {
        if t.is_view() {
            return Err(Error::Invalid {
                function: op.to_string(),
                message: format!("internal: `{name}` must be dense"),
            });
        }
        let _ = write!(full, "|{name}{:?}{:?}", t.shape(), t.dtype());
    }
    let plan = plan::cached(&full, || OpPlan::host(op, host(), dtype, device))?;
    // A host op whose forward is a loop kernel (a GPU's conversion) fuses
    // as element-wise ops do.
    if !plan.runs_loops_only() {
        return run_and_record(op, &plan, args, Output::Fresh, None, None);
    }
    let fused = fuse::inline_deferred(op, &plan, &full, args, dtype, device)?;
    run_and_record(op, &plan, args, Output::Fresh, Some(&full), fused.as_ref())
}

/// As [`apply_host`] for an op whose programs are made for this call alone
/// (they hold the call's closure): the plan is built and used once, not
/// cached.
pub(crate) fn apply_host_once(
    op: &str,
    host: Arc<dyn crate::planner::host::HostOp>,
    args: &[(&str, &Tensor)],
    dtype: DType,
) -> Result<Tensor, Error> {
    let device = common_device(op, args)?;
    let plan = Arc::new(OpPlan::host(op, host, dtype, device)?);
    run_and_record(op, &plan, args, Output::Fresh, None, None)
}

/// Runs `plan` on `args` (recording it when one of them requires a
/// gradient): the part of every op after its plan is found. The forward
/// runs as `fused` (its deferred arguments inlined, `fuse`) when the
/// recorded node keeps nothing but its output; the node recorded is
/// `plan`'s on `args` either way, so the trace, its derivatives and what
/// they read are those of the op as written. A result that may be
/// deferred (`fuse::defers`, of a plan cached under `key`) is not run yet.
fn run_and_record(
    op: &str,
    plan: &Arc<OpPlan>,
    args: &[(&str, &Tensor)],
    output: Output,
    key: Option<&str>,
    fused: Option<&fuse::Fused>,
) -> Result<Tensor, Error> {
    let inputs: Vec<&Arc<Storage>> = args.iter().map(|(_, t)| t.storage_and_origin().0).collect();
    let needs_grad: Vec<bool> = args
        .iter()
        .map(|(_, t)| t.origin().requires_grad())
        .collect();
    let recording = trace::is_grad_enabled() && needs_grad.iter().any(|&g| g);
    let grad = if recording {
        Some(plan.grad(&needs_grad)?)
    } else {
        None
    };
    // The save policy (the scope's, else the default of the mode of the
    // device the op runs on) decides what it keeps.
    let policy = crate::runtime::policy_for(plan.backend.device());
    // A deferred argument the node saves for its backward runs now, as it
    // would have unfused (its inputs are not held longer than they would
    // be, and the memory plan counts it from here); the op then reads it.
    // A half tensor's widening stays deferred: it holds nothing but the
    // half tensor, which a half GEMM reads in its stead (the op's, and the
    // backward's; anything else settles it when it reads it).
    let mut settled = false;
    if let Some(g) = &grad {
        for (s, &saved) in inputs.iter().zip(&g.needs(policy).args) {
            if saved && s.is_deferred() && s.widening_of().is_none() {
                s.settle()?;
                settled = true;
            }
        }
    }
    let fused =
        fused.filter(|_| !settled && grad.as_ref().is_none_or(|g| g.keeps_only_output(policy)));
    // What runs: the fused plan on its arguments (keeping nothing: the
    // node saves the output as its output stage), or `plan` on `args`.
    let fused_inputs: Vec<&Arc<Storage>>;
    let (run, run_inputs, run_grad, run_key) = match fused {
        Some(fz) => {
            fused_inputs = fz
                .args
                .iter()
                .map(|(_, t)| t.storage_and_origin().0)
                .collect();
            (&fz.plan, &fused_inputs[..], None, Some(fz.key.as_str()))
        }
        None => (plan, &inputs[..], grad.as_deref(), key),
    };
    let deferred = match run_key {
        Some(key) if output == Output::Fresh && fuse::defers(run, run.backend.device()) => {
            let bases = |t: &Tensor| t.base_and_map().0.clone();
            run.defer_forward(run_inputs, run_grad, policy, || {
                Arc::new(Producer {
                    plan: run.clone(),
                    args: match fused {
                        Some(fz) => fz.args.iter().map(|(_, t)| bases(t)).collect(),
                        None => args.iter().map(|(_, t)| bases(t)).collect(),
                    },
                    key: key.to_string(),
                    depth: fused.map_or(1, |fz| fz.depth),
                })
            })?
        }
        _ => None,
    };
    if fused.is_some() {
        plan::count_fused();
    }
    let (out, kept) = match (deferred, output) {
        (Some(forward), _) => forward,
        (None, Output::SharesInput) if plan.is_alias() && inputs.len() == 1 => {
            (inputs[0].clone(), Vec::new())
        }
        (None, Output::Fresh) => run.run_forward(run_inputs, run_grad, policy)?,
        (None, Output::SharesInput) => {
            return Err(Error::Invalid {
                function: op.to_string(),
                message: "an op sharing its input's storage takes exactly one dense argument"
                    .into(),
            })
        }
    };
    // Values kept by another plan's program mean nothing to this node.
    let kept = if fused.is_some() { Vec::new() } else { kept };
    // A node saving its output saves values: a deferred output runs now,
    // as a saved deferred argument did above.
    if grad.as_ref().is_some_and(|g| g.saves_output(policy)) {
        out.settle()?;
    }
    let shape = plan.f.output_shape().to_vec();
    let origin = match grad {
        Some(grad) => {
            let edges: Vec<Origin> = args.iter().map(|(_, t)| t.origin().clone()).collect();
            Origin::Op(Arc::new(Node::record(
                plan.clone(),
                grad,
                edges,
                &inputs,
                &out,
                kept,
                policy,
            )?))
        }
        None => Origin::Constant,
    };
    Ok(Tensor::dense(shape, out, origin))
}

/// `x` (dense) with another shape, sharing its storage; recorded as
/// `y[i…] = x[flat(i…)]` over `x`'s elements read flat, so the gradient is
/// derived like any other.
pub(crate) fn reshape_dense(x: &Tensor, shape: &[usize]) -> Result<Tensor, Error> {
    let (storage, origin) = x.storage_and_origin();
    if !(trace::is_grad_enabled() && x.is_requires_grad()) {
        return Ok(Tensor::dense(
            shape.to_vec(),
            storage.clone(),
            Origin::Constant,
        ));
    }
    let strides = row_major_strides(shape).ok_or_else(|| Error::Overflow {
        op: format!("reshape to {shape:?}"),
    })?;
    // y[i…] = x[Σ stride·i]
    let names = formula::indices("i", shape.len());
    let flat: Vec<String> = names
        .iter()
        .zip(&strides)
        .map(|(n, s)| format!("{s}*{n}"))
        .collect();
    let flat = if flat.is_empty() {
        "0".to_string()
    } else {
        flat.join(" + ")
    };
    let src = formula::define("y", &names, formula::access("x", &[flat]));
    let sizes = formula::sizes("i", shape);
    let sizes = formula::size_refs(&sizes);
    let elements = Tensor::dense(vec![x.numel()], storage.clone(), origin.clone());
    apply_as(
        "reshape",
        Def::Text {
            src: &src,
            sizes: &sizes,
        },
        &[("x", &elements)],
        Output::SharesInput,
    )
}

/// Appends `device` to a plan key (nothing for the CPU: the key of every
/// host op is formatted on every call).
fn push_device(key: &mut String, device: Device) {
    if device != Device::Cpu {
        let _ = write!(key, "\u{1}{device}");
    }
}

/// The device of every argument (the default device for none), or an
/// error naming the op and two devices: nothing moves between devices
/// silently.
fn common_device(op: &str, args: &[(&str, &Tensor)]) -> Result<Device, Error> {
    let Some((_, first)) = args.first() else {
        return Ok(crate::tensor::default_device());
    };
    let device = first.device();
    match args.iter().find(|(_, t)| t.device() != device) {
        Some((name, t)) => Err(Error::Device {
            device: device.to_string(),
            message: format!(
                "{op}: `{}` is on {device} but `{name}` is on {}; move one with to_device",
                args[0].0,
                t.device()
            ),
        }),
        None => Ok(device),
    }
}

/// `name: dtype shape` of every argument, for an error message.
fn describe(args: &[(&str, &Tensor)]) -> String {
    let all: Vec<String> = args
        .iter()
        .map(|(n, t)| format!("{n}: {:?} {:?}", t.dtype(), t.shape()))
        .collect();
    all.join(", ")
}

fn common_dtype(op: &str, args: &[(&str, &Tensor)]) -> Result<crate::DType, Error> {
    let first = args
        .first()
        .map(|(_, t)| t.dtype())
        .unwrap_or(crate::DType::F32);
    if let Some((_, t)) = args.iter().find(|(_, t)| !t.dtype().is_float()) {
        return Err(crate::dtype::not_computable(op, t.dtype()));
    }
    if let Some((name, t)) = args.iter().find(|(_, t)| t.dtype() != first) {
        return Err(Error::DType {
            op: op.to_string(),
            message: format!(
                "`{name}` is {:?} but `{}` is {first:?} ({}); convert with to_dtype",
                t.dtype(),
                args[0].0,
                describe(args)
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
