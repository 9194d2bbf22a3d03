//! [`CompiledKernel`]: a compiled index function and how to run it.
//!
//! Owns the run-time checks (every buffer length is checked before any
//! generated code runs), the split of the parallel loop over the thread
//! pool, and the lifetime of the machine code (freed when the last `Arc`
//! to the kernel is dropped). Must not compile anything.

use super::codegen::{Code, KernelFn};
use super::pool;
use crate::dtype::Element;
use crate::kernel::Kernel;
use crate::planner::contraction::Contraction;
use crate::symbolic::ArgDecl;
use crate::DType;
use crate::Error;
use cranelift_jit::JITModule;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Default work (in `Kernel::cost_per_iteration` units, roughly simple
/// arithmetic operations) below which a chunk is not worth handing to
/// another thread: waking the pool costs a few microseconds, this is about
/// 10–20 µs of work.
pub(crate) const DEFAULT_MIN_PARALLEL_WORK: u64 = 32_768;

static MIN_PARALLEL_WORK: AtomicU64 = AtomicU64::new(DEFAULT_MIN_PARALLEL_WORK);

pub(crate) fn set_min_parallel_work(work: u64) {
    MIN_PARALLEL_WORK.store(work, Relaxed);
}

/// A compiled index function for one dtype and one set of shapes, obtained
/// from [`super::compile`].
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
    pub(crate) name: String,
    pub(crate) args: Vec<ArgDecl>,
    pub(crate) out_shape: Vec<usize>,
    pub(crate) dtype: DType,
    pub(crate) kernel: Kernel,
    /// The function it computes (other backends plan their own kernel of
    /// it).
    pub(crate) source: crate::symbolic::IndexFn,
    pub(crate) exec: Exec,
    /// Estimated work of one parallel-loop iteration.
    pub(crate) cost_per_iteration: u64,
}

// Built once per kernel and never moved in a hot path: the size
// difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Exec {
    Jit(JitCode),
    /// A contraction computed by the `gemm` crate (see `jit::gemm`).
    Gemm(Contraction),
    /// A contraction into the output buffer, then generated code for the
    /// element-wise work around it, reading the contraction as one more
    /// argument (see `jit::epilogue`) at the output index only, so it runs
    /// in place over the output: no temporary, no allocation per call.
    GemmThenJit(Contraction, JitCode),
    /// Rust code on the host over the storages' typed slices (a
    /// data-dependent stage, see `crate::planner::host`); run by `exec`.
    Host(std::sync::Arc<dyn crate::planner::host::HostKernel>),
}

impl Exec {
    fn code(&self) -> Option<&JitCode> {
        match self {
            Exec::Jit(code) | Exec::GemmThenJit(_, code) => Some(code),
            Exec::Gemm(_) | Exec::Host(_) => None,
        }
    }
}

/// Runs a contraction with the pool's current thread count.
fn run_contraction<T: Element>(plan: &Contraction, inputs: &[&[T]], out: &mut [T]) {
    plan.run_with_threads(inputs, out, pool::num_threads())
}

/// Generated code and the module that owns its memory.
pub(crate) struct JitCode {
    entry: KernelFn,
    module: Option<JITModule>,
    vectorized: bool,
    vectorized_reductions: u32,
}

// SAFETY: the module is never used after `finalize_definitions` except to
// free its memory in `Drop` (through `&mut self`), and the entry point is a
// plain function of its arguments: sharing or sending a `JitCode` between
// threads shares nothing mutable.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}

impl JitCode {
    pub(crate) fn new(code: Code) -> JitCode {
        JitCode {
            entry: code.entry,
            module: Some(code.module),
            vectorized: code.vectorized,
            vectorized_reductions: code.vectorized_reductions,
        }
    }
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: `JitCode` is dropped when its kernel is (the last Arc
            // is gone), so no call of `entry` is running or can start.
            unsafe { m.free_memory() };
        }
    }
}

/// How a compiled kernel runs (for diagnostics and for the schedule,
/// which writes in place only over generated code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// Generated code for the loop nest.
    Jit,
    /// A contraction through the gemm crate.
    Gemm,
    /// A contraction, then generated code for the element-wise work
    /// around it (its epilogue, run in place over the output).
    GemmThenJit,
    /// Rust code on the host (gathers by integer ids and their gradients).
    Host,
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RouteKind::Jit => "jit",
            RouteKind::Gemm => "gemm",
            RouteKind::GemmThenJit => "gemm+jit",
            RouteKind::Host => "host",
        })
    }
}

/// Raw buffer addresses, shared read-only by the threads of one launch.
struct Launch {
    entry: KernelFn,
    args: Vec<*const u8>,
    out: *mut u8,
}

// SAFETY: the threads of one launch read the input buffers (borrowed
// immutably for the whole launch) and write disjoint rows of the output
// (borrowed mutably for the whole launch): each parallel-loop index belongs
// to exactly one chunk.
unsafe impl Sync for Launch {}

impl Launch {
    /// # Safety
    /// See the call site: valid buffers, and `start..end` written by no one
    /// else.
    unsafe fn call(&self, start: usize, end: usize) {
        (self.entry)(self.args.as_ptr(), self.out, start as i64, end as i64)
    }
}

impl CompiledKernel {
    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The index function this kernel computes.
    pub fn source(&self) -> &crate::symbolic::IndexFn {
        &self.source
    }

    /// The element type the kernel computes in.
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

    /// Whether some loop of the generated code runs as f32x4 vector code
    /// (f32 kernels whose innermost output loop, or a sum, is contiguous; see the
    /// `jit` module documentation). For tests and diagnostics.
    #[doc(hidden)]
    pub fn is_vectorized(&self) -> bool {
        matches!(self.exec.code(), Some(code) if code.vectorized || code.vectorized_reductions > 0)
    }

    /// How many sums of the generated code run as f32x4 vector code (f32
    /// sums whose innermost loop reads contiguous memory, in a fixed
    /// order; see `jit::simd`). For tests and diagnostics.
    #[doc(hidden)]
    pub fn vectorized_reductions(&self) -> usize {
        self.exec
            .code()
            .map_or(0, |code| code.vectorized_reductions as usize)
    }

    /// How the kernel runs.
    pub fn route(&self) -> RouteKind {
        match &self.exec {
            Exec::Jit(_) => RouteKind::Jit,
            Exec::Gemm(_) => RouteKind::Gemm,
            Exec::GemmThenJit(..) => RouteKind::GemmThenJit,
            Exec::Host(_) => RouteKind::Host,
        }
    }

    /// The lowered loop nest (printable with `{}`).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Runs the kernel on f64 inputs named like the arguments (as
    /// [`IndexFn::eval_f64`](crate::symbolic::IndexFn::eval_f64)).
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

    fn check<T: Element>(&self, inputs: &[&[T]], out: &[T]) -> Result<(), Error> {
        if T::DTYPE != self.dtype {
            return Err(self.shape_error(format!(
                "the kernel was compiled for {:?}, not {:?}",
                self.dtype,
                T::DTYPE
            )));
        }
        if inputs.len() != self.args.len() {
            return Err(self.shape_error(format!(
                "{} buffers given for {} arguments ({})",
                inputs.len(),
                self.args.len(),
                self.arg_list()
            )));
        }
        for (decl, data) in self.args.iter().zip(inputs) {
            let expected: usize = decl.shape.iter().product();
            if data.len() != expected {
                return Err(self.shape_error(format!(
                    "argument `{}` of shape {:?} needs {expected} values, got {}",
                    decl.name,
                    decl.shape,
                    data.len()
                )));
            }
        }
        let expected: usize = self.out_shape.iter().product();
        if out.len() != expected {
            return Err(self.shape_error(format!(
                "the output of shape {:?} needs {expected} values, got {}",
                self.out_shape,
                out.len()
            )));
        }
        Ok(())
    }

    /// The host kernel of a [`RouteKind::Host`] kernel.
    pub(crate) fn host(&self) -> Option<&std::sync::Arc<dyn crate::planner::host::HostKernel>> {
        match &self.exec {
            Exec::Host(h) => Some(h),
            _ => None,
        }
    }

    pub(crate) fn run_into<T: Element>(&self, inputs: &[&[T]], out: &mut [T]) -> Result<(), Error> {
        self.check(inputs, out)?;
        if out.is_empty() {
            return Ok(());
        }
        match &self.exec {
            Exec::Host(h) => {
                return Err(Error::Invalid {
                    function: h.name().to_string(),
                    message: "a host kernel runs on storages of several dtypes, through the runtime (not on one slice type)".into(),
                })
            }
            Exec::Jit(code) => self.launch(code, inputs, out),
            Exec::Gemm(plan) => run_contraction(plan, inputs, out),
            Exec::GemmThenJit(plan, code) => {
                // No temporary: the contraction is written into `out`, and
                // the epilogue, which reads it as its last argument only at
                // the output index itself (`epilogue::split` reads it as
                // `t[i…]` with the output's own indices), overwrites it
                // element by element, each element read before it is
                // written and by the thread that writes it.
                run_contraction(plan, inputs, out);
                let dst = out.as_mut_ptr() as *mut u8;
                let mut args: Vec<*const u8> =
                    inputs.iter().map(|s| s.as_ptr() as *const u8).collect();
                args.push(dst as *const u8);
                // SAFETY: `out` is a unique buffer of the output's checked
                // length; the inputs have their checked lengths; the only
                // argument aliasing `out` is read element-wise (above).
                unsafe { self.launch_ptrs(code, args, dst) };
            }
        }
        Ok(())
    }

    /// Runs an element-wise kernel that overwrites its argument `aliased`
    /// with its output (in-place reuse of a buffer whose last use this is).
    /// Refused (`Ok(false)`, nothing run) for GEMM routes, which read whole
    /// rows.
    ///
    /// # Safety
    /// The function must read argument `aliased` only at the output index
    /// itself (`x[i; j]` in `f[i; j]`), so every element is read before it is
    /// written and by the same thread, and no other reference to that buffer
    /// may be used while this runs.
    pub(crate) unsafe fn run_in_place<T: Element>(
        &self,
        inputs: &[&[T]],
        aliased: usize,
    ) -> Result<bool, Error> {
        let target = inputs.get(aliased).copied().unwrap_or(&[]);
        self.check(inputs, target)?;
        let Exec::Jit(code) = &self.exec else {
            return Ok(false);
        };
        if target.is_empty() {
            return Ok(true);
        }
        // SAFETY: as in `launch`; the caller guarantees that the aliased
        // argument is read element-wise only.
        unsafe { self.launch_raw(code, inputs, target.as_ptr() as *mut u8) };
        Ok(true)
    }

    /// Runs generated code over the pool. `inputs` must have the lengths
    /// the code was generated for (checked by the caller).
    fn launch<T: Element>(&self, code: &JitCode, inputs: &[&[T]], out: &mut [T]) {
        // SAFETY: `out` is a unique, checked-length buffer.
        unsafe { self.launch_raw(code, inputs, out.as_mut_ptr() as *mut u8) }
    }

    /// # Safety
    /// `out` holds the output's length and nothing else writes it meanwhile.
    unsafe fn launch_raw<T: Element>(&self, code: &JitCode, inputs: &[&[T]], out: *mut u8) {
        let args = inputs.iter().map(|s| s.as_ptr() as *const u8).collect();
        unsafe { self.launch_ptrs(code, args, out) }
    }

    /// # Safety
    /// `args` are buffers of the lengths the code was generated for, `out`
    /// holds the output's length, nothing else writes them meanwhile, and
    /// an argument that aliases `out` is read only at the output index.
    unsafe fn launch_ptrs(&self, code: &JitCode, args: Vec<*const u8>, out: *mut u8) {
        let launch = Launch {
            entry: code.entry,
            args,
            out,
        };
        let launch = &launch;
        // SAFETY: the buffers have the declared lengths (checked
        // above) and outlive the launch; the kernel reads only
        // elements the index function reads (its accesses are in
        // bounds on their domains, `IndexFn::check_bounds`, and
        // lowering keeps every load under its guards and loops) and
        // writes only the output rows `start..end`, which no other
        // chunk writes.
        let body = move |start: usize, end: usize| unsafe { launch.call(start, end) };
        let work = MIN_PARALLEL_WORK.load(Relaxed);
        let min_chunk = work.div_ceil(self.cost_per_iteration.max(1)).max(1);
        pool::parallel_for(self.kernel.extent, min_chunk as usize, &body);
    }
}

impl fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
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
