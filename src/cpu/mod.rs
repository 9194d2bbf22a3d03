//! The CPU backend: planned stages compiled with Cranelift and run on a
//! persistent thread pool, over host memory.
//!
//! Owns code generation from the kernel IR (`codegen`, `math`, `simd`,
//! `vmath`, `clif_lanes`, `wide_loop`, `wide_segment`), the wide executor
//! (`wide`), running compiled stages (`compiled`), the thread pool
//! (`pool`), running contractions with tenjin's own GEMM (`gemm`) and the
//! [`Backend`](crate::kernel::backend::Backend) implementation
//! (`backend`). It emits code for exactly the route it is given (the
//! kernel IR's `Route`: GEMM, GEMM then a loop nest, a loop nest whose
//! vector loops the planner marked, or a host kernel); it must not parse,
//! derive or plan, and it imports neither the planner nor the GPU backend.
//! Users reach it through the runtime (`tenjin::jit` is its public face).
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
//! strip, so results stay independent of the thread count. A marked loop or
//! sum with transcendental work runs at the host's full width instead
//! (`wide`: AVX2 or AVX-512, tiles of 256 elements, the cheap steps
//! compiled as register-resident f32x4 segments by `wide_segment`), with
//! the same lane sequences, so the same bits. f64 kernels stay scalar.

mod backend;
#[doc(hidden)]
pub mod check;
mod clif_lanes;
mod code_cache;
mod codegen;
mod compiled;
mod counted_loop;
#[doc(hidden)]
pub mod gemm;
mod math;
mod pool;
mod random;
mod run_time;
mod simd;
#[cfg(test)]
mod test_kernels;
mod trips;
mod vmath;
mod wide;
mod wide_loop;
mod wide_segment;
mod winograd;

pub use crate::kernel::sharing::{
    dynamic_sizes, run_time_constants, set_run_time_constants, DynamicSizes, SPECIALISE_AFTER,
};
pub use backend::CPU;
pub use code_cache::{code_compiled, code_shared, code_specialised};
pub use compiled::{kernels_run, set_min_parallel_work, DEFAULT_MIN_PARALLEL_WORK};
pub use pool::{num_threads, set_num_threads};

/// The vector width element-wise f32 loops run at in this process:
/// `"avx512"` (16 lanes), `"avx2"` (8) or `"f32x4"` (the portable code).
/// The widest the host has, unless the `TENJIN_SIMD` environment variable
/// (read once) names a narrower one.
///
/// ```
/// let w = tenjin::jit::vector_width();
/// assert!(["avx512", "avx2", "f32x4"].contains(&w));
/// ```
pub fn vector_width() -> &'static str {
    wide::Width::host().name()
}
