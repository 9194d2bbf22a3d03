//! Fusion across ops: an element-wise op's result computed inside the
//! kernel of the op that reads it, in eager code.
//!
//! Owns the rules below (the setting, [`set_fusion`], is the runtime's: the
//! backward pass folds gradients under it too, `crate::trace`'s `fold`).
//! `x.matmul(&w)?.mul_scalar(s)?.add(&mask)?.softmax(3)?` runs forward as
//! a GEMM and the softmax's kernels alone: `mul_scalar` and `add` are
//! element-wise, so their results are deferred (allocated, their kernels
//! attached, not run: `Storage::deferred`), and `softmax`, finding its
//! argument deferred, runs a plan of its function with the two inlined
//! (`IndexFn::inline_arg`), reading the GEMM's output and the mask
//! directly. A deferred result read otherwise (by a GEMM, the host, a
//! backward program, an in-place write to one of its inputs) runs its own
//! kernel then, once; one dropped unread never runs.
//!
//! Only the forward is fused: every op is recorded on the trace as
//! written, so gradients of intermediates, derivatives of derivatives and
//! the memory plan are those of the unfused ops, and the backward pass
//! runs each op's derivative (the fused forward saves nothing but the
//! output, or it is not used); the backward's own folds (`crate::trace`'s
//! `fold`) then merge element-wise gradient steps into one kernel. Values are those of the unfused ops up to
//! the rounding of intermediate results, which fused code keeps in
//! registers (bitwise the same in f64 where no contraction into an FMA
//! happens).
//!
//! | rule | why |
//! | --- | --- |
//! | a result is deferred when its op has no reduction, one generated kernel, at most [`MAX_NODES`] expression nodes and [`MAX_ARGS`] arguments | chains grow by inlining; the caps bound the work per element |
//! | a reader inlines a deferred argument when all its stages are generated code | a GEMM, a host stage or an alias reads memory |
//! | … and the composed function has at most [`MAX_ARGS`] arguments and composes at most [`MAX_DEPTH`] ops | a chain of `y = y * 1` folds to one node while its key grows |
//! | … and the deferred kernel has not run yet | a settled result is read like any other |
//! | … and the deferred result is not of a half type | its rounding is part of its value |
//! | … and, when recorded, the reader's node keeps no forward value but its output (`NodeGrad::keeps_only_output`) | another program's intermediate values mean nothing to the node |
//! | a fused kernel loads and stores half buffers itself (`Kernel::buffers`) | on a GPU, a conversion between f32 and a half type is a loop kernel (`super::convert`): a widened argument is read as half, a rounded result stored as half |
//!
//! Must not run kernels itself: `crate::ops` applies the plans it names.

use super::plan::{self, OpPlan};
use crate::alloc::Device;
use crate::symbolic::IndexFn;
use crate::tensor::{Producer, Tensor};
use crate::DType;
use crate::Error;
use std::fmt::Write;
use std::sync::Arc;

pub use crate::runtime::{fusion, set_fusion};

/// Expression nodes a deferred function may hold.
pub const MAX_NODES: usize = 64;
/// Arguments a deferred or fused function may read.
pub const MAX_ARGS: usize = 8;
/// Ops a deferred result may compose (its producer's depth): past it, the
/// next reader runs the deferred kernel and starts a new chain, so keys
/// and functions stay bounded whatever the simplifier folds away.
pub const MAX_DEPTH: usize = 16;

/// Whether `plan`'s result may be deferred (the first rule).
pub(super) fn defers(plan: &OpPlan, device: Device) -> bool {
    fusion(device)
        && plan.f.args().len() <= MAX_ARGS
        && plan.elementwise_nodes().is_some_and(|n| n <= MAX_NODES)
}

/// An op's forward with its deferred arguments inlined: its plan (run
/// forward only), its arguments (dense tensors, named as the plan's
/// function names them) and the plan's key.
pub(super) struct Fused {
    pub(super) plan: Arc<OpPlan>,
    pub(super) args: Vec<(String, Tensor)>,
    pub(super) key: String,
    /// The ops it composes.
    pub(super) depth: usize,
}

/// `plan` (cached under `key`) applied to `args`, with every deferred
/// argument inlined, when the rules allow; `None` otherwise.
pub(super) fn inline_deferred(
    op: &str,
    plan: &OpPlan,
    key: &str,
    args: &[(&str, &Tensor)],
    dtype: DType,
    device: Device,
) -> Result<Option<Fused>, Error> {
    if !fusion(device) {
        return Ok(None);
    }
    // A half result is not inlined: its rounding would be lost.
    let producers: Vec<(usize, Arc<Producer>)> = (0..args.len())
        .filter_map(|i| Some((i, args[i].1.base_and_map().0.pending_producer()?)))
        .filter(|(_, p)| !p.plan.dtype.is_half())
        .collect();
    if producers.is_empty() || !plan.runs_loops_only() {
        return Ok(None);
    }
    // `plan.f` reads the dense bases; each inlined argument is replaced
    // by its producer's arguments, appended (`IndexFn::inline_arg`'s order),
    // last argument first so the positions before it stay.
    let mut tensors: Vec<Tensor> = args
        .iter()
        .map(|(_, t)| t.base_and_map().0.clone())
        .collect();
    let mut fused_key = key.to_string();
    let mut depth = 1;
    for (i, p) in producers.iter().rev() {
        tensors.remove(*i);
        tensors.extend(p.args.iter().cloned());
        let _ = write!(fused_key, "\u{2}{i}<{}>", p.key);
        depth = depth.max(p.depth + 1);
    }
    if tensors.len() > MAX_ARGS || depth > MAX_DEPTH {
        return Ok(None);
    }
    // Half arguments (a widening's, inlined) and a half output (a
    // rounding's) are loaded and stored by the fused kernel itself.
    let types: Vec<DType> = tensors.iter().map(Tensor::dtype).collect();
    let compute = if dtype.is_half() { DType::F32 } else { dtype };
    let typed = dtype.is_half() || types.iter().any(|t| t.is_half());
    if typed {
        let _ = write!(fused_key, "\u{2}types {types:?} -> {dtype:?}");
    }
    let fused = plan::cached(&fused_key, || {
        let f = producers
            .iter()
            .rev()
            .try_fold(plan.f.clone(), |f: IndexFn, (i, p)| {
                f.inline_arg(*i, &p.plan.f)
            })?;
        match typed {
            true => OpPlan::new_typed(op, f, compute, device, &types, dtype),
            false => OpPlan::new(op, f, dtype, device, false, None, None),
        }
    })?;
    let names = fused.f.args().iter().map(|a| a.name.clone());
    Ok(Some(Fused {
        args: names.zip(tensors).collect(),
        plan: fused,
        key: fused_key,
        depth,
    }))
}
