//! How one stage runs: as a GEMM, as a GEMM followed by a fused
//! element-wise epilogue, or as a loop nest.
//!
//! Owns [`Route`] and [`route`], the decision the backends obey: a
//! contraction big enough to pay for a GEMM call goes to GEMM (alone, or
//! followed by one fused kernel for the element-wise work around it); every
//! other function is a loop nest, in f32 with its nested sums ordered for
//! contiguous inner loops (`reorder`; f64 keeps the interpreter's order
//! exactly). Loop nests come lowered to the kernel IR with their vector
//! loops marked and peeled (`vectorize`), so a backend only emits code.
//! Must not generate or run code.

use super::contraction::{self, Contraction};
use super::vectorize::plan_vectors;
use super::{epilogue, reorder};
use crate::kernel::Kernel;
use crate::symbolic::IndexFn;
use crate::{DType, Error};

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
    /// argument, only at the output index (see `epilogue::split`).
    GemmThenLoop {
        contraction: Contraction,
        epilogue: IndexFn,
        /// The epilogue's planned loop nest.
        kernel: Kernel,
    },
    /// A loop nest computing the function (in f32 its sums may be
    /// reordered), lowered and planned.
    Loop(Kernel),
    /// Rust code on the host (a data-dependent stage, see `super::host`):
    /// the stage's function only describes its shapes.
    Host(std::sync::Arc<dyn super::host::HostKernel>),
}

impl Route {
    /// `"gemm"`, `"gemm+loop"` or `"loop"`.
    pub fn name(&self) -> &'static str {
        match self {
            Route::Gemm(_) => "gemm",
            Route::GemmThenLoop { .. } => "gemm+loop",
            Route::Loop(_) => "loop",
            Route::Host(_) => "host",
        }
    }
}

/// Smallest `m·n·k` of one product for which a contraction is sent to GEMM
/// (below it, packing costs more than the generic kernel's loop).
pub const MIN_GEMM_VOLUME: usize = 16 * 16 * 16;

fn worth_gemm(plan: &Contraction) -> bool {
    let [calls, m, n, k] = plan.gemm_shape();
    calls > 0 && m * n * k >= MIN_GEMM_VOLUME
}

/// Whether `f` is a contraction the route sends to GEMM.
pub(crate) fn is_gemm(f: &IndexFn) -> bool {
    contraction::detect(f).is_some_and(|p| worth_gemm(&p))
}

/// Whether the route of `f` is a GEMM, alone or followed by a loop.
pub(crate) fn routes_to_gemm(f: &IndexFn) -> bool {
    is_gemm(f) || epilogue::split(f).is_some_and(|s| worth_gemm(&s.contraction))
}

/// The route of `f` computed in `dtype` (see the module documentation).
///
/// ```
/// use tenjin::planner::route::route;
/// use tenjin::symbolic::IndexFn;
/// let mm = IndexFn::parse("f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j])",
///                         &[("a", &[64, 64][..]), ("b", &[64, 64][..])])?;
/// assert_eq!(route(&mm, tenjin::DType::F32)?.name(), "gemm");
/// let relu = IndexFn::parse("f[i; j] = max(sum{k}_0^63 (a[i; k] * b[k; j]), 0)",
///                           &[("a", &[64, 64][..]), ("b", &[64, 64][..])])?;
/// assert_eq!(route(&relu, tenjin::DType::F32)?.name(), "gemm+loop");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn route(f: &IndexFn, dtype: DType) -> Result<Route, Error> {
    route_with(f, |g, is_epilogue| {
        let kernel = match dtype {
            DType::F32 if !is_epilogue => crate::kernel::lower(&reorder::interchange_sums(g))?,
            _ => crate::kernel::lower(g)?,
        };
        Ok(plan_vectors(kernel, dtype))
    })
}

/// The route of `f` with the loop nests a backend plans itself:
/// `loop_kernel(g, is_epilogue)` is the planned kernel of `g`, either `f`
/// itself or the epilogue after a GEMM. The choice between GEMM, GEMM and
/// epilogue, and loop is the same for every backend.
pub fn route_with(
    f: &IndexFn,
    loop_kernel: impl Fn(&IndexFn, bool) -> Result<Kernel, Error>,
) -> Result<Route, Error> {
    if let Some(plan) = contraction::detect(f) {
        if worth_gemm(&plan) {
            return Ok(Route::Gemm(plan));
        }
    }
    if let Some(split) = epilogue::split(f) {
        if worth_gemm(&split.contraction) {
            let kernel = loop_kernel(&split.epilogue, true)?;
            return Ok(Route::GemmThenLoop {
                contraction: split.contraction,
                epilogue: split.epilogue,
                kernel,
            });
        }
    }
    Ok(Route::Loop(loop_kernel(f, false)?))
}
