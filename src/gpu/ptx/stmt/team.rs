//! A block of threads per output element: the lowering of a top-level
//! reduction spread over the block (`Kernel::threads_per_output`).
//!
//! Every thread of the block runs the output's statements (all hold the
//! same values), except that a top-level sum, max or min is folded in
//! shares: thread `t` folds iterations `lo + t`, `lo + t + T`, … in order
//! (adjacent threads read adjacent elements), stores its share in shared
//! memory, and after a barrier the shares combine in a tree — at step
//! `s = T/2, T/4, …, 1` thread `t < s` folds the share of `t + s` into its
//! own, a barrier after each step. Every thread then reads the result
//! from share 0 (and a last barrier lets the next reduction reuse the
//! shares). The order depends only on `T` and the bounds, so results are
//! bitwise the same from run to run. A `wide` sum keeps its shares and the
//! tree in f64. Must not decide which kernels are spread (the planner
//! does, `crate::planner::spread`).

use super::super::asm::{Asm, Ty, R};
use super::{Emitter, Res};
use crate::kernel::{Loop, Reg};
use crate::symbolic::ReduceOp;

/// The shared-memory array of the shares, 8 bytes a thread.
const SHARES: &str = "tenjin_shares";

/// The block's threads and the current thread's place among them.
pub(super) struct Team {
    /// Threads per output (a power of two, the launch's block size).
    threads: u32,
    /// The thread's index in the block (u64).
    pub(super) tid: R,
    /// The address of share 0 and of this thread's share (u64, shared
    /// window).
    base: R,
    slot: R,
}

impl Team {
    /// The registers of a team of `threads` (checked: a power of two a
    /// block can hold) for the thread `tid`.
    pub(super) fn new(a: &mut Asm, threads: u32, tid: R) -> Res<Team> {
        if !threads.is_power_of_two() || threads > 1024 {
            return Err(format!(
                "{threads} threads per output: a block holds a power of two up to 1024"
            ));
        }
        let base = a.un("mov.u64", Ty::B64, SHARES);
        let slot = a.reg(Ty::B64);
        a.op(format!("mad.lo.s64 {slot}, {tid}, 8, {base}"));
        Ok(Team {
            threads,
            tid,
            base,
            slot,
        })
    }

    /// The module-level declaration of the shares.
    pub(super) fn declaration(&self) -> String {
        format!(
            "\t.shared .align 8 .b8 {SHARES}[{}];\n",
            8 * self.threads as usize
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
        let (tid, base, slot, threads) = match &self.team {
            Some(t) => (t.tid, t.base, t.slot, t.threads),
            None => return Err("internal: a team reduction outside a team".into()),
        };
        let wide = wide && op == ReduceOp::Sum;
        // The type the shares are kept in.
        let (acc_ty, acc_sfx) = if wide {
            (Ty::F64, "f64")
        } else {
            (self.w, self.sfx)
        };
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
        self.strided(body, Some(tid), threads, |e, _, _| {
            let x = e.reg(value);
            let x = if wide && w == Ty::F32 {
                e.a.un("cvt.f64.f32", Ty::F64, x)
            } else {
                x
            };
            e.combine(op, acc_ty, acc, x);
            Ok(())
        })?;
        self.a.op(format!("st.shared.{acc_sfx} [{slot}], {acc}"));
        self.a.op("bar.sync 0");
        let mut step = threads / 2;
        while step > 0 {
            let skip = self.a.label();
            let idle = self.a.setp("ge", "u64", tid, step);
            self.a.op(format!("@{idle} bra {skip}"));
            let at = self.a.bin("add.s64", Ty::B64, slot, 8 * step);
            let other = self.a.reg(acc_ty);
            self.a.op(format!("ld.shared.{acc_sfx} {other}, [{at}]"));
            self.combine(op, acc_ty, acc, other);
            self.a.op(format!("st.shared.{acc_sfx} [{slot}], {acc}"));
            self.a.place(&skip);
            self.a.op("bar.sync 0");
            step /= 2;
        }
        self.a.op(format!("ld.shared.{acc_sfx} {acc}, [{base}]"));
        self.a.op("bar.sync 0");
        if acc_ty == self.w {
            self.a.op(format!("mov.{} {res}, {acc}", self.sfx));
        } else {
            self.a.op(format!("cvt.rn.f32.f64 {res}, {acc}"));
        }
        Ok(())
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
