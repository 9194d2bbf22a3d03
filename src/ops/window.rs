//! Views at run-time positions: an op reads a view through the smallest
//! block of its base that holds it, taken as a *window* of the base's
//! memory, so the op's plan and kernels do not depend on where the view
//! starts (issue 28: a loop that walks a tensor with `narrow` must not
//! compile per position).
//!
//! Owns [`windowed`], which `apply` runs on every op's arguments before
//! it keys the plan, and the window's recorded node. A block is a run of
//! positions `lo..=hi` along one base dimension `k`, at fixed positions
//! along the dimensions before `k`, with every dimension after it whole:
//! contiguous memory, so the window is a storage sharing the base's
//! memory at an element offset (`Storage::window`), read in place, and
//! the view is re-expressed over it with the offset of `lo` taken out of
//! its map.
//!
//! When the base takes a gradient, the window is a recorded node: an
//! alias (the identity on the block's shape, planned once per shape)
//! whose node carries its placement (`trace::Placement`), so the backward
//! adds its gradient into the block of the base's gradient, in place when
//! it can, and never writes a base-sized gradient per window.
//!
//! Views that move along a dimension after the first one they span
//! (`x.narrow(1, t, 4)`, `x[:, t]` or a `chunk` of a `[B, T, D]` tensor)
//! do not form one block. Their elements lie in a *span* ([`span_of`]):
//! the base's elements from the first the view reaches to the last, a
//! window of one dimension whose length does not depend on the position,
//! over which the view is re-expressed with one row-major coefficient per
//! view dimension.
//! - When the base takes no gradient (an input batch read one time step
//!   at a time), the op reads the view through the span in place.
//! - When it takes one, and the view's elements lie apart and nest
//!   ([`placeable`]), the view is copied out of the span (a kernel planned
//!   once for every position) and the copy is the window's recorded node,
//!   whose placement is strided (`trace::Strided`): the backward adds the
//!   gradient, the view's size, at the view's elements of the base's
//!   (`Storage::add_strided`: run by run on the CPU, one launch on a GPU).
//!   Read in place instead, the op's gradient would be the whole span,
//!   each element solved through bounds that divide by the row length
//!   (measured: 2.5× the step of a plan per position).
//! - Otherwise (views whose elements overlap, such as an `unfold`) the
//!   view keeps its offsets in the plan.
//!
//! Graphs of gradients and forward mode go through [`place_gradient`]
//! (pads, and for a strided window reshapes, narrows and flips) and
//! [`window_tangent`], as tensor ops. This module must not know which
//! view made the map: it reads only the map.

use super::formula;
use crate::alloc::Device;
use crate::runtime::op_plan::{self as plan, OpPlan};
use crate::runtime::Storage;
use crate::symbolic::compose::AffineMap;
use crate::symbolic::index_fn::row_major_strides;
use crate::symbolic::IndexFn;
use crate::tensor::Tensor;
use crate::trace::{self, Node, Origin, Placement, Strided};
use crate::Error;
use std::fmt::Write;
use std::sync::Arc;

/// The name windows are recorded under.
const WINDOW_OP: &str = "window";

/// Where a view's elements lie in its base: the block and the view's map
/// into it.
#[derive(Debug, PartialEq)]
struct Block {
    /// The block's first element in the base's elements.
    start: usize,
    /// The block's shape: the run of positions along dimension `k`, then
    /// the dimensions after it.
    shape: Vec<usize>,
    /// The view as read from the block.
    map: AffineMap,
}

/// The block of a base of `base_shape` that a view of `view_shape`
/// through `map` reads, when it is not the whole base.
fn block_of(view_shape: &[usize], base_shape: &[usize], map: &AffineMap) -> Option<Block> {
    if base_shape.is_empty() || view_shape.contains(&0) || map.base_rank() != base_shape.len() {
        return None;
    }
    // The least and greatest position a view element reaches along `d`.
    let extent = |d: usize| -> (i64, i64) {
        let (mut lo, mut hi) = (map.offsets[d], map.offsets[d]);
        for (&a, &n) in map.coeffs[d].iter().zip(view_shape) {
            let reach = a * (n as i64 - 1);
            lo += reach.min(0);
            hi += reach.max(0);
        }
        (lo, hi)
    };
    let rank = base_shape.len();
    let mut k = 0;
    while k + 1 < rank && extent(k).0 == extent(k).1 {
        k += 1;
    }
    let (lo, hi) = extent(k);
    // The whole base (checked before anything is allocated: most views,
    // transposes and broadcasts, read it all).
    let whole = base_shape[..k].iter().all(|&n| n == 1);
    if whole && lo == 0 && hi + 1 == base_shape[k] as i64 {
        return None;
    }
    let strides = row_major_strides(base_shape)?;
    let mut start = 0usize;
    for (d, &stride) in strides.iter().enumerate().take(k + 1) {
        let (lo, hi) = extent(d);
        if lo < 0 || hi as usize >= base_shape[d] {
            return None;
        }
        start += lo as usize * stride as usize;
    }
    let rows = (hi - lo + 1) as usize;
    let mut map = AffineMap {
        coeffs: map.coeffs[k..].to_vec(),
        offsets: map.offsets[k..].to_vec(),
    };
    map.offsets[0] -= lo;
    Some(Block {
        start,
        shape: [&[rows][..], &base_shape[k + 1..]].concat(),
        map,
    })
}

/// The span of a base of `base_shape` that a view of `view_shape` through
/// `map` reads, as a block of one dimension, when it is not the whole
/// base: the elements from the least to the greatest the view reaches,
/// the view read from them through one row-major coefficient per view
/// dimension. For views whose elements do not form a block of rows
/// ([`block_of`]): `x.narrow(1, t, n)` or `x[:, t]` of a `[B, T, D]`
/// tensor reach `(B - 1)·T·D + n·D` elements from `t·D` on, a length that
/// does not depend on `t`.
fn span_of(view_shape: &[usize], base_shape: &[usize], map: &AffineMap) -> Option<Block> {
    if view_shape.contains(&0) || map.base_rank() != base_shape.len() {
        return None;
    }
    // View dimension `j`'s row-major coefficient, and the offset: sums over
    // the base's dimensions, innermost first (nothing is allocated before
    // the whole base is ruled out: most views, transposes and broadcasts,
    // read it all).
    let flat = |of: &dyn Fn(usize) -> i64| -> Option<i64> {
        let (mut sum, mut stride) = (0i64, 1i64);
        for d in (0..base_shape.len()).rev() {
            sum = sum.checked_add(of(d).checked_mul(stride)?)?;
            stride = stride.checked_mul(i64::try_from(base_shape[d]).ok()?)?;
        }
        Some(sum)
    };
    let offset = flat(&|d| map.offsets[d])?;
    let (mut lo, mut hi) = (offset, offset);
    for (j, &n) in view_shape.iter().enumerate() {
        let reach = flat(&|d| map.coeffs[d][j])?.checked_mul(n as i64 - 1)?;
        lo = lo.checked_add(reach.min(0))?;
        hi = hi.checked_add(reach.max(0))?;
    }
    let len = base_shape.iter().product::<usize>() as i64;
    if lo < 0 || hi >= len || (lo == 0 && hi + 1 == len) {
        return None;
    }
    let coeffs = (0..view_shape.len())
        .map(|j| flat(&|d| map.coeffs[d][j]))
        .collect::<Option<Vec<i64>>>()?;
    Some(Block {
        start: lo as usize,
        shape: vec![(hi - lo + 1) as usize],
        map: AffineMap {
            coeffs: vec![coeffs],
            offsets: vec![offset - lo],
        },
    })
}

/// `args` with every view that reads a block of its base re-expressed
/// over a window of that block (recorded when the base takes a gradient);
/// `None` when no argument is such a view (nothing is allocated: this
/// runs on every op).
pub(super) fn windowed<'a>(
    args: &[(&'a str, &Tensor)],
) -> Result<Option<Vec<(&'a str, Tensor)>>, Error> {
    let mut rebased: Option<Vec<(&'a str, Tensor)>> = None;
    for (i, &(name, t)) in args.iter().enumerate() {
        let arg = match rebase(t)? {
            Some(arg) => arg,
            None if rebased.is_none() => continue,
            None => t.clone(),
        };
        rebased
            .get_or_insert_with(|| args[..i].iter().map(|&(n, t)| (n, t.clone())).collect())
            .push((name, arg));
    }
    Ok(rebased)
}

/// `t` read through a window of its base, when it is a view of part of
/// it: a block's window; a span's, when the base takes no gradient; a
/// strided copy placed back, when it does and its elements can be placed
/// (see the module documentation).
fn rebase(t: &Tensor) -> Result<Option<Tensor>, Error> {
    let (base, Some(map)) = t.base_and_map() else {
        return Ok(None);
    };
    let view = |b: Block| -> Result<Tensor, Error> {
        Ok(Tensor::view_of(
            &window(base, &b)?,
            t.shape().to_vec(),
            b.map,
        ))
    };
    if let Some(b) = block_of(t.shape(), base.shape(), map) {
        return view(b).map(Some);
    }
    match span_of(t.shape(), base.shape(), map) {
        Some(s) if !takes_gradient(base) => view(s).map(Some),
        Some(s) if placeable(t.shape(), &s.map.coeffs[0]) => {
            strided_window(base, &s, t.shape()).map(Some)
        }
        _ => Ok(None),
    }
}

/// Whether every element of a view of `shape` read at the coefficients
/// `coeffs` of a span lies apart from the others, the dimensions nesting
/// (each coefficient at least the reach of the smaller ones): then its
/// gradient is placed by pads (`place_strided`).
fn placeable(shape: &[usize], coeffs: &[i64]) -> bool {
    let mut dims: Vec<(u64, usize)> = coeffs
        .iter()
        .zip(shape)
        .filter(|&(_, &n)| n > 1)
        .map(|(&c, &n)| (c.unsigned_abs(), n))
        .collect();
    dims.sort_unstable();
    let mut reach = 1u64;
    dims.iter().all(|&(c, n)| {
        let fits = c >= reach;
        reach = c.saturating_mul(n as u64 - 1).saturating_add(reach);
        fits
    })
}

/// Whether a window of `base` is recorded: its gradient is asked for.
fn takes_gradient(base: &Tensor) -> bool {
    trace::is_grad_enabled() && base.origin().requires_grad()
}

/// The storage over the block `b` of `base`'s memory.
fn window_memory(base: &Tensor, b: &Block) -> Result<Arc<Storage>, Error> {
    let (storage, _) = base.storage_and_origin();
    let len = b.shape.iter().product();
    Storage::window(storage, b.start, len).ok_or_else(|| Error::Invalid {
        function: WINDOW_OP.into(),
        message: format!(
            "internal: elements {}..{} of a base of {} elements",
            b.start,
            b.start + len,
            storage.len()
        ),
    })
}

/// The dense tensor over the block `b` of `base`'s memory.
fn window(base: &Tensor, b: &Block) -> Result<Tensor, Error> {
    let memory = window_memory(base, b)?;
    let origin = if takes_gradient(base) {
        let at = Placement {
            start: b.start,
            of: base.storage_and_origin().0.len(),
            strided: None,
        };
        Origin::Op(record(base, &memory, &b.shape, at)?)
    } else {
        Origin::Constant
    };
    Ok(Tensor::dense(b.shape.clone(), memory, origin))
}

/// A view of `shape` of a base that takes a gradient, read through the
/// span `s`: the view's elements copied out of the span (a kernel planned
/// once for every position), recorded as a window whose gradient is
/// placed at the view's elements of the base's (`Strided`), so the
/// gradient of the op reading it is the view's size, not the span's.
fn strided_window(base: &Tensor, s: &Block, shape: &[usize]) -> Result<Tensor, Error> {
    let span = Tensor::dense(s.shape.clone(), window_memory(base, s)?, Origin::Constant);
    let copy =
        trace::no_grad(|| Tensor::view_of(&span, shape.to_vec(), s.map.clone()).contiguous())?;
    let memory = copy.storage_and_origin().0.clone();
    let at = Placement {
        start: s.start + s.map.offsets[0] as usize,
        of: base.storage_and_origin().0.len(),
        strided: Some(Arc::new(Strided {
            shape: shape.to_vec(),
            coeffs: s.map.coeffs[0].clone(),
        })),
    };
    let node = record(base, &memory, shape, at)?;
    Ok(Tensor::dense(shape.to_vec(), memory, Origin::Op(node)))
}

/// The window's node: the identity on the block's shape, an alias (no
/// kernel runs either way), whose gradient is placed at `at` in the
/// base's.
fn record(
    base: &Tensor,
    memory: &Arc<Storage>,
    shape: &[usize],
    at: Placement,
) -> Result<Arc<Node>, Error> {
    let (dtype, device) = (base.dtype(), base.device());
    let mut key = format!("{WINDOW_OP}\u{1}{shape:?}\u{1}{dtype:?}");
    if device != Device::Cpu {
        let _ = write!(key, "\u{1}{device}");
    }
    let plan = plan::cached(&key, || {
        let names = formula::indices("i", shape.len());
        let src = formula::define("y", &names, formula::access("x", &names));
        let f = IndexFn::parse(&src, &[("x", shape)])?;
        OpPlan::new(WINDOW_OP, f, dtype, device, true, None, None)
    })?;
    let grad = plan.grad(&[true])?;
    let policy = crate::runtime::policy_for(device);
    let edges = vec![base.origin().clone()];
    let mut node = Node::record(plan, grad, edges, &[memory], memory, Vec::new(), policy)?;
    node.placed = Some(at);
    Ok(Arc::new(node))
}

/// A window node's placement, block shape and element count.
fn placement(node: &Node) -> Result<(&Placement, &[usize], usize), Error> {
    let at = node.placed.as_ref().ok_or_else(|| {
        trace::autograd_error(node.op_name(), "internal: not a window's node".into())
    })?;
    let shape = node.plan.f.output_shape();
    Ok((at, shape, shape.iter().product()))
}

/// A window node's gradient with respect to its base, as recorded tensor
/// ops (a graph of gradients): `g` (`batch` leading dimensions, then the
/// window's) placed at the window's elements, zeros elsewhere, the base's
/// elements flat.
pub(crate) fn place_gradient(node: &Node, g: &Tensor, batch: usize) -> Result<Tensor, Error> {
    let (at, _, len) = placement(node)?;
    let (placed, first) = match &at.strided {
        None => (
            g.reshape(&[&g.shape()[..batch], &[len][..]].concat())?,
            at.start,
        ),
        Some(s) => place_strided(g, batch, at.start, s)?,
    };
    let reach = placed.shape()[batch];
    let mut pads = vec![(0, 0); batch];
    pads.push((first, at.of - first - reach));
    placed.pad(&pads, 0.0)
}

/// `g` (`batch` leading dimensions, then `s.shape`) laid out flat from its
/// first position on, with zeros between its elements, as tensor ops
/// (pads, reshapes, narrows, flips, a permutation), and that first
/// position: each dimension, from the smallest coefficient to the
/// largest, padded to its coefficient and merged into the next (the
/// nesting `placeable` checked).
fn place_strided(
    g: &Tensor,
    batch: usize,
    element_zero: usize,
    s: &Strided,
) -> Result<(Tensor, usize), Error> {
    // The view's dimensions by coefficient, largest first, flipped where
    // it is negative (its last element then comes first).
    let mut order: Vec<usize> = (0..s.shape.len()).collect();
    order.sort_by_key(|&d| std::cmp::Reverse(s.coeffs[d].unsigned_abs()));
    let perm: Vec<usize> = (0..batch).chain(order.iter().map(|&d| batch + d)).collect();
    let mut t = g.permute(&perm)?;
    let flips: Vec<usize> = (0..order.len())
        .filter(|&j| s.coeffs[order[j]] < 0)
        .map(|j| batch + j)
        .collect();
    if !flips.is_empty() {
        t = t.flip(&flips)?;
    }
    let first = order.iter().fold(element_zero as i64, |p, &d| {
        p + s.coeffs[d].min(0) * (s.shape[d] as i64 - 1)
    });
    // Innermost first: `t` is `[batch…, n_0, …, n_j, reach]`.
    t = t.unsqueeze(-1)?;
    let mut reach = 1usize;
    for &d in order.iter().rev() {
        let (c, n) = (s.coeffs[d].unsigned_abs() as usize, s.shape[d]);
        if n == 1 {
            t = t.squeeze(-2)?;
            continue;
        }
        let rank = t.rank();
        let mut pads = vec![(0, 0); rank];
        pads[rank - 1] = (0, c - reach);
        let mut merged = t.shape()[..rank - 2].to_vec();
        merged.push(n * c);
        t = t.pad(&pads, 0.0)?.reshape(&merged)?;
        reach += (n - 1) * c;
        t = t.narrow(-1, 0, reach)?;
    }
    Ok((t, first as usize))
}

/// A window node's tangent from its base's tangent `t` (forward mode):
/// the window's elements of `t`.
pub(crate) fn window_tangent(node: &Node, t: &Tensor) -> Result<Tensor, Error> {
    let (at, shape, len) = placement(node)?;
    let flat = t.reshape(&[t.numel()])?;
    match &at.strided {
        None => flat.narrow(0, at.start, len)?.reshape(shape),
        Some(s) => Ok(Tensor::view_of(
            &flat,
            shape.to_vec(),
            AffineMap {
                coeffs: vec![s.coeffs.clone()],
                offsets: vec![at.start as i64],
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_along_the_first_dimension_reads_a_block_of_rows() {
        // x[3:5] of a [6, 4] base.
        let map = AffineMap {
            coeffs: vec![vec![1, 0], vec![0, 1]],
            offsets: vec![3, 0],
        };
        let b = block_of(&[2, 4], &[6, 4], &map).unwrap();
        assert_eq!((b.start, b.shape), (12, vec![2, 4]));
        assert_eq!(b.map.offsets, vec![0, 0]);
    }

    #[test]
    fn fixed_leading_positions_narrow_the_block_to_the_next_dimension() {
        // x[2, 5:7, :] of a [4, 8, 3] base, read transposed.
        let map = AffineMap {
            coeffs: vec![vec![0, 0], vec![0, 1], vec![1, 0]],
            offsets: vec![2, 5, 0],
        };
        let b = block_of(&[3, 2], &[4, 8, 3], &map).unwrap();
        assert_eq!(b.start, 2 * 24 + 5 * 3);
        assert_eq!(b.shape, vec![2, 3]);
        assert_eq!(b.map.coeffs, vec![vec![0, 1], vec![1, 0]]);
        assert_eq!(b.map.offsets, vec![0, 0]);
    }

    #[test]
    fn a_flipped_block_keeps_its_reversal_in_the_map() {
        // x.flip(0)[1:3] of a [5, 2] base: base rows 3 and 2.
        let map = AffineMap {
            coeffs: vec![vec![-1, 0], vec![0, 1]],
            offsets: vec![3, 0],
        };
        let b = block_of(&[2, 2], &[5, 2], &map).unwrap();
        assert_eq!((b.start, b.shape), (4, vec![2, 2]));
        assert_eq!(b.map.offsets, vec![1, 0]);
    }

    #[test]
    fn a_view_moving_inside_rows_reads_a_span_whose_length_is_the_same_at_every_position() {
        // x[:, t] of a [3, 5, 4] base, for t = 1 and t = 4.
        let at = |t: i64| AffineMap {
            coeffs: vec![vec![1, 0], vec![0, 0], vec![0, 1]],
            offsets: vec![0, t, 0],
        };
        let one = span_of(&[3, 4], &[3, 5, 4], &at(1)).unwrap();
        let four = span_of(&[3, 4], &[3, 5, 4], &at(4)).unwrap();
        assert_eq!((one.start, four.start), (4, 16));
        assert_eq!(one.shape, vec![2 * 20 + 4]);
        assert_eq!((one.shape, one.map), (four.shape, four.map.clone()));
        assert_eq!(four.map.coeffs, vec![vec![20, 1]]);
        assert_eq!(four.map.offsets, vec![0]);
        // Flipped along the row: the span starts at the last element read.
        let flipped = AffineMap {
            coeffs: vec![vec![1, 0], vec![0, 0], vec![0, -1]],
            offsets: vec![0, 2, 3],
        };
        let f = span_of(&[3, 4], &[3, 5, 4], &flipped).unwrap();
        assert_eq!((f.start, f.map.offsets.clone()), (8, vec![3]));
        // A transpose reads the whole base: no span.
        assert_eq!(
            span_of(&[4, 3], &[3, 4], &AffineMap::permutation(&[1, 0])),
            None
        );
    }

    #[test]
    fn views_over_whole_rows_or_moving_inside_them_have_no_block() {
        // A transpose reads every row; x[:, 1:3] moves inside rows.
        let t = AffineMap::permutation(&[1, 0]);
        assert_eq!(block_of(&[4, 6], &[6, 4], &t), None);
        let inner = AffineMap {
            coeffs: vec![vec![1, 0], vec![0, 1]],
            offsets: vec![0, 1],
        };
        assert_eq!(block_of(&[6, 2], &[6, 4], &inner), None);
    }
}
