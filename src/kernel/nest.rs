//! Perfect nests of reductions: `op{i} op{j} … body` with nothing between
//! the levels, which a GPU team folds as one flattened range.
//!
//! Owns [`reduction_nest`]. The planner sizes teams by a nest's whole
//! length (`crate::planner::spread`) and the PTX backend folds it
//! (`crate::gpu::ptx`); both read the nest from here so they agree. Must
//! not plan or emit anything.

use super::{IVar, Loop, Reg, Stmt};
use crate::symbolic::ReduceOp;

/// The levels of the nest under a reduction `op` folding `value` over
/// `body`, outermost first (`[body]` when it is no nest): a level's body
/// is exactly one reduction of the same `op` (never an argmax or argmin)
/// whose result is the value folded, and whose bounds depend on no
/// variable of the levels around it (the levels span a box, walked in
/// row-major order). The innermost level's body computes the value
/// folded, returned with the levels.
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// use tenjin::kernel::{lower, nest::reduction_nest, Stmt};
/// let f = IndexFn::parse("f[] = sum{i}_0^9 (sum{j}_0^4 (x[i; j]))", &[("x", &[10, 5][..])])?;
/// let k = lower(&f)?;
/// let Some(Stmt::Reduce { op, value, body, .. }) = k.body.iter().find(|s| matches!(s, Stmt::Reduce { .. })) else { panic!() };
/// let (levels, _) = reduction_nest(*op, *value, body);
/// assert_eq!(levels.iter().map(|l| l.max_trips).collect::<Vec<_>>(), [10, 5]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn reduction_nest(op: ReduceOp, value: Reg, body: &Loop) -> (Vec<&Loop>, Reg) {
    let mut levels = vec![body];
    let mut value = value;
    if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
        return (levels, value);
    }
    let mut outer: Vec<IVar> = vec![body.var];
    while let [Stmt::Reduce {
        op: inner_op,
        value: inner_value,
        result,
        body: inner,
        ..
    }] = &levels[levels.len() - 1].body[..]
    {
        let free = inner
            .lower
            .iter()
            .chain(&inner.upper)
            .all(|b| outer.iter().all(|&v| b.num.coeff(v) == 0));
        if *inner_op != op || *result != value || !free {
            break;
        }
        outer.push(inner.var);
        levels.push(inner);
        value = *inner_value;
    }
    (levels, value)
}
