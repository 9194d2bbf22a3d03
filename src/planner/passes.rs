//! The planner's passes, in order, declared in one place.
//!
//! **Stages of a function** (`super::extract::Builder`, recursively for
//! every stage it cuts):
//!
//! | # | pass | where |
//! | --- | --- | --- |
//! | 1 | a convolution-shaped contraction rewritten over constant ranges, its padded or windowed reads cut as stages; (CPU) a strided one it refuses split by the residue of its output index, a stage per phase (each planned from pass 1), read back by strided copies | `window`, `phases` |
//! | 2 | normalise: invariant factors, guards and terms out of sums, sum nests in elimination order, masks factored | `normalize` |
//! | 3 | cut heavy subexpressions into stages and share equal ones (each cut planned from pass 1) | `extract`, `cut` |
//! | 4 | cancel equal terms, canonical argument order | `normalize::combine`, `extract::canonical` |
//! | 5 | route: GEMM, GEMM then an epilogue, or a loop nest | `route` |
//!
//! **A loop nest for a target** ([`LOOP_PASSES`], run by [`loop_kernel`]):
//! the table below is the whole difference between the CPU's and the GPU's
//! loop kernels. f64 kernels on every target compute exactly what the
//! reference interpreter computes (same operations, same order), so they
//! are lowered, and on the CPU their guarded zeros left out of sums, their
//! output loops split by residue and their transposed loops tiled (none
//! changes a result bit), and nothing else.
//!
//! Must not emit or run code.

use super::{blocked_sums, guard_bounds, reorder, residues, spread, tile, vectorize};
use crate::kernel::backend::Target;
use crate::kernel::Kernel;
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// One pass over a stage's function or its lowered loop nest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopPass {
    /// Nested sums interchanged so the innermost loop reads contiguous
    /// memory (`reorder`; on the function, before lowering).
    InterchangeSums,
    /// The function lowered to a loop nest (`crate::kernel::lower`).
    Lower,
    /// Linear guards of a sum's terms (zero padding) folded into the sum's
    /// bounds (`guard_bounds`).
    GuardsToBounds,
    /// Output loops whose sums divide by their index split by residue,
    /// sliding sums shifted to constant ranges, sums of one point or none
    /// collapsed (`residues`).
    SplitResidues,
    /// The two innermost output loops walked in blocks when the
    /// inner one reads across cache lines (`tile`): transposed copies.
    TileTransposes,
    /// Vector loops marked and boundary iterations peeled (`vectorize`,
    /// `peel`).
    MarkVectors,
    /// Long f32 sums split into blocks added in f64 (`blocked_sums`).
    BlockLongSums,
    /// Few outputs with long reductions: a block of GPU threads per
    /// output (`spread`).
    SpreadReductions,
}

/// Which part of a stage a loop nest computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopRole {
    /// The whole stage.
    Whole,
    /// The element-wise epilogue after a GEMM (it reads the GEMM's output
    /// at the output index only: no sums to interchange).
    Epilogue,
}

use LoopPass::*;

/// The loop passes per target, element type and role, in order.
pub const LOOP_PASSES: &[(Target, DType, LoopRole, &[LoopPass])] = &[
    (
        Target::Cpu,
        DType::F32,
        LoopRole::Whole,
        &[
            InterchangeSums,
            Lower,
            GuardsToBounds,
            SplitResidues,
            TileTransposes,
            MarkVectors,
            BlockLongSums,
        ],
    ),
    // f64: the interpreter's operations in its order; residue splits and
    // tiles only reorder which output elements are computed first, and the
    // terms a guard leaves out are zeros (adding them changes no sum).
    (
        Target::Cpu,
        DType::F64,
        LoopRole::Whole,
        &[Lower, GuardsToBounds, SplitResidues, TileTransposes],
    ),
    (
        Target::Cpu,
        DType::F32,
        LoopRole::Epilogue,
        &[Lower, MarkVectors, BlockLongSums],
    ),
    // One GPU thread per output element (a block of them for few outputs
    // with long reductions): no vectors, no peeling, no interchange.
    (
        Target::Gpu,
        DType::F32,
        LoopRole::Whole,
        &[Lower, BlockLongSums, SpreadReductions],
    ),
    (
        Target::Gpu,
        DType::F64,
        LoopRole::Whole,
        &[Lower, SpreadReductions],
    ),
    (
        Target::Gpu,
        DType::F32,
        LoopRole::Epilogue,
        &[Lower, BlockLongSums],
    ),
];

/// The passes for `target`, `dtype` and `role` (just [`Lower`] where the
/// table has no row: f64 and integer kernels).
pub fn loop_passes(target: Target, dtype: DType, role: LoopRole) -> &'static [LoopPass] {
    LOOP_PASSES
        .iter()
        .find(|(t, d, r, _)| (*t, *d, *r) == (target, dtype, role))
        .map_or(&[Lower], |row| row.3)
}

/// The loop nest computing `f` in `dtype` on `target`: [`loop_passes`]
/// applied in order.
///
/// ```
/// use tenjin::planner::passes::{loop_kernel, LoopRole};
/// use tenjin::planner::route::Target;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = exp (x[i])", &[("x", &[64][..])])?;
/// let cpu = loop_kernel(&f, tenjin::DType::F32, Target::Cpu, LoopRole::Whole)?;
/// let gpu = loop_kernel(&f, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert!(cpu.to_string().contains("vector"), "{cpu}");
/// assert!(!gpu.to_string().contains("vector"), "{gpu}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn loop_kernel(
    f: &IndexFn,
    dtype: DType,
    target: Target,
    role: LoopRole,
) -> Result<Kernel, Error> {
    let mut source: Option<IndexFn> = None;
    let mut kernel: Option<Kernel> = None;
    for pass in loop_passes(target, dtype, role) {
        match pass {
            InterchangeSums => {
                source = Some(reorder::interchange_sums(source.as_ref().unwrap_or(f)))
            }
            Lower => kernel = Some(crate::kernel::lower(source.as_ref().unwrap_or(f))?),
            GuardsToBounds => kernel = kernel.map(guard_bounds::guards_to_bounds),
            SplitResidues => kernel = kernel.map(residues::split_residues),
            TileTransposes => kernel = kernel.map(tile::tile_transposes),
            MarkVectors => kernel = kernel.map(|k| vectorize::plan_vectors(k, dtype)),
            BlockLongSums => {
                kernel = kernel.map(|k| blocked_sums::block_long_sums(k, target == Target::Cpu))
            }
            SpreadReductions => kernel = kernel.map(spread::spread_reductions),
        }
    }
    kernel.ok_or_else(|| Error::Invalid {
        function: f.name().to_string(),
        message: "internal: the loop passes do not lower the function".into(),
    })
}
