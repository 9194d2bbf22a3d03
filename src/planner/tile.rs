//! Tiles for transposed reads: the two innermost output loops walked in
//! square blocks when one of them reads across cache lines.
//!
//! Owns [`tile_transposes`]. A kernel like `y[i; j] = x[j; i]` stores
//! contiguously along `j` but reads `x` with a stride of a whole row per
//! `j`: walked row by row, each output row touches one cache line per
//! element, and those lines are evicted before the next row would reuse
//! them (a 1024×1024 transposed copy ran at 31× a `memcpy`). Walked in
//! blocks of [`TILE_OUTER`] rows by [`TILE`] columns, the lines a block
//! reads stay in L1 while the block uses all of them: 16 f32 fill a line
//! along the contiguous reads, and 8 lines along the strided ones fit the
//! 8 ways of an L1 set even when the stride is a multiple of 4 KiB (16
//! did not: 3.5 ms against 1.4 ms for the copy above).
//!
//! Only the order in which output elements are computed changes: every
//! element is still computed by the same statements from the same values,
//! so results are bitwise those of the untiled nest (f32 and f64 alike).
//! The parallel loop's chunks (`[start, end)`) are tiled within
//! themselves. Must not emit code; runs before vectors are marked
//! (`super::passes`), which then leave the strided inner loop scalar.

use crate::kernel::{visit_stmts, Bound, IVar, Kernel, Lin, Loop, Stmt};

/// Elements of a block along the inner loop (the strided reads).
pub const TILE: i64 = 8;
/// Elements of a block along the outer loop (the contiguous reads).
pub const TILE_OUTER: i64 = 16;

/// Reads whose stride in the inner loop is at least this many elements
/// (and below it in the outer loop) are transposed reads.
const FAR: i64 = 16;

/// `k` with its two innermost output loops tiled when the inner one reads
/// across cache lines and the outer one along them (see the module
/// documentation); otherwise `k` unchanged.
///
/// ```
/// use tenjin::planner::tile::tile_transposes;
/// use tenjin::symbolic::IndexFn;
/// let t = IndexFn::parse("y[i; j] = x[j; i]", &[("x", &[64, 48][..])])?;
/// let tiled = tile_transposes(tenjin::kernel::lower(&t)?);
/// assert_eq!(tiled.num_ivars, tenjin::kernel::lower(&t)?.num_ivars + 2);
/// let copy = IndexFn::parse("y[i; j] = x[i; j]", &[("x", &[64, 48][..])])?;
/// assert_eq!(tile_transposes(tenjin::kernel::lower(&copy)?), tenjin::kernel::lower(&copy)?);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn tile_transposes(mut k: Kernel) -> Kernel {
    if k.out_shape.len() < 2 || k.threads_per_output != 1 {
        return k;
    }
    let mut next = k.num_ivars;
    let body = std::mem::take(&mut k.body);
    k.body = body
        .into_iter()
        .map(|s| match s {
            Stmt::For(l) => Stmt::For(tile_in(l, &mut next)),
            s => s,
        })
        .collect();
    k.num_ivars = next;
    k
}

/// Descends the output loops of `outer` to the pair whose inner loop has
/// no loop inside, and tiles that pair when it qualifies.
fn tile_in(mut outer: Loop, next: &mut u32) -> Loop {
    let Some(p) = only_loop(&outer.body) else {
        return outer;
    };
    let Stmt::For(inner) = &outer.body[p] else {
        return outer;
    };
    if only_loop(&inner.body).is_some() {
        if let Stmt::For(inner) = outer.body.remove(p) {
            outer.body.insert(p, Stmt::For(tile_in(inner, next)));
        }
        return outer;
    }
    if !qualifies(&outer, inner) {
        return outer;
    }
    tiled(&outer, p, next).unwrap_or(outer)
}

/// The position of the one loop among `stmts` when the others are plain
/// definitions (values hoisted out of it), else `None`.
fn only_loop(stmts: &[Stmt]) -> Option<usize> {
    let mut found = None;
    for (p, s) in stmts.iter().enumerate() {
        match s {
            Stmt::For(_) if found.is_none() => found = Some(p),
            Stmt::Let(..) => {}
            _ => return None,
        }
    }
    found
}

/// Whether the pair reads across cache lines in the inner loop and along
/// them in the outer one, with single, unscaled bounds, and nothing but
/// straight-line code inside the inner loop.
fn qualifies(outer: &Loop, inner: &Loop) -> bool {
    let simple = |l: &Loop| {
        l.lower.len() == 1 && l.upper.len() == 1 && l.lower[0].den == 1 && l.upper[0].den == 1
    };
    // An inner loop of one block already reuses its lines from row to row.
    let long = inner.max_trips > TILE as u64 && outer.max_trips > 1;
    if !long || !simple(outer) || !simple(inner) || outer.vector || inner.vector {
        return false;
    }
    let mut far = false;
    let mut straight = true;
    visit_stmts(&inner.body, &mut |s| match s {
        Stmt::For(_) | Stmt::Reduce { .. } => straight = false,
        Stmt::Let(_, crate::kernel::Expr::Load { offset, .. }) => {
            let (c_in, c_out) = (offset.coeff(inner.var).abs(), offset.coeff(outer.var).abs());
            far |= c_in >= FAR && c_out < FAR && c_out > 0;
        }
        _ => {}
    });
    straight && far
}

/// `for to { for ti { for o in tile to { lets; for i in tile ti { … } } } }`
/// for the pair `outer { lets; inner }` (`inner` at `inner_pos`); `None` on
/// overflow.
fn tiled(outer: &Loop, inner_pos: usize, next: &mut u32) -> Option<Loop> {
    let Stmt::For(inner) = &outer.body[inner_pos] else {
        return None;
    };
    let (to, ti) = (IVar(*next), IVar(*next + 1));
    *next += 2;
    let mut body = outer.body.clone();
    body[inner_pos] = Stmt::For(Loop {
        lower: within(&inner.lower[0], ti, TILE, false)?,
        upper: within(&inner.upper[0], ti, TILE, true)?,
        max_trips: inner.max_trips.min(TILE as u64),
        ..inner.clone()
    });
    let o = Loop {
        lower: within(&outer.lower[0], to, TILE_OUTER, false)?,
        upper: within(&outer.upper[0], to, TILE_OUTER, true)?,
        body,
        max_trips: outer.max_trips.min(TILE_OUTER as u64),
        ..outer.clone()
    };
    let tile_loop = |var, l: &Loop, side: i64, body| -> Option<Loop> {
        Some(Loop {
            var,
            // ⌊lo / T⌋ = ⌈(lo − T + 1) / T⌉ ..= ⌊hi / T⌋
            lower: vec![Bound {
                num: l.lower[0].num.checked_add(&Lin::constant(1 - side))?,
                den: side,
            }],
            upper: vec![Bound {
                num: l.upper[0].num.clone(),
                den: side,
            }],
            body,
            max_trips: l.max_trips.div_ceil(side as u64) + 1,
            vector: false,
        })
    };
    let inner_tiles = tile_loop(ti, inner, TILE, vec![Stmt::For(o)])?;
    tile_loop(to, outer, TILE_OUTER, vec![Stmt::For(inner_tiles)])
}

/// The bounds of a loop restricted to tile `t`: `max(lo, T·t)` as lower
/// bounds, `min(hi, T·t + T − 1)` as upper bounds.
fn within(b: &Bound, t: IVar, side: i64, upper: bool) -> Option<Vec<Bound>> {
    let start = Lin::var(t).checked_scale(side)?;
    let edge = if upper {
        start.checked_add(&Lin::constant(side - 1))?
    } else {
        start
    };
    Some(vec![b.clone(), Bound { num: edge, den: 1 }])
}
