//! The planner: what runs, in which stages, by which route.
//!
//! Owns the decisions between an index function (a forward op, a
//! derivative, a second derivative) and the code a backend emits. It is
//! backend-neutral: it plans for a [`Target`] (the CPU or a GPU), and the
//! Cranelift backend (`crate::cpu`) and the PTX backend (`crate::gpu`) run
//! exactly what it plans; neither imports it, nor it them. Its passes are
//! listed in order in `passes`. It may use the symbolic core and the kernel
//! IR; it must not emit or run code, allocate buffers or know about
//! tensors.
//!
//! | module | decides |
//! | --- | --- |
//! | `normalize` | the algebraic form a function is staged in (sums and masks factored, nests ordered) |
//! | `extract`, `cut` | which subexpressions become stages of their own, shared between functions |
//! | `node` | one recorded op's forward and backward programs, planned together |
//! | `program` | the [`Program`]: stages, their sources, the reference evaluation |
//! | `phases` | a strided contraction (a stride-2 convolution's input gradient) as one stride-1 contraction per residue of its output index, read back by a strided copy |
//! | `window` | a convolution-shaped contraction (padding guards, ranges that follow the output, windows) rewritten over constant ranges, and how its reads are materialised (view, padded copy, im2col) |
//! | `blas_layout` | on the GPU, a contraction's operands copied into a layout cuBLAS takes in one call (attention's batch of heads, a convolution's input gradient) |
//! | `gpu_stages` | where the GPU's two rewrites (below) are applied as stages are added |
//! | `split_sums` | a long sum with few outputs on the GPU: block partial sums, then their combine, as two stages |
//! | `route`, `contraction`, `epilogue` | how each stage runs: GEMM, GEMM then a loop, or a loop nest |
//! | `winograd` | (opt in) a 3×3 stride-1 convolution by Winograd's F(2×2, 3×3) on the CPU |
//! | `passes` | the passes in order: the stage pipeline, and the loop passes per target |
//! | `algorithm` | nothing: it names what a planned stage runs (implicit GEMM, im2col, phases by residue, ...) for `explain` |
//! | `reorder`, `peel`, `vectorize`, `blocked_sums` | the loop nest's order, its peeled boundaries, its vector loops, its accurate long f32 sums |

pub mod algorithm;
mod blas_layout;
pub(crate) mod blocked_sums;
pub mod contraction;
mod cut;
pub(crate) mod epilogue;
mod extract;
mod gpu_stages;
pub mod guard_bounds;
mod heavy;
pub mod host;
mod node;
mod normalize;
mod operand;
pub mod passes;
pub(crate) mod peel;
mod phases;
mod program;
pub(crate) mod reorder;
pub mod residues;
pub mod route;
pub(crate) mod split_sums;
pub(crate) mod spread;
pub mod tile;
pub mod vectorize;
mod window;
pub mod winograd;

pub use node::{plan_node, plan_node_for, NodePlan};
pub use normalize::normalize;
pub use program::{Program, Source, Stage};
pub use route::{route, route_for, Route, Target};

use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// The stages computing `f` in `dtype`: subexpressions that would be
/// recomputed per element of a loop they do not depend on become stages of
/// their own, contractions become GEMMs (see `extract` for the rules).
///
/// ```
/// use tenjin::planner::plan_function;
/// use tenjin::symbolic::IndexFn;
/// // Attention in one line: exp(q·kᵀ) once, as a GEMM with exp after it,
/// // then a GEMM with v divided by the row sums (not one loop nest that
/// // recomputes the scores for every output column).
/// let f = IndexFn::parse(
///     "o[i; d] = sum{j}_0^31 (exp (sum{e}_0^7 (q[i; e] * k[j; e])) / sum{m}_0^31 (exp (sum{e}_0^7 (q[i; e] * k[m; e]))) * v[j; d])",
///     &[("q", &[32, 8][..]), ("k", &[32, 8][..]), ("v", &[32, 8][..])])?;
/// let p = plan_function(&f, tenjin::DType::F32)?;
/// let routes: Vec<&str> = p.stages.iter().map(|s| s.route.name()).collect();
/// assert_eq!(routes, ["gemm+loop", "gemm+loop"], "{p}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn plan_function(f: &IndexFn, dtype: DType) -> Result<Program, Error> {
    plan_function_for(f, dtype, Target::Cpu)
}

/// As [`plan_function`], with the loop nests planned for `target`.
pub fn plan_function_for(f: &IndexFn, dtype: DType, target: Target) -> Result<Program, Error> {
    let mut b = extract::Builder::new(dtype, target);
    let sources: Vec<Source> = (0..f.args().len()).map(Source::Input).collect();
    let out = b.add(f, &sources)?;
    Ok(Program {
        inputs: f.args().to_vec(),
        stages: b.stages,
        outputs: vec![out],
    })
}
