//! [`CompiledKernel`]: one stage compiled by a backend for its device,
//! with what the runtime checks before it runs.
//!
//! Owns the compiled stage as every caller sees it (name, arguments,
//! shapes, dtype, route, device, the loop nest it runs, the function it
//! computes), how it is built from a backend's code, and the checks made
//! before any backend code runs (the number of operands, each one's
//! length, element type and device). Stages are compiled through the
//! kernel cache (`super::kernel_cache`); what the code is belongs to the
//! backend (`Executable`). Must not plan or cache.

use super::storage::device_mismatch;
use crate::alloc::Device;
use crate::dtype::Element;
use crate::kernel::backend::{Backend, Executable, Operand, OperandMut};
use crate::kernel::{Kernel, Route, RouteKind};
use crate::symbolic::{ArgDecl, IndexFn};
use crate::{DType, Error};
use std::fmt;

/// A compiled index function for one dtype, one set of shapes and one
/// device, obtained from [`crate::jit::compile`] (or, for the stages of a
/// program, from the op-plan cache).
///
/// ```
/// use tenjin::{jit::compile, DType};
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = x[i] * 2 + y[i]", &[("x", &[3][..]), ("y", &[3][..])])?;
/// let k = compile(&f, DType::F64)?;
/// assert_eq!(k.run_f64(&[("x", &[1., 2., 3.][..]), ("y", &[1., 1., 1.][..])])?, vec![3., 5., 7.]);
/// let mut out = vec![0.0; 3];
/// k.run_into_f64(&[&[0., 1., 2.], &[0., 0., 1.]], &mut out)?;
/// assert_eq!(out, vec![0., 2., 5.]);
/// assert!(k.run_into_f64(&[&[0., 1.], &[0., 0., 1.]], &mut out).is_err()); // x too short
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct CompiledKernel {
    name: String,
    args: Vec<ArgDecl>,
    /// Elements of each argument and of the output (checked on every run).
    arg_lens: Vec<usize>,
    out_len: usize,
    out_shape: Vec<usize>,
    /// The output's element type (the inputs' too, but for host kernels,
    /// which read any types, and for half buffers, `arg_dtypes`).
    dtype: DType,
    /// Each argument's element type (the computed type, or a half type
    /// for a kernel's half buffers, `Kernel::buffers`).
    arg_dtypes: Vec<DType>,
    /// For a GEMM on a GPU whose products are of values of a half type
    /// (`Contraction::set_half_operands`): that type and the arguments
    /// that are its two operands, which may be given as buffers of that
    /// type (see [`CompiledKernel::half_operands`]).
    half_operands: Option<(DType, [usize; 2])>,
    /// Whether it widens one buffer of a half type into f32, element for
    /// element (see [`CompiledKernel::widens_half`]).
    widens_half: bool,
    route: RouteKind,
    device: Device,
    /// The loop nest it runs (for GEMM and host routes: the function's
    /// loop nest, a description for printing and cost estimates).
    kernel: Kernel,
    /// The function it computes.
    source: IndexFn,
    code: Box<dyn Executable>,
}

impl CompiledKernel {
    /// `backend`'s code for `route`, which computes `f` in `dtype`, with
    /// the facts the runtime keeps (the uncached step of
    /// `kernel_cache::compile_stage`).
    pub(super) fn build(
        f: &IndexFn,
        route: &Route,
        dtype: DType,
        backend: &'static dyn Backend,
    ) -> Result<CompiledKernel, Error> {
        let code = backend.compile(route, dtype)?;
        let kernel = match route {
            Route::Loop(kernel)
            | Route::GemmThenLoop { kernel, .. }
            | Route::WinogradThenLoop { kernel, .. } => kernel.clone(),
            Route::Gemm(_) | Route::Winograd(_) | Route::Host(_) => crate::kernel::lower(f)?,
        };
        let arg_dtypes: Vec<DType> = (0..f.args().len())
            .map(|a| kernel.buffers.arg_dtype(a, dtype))
            .collect();
        let on_gpu = matches!(backend.device(), Device::Cuda(_));
        let half_operands = match route {
            Route::Gemm(c) if on_gpu && dtype == DType::F32 && c.accumulate.is_none() => c
                .half_operands
                .map(|half| (half, c.operands().map(|(arg, _)| arg))),
            _ => None,
        };
        let widens_half = matches!(route, Route::Loop(_))
            && dtype == DType::F32
            && kernel.buffers.out.is_none()
            && matches!(arg_dtypes[..], [d] if d.is_half())
            && is_identity(f);
        Ok(CompiledKernel {
            arg_dtypes,
            half_operands,
            widens_half,
            name: f.name().to_string(),
            args: f.args().to_vec(),
            arg_lens: f.args().iter().map(|a| a.shape.iter().product()).collect(),
            out_len: f.output_shape().iter().product(),
            out_shape: f.output_shape().to_vec(),
            dtype: route.out_dtype(dtype),
            route: route.kind(),
            device: backend.device(),
            kernel,
            source: f.clone(),
            code,
        })
    }
}

/// Whether `f` is `f[i…] = x[i…]` over its one argument's shape.
fn is_identity(f: &IndexFn) -> bool {
    f.args().len() == 1
        && f.args()[0].shape == f.output_shape()
        && matches!(f.graph.node(f.root), crate::symbolic::Node::Access { arg: 0, index }
            if index.len() == f.out_vars.len()
                && index.iter().zip(&f.out_vars).all(|(form, v)| form.as_single_var() == Some(*v)))
}

impl CompiledKernel {
    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index function this kernel computes.
    pub fn source(&self) -> &IndexFn {
        &self.source
    }

    /// The element type of the output (and, but for host kernels, of
    /// every input).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The arguments, in the order `run_into_*` takes their buffers.
    pub fn args(&self) -> &[ArgDecl] {
        &self.args
    }

    pub fn output_shape(&self) -> &[usize] {
        &self.out_shape
    }

    /// The device whose memory it reads and writes.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Whether some loop of the generated code runs as vector code (on the
    /// CPU: f32 kernels whose innermost output loop, or a sum, is
    /// contiguous). For tests and diagnostics.
    #[doc(hidden)]
    pub fn is_vectorized(&self) -> bool {
        self.code.vector_loops().0
    }

    /// How many sums of the generated code run as vector code (f32 sums
    /// whose innermost loop reads contiguous memory, in a fixed order).
    /// For tests and diagnostics.
    #[doc(hidden)]
    pub fn vectorized_reductions(&self) -> usize {
        self.code.vector_loops().1
    }

    /// How many loops of the generated code run on the CPU's AVX2 or
    /// AVX-512 executor ([`crate::jit::vector_width`]) rather than as f32x4
    /// code. For tests and diagnostics.
    #[doc(hidden)]
    pub fn wide_loops(&self) -> usize {
        self.code.wide_loops()
    }

    /// How the kernel runs.
    pub fn route(&self) -> RouteKind {
        self.route
    }

    /// The lowered loop nest (printable with `{}`).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Runs the kernel on f64 inputs named like the arguments (as
    /// [`IndexFn::eval_f64`]).
    pub fn run_f64(&self, inputs: &[(&str, &[f64])]) -> Result<Vec<f64>, Error> {
        self.run_named(inputs)
    }

    /// Runs the kernel on f32 inputs named like the arguments.
    pub fn run_f32(&self, inputs: &[(&str, &[f32])]) -> Result<Vec<f32>, Error> {
        self.run_named(inputs)
    }

    /// Runs the kernel on f32 buffers ordered like [`CompiledKernel::args`],
    /// writing the whole output. Every length is checked before any code runs.
    pub fn run_into_f32(&self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), Error> {
        self.run_into(inputs, out)
    }

    /// As [`CompiledKernel::run_into_f32`], for f64.
    pub fn run_into_f64(&self, inputs: &[&[f64]], out: &mut [f64]) -> Result<(), Error> {
        self.run_into(inputs, out)
    }

    fn run_into<T: Element>(&self, inputs: &[&[T]], out: &mut [T]) -> Result<(), Error> {
        let ops: Vec<Operand<'_>> = inputs.iter().map(|s| Operand::host(s)).collect();
        self.run(&ops, OperandMut::host(out))
    }

    fn dtype_error(&self, found: DType) -> Error {
        Error::DType {
            op: self.name.clone(),
            message: format!(
                "the kernel was compiled for {:?}, not {found:?} (an operand)",
                self.dtype
            ),
        }
    }

    fn shape_error(&self, message: String) -> Error {
        Error::Shape {
            op: format!("run {}", self.name),
            message,
        }
    }

    fn run_named<T: Element>(&self, inputs: &[(&str, &[T])]) -> Result<Vec<T>, Error> {
        for (name, _) in inputs {
            if !self.args.iter().any(|a| a.name == *name) {
                return Err(self.shape_error(format!(
                    "`{name}` is not an argument of {} (arguments: {})",
                    self.name,
                    self.arg_list()
                )));
            }
        }
        let ordered = self
            .args
            .iter()
            .map(|decl| {
                inputs
                    .iter()
                    .find(|(n, _)| *n == decl.name)
                    .map(|(_, d)| *d)
                    .ok_or_else(|| {
                        self.shape_error(format!("no data given for argument `{}`", decl.name))
                    })
            })
            .collect::<Result<Vec<&[T]>, Error>>()?;
        let mut out = vec![T::default(); self.out_shape.iter().product()];
        self.run_into(&ordered, &mut out)?;
        Ok(out)
    }

    fn arg_list(&self) -> String {
        let names: Vec<String> = self
            .args
            .iter()
            .map(|a| format!("{}{:?}", a.name, a.shape))
            .collect();
        names.join(", ")
    }

    /// The half type of a GPU GEMM's products and its two operands'
    /// arguments: those may be buffers of that type (the half tensor a
    /// deferred widening reads, `super::exec`), which cuBLAS reads as they
    /// are.
    pub(crate) fn half_operands(&self) -> Option<(DType, [usize; 2])> {
        self.half_operands
    }

    /// Whether it computes `f[i…] = x[i…]` from a buffer of a half type
    /// into f32: a widening, whose deferred result a half GEMM reads as
    /// the half buffer itself ([`CompiledKernel::half_operands`]).
    pub(crate) fn widens_half(&self) -> bool {
        self.widens_half
    }

    /// Every operand's device, element type and length against the
    /// kernel's, before any code runs.
    fn check(&self, inputs: &[Operand<'_>], out_dtype: DType, out_len: usize) -> Result<(), Error> {
        if inputs.len() != self.args.len() {
            return Err(self.shape_error(format!(
                "{} buffers given for {} arguments ({})",
                inputs.len(),
                self.args.len(),
                self.arg_list()
            )));
        }
        let typed = self.route != RouteKind::Host;
        for (k, (((decl, &expected), data), &dtype)) in self
            .args
            .iter()
            .zip(&self.arg_lens)
            .zip(inputs)
            .zip(&self.arg_dtypes)
            .enumerate()
        {
            if data.device() != self.device {
                return Err(device_mismatch(&self.name, self.device, data.device()));
            }
            // (A half GEMM's operand may be a half buffer.)
            if typed
                && data.dtype() != dtype
                && !self
                    .half_operands
                    .is_some_and(|(half, args)| args.contains(&k) && data.dtype() == half)
            {
                return Err(self.dtype_error(data.dtype()));
            }
            if data.len() != expected {
                return Err(self.shape_error(format!(
                    "argument `{}` of shape {:?} needs {expected} values, got {}",
                    decl.name,
                    decl.shape,
                    data.len()
                )));
            }
        }
        if out_dtype != self.dtype {
            return Err(self.dtype_error(out_dtype));
        }
        if out_len != self.out_len {
            return Err(self.shape_error(format!(
                "the output of shape {:?} needs {} values, got {out_len}",
                self.out_shape, self.out_len
            )));
        }
        Ok(())
    }

    /// Runs the kernel on `inputs` (ordered like its arguments) into `out`,
    /// after [`CompiledKernel::check`].
    pub(crate) fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        if out.device() != self.device {
            return Err(device_mismatch(&self.name, self.device, out.device()));
        }
        self.check(inputs, out.dtype(), out.len())?;
        self.code.run(inputs, out)
    }

    /// Runs an element-wise kernel writing its output over
    /// `inputs[aliased]`. `Ok(false)`, having run nothing, when its route
    /// cannot (only generated loop code runs in place).
    ///
    /// # Safety
    /// As [`Executable::run_in_place`]: the function reads argument
    /// `aliased` only at the output index itself, and that operand's
    /// memory is written by this call alone.
    pub(crate) unsafe fn run_in_place(
        &self,
        inputs: &[Operand<'_>],
        aliased: usize,
    ) -> Result<bool, Error> {
        // (An output over an argument of another element type could not
        // hold it.)
        if self.route != RouteKind::Jit || self.arg_dtypes.get(aliased) != Some(&self.dtype) {
            return Ok(false);
        }
        let Some(target) = inputs.get(aliased) else {
            return Err(self.shape_error(format!("no argument {aliased} to write over")));
        };
        self.check(inputs, target.dtype(), target.len())?;
        // SAFETY: forwarded from the caller.
        unsafe { self.code.run_in_place(inputs, aliased) }
    }
}

impl fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .field("args", &self.args)
            .field("out_shape", &self.out_shape)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for CompiledKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.dtype, self.kernel)
    }
}
