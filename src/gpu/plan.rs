//! How a stage runs on a GPU: `crate::planner::route::route_with` with the
//! GPU's loop kernels.
//!
//! Owns [`route`] and [`loop_kernel`]. A contraction worth a GEMM goes to
//! cuBLAS, alone or followed by an element-wise epilogue over its output,
//! exactly as the planner decides for the CPU; everything else is a loop
//! kernel: the function lowered in the interpreter's order (f64 results
//! then equal the CPU's bit for bit), with long f32 sums split into blocks
//! added in f64 (`planner::blocked_sums`). The CPU's vectorisation,
//! peeling and sum interchange are not applied: one GPU thread computes
//! one output element. Must not emit or run code.

use crate::kernel::Kernel;
use crate::planner::blocked_sums;
use crate::planner::route::{route_with, Route};
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// The loop kernel computing `f` in `dtype` on a GPU.
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = sum{k}_0^9999 (x[i; k])", &[("x", &[2, 10000][..])])?;
/// let k = tenjin::gpu::plan::loop_kernel(&f, tenjin::DType::F32)?;
/// assert!(k.to_string().contains("sum.f64"), "{k}"); // long f32 sums add blocks in f64
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn loop_kernel(f: &IndexFn, dtype: DType) -> Result<Kernel, Error> {
    let k = crate::kernel::lower(f)?;
    Ok(match dtype {
        DType::F32 => blocked_sums::block_long_sums(k),
        DType::F64 => k,
        d => return Err(crate::dtype::not_computable(f.name(), d)),
    })
}

/// The GPU route of `f` computed in `dtype` (the GEMM routes are decided
/// here but not run yet: cuBLAS is not wired in).
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// let mm = IndexFn::parse("f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j])",
///                         &[("a", &[64, 64][..]), ("b", &[64, 64][..])])?;
/// assert_eq!(tenjin::gpu::plan::route(&mm, tenjin::DType::F32)?.name(), "gemm");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn route(f: &IndexFn, dtype: DType) -> Result<Route, Error> {
    route_with(f, |g, _| loop_kernel(g, dtype))
}
