//! Running compiled kernels on tensor storages.
//!
//! Owns the bridge between [`Storage`] (locked memory of one device) and
//! [`CompiledKernel`] (operands in argument order), for every dtype, the
//! device check of every run (a kernel's storages live on its device, or
//! the run is an error naming both devices), and [`Compiled`], a program
//! with its kernels and the facts running it needs (last uses, in-place
//! candidates). Used by the forward path (`ops`), the backward driver
//! (`trace`) and optimizers. It must not decide what to run.

use super::compiled::CompiledKernel;
use super::storage::{device_mismatch, Storage};
use crate::alloc::Buffer;
use crate::kernel::RouteKind;
use crate::planner::{Program, Source};
use crate::symbolic::{IndexFn, Node};
use crate::Error;
use std::sync::Arc;

/// A program with the compiled kernel of every stage it runs, and what
/// running it needs to know: when each stage's value is last read, and
/// which stages may be written over an argument's buffer.
pub(crate) struct Compiled {
    pub(crate) program: Program,
    /// Per stage: its kernel (`None` for a backward stage the forward
    /// program provides).
    pub(crate) kernels: Vec<Option<Arc<CompiledKernel>>>,
    /// Per stage: the last stage of the program reading it (itself when
    /// none does).
    pub(crate) last_use: Vec<usize>,
    /// Per stage and argument: whether the stage reads that argument only
    /// at its own output index and the argument has the output's shape, so
    /// the stage may be written over that argument's buffer when this is
    /// its last use (see [`reads_only_at_output`]).
    pub(crate) elementwise: Vec<Vec<bool>>,
}

impl Compiled {
    /// `program` with its `kernels` (one per stage, `None` for stages not
    /// run).
    pub(crate) fn new(program: Program, kernels: Vec<Option<Arc<CompiledKernel>>>) -> Compiled {
        let mut last_use: Vec<usize> = (0..program.stages.len()).collect();
        for (k, s) in program.stages.iter().enumerate() {
            for src in &s.sources {
                if let Source::Stage(j) = *src {
                    last_use[j] = last_use[j].max(k);
                }
            }
        }
        let elementwise = program
            .stages
            .iter()
            .map(|s| {
                (0..s.f.args().len())
                    .map(|a| reads_only_at_output(&s.f, a))
                    .collect()
            })
            .collect();
        Compiled {
            program,
            kernels,
            last_use,
            elementwise,
        }
    }
}

/// Whether every access of argument `arg` in `f` has as index exactly the
/// output indices, in order (`x[i; j]` in `f[i; j] = ...`), and the
/// argument has the output's shape: then each output element is computed
/// from that argument's element at the same position only, and an
/// element-wise kernel may overwrite the argument with its output
/// (`exec::run_in_place`).
pub(crate) fn reads_only_at_output(f: &IndexFn, arg: usize) -> bool {
    if f.args().get(arg).map(|a| &a.shape[..]) != Some(f.output_shape()) {
        return false;
    }
    f.graph
        .reachable(f.root)
        .into_iter()
        .all(|n| match f.graph.node(n) {
            Node::Access { arg: a, index } if *a == arg => {
                index.len() == f.out_vars.len()
                    && index
                        .iter()
                        .zip(&f.out_vars)
                        .all(|(form, v)| form.as_single_var() == Some(*v))
            }
            _ => true,
        })
}

/// Runs `kernel` on `inputs` (ordered like its arguments) into a new
/// storage of the kernel's output size, on the kernel's device.
pub(crate) fn run_new(
    kernel: &CompiledKernel,
    inputs: &[&Arc<Storage>],
) -> Result<Arc<Storage>, Error> {
    let sized: Vec<(&Arc<Storage>, usize)> = inputs.iter().map(|s| (*s, s.len())).collect();
    run_new_extended(kernel, &sized)
}

/// As [`run_new`], each input read as its first `n` elements where `n`
/// may exceed the storage's length up to its capacity (a parameter read
/// together with the optimizer state stored after it).
pub(crate) fn run_new_extended(
    kernel: &CompiledKernel,
    inputs: &[(&Arc<Storage>, usize)],
) -> Result<Arc<Storage>, Error> {
    check_devices(kernel, inputs.iter().map(|(s, _)| *s))?;
    let out = Storage::uninit_on(
        kernel.device(),
        kernel.dtype(),
        kernel.output_shape().iter().product(),
    )?;
    run_sized(kernel, inputs, &out)?;
    Ok(out)
}

/// Every storage on the kernel's device, or an error naming the op and
/// both devices (nothing moves between devices silently).
fn check_devices<'a>(
    kernel: &CompiledKernel,
    storages: impl Iterator<Item = &'a Arc<Storage>>,
) -> Result<(), Error> {
    for s in storages {
        if s.device() != kernel.device() {
            return Err(device_mismatch(kernel.name(), kernel.device(), s.device()));
        }
    }
    Ok(())
}

/// The one path that locks storages, makes them operands (each of its
/// given number of elements, within its block) and runs the kernel into
/// `out`.
fn run_sized(
    kernel: &CompiledKernel,
    inputs: &[(&Arc<Storage>, usize)],
    out: &Storage,
) -> Result<(), Error> {
    let mut o = out.write()?;
    run_into(kernel, inputs, out, &mut o)
}

/// As [`run_sized`], into `out`'s block already write-locked as `block`
/// (how a deferred storage runs its kernel: `Storage::settle`).
pub(super) fn run_into(
    kernel: &CompiledKernel,
    inputs: &[(&Arc<Storage>, usize)],
    out: &Storage,
    block: &mut Buffer,
) -> Result<(), Error> {
    // A half GEMM reads the half tensor a deferred widening would widen,
    // as it is: the widening does not run (unless something else reads
    // it later). Nothing is allocated unless an operand is such a
    // widening.
    let mut swaps: Vec<(usize, Arc<Storage>)> = Vec::new();
    if let Some((half, operands)) = kernel.half_operands() {
        for &k in &operands {
            let Some(&(s, n)) = inputs.get(k) else {
                continue;
            };
            if let Some(h) = s
                .widening_of()
                .filter(|h| h.dtype() == half && h.len() == n)
            {
                swaps.push((k, h));
            }
        }
    }
    let halves: Vec<(Arc<Storage>, usize)>;
    let read: Vec<(&Arc<Storage>, usize)>;
    let inputs = if swaps.is_empty() {
        inputs
    } else {
        halves = inputs
            .iter()
            .enumerate()
            .map(|(k, &(s, n))| {
                let swapped = swaps.iter().find(|(j, _)| *j == k);
                (swapped.map_or_else(|| s.clone(), |(_, h)| h.clone()), n)
            })
            .collect();
        read = halves.iter().map(|(s, n)| (s, *n)).collect();
        &read[..]
    };
    let guards = inputs
        .iter()
        .map(|(s, _)| s.read())
        .collect::<Result<Vec<_>, Error>>()?;
    let operands = guards
        .iter()
        .zip(inputs)
        .map(|(g, (s, n))| {
            s.operand(g, *n).map_err(|_| Error::Shape {
                op: kernel.name().to_string(),
                message: format!(
                    "{n} elements read from a block of {} ({:?})",
                    g.len_bytes() / s.dtype().size(),
                    s.dtype()
                ),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    kernel.run(&operands, out.operand_mut(block)?)?;
    #[cfg(feature = "cuda")]
    if super::observe::active() {
        super::observe::notify_run(kernel, &operands, out.operand(block, out.len())?);
    }
    Ok(())
}

/// Runs an element-wise `kernel` writing its output over `inputs[aliased]`
/// (see `CompiledKernel::run_in_place` for when that is sound). Returns
/// `false`, having run nothing, when the kernel's route cannot run in place.
///
/// # Safety
/// The kernel reads argument `aliased` only at the output index.
pub(crate) unsafe fn run_in_place(
    kernel: &CompiledKernel,
    inputs: &[&Arc<Storage>],
    aliased: usize,
) -> Result<bool, Error> {
    if kernel.route() != RouteKind::Jit {
        return Ok(false);
    }
    check_devices(kernel, inputs.iter().copied())?;
    let Some(&target) = inputs.get(aliased) else {
        return Ok(false);
    };
    // The aliased storage is write-locked (nobody else may read it
    // meanwhile); the others are read-locked, each once.
    // Writing the target settles it and the deferred storages reading it
    // first; the other inputs settle as they are read (their kernels do
    // not read the target).
    let mut w = target.write()?;
    let guards: Vec<_> = inputs
        .iter()
        .map(|s| (!Arc::ptr_eq(s, target)).then(|| s.read()).transpose())
        .collect::<Result<_, Error>>()?;
    let written = target.operand_mut(&mut w)?;
    let operands = guards
        .iter()
        .zip(inputs)
        .map(|(g, s)| match g {
            Some(g) => s.operand(g, s.len()),
            None => Ok(written.as_operand()),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    // The observer needs the inputs as they were before the run.
    #[cfg(feature = "cuda")]
    let before = super::observe::active().then(|| super::observe::Snapshot::of(&operands));
    // SAFETY: forwarded from the caller; the target is write-locked here.
    let ran = unsafe { kernel.run_in_place(&operands, aliased) }?;
    #[cfg(feature = "cuda")]
    if let (Some(before), true) = (before, ran) {
        before.notify(kernel, operands[aliased]);
    }
    Ok(ran)
}

/// A program's outputs and the values it kept (by stage).
type ProgramValues = (Vec<Arc<Storage>>, Vec<Option<Arc<Storage>>>);

/// Runs a compiled program on `inputs` (ordered like its inputs): every
/// stage in order, each into a fresh pooled buffer, each value released
/// after the last stage reading it unless `keep` marks it. Returns the
/// program's outputs and the kept values (by stage).
pub(crate) fn run_program(
    c: &Compiled,
    inputs: &[&Arc<Storage>],
    keep: &[bool],
) -> Result<ProgramValues, Error> {
    let program = &c.program;
    let mut values: Vec<Option<Arc<Storage>>> = vec![None; program.stages.len()];
    for (k, stage) in program.stages.iter().enumerate() {
        let kernel = c.kernels[k].as_ref().ok_or_else(|| Error::Invalid {
            function: stage.f.name().to_string(),
            message: "internal: a stage without a kernel was asked to run".into(),
        })?;
        let picked: Vec<&Arc<Storage>> = stage
            .sources
            .iter()
            .map(|s| match *s {
                Source::Input(i) => Ok(inputs[i]),
                Source::Stage(j) => values[j].as_ref().ok_or_else(|| Error::Invalid {
                    function: stage.f.name().to_string(),
                    message: format!("internal: stage {j} was released before stage {k} read it"),
                }),
            })
            .collect::<Result<_, _>>()?;
        let out = run_new(kernel, &picked)?;
        drop(picked);
        values[k] = Some(out);
        // Release what this stage read for the last time.
        for s in &stage.sources {
            if let Source::Stage(j) = *s {
                if c.last_use[j] == k
                    && !keep.get(j).copied().unwrap_or(false)
                    && !program.outputs.contains(&j)
                {
                    values[j] = None;
                }
            }
        }
    }
    let outputs = program
        .outputs
        .iter()
        .map(|&o| {
            values[o].clone().ok_or_else(|| Error::Invalid {
                function: "program".into(),
                message: format!("internal: output stage {o} has no value"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kept = (0..program.stages.len())
        .map(|k| {
            if keep.get(k).copied().unwrap_or(false) {
                values[k].clone()
            } else {
                None
            }
        })
        .collect();
    Ok((outputs, kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Device;
    use crate::symbolic::IndexFn;
    use crate::DType;

    /// A kernel compiled for the CPU refuses storages of another device,
    /// naming both, before anything runs or is allocated.
    #[test]
    fn a_run_across_devices_is_an_error_naming_both() {
        let dev = crate::alloc::fake::shared();
        let f = IndexFn::parse("f[i] = x[i] * 2", &[("x", &[4][..])]).unwrap();
        let k = crate::jit::compile(&f, DType::F32).unwrap();
        let on_device = Storage::zeros_on(dev, DType::F32, 4).unwrap();
        let before = crate::alloc::stats_for(dev);
        for r in [
            run_new(&k, &[&on_device]).map(drop),
            unsafe { run_in_place(&k, &[&on_device], 0) }.map(drop),
        ] {
            match r {
                Err(Error::Device { device, message }) => {
                    assert_eq!(device, "cpu");
                    assert!(message.contains(&dev.to_string()), "{message}");
                }
                other => panic!("expected a device error, got {other:?}"),
            }
        }
        assert_eq!(crate::alloc::stats_for(dev), before);
        let host = Storage::from_slice_on(Device::Cpu, &[1f32, 2., 3., 4.]).unwrap();
        let out = run_new(&k, &[&host]).unwrap();
        assert_eq!(out.to_f64_vec().unwrap(), vec![2., 4., 6., 8.]);
    }
}
