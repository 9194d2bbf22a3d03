//! [`Program`]: a vectorised output loop as a list of whole-tile steps.
//!
//! Owns the translation of a loop the planner marked
//! [`Loop::vector`](crate::kernel::Loop) into the steps the wide executor
//! (`super::exec`) runs over tiles of [`TILE`] elements: each step computes
//! one register of the loop body for a whole tile, into a tile-sized slot
//! (slots are reused once their value is dead) or, for the stored value,
//! straight into the output. Operands are slots, *streams* (loads
//! contiguous in the loop variable: a pointer per tile) or *scalars*
//! (constants, registers computed outside the loop, loads invariant in it:
//! a tile filled once per call). Must not emit code or run anything.
//!
//! A loop translates when its body has only plain lets (constants,
//! contiguous or invariant loads, unary and binary operations, integer
//! powers), value guards (both sides computed on every lane, a select
//! picks, exactly as the f32x4 code does) and one contiguous store; index
//! guards, reductions inside, random draws and index values keep the f32x4
//! code.

use crate::kernel::{Cond, Expr, IVar, Lin, Loop, Reg, Stmt};
use crate::symbolic::{BinaryOp, UnaryOp};
use std::collections::HashMap;

use super::super::vmath::Cc;

/// Elements per tile: a slot is 1 KiB, so the dozen slots a large body
/// keeps live stay in L1.
pub(crate) const TILE: usize = 256;

/// Streams (and scalars) a program may have; loops with more keep the
/// f32x4 code.
pub(crate) const MAX_STREAMS: usize = 16;

/// Where a step reads an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Src {
    Slot(u16),
    Stream(u16),
    Scalar(u16),
}

/// Where a step writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dst {
    Slot(u16),
    /// The output, at the tile's position.
    Out,
}

/// What a step computes on every lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Op {
    Unary(UnaryOp, Src),
    Binary(BinaryOp, Src, Src),
    PowI(Src, i32),
    /// `then` where `a cc b`, `otherwise` elsewhere.
    Select {
        cc: Cc,
        a: Src,
        b: Src,
        then: Src,
        otherwise: Src,
    },
}

impl Op {
    /// The operands the step reads.
    pub(crate) fn sources(&self) -> Vec<Src> {
        match *self {
            Op::Unary(_, a) | Op::PowI(a, _) => vec![a],
            Op::Binary(_, a, b) => vec![a, b],
            Op::Select {
                a,
                b,
                then,
                otherwise,
                ..
            } => vec![a, b, then, otherwise],
        }
    }

    fn map_sources(&mut self, mut f: impl FnMut(Src) -> Src) {
        match self {
            Op::Unary(_, a) | Op::PowI(a, _) => *a = f(*a),
            Op::Binary(_, a, b) => {
                *a = f(*a);
                *b = f(*b);
            }
            Op::Select {
                a,
                b,
                then,
                otherwise,
                ..
            } => {
                for s in [a, b, then, otherwise] {
                    *s = f(*s);
                }
            }
        }
    }
}

/// One step of a tile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Step {
    /// `dst = op` over the tile, at the executor's width.
    Lanes { op: Op, dst: Dst },
    /// A run of cheap steps compiled as f32x4 code that keeps their
    /// values in registers (`crate::cpu::wide_segment`), called with the
    /// tile's operands: `extern "C" fn(base, streams, out, len)`, where
    /// `base` is the first slot and the scalar tiles follow the slots. It
    /// writes the values that later steps read. The address is filled in
    /// once the kernel's module is finalized.
    Jit { entry: usize },
}

/// A value the caller computes once per call and the executor splats.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    Const(f32),
    /// A register defined outside the loop.
    Reg(Reg),
    /// A load invariant in the loop variable.
    Load {
        arg: usize,
        offset: Lin,
    },
}

/// A vectorised output loop as whole-tile steps (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Program {
    pub(crate) steps: Vec<Step>,
    /// Tile-sized slots the steps use.
    pub(crate) slots: usize,
    /// `(argument, offset)` of each stream, the offset at the loop's first
    /// iteration giving its first element.
    pub(crate) streams: Vec<(usize, Lin)>,
    pub(crate) scalars: Vec<Scalar>,
    /// The stored (or summed) value when no step computes it (a copy of
    /// a stream, a fill with a scalar); `None` when the last step writes
    /// the output.
    pub(crate) copy: Option<Src>,
    /// What becomes of the value.
    pub(crate) output: Output,
}

/// What a program does with the value it computes for each element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Output {
    /// Stored contiguously from this offset (at the loop's first
    /// iteration).
    Store(Lin),
    /// Summed, in a fixed order that depends only on the length
    /// (`super::exec`).
    Sum,
}

impl Program {
    /// The program of the vector output loop `l`, or `None` when its body
    /// has something the executor does not run (see the module
    /// documentation).
    pub(crate) fn build(l: &Loop) -> Option<Program> {
        Program::translate(l, None)
    }

    /// The program of the vectorised sum over `l` of register `value`, or
    /// `None` as for [`Program::build`].
    pub(crate) fn build_sum(l: &Loop, value: Reg) -> Option<Program> {
        Program::translate(l, Some(value))
    }

    fn translate(l: &Loop, sum_of: Option<Reg>) -> Option<Program> {
        let mut b = Builder {
            var: l.var,
            regs: HashMap::new(),
            steps: Vec::new(),
            streams: Vec::new(),
            scalars: Vec::new(),
            store: None,
        };
        b.stmts(&l.body)?;
        let (output, value) = match (sum_of, b.store.clone()) {
            (None, Some((offset, v))) => (Output::Store(offset), v),
            (Some(r), None) => (Output::Sum, b.val(r)),
            _ => return None,
        };
        if b.streams.len() > MAX_STREAMS || b.scalars.len() > MAX_STREAMS {
            return None;
        }
        let (order, value) = schedule(b.steps, value);
        let (steps, slots, copy) = allocate(order, value)?;
        Some(Program {
            steps,
            slots,
            streams: b.streams,
            scalars: b.scalars,
            copy,
            output,
        })
    }

    /// Whether the program runs faster on the wide executor than the
    /// f32x4 code would: its estimated cost per element there is below the
    /// f32x4 code's (`step_costs`). Cheap steps run in compiled segments
    /// at f32x4 cost either way, so a body goes wide exactly when it has a
    /// step the executor computes faster (a transcendental function, see
    /// `BENCHMARKS.md`, "Element-wise code at full width").
    pub(crate) fn prefers_wide(&self) -> bool {
        let (mut narrow, mut wide, mut calls) = (0, 0, self.segments().len() as u32);
        for s in &self.steps {
            if let Step::Lanes { op, .. } = s {
                match cost(op) {
                    Cost::Cheap(n) => (narrow, wide) = (narrow + n, wide + n),
                    Cost::Lanes { f32x4, wide: w } => {
                        (narrow, wide, calls) = (narrow + f32x4, wide + w, calls + 1)
                    }
                }
            }
        }
        // A call per segment and per executor step, per tile.
        wide + calls < narrow
    }

    /// The maximal runs of cheap [`Step::Lanes`] steps (see [`is_cheap`]).
    pub(crate) fn segments(&self) -> Vec<std::ops::Range<usize>> {
        let mut out = Vec::new();
        let mut start = None;
        for (k, s) in self.steps.iter().enumerate() {
            let cheap = matches!(s, Step::Lanes { op, .. } if is_cheap(op));
            match (cheap, start) {
                (true, None) => start = Some(k),
                (false, Some(a)) => {
                    out.push(a..k);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(a) = start {
            out.push(a..self.steps.len());
        }
        out
    }

    /// Whether the value step `k` writes is read after `end` (by a step
    /// past the run `k..end`, before anything writes its slot again); the
    /// output always is.
    pub(crate) fn escapes(&self, k: usize, end: usize) -> bool {
        let slot = match self.steps.get(k) {
            Some(Step::Lanes {
                dst: Dst::Slot(s), ..
            }) => *s,
            _ => return true,
        };
        for (j, s) in self.steps.iter().enumerate().skip(k + 1) {
            let Step::Lanes { op, dst } = s else {
                continue;
            };
            if op.sources().contains(&Src::Slot(slot)) && j >= end {
                return true;
            }
            if *dst == Dst::Slot(slot) {
                return false;
            }
        }
        false
    }
}

/// Whether a step runs in a compiled f32x4 segment rather than on the
/// executor's lanes (see [`cost`]).
pub(crate) fn is_cheap(op: &Op) -> bool {
    matches!(cost(op), Cost::Cheap(_))
}

/// Where a step runs and its cost per element, relative to an addition in
/// f32x4 code (one thread, Zen 4).
enum Cost {
    /// In a compiled f32x4 segment (`crate::cpu::wide_segment`), at the
    /// f32x4 code's cost.
    Cheap(u32),
    /// On the executor's lanes: what the f32x4 code and the executor pay.
    Lanes { f32x4: u32, wide: u32 },
}

/// The rule table: transcendental functions and `pow` run on the
/// executor's lanes, everything else in compiled segments.
fn cost(op: &Op) -> Cost {
    let lanes = |f32x4, wide| Cost::Lanes { f32x4, wide };
    match *op {
        Op::Unary(op, _) => match op {
            UnaryOp::Exp => lanes(30, 10),
            UnaryOp::Sigmoid => lanes(36, 11),
            UnaryOp::Tanh => lanes(45, 13),
            UnaryOp::Log => lanes(40, 10),
            UnaryOp::Log10 => lanes(42, 11),
            UnaryOp::Erf => lanes(90, 25),
            // Lane by lane in both: the same scalar call.
            UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Log1p | UnaryOp::Expm1 | UnaryOp::Atan => {
                lanes(60, 55)
            }
            UnaryOp::Sqrt => Cost::Cheap(4),
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Floor | UnaryOp::Sgn | UnaryOp::Detach => {
                Cost::Cheap(1)
            }
        },
        Op::Binary(BinaryOp::Pow, ..) => lanes(60, 55),
        Op::Binary(BinaryOp::Div, ..) => Cost::Cheap(4),
        Op::Binary(..) | Op::Select { .. } => Cost::Cheap(1),
        Op::PowI(_, n) => {
            let muls = 2 * (32 - n.unsigned_abs().leading_zeros());
            Cost::Cheap(muls + if n < 0 { 4 } else { 0 })
        }
    }
}

/// The steps in an order that groups cheap ones (see [`is_cheap`]) into as
/// few runs as possible: a step's level is the largest number of
/// executor steps on a path to it; executor steps of level `d` come right
/// before the cheap steps of level `d`, each group in program order (a
/// topological order, since operands never have a higher level). Returns
/// the reordered steps, their sources renumbered, and the stored value.
fn schedule(steps: Vec<Op>, stored: Val) -> (Vec<Op>, Val) {
    let mut level = vec![0u32; steps.len()];
    for (k, op) in steps.iter().enumerate() {
        let from = op
            .sources()
            .iter()
            .filter_map(|s| match s {
                Src::Slot(j) => Some(level[*j as usize]),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        level[k] = from + u32::from(!is_cheap(op));
    }
    let mut order: Vec<usize> = (0..steps.len()).collect();
    // Stable: program order within a (level, kind) group.
    order.sort_by_key(|&k| (level[k], is_cheap(&steps[k])));
    let mut new_index = vec![0u16; steps.len()];
    for (pos, &k) in order.iter().enumerate() {
        new_index[k] = pos as u16;
    }
    let renumber = |s: Src| match s {
        Src::Slot(j) => Src::Slot(new_index[j as usize]),
        other => other,
    };
    let reordered = order
        .iter()
        .map(|&k| {
            let mut op = steps[k];
            op.map_sources(renumber);
            op
        })
        .collect();
    (reordered, renumber(stored))
}

/// A value of the body before slots are assigned: the result of a step
/// (by its index), a stream or a scalar.
type Val = Src;

struct Builder {
    var: IVar,
    regs: HashMap<Reg, Val>,
    /// Steps writing to virtual slots: step `k` writes `Slot(k)`.
    steps: Vec<Op>,
    streams: Vec<(usize, Lin)>,
    scalars: Vec<Scalar>,
    store: Option<(Lin, Val)>,
}

impl Builder {
    fn stmts(&mut self, list: &[Stmt]) -> Option<()> {
        for s in list {
            self.stmt(s)?;
        }
        Some(())
    }

    fn val(&mut self, r: Reg) -> Val {
        match self.regs.get(&r) {
            Some(&v) => v,
            None => self.scalar(Scalar::Reg(r)),
        }
    }

    fn scalar(&mut self, s: Scalar) -> Val {
        let k = match self.scalars.iter().position(|x| x == &s) {
            Some(k) => k,
            None => {
                self.scalars.push(s);
                self.scalars.len() - 1
            }
        };
        Src::Scalar(k as u16)
    }

    fn step(&mut self, op: Op) -> Val {
        self.steps.push(op);
        Src::Slot((self.steps.len() - 1) as u16)
    }

    fn stmt(&mut self, s: &Stmt) -> Option<()> {
        match s {
            Stmt::Let(r, e) => {
                let v = self.expr(e)?;
                self.regs.insert(*r, v);
            }
            Stmt::If {
                cond: Cond::Value(a, op, b),
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } => {
                self.stmts(then)?;
                self.stmts(otherwise)?;
                let op = Op::Select {
                    cc: Cc::of(*op),
                    a: self.val(*a),
                    b: self.val(*b),
                    then: self.val(*then_value),
                    otherwise: self.val(*otherwise_value),
                };
                let v = self.step(op);
                self.regs.insert(*result, v);
            }
            Stmt::Store { offset, value } if offset.coeff(self.var) == 1 => {
                if self.store.is_some() {
                    return None;
                }
                let v = self.val(*value);
                self.store = Some((offset.clone(), v));
            }
            Stmt::If { .. } | Stmt::Store { .. } | Stmt::Reduce { .. } | Stmt::For(_) => {
                return None
            }
        }
        Some(())
    }

    fn expr(&mut self, e: &Expr) -> Option<Val> {
        Some(match e {
            Expr::Const(c) => self.scalar(Scalar::Const(*c as f32)),
            Expr::Load { arg, offset } => match offset.coeff(self.var) {
                0 => self.scalar(Scalar::Load {
                    arg: *arg,
                    offset: offset.clone(),
                }),
                1 => {
                    let key = (*arg, offset.clone());
                    let k = match self.streams.iter().position(|x| x == &key) {
                        Some(k) => k,
                        None => {
                            self.streams.push(key);
                            self.streams.len() - 1
                        }
                    };
                    Src::Stream(k as u16)
                }
                _ => return None,
            },
            Expr::Unary(UnaryOp::Detach, a) => self.val(*a),
            Expr::Unary(op, a) => {
                let a = self.val(*a);
                self.step(Op::Unary(*op, a))
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.val(*a), self.val(*b));
                self.step(Op::Binary(*op, a, b))
            }
            Expr::PowI(a, n) => {
                let a = self.val(*a);
                self.step(Op::PowI(a, *n))
            }
            // A constant read at run time: the program's scalars are fixed
            // when it is built.
            Expr::Index(_) | Expr::Random { .. } | Expr::ConstParam(_) => return None,
        })
    }
}

/// The steps the stored value needs, with slots assigned (a slot is reused
/// once the last step reading it has run; a step may write the slot of an
/// operand it reads last, since lanes are computed in place), the number of
/// slots, and the stored value when no step computes it.
fn allocate(steps: Vec<Op>, stored: Val) -> Option<(Vec<Step>, usize, Option<Src>)> {
    let Src::Slot(root) = stored else {
        return Some((Vec::new(), 0, Some(stored)));
    };
    let root = root as usize;
    // Live steps: those the stored value depends on.
    let mut live = vec![false; steps.len()];
    live[root] = true;
    for k in (0..=root).rev() {
        if live[k] {
            for s in steps[k].sources() {
                if let Src::Slot(j) = s {
                    live[j as usize] = true;
                }
            }
        }
    }
    // The values each step reads for the last time.
    let mut last_use: Vec<Option<usize>> = vec![None; steps.len()];
    for (k, op) in steps.iter().enumerate().filter(|(k, _)| live[*k]) {
        for s in op.sources() {
            if let Src::Slot(j) = s {
                last_use[j as usize] = Some(k);
            }
        }
    }
    let mut dies_at: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (j, k) in last_use.iter().enumerate() {
        if let Some(k) = *k {
            dies_at[k].push(j);
        }
    }
    let mut slot_of: Vec<Option<u16>> = vec![None; steps.len()];
    let mut free: Vec<u16> = Vec::new();
    let mut slots = 0u16;
    let mut out = Vec::new();
    for (k, mut op) in steps.into_iter().enumerate().take(root + 1) {
        if !live[k] {
            continue;
        }
        let mut missing = false;
        op.map_sources(|s| match s {
            Src::Slot(j) => match slot_of[j as usize] {
                Some(slot) => Src::Slot(slot),
                None => {
                    missing = true;
                    s
                }
            },
            other => other,
        });
        if missing {
            return None;
        }
        // Operands read for the last time free their slots first.
        free.extend(dies_at[k].iter().filter_map(|&j| slot_of[j]));
        let dst = if k == root {
            Dst::Out
        } else {
            let s = free.pop().unwrap_or_else(|| {
                slots += 1;
                slots - 1
            });
            slot_of[k] = Some(s);
            Dst::Slot(s)
        };
        out.push(Step::Lanes { op, dst });
    }
    Some((out, slots as usize, None))
}
