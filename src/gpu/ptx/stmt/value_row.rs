//! A row team's computed values in shared memory: when every loop along
//! the row (the row's reductions and its element loop) begins by
//! computing the same value from the same elements, that value is
//! computed once per element at the start of the row and every loop reads
//! it from shared memory.
//!
//! Attention's softmax, `softmax(0.125 · s + mask)`, reads the scores and
//! the mask and computes `0.125 · s + mask` for the row's maximum, again
//! for the sum of exponentials and again for the values: with the value
//! row, each pass loads one value instead of two and computes nothing
//! before its own work. The value is computed by the same statements as
//! before, once instead of once per loop, so the results are the same
//! bits.
//!
//! Owns [`ValueRow`]: which kernels have one (every loop along the row has
//! a constant range `0 ..= len − 1`, the same for all, and begins with the
//! same statements up to the value: loads `base + v` of the loop's
//! variable `v`, element operations and constants, reading registers
//! computed before the row; no other value of them read later in the
//! loop), the shared array, the values' computation at the start of the
//! row and the reads that replace the statements. The arguments those
//! statements read are then left to `row_cache` only for their other
//! reads. Must not decide which kernels run a team per row
//! (`crate::planner::spread`).

use super::super::asm::{Ty, R};
use super::{Emitter, Res};
use crate::kernel::{Expr, IVar, Kernel, Lin, Loop, Reg, Stmt};
use crate::symbolic::{BinaryOp, UnaryOp};
use std::collections::HashSet;

/// Shared memory for the value row: with `row_cache`'s rows (40 KiB at
/// most) and the team's shares (4 KiB at most) it stays within a block's
/// 48 KiB of static shared memory.
const BUDGET: i64 = 4 * 1024;

/// The shared array.
const ARRAY: &str = "tenjin_values";

/// A kernel's value row (see the module documentation).
#[derive(Clone, Debug)]
pub(super) struct ValueRow {
    /// The statements computing the value, as the first loop has them
    /// (over its variable `var`), the last defining `value`.
    stmts: Vec<Stmt>,
    var: IVar,
    value: Reg,
    /// Elements of the row.
    len: i64,
    /// Each loop along the row: its variable, and the register its own
    /// copy of the statements defines the value in.
    loops: Vec<(IVar, Reg)>,
}

/// An operand of a statement, as the comparison between loops sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Operand {
    /// The value of the loop's `n`-th statement.
    Local(usize),
    /// A register computed before the row.
    Before(Reg),
}

/// A statement of the leading run, with its loop's own names taken out.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Load(usize, Lin),
    Const(u64),
    Unary(UnaryOp, Operand),
    Binary(BinaryOp, Operand, Operand),
    PowI(Operand, i32),
}

impl ValueRow {
    /// The value row of `k` (elements of `size` bytes), and `k` with the
    /// statements it replaces taken out of its loops (what `row_cache`
    /// then looks at), if it has one.
    pub(super) fn of(k: &Kernel, size: i64) -> Option<(ValueRow, Kernel)> {
        let n = k.out_shape.len();
        if k.threads_per_output <= 1 || k.shared_loops != 1 || n < 2 || !k.buffers.is_uniform() {
            return None;
        }
        let row = row_statements(&k.body, n - 1)?;
        let loops: Vec<&Loop> = row
            .iter()
            .filter_map(|s| match s {
                Stmt::For(l) => Some(l),
                Stmt::Reduce { body, .. } => Some(body),
                _ => None,
            })
            .collect();
        if loops.len() < 2 {
            return None;
        }
        let len = constant_range(loops[0])?;
        if loops.iter().any(|l| constant_range(l) != Some(len)) || len * size > BUDGET {
            return None;
        }
        let mut inside = HashSet::new();
        defined(row, &mut inside);
        let shapes: Vec<Vec<Shape>> = loops.iter().map(|l| leading_run(l, &inside)).collect();
        // The longest run all loops share, shortened until only its last
        // value is read after it.
        let mut common = shapes.iter().map(|s| s.len()).min().unwrap_or(0).min(
            (0..shapes[0].len())
                .take_while(|&i| shapes.iter().all(|s| s.get(i) == shapes[0].get(i)))
                .count(),
        );
        while common > 0 && !loops.iter().all(|l| only_last_escapes(l, common)) {
            common -= 1;
        }
        let run = &shapes[0][..common];
        let loads = run.iter().any(|s| matches!(s, Shape::Load(..)));
        let works = run
            .iter()
            .any(|s| !matches!(s, Shape::Load(..) | Shape::Const(_)));
        if !(loads && works) {
            return None;
        }
        let value_of = |l: &Loop| match &l.body[common - 1] {
            Stmt::Let(r, _) => Some(*r),
            _ => None,
        };
        let value_row = ValueRow {
            stmts: loops[0].body[..common].to_vec(),
            var: loops[0].var,
            value: value_of(loops[0])?,
            len,
            loops: loops
                .iter()
                .map(|l| Some((l.var, value_of(l)?)))
                .collect::<Option<_>>()?,
        };
        let mut rest = k.clone();
        strip(&mut rest.body, n - 1, common);
        Some((value_row, rest))
    }

    /// The declaration of the shared array.
    pub(super) fn declaration(&self, size: i64) -> String {
        format!("\t.shared .align 16 .b8 {ARRAY}[{}];\n", self.len * size)
    }

    /// The register loop `var`'s copy of the statements defines the value
    /// in, if `var` reads the value row.
    fn value_of(&self, var: IVar) -> Option<Reg> {
        self.loops.iter().find(|(v, _)| *v == var).map(|&(_, r)| r)
    }
}

/// The statements of the row: the body of the output loop `depth` levels
/// down.
fn row_statements(body: &[Stmt], depth: usize) -> Option<&[Stmt]> {
    let mut stmts = body;
    for _ in 0..depth {
        stmts = stmts.iter().find_map(|s| match s {
            Stmt::For(l) => Some(&l.body[..]),
            _ => None,
        })?;
    }
    Some(stmts)
}

/// `len` when `l` runs `0 ..= len − 1`.
fn constant_range(l: &Loop) -> Option<i64> {
    match l.constant_range()? {
        (0, last) if last >= 0 => Some(last + 1),
        _ => None,
    }
}

/// Every register `stmts` define, in branches and loops too.
fn defined(stmts: &[Stmt], out: &mut HashSet<Reg>) {
    for s in stmts {
        match s {
            Stmt::Let(r, _) => {
                out.insert(*r);
            }
            Stmt::If {
                then,
                otherwise,
                result,
                ..
            } => {
                out.insert(*result);
                defined(then, out);
                defined(otherwise, out);
            }
            Stmt::Reduce { result, body, .. } => {
                out.insert(*result);
                defined(&body.body, out);
            }
            Stmt::For(l) => defined(&l.body, out),
            Stmt::Store { .. } => {}
        }
    }
}

/// The leading statements of `l` a value row may hold, as shapes: loads
/// stepping by one element along `l` from a base of the row's, and
/// element operations over them, constants and registers computed before
/// the row (not in `inside`).
fn leading_run(l: &Loop, inside: &HashSet<Reg>) -> Vec<Shape> {
    let mut locals: Vec<Reg> = Vec::new();
    let mut shapes = Vec::new();
    for s in &l.body {
        let Stmt::Let(r, e) = s else { break };
        let operand = |x: &Reg| match locals.iter().position(|y| y == x) {
            Some(i) => Some(Operand::Local(i)),
            None => (!inside.contains(x)).then_some(Operand::Before(*x)),
        };
        let shape = match e {
            Expr::Load { arg, offset } if offset.coeff(l.var) == 1 => {
                let mut base = offset.clone();
                base.terms.retain(|(v, _)| *v != l.var);
                Some(Shape::Load(*arg, base))
            }
            Expr::Const(c) => Some(Shape::Const(c.to_bits())),
            Expr::Unary(op, x) => operand(x).map(|x| Shape::Unary(*op, x)),
            Expr::Binary(op, x, y) => operand(x)
                .zip(operand(y))
                .map(|(x, y)| Shape::Binary(*op, x, y)),
            Expr::PowI(x, n) => operand(x).map(|x| Shape::PowI(x, *n)),
            _ => None,
        };
        let Some(shape) = shape else { break };
        locals.push(*r);
        shapes.push(shape);
    }
    shapes
}

/// Whether, of the first `n` statements of `l`, only the last one's value
/// is read by the statements after them.
fn only_last_escapes(l: &Loop, n: usize) -> bool {
    let hidden: HashSet<Reg> = l.body[..n - 1]
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(r, _) => Some(*r),
            _ => None,
        })
        .collect();
    let mut read = HashSet::new();
    reads(&l.body[n..], &mut read);
    hidden.is_disjoint(&read)
}

/// Every register `stmts` read.
fn reads(stmts: &[Stmt], out: &mut HashSet<Reg>) {
    for s in stmts {
        match s {
            Stmt::Let(_, e) => match e {
                Expr::Unary(_, x) | Expr::PowI(x, _) => {
                    out.insert(*x);
                }
                Expr::Binary(_, x, y) => {
                    out.extend([*x, *y]);
                }
                Expr::Random { key, .. } => out.extend(key.iter().copied()),
                Expr::Const(_) | Expr::ConstParam(_) | Expr::Load { .. } | Expr::Index(_) => {}
            },
            Stmt::If {
                cond,
                then,
                then_value,
                otherwise,
                otherwise_value,
                ..
            } => {
                if let crate::kernel::Cond::Value(x, _, y) = cond {
                    out.extend([*x, *y]);
                }
                out.extend([*then_value, *otherwise_value]);
                reads(then, out);
                reads(otherwise, out);
            }
            Stmt::Reduce { value, body, .. } => {
                out.insert(*value);
                reads(&body.body, out);
            }
            Stmt::For(l) => reads(&l.body, out),
            Stmt::Store { value, .. } => {
                out.insert(*value);
            }
        }
    }
}

/// `body` with the first `n` statements of each loop along the row
/// (`depth` output loops down) taken out.
fn strip(body: &mut [Stmt], depth: usize, n: usize) {
    if depth > 0 {
        if let Some(l) = body.iter_mut().find_map(|s| match s {
            Stmt::For(l) => Some(l),
            _ => None,
        }) {
            strip(&mut l.body, depth - 1, n);
        }
        return;
    }
    for s in body {
        if let Stmt::For(l) | Stmt::Reduce { body: l, .. } = s {
            l.body.drain(..n);
        }
    }
}

impl Emitter<'_> {
    /// At the start of a row: the value of every element computed by the
    /// team (thread `t` computes elements `t`, `t + T`, …, four at a time
    /// while four are left, so that their loads are in flight together)
    /// into the shared array. The caller places the barrier after it.
    pub(super) fn compute_values(&mut self) -> Res<bool> {
        let (Some(values), Some(team)) = (self.value_row.clone(), self.team) else {
            return Ok(false);
        };
        let isfx = self.int.1;
        let bits = self.int_bits();
        let t = team.threads as i64;
        let j = self.ivar(values.var);
        self.a.op(format!("mov.{bits} {j}, {}", team.first));
        let (four, one, done) = (self.a.label(), self.a.label(), self.a.label());
        self.loop_depth += 1;
        self.a.place(&four);
        let last = self.a.setp("ge", isfx, j, values.len - 3 * t);
        self.a.op(format!("@{last} bra {one}"));
        for _ in 0..4 {
            self.value_at(&values, j)?;
            self.a.op(format!("add.{isfx} {j}, {j}, {t}"));
        }
        self.a.op(format!("bra.uni {four}"));
        self.a.place(&one);
        let past = self.a.setp("ge", isfx, j, values.len);
        self.a.op(format!("@{past} bra {done}"));
        self.value_at(&values, j)?;
        self.a.op(format!("add.{isfx} {j}, {j}, {t}"));
        self.a.op(format!("bra.uni {one}"));
        self.a.place(&done);
        self.loop_depth -= 1;
        Ok(true)
    }

    /// Element `j`'s value, computed and stored into the shared array.
    fn value_at(&mut self, values: &ValueRow, j: R) -> Res<()> {
        self.stmts(&values.stmts)?;
        let to = self.value_address(j);
        let v = self.reg(values.value);
        self.a.op(format!("st.shared.{} [{to}], {v}", self.sfx));
        Ok(())
    }

    /// The statements of one iteration of `l`: where the loop reads the
    /// value row, its value from shared memory, then the statements after
    /// the ones the value replaces.
    pub(super) fn loop_body(&mut self, l: &Loop) -> Res<()> {
        let Some(reg) = self.value_row.as_ref().and_then(|v| v.value_of(l.var)) else {
            return self.stmts(&l.body);
        };
        let from = self.value_address(self.ivar(l.var));
        let d = self.reg(reg);
        self.a.op(format!("ld.shared.{} {d}, [{from}]", self.sfx));
        let skip = self.value_row.as_ref().map_or(0, |v| v.stmts.len());
        self.stmts(&l.body[skip..])
    }

    /// The shared address of element `j` of the value row.
    fn value_address(&mut self, j: R) -> R {
        let base = self.a.un("mov.u64", Ty::B64, ARRAY);
        self.element(base, j, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{emit, Arch};
    use crate::kernel::lower;
    use crate::symbolic::IndexFn;
    use crate::DType;

    /// `src` over `x: [512, 1024]` and `w: [1024]`, lowered to run a team
    /// of 128 per row, and its PTX.
    fn ptx(src: &str) -> String {
        let f = IndexFn::parse(src, &[("x", &[512, 1024][..]), ("w", &[1024][..])]).unwrap();
        let mut k = lower(&f).unwrap();
        k.threads_per_output = 128;
        k.shared_loops = 1;
        emit(&k, DType::F32, Arch::for_capability(8, 0).unwrap(), "k").unwrap()
    }

    #[test]
    fn a_scaled_masked_softmax_computes_its_input_once_per_element() {
        // Attention's softmax: `0.125 · x + w` is the value every pass
        // starts from.
        let text = ptx(
            "f[i; j] = exp (0.125 * x[i; j] + w[j] - (max{m}_0^1023 (0.125 * x[i; m] + w[m]) + log sum{k}_0^1023 (exp (0.125 * x[i; k] + w[k] - max{m}_0^1023 (0.125 * x[i; m] + w[m])))))",
        );
        assert!(text.contains(".b8 tenjin_values[4096]"), "{text}");
        // The value computed at one place (four in flight and the tail):
        // both arguments' loads there alone, no row of them cached, one
        // multiplication by the scale per copy.
        assert_eq!(text.matches("ld.global").count(), 10, "{text}");
        assert!(!text.contains("tenjin_row"), "{text}");
        assert_eq!(text.matches("0f3E000000").count(), 1, "{text}");
    }

    #[test]
    fn a_value_read_in_parts_later_is_not_shared() {
        // The element loop reads `x` again on its own after `0.5 · x + w`:
        // only the common `x` load would be shared, which is no work.
        let text = ptx(
            "f[i; j] = (0.5 * x[i; j] + w[j]) * x[i; j] - max{m}_0^1023 (0.5 * x[i; m] + w[m])",
        );
        assert!(!text.contains("tenjin_values"), "{text}");
    }
}
