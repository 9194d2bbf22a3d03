//! How a stage runs on a GPU: the GPU's side of `crate::planner::route`.
//!
//! Owns [`GpuRoute`] and [`route`]. A contraction worth a GEMM goes to
//! cuBLAS, alone or followed by an element-wise epilogue over its output
//! (the planner's `epilogue::split`, as on the CPU); everything else is a
//! loop kernel: the function lowered in the interpreter's order (f64
//! results then equal the CPU's bit for bit), with long f32 sums split
//! into blocks added in f64 (`planner::blocked_sums`). The CPU's
//! vectorisation, peeling and sum interchange are not applied: one GPU
//! thread computes one output element. Must not emit or run code.

use crate::kernel::Kernel;
use crate::planner::contraction::{self, Contraction};
use crate::planner::{blocked_sums, epilogue, route::worth_gemm};
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// The way the GPU backend runs one function.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum GpuRoute {
    /// A contraction computed by cuBLAS.
    Gemm(Contraction),
    /// cuBLAS into the output, then `kernel` over it in place (it reads
    /// the contraction as its last argument, at the output index only).
    GemmThenLoop {
        contraction: Contraction,
        kernel: Kernel,
    },
    /// A loop kernel, one thread per output element.
    Loop(Kernel),
}

impl GpuRoute {
    /// `"gemm"`, `"gemm+loop"` or `"loop"`, as the CPU routes are named.
    pub fn name(&self) -> &'static str {
        match self {
            GpuRoute::Gemm(_) => "gemm",
            GpuRoute::GemmThenLoop { .. } => "gemm+loop",
            GpuRoute::Loop(_) => "loop",
        }
    }
}

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
    })
}

/// The GPU route of `f` computed in `dtype`.
pub fn route(f: &IndexFn, dtype: DType) -> Result<GpuRoute, Error> {
    if let Some(plan) = contraction::detect(f) {
        if worth_gemm(&plan) {
            return Ok(GpuRoute::Gemm(plan));
        }
    }
    if let Some(split) = epilogue::split(f) {
        if worth_gemm(&split.contraction) {
            return Ok(GpuRoute::GemmThenLoop {
                contraction: split.contraction,
                kernel: loop_kernel(&split.epilogue, dtype)?,
            });
        }
    }
    Ok(GpuRoute::Loop(loop_kernel(f, dtype)?))
}
