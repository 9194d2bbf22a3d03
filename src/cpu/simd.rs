//! Vectorised f32 output loops and sums: the f32x4 code.
//!
//! Owns the translation of the loops the planner marked
//! [`Loop::vector`](crate::kernel::Loop) (`crate::planner::vectorize`
//! decides which, and documents the conditions): output loops
//! (`Emitter::vector_loop`) and sums whose reduction loop reads contiguous
//! memory (`Emitter::vector_sum`). Must not decide what to vectorise, lower
//! index functions, nor touch f64 kernels (they stay scalar, sums strictly
//! in index order).
//!
//! The loop runs as three strips over `[lo, hi]`: 16 elements per iteration
//! (four f32x4 copies of the body), then 4, then 1. The one-element strip
//! runs the *same* f32x4 code on a splatted scalar and keeps lane 0, and all
//! transcendental functions are inline (`super::vmath`) or per-lane calls,
//! so an element's bits do not depend on the strip it falls in; hence not on
//! where the thread pool cuts the parallel loop either.
//!
//! A vectorised sum is reordered: partial sums per lane, combined in a
//! fixed order (see `Emitter::vector_sum`) that depends only on the sum's
//! range, never on threads (which split only the outermost output loop).
//! It therefore differs from the interpreter's left-to-right sum by
//! rounding, within the f32 tolerance, but is bitwise identical for any
//! thread count. Max/min/arg reductions stay scalar.
//!
//! Each marked loop or sum is first offered to the wide executor
//! (`Emitter::try_wide_loop`, `Emitter::try_wide_sum` in
//! `super::wide_loop`): where the host has AVX2 or AVX-512 and the body's
//! transcendental work makes it worth it, the loop becomes one call and
//! none of the code here is emitted. The executor computes the same bits
//! for every element; its sums add in their own fixed order (four
//! accumulators of 8 or 16 lanes), so they differ from this code's by
//! rounding, and are still independent of the thread count.

use super::clif_lanes::ClifLanes;
use super::codegen::{Emitter, R};
use super::math::MathFn;
use super::trips::Reach;
use super::vmath::{Cc, Lanes as _, VMath};
use crate::kernel::{Cond, Expr, IVar, Lin, Loop, Reg, Stmt};
use crate::symbolic::ReduceOp;
use crate::symbolic::{BinaryOp, UnaryOp};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, BlockArg, InstBuilder, MemFlagsData, Value};

const V: types::Type = types::F32X4;

/// Elements per vector.
use crate::kernel::LANES;

/// Whether a strip computes four elements or one (in lane 0).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lanes {
    Four,
    One,
}

impl<'f> Emitter<'f> {
    /// The vectorised sum over `l` of the register `value` (see
    /// `crate::planner::vectorize::reduction_vectorizable`), in a fixed order that depends only on
    /// the loop's range: four f32x4 partial sums over 16 elements per
    /// iteration (only when the loop may run 16 times), combined as
    /// `(p0 + p1) + (p2 + p3)`; then one f32x4 partial sum over 4 elements
    /// per iteration; its lanes combined as `(l0 + l1) + (l2 + l3)`; then
    /// the remaining elements added one by one in index order.
    pub(super) fn vector_sum(&mut self, l: &Loop, value: Reg) -> R<Value> {
        if let Some(s) = self.try_wide_sum(l, value)? {
            self.vectorized_reductions += 1;
            return Ok(s);
        }
        self.narrow_sum(l, value)
    }

    /// [`Emitter::vector_sum`] in f32x4 code.
    pub(super) fn narrow_sum(&mut self, l: &Loop, value: Reg) -> R<Value> {
        let slot = l.var.0 as usize;
        if slot >= self.ivars.len() {
            return Err(format!("loop variable {} out of range", l.var));
        }
        let (lo, hi) = self.range(l)?;
        let saved = self.ivars[slot];
        self.vbranch = true;
        let zero = self.vm().c(0.0);
        // The 16-element strip, where the sum may run 16 times; a sum
        // shorter than that skips it and adds the same values in the same
        // order as without it (from `(0 + 0) + (0 + 0)`, `+0` as `zero`).
        let (k, acc) = if self.reach(l, 4 * LANES as u64) != Reach::No {
            let (k, p) = self.sum_strip(l, value, lo, hi, 4, Lanes::Four, &[zero; 4])?;
            let p01 = self.b.ins().fadd(p[0], p[1]);
            let p23 = self.b.ins().fadd(p[2], p[3]);
            (k, self.b.ins().fadd(p01, p23))
        } else {
            (lo, zero)
        };
        let (k, p) = self.sum_strip(l, value, k, hi, 1, Lanes::Four, &[acc])?;
        let lane: Vec<Value> = (0..LANES as u8)
            .map(|i| self.b.ins().extractlane(p[0], i))
            .collect();
        let s01 = self.b.ins().fadd(lane[0], lane[1]);
        let s23 = self.b.ins().fadd(lane[2], lane[3]);
        let s = self.b.ins().fadd(s01, s23);
        let (_, s) = self.sum_strip(l, value, k, hi, 1, Lanes::One, &[s])?;
        self.ivars[slot] = saved;
        self.vbranch = false;
        self.vectorized_reductions += 1;
        Ok(s[0])
    }

    /// A rotated loop from `k0` while a whole step fits before `hi`
    /// (inclusive), each iteration adding `copies` copies of the body's
    /// `value` on consecutive groups of `lanes` into the accumulators
    /// `init` (one per copy: f32x4 for four lanes, f32 for one). Returns
    /// the first index not done and the accumulators.
    #[allow(clippy::too_many_arguments)]
    fn sum_strip(
        &mut self,
        l: &Loop,
        value: Reg,
        k0: Value,
        hi: Value,
        copies: i64,
        lanes: Lanes,
        init: &[Value],
    ) -> R<(Value, Vec<Value>)> {
        let width = if lanes == Lanes::Four { LANES } else { 1 };
        let step = width * copies;
        let ty = if lanes == Lanes::Four { V } else { types::F32 };
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let k = self.b.append_block_param(body, types::I64);
        let acc: Vec<Value> = init
            .iter()
            .map(|_| self.b.append_block_param(body, ty))
            .collect();
        let done = self.b.append_block_param(exit, types::I64);
        let out: Vec<Value> = init
            .iter()
            .map(|_| self.b.append_block_param(exit, ty))
            .collect();
        let last = self.b.ins().iadd_imm_s(hi, 1 - step);
        let enter = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, k0, last);
        let a0: Vec<BlockArg> = std::iter::once(k0)
            .chain(init.iter().copied())
            .map(BlockArg::Value)
            .collect();
        self.b.ins().brif(enter, body, &a0, exit, &a0);
        self.b.switch_to_block(body);
        let mut next = Vec::with_capacity(acc.len());
        for u in 0..copies {
            let ku = if u == 0 {
                k
            } else {
                self.b.ins().iadd_imm_s(k, u * width)
            };
            self.ivars[l.var.0 as usize] = Some(ku);
            self.vregs.iter_mut().for_each(|r| *r = None);
            for s in &l.body {
                self.vstmt(s, l.var, lanes)?;
            }
            let v = self.vreg(value)?;
            let a = *acc.get(u as usize).ok_or("too few accumulators")?;
            next.push(if lanes == Lanes::Four {
                self.b.ins().fadd(a, v)
            } else {
                let x = self.b.ins().extractlane(v, 0);
                self.b.ins().fadd(a, x)
            });
        }
        self.vregs.iter_mut().for_each(|r| *r = None);
        let k1 = self.b.ins().iadd_imm_s(k, step);
        let again = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, k1, last);
        let a1: Vec<BlockArg> = std::iter::once(k1)
            .chain(next.iter().copied())
            .map(BlockArg::Value)
            .collect();
        self.b.ins().brif(again, body, &a1, exit, &a1);
        self.b.switch_to_block(exit);
        Ok((done, out))
    }
}

impl<'f> Emitter<'f> {
    /// The vectorised form of the output loop `l` (see the module
    /// documentation).
    pub(super) fn vector_loop(&mut self, l: &Loop) -> R<()> {
        if self.try_wide_loop(l)? {
            return Ok(());
        }
        self.narrow_loop(l)
    }

    /// [`Emitter::vector_loop`] in f32x4 code.
    pub(super) fn narrow_loop(&mut self, l: &Loop) -> R<()> {
        let slot = l.var.0 as usize;
        if slot >= self.ivars.len() {
            return Err(format!("loop variable {} out of range", l.var));
        }
        let (lo, hi) = self.range(l)?;
        let saved = self.ivars[slot];
        // Index guards are invariant in the loop (see `vectorizable`): real
        // branches.
        let branch = std::mem::replace(&mut self.vbranch, true);
        let k = self.strip(l, lo, hi, 4, Lanes::Four)?;
        let k = self.strip(l, k, hi, 1, Lanes::Four)?;
        self.strip(l, k, hi, 1, Lanes::One)?;
        self.vbranch = branch;
        self.ivars[slot] = saved;
        self.vectorized = true;
        Ok(())
    }

    /// A rotated loop from `k0` while a whole step fits before `hi`
    /// (inclusive), each iteration running `copies` copies of the body on
    /// consecutive groups of `lanes`. Returns the first index not done.
    fn strip(&mut self, l: &Loop, k0: Value, hi: Value, copies: i64, lanes: Lanes) -> R<Value> {
        let width = if lanes == Lanes::Four { LANES } else { 1 };
        let step = width * copies;
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let k = self.b.append_block_param(body, types::I64);
        let done = self.b.append_block_param(exit, types::I64);
        let last = self.b.ins().iadd_imm_s(hi, 1 - step);
        let enter = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, k0, last);
        let a0 = [BlockArg::Value(k0)];
        self.b.ins().brif(enter, body, &a0, exit, &a0);
        self.b.switch_to_block(body);
        let ks: Vec<Value> = (0..copies)
            .map(|u| {
                if u == 0 {
                    k
                } else {
                    self.b.ins().iadd_imm_s(k, u * width)
                }
            })
            .collect();
        // Each copy has its own registers; statements are emitted copy by
        // copy, except that a reduction runs one loop for all copies (one
        // accumulator each), so a column sum reads whole cache lines per
        // row instead of walking the rows once per copy.
        let fresh = vec![None; self.vregs.len()];
        let mut regs: Vec<Vec<Option<Value>>> = vec![fresh; ks.len()];
        for s in &l.body {
            match s {
                Stmt::Reduce {
                    op,
                    value,
                    result,
                    body: inner,
                    wide,
                } if ks.len() > 1 => {
                    let out = self.blocked_reduction(
                        *op, *value, inner, l.var, lanes, &ks, &mut regs, *wide,
                    )?;
                    for (u, v) in out.into_iter().enumerate() {
                        std::mem::swap(&mut self.vregs, &mut regs[u]);
                        self.vset(*result, v)?;
                        std::mem::swap(&mut self.vregs, &mut regs[u]);
                    }
                }
                _ => {
                    for (u, &ku) in ks.iter().enumerate() {
                        self.ivars[l.var.0 as usize] = Some(ku);
                        std::mem::swap(&mut self.vregs, &mut regs[u]);
                        let r = self.vstmt(s, l.var, lanes);
                        std::mem::swap(&mut self.vregs, &mut regs[u]);
                        r?;
                    }
                }
            }
        }
        let k1 = self.b.ins().iadd_imm_s(k, step);
        let again = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, k1, last);
        let a1 = [BlockArg::Value(k1)];
        self.b.ins().brif(again, body, &a1, exit, &a1);
        self.b.switch_to_block(exit);
        Ok(done)
    }

    fn vm(&mut self) -> ClifLanes<'_, 'f> {
        ClifLanes {
            b: &mut self.b,
            fma: self.fma,
            ty: V,
        }
    }

    fn splat(&mut self, x: Value) -> Value {
        self.b.ins().splat(V, x)
    }

    /// The vector value of `r`: defined in the loop body, or a splatted
    /// scalar defined outside it.
    fn vreg(&mut self, r: Reg) -> R<Value> {
        if let Some(Some(v)) = self.vregs.get(r.0 as usize) {
            return Ok(*v);
        }
        let s = self.reg(r)?;
        Ok(self.splat(s))
    }

    fn vset(&mut self, r: Reg, v: Value) -> R<()> {
        match self.vregs.get_mut(r.0 as usize) {
            Some(slot) => {
                *slot = Some(v);
                Ok(())
            }
            None => Err(format!("register {r} out of range")),
        }
    }

    /// The distance in elements between consecutive lanes of `offset`
    /// along the vector loop's `var`: its coefficient, or `None` when it
    /// is read at run time (`Kernel::strides`).
    fn lane_stride(&self, offset: &Lin, var: IVar) -> Option<i64> {
        match self.run_time_stride(offset, var) {
            Some(_) => None,
            None => Some(offset.coeff(var)),
        }
    }

    /// The address of lane `i` of `offset`, whose lane 0 is at `addr`, as
    /// a base and a constant byte offset.
    fn lane_address(&mut self, addr: Value, offset: &Lin, var: IVar, i: i64) -> R<(Value, i32)> {
        if let Some(stride) = self.run_time_stride(offset, var) {
            let stride = self.ivar(stride)?;
            let bytes = self.b.ins().imul_imm_s(stride, i * self.elem);
            return Ok((self.b.ins().iadd(addr, bytes), 0));
        }
        let at = (i * offset.coeff(var))
            .checked_mul(self.elem)
            .and_then(|b| i32::try_from(b).ok())
            .ok_or("a strided access's offset out of range")?;
        Ok((addr, at))
    }

    fn vstmt(&mut self, s: &Stmt, var: IVar, lanes: Lanes) -> R<()> {
        match s {
            Stmt::Let(r, e) => {
                let v = self.vexpr(e, var, lanes)?;
                self.vset(*r, v)
            }
            Stmt::Store { offset, value } => {
                let v = self.vreg(*value)?;
                let addr = self.out_address(offset)?;
                if lanes == Lanes::Four && self.lane_stride(offset, var) == Some(1) {
                    let flags = MemFlagsData::new().with_notrap();
                    self.b.ins().store(flags, v, addr, 0);
                } else {
                    // One lane, or a strided write (a phase of an
                    // output split by residue, `crate::planner::residues`):
                    // lane i stores element `offset + i·stride`.
                    let count = if lanes == Lanes::Four { LANES } else { 1 };
                    for i in 0..count {
                        let (at, bytes) = self.lane_address(addr, offset, var, i)?;
                        let x = self.b.ins().extractlane(v, i as u8);
                        self.b.ins().store(MemFlagsData::trusted(), x, at, bytes);
                    }
                }
                Ok(())
            }
            Stmt::If {
                cond: cond @ (Cond::Index(..) | Cond::Divisible(..)),
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } if self.vbranch => {
                // Invariant in the vector loop: all lanes take one branch.
                let c = self.cond(cond)?;
                let (tb, eb, merge) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                let res = self.b.append_block_param(merge, V);
                self.b.ins().brif(c, tb, &[], eb, &[]);
                for (block, list, value) in
                    [(tb, then, then_value), (eb, otherwise, otherwise_value)]
                {
                    self.b.switch_to_block(block);
                    for st in list {
                        self.vstmt(st, var, lanes)?;
                    }
                    let v = self.vreg(*value)?;
                    self.b.ins().jump(merge, &[BlockArg::Value(v)]);
                }
                self.b.switch_to_block(merge);
                self.vset(*result, res)
            }
            Stmt::If {
                cond,
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } => {
                // Both branches are safe to run (see `vectorizable` and
                // `reduction_vectorizable`).
                for st in then.iter().chain(otherwise) {
                    self.vstmt(st, var, lanes)?;
                }
                let t = self.vreg(*then_value)?;
                let o = self.vreg(*otherwise_value)?;
                let v = match cond {
                    Cond::Value(a, op, b) => {
                        let (a, b) = (self.vreg(*a)?, self.vreg(*b)?);
                        let mut vm = self.vm();
                        let m = vm.cmp(Cc::of(*op), a, b);
                        vm.sel(m, t, o)
                    }
                    _ => {
                        let c = self.cond(cond)?;
                        self.b.ins().select(c, t, o)
                    }
                };
                self.vset(*result, v)
            }
            Stmt::Reduce {
                op,
                value,
                result,
                body,
                wide,
            } => {
                let r = self.lane_reduction(*op, *value, body, var, lanes, *wide)?;
                self.vset(*result, r)
            }
            Stmt::For(_) => Err("a loop inside a vectorised loop".into()),
        }
    }

    /// The reduction `l` of every copy of a strip's body in one loop, one
    /// accumulator per copy (`ks`: the output loop's value for each copy,
    /// `regs`: each copy's registers). Each lane folds its own values in
    /// index order, as the scalar loop does.
    #[allow(clippy::too_many_arguments)]
    fn blocked_reduction(
        &mut self,
        op: ReduceOp,
        value: Reg,
        l: &Loop,
        var: IVar,
        lanes: Lanes,
        ks: &[Value],
        regs: &mut [Vec<Option<Value>>],
        wide: bool,
    ) -> R<Vec<Value>> {
        // An argmax or argmin carries each lane's index and best value.
        let init: &[f32] = match op {
            ReduceOp::Sum => &[0.0],
            ReduceOp::Max => &[f32::NEG_INFINITY],
            ReduceOp::Min => &[f32::INFINITY],
            ReduceOp::ArgMax | ReduceOp::ArgMin => &[-1.0, 0.0],
        };
        // Only the outer loop of a sum split into blocks is `wide`.
        if wide {
            return match &l.body[..] {
                [Stmt::Reduce {
                    op: ReduceOp::Sum,
                    value: block_value,
                    result,
                    body: block,
                    wide: false,
                }] if op == ReduceOp::Sum && result == &value => {
                    self.block_sums(l, *block_value, block, var, lanes, ks, regs)
                }
                _ => {
                    Err("a wide sum inside a vectorised loop that is not split into blocks".into())
                }
            };
        }
        let per_copy = init.len();
        let inits: Vec<Value> = init.iter().map(|&x| self.vm().c(x)).collect();
        let inits: Vec<Value> = (0..ks.len()).flat_map(|_| inits.clone()).collect();
        let out = self.counted_loop(l, &inits, V, |e, k, lo, acc| {
            let branch = std::mem::replace(&mut e.vbranch, true);
            let mut next = Vec::with_capacity(acc.len());
            for (u, &ku) in ks.iter().enumerate() {
                e.ivars[var.0 as usize] = Some(ku);
                std::mem::swap(&mut e.vregs, &mut regs[u]);
                let folded = (|| {
                    for s in &l.body {
                        e.vstmt(s, var, lanes)?;
                    }
                    let x = e.vreg(value)?;
                    let acc = &acc[u * per_copy..(u + 1) * per_copy];
                    Ok::<Vec<Value>, String>(match op {
                        ReduceOp::ArgMax | ReduceOp::ArgMin => e.arg_fold(op, acc, x, k, lo),
                        _ => vec![e.fold(op, acc[0], x)],
                    })
                })();
                std::mem::swap(&mut e.vregs, &mut regs[u]);
                next.extend(folded?);
            }
            e.vbranch = branch;
            Ok(next)
        })?;
        // Each copy's result: its sum or extreme, or its index.
        Ok(out.chunks(per_copy).map(|c| c[0]).collect())
    }

    /// One step of a per-lane argmax (argmin) over `[index, best]`: as the
    /// scalar loop, a lane takes `x` and the iteration's index `k` on the
    /// first iteration (`k = lo`), when `x` is strictly better than its
    /// best, or when `x` is a NaN and its best is not.
    fn arg_fold(
        &mut self,
        op: ReduceOp,
        acc: &[Value],
        x: Value,
        k: Value,
        lo: Value,
    ) -> Vec<Value> {
        let (index, best) = (acc[0], acc[1]);
        let first = self.b.ins().icmp(IntCC::Equal, k, lo);
        let kf = self.b.ins().fcvt_from_sint(types::F32, k);
        let kf = self.b.ins().splat(V, kf);
        let all = self.vm().c(f32::from_bits(u32::MAX));
        let none = self.vm().c(0.0);
        let first = self.b.ins().select(first, all, none);
        let mut vm = self.vm();
        let cc = if op == ReduceOp::ArgMax {
            Cc::Gt
        } else {
            Cc::Lt
        };
        let better = vm.cmp(cc, x, best);
        let x_nan = vm.cmp(Cc::Unordered, x, x);
        let best_number = vm.cmp(Cc::Eq, best, best);
        let nan = vm.and_m(x_nan, best_number);
        let take = vm.or_m(better, nan);
        let take = vm.or_m(take, first);
        vec![vm.sel(take, kf, index), vm.sel(take, x, best)]
    }

    /// The outer, `wide` loop of a blocked sum over `l` whose body is the
    /// block's sum over `block` (`crate::planner::blocked_sums`): the
    /// block loop runs once for all copies, the rows of a block too (so the
    /// copies still read whole cache lines per row), and each lane of each
    /// copy adds its block sums into an f64 of its own, rounded once at the
    /// end.
    #[allow(clippy::too_many_arguments)]
    fn block_sums(
        &mut self,
        l: &Loop,
        block_value: Reg,
        block: &Loop,
        var: IVar,
        lanes: Lanes,
        ks: &[Value],
        regs: &mut [Vec<Option<Value>>],
    ) -> R<Vec<Value>> {
        let per_copy = LANES as usize;
        let zero = self.b.ins().f64const(0.0);
        let inits = vec![zero; ks.len() * per_copy];
        let out = self.counted_loop(l, &inits, types::F64, |e, _, _, acc| {
            let sums = e.blocked_reduction(
                ReduceOp::Sum,
                block_value,
                block,
                var,
                lanes,
                ks,
                regs,
                false,
            )?;
            let mut next = Vec::with_capacity(acc.len());
            for (u, s) in sums.into_iter().enumerate() {
                for i in 0..per_copy {
                    let x = e.b.ins().extractlane(s, i as u8);
                    let x = e.b.ins().fpromote(types::F64, x);
                    next.push(e.b.ins().fadd(acc[u * per_copy + i], x));
                }
            }
            Ok(next)
        })?;
        Ok(out
            .chunks(per_copy)
            .map(|lanes64| {
                let mut v = self.vm().c(0.0);
                for (i, &x) in lanes64.iter().enumerate() {
                    let x = self.b.ins().fdemote(types::F32, x);
                    v = self.b.ins().insertlane(v, x, i as u8);
                }
                v
            })
            .collect())
    }

    /// `acc op x` for a per-lane reduction (the first operand wins ties).
    fn fold(&mut self, op: ReduceOp, acc: Value, x: Value) -> Value {
        match op {
            ReduceOp::Sum => self.b.ins().fadd(acc, x),
            _ => {
                let mut vm = self.vm();
                if op == ReduceOp::Max {
                    vm.max_first(acc, x)
                } else {
                    vm.min_first(acc, x)
                }
            }
        }
    }

    /// A reduction inside a vectorised output loop (see `Check::stmt_ok`):
    /// every lane folds its own values in index order, exactly as the
    /// scalar loop does, so the bits do not depend on the strip. The
    /// blocked reduction of the one copy the loop runs.
    fn lane_reduction(
        &mut self,
        op: ReduceOp,
        value: Reg,
        l: &Loop,
        var: IVar,
        lanes: Lanes,
        wide: bool,
    ) -> R<Value> {
        let k = self.ivars[var.0 as usize].ok_or("a reduction outside its vector loop")?;
        let mut regs = [std::mem::take(&mut self.vregs)];
        let out = self.blocked_reduction(op, value, l, var, lanes, &[k], &mut regs, wide);
        self.vregs = std::mem::take(&mut regs[0]);
        Ok(out?[0])
    }

    fn vexpr(&mut self, e: &Expr, var: IVar, lanes: Lanes) -> R<Value> {
        Ok(match e {
            Expr::Const(c) => self.vm().c(*c as f32),
            Expr::ConstParam(v) => {
                let x = self.const_param(*v)?;
                self.splat(x)
            }
            Expr::Load { arg, offset } => {
                let addr = self.arg_address(*arg, offset)?;
                let stride = self.lane_stride(offset, var);
                if lanes == Lanes::Four && stride == Some(1) {
                    // Unaligned: no `aligned` flag.
                    let flags = MemFlagsData::new().with_notrap().with_readonly();
                    self.b.ins().load(V, flags, addr, 0)
                } else {
                    let flags = MemFlagsData::trusted().with_readonly();
                    let x = self.b.ins().load(types::F32, flags, addr, 0);
                    let mut out = self.splat(x);
                    if lanes == Lanes::Four && stride != Some(0) {
                        // A strided read (a pool's or a strided
                        // convolution's window): lane i loads element
                        // `offset + i·stride`, as the scalar strip would.
                        for i in 1..LANES {
                            let (at, bytes) = self.lane_address(addr, offset, var, i)?;
                            let xi = self.b.ins().load(types::F32, flags, at, bytes);
                            out = self.b.ins().insertlane(out, xi, i as u8);
                        }
                    }
                    out
                }
            }
            Expr::Index(l) => {
                // Lane i holds the index at the loop variable's i-th value,
                // converted on its own (exactly what the one-lane strip
                // computes for that element).
                let v = self.lin(l, 1)?;
                let x = self.b.ins().fcvt_from_sint(types::F32, v);
                let mut out = self.splat(x);
                let c = l.coeff(var);
                if lanes == Lanes::Four && c != 0 {
                    for i in 1..LANES {
                        let vi = self.b.ins().iadd_imm_s(v, i * c);
                        let xi = self.b.ins().fcvt_from_sint(types::F32, vi);
                        out = self.b.ins().insertlane(out, xi, i as u8);
                    }
                }
                out
            }
            Expr::Random { key, counter } => {
                // Lane i: the scalar value at the loop variable's i-th value
                // (the key taken from the same lane).
                let key = [self.vreg(key[0])?, self.vreg(key[1])?, self.vreg(key[2])?];
                let n = self.lin(counter, 1)?;
                let c = counter.coeff(var);
                let count = if lanes == Lanes::Four { LANES } else { 1 };
                let mut out = None;
                for i in 0..count {
                    let k = key.map(|v| self.b.ins().extractlane(v, i as u8));
                    let ni = if i == 0 {
                        n
                    } else {
                        self.b.ins().iadd_imm_s(n, i * c)
                    };
                    let x = self.random(k, ni, types::F32);
                    out = Some(match out {
                        None => self.splat(x),
                        Some(v) => self.b.ins().insertlane(v, x, i as u8),
                    });
                }
                out.ok_or("a vector of no lanes")?
            }
            Expr::Unary(op, a) => {
                let a = self.vreg(*a)?;
                self.vunary(*op, a, lanes)?
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.vreg(*a)?, self.vreg(*b)?);
                self.vbinary(*op, a, b, lanes)?
            }
            Expr::PowI(a, n) => {
                let a = self.vreg(*a)?;
                self.vpowi(a, *n)
            }
        })
    }

    fn vunary(&mut self, op: UnaryOp, x: Value, lanes: Lanes) -> R<Value> {
        let mut vm = self.vm();
        Ok(match op {
            UnaryOp::Neg => vm.b.ins().fneg(x),
            UnaryOp::Abs => vm.b.ins().fabs(x),
            UnaryOp::Sqrt => vm.b.ins().sqrt(x),
            UnaryOp::Floor => vm.b.ins().floor(x),
            UnaryOp::Detach => x,
            UnaryOp::Sgn => vm.sgn(x),
            UnaryOp::Exp => vm.exp(x),
            UnaryOp::Tanh => vm.tanh(x),
            UnaryOp::Sigmoid => vm.sigmoid(x),
            UnaryOp::Log => vm.log(x),
            UnaryOp::Log10 => vm.log10(x),
            UnaryOp::Erf => vm.erf(x),
            // The scalar f32 functions, lane by lane.
            UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Atan => {
                let f = MathFn::of(op).ok_or_else(|| format!("{op:?} has no function"))?;
                return self.per_lane(f, &[x], lanes);
            }
        })
    }

    fn vbinary(&mut self, op: BinaryOp, a: Value, b: Value, lanes: Lanes) -> R<Value> {
        let mut vm = self.vm();
        Ok(match op {
            BinaryOp::Add => vm.b.ins().fadd(a, b),
            BinaryOp::Sub => vm.b.ins().fsub(a, b),
            BinaryOp::Mul => vm.b.ins().fmul(a, b),
            BinaryOp::Div => vm.b.ins().fdiv(a, b),
            // As the scalar code: the first operand wins ties, a NaN
            // operand wins.
            BinaryOp::Max => vm.max_first(a, b),
            BinaryOp::Min => vm.min_first(a, b),
            BinaryOp::Pow => return self.per_lane(MathFn::Pow, &[a, b], lanes),
        })
    }

    /// Calls the scalar f32 function on each lane (on lane 0 only, splatted,
    /// for a one-lane strip).
    fn per_lane(&mut self, f: MathFn, xs: &[Value], lanes: Lanes) -> R<Value> {
        let n = if lanes == Lanes::Four { LANES as u8 } else { 1 };
        let mut acc: Option<Value> = None;
        for i in 0..n {
            let args: Vec<Value> = xs.iter().map(|&x| self.b.ins().extractlane(x, i)).collect();
            let y = self.call(f, &args)?;
            acc = Some(match acc {
                None => self.splat(y),
                Some(v) => self.b.ins().insertlane(v, y, i),
            });
        }
        acc.ok_or_else(|| "no lanes".to_string())
    }

    /// `x ** n` with the same multiplications as the scalar `powi`.
    fn vpowi(&mut self, x: Value, n: i32) -> Value {
        self.vm().powi(x, n)
    }
}
