//! A block of threads per output element: the lowering of a top-level
//! reduction spread over the block (`Kernel::threads_per_output`).
//!
//! Every thread of the block runs the output's statements (all hold the
//! same values), except that a top-level reduction is folded in shares:
//! thread `t` folds iterations `lo + t`, `lo + t + T`, … in order
//! (adjacent threads read adjacent elements; `IN_FLIGHT` iterations'
//! loads are issued before their folds), stores its share in shared
//! memory (a perfect nest of one reduction, `crate::kernel::nest`, is one
//! flattened range: thread `t` folds positions `t`, `t + T`, … of the box
//! in row-major order, each split into the levels' variables), and the
//! shares combine in a tree — at step `s = T/2, T/4, …, 1` thread `t < s`
//! folds the share of `t + s` into its own: steps across warps through
//! shared memory with a barrier after each, steps within a warp by
//! register shuffles (`shfl.sync.bfly`), which need none. Every thread
//! then reads the result (from share 0 after a barrier, a last barrier
//! letting the next reduction reuse the shares; a one-warp team by a
//! shuffle from lane 0). The order depends only on `T` and the bounds,
//! so results are bitwise the same from run to run. A `wide` sum keeps
//! its shares and the tree in f64. An argmax or argmin shares (value,
//! index) pairs and keeps the first index among equal values, as the
//! one-thread fold does; a max or min may differ from it only in the sign
//! of a zero tied with its negation, or in which NaN it returns.
//!
//! In a kernel with run-time constants (a module shared by the sizes of
//! an op, `crate::kernel::sharing`) the team's size is read at launch
//! (`%ntid.x`) rather than compiled in, up to [`READ_MOST`] threads: the
//! planner sizes teams by the reductions' lengths, so a compiled-in size
//! would make a module per power of two. Its folds step by the count read,
//! the tree's steps across warps are a loop (at most one per power of
//! two, in the same order), and the shares are laid out for
//! [`READ_MOST`]: the same operations in the same order as the module
//! with the size compiled in, so the same bits. Must not decide which
//! kernels are spread (the planner does, `crate::planner::spread`).

use super::super::asm::{Asm, Ty, R};
use super::{Emitter, Res, Size};
use crate::kernel::nest::reduction_nest;
use crate::kernel::{Loop, Reg};
use crate::symbolic::ReduceOp;

/// The shared-memory array of the shares.
const SHARES: &str = "tenjin_shares";

/// Threads of a warp: the tree's steps below this exchange registers.
const WARP: u32 = 32;

/// Iterations a thread of a team reduction has in flight: its share is
/// folded in groups of this many, a group's statements (its loads) all
/// emitted before the group's folds. The folds keep their order: results
/// are bitwise the same as one at a time. Measured on an H100 (1, 4, 8):
/// the partial sums of a 16M-element sum (team 128, 256 iterations each,
/// a flattened nest) took 52, 39, 37 µs; row reductions of a [4096, 4096]
/// matrix (team 64) stayed at 35–40 µs whatever the count.
pub(super) const IN_FLIGHT: u32 = 4;

/// The largest team a module reading its team's size at launch serves
/// (the planner's teams have at most 256 threads): its shares are laid
/// out for this many.
const READ_MOST: u32 = 256;

/// The block's threads and the current thread's place among them.
#[derive(Clone, Copy)]
pub(super) struct Team {
    /// Threads per output (a power of two, the launch's block size).
    pub(super) threads: u32,
    /// The count read at launch (see the module documentation), in the
    /// kernel's integer type and in 64 bits; `None` when compiled in.
    read: Option<(R, R)>,
    /// The thread's index in the block (u64).
    pub(super) tid: R,
    /// The same as an integer value of the kernel (its first iteration of
    /// a shared reduction).
    pub(super) first: R,
    /// The address of share 0 and of this thread's share (u64, shared
    /// window).
    base: R,
    slot: R,
}

impl Team {
    /// The registers of a team of `threads` (checked: a power of two a
    /// block can hold) for the thread `tid`; with `read` (a kernel with
    /// run-time constants, integers of type `int`), the count is read at
    /// launch when the team is at most [`READ_MOST`] and at least a warp.
    pub(super) fn new(
        a: &mut Asm,
        threads: u32,
        (tid, first): (R, R),
        read: Option<Ty>,
    ) -> Res<Team> {
        if !threads.is_power_of_two() || threads > 1024 {
            return Err(format!(
                "{threads} threads per output: a block holds a power of two up to 1024"
            ));
        }
        let read = read
            .filter(|_| (WARP..=READ_MOST).contains(&threads))
            .map(|int| {
                let n = a.un("mov.u32", Ty::B32, "%ntid.x");
                let wide = a.un("cvt.u64.u32", Ty::B64, n);
                let count = match int {
                    Ty::B32 => n,
                    _ => wide,
                };
                (count, wide)
            });
        let base = a.un("mov.u64", Ty::B64, SHARES);
        let slot = a.reg(Ty::B64);
        a.op(format!("mad.lo.s64 {slot}, {tid}, 8, {base}"));
        Ok(Team {
            threads,
            read,
            tid,
            first,
            base,
            slot,
        })
    }

    /// The threads the shares are laid out for.
    fn capacity(&self) -> u32 {
        if self.read.is_some() {
            READ_MOST
        } else {
            self.threads
        }
    }

    /// The declaration of the shares: two of 8 bytes per thread (a value,
    /// and an argmax's index).
    pub(super) fn declaration(&self) -> String {
        format!(
            "\t.shared .align 8 .b8 {SHARES}[{}];\n",
            16 * self.capacity() as usize
        )
    }
}

impl Emitter<'_> {
    /// `res = op over body` folded by the whole team (see the module
    /// documentation).
    pub(super) fn team_reduce(
        &mut self,
        op: ReduceOp,
        value: Reg,
        res: R,
        body: &Loop,
        wide: bool,
    ) -> Res<()> {
        let Some(Team { first, .. }) = self.team else {
            return Err("internal: a team reduction outside a team".into());
        };
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            return self.team_arg_reduce(op, value, res, body);
        }
        let wide = wide && op == ReduceOp::Sum;
        // The type the shares are kept in.
        let acc_ty = if wide { Ty::F64 } else { self.w };
        let init = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        };
        let acc = if wide {
            self.a.f64_const(init)
        } else {
            self.constant(init)
        };
        let w = self.w;
        let (levels, value) = reduction_nest(op, value, body);
        let fold = |e: &mut Self, x: R| {
            let x = if wide && w == Ty::F32 {
                e.a.un("cvt.f64.f32", Ty::F64, x)
            } else {
                x
            };
            e.combine(op, acc_ty, acc, x);
            Ok(())
        };
        if levels.len() > 1 {
            self.strided_nest(&levels, first, value, fold)?;
        } else {
            self.strided_in_groups(body, first, Some(value), fold)?;
        }
        self.tree(&[(acc_ty, acc)], |e, other| {
            e.combine(op, acc_ty, acc, other[0])
        });
        if acc_ty == self.w {
            self.a.op(format!("mov.{} {res}, {acc}", self.sfx));
        } else {
            self.a.op(format!("cvt.rn.f32.f64 {res}, {acc}"));
        }
        Ok(())
    }

    /// `n` times the team's thread count: compiled in, or computed from
    /// the count read at launch, in the kernel's integer type (or in 64
    /// bits, `wide`).
    pub(super) fn team_times(&mut self, n: u32, wide: bool) -> Res<Size> {
        let Some(team) = self.team else {
            return Err("internal: a team's step outside a team".into());
        };
        Ok(match team.read {
            None => Size::Known(n as u64 * team.threads as u64),
            Some((int, w64)) => {
                let (r, ty, sfx) = if wide {
                    (w64, Ty::B64, "s64")
                } else {
                    (int, self.int.0, self.int.1)
                };
                if n == 1 {
                    Size::Read(r)
                } else {
                    Size::Read(self.a.bin(&format!("mul.lo.{sfx}"), ty, r, n))
                }
            }
        })
    }

    /// `l`'s loop from its lower bound plus `first` in steps of the team's
    /// thread count, `IN_FLIGHT` iterations at a time while a whole group fits (each
    /// iteration's statements, its `value` copied aside; then the copies
    /// folded in order), the rest one at a time: the same folds in the
    /// same order as one at a time, with a group's loads in flight
    /// together. Without a `value` (a row team's dealt output loop, whose
    /// iterations store), only the statements, a group's stores held back
    /// until after its last iteration's statements: a store in between
    /// would keep the next iteration's loads behind it (`ptxas` cannot
    /// know they read other memory), one load in flight per thread. The
    /// iterations of a dealt loop are independent (other threads of the
    /// team run the loop's other iterations at the same time), so no
    /// iteration reads what a held-back store writes.
    pub(super) fn strided_in_groups(
        &mut self,
        l: &Loop,
        first: R,
        value: Option<Reg>,
        mut fold: impl FnMut(&mut Self, R) -> Res<()>,
    ) -> Res<()> {
        let step = self.team_times(1, false)?;
        let group_less_one = self.team_times(IN_FLIGHT - 1, false)?;
        let lo = self.bounds(&l.lower, true)?;
        let hi = self.bounds(&l.upper, false)?;
        let k = self.ivar(l.var);
        let isfx = self.int.1;
        let bits = self.int_bits();
        let start = self.int_op("add", lo, first);
        self.a.op(format!("mov.{bits} {k}, {start}"));
        // A whole group is left while k ≤ hi − (IN_FLIGHT − 1)·step (hi
        // is at least lo − 1 ≥ −1: no overflow).
        let last = self.int_op("sub", hi, group_less_one);
        let (group, single, done) = (self.a.label(), self.a.label(), self.a.label());
        self.a.place(&group);
        let p = self.a.setp("gt", isfx, k, last);
        self.a.op(format!("@{p} bra {single}"));
        self.loop_depth += 1;
        let mut held = Vec::with_capacity(IN_FLIGHT as usize);
        if value.is_none() {
            self.deferred = Some(Vec::new());
        }
        for u in 0..IN_FLIGHT {
            if u > 0 {
                self.a.op(format!("add.{isfx} {k}, {k}, {step}"));
            }
            self.loop_body(l)?;
            if let Some(v) = value {
                held.push(self.held(v));
            }
        }
        for store in self.deferred.take().unwrap_or_default() {
            self.a.op(store);
        }
        for x in held {
            fold(self, x)?;
        }
        self.a.op(format!("add.{isfx} {k}, {k}, {step}"));
        self.a.op(format!("bra.uni {group}"));
        self.a.place(&single);
        let p = self.a.setp("gt", isfx, k, hi);
        self.a.op(format!("@{p} bra {done}"));
        self.loop_body(l)?;
        if let Some(v) = value {
            let x = self.reg(v);
            fold(self, x)?;
        }
        self.loop_depth -= 1;
        self.a.op(format!("add.{isfx} {k}, {k}, {step}"));
        self.a.op(format!("bra.uni {single}"));
        self.a.place(&done);
        Ok(())
    }

    /// A copy of `value`'s register (the next iteration's statements
    /// write the register again).
    fn held(&mut self, value: Reg) -> R {
        let x = self.reg(value);
        let sfx = self.sfx;
        self.a.un(&format!("mov.{sfx}"), x.ty, x)
    }

    /// The perfect nest `levels` (outermost first, bounds independent of
    /// each other) as one flattened range of positions from `first` in
    /// steps of `step`: the first position split into the levels'
    /// variables (row-major, the innermost fastest; 64-bit division, once),
    /// each later one reached by adding `step` to the innermost variable
    /// and carrying outwards; at each, the innermost level's statements
    /// and `fold` of `value`. Positions go `IN_FLIGHT` at a time while a
    /// whole group is left (as [`Emitter::strided_in_groups`]).
    fn strided_nest(
        &mut self,
        levels: &[&Loop],
        first: R,
        value: Reg,
        mut fold: impl FnMut(&mut Self, R) -> Res<()>,
    ) -> Res<()> {
        let step = self.team_times(1, false)?;
        let wide_step = self.team_times(1, true)?;
        let group_less_one = self.team_times(IN_FLIGHT - 1, true)?;
        let in_flight = self.team_times(IN_FLIGHT, true)?;
        let (ity, _) = self.int;
        let widen = |e: &mut Self, r: R| -> R {
            if ity == Ty::B32 {
                e.a.un("cvt.s64.s32", Ty::B64, r)
            } else {
                r
            }
        };
        let total = self.a.i64_const(1);
        // Per level: its upper bound and length (the kernel's integer
        // type), its lower bound and length in 64 bits.
        let mut his = Vec::with_capacity(levels.len());
        let mut lengths = Vec::with_capacity(levels.len());
        let mut wide = Vec::with_capacity(levels.len());
        for l in levels {
            let lo = self.bounds(&l.lower, true)?;
            let hi = self.bounds(&l.upper, false)?;
            let span = self.int_op("sub", hi, lo);
            let n = self.int_op("add", span, 1);
            let n = self.int_op("max", n, 0);
            let (lo64, n64) = (widen(self, lo), widen(self, n));
            self.a.op(format!("mul.lo.s64 {total}, {total}, {n64}"));
            his.push(hi);
            lengths.push(n);
            wide.push((lo64, n64));
        }
        let first = widen(self, first);
        let q = self.a.un("mov.b64", Ty::B64, first);
        let (group, single, done) = (self.a.label(), self.a.label(), self.a.label());
        let p = self.a.setp("ge", "s64", q, total);
        self.a.op(format!("@{p} bra {done}"));
        // The first position (no level is empty here: no division by 0).
        let rest = self.a.un("mov.b64", Ty::B64, q);
        for (j, l) in levels.iter().enumerate().rev() {
            let (lo64, n64) = wide[j];
            let k = if j == 0 {
                rest
            } else {
                let k = self.a.bin("rem.u64", Ty::B64, rest, n64);
                self.a.op(format!("div.u64 {rest}, {rest}, {n64}"));
                k
            };
            let v = self.a.bin("add.s64", Ty::B64, lo64, k);
            let var = self.ivar(l.var);
            if ity == Ty::B32 {
                self.a.op(format!("cvt.u32.u64 {var}, {v}"));
            } else {
                self.a.op(format!("mov.b64 {var}, {v}"));
            }
        }
        let inner = &levels[levels.len() - 1].body;
        self.loop_depth += levels.len() as u32;
        // Whole groups: the group's last position is before `total`.
        self.a.place(&group);
        let last = self.a.bin("add.s64", Ty::B64, q, group_less_one);
        let p = self.a.setp("ge", "s64", last, total);
        self.a.op(format!("@{p} bra {single}"));
        let mut held = Vec::with_capacity(IN_FLIGHT as usize);
        for u in 0..IN_FLIGHT {
            if u > 0 {
                self.next_position(levels, &his, &lengths, step);
            }
            self.stmts(inner)?;
            held.push(self.held(value));
        }
        for x in held {
            fold(self, x)?;
        }
        self.a.op(format!("add.s64 {q}, {q}, {in_flight}"));
        let p = self.a.setp("ge", "s64", q, total);
        self.a.op(format!("@{p} bra {done}"));
        self.next_position(levels, &his, &lengths, step);
        self.a.op(format!("bra.uni {group}"));
        // The rest, one position at a time.
        self.a.place(&single);
        self.stmts(inner)?;
        let x = self.reg(value);
        fold(self, x)?;
        self.a.op(format!("add.s64 {q}, {q}, {wide_step}"));
        let p = self.a.setp("ge", "s64", q, total);
        self.a.op(format!("@{p} bra {done}"));
        self.next_position(levels, &his, &lengths, step);
        self.a.op(format!("bra.uni {single}"));
        self.loop_depth -= levels.len() as u32;
        self.a.place(&done);
        Ok(())
    }

    /// The nest's variables moved `step` positions on: `step` added to
    /// the innermost, carried outwards (a level past its end wraps and
    /// steps the one around it).
    fn next_position(&mut self, levels: &[&Loop], his: &[R], lengths: &[R], step: Size) {
        let (_, isfx) = self.int;
        let inner = self.ivar(levels[levels.len() - 1].var);
        self.a.op(format!("add.{isfx} {inner}, {inner}, {step}"));
        for j in (1..levels.len()).rev() {
            let (var, outer) = (self.ivar(levels[j].var), self.ivar(levels[j - 1].var));
            let (carry, settled) = (self.a.label(), self.a.label());
            self.a.place(&carry);
            let p = self.a.setp("le", isfx, var, his[j]);
            self.a.op(format!("@{p} bra {settled}"));
            self.a
                .op(format!("sub.{isfx} {var}, {var}, {}", lengths[j]));
            self.a.op(format!("add.{isfx} {outer}, {outer}, 1"));
            self.a.op(format!("bra.uni {carry}"));
            self.a.place(&settled);
        }
    }

    /// An argmax (argmin) over the team: each share is a (value, index)
    /// pair folded as one thread folds; two combine to the better value,
    /// the lower index among equal values or NaNs (the first, as in order),
    /// an empty share (index −1) never winning.
    fn team_arg_reduce(&mut self, op: ReduceOp, value: Reg, res: R, body: &Loop) -> Res<()> {
        let Some(Team { first, .. }) = self.team else {
            return Err("internal: a team reduction outside a team".into());
        };
        let (w, sfx) = (self.w, self.sfx);
        let idx = self.constant(-1.0);
        let best = self.constant(0.0);
        let step = self.team_times(1, false)?;
        self.strided(body, Some(first), step, |e, k, start| {
            let x = e.reg(value);
            e.arg_fold(op, k, start, x, (best, idx));
            Ok(())
        })?;
        let cmp = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
        let zero = self.lit(0.0);
        self.tree(&[(w, best), (w, idx)], |e, other| {
            let (ov, oi) = (other[0], other[1]);
            let a = &mut e.a;
            let better = a.setp(cmp, sfx, ov, best);
            let equal = a.setp("eq", sfx, ov, best);
            let o_nan = a.setp("nan", sfx, ov, ov);
            let b_nan = a.setp("nan", sfx, best, best);
            let both_nan = a.reg(Ty::Pred);
            a.op(format!("and.pred {both_nan}, {o_nan}, {b_nan}"));
            let earlier = a.setp("lt", sfx, oi, idx);
            let tie = a.reg(Ty::Pred);
            a.op(format!("or.pred {tie}, {equal}, {both_nan}"));
            a.op(format!("and.pred {tie}, {tie}, {earlier}"));
            let b_num = a.setp("num", sfx, best, best);
            let nan_wins = a.reg(Ty::Pred);
            a.op(format!("and.pred {nan_wins}, {o_nan}, {b_num}"));
            let empty = a.setp("lt", sfx, idx, &zero);
            let take = a.reg(Ty::Pred);
            a.op(format!("or.pred {take}, {better}, {tie}"));
            a.op(format!("or.pred {take}, {take}, {nan_wins}"));
            a.op(format!("or.pred {take}, {take}, {empty}"));
            let o_full = a.setp("ge", sfx, oi, &zero);
            a.op(format!("and.pred {take}, {take}, {o_full}"));
            a.op(format!("selp.{sfx} {best}, {ov}, {best}, {take}"));
            a.op(format!("selp.{sfx} {idx}, {oi}, {idx}, {take}"));
        });
        self.a.op(format!("mov.{sfx} {res}, {idx}"));
        Ok(())
    }

    /// Combines the threads' `values` in the tree (`combine` folds another
    /// thread's values into `values`' registers) and leaves thread 0's
    /// result in `values` for every thread. At step `s = T/2, T/4, …, 1`
    /// thread `t < s` folds the values of thread `t + s` into its own.
    /// Steps across warps (`s ≥ 32`) go through the shares in shared
    /// memory, a barrier after each; steps within a warp exchange registers
    /// (`shfl.sync.bfly`: lane `t` receives lane `t ^ s`, which for `t < s`
    /// is `t + s`; the other lanes' results are never read), so thread 0
    /// folds in the same order as a tree of barriers would. A team of one
    /// warp needs no shared memory and no barrier: lane 0's result is
    /// shuffled to every lane.
    fn tree(&mut self, values: &[(Ty, R)], mut combine: impl FnMut(&mut Self, &[R])) {
        let Some(
            team @ Team {
                tid,
                threads,
                base,
                slot,
                ..
            },
        ) = self.team
        else {
            return;
        };
        // Share j of a thread lies 8·capacity·j bytes after its first.
        let capacity = team.capacity() as usize;
        let at = |e: &mut Self, addr: R, j: usize| -> R {
            if j == 0 {
                addr
            } else {
                e.a.bin("add.s64", Ty::B64, addr, 8 * capacity * j)
            }
        };
        let sfx = |ty: Ty| if ty == Ty::F64 { "f64" } else { "f32" };
        let store = |e: &mut Self, addr: R| {
            for (j, &(ty, r)) in values.iter().enumerate() {
                let a = at(e, addr, j);
                e.a.op(format!("st.shared.{} [{a}], {r}", sfx(ty)));
            }
        };
        // Into fresh registers, or (`into_values`) into `values`' own.
        let load = |e: &mut Self, addr: R, into_values: bool| -> Vec<R> {
            values
                .iter()
                .enumerate()
                .map(|(j, &(ty, r))| {
                    let a = at(e, addr, j);
                    let o = if into_values { r } else { e.a.reg(ty) };
                    e.a.op(format!("ld.shared.{} {o}, [{a}]", sfx(ty)));
                    o
                })
                .collect()
        };
        // Thread 0's result to every thread through share 0 (a barrier
        // before, and one after so that the next reduction may reuse it).
        let from_thread_0 = |e: &mut Self| {
            let skip = e.a.label();
            let p = e.a.setp("ne", "u64", tid, 0);
            e.a.op(format!("@{p} bra {skip}"));
            store(e, base);
            e.a.place(&skip);
            e.a.op("bar.sync 0");
            load(e, base, true);
            e.a.op("bar.sync 0");
        };
        if let Some((_, count)) = team.read {
            // The count read at launch: the same steps, as a loop.
            let (small, done) = (self.a.label(), self.a.label());
            let one_warp = self.a.setp("le", "u64", count, WARP);
            self.a.op(format!("@{one_warp} bra {small}"));
            store(self, slot);
            self.a.op("bar.sync 0");
            let step = self.a.bin("shr.u64", Ty::B64, count, 1);
            let (head, skip, joined) = (self.a.label(), self.a.label(), self.a.label());
            self.a.place(&head);
            let idle = self.a.setp("ge", "u64", tid, step);
            self.a.op(format!("@{idle} bra {skip}"));
            let offset = self.a.bin("mul.lo.u64", Ty::B64, step, 8);
            let other_slot = self.a.bin("add.s64", Ty::B64, slot, offset);
            let other = load(self, other_slot, false);
            combine(self, &other);
            let last = self.a.setp("le", "u64", step, WARP);
            self.a.op(format!("@{last} bra {skip}"));
            store(self, slot);
            self.a.place(&skip);
            let last = self.a.setp("le", "u64", step, WARP);
            self.a.op(format!("@{last} bra {joined}"));
            self.a.op("bar.sync 0");
            self.a.op(format!("shr.u64 {step}, {step}, 1"));
            self.a.op(format!("bra.uni {head}"));
            self.a.place(&joined);
            self.warp_steps(values, WARP / 2, &mut combine);
            from_thread_0(self);
            self.a.op(format!("bra.uni {done}"));
            self.a.place(&small);
            self.warp_steps(values, WARP / 2, &mut combine);
            self.broadcast_lane_0(values);
            self.a.place(&done);
            return;
        }
        let mut step = threads / 2;
        if threads > WARP {
            store(self, slot);
            self.a.op("bar.sync 0");
            while step >= WARP {
                let skip = self.a.label();
                let idle = self.a.setp("ge", "u64", tid, step);
                self.a.op(format!("@{idle} bra {skip}"));
                let other_slot = self.a.bin("add.s64", Ty::B64, slot, 8 * step);
                let other = load(self, other_slot, false);
                combine(self, &other);
                // The last step across warps leaves its result in warp 0's
                // registers (no one reads share 0 before it is written).
                if step > WARP {
                    store(self, slot);
                }
                self.a.place(&skip);
                if step > WARP {
                    self.a.op("bar.sync 0");
                }
                step /= 2;
            }
        }
        self.warp_steps(values, step, &mut combine);
        if threads > WARP {
            from_thread_0(self);
        } else {
            self.broadcast_lane_0(values);
        }
    }

    /// The tree's steps within a warp, from `step` down to 1: lane `t`
    /// folds lane `t ^ s`'s values.
    fn warp_steps(
        &mut self,
        values: &[(Ty, R)],
        mut step: u32,
        combine: &mut impl FnMut(&mut Self, &[R]),
    ) {
        while step > 0 {
            let other: Vec<R> = values
                .iter()
                .map(|&(ty, r)| self.shuffle("bfly", ty, r, step))
                .collect();
            combine(self, &other);
            step /= 2;
        }
    }

    /// Lane 0's `values` in every lane of the warp.
    fn broadcast_lane_0(&mut self, values: &[(Ty, R)]) {
        for &(ty, r) in values {
            let v = self.shuffle("idx", ty, r, 0);
            let sfx = if ty == Ty::F64 { "f64" } else { "f32" };
            self.a.op(format!("mov.{sfx} {r}, {v}"));
        }
    }

    /// `r` as held by another lane of this warp: lane `t ^ b` (`bfly`) or
    /// lane `b` (`idx`). A 64-bit value crosses in two 32-bit halves.
    fn shuffle(&mut self, mode: &str, ty: Ty, r: R, b: u32) -> R {
        let one = |e: &mut Self, ty: Ty, x: R| {
            let d = e.a.reg(ty);
            e.a.op(format!(
                "shfl.sync.{mode}.b32 {d}, {x}, {b}, 31, 0xffffffff"
            ));
            d
        };
        if matches!(ty, Ty::F32 | Ty::B32) {
            return one(self, ty, r);
        }
        let bits = match ty {
            Ty::F64 => self.a.un("mov.b64", Ty::B64, r),
            _ => r,
        };
        let lo = self.a.un("cvt.u32.u64", Ty::B32, bits);
        let high = self.a.bin("shr.u64", Ty::B64, bits, 32);
        let hi = self.a.un("cvt.u32.u64", Ty::B32, high);
        let (lo, hi) = (one(self, Ty::B32, lo), one(self, Ty::B32, hi));
        let hi = self.a.un("cvt.u64.u32", Ty::B64, hi);
        let hi = self.a.bin("shl.b64", Ty::B64, hi, 32);
        let lo = self.a.un("cvt.u64.u32", Ty::B64, lo);
        let v = self.a.bin("or.b64", Ty::B64, hi, lo);
        match ty {
            Ty::F64 => self.a.un("mov.b64", Ty::F64, v),
            _ => v,
        }
    }

    /// `acc = acc op x` in `ty` (max and min keep `acc` on ties and when
    /// it is NaN, as the one-thread fold does).
    fn combine(&mut self, op: ReduceOp, ty: Ty, acc: R, x: R) {
        let sfx = if ty == Ty::F64 { "f64" } else { "f32" };
        match op {
            ReduceOp::Sum => self.a.op(format!("add.rn.{sfx} {acc}, {acc}, {x}")),
            _ => {
                let cmp = if op == ReduceOp::Max { "ge" } else { "le" };
                let m = self.first_unless(cmp, acc, x);
                self.a.op(format!("mov.{sfx} {acc}, {m}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{emit, Arch};
    use super::super::in_flight::tests::memory_order;
    use crate::kernel::lower;
    use crate::symbolic::IndexFn;
    use crate::DType;

    #[test]
    fn a_dealt_groups_loads_go_out_before_its_stores() {
        // Rows too long for shared memory: each element's two loads come
        // from global memory. A group's four iterations load all eight
        // values before the first store, then store four; the tail, one
        // iteration at a time, loads and stores in turn.
        let n = 16_384;
        let f = IndexFn::parse(
            &format!("f[i; j] = x[i; j] * w[j] - sum{{k}}_0^{} (x[i; k])", n - 1),
            &[("x", &[64, n][..]), ("w", &[n][..])],
        )
        .unwrap();
        let mut k = lower(&f).unwrap();
        k.threads_per_output = 128;
        k.shared_loops = 1;
        let text = emit(&k, DType::F32, Arch::for_capability(9, 0).unwrap(), "k").unwrap();
        let order = memory_order(&text);
        assert!(order.ends_with("LLLLLLLLSSSSLLS"), "{order}\n{text}");
    }
}
