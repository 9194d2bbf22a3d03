//! Long sums split into two stages on the GPU: partial sums over blocks
//! of the summation range computed in parallel, then a fixed-order
//! combine.
//!
//! Owns [`split_long_sum`]. A GPU kernel computes one output per thread,
//! or per team of threads (`super::spread`). Two kinds of sums leave the
//! GPU idle that way:
//!
//! | kind | example | split when | block of the outer summation index |
//! | --- | --- | --- | --- |
//! | few outputs, long | a scalar loss over 16M values: one team on one multiprocessor | at most [`SPLIT_MAX_OUTPUTS`] outputs, at least [`SPLIT_MIN`] terms | about [`CHUNK`] terms a block |
//! | a column sum | a bias gradient `Σ_{b,t} dy[b; t; j]`: 3,072 threads of 8,192 terms each, no team (a team would read with a stride) | at most [`COLUMN_MAX_OUTPUTS`] outputs, at least [`COLUMN_MIN`] terms, the innermost summation index not the last of any read | enough blocks for [`super::spread::FILL`] threads |
//!
//! The sum may be a perfect nest of sums over constant ranges (rows and
//! columns), and sit under functions and constant factors (a mean, the
//! log of a sum). It becomes
//!
//! ```text
//! p[b; α] = sum{i}_(max [lo; C·(b + b₀)])^(min [hi; C·(b + b₀) + C − 1]) (inner sums and body)    b = 0 .. P − 1
//! f[α]    = sum{b}_0^(P − 1) p[b; α]          (under the same functions and factors)
//! ```
//!
//! with `C` the block, `b₀ = ⌊lo / C⌋`: the partial sums are a stage of
//! `P` times as many outputs (the block index first, so adjacent threads
//! read adjacent columns), then a second stage adds them in index order.
//! Blocks are aligned to multiples of `C` of the summation index, so the
//! order of additions depends only on the sizes: results are bitwise the
//! same from run to run, with no atomics. Both stages accumulate in f64
//! (`wide` sums, `super::blocked_sums` and `super::spread`), the partials
//! rounded once to the element type, which holds the accuracy of the
//! CPU's blocked sums. Must not emit code.

use super::spread::FILL;
use crate::symbolic::affine::{Affine, RatAffine, VarId};
use crate::symbolic::expr::{BinaryOp, Graph, Node, NodeId, Range, ReduceOp, UnaryOp};
use crate::symbolic::{ArgDecl, IndexFn};

/// The shortest sum with few outputs that is split.
pub(crate) const SPLIT_MIN: u64 = 1 << 16;
/// Terms per partial sum of a sum with few outputs.
pub(crate) const CHUNK: u64 = 8192;
/// The most outputs a long sum may have to be split (beyond it, a team
/// per output fills the GPU already: `FILL` threads in teams of 256).
pub(crate) const SPLIT_MAX_OUTPUTS: usize = 1024;
/// The most outputs of a column sum that is split (beyond it, one thread
/// per output fills the GPU well enough).
pub(crate) const COLUMN_MAX_OUTPUTS: usize = FILL / 8;
/// The shortest column sum that is split.
pub(crate) const COLUMN_MIN: u64 = 1024;
/// The fewest terms of a column sum's block (a thread's serial work).
pub(crate) const COLUMN_CHUNK_MIN: u64 = 16;

/// Whether `f` is a sum [`split_long_sum`] spreads over blocks (its split
/// may still be refused by the bounds check).
pub(crate) fn is_long_sum(f: &IndexFn) -> bool {
    long_sum(f).is_some()
}

/// A long sum as [`split_long_sum`] splits it: the functions and factors
/// around it, its index, body and constant range, and the block.
struct LongSum {
    wrappers: Vec<Wrapper>,
    var: VarId,
    body: NodeId,
    lo: i64,
    hi: i64,
    chunk: i64,
}

fn long_sum(f: &IndexFn) -> Option<LongSum> {
    let outputs: usize = f.out_shape.iter().product();
    let (wrappers, sum) = peel(&f.graph, f.root)?;
    let Node::Reduce {
        op: ReduceOp::Sum,
        var,
        range,
        body,
    } = f.graph.node(sum).clone()
    else {
        return None;
    };
    let (lo, hi) = constant_range(&range)?;
    let outer = (hi - lo) as u64 + 1;
    // The perfect nest of constant sums inside: its length and its
    // innermost index.
    let (mut inner, mut innermost, mut n) = (1u64, var, body);
    while let Node::Reduce {
        op: ReduceOp::Sum,
        var,
        range,
        body,
    } = f.graph.node(n)
    {
        let Some((a, b)) = constant_range(range) else {
            break;
        };
        inner = inner.saturating_mul((b - a) as u64 + 1);
        (innermost, n) = (*var, *body);
    }
    let total = outer.saturating_mul(inner);
    let chunk = if outputs <= SPLIT_MAX_OUTPUTS && total >= SPLIT_MIN {
        (CHUNK / inner).max(1)
    } else if outputs <= COLUMN_MAX_OUTPUTS
        && total >= COLUMN_MIN
        && !read_along(&f.graph, body, innermost)
    {
        let parts = FILL.div_ceil(outputs.max(1)) as u64;
        outer
            .div_ceil(parts)
            .max(COLUMN_CHUNK_MIN.div_ceil(inner))
            .max(1)
    } else {
        return None;
    };
    let chunk = i64::try_from(chunk).ok()?;
    if chunk >= outer as i64 {
        return None;
    }
    Some(LongSum {
        wrappers,
        var,
        body,
        lo,
        hi,
        chunk,
    })
}

/// The partial sums and the combine of `f` (see the module documentation),
/// or `None` when `f` is not a long sum with few outputs. The combine
/// reads the partials as its one argument.
///
/// ```
/// # use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[] = sum{i}_0^999999 (x[i] * x[i])", &[("x", &[1_000_000][..])])?;
/// let p = tenjin::planner::plan_function_for(&f, tenjin::DType::F32, tenjin::planner::Target::Gpu)?;
/// let shapes: Vec<_> = p.stages.iter().map(|s| s.f.output_shape().to_vec()).collect();
/// assert_eq!(shapes, [vec![123], vec![]], "{p}"); // ⌈10⁶ / 8192⌉ partial sums, then their sum
/// let cpu = tenjin::planner::plan_function(&f, tenjin::DType::F32)?;
/// assert_eq!(cpu.stages.len(), 1);
/// // A mean: the combine scales the sum of the partial sums.
/// let mean = IndexFn::parse("f[] = sum{i}_0^999999 x[i] * 0.000001", &[("x", &[1_000_000][..])])?;
/// let p = tenjin::planner::plan_function_for(&mean, tenjin::DType::F32, tenjin::planner::Target::Gpu)?;
/// assert_eq!(p.stages.len(), 2, "{p}");
/// // A bias gradient: a column sum over 8 × 1024 rows, blocks of 12 rows.
/// let db = IndexFn::parse("f[j] = sum{t}_0^1023 (sum{b}_0^7 (dy[b; t; j]))", &[("dy", &[8, 1024, 3072][..])])?;
/// let p = tenjin::planner::plan_function_for(&db, tenjin::DType::F32, tenjin::planner::Target::Gpu)?;
/// assert_eq!(p.stages[0].f.output_shape(), &[86, 3072], "{p}");
/// # Ok::<(), tenjin::Error>(())
/// ```
pub(crate) fn split_long_sum(f: &IndexFn) -> Option<(IndexFn, IndexFn)> {
    let LongSum {
        wrappers,
        var,
        body,
        lo,
        hi,
        chunk,
    } = long_sum(f)?;
    let (first, parts) = (
        lo.div_euclid(chunk),
        hi.div_euclid(chunk) - lo.div_euclid(chunk) + 1,
    );
    let b = VarId(f.var_names.len() as u32);
    let mut var_names = f.var_names.clone();
    var_names.push(fresh_name(&f.var_names, "split"));
    // C·(b + b₀) and C·(b + b₀) + C − 1.
    let start = Affine::var(b)
        .scale(chunk)
        .ok()?
        .add_const(chunk.checked_mul(first)?)
        .ok()?;
    let end = start.add_const(chunk - 1).ok()?;
    let mut graph = f.graph.clone();
    let block = Range {
        lower: vec![RatAffine::constant(lo), RatAffine::integer(start)],
        upper: vec![RatAffine::constant(hi), RatAffine::integer(end)],
    };
    let root = graph.reduce(ReduceOp::Sum, var, block, body);
    // The block index first: adjacent threads, adjacent outputs.
    let out_vars: Vec<VarId> = std::iter::once(b)
        .chain(f.out_vars.iter().copied())
        .collect();
    let out_shape: Vec<usize> = std::iter::once(parts as usize)
        .chain(f.out_shape.iter().copied())
        .collect();
    let partials = IndexFn {
        name: format!("{}_partial", f.name),
        out_vars: out_vars.clone(),
        out_shape: out_shape.clone(),
        args: f.args.clone(),
        var_names: var_names.clone(),
        graph,
        root,
    };
    let mut graph = Graph::new();
    let index = out_vars.iter().map(|&v| Affine::var(v)).collect();
    let read = graph.access(0, index);
    let mut root = graph.reduce(ReduceOp::Sum, b, Range::constant(0, parts - 1), read);
    for w in wrappers.iter().rev() {
        root = match *w {
            Wrapper::Unary(op) => graph.unary(op, root),
            Wrapper::Left(op, c) => {
                let c = graph.constant(c);
                graph.binary(op, c, root)
            }
            Wrapper::Right(op, c) => {
                let c = graph.constant(c);
                graph.binary(op, root, c)
            }
        };
    }
    let combine = IndexFn {
        name: f.name.clone(),
        out_vars: f.out_vars.clone(),
        out_shape: f.out_shape.clone(),
        args: vec![ArgDecl {
            name: "p".into(),
            shape: out_shape,
        }],
        var_names,
        graph,
        root,
    };
    (partials.check_bounds().is_ok() && combine.check_bounds().is_ok())
        .then_some((partials, combine))
}

/// `(lo, hi)` of a range with one constant bound each way.
fn constant_range(range: &Range) -> Option<(i64, i64)> {
    let constant = |bounds: &[RatAffine]| match bounds {
        [b] => b
            .as_integer()
            .filter(|a| a.is_constant())
            .map(|a| a.constant),
        _ => None,
    };
    let (lo, hi) = (constant(&range.lower)?, constant(&range.upper)?);
    (lo <= hi).then_some((lo, hi))
}

/// Whether some read under `n` steps along its last dimension with `var`
/// (a row read along the row: a team reads it in coalesced lines).
fn read_along(g: &Graph, n: NodeId, var: VarId) -> bool {
    g.reachable(n).into_iter().any(|m| match g.node(m) {
        Node::Access { index, .. } => index.last().is_some_and(|a| a.coeff(var).abs() == 1),
        _ => false,
    })
}

/// A function or constant factor around the split sum, rebuilt around
/// the combine.
#[derive(Clone, Copy)]
enum Wrapper {
    Unary(UnaryOp),
    /// `c op sum`.
    Left(BinaryOp, f64),
    /// `sum op c`.
    Right(BinaryOp, f64),
}

/// The functions and constant factors from `n` down to a sum (outermost
/// first), and the sum; `None` when `n` is anything else.
fn peel(g: &Graph, n: NodeId) -> Option<(Vec<Wrapper>, NodeId)> {
    let (w, inner) = match *g.node(n) {
        Node::Reduce {
            op: ReduceOp::Sum, ..
        } => return Some((Vec::new(), n)),
        Node::Unary(op, a) => (Wrapper::Unary(op), a),
        Node::Binary(op, a, b) => match (g.const_value(a), g.const_value(b)) {
            (Some(c), None) => (Wrapper::Left(op, c), b),
            (None, Some(c)) => (Wrapper::Right(op, c), a),
            _ => return None,
        },
        _ => return None,
    };
    let (mut ws, sum) = peel(g, inner)?;
    ws.insert(0, w);
    Some((ws, sum))
}

/// `base`, or `base` with a number, not among `taken`.
fn fresh_name(taken: &[String], base: &str) -> String {
    (0..)
        .map(|k| {
            if k == 0 {
                base.to_string()
            } else {
                format!("{base}{k}")
            }
        })
        .find(|n| !taken.contains(n))
        .unwrap_or_default()
}
