//! Reductions spread over a block of GPU threads when one thread per
//! output would leave the GPU idle or read memory with a large stride.
//!
//! Owns [`spread_reductions`]. A kernel whose *top-level* reduction (not
//! inside another loop; a perfect nest of one reduction counts as one
//! range of the product of its lengths, `crate::kernel::nest`) runs at
//! least [`MIN_TRIPS`] iterations gets a team of threads per output
//! ([`Kernel::threads_per_output`]): each folds a
//! strided share of the reduction and the shares combine in a fixed tree,
//! so results depend only on the sizes — bitwise the same from run to run,
//! with no atomics. Which kernels, and how large a team ([`team_size`]):
//!
//! | outputs | reduction | team |
//! | --- | --- | --- |
//! | up to [`FEW_OUTPUTS`] | any of ≥ [`MIN_TRIPS`] | enough threads to fill the GPU ([`FILL`]), 32 to [`THREADS`] |
//! | up to [`MANY_OUTPUTS`] | contiguous (a row: softmax, layer norm, cross-entropy) | the same |
//! | more, or a strided reduction among many outputs | | one thread per output |
//!
//! A row reduction among many outputs is spread because one thread per
//! row reads with the row's stride (every load of a warp a different
//! cache line), while a team reads the row in coalesced lines; a column
//! reduction among many outputs is left alone (adjacent threads already
//! read adjacent elements). A team never folds fewer than [`MIN_SHARE`]
//! iterations per thread, nor has fewer threads than a warp.
//!
//! Every top-level reduction of a spread kernel is shared out (none is
//! run by all the threads over again). Its sums are `wide` (shares and
//! tree in f64), which holds the accuracy of the CPU's blocked sums. The
//! thresholds are a reasoned first choice, checked on an H100 by the
//! workloads they sped up (`BENCHMARKS.md`, "GPU speed"), not tuned by a
//! sweep. Must not emit code.

use crate::kernel::nest::reduction_nest;
use crate::kernel::{Expr, IVar, Kernel, Stmt};
use crate::symbolic::ReduceOp;

/// The most threads per output (one block).
pub(crate) const THREADS: u32 = 256;
/// The fewest threads of a team: a warp (a smaller block idles lanes).
pub(crate) const MIN_THREADS: u32 = 32;
/// Threads a launch needs to fill a large GPU: an H100 holds
/// 132 × 2048 ≈ 2¹⁸ resident threads.
pub(crate) const FILL: usize = 1 << 18;
/// Up to this many outputs, any long reduction is spread.
pub(crate) const FEW_OUTPUTS: usize = 2_048;
/// Up to this many outputs, a contiguous (row) reduction is spread.
pub(crate) const MANY_OUTPUTS: usize = 1 << 17;
/// The shortest top-level reduction worth spreading.
pub(crate) const MIN_TRIPS: u64 = 256;
/// The fewest iterations each thread of a team folds.
pub(crate) const MIN_SHARE: u64 = 8;
/// Elements of a row per thread of a row team, at most (while the team
/// has at most [`THREADS`]).
pub(crate) const ROW_SHARE: u64 = 16;
/// The fewest threads of a row team. Measured on an H100 (`BENCHMARKS.md`,
/// "GPU speed"): rows of 1024 ran fastest with 64 threads (16 elements
/// each), rows of 768 with 64 (not 32), rows of 4096 with 256.
pub(crate) const ROW_TEAM: u32 = 64;

/// `k` with its top-level reductions spread over a team of threads per
/// output where that pays (see the module documentation).
///
/// ```
/// use tenjin::planner::passes::{loop_kernel, LoopRole};
/// use tenjin::planner::route::Target;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[] = sum{i}_0^999999 x[i]", &[("x", &[1_000_000][..])])?;
/// let gpu = loop_kernel(&f, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 256);
/// let cpu = loop_kernel(&f, tenjin::DType::F32, Target::Cpu, LoopRole::Whole)?;
/// assert_eq!(cpu.threads_per_output, 1);
/// // Rows of a [4096, 4096] matrix: 64 threads a row fill the GPU.
/// let rows = IndexFn::parse("f[i] = sum{j}_0^4095 x[i; j]", &[("x", &[4096, 4096][..])])?;
/// let gpu = loop_kernel(&rows, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 64);
/// // All of it: one flattened range, 256 threads.
/// let all = IndexFn::parse("f[] = sum{i}_0^63 (sum{j}_0^63 (x[i; j]))", &[("x", &[64, 64][..])])?;
/// let gpu = loop_kernel(&all, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 256);
/// // A softmax over many rows of 1024: a team of 64 per row computes the
/// // row's statistics once, then deals out its elements.
/// let softmax = IndexFn::parse(
///     "f[i; j] = exp (x[i; j] - log sum{k}_0^1023 (exp (x[i; k])))",
///     &[("x", &[4096, 1024][..])],
/// )?;
/// let gpu = loop_kernel(&softmax, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!((gpu.threads_per_output, gpu.shared_loops, gpu.teams()), (64, 1, 4096));
/// // Its columns: adjacent threads read adjacent elements already.
/// let cols = IndexFn::parse("f[j] = sum{i}_0^4095 x[i; j]", &[("x", &[4096, 4096][..])])?;
/// let gpu = loop_kernel(&cols, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 1);
/// // A cross-entropy's gradient over rows of 50257 classes (no reduction
/// // of its own): a thread per element, which an H200 ran faster than a
/// // team per row (`BENCHMARKS.md`, "GPU speed").
/// let grad = IndexFn::parse(
///     "f[i; j] = exp (x[i; j] - m[i]) / s[i]",
///     &[("x", &[8192, 50257][..]), ("m", &[8192][..]), ("s", &[8192][..])],
/// )?;
/// let gpu = loop_kernel(&grad, tenjin::DType::F32, Target::Gpu, LoopRole::Whole)?;
/// assert_eq!(gpu.threads_per_output, 1);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub(crate) fn spread_reductions(mut k: Kernel) -> Kernel {
    if let Some(team) = row_team(&mut k) {
        k.threads_per_output = team;
        k.shared_loops = 1;
        let rows = k.out_shape.len() - 1;
        widen_sums(&mut k.body, rows);
        return k;
    }
    let outputs = k.out_len();
    if outputs == 0 || outputs > MANY_OUTPUTS {
        return k;
    }
    // A perfect nest (a sum over rows and columns) is folded by the team
    // as one flattened range: its length is the product of its levels'.
    let longest = top_level(&mut k.body, usize::MAX)
        .iter()
        .filter_map(|s| nest_length(s))
        .filter(|&(trips, _)| trips >= MIN_TRIPS)
        .map(|(trips, inner)| (trips, contiguous(inner.var, &inner.body)))
        .max();
    let Some((trips, contiguous)) = longest else {
        return k;
    };
    if outputs > FEW_OUTPUTS && !contiguous {
        return k;
    }
    let team = team_size(outputs, trips);
    if team == 1 {
        return k;
    }
    k.threads_per_output = team;
    widen_sums(&mut k.body, usize::MAX);
    k
}

/// Every top-level sum of a spread kernel (see [`top_level`]) is shared
/// out; f32 ones keep their shares in f64.
fn widen_sums(body: &mut [Stmt], loops: usize) {
    for s in top_level(body, loops) {
        if let Stmt::Reduce { op, wide, .. } = s {
            *wide |= *op == ReduceOp::Sum;
        }
    }
}

/// The team of a kernel that computes reductions once per row (placed
/// above its innermost output loop: the planner left a softmax's or a
/// layer norm's statistics inline, `crate::planner::extract`): a team per
/// row folds them and then deals out the row's elements. Sized as a team
/// per output for the longer of the reductions and the row, but with at
/// least one thread per [`ROW_SHARE`] elements of the row (the PTX
/// backend holds the row in shared memory, which bounds the blocks an SM
/// runs: their threads must be many), and at least [`ROW_TEAM`].
/// `None` when no reduction sits above the innermost output loop.
fn row_team(k: &mut Kernel) -> Option<u32> {
    let n = k.out_shape.len();
    if n < 2 {
        return None;
    }
    let row = k.out_shape[n - 1] as u64;
    let rows = k.teams_of(1);
    let trips = top_level(&mut k.body, n - 1)
        .iter()
        .filter_map(|s| nest_length(s).map(|(trips, _)| trips))
        .max()?;
    let per_row = (row / ROW_SHARE).max(1);
    let per_row = 1u64 << (63 - per_row.leading_zeros());
    let team = team_size(rows, trips.max(row)) as u64;
    Some(team.max(per_row).clamp(ROW_TEAM as u64, THREADS as u64) as u32)
}

/// Threads per output for `outputs` reductions of `trips` iterations:
/// enough for [`FILL`] threads in all, within [`MIN_THREADS`] ..=
/// [`THREADS`], each folding at least [`MIN_SHARE`] iterations; 1 where
/// no such team exists.
pub(crate) fn team_size(outputs: usize, trips: u64) -> u32 {
    let wanted = FILL
        .div_ceil(outputs.max(1))
        .next_power_of_two()
        .clamp(MIN_THREADS as usize, THREADS as usize) as u64;
    let most = trips / MIN_SHARE;
    if most < MIN_THREADS as u64 {
        return 1;
    }
    // The largest power of two within both.
    let most = 1u64 << (63 - most.leading_zeros());
    wanted.min(most) as u32
}

/// The iterations of a reduction statement (a perfect nest counted as one
/// range, the product of its levels' lengths) and its innermost level.
fn nest_length(s: &Stmt) -> Option<(u64, &crate::kernel::Loop)> {
    let Stmt::Reduce {
        op, value, body, ..
    } = s
    else {
        return None;
    };
    let (levels, _) = reduction_nest(*op, *value, body);
    let trips = levels
        .iter()
        .fold(1u64, |t, l| t.saturating_mul(l.max_trips));
    Some((trips, levels[levels.len() - 1]))
}

/// Whether a load in `body` steps by one element per iteration of `var`.
fn contiguous(var: IVar, body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Let(_, Expr::Load { offset, .. }) => offset.coeff(var).abs() == 1,
        Stmt::If {
            then, otherwise, ..
        } => contiguous(var, then) || contiguous(var, otherwise),
        Stmt::Reduce { body, .. } | Stmt::For(body) => contiguous(var, &body.body),
        _ => false,
    })
}

/// The statements in the bodies of the outermost `loops` output loops
/// (and around them) and of the branches in them, not those inside a
/// reduction's loop (`usize::MAX`: those that run once per output
/// element, in every output loop).
fn top_level(body: &mut [Stmt], loops: usize) -> Vec<&mut Stmt> {
    let mut found = Vec::new();
    let mut stack: Vec<(&mut [Stmt], usize)> = vec![(body, 0)];
    while let Some((stmts, depth)) = stack.pop() {
        for s in stmts {
            match s {
                Stmt::For(l) => {
                    if depth < loops {
                        stack.push((&mut l.body, depth + 1));
                    }
                }
                Stmt::If {
                    then, otherwise, ..
                } => {
                    stack.push((then, depth));
                    stack.push((otherwise, depth));
                }
                other => found.push(other),
            }
        }
    }
    found
}
