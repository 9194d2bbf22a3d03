//! `tenjin::jit`: the CPU backend as a user sees it — compiling one index
//! function, the thread count, and the kernel cache's counters.
//!
//! The code generator itself is `crate::cpu` (Cranelift); this module is
//! the runtime's public face of it: [`compile`] plans the function's route
//! for the CPU and compiles it through the kernel cache, like every stage
//! of every op.
//!
//! ```
//! use tenjin::{jit, DType};
//! use tenjin::symbolic::IndexFn;
//! let f = IndexFn::parse("f[i; j] = exp (x[j; i])", &[("x", &[2, 3][..])])?;
//! let k = jit::compile(&f, DType::F32)?;
//! let y = k.run_f32(&[("x", &[0., 1., 2., 3., 4., 5.][..])])?;
//! assert_eq!(y[1], 3f32.exp()); // y[0; 1] = exp x[1; 0]
//! let again = jit::compile(&f, DType::F32)?; // a cache hit
//! assert!(std::sync::Arc::ptr_eq(&k, &again));
//! # Ok::<(), tenjin::Error>(())
//! ```
//!
//! Results are bitwise identical for any number of threads: each output
//! element is computed by one thread, reductions run in increasing index
//! order. f64 kernels compute exactly what the reference interpreter
//! computes; f32 kernels compute in f32, with f32x4 vector loops where the
//! planner marked them.

pub use super::compiled::CompiledKernel;
pub use super::kernel_cache::{JitStats, MissReason};
#[doc(hidden)]
pub use crate::cpu::check;
#[doc(hidden)]
pub use crate::cpu::gemm;
pub use crate::cpu::{
    dynamic_sizes, num_threads, run_time_constants, set_min_parallel_work, set_num_threads,
    set_run_time_constants, vector_width, DynamicSizes, DEFAULT_MIN_PARALLEL_WORK,
    SPECIALISE_AFTER,
};
pub use crate::kernel::RouteKind;

use super::kernel_cache;
use crate::planner::Route;
use crate::symbolic::IndexFn;
use crate::{DType, Error};
use std::sync::Arc;

/// The CPU kernel computing `f` on `dtype` buffers, compiled on first use
/// and cached (keyed by the structure of `f` up to index-variable names,
/// the shapes and the dtype). A cache hit costs a structural hash of `f`
/// and a map look-up.
///
/// ```
/// use tenjin::{jit::compile, DType};
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = sum{k}_0^1 (x[i; k]) * 7", &[("x", &[2, 2][..])])?;
/// let k = compile(&f, DType::F64)?;
/// assert_eq!(k.run_f64(&[("x", &[1., 2., 3., 4.][..])])?, vec![21., 49.]);
/// // Index names do not matter: the same kernel comes back.
/// let renamed = IndexFn::parse("f[p] = sum{q}_0^1 (x[p; q]) * 7", &[("x", &[2, 2][..])])?;
/// assert!(std::sync::Arc::ptr_eq(&k, &compile(&renamed, DType::F64)?));
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn compile(f: &IndexFn, dtype: DType) -> Result<Arc<CompiledKernel>, Error> {
    kernel_cache::compile_function(f, dtype, &crate::cpu::CPU)
}

/// As [`compile`], for a function whose route the planner already chose
/// (a stage of a program): the cache key is the same, so a stage equal to
/// a function compiled before is a cache hit.
pub fn compile_planned(
    f: &IndexFn,
    route: &Route,
    dtype: DType,
) -> Result<Arc<CompiledKernel>, Error> {
    kernel_cache::compile_stage(f, route, dtype, &crate::cpu::CPU)
}

/// The kernel cache's counters since the process started (every
/// backend's kernels).
///
/// ```
/// let s = tenjin::jit::stats();
/// assert!(s.kernels_compiled <= s.misses);
/// ```
pub fn stats() -> JitStats {
    kernel_cache::stats()
}

/// Drops every cached kernel (their code is freed once no `Arc` to them is
/// left) and forgets which expressions were seen. Counters are kept.
pub fn clear() {
    kernel_cache::clear()
}

/// Sets how many kernels the cache keeps (default 4096); the least recently
/// used ones beyond that are evicted.
pub fn set_cache_capacity(n: usize) {
    kernel_cache::set_capacity(n)
}
