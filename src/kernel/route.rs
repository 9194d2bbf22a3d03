//! How a backend runs one stage: the route the planner chose, as data.
//!
//! Owns [`Route`] (a GEMM, a GEMM then an element-wise loop nest over its
//! output, a loop nest, Winograd's convolution, or Rust code on the host)
//! and [`RouteKind`], its name. The planner decides the route
//! (`crate::planner::route`); every backend runs exactly the route it is
//! given. Must not decide or run anything.

use super::contraction::Contraction;
use super::host::HostKernel;
use super::winograd::WinogradConv;
use super::Kernel;
use crate::symbolic::IndexFn;
use crate::DType;
use std::fmt;
use std::sync::Arc;

/// The way a backend runs one function.
// Built once per stage and stored: the size difference between variants
// does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Route {
    /// A contraction computed by a GEMM.
    Gemm(Contraction),
    /// A contraction computed by a GEMM into the output, then `epilogue`
    /// over it in place: the epilogue reads the contraction as its last
    /// argument, only at the output index.
    GemmThenLoop {
        contraction: Contraction,
        epilogue: IndexFn,
        /// The epilogue's planned loop nest.
        kernel: Kernel,
    },
    /// A loop nest computing the function, lowered and planned for the
    /// backend's target.
    Loop(Kernel),
    /// A 3×3 stride-1 convolution by Winograd's F(2×2, 3×3), or its filter
    /// gradient by F(3×3, 2×2), opt in (`crate::planner::winograd`): the
    /// CPU runs it, no GPU is given one.
    Winograd(WinogradConv),
    /// Winograd's convolution into the output, then `epilogue` over it in
    /// place (as [`Route::GemmThenLoop`]: a convolution with its bias).
    WinogradThenLoop {
        conv: WinogradConv,
        epilogue: IndexFn,
        /// The epilogue's planned loop nest.
        kernel: Kernel,
    },
    /// Rust code on the host (a data-dependent stage, see
    /// [`super::host`]): the stage's function only describes its shapes.
    Host(Arc<dyn HostKernel>),
}

impl Route {
    /// `"gemm"`, `"gemm+loop"`, `"loop"`, `"block loop"` (a block of
    /// threads per output, `Kernel::threads_per_output`), `"winograd"`,
    /// `"winograd+loop"` or `"host"`.
    pub fn name(&self) -> &'static str {
        match self {
            Route::Gemm(_) => "gemm",
            Route::GemmThenLoop { .. } => "gemm+loop",
            Route::Loop(k) if k.threads_per_output > 1 => "block loop",
            Route::Loop(_) => "loop",
            Route::Winograd(_) => "winograd",
            Route::WinogradThenLoop { .. } => "winograd+loop",
            Route::Host(_) => "host",
        }
    }

    /// How the compiled route runs.
    pub fn kind(&self) -> RouteKind {
        match self {
            Route::Gemm(_) => RouteKind::Gemm,
            Route::GemmThenLoop { .. } => RouteKind::GemmThenJit,
            Route::Loop(_) => RouteKind::Jit,
            Route::Winograd(_) | Route::WinogradThenLoop { .. } => RouteKind::Winograd,
            Route::Host(_) => RouteKind::Host,
        }
    }

    /// The element type of the output when the stage computes in `dtype`
    /// (a host kernel may write another, a conversion; a kernel with a
    /// half output buffer writes its half type).
    pub fn out_dtype(&self, dtype: DType) -> DType {
        match self {
            Route::Host(h) => h.out_dtype().unwrap_or(dtype),
            Route::Loop(k)
            | Route::GemmThenLoop { kernel: k, .. }
            | Route::WinogradThenLoop { kernel: k, .. } => k.buffers.out_dtype(dtype),
            Route::Gemm(_) | Route::Winograd(_) => dtype,
        }
    }
}

/// How a compiled kernel runs (for diagnostics and for the schedule,
/// which writes in place only over generated loop code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// Generated code for the loop nest.
    Jit,
    /// A contraction through a GEMM library.
    Gemm,
    /// A contraction, then generated code for the element-wise work
    /// around it (its epilogue, run in place over the output).
    GemmThenJit,
    /// Winograd's convolution (transforms around GEMMs), alone or then
    /// generated code for its epilogue.
    Winograd,
    /// Rust code on the host (gathers by integer ids and their gradients).
    Host,
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RouteKind::Jit => "jit",
            RouteKind::Gemm => "gemm",
            RouteKind::GemmThenJit => "gemm+jit",
            RouteKind::Winograd => "winograd",
            RouteKind::Host => "host",
        })
    }
}
