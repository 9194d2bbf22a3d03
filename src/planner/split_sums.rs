//! Long sums with few outputs split into two stages on the GPU: block
//! partial sums computed in parallel, then a fixed-order combine.
//!
//! Owns [`split_long_sum`]. A GPU kernel computes one output per team of
//! threads (`super::spread`): a scalar loss over 16M values would be one
//! block of 256 threads on one multiprocessor, the other 131 idle. A stage
//! whose root is a sum over a constant range of at least [`SPLIT_MIN`]
//! terms (or such a sum under functions and constant factors: a mean, the
//! log of a sum), with at most [`SPLIT_MAX_OUTPUTS`] outputs, becomes
//!
//! ```text
//! p[α; b] = sum{i}_(max [lo; C·(b + b₀)])^(min [hi; C·(b + b₀) + C − 1]) body     b = 0 .. P − 1
//! f[α]    = sum{b}_0^(P − 1) p[α; b]          (under the same functions and factors)
//! ```
//!
//! with `C` = [`CHUNK`] and `b₀ = ⌊lo / C⌋`: the partial sums run as a
//! stage of `P` times as many outputs (each a team of its own), then a
//! second stage adds them in index order. Blocks are aligned to multiples
//! of `C` of the summation index, so the order of additions depends only on
//! the sizes: results are bitwise the same from run to run, with no
//! atomics. Both stages are f64-accumulated sums (`wide`, `super::spread`),
//! the partials rounded once to the element type, which holds the accuracy
//! of the CPU's blocked sums. Must not emit code.

use crate::symbolic::affine::{Affine, RatAffine, VarId};
use crate::symbolic::expr::{BinaryOp, Graph, Node, NodeId, Range, ReduceOp, UnaryOp};
use crate::symbolic::{ArgDecl, IndexFn};

/// The shortest sum that is split.
pub(crate) const SPLIT_MIN: u64 = 1 << 16;
/// Terms per partial sum.
pub(crate) const CHUNK: i64 = 8192;
/// The most outputs a split stage may have (beyond it, a team per output
/// fills the GPU already: `super::spread::FILL` threads in teams of 256).
pub(crate) const SPLIT_MAX_OUTPUTS: usize = 1024;

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
/// # Ok::<(), tenjin::Error>(())
/// ```
pub(crate) fn split_long_sum(f: &IndexFn) -> Option<(IndexFn, IndexFn)> {
    let outputs: usize = f.out_shape.iter().product();
    if outputs > SPLIT_MAX_OUTPUTS {
        return None;
    }
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
    let constant = |bounds: &[RatAffine]| match bounds {
        [b] => b
            .as_integer()
            .filter(|a| a.is_constant())
            .map(|a| a.constant),
        _ => None,
    };
    let (lo, hi) = (constant(&range.lower)?, constant(&range.upper)?);
    if hi < lo || ((hi - lo) as u64) < SPLIT_MIN - 1 {
        return None;
    }
    let first = lo.div_euclid(CHUNK);
    let parts = hi.div_euclid(CHUNK) - first + 1;
    let b = VarId(f.var_names.len() as u32);
    let mut var_names = f.var_names.clone();
    var_names.push(fresh_name(&f.var_names, "split"));
    // C·(b + b₀) and C·(b + b₀) + C − 1.
    let start = Affine::var(b)
        .scale(CHUNK)
        .ok()?
        .add_const(CHUNK * first)
        .ok()?;
    let end = start.add_const(CHUNK - 1).ok()?;
    let mut graph = f.graph.clone();
    let chunk = Range {
        lower: vec![RatAffine::constant(lo), RatAffine::integer(start)],
        upper: vec![RatAffine::constant(hi), RatAffine::integer(end)],
    };
    let root = graph.reduce(ReduceOp::Sum, var, chunk, body);
    let mut out_vars = f.out_vars.clone();
    out_vars.push(b);
    let mut out_shape = f.out_shape.clone();
    out_shape.push(parts as usize);
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
