//! Running compiled kernels on tensor storages.
//!
//! Owns the bridge between [`Storage`] (locked, typed memory) and
//! [`CompiledKernel`] (slices in argument order), for both dtypes, and
//! [`Compiled`], a program with its kernels and the facts running it needs
//! (last uses, in-place candidates). Used by
//! the forward path (`ops`), the backward driver (`trace`) and optimizers.
//! It must not decide what to run.

use crate::jit::CompiledKernel;
use crate::planner::Program;
use crate::planner::Source;
use crate::storage::Storage;
use crate::symbolic::{IndexFn, Node};
use crate::DType;
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
/// storage of the kernel's output size.
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
    let out = Storage::uninit(kernel.dtype(), kernel.output_shape().iter().product())?;
    run_sized(kernel, inputs, &out)?;
    Ok(out)
}

/// The one path that locks storages, slices them (each to its given
/// number of elements, within its block) and runs the kernel into `out`.
fn run_sized(
    kernel: &CompiledKernel,
    inputs: &[(&Arc<Storage>, usize)],
    out: &Storage,
) -> Result<(), Error> {
    fn go<T: crate::dtype::Float>(
        k: &CompiledKernel,
        inputs: &[(&Arc<Storage>, usize)],
        out: &Storage,
    ) -> Result<(), Error> {
        let guards: Vec<_> = inputs.iter().map(|(s, _)| s.read()).collect();
        let mut slices: Vec<&[T]> = Vec::with_capacity(inputs.len());
        for (g, (s, n)) in guards.iter().zip(inputs) {
            let all = g.as_slice::<T>();
            let data = all.get(..*n).ok_or_else(|| Error::Shape {
                op: k.name().to_string(),
                message: format!(
                    "{n} elements read from a block of {} ({:?})",
                    all.len(),
                    s.dtype()
                ),
            })?;
            slices.push(data);
        }
        let mut o = out.write();
        let n = out.len();
        k.run_into(&slices, &mut o.as_mut_slice::<T>()[..n])?;
        #[cfg(feature = "cuda")]
        if crate::observe::active() {
            use crate::observe::{notify, values, KernelRun};
            notify(&KernelRun {
                kernel: k,
                inputs: slices.iter().map(|s| values(s)).collect(),
                output: values(&o.as_slice::<T>()[..n]),
            });
        }
        Ok(())
    }
    if let Some(host) = kernel.host() {
        return run_host(host.as_ref(), inputs, out);
    }
    let storages: Vec<&Arc<Storage>> = inputs.iter().map(|(s, _)| *s).collect();
    check_dtypes(kernel, &storages)?;
    match kernel.dtype() {
        DType::F32 => go::<f32>(kernel, inputs, out),
        DType::F64 => go::<f64>(kernel, inputs, out),
        d => Err(crate::dtype::not_computable(kernel.name(), d)),
    }
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
    if kernel.host().is_some() {
        return Ok(false);
    }
    unsafe fn go<T: crate::dtype::Float>(
        k: &CompiledKernel,
        inputs: &[&Arc<Storage>],
        aliased: usize,
    ) -> Result<bool, Error> {
        let target = inputs[aliased];
        // The aliased storage is write-locked (nobody else may read it
        // meanwhile); the others are read-locked, each once.
        let w = target.write();
        let guards: Vec<_> = inputs
            .iter()
            .map(|s| (!Arc::ptr_eq(s, target)).then(|| s.read()))
            .collect();
        let slices: Vec<&[T]> = guards
            .iter()
            .zip(inputs)
            .map(|(g, s)| match g {
                Some(g) => s.slice::<T>(g),
                None => target.slice::<T>(&w),
            })
            .collect();
        // The observer needs the inputs as they were before the run.
        #[cfg(feature = "cuda")]
        let before: Option<Vec<Vec<T>>> =
            crate::observe::active().then(|| slices.iter().map(|s| s.to_vec()).collect());
        let ran = unsafe { k.run_in_place(&slices, aliased) }?;
        #[cfg(feature = "cuda")]
        if let (Some(before), true) = (before, ran) {
            use crate::observe::{notify, values, KernelRun};
            notify(&KernelRun {
                kernel: k,
                inputs: before.iter().map(|s| values(s)).collect(),
                output: values(slices[aliased]),
            });
        }
        Ok(ran)
    }
    check_dtypes(kernel, inputs)?;
    match kernel.dtype() {
        DType::F32 => unsafe { go::<f32>(kernel, inputs, aliased) },
        DType::F64 => unsafe { go::<f64>(kernel, inputs, aliased) },
        d => Err(crate::dtype::not_computable(kernel.name(), d)),
    }
}

/// A host kernel over the storages' typed slices (inputs of any dtype,
/// the output a float buffer).
fn run_host(
    host: &dyn crate::planner::host::HostKernel,
    inputs: &[(&Arc<Storage>, usize)],
    out: &Storage,
) -> Result<(), Error> {
    use crate::planner::host::{HostIn, HostOut};
    let guards: Vec<_> = inputs.iter().map(|(s, _)| s.read()).collect();
    let short = |s: &Storage, n: usize| Error::Shape {
        op: host.name().to_string(),
        message: format!(
            "{n} elements read from a {:?} block holding fewer on the host",
            s.dtype()
        ),
    };
    let slices: Vec<HostIn> = guards
        .iter()
        .zip(inputs)
        .map(|(g, (s, n))| {
            let n = *n;
            let input = match s.dtype() {
                DType::F32 => g.as_slice::<f32>().get(..n).map(HostIn::F32),
                DType::F64 => g.as_slice::<f64>().get(..n).map(HostIn::F64),
                DType::I32 => g.as_slice::<i32>().get(..n).map(HostIn::I32),
                DType::I64 => g.as_slice::<i64>().get(..n).map(HostIn::I64),
            };
            input.ok_or_else(|| short(s, n))
        })
        .collect::<Result<_, Error>>()?;
    let mut o = out.write();
    let n = out.len();
    match out.dtype() {
        DType::F32 => host.run(&slices, HostOut::F32(&mut o.as_mut_slice::<f32>()[..n])),
        DType::F64 => host.run(&slices, HostOut::F64(&mut o.as_mut_slice::<f64>()[..n])),
        d => Err(crate::dtype::not_computable(host.name(), d)),
    }
}

fn check_dtypes(kernel: &CompiledKernel, inputs: &[&Arc<Storage>]) -> Result<(), Error> {
    match inputs.iter().find(|s| s.dtype() != kernel.dtype()) {
        Some(s) => Err(Error::DType {
            op: kernel.name().to_string(),
            message: format!(
                "the kernel runs on {:?}, an input is {:?}",
                kernel.dtype(),
                s.dtype()
            ),
        }),
        None => Ok(()),
    }
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
