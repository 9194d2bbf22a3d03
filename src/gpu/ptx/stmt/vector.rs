//! Element-wise kernels with 16-byte loads and stores: each thread
//! computes a group of consecutive output elements (4 f32 or 2 f64) and
//! moves each contiguous operand with one `ld.global.v4.f32` /
//! `v2.f64` instead of one instruction per element.
//!
//! A kernel qualifies when it is element-wise (its statements are lets
//! and the store, inside the output loops: no guard, sum or inner loop),
//! one thread computes one element, the innermost output dimension is a
//! multiple of the group (a group never crosses a row) and the store
//! walks that dimension with step 1. In a group, the *lanes* are the
//! innermost coordinates `c, c+1, …` with `c` a multiple of the group;
//! every other value is per lane (registers renumbered by lane). A load
//! whose offset steps by 1 along the innermost dimension, and whose other
//! terms keep lane 0's offset a multiple of the group, is one vector
//! load; one that does not depend on it is loaded once and copied; any
//! other is loaded lane by lane. Whether every buffer's address is
//! 16-byte aligned is checked once per launch: if not, the kernel runs its
//! scalar loop instead, so alignment never decides correctness.
//!
//! A thread's groups go two at a time while two are left, their stores
//! held back until after the second ([`VECTORS_IN_FLIGHT`], `in_flight`),
//! so two groups' loads are in flight together.
//!
//! Owns the decision and the lane bookkeeping; the instructions are the
//! parent emitter's. Must not change what a kernel computes: the lanes
//! run the scalar statements in the scalar order (tests hold both forms
//! bitwise equal).

use super::{Emitter, Res, Size};
use crate::gpu::ptx::asm::{Ty, R};
use crate::kernel::{Expr, IVar, Kernel, Lin, Reg, Stmt};
use crate::DType;

/// Vector groups a thread has in flight (`in_flight`): two, not the
/// scalar loop's four, since a group's lanes already hold four values
/// each. `ptxas` for sm_90: a 16M `exp` and a chain of `tanh`, `exp` and
/// a division use 32 registers a thread with two groups in flight (32 and
/// 30 with one); with four, 34 and 45, which would leave fewer threads
/// resident per multiprocessor.
const VECTORS_IN_FLIGHT: u32 = 2;

/// The group a qualifying kernel's threads compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// Elements per thread: 16 bytes of the element type.
    pub(crate) lanes: u32,
    /// The innermost output loop's variable (lane `l` holds `c + l`).
    pub(super) inner: IVar,
}

/// How lane 0 of a group reaches `offset` (lanes `1..` follow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// One vector access: consecutive and 16-byte aligned when the base is.
    Vector,
    /// The same element for every lane: one access, copied.
    Shared,
    /// Lane by lane.
    PerLane,
}

impl Group {
    /// The group `k` runs with in `dtype`, or `None` for a scalar kernel.
    pub(crate) fn of(k: &Kernel, dtype: DType) -> Option<Group> {
        let lanes = match dtype {
            DType::F32 => 4,
            DType::F64 => 2,
            _ => return None,
        };
        // (Half buffers are read and written one element at a time.)
        if k.threads_per_output != 1 || k.out_shape.is_empty() || !k.buffers.is_uniform() {
            return None;
        }
        let last = *k.out_shape.last()?;
        if last == 0 || last % lanes as usize != 0 {
            return None;
        }
        let inner = innermost_output_var(&k.body, k.out_shape.len())?;
        let group = Group { lanes, inner };
        let mut stores = 0;
        let store_steps = element_wise(&k.body, k.out_shape.len(), &mut |offset| {
            stores += 1;
            group.access(k, offset) == Access::Vector
        });
        (store_steps && stores == 1).then_some(group)
    }

    /// How an access at `offset` of `k` runs in a group (at `k`'s values
    /// of its run-time strides and constants: [`Kernel::resolve`]).
    pub(super) fn access(&self, k: &Kernel, offset: &Lin) -> Access {
        let offset = &k.resolve(offset);
        let step = coefficient(offset, self.inner);
        let n = self.lanes as i64;
        let aligned = offset.constant % n == 0
            && offset
                .terms
                .iter()
                .all(|&(v, c)| v == self.inner || c % n == 0);
        match step {
            0 => Access::Shared,
            1 if aligned => Access::Vector,
            _ => Access::PerLane,
        }
    }
}

fn coefficient(l: &Lin, v: IVar) -> i64 {
    l.terms
        .iter()
        .filter(|&&(x, _)| x == v)
        .map(|&(_, c)| c)
        .sum()
}

/// The variable of the output loop at depth `levels − 1`.
fn innermost_output_var(stmts: &[Stmt], levels: usize) -> Option<IVar> {
    let l = stmts.iter().find_map(|s| match s {
        Stmt::For(l) => Some(l),
        _ => None,
    })?;
    if levels == 1 {
        Some(l.var)
    } else {
        innermost_output_var(&l.body, levels - 1)
    }
}

/// Whether `stmts` (at an output level, `levels` output loops deep) hold
/// only lets, stores and the output loops, with every store accepted by
/// `store`.
fn element_wise(stmts: &[Stmt], levels: usize, store: &mut impl FnMut(&Lin) -> bool) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Let(..) => true,
        Stmt::Store { offset, .. } => store(offset),
        Stmt::For(l) if levels > 0 && !l.vector => element_wise(&l.body, levels - 1, store),
        _ => false,
    })
}

impl Emitter<'_> {
    /// The group loop: when every buffer is 16-byte aligned, threads
    /// stride over groups of `g.lanes` outputs (`idx` is the thread's
    /// first group, `stride` the grid) and return; otherwise control falls
    /// through to the scalar loop emitted after this.
    pub(super) fn group_loop(
        &mut self,
        g: Group,
        (idx, stride): (R, R),
        (dims, total, narrow): (&[Size], Size, bool),
    ) -> Res<()> {
        let bytes = (g.lanes as i64 * self.size) as u64;
        let a = &mut self.a;
        let scalar = a.label();
        let mut any = self.out;
        for &base in &self.args {
            any = a.bin("or.b64", Ty::B64, any, base);
        }
        let low = a.bin("and.b64", Ty::B64, any, bytes - 1);
        let misaligned = a.setp("ne", "u64", low, 0);
        a.op(format!("@{misaligned} bra {scalar}"));
        let groups = match total {
            Size::Known(n) => Size::Known(n / g.lanes as u64),
            Size::Read(n) => Size::Read(a.bin("div.u64", Ty::B64, n, g.lanes)),
        };
        let group = a.reg(Ty::B64);
        a.op(format!("mov.b64 {group}, {idx}"));
        self.element_groups(VECTORS_IN_FLIGHT, (group, stride), groups, |e, first| {
            let first = e.a.bin("mul.lo.u64", Ty::B64, first, g.lanes);
            e.coords = e.coordinates(first, dims, narrow);
            e.output_level(&e.k.body, 0, Some(g))
        })?;
        let a = &mut self.a;
        let (head, done) = (a.label(), a.label());
        a.place(&head);
        let p = a.setp("ge", "u64", group, groups);
        a.op(format!("@{p} bra {done}"));
        let first = a.bin("mul.lo.u64", Ty::B64, group, g.lanes);
        self.coords = self.coordinates(first, dims, narrow);
        self.output_level(&self.k.body, 0, Some(g))?;
        let a = &mut self.a;
        a.op(format!("add.s64 {group}, {group}, {stride}"));
        a.op(format!("bra.uni {head}"));
        a.place(&done);
        a.op("ret");
        a.place(&scalar);
        Ok(())
    }

    /// Statement `s` (a let or the store: `Group::of` admits nothing else)
    /// for every lane of `g`.
    pub(super) fn group_stmt(&mut self, g: Group, s: &Stmt) -> Res<()> {
        match s {
            Stmt::Let(r, Expr::Load { arg, offset }) => self.group_load(g, *r, *arg, offset),
            Stmt::Let(..) => {
                for lane in 0..g.lanes {
                    self.lane = lane;
                    self.stmt(s)?;
                }
                self.lane = 0;
                Ok(())
            }
            Stmt::Store { offset, value } if g.access(self.k, offset) == Access::Vector => {
                let addr = self.address(self.out, offset)?;
                let (n, sfx) = (g.lanes, self.sfx);
                let values = (0..n)
                    .map(|lane| {
                        let v = self.reg_in(*value, lane);
                        self.store_operand(v).to_string()
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                self.put_store(format!("st.global.v{n}.{sfx} [{addr}], {{{values}}}"));
                Ok(())
            }
            _ => Err("internal: a statement a group cannot run".into()),
        }
    }

    /// `r = args[arg][offset]` in every lane of `g`.
    fn group_load(&mut self, g: Group, r: Reg, arg: usize, offset: &Lin) -> Res<()> {
        let load = Stmt::Let(
            r,
            Expr::Load {
                arg,
                offset: offset.clone(),
            },
        );
        match g.access(self.k, offset) {
            Access::Vector => {
                let base = *self
                    .args
                    .get(arg)
                    .ok_or_else(|| format!("load of unknown argument {arg}"))?;
                let addr = self.address(base, offset)?;
                let regs = self.lanes_of(g, r);
                let (n, sfx) = (g.lanes, self.sfx);
                self.a
                    .op(format!("ld.global.v{n}.{sfx} {{{regs}}}, [{addr}]"));
            }
            Access::Shared => {
                self.stmt(&load)?;
                let (first, sfx) = (self.reg_in(r, 0), self.sfx);
                for lane in 1..g.lanes {
                    let d = self.reg_in(r, lane);
                    self.a.op(format!("mov.{sfx} {d}, {first}"));
                }
            }
            Access::PerLane => {
                for lane in 0..g.lanes {
                    self.lane = lane;
                    self.stmt(&load)?;
                }
                self.lane = 0;
            }
        }
        Ok(())
    }

    /// `r`'s registers in every lane, as a vector operand's list.
    fn lanes_of(&self, g: Group, r: Reg) -> String {
        (0..g.lanes)
            .map(|lane| self.reg_in(r, lane).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
