//! The CPU backend: index functions compiled with Cranelift, cached, and run
//! on a persistent thread pool.
//!
//! Owns code generation from the kernel IR (`codegen`, `math`, `simd`),
//! the kernel cache (`cache`), running kernels (`compiled`), the thread
//! pool (`pool`) and running contractions with the `gemm` crate (`gemm`).
//! It emits code for the route the planner gives it
//! ([`crate::planner::Route`]: GEMM, GEMM then a loop nest, or a loop nest
//! whose vector loops are marked); it must not parse, derive or plan.
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
//! computes (same operations in the same order, same `std` functions); f32
//! kernels compute in f32 (see `math` for the accuracy of the f32 functions).
//!
//! **SIMD.** In f32 kernels, an output loop the planner marked (contiguous
//! or broadcast loads and store) runs as f32x4 code unrolled four times,
//! with a 4-wide and a 1-wide tail (`simd`); its `exp`, `tanh`, `sigmoid`, `log`
//! and `log10` are inline polynomials (`vmath`, within 2.5 ulp) in every
//! strip, so results stay independent of the thread count. f64 kernels stay
//! scalar.

mod cache;
mod codegen;
mod compiled;
#[doc(hidden)]
pub mod gemm;
mod math;
mod pool;
mod simd;
mod vmath;

pub use cache::{JitStats, MissReason};
pub use compiled::{CompiledKernel, RouteKind};
pub(crate) use pool::parallel_for;
pub use pool::{num_threads, set_num_threads};

use crate::planner::Route;
use crate::symbolic::IndexFn;
use crate::{DType, Error};
use std::sync::Arc;

/// The kernel computing `f` on `dtype` buffers, compiled on first use and
/// cached (keyed by the structure of `f` up to index-variable names, the
/// shapes and the dtype). A cache hit costs a structural hash of `f` and a
/// map look-up.
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
    let key = crate::kernel::key::structural_key(f);
    cache::get_or_compile(key, dtype, || build(f, dtype))
}

/// As [`compile`], for a function whose route the planner already chose
/// (a stage of a program): the cache key is the same, so a stage equal to
/// a function compiled before is a cache hit.
pub fn compile_planned(
    f: &IndexFn,
    route: &Route,
    dtype: DType,
) -> Result<Arc<CompiledKernel>, Error> {
    if let Route::Host(_) = route {
        // Not cached by structure: a host stage's function only describes
        // its shapes, so equal descriptions may be different kernels.
        return Ok(Arc::new(compile_route(f, route.clone(), dtype)?));
    }
    let key = crate::kernel::key::structural_key(f);
    cache::get_or_compile(key, dtype, || {
        f.check_bounds()?;
        compile_route(f, route.clone(), dtype)
    })
}

/// Lowers and generates code for the route the planner chose (the miss
/// path of [`compile`]).
fn build(f: &IndexFn, dtype: DType) -> Result<CompiledKernel, Error> {
    // Parsing and derivation already guarantee this; generated code does no
    // bounds checks, so it is re-established here, where it is cheap next
    // to code generation (0.2–0.5 ms for the paper's derivatives).
    f.check_bounds()?;
    compile_route(f, crate::planner::route(f, dtype)?, dtype)
}

/// The compiled form of `route`, which computes `f`: code is generated for
/// the planned loop nests exactly as planned.
fn compile_route(f: &IndexFn, route: Route, dtype: DType) -> Result<CompiledKernel, Error> {
    let (kernel, exec) = match route {
        // The loop nest is not run; it describes the function (printing,
        // the cost estimate).
        Route::Gemm(plan) => (crate::kernel::lower(f)?, compiled::Exec::Gemm(plan)),
        Route::GemmThenLoop {
            contraction,
            kernel,
            ..
        } => {
            let code = compiled::JitCode::new(codegen::compile(&kernel, dtype)?);
            (kernel, compiled::Exec::GemmThenJit(contraction, code))
        }
        Route::Loop(kernel) => {
            let code = compiled::JitCode::new(codegen::compile(&kernel, dtype)?);
            (kernel, compiled::Exec::Jit(code))
        }
        // The loop nest of the description (`0` over the output).
        Route::Host(h) => (crate::kernel::lower(f)?, compiled::Exec::Host(h)),
    };
    let dtype = match &exec {
        compiled::Exec::Host(h) => h.out_dtype().unwrap_or(dtype),
        _ => dtype,
    };
    Ok(CompiledKernel {
        name: f.name().to_string(),
        args: f.args().to_vec(),
        out_shape: f.output_shape().to_vec(),
        dtype,
        cost_per_iteration: kernel.cost_per_iteration(),
        kernel,
        source: f.clone(),
        exec,
    })
}

/// The cache's counters since the process started.
///
/// ```
/// let s = tenjin::jit::stats();
/// assert!(s.kernels_compiled <= s.misses);
/// ```
pub fn stats() -> JitStats {
    cache::stats()
}

/// Drops every cached kernel (their code is freed once no `Arc` to them is
/// left) and forgets which expressions were seen. Counters are kept.
pub fn clear() {
    cache::clear()
}

/// Sets how many kernels the cache keeps (default 4096); the least recently
/// used ones beyond that are evicted.
pub fn set_cache_capacity(n: usize) {
    cache::set_capacity(n)
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
    compiled::set_min_parallel_work(work)
}

/// The default of [`set_min_parallel_work`].
pub const DEFAULT_MIN_PARALLEL_WORK: u64 = compiled::DEFAULT_MIN_PARALLEL_WORK;
