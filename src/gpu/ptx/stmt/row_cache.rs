//! A row team's rows in shared memory: the arguments a kernel with a team
//! per row (`Kernel::shared_loops`) reads along its row, loaded from
//! global memory once per row and read from shared memory by every later
//! pass. A softmax reads its input for the row's maximum, for the sum of
//! exponentials and for the values: one read from memory, not three.
//!
//! Owns [`RowCache`]: which arguments are cached (every read of the
//! argument is `base + v`, `v` the row's element loop or one of the row's
//! reductions, `base` the same one depending on the row alone, no read
//! inside a branch, and `base + v` in bounds for every row, checked over
//! the output box), and its emission: the shared arrays, the loads at the
//! start of a row (a barrier after them), the reads, the barrier at the
//! end of a row. Arguments are taken in order of how many reads they
//! serve while [`BUDGET`] bytes last; the rest are read from global memory
//! as before. Must not decide which kernels run a team per row
//! (`crate::planner::spread`).

use super::super::asm::{Ty, R};
use super::{Emitter, Res};
use crate::kernel::{Expr, IVar, Kernel, Lin, Stmt};
use std::collections::HashMap;

/// Shared memory for cached rows per block (a block's static shared memory
/// is at most 48 KiB, and the team's shares take up to 4 KiB).
const BUDGET: i64 = 40 * 1024;

/// One argument's row in shared memory.
#[derive(Clone, Debug)]
pub(super) struct CachedRow {
    arg: usize,
    /// The argument's offset of the row's element 0 (output indices of the
    /// row only).
    base: Lin,
    /// Elements held: `base + 0 ..= base + len − 1`.
    len: i64,
}

/// The cached rows of a kernel (see the module documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct RowCache {
    rows: Vec<CachedRow>,
    /// The variables a cached read steps along (the element loop's, the
    /// row reductions').
    along: Vec<IVar>,
}

/// The shared array of cached row `i`.
fn array(i: usize) -> String {
    format!("tenjin_row{i}")
}

/// A read seen: its offset, and whether a branch guards it.
struct Read<'a> {
    offset: &'a Lin,
    guarded: bool,
}

impl RowCache {
    /// The rows worth caching in `k` (elements of `size` bytes), if any.
    pub(super) fn of(k: &Kernel, size: i64) -> Option<RowCache> {
        let n = k.out_shape.len();
        // (A row cached in shared memory holds the computed type: half
        // buffers are read directly.)
        if k.threads_per_output <= 1 || k.shared_loops != 1 || n < 2 || !k.buffers.is_uniform() {
            return None;
        }
        // The output loops' variables down to the row, and the row's
        // statements (the body of the last loop above the element loop).
        let mut coords: Vec<(IVar, i64)> = Vec::new();
        let mut stmts = &k.body;
        for d in 0..n - 1 {
            let l = stmts.iter().find_map(|s| match s {
                Stmt::For(l) => Some(l),
                _ => None,
            })?;
            let extent = if d == 0 { k.extent } else { k.out_shape[d] };
            coords.push((l.var, extent as i64));
            stmts = &l.body;
        }
        // The variables a row is read along, each with its constant range.
        let mut along: HashMap<IVar, (i64, i64)> = HashMap::new();
        for s in stmts {
            let l = match s {
                Stmt::For(l) => l,
                Stmt::Reduce { body, .. } => body,
                _ => continue,
            };
            if let (Some(lo), Some(hi)) = (constant(&l.lower), constant(&l.upper)) {
                along.insert(l.var, (lo, hi));
            }
        }
        let mut reads: HashMap<usize, Vec<Read>> = HashMap::new();
        collect(&k.body, false, &mut reads);
        let mut found: Vec<(usize, CachedRow)> = Vec::new();
        for (arg, rs) in &reads {
            let Some(row) = cacheable(*arg, rs, &along, &coords, k) else {
                continue;
            };
            found.push((rs.len(), row));
        }
        // The most read first; ties by argument (a stable order).
        found.sort_by_key(|(reads, row)| (std::cmp::Reverse(*reads), row.arg));
        let mut rows = Vec::new();
        let mut bytes = 0;
        for (reads, row) in found {
            let b = row.len * size;
            if reads >= 2 && bytes + b <= BUDGET {
                bytes += b;
                rows.push(row);
            }
        }
        (!rows.is_empty()).then(|| RowCache {
            rows,
            along: along.into_keys().collect(),
        })
    }

    /// The declarations of the shared arrays.
    pub(super) fn declarations(&self, size: i64) -> String {
        self.rows
            .iter()
            .enumerate()
            .map(|(i, r)| format!("\t.shared .align 16 .b8 {}[{}];\n", array(i), r.len * size))
            .collect()
    }

    /// The cached row read at `offset` of `arg`, with the variable it
    /// steps along.
    fn find(&self, arg: usize, offset: &Lin) -> Option<(usize, IVar)> {
        let i = self.rows.iter().position(|r| r.arg == arg)?;
        let (v, base) = split(offset, &self.along)?;
        (base == self.rows[i].base).then_some((i, v))
    }
}

/// The constant value of a single bound.
fn constant(bounds: &[crate::kernel::Bound]) -> Option<i64> {
    match bounds {
        [b] if b.den == 1 && b.num.terms.is_empty() => Some(b.num.constant),
        _ => None,
    }
}

/// `offset` as `v + base` for one variable `v` of `along` with
/// coefficient 1 (and none other of them in `base`).
fn split(offset: &Lin, along: &[IVar]) -> Option<(IVar, Lin)> {
    let mut on = offset.terms.iter().filter(|(v, _)| along.contains(v));
    let &(v, c) = on.next()?;
    if c != 1 || on.next().is_some() {
        return None;
    }
    let base = Lin {
        constant: offset.constant,
        terms: offset.terms.iter().filter(|t| t.0 != v).copied().collect(),
    };
    Some((v, base))
}

/// Every argument read in `stmts`, with its offset and whether a branch
/// guards it.
fn collect<'a>(stmts: &'a [Stmt], guarded: bool, out: &mut HashMap<usize, Vec<Read<'a>>>) {
    for s in stmts {
        match s {
            Stmt::Let(_, Expr::Load { arg, offset }) => {
                out.entry(*arg).or_default().push(Read { offset, guarded })
            }
            Stmt::If {
                then, otherwise, ..
            } => {
                collect(then, true, out);
                collect(otherwise, true, out);
            }
            Stmt::For(l) | Stmt::Reduce { body: l, .. } => collect(&l.body, guarded, out),
            _ => {}
        }
    }
}

/// `arg`'s row, when every read of it can come from one: unguarded, each
/// `base + v` for a variable `v` along the row with a range in `0..`, one
/// `base` over the output loops `coords` alone, and `base + len − 1`
/// within the argument for every point of the output box.
fn cacheable(
    arg: usize,
    reads: &[Read],
    along: &HashMap<IVar, (i64, i64)>,
    coords: &[(IVar, i64)],
    k: &Kernel,
) -> Option<CachedRow> {
    let vars: Vec<IVar> = along.keys().copied().collect();
    let mut base: Option<Lin> = None;
    let mut len = 0i64;
    for r in reads {
        if r.guarded {
            return None;
        }
        let (v, b) = split(r.offset, &vars)?;
        let (lo, hi) = along[&v];
        if lo < 0 || hi < lo {
            return None;
        }
        len = len.max(hi + 1);
        if base.as_ref().is_some_and(|x| *x != b) {
            return None;
        }
        base = Some(b);
    }
    let base = base?;
    // Its smallest and largest value over the output box.
    let (mut least, mut most) = (base.constant, base.constant);
    for &(v, c) in &base.terms {
        let extent = coords.iter().find(|(w, _)| *w == v)?.1;
        let span = c.checked_mul(extent - 1)?;
        least += span.min(0);
        most += span.max(0);
    }
    let numel: i64 = k.args.get(arg)?.shape.iter().product::<usize>() as i64;
    (least >= 0 && most + len <= numel).then_some(CachedRow { arg, base, len })
}

impl Emitter<'_> {
    /// At the start of a row: every cached row loaded into its shared
    /// array by the team (thread `t` loads elements `t`, `t + T`, …, four
    /// loads in flight), then a barrier.
    pub(super) fn load_rows(&mut self) -> Res<()> {
        let (Some(cache), Some(team)) = (self.row_cache.clone(), self.team) else {
            return Ok(());
        };
        let (ity, isfx) = self.int;
        let bits = self.int_bits();
        let t = team.threads as i64;
        for (i, row) in cache.rows.iter().enumerate() {
            let from = self.address(self.args[row.arg], &row.base)?;
            let to = self.a.un("mov.u64", Ty::B64, array(i));
            let j = self.a.reg(ity);
            self.a.op(format!("mov.{bits} {j}, {}", team.first));
            let (four, one, done) = (self.a.label(), self.a.label(), self.a.label());
            // Four at a time while j + 3T < len, then one at a time.
            self.a.place(&four);
            let last = self.a.setp("ge", isfx, j, row.len - 3 * t);
            self.a.op(format!("@{last} bra {one}"));
            let values: Vec<R> = (0..4)
                .map(|u| {
                    let g = self.element(from, j, u * t);
                    let v = self.a.reg(self.w);
                    self.a.op(format!("ld.global.{} {v}, [{g}]", self.sfx));
                    v
                })
                .collect();
            for (u, v) in values.into_iter().enumerate() {
                let s = self.element(to, j, u as i64 * t);
                self.a.op(format!("st.shared.{} [{s}], {v}", self.sfx));
            }
            self.a.op(format!("add.{isfx} {j}, {j}, {}", 4 * t));
            self.a.op(format!("bra.uni {four}"));
            self.a.place(&one);
            let past = self.a.setp("ge", isfx, j, row.len);
            self.a.op(format!("@{past} bra {done}"));
            let g = self.element(from, j, 0);
            let v = self.a.reg(self.w);
            self.a.op(format!("ld.global.{} {v}, [{g}]", self.sfx));
            let s = self.element(to, j, 0);
            self.a.op(format!("st.shared.{} [{s}], {v}", self.sfx));
            self.a.op(format!("add.{isfx} {j}, {j}, {t}"));
            self.a.op(format!("bra.uni {one}"));
            self.a.place(&done);
        }
        self.a.op("bar.sync 0");
        Ok(())
    }

    /// At the end of a row: a barrier, so that no thread loads the next
    /// row over one still being read.
    pub(super) fn end_row(&mut self) {
        if self.row_cache.is_some() || self.value_row.is_some() {
            self.a.op("bar.sync 0");
        }
    }

    /// A read of `arg` at `offset` from its cached row into `d`; false
    /// when the argument is not cached.
    pub(super) fn cached_read(&mut self, d: R, arg: usize, offset: &Lin) -> bool {
        let Some((i, v)) = self.row_cache.as_ref().and_then(|c| c.find(arg, offset)) else {
            return false;
        };
        let to = self.a.un("mov.u64", Ty::B64, array(i));
        let j = self.ivar(v);
        let s = self.element(to, j, 0);
        self.a.op(format!("ld.shared.{} {d}, [{s}]", self.sfx));
        true
    }

    /// The address of element `j + extra` from `base` (u64).
    pub(super) fn element(&mut self, base: R, j: R, extra: i64) -> R {
        let d = self.a.reg(Ty::B64);
        let wide = if self.int.0 == Ty::B32 {
            self.a.un("cvt.s64.s32", Ty::B64, j)
        } else {
            j
        };
        let at = if extra == 0 {
            wide
        } else {
            self.a.bin("add.s64", Ty::B64, wide, extra)
        };
        self.a
            .op(format!("mad.lo.s64 {d}, {at}, {}, {base}", self.size));
        d
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{emit, Arch};
    use crate::kernel::lower;
    use crate::symbolic::IndexFn;
    use crate::DType;

    /// `src` lowered to run a team of 128 per row, and its PTX.
    fn ptx(src: &str, shape: &[usize]) -> String {
        let f = IndexFn::parse(src, &[("x", shape), ("w", &shape[1..])]).unwrap();
        let mut k = lower(&f).unwrap();
        k.threads_per_output = 128;
        k.shared_loops = 1;
        emit(&k, DType::F32, Arch::for_capability(8, 0).unwrap(), "k").unwrap()
    }

    #[test]
    fn a_softmax_row_is_read_from_memory_once() {
        let text = ptx(
            "f[i; j] = exp (x[i; j] - (max{m}_0^1023 (x[i; m]) + log sum{k}_0^1023 (exp (x[i; k] - max{m}_0^1023 (x[i; m])))))",
            &[512, 1024],
        );
        assert!(
            text.contains(".shared .align 16 .b8 tenjin_row0[4096]"),
            "{text}"
        );
        // One global load site (the row's, four in flight, and the tail);
        // the maximum, the sum and the values read shared memory.
        assert_eq!(text.matches("ld.global").count(), 5, "{text}");
        assert!(text.matches("ld.shared.f32").count() >= 3, "{text}");
    }

    #[test]
    fn a_row_read_under_a_branch_or_once_is_not_cached() {
        // `w` is read once per element (nothing to share); `x` under a
        // guard (its row is not known to be in bounds where not taken).
        let text = ptx(
            "f[i; j] = (if {j >= 1} then (x[i; j - 1]) else (0)) * w[j] - sum{k}_0^511 (x[i; k])",
            &[512, 512],
        );
        assert!(!text.contains("tenjin_row"), "{text}");
    }
}
