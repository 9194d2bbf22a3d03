//! The kernel IR's statements and expressions as PTX instructions (the
//! lowering rules; the element operations themselves in `scalar`, the
//! grid-stride loop that replaces the output loops in `grid`). See the
//! parent module for the rules every instruction follows.

use super::asm::{f32_lit, f64_lit, Asm, Ty, R};
use crate::kernel::{Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Reg, Stmt};
use crate::symbolic::{CmpOp, ReduceOp};
use crate::DType;

mod grid;
mod half;
mod in_flight;
mod launch;
mod narrow;
mod random;
mod row_cache;
mod scalar;
mod serial_rows;
mod team;
mod value_row;
mod vector;

use launch::Size;
pub(crate) use serial_rows::leading_rows;
pub(crate) use vector::Group;

type Res<T> = Result<T, String>;

/// The emitted body: register declarations and code.
pub(super) struct Body {
    pub(super) declarations: String,
    pub(super) code: String,
}

/// Emission state of one kernel.
pub(super) struct Emitter<'k> {
    k: &'k Kernel,
    a: Asm,
    /// The kernel's element type as a register type.
    w: Ty,
    /// Its PTX suffix (`f32`/`f64`) and element size in bytes.
    sfx: &'static str,
    size: i64,
    out: R,
    args: Vec<R>,
    /// The output coordinates of the current thread, outermost first.
    coords: Vec<R>,
    /// A block of threads per output element (`Kernel::threads_per_output`
    /// above 1).
    team: Option<team::Team>,
    /// Loops (output loops aside) around the statement being emitted.
    loop_depth: u32,
    /// Inside the output loop a row team deals out (`Kernel::shared_loops`):
    /// every thread stores its own elements.
    dealt: bool,
    /// A group's stores, held back until after its last element or
    /// iteration (`in_flight`, `team::strided_in_groups`): `None` where
    /// stores go out in place.
    deferred: Option<Vec<String>>,
    /// A row team's rows held in shared memory (`row_cache`).
    row_cache: Option<row_cache::RowCache>,
    /// A row team's computed values held in shared memory (`value_row`).
    value_row: Option<value_row::ValueRow>,
    /// The integer values' register type and suffix: `(B32, "s32")` when
    /// every one fits (`narrow`), else `(B64, "s64")`.
    int: (Ty, &'static str),
    /// Several elements per thread with vector accesses (`vector`).
    group: Option<Group>,
    /// The lane whose registers `reg` and `ivar` name (0 outside a group).
    lane: u32,
    /// The rows of a leading output dimension each thread runs in turn
    /// (`serial_rows`).
    serial: Option<usize>,
}

fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        // NaN compares unequal: the unordered-or-not-equal test.
        CmpOp::Ne => "neu",
        CmpOp::Ge => "ge",
        CmpOp::Gt => "gt",
        CmpOp::Le => "le",
        CmpOp::Lt => "lt",
    }
}

impl<'k> Emitter<'k> {
    pub(super) fn kernel(
        k: &'k Kernel,
        dtype: DType,
        bits: super::IndexBits,
        access: super::Access,
    ) -> Res<Body> {
        let (w, sfx, size) = match dtype {
            DType::F32 => (Ty::F32, "f32", 4),
            DType::F64 => (Ty::F64, "f64", 8),
            d => return Err(format!("kernels compute in F32 or F64, not {d:?}")),
        };
        if dtype != DType::F32 && !k.buffers.is_uniform() {
            return Err("half buffers belong to f32 kernels".into());
        }
        let int = if bits == super::IndexBits::Fitting && narrow::fits_in_32_bits(k) {
            (Ty::B32, "s32")
        } else {
            (Ty::B64, "s64")
        };
        let group = match access {
            super::Access::VectorWhereAligned => Group::of(k, dtype),
            super::Access::Scalar => None,
        };
        let lanes = group.map_or(1, |g| g.lanes);
        let mut a = Asm::new((int.0, k.num_ivars * lanes), (w, k.num_regs * lanes));
        let out = a.reg(Ty::B64);
        a.op(format!("ld.param.u64 {out}, [out]"));
        a.op(format!("cvta.to.global.u64 {out}, {out}"));
        let args = (0..k.args.len())
            .map(|i| {
                let r = a.reg(Ty::B64);
                a.op(format!("ld.param.u64 {r}, [a{i}]"));
                a.op(format!("cvta.to.global.u64 {r}, {r}"));
                r
            })
            .collect();
        launch::load_constants(&mut a, k, int.0, lanes);
        // (Shared rows are sized by the row: compiled in.) The value row
        // first; the rows then cache what its statements leave.
        let shared_rows = group.is_none() && k.params.is_empty();
        let values = shared_rows
            .then(|| value_row::ValueRow::of(k, size))
            .flatten();
        let row_cache = match &values {
            Some((_, rest)) => row_cache::RowCache::of(rest, size),
            None if shared_rows => row_cache::RowCache::of(k, size),
            None => None,
        };
        let mut e = Emitter {
            k,
            a,
            w,
            sfx,
            size,
            out,
            args,
            coords: Vec::new(),
            team: None,
            loop_depth: 0,
            dealt: false,
            deferred: None,
            row_cache,
            value_row: values.map(|(v, _)| v),
            int,
            group,
            lane: 0,
            serial: None,
        };
        e.grid_stride()?;
        let shared = e
            .team
            .as_ref()
            .map_or(String::new(), team::Team::declaration)
            + &e.row_cache
                .as_ref()
                .map_or(String::new(), |c| c.declarations(size))
            + &e.value_row
                .as_ref()
                .map_or(String::new(), |v| v.declaration(size));
        Ok(Body {
            declarations: shared + &e.a.declarations(),
            code: std::mem::take(&mut e.a.body),
        })
    }

    /// The integer values' move suffix: `b32` or `b64` (`Emitter::int`).
    fn int_bits(&self) -> &'static str {
        if self.int.0 == Ty::B32 {
            "b32"
        } else {
            "b64"
        }
    }

    /// The register of scalar `r` in the current lane.
    fn reg(&self, r: Reg) -> R {
        self.reg_in(r, self.lane)
    }

    fn reg_in(&self, r: Reg, lane: u32) -> R {
        R {
            ty: self.w,
            n: r.0 + lane * self.k.num_regs,
        }
    }

    /// The register of integer value `v` in the current lane.
    fn ivar(&self, v: IVar) -> R {
        R {
            ty: self.int.0,
            n: v.0 + self.lane * self.k.num_ivars,
        }
    }

    /// An integer instruction: `op` with the integer suffix (`add` →
    /// `add.s32`), `d = a op b` for a fresh `d`.
    fn int_op(&mut self, op: &str, a: impl std::fmt::Display, b: impl std::fmt::Display) -> R {
        let (ty, sfx) = self.int;
        self.a.bin(&format!("{op}.{sfx}"), ty, a, b)
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Res<()> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> Res<()> {
        if self.deferred.is_some() && !matches!(s, Stmt::Let(..) | Stmt::Store { .. }) {
            // A store under a branch or in an inner loop goes out where it
            // stands: only the group's own stores are held back.
            let held = self.deferred.take();
            let done = self.stmt(s);
            self.deferred = held;
            return done;
        }
        match s {
            Stmt::Let(r, e) => self.let_(*r, e),
            Stmt::If {
                cond,
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } => {
                let p = self.cond(cond)?;
                let (else_l, end_l) = (self.a.label(), self.a.label());
                let sfx = self.sfx;
                let res = self.reg(*result);
                self.a.op(format!("@!{p} bra {else_l}"));
                self.stmts(then)?;
                let tv = self.reg(*then_value);
                self.a.op(format!("mov.{sfx} {res}, {tv}"));
                self.a.op(format!("bra.uni {end_l}"));
                self.a.place(&else_l);
                self.stmts(otherwise)?;
                let ov = self.reg(*otherwise_value);
                self.a.op(format!("mov.{sfx} {res}, {ov}"));
                self.a.place(&end_l);
                Ok(())
            }
            Stmt::Reduce {
                op,
                value,
                result,
                body,
                wide,
            } => self.reduce(*op, *value, *result, body, *wide),
            Stmt::For(l) => {
                if l.vector {
                    return Err("vector loops are the CPU backend's".into());
                }
                self.counted(l, |_, _, _| Ok(()))
            }
            Stmt::Store { offset, value } => {
                let v = self.reg(*value);
                let store = match self.k.buffers.out {
                    Some(half) => {
                        let addr = self.address_of(self.out, offset, 2)?;
                        self.store_half(v, half, addr)?
                    }
                    None => {
                        let addr = self.address(self.out, offset)?;
                        let v = self.store_operand(v);
                        format!("st.global.{} [{addr}], {v}", self.sfx)
                    }
                };
                match &self.team {
                    // Every thread of the team holds the value; one stores.
                    Some(team) if !self.dealt => {
                        let p = self.a.setp("ne", "u64", team.tid, 0);
                        let skip = self.a.label();
                        self.a.op(format!("@{p} bra {skip}"));
                        self.a.op(store);
                        self.a.place(&skip);
                    }
                    // (Stores are held back only where each thread stores
                    // its own elements: no team, or a dealt row.)
                    _ => self.put_store(store),
                }
                Ok(())
            }
        }
    }

    /// `l`'s loop: its statements, then `fold(k, first k)` at every
    /// iteration.
    fn counted(&mut self, l: &Loop, fold: impl FnMut(&mut Self, R, R) -> Res<()>) -> Res<()> {
        self.strided(l, None, Size::Known(1), fold)
    }

    /// `l`'s loop from its lower bound plus `first` (when given) in steps
    /// of `step`: its statements, then `fold(k, first k)` at every
    /// iteration.
    fn strided(
        &mut self,
        l: &Loop,
        first: Option<R>,
        step: Size,
        mut fold: impl FnMut(&mut Self, R, R) -> Res<()>,
    ) -> Res<()> {
        let lo = self.bounds(&l.lower, true)?;
        let hi = self.bounds(&l.upper, false)?;
        let k = self.ivar(l.var);
        let isfx = self.int.1;
        let (head, done) = (self.a.label(), self.a.label());
        let start = match first {
            Some(f) => self.int_op("add", lo, f),
            None => lo,
        };
        let bits = self.int_bits();
        self.a.op(format!("mov.{bits} {k}, {start}"));
        self.a.place(&head);
        let p = self.a.setp("gt", isfx, k, hi);
        self.a.op(format!("@{p} bra {done}"));
        self.loop_depth += 1;
        self.stmts(&l.body)?;
        fold(self, k, start)?;
        self.loop_depth -= 1;
        self.a.op(format!("add.{isfx} {k}, {k}, {step}"));
        self.a.op(format!("bra.uni {head}"));
        self.a.place(&done);
        Ok(())
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        value: Reg,
        result: Reg,
        body: &Loop,
        wide: bool,
    ) -> Res<()> {
        let (w, sfx) = (self.w, self.sfx);
        let res = self.reg(result);
        if body.vector {
            return Err("vector loops are the CPU backend's".into());
        }
        if self.loop_depth == 0 && self.team.is_some() {
            return self.team_reduce(op, value, res, body, wide);
        }
        match op {
            ReduceOp::Sum if wide => {
                let acc = self.a.f64_const(0.0);
                self.counted(body, |e, _, _| {
                    let x = e.reg(value);
                    let xw = if w == Ty::F64 {
                        x
                    } else {
                        e.a.un("cvt.f64.f32", Ty::F64, x)
                    };
                    e.a.op(format!("add.rn.f64 {acc}, {acc}, {xw}"));
                    Ok(())
                })?;
                if w == Ty::F64 {
                    self.a.op(format!("mov.f64 {res}, {acc}"));
                } else {
                    self.a.op(format!("cvt.rn.f32.f64 {res}, {acc}"));
                }
            }
            ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min => {
                let init = match op {
                    ReduceOp::Sum => 0.0,
                    ReduceOp::Max => f64::NEG_INFINITY,
                    _ => f64::INFINITY,
                };
                let acc = self.constant(init);
                self.counted(body, |e, _, _| {
                    let x = e.reg(value);
                    match op {
                        ReduceOp::Sum => e.a.op(format!("add.rn.{sfx} {acc}, {acc}, {x}")),
                        _ => {
                            let cmp = if op == ReduceOp::Max { "ge" } else { "le" };
                            let m = e.first_unless(cmp, acc, x);
                            e.a.op(format!("mov.{sfx} {acc}, {m}"));
                        }
                    }
                    Ok(())
                })?;
                self.a.op(format!("mov.{sfx} {res}, {acc}"));
            }
            ReduceOp::ArgMax | ReduceOp::ArgMin => {
                let idx = self.constant(-1.0);
                let best = self.constant(0.0);
                self.counted(body, |e, k, lo| {
                    let x = e.reg(value);
                    e.arg_fold(op, k, lo, x, (best, idx));
                    Ok(())
                })?;
                self.a.op(format!("mov.{sfx} {res}, {idx}"));
            }
        }
        Ok(())
    }

    /// One step of an argmax (argmin) fold over iterations from `first`:
    /// the first iteration always takes its value; later ones a strictly
    /// better one, and a NaN beats a number. `(best, idx)` are updated.
    fn arg_fold(&mut self, op: ReduceOp, k: R, first: R, x: R, (best, idx): (R, R)) {
        let (w, sfx) = (self.w, self.sfx);
        let cmp = if op == ReduceOp::ArgMax { "gt" } else { "lt" };
        let is_first = self.a.setp("eq", self.int.1, k, first);
        let better = self.a.setp(cmp, sfx, x, best);
        let x_nan = self.a.setp("nan", sfx, x, x);
        let best_num = self.a.setp("num", sfx, best, best);
        let take = self.a.reg(Ty::Pred);
        self.a.op(format!("and.pred {take}, {x_nan}, {best_num}"));
        self.a.op(format!("or.pred {take}, {take}, {better}"));
        self.a.op(format!("or.pred {take}, {take}, {is_first}"));
        let kf = self.a.un(&format!("cvt.rn.{sfx}.{}", self.int.1), w, k);
        self.a.op(format!("selp.{sfx} {idx}, {kf}, {idx}, {take}"));
        self.a.op(format!("selp.{sfx} {best}, {x}, {best}, {take}"));
    }

    /// `c` as a literal of the element type.
    fn lit(&self, c: f64) -> String {
        if self.w == Ty::F64 {
            f64_lit(c)
        } else {
            f32_lit(c as f32)
        }
    }

    /// A fresh register of the element type holding `c`.
    fn constant(&mut self, c: f64) -> R {
        let (w, sfx, lit) = (self.w, self.sfx, self.lit(c));
        self.a.un(&format!("mov.{sfx}"), w, lit)
    }

    /// `a cmp b || a is NaN ? a : b` (max with `ge`, min with `le`).
    fn first_unless(&mut self, cmp: &str, a: R, b: R) -> R {
        let (w, sfx) = (self.w, self.sfx);
        let c = self.a.setp(cmp, sfx, a, b);
        let nan = self.a.setp("nan", sfx, a, a);
        self.a.op(format!("or.pred {c}, {c}, {nan}"));
        self.a.select(w, a, b, c)
    }

    /// The value of `l` (s32 or s64, see `narrow`).
    fn lin(&mut self, l: &Lin) -> Res<R> {
        let (ty, sfx) = self.int;
        let mut acc: Option<R> = None;
        for &(v, c) in &l.terms {
            if v.0 >= self.k.num_ivars {
                return Err(format!("unknown integer value {v}"));
            }
            // A run-time stride's variable: its index times the stride.
            let x = match self.k.strides.iter().find(|s| s.var == v) {
                Some(s) => {
                    let (i, p) = (self.ivar(s.index), self.ivar(s.stride));
                    self.int_op("mul.lo", i, p)
                }
                None => self.ivar(v),
            };
            acc = Some(match (acc, c) {
                (None, 1) => x,
                (None, c) => self.a.bin(&format!("mul.lo.{sfx}"), ty, x, c),
                (Some(a), 1) => self.int_op("add", a, x),
                (Some(a), c) => {
                    let d = self.a.reg(ty);
                    self.a.op(format!("mad.lo.{sfx} {d}, {x}, {c}, {a}"));
                    d
                }
            });
        }
        Ok(match acc {
            None if ty == Ty::B32 => self.a.un("mov.b32", Ty::B32, l.constant),
            None => self.a.i64_const(l.constant),
            Some(a) if l.constant == 0 => a,
            Some(a) => self.int_op("add", a, l.constant),
        })
    }

    /// The maximum of the rounded-up (`ceil`) or the minimum of the
    /// rounded-down bounds.
    fn bounds(&mut self, list: &[Bound], ceil: bool) -> Res<R> {
        let mut acc: Option<R> = None;
        for b in list {
            let v = self.bound(b, ceil)?;
            acc = Some(match acc {
                None => v,
                Some(a) => self.int_op(if ceil { "max" } else { "min" }, a, v),
            });
        }
        acc.ok_or_else(|| "a loop without bounds".to_string())
    }

    /// `⌈num/den⌉` or `⌊num/den⌋` for `den > 0`: truncating division fixed
    /// up by the remainder's sign.
    fn bound(&mut self, b: &Bound, ceil: bool) -> Res<R> {
        let n = self.lin(&b.num)?;
        if b.den == 1 {
            return Ok(n);
        }
        if b.den <= 0 {
            return Err(format!("bound denominator {}", b.den));
        }
        let q = self.int_op("div", n, b.den);
        let r = self.int_op("rem", n, b.den);
        let (cmp, step) = if ceil { ("gt", 1) } else { ("lt", -1) };
        let p = self.a.setp(cmp, self.int.1, r, 0);
        let q2 = self.int_op("add", q, step);
        Ok(self.a.select(self.int.0, q2, q, p))
    }

    fn cond(&mut self, c: &Cond) -> Res<R> {
        Ok(match c {
            Cond::Index(l, op) => {
                let v = self.lin(l)?;
                self.a.setp(cmp_name(*op), self.int.1, v, 0)
            }
            Cond::Divisible(l, d) => {
                let v = self.lin(l)?;
                let r = self.int_op("rem", v, d);
                self.a.setp("eq", self.int.1, r, 0)
            }
            Cond::Value(x, op, y) => {
                let (x, y) = (self.reg(*x), self.reg(*y));
                let sfx = self.sfx;
                self.a.setp(cmp_name(*op), sfx, x, y)
            }
        })
    }

    /// `base + offset · element size`.
    fn address(&mut self, base: R, offset: &Lin) -> Res<R> {
        self.address_of(base, offset, self.size)
    }

    /// `base + offset · size` (a half buffer's elements are 2 bytes).
    fn address_of(&mut self, base: R, offset: &Lin, size: i64) -> Res<R> {
        let off = self.lin(offset)?;
        let d = self.a.reg(Ty::B64);
        let mad = if self.int.0 == Ty::B32 {
            "mad.wide.s32"
        } else {
            "mad.lo.s64"
        };
        self.a.op(format!("{mad} {d}, {off}, {size}, {base}"));
        Ok(d)
    }

    fn let_(&mut self, r: Reg, e: &Expr) -> Res<()> {
        if r.0 >= self.k.num_regs {
            return Err(format!("unknown register {r}"));
        }
        let d = self.reg(r);
        let sfx = self.sfx;
        let v = match e {
            Expr::Const(c) => {
                let lit = self.lit(*c);
                self.a.op(format!("mov.{sfx} {d}, {lit}"));
                return Ok(());
            }
            Expr::Load { arg, offset } => {
                if self.cached_read(d, *arg, offset) {
                    return Ok(());
                }
                let base = *self
                    .args
                    .get(*arg)
                    .ok_or_else(|| format!("load of unknown argument {arg}"))?;
                if let Some(half) = self.k.buffers.arg(*arg) {
                    let addr = self.address_of(base, offset, 2)?;
                    return self.load_half(d, half, addr);
                }
                let addr = self.address(base, offset)?;
                self.a.op(format!("ld.global.{sfx} {d}, [{addr}]"));
                return Ok(());
            }
            Expr::Index(l) => {
                let v = self.lin(l)?;
                self.a.op(format!("cvt.rn.{sfx}.{} {d}, {v}", self.int.1));
                return Ok(());
            }
            Expr::ConstParam(p) => {
                // The bits of an f64, rounded to the element type as a
                // compiled-in literal is (`cvt.rn`: `as f32`).
                let j = self
                    .k
                    .params
                    .iter()
                    .position(|q| q.0 == *p)
                    .ok_or_else(|| format!("a float constant in unknown parameter {p}"))?;
                let bits = self.a.reg(Ty::B64);
                self.a.op(format!("ld.param.u64 {bits}, [p{j}]"));
                if self.w == Ty::F64 {
                    self.a.op(format!("mov.b64 {d}, {bits}"));
                } else {
                    let wide = self.a.un("mov.b64", Ty::F64, bits);
                    self.a.op(format!("cvt.rn.f32.f64 {d}, {wide}"));
                }
                return Ok(());
            }
            Expr::Random { key, counter } => {
                let n = self.lin(counter)?;
                self.random(key.map(|k| self.reg(k)), n)
            }
            Expr::Unary(op, x) => self.unary(*op, self.reg(*x)),
            Expr::Binary(op, x, y) => self.binary(*op, self.reg(*x), self.reg(*y)),
            Expr::PowI(x, n) => self.powi_const(self.reg(*x), *n),
        };
        self.a.op(format!("mov.{sfx} {d}, {v}"));
        Ok(())
    }
}
