//! [`CpuKernel`]: one stage compiled for the host, and how it runs.
//!
//! Owns the split of the parallel loop over the thread pool, the GEMM then
//! epilogue sequence, host kernels over typed slices, and the lifetime of
//! the machine code (freed when the kernel is dropped). Operand lengths
//! are checked by the runtime before anything runs; element types are
//! checked here, when the operands become slices. Must not compile
//! anything.

use super::code_cache::JitCall;
use super::codegen::{Code, KernelFn};
use super::pool;
use crate::dtype::{not_computable, Element, Float};
use crate::kernel::backend::{Executable, Operand, OperandMut};
use crate::kernel::contraction::Contraction;
use crate::kernel::host::{DeviceForm, HostKernel, Workers};
use crate::kernel::winograd::WinogradConv;
use crate::DType;
use crate::Error;
use cranelift_jit::JITModule;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Default work (in `Kernel::cost_per_iteration` units, roughly simple
/// arithmetic operations) below which a chunk is not worth handing to
/// another thread: waking the pool costs a few microseconds, this is about
/// 10–20 µs of work.
pub const DEFAULT_MIN_PARALLEL_WORK: u64 = 32_768;

static MIN_PARALLEL_WORK: AtomicU64 = AtomicU64::new(DEFAULT_MIN_PARALLEL_WORK);

/// Kernels run on the CPU since the process started.
static KERNELS_RUN: AtomicU64 = AtomicU64::new(0);

/// Kernels run on the CPU since the process started (every route).
pub fn kernels_run() -> u64 {
    KERNELS_RUN.load(Relaxed)
}

/// Sets the estimated work (roughly, simple arithmetic operations) a chunk
/// of a kernel's parallel loop must have before the loop is split across
/// threads (default 32768, about 10–20 µs). `0` splits every kernel as
/// finely as the pool allows (useful to test thread-count independence on
/// small inputs).
///
/// ```
/// tenjin::jit::set_min_parallel_work(0);
/// tenjin::jit::set_min_parallel_work(tenjin::jit::DEFAULT_MIN_PARALLEL_WORK);
/// ```
pub fn set_min_parallel_work(work: u64) {
    MIN_PARALLEL_WORK.store(work, Relaxed);
}

/// A stage compiled for the host.
pub struct CpuKernel {
    pub(crate) exec: Exec,
    /// Trip count of the parallel (outermost) loop of the generated code.
    pub(crate) extent: usize,
    /// Estimated work of one parallel-loop iteration.
    pub(crate) cost_per_iteration: u64,
}

// Built once per kernel and never moved in a hot path: the size
// difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Exec {
    Jit(JitCall),
    /// A contraction computed by tenjin's GEMM (see `super::gemm`).
    Gemm(Contraction),
    /// A contraction into the output buffer, then generated code for the
    /// element-wise work around it, reading the contraction as one more
    /// argument at the output index only, so it runs in place over the
    /// output: no temporary, no allocation per call.
    GemmThenJit(Contraction, JitCall),
    /// Winograd's convolution (`super::winograd`).
    Winograd(WinogradConv),
    /// Winograd's convolution into the output buffer, then generated code
    /// for the element-wise work around it, in place (as `GemmThenJit`).
    WinogradThenJit(WinogradConv, JitCall),
    /// Rust code over the operands' typed host slices.
    Host(Arc<dyn HostKernel>),
}

impl Exec {
    fn code(&self) -> Option<&JitCode> {
        match self {
            Exec::Jit(call) | Exec::GemmThenJit(_, call) | Exec::WinogradThenJit(_, call) => {
                Some(&call.code)
            }
            Exec::Gemm(_) | Exec::Winograd(_) | Exec::Host(_) => None,
        }
    }
}

/// Generated code and the module that owns its memory.
pub(crate) struct JitCode {
    pub(super) entry: KernelFn,
    module: Option<JITModule>,
    vectorized: bool,
    vectorized_reductions: u32,
    wide_loops: u32,
    /// The programs `entry` runs on the wide executor (it holds their
    /// addresses, so they are boxed): freed with the code.
    #[allow(clippy::vec_box)]
    _programs: Vec<Box<super::wide::Program>>,
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
            wide_loops: code.wide_loops,
            _programs: code.programs,
        }
    }
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: `JitCode` is dropped when its kernel is, so no call
            // of `entry` is running or can start.
            unsafe { m.free_memory() };
        }
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

/// The pool, lent to host kernels.
pub(crate) struct PoolWorkers;

impl Workers for PoolWorkers {
    fn parallel_for(&self, n: usize, min_chunk: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        pool::parallel_for(n, min_chunk, f)
    }
}

/// The operands' host addresses, each checked to hold elements of `T`.
/// (Room for one more: the run-time constants' address, `launch_ptrs`.)
fn addresses<T: Element>(inputs: &[Operand<'_>]) -> Result<Vec<*const u8>, Error> {
    let mut out = Vec::with_capacity(inputs.len() + 1);
    for o in inputs {
        out.push(o.host_slice::<T>()?.as_ptr() as *const u8);
    }
    Ok(out)
}

/// The operands as slices of `T`.
fn slices<'a, T: Element>(inputs: &[Operand<'a>]) -> Result<Vec<&'a [T]>, Error> {
    inputs.iter().map(|o| o.host_slice::<T>()).collect()
}

impl CpuKernel {
    fn run_float<T: Float>(
        &self,
        inputs: &[Operand<'_>],
        out: OperandMut<'_>,
    ) -> Result<(), Error> {
        let out = out.host_slice_mut::<T>()?;
        if let Exec::Jit(code) = &self.exec {
            // The hot path: the operands' addresses straight into the launch.
            let args = addresses::<T>(inputs)?;
            if !out.is_empty() {
                // SAFETY: `out` is a unique buffer of the output's checked
                // length; the inputs have their checked lengths.
                unsafe { self.launch_ptrs(code, args, out.as_mut_ptr() as *mut u8) }
            }
            return Ok(());
        }
        let inputs = slices::<T>(inputs)?;
        if out.is_empty() {
            return Ok(());
        }
        match &self.exec {
            Exec::Jit(_) => {}
            Exec::Gemm(plan) => plan.run_with_threads(&inputs, out, pool::num_threads()),
            Exec::GemmThenJit(plan, code) => {
                plan.run_with_threads(&inputs, out, pool::num_threads());
                self.epilogue(code, &inputs, out);
            }
            Exec::Winograd(w) => super::winograd::run_element(w, &inputs, out)?,
            Exec::WinogradThenJit(w, code) => {
                super::winograd::run_element(w, &inputs, out)?;
                self.epilogue(code, &inputs, out);
            }
            Exec::Host(h) => {
                return Err(Error::Invalid {
                    function: h.name().to_string(),
                    message: "internal: a host kernel reached the generated-code path".into(),
                })
            }
        }
        Ok(())
    }

    /// Runs the epilogue `code` over the product already in `out`. No
    /// temporary: the epilogue, which reads the product as its last
    /// argument only at the output index itself (`epilogue::split` reads
    /// it as `t[i…]` with the output's own indices), overwrites it element
    /// by element, each element read before it is written and by the
    /// thread that writes it.
    fn epilogue<T: Float>(&self, code: &JitCall, inputs: &[&[T]], out: &mut [T]) {
        let dst = out.as_mut_ptr() as *mut u8;
        // The inputs, the product in `out`, then room for the run-time
        // constants' address.
        let mut args: Vec<*const u8> = Vec::with_capacity(inputs.len() + 2);
        args.extend(inputs.iter().map(|s| s.as_ptr() as *const u8));
        args.push(dst as *const u8);
        // SAFETY: as for `Exec::Jit`; the only argument aliasing `out` is
        // read element-wise (above).
        unsafe { self.launch_ptrs(code, args, dst) };
    }

    /// # Safety
    /// See [`Executable::run_in_place`].
    unsafe fn run_in_place_float<T: Float>(
        &self,
        inputs: &[Operand<'_>],
        aliased: usize,
    ) -> Result<bool, Error> {
        let Exec::Jit(code) = &self.exec else {
            return Ok(false);
        };
        let args = addresses::<T>(inputs)?;
        let Some(target) = inputs.get(aliased) else {
            return Ok(false);
        };
        if target.is_empty() {
            return Ok(true);
        }
        let out = args[aliased] as *mut u8;
        // SAFETY: as in `run_float`; the caller guarantees that the aliased
        // argument is read element-wise only and written by nobody else.
        unsafe { self.launch_ptrs(code, args, out) };
        Ok(true)
    }

    /// # Safety
    /// `args` are buffers of the lengths the code was generated for, `out`
    /// holds the output's length, nothing else writes them meanwhile, and
    /// an argument that aliases `out` is read only at the output index.
    unsafe fn launch_ptrs(&self, call: &JitCall, mut args: Vec<*const u8>, out: *mut u8) {
        let (code, constants) = call.current();
        if !constants.is_empty() {
            // The code reads its run-time constants through the pointer
            // after the arguments' (`super::codegen`).
            args.push(constants.as_ptr() as *const u8);
        }
        let launch = Launch {
            entry: code.entry,
            args,
            out,
        };
        let launch = &launch;
        // SAFETY: the buffers have the declared lengths (checked by the
        // runtime) and outlive the launch; the kernel reads only elements
        // the index function reads (its accesses are in bounds on their
        // domains, `IndexFn::check_bounds`, and lowering keeps every load
        // under its guards and loops) and writes only the output rows
        // `start..end`, which no other chunk writes.
        let body = move |start: usize, end: usize| unsafe { launch.call(start, end) };
        let work = MIN_PARALLEL_WORK.load(Relaxed);
        let min_chunk = work.div_ceil(self.cost_per_iteration.max(1)).max(1);
        pool::parallel_for(self.extent, min_chunk as usize, &body);
    }
}

impl Executable for CpuKernel {
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        KERNELS_RUN.fetch_add(1, Relaxed);
        if let Exec::Host(h) = &self.exec {
            if h.device_form() == Some(DeviceForm::Block) {
                return h.run_on(inputs, out);
            }
            let typed = inputs
                .iter()
                .map(|o| o.host_in())
                .collect::<Result<Vec<_>, Error>>()?;
            return h.run(&typed, out.host_out()?, &PoolWorkers);
        }
        match out.dtype() {
            DType::F32 => self.run_float::<f32>(inputs, out),
            DType::F64 => self.run_float::<f64>(inputs, out),
            d => Err(not_computable("kernel", d)),
        }
    }

    unsafe fn run_in_place(&self, inputs: &[Operand<'_>], aliased: usize) -> Result<bool, Error> {
        let Some(target) = inputs.get(aliased) else {
            return Ok(false);
        };
        if !matches!(self.exec, Exec::Jit(_)) {
            return Ok(false);
        }
        KERNELS_RUN.fetch_add(1, Relaxed);
        match target.dtype() {
            // SAFETY: forwarded from the caller.
            DType::F32 => unsafe { self.run_in_place_float::<f32>(inputs, aliased) },
            DType::F64 => unsafe { self.run_in_place_float::<f64>(inputs, aliased) },
            d => Err(not_computable("kernel", d)),
        }
    }

    fn vector_loops(&self) -> (bool, usize) {
        self.exec.code().map_or((false, 0), |c| {
            (
                c.vectorized || c.vectorized_reductions > 0,
                c.vectorized_reductions as usize,
            )
        })
    }

    fn wide_loops(&self) -> usize {
        self.exec.code().map_or(0, |c| c.wide_loops as usize)
    }
}
