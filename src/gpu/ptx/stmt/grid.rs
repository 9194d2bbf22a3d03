//! The output loops as the launch's grid: the grid-stride loop over a
//! thread's output elements (four at a time where `in_flight` applies,
//! vector groups through `vector`, a short leading dimension through
//! `serial_rows`, a team's block per output through `team`), each
//! element's coordinates from its flat index, and the output levels down
//! to the statements (a row team's innermost loop dealt out among its
//! threads).
//!
//! Owns [`Emitter::grid_stride`], [`Emitter::coordinates`],
//! [`Emitter::output_level`] and the checks that an output loop covers its
//! dimension. Must not decide the grid's size (the backend launches it)
//! nor emit a statement's own instructions (the parent emitter does).

use super::super::asm::{Ty, R};
use super::{serial_rows, team, Emitter, Group, Res, Size};
use crate::kernel::{Bound, Lin, Loop, Stmt, END, START};

impl Emitter<'_> {
    /// `for idx = global thread id; idx < total; idx += grid size`, with
    /// the output coordinates decomposed from `idx` and the kernel's
    /// statements inside.
    pub(super) fn grid_stride(&mut self) -> Res<()> {
        // A row team's threads share the innermost output loops: the
        // blocks stride over the others' points (`Kernel::teams`).
        let own = self.k.out_shape.len().saturating_sub(self.k.shared_loops);
        let known: Vec<u64> = if self.k.out_shape.is_empty() {
            vec![1]
        } else {
            self.k.out_shape[..own].iter().map(|&d| d as u64).collect()
        };
        let count: u64 = known.iter().product();
        let (start, end) = (self.ivar(START), self.ivar(END));
        let bits = self.int_bits();
        self.a.op(format!("mov.{bits} {start}, 0"));
        self.load_extent(end);
        if count == 0 {
            self.a.op("ret");
            return Ok(());
        }
        let (mut dims, mut total) = self.output_sizes(&known);
        // A short leading dimension run in turn: the threads stride over
        // the columns alone.
        self.serial = serial_rows::leading_rows(self.k).filter(|_| self.group.is_none());
        if self.serial.is_some() {
            dims.remove(0);
            total = self.product(&dims);
        }
        let a = &mut self.a;
        // 32-bit divisions when the count fits.
        let narrow = count <= u32::MAX as u64;
        let ctaid = a.un("mov.u32", Ty::B32, "%ctaid.x");
        let ntid = a.un("mov.u32", Ty::B32, "%ntid.x");
        let tid = a.un("mov.u32", Ty::B32, "%tid.x");
        let nctaid = a.un("mov.u32", Ty::B32, "%nctaid.x");
        let t64 = a.un("cvt.u64.u32", Ty::B64, tid);
        let (idx, stride) = if self.k.threads_per_output > 1 {
            // A block per output element: the block strides over them.
            let first = match self.int.0 {
                Ty::B32 => a.un("cvt.u32.u64", Ty::B32, t64),
                _ => t64,
            };
            // A kernel with run-time constants reads its team's size at
            // launch too (`team`).
            let read = (!self.k.params.is_empty()).then_some(self.int.0);
            let team = team::Team::new(a, self.k.threads_per_output, (t64, first), read)?;
            self.team = Some(team);
            let a = &mut self.a;
            let idx = a.un("cvt.u64.u32", Ty::B64, ctaid);
            (idx, a.un("cvt.u64.u32", Ty::B64, nctaid))
        } else {
            let base = a.bin("mul.wide.u32", Ty::B64, ctaid, ntid);
            let idx = a.bin("add.s64", Ty::B64, base, t64);
            (idx, a.bin("mul.wide.u32", Ty::B64, ntid, nctaid))
        };
        if let Some(g) = self.group {
            self.group_loop(g, (idx, stride), (&dims, total, narrow))?;
        } else if self.team.is_none() && self.serial.is_none() {
            self.element_groups(team::IN_FLIGHT, (idx, stride), total, |e, idx| {
                e.coords = e.coordinates(idx, &dims, narrow);
                e.output_level(&e.k.body, 0, None)
            })?;
        }
        let a = &mut self.a;
        let head = a.label();
        let done = a.label();
        a.place(&head);
        let p = a.setp("ge", "u64", idx, total);
        a.op(format!("@{p} bra {done}"));
        let mut coords = self.coordinates(idx, &dims, narrow);
        if self.serial.is_some() {
            // (The leading loop's variable is set per row, not from here.)
            coords.insert(0, idx);
        }
        self.coords = coords;
        let body = &self.k.body;
        self.output_level(body, 0, None)?;
        let a = &mut self.a;
        a.op(format!("add.s64 {idx}, {idx}, {stride}"));
        a.op(format!("bra.uni {head}"));
        a.place(&done);
        a.op("ret");
        Ok(())
    }

    /// The output coordinates of flat index `idx` over `dims`, outermost
    /// first (32-bit divisions when `narrow`: the total fits).
    pub(super) fn coordinates(&mut self, idx: R, dims: &[Size], narrow: bool) -> Vec<R> {
        let a = &mut self.a;
        let mut coords = vec![idx; dims.len()];
        if narrow {
            let mut rest = a.un("cvt.u32.u64", Ty::B32, idx);
            for d in (1..dims.len()).rev() {
                let n = match dims[d] {
                    Size::Read(r) => Size::Read(a.un("cvt.u32.u64", Ty::B32, r)),
                    known => known,
                };
                let c = a.bin("rem.u32", Ty::B32, rest, n);
                coords[d] = a.un("cvt.u64.u32", Ty::B64, c);
                rest = a.bin("div.u32", Ty::B32, rest, n);
            }
            coords[0] = a.un("cvt.u64.u32", Ty::B64, rest);
        } else {
            let mut rest = idx;
            for d in (1..dims.len()).rev() {
                coords[d] = a.bin("rem.u64", Ty::B64, rest, dims[d]);
                rest = a.bin("div.u64", Ty::B64, rest, dims[d]);
            }
            coords[0] = rest;
        }
        coords
    }

    /// The statements of output level `depth`: the one output loop in it
    /// becomes this thread's coordinate. With a `group`, every lane gets
    /// its coordinates (the innermost one `c + lane`) and the statements
    /// run for all lanes (`vector::group_stmt`).
    pub(super) fn output_level(
        &mut self,
        stmts: &[Stmt],
        depth: usize,
        group: Option<Group>,
    ) -> Res<()> {
        let levels = self.coords.len();
        let row = depth == levels && self.k.shared_loops > 0;
        if row {
            self.load_rows()?;
            if self.compute_values()? {
                self.a.op("bar.sync 0");
            }
        }
        for s in stmts {
            match s {
                Stmt::For(l) if depth == 0 && self.serial.is_some() => self.serial_rows(l)?,
                Stmt::For(l) if depth < levels => {
                    self.check_output_loop(l, depth)?;
                    let c = self.coords[depth];
                    for lane in 0..group.map_or(1, |g| g.lanes) {
                        self.lane = lane;
                        let v = self.ivar(l.var);
                        match self.int.0 {
                            Ty::B32 => self.a.op(format!("cvt.u32.u64 {v}, {c}")),
                            _ => self.a.op(format!("mov.b64 {v}, {c}")),
                        }
                        if lane > 0 && group.is_some_and(|g| g.inner == l.var) {
                            let sfx = self.int.1;
                            self.a.op(format!("add.{sfx} {v}, {v}, {lane}"));
                        }
                    }
                    self.lane = 0;
                    self.output_level(&l.body, depth + 1, group)?;
                }
                Stmt::For(l) if depth == levels && self.k.shared_loops > 0 => {
                    self.dealt_loop(l, depth)?;
                }
                Stmt::For(_) => return Err("a loop below the output loops".into()),
                s => match group {
                    Some(g) => self.group_stmt(g, s)?,
                    None => self.stmt(s)?,
                },
            }
        }
        if row {
            self.end_row();
        }
        Ok(())
    }

    /// The innermost output loop of a row team: thread `t` runs
    /// iterations `t`, `t + T`, … (adjacent threads, adjacent elements),
    /// each storing its own, several in flight (`team::strided_in_groups`).
    pub(super) fn dealt_loop(&mut self, l: &Loop, depth: usize) -> Res<()> {
        self.check_output_loop(l, depth)?;
        let Some(team) = self.team else {
            return Err("internal: a shared output loop without a team".into());
        };
        if depth + 1 != self.k.out_shape.len() || self.group.is_some() {
            return Err("a team shares only the innermost output loop, in scalar accesses".into());
        }
        self.dealt = true;
        let done = self.strided_in_groups(l, team.first, None, |_, _| Ok(()));
        self.dealt = false;
        done
    }

    pub(super) fn check_output_loop(&self, l: &Loop, depth: usize) -> Res<()> {
        let full = if depth == 0 {
            l.lower.len() == 1
                && l.lower[0].den == 1
                && l.lower[0].num == Lin::var(START)
                && l.upper.len() == 1
                && l.upper[0].den == 1
                && l.upper[0].num.terms == [(END, 1)]
                && l.upper[0].num.constant == -1
        } else {
            // (A kernel with run-time constants reads `n − 1` from a
            // parameter: its dimension comes with the launch, `n{depth}`.)
            let n = self.k.out_shape.get(depth).copied().unwrap_or(0) as i64;
            let is = |b: &[Bound], c: i64| matches!(b, [Bound { num, den: 1 }] if self.k.resolve(num) == Lin::constant(c));
            is(&l.lower, 0) && is(&l.upper, n - 1)
        };
        if l.vector {
            return Err("vector loops are the CPU backend's".into());
        }
        if !full {
            return Err(format!("output loop {depth} does not cover its dimension"));
        }
        Ok(())
    }
}
