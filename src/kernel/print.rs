//! `Display` for [`Kernel`]: readable pseudo code for debugging and error
//! messages. Integer values print as `v<n>` (`start`, `end` for the
//! parameters), registers as `r<n>`.

use super::{Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Stmt, END, START};
use crate::symbolic::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::{self, Display, Formatter, Write};

impl Display for IVar {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match *self {
            START => write!(f, "start"),
            END => write!(f, "end"),
            IVar(n) => write!(f, "v{n}"),
        }
    }
}

impl Display for super::Reg {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl Display for Lin {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for &(v, c) in &self.terms {
            let (sign, mag) = if c < 0 {
                ("-", -(c as i128))
            } else {
                ("+", c as i128)
            };
            match (first, sign) {
                (true, "-") => write!(f, "-")?,
                (true, _) => {}
                (false, s) => write!(f, " {s} ")?,
            }
            if mag == 1 {
                write!(f, "{v}")?;
            } else {
                write!(f, "{v}*{mag}")?;
            }
            first = false;
        }
        match (first, self.constant) {
            (true, c) => write!(f, "{c}"),
            (false, 0) => Ok(()),
            (false, c) if c < 0 => write!(f, " - {}", -(c as i128)),
            (false, c) => write!(f, " + {c}"),
        }
    }
}

fn bounds(list: &[Bound], round: &str, pick: &str) -> String {
    let one = |b: &Bound| {
        if b.den == 1 {
            b.num.to_string()
        } else {
            format!("{round}(({})/{})", b.num, b.den)
        }
    };
    if list.len() == 1 {
        one(&list[0])
    } else {
        let items: Vec<String> = list.iter().map(one).collect();
        format!("{pick}({})", items.join(", "))
    }
}

fn loop_header(l: &Loop) -> String {
    format!(
        "{} in {} ..= {}{}",
        l.var,
        bounds(&l.lower, "ceil", "max"),
        bounds(&l.upper, "floor", "min"),
        if l.vector { " (vector)" } else { "" }
    )
}

fn unary(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "neg",
        op => op.name(),
    }
}

fn binary(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Pow => "**",
        BinaryOp::Max => "max",
        BinaryOp::Min => "min",
    }
}

struct Printer<'a> {
    k: &'a Kernel,
    out: String,
}

impl Printer<'_> {
    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Const(c) => format!("{c:?}"),
            Expr::ConstParam(v) => format!("float({v})"),
            Expr::Load { arg, offset } => {
                let name = self.k.args.get(*arg).map_or("?", |a| a.name.as_str());
                format!("load {name}[{offset}]")
            }
            Expr::Index(l) => format!("number({l})"),
            Expr::Random {
                key: [a, b, c],
                counter,
            } => format!("random({a}, {b}, {c}; {counter})"),
            Expr::Unary(op, a) => format!("{} {a}", unary(*op)),
            Expr::Binary(op @ (BinaryOp::Max | BinaryOp::Min), a, b) => {
                format!("{}({a}, {b})", binary(*op))
            }
            Expr::Binary(op, a, b) => format!("{a} {} {b}", binary(*op)),
            Expr::PowI(a, n) => format!("{a} ** {n} (powi)"),
        }
    }

    fn cond(c: &Cond) -> String {
        match c {
            Cond::Index(l, op) => format!("{l} {} 0", op.symbol()),
            Cond::Divisible(l, d) => format!("({l}) divisible by {d}"),
            Cond::Value(a, op, b) => format!("{a} {} {b}", op.symbol()),
        }
    }

    fn stmts(&mut self, list: &[Stmt], depth: usize) {
        for s in list {
            match s {
                Stmt::Let(r, e) => {
                    let text = format!("{r} = {}", self.expr(e));
                    self.line(depth, &text);
                }
                Stmt::If {
                    cond,
                    then,
                    then_value,
                    otherwise,
                    otherwise_value,
                    result,
                } => {
                    self.line(depth, &format!("{result} = if {} {{", Self::cond(cond)));
                    self.stmts(then, depth + 1);
                    self.line(depth + 1, &format!("yield {then_value}"));
                    self.line(depth, "} else {");
                    self.stmts(otherwise, depth + 1);
                    self.line(depth + 1, &format!("yield {otherwise_value}"));
                    self.line(depth, "}");
                }
                Stmt::Reduce {
                    op,
                    value,
                    result,
                    body,
                    wide,
                } => {
                    let name = match op {
                        ReduceOp::Sum if *wide => "sum.f64",
                        ReduceOp::Sum => "sum",
                        op => op.name(),
                    };
                    self.line(
                        depth,
                        &format!("{result} = {name} {} {{", loop_header(body)),
                    );
                    self.stmts(&body.body, depth + 1);
                    self.line(depth + 1, &format!("fold {value}"));
                    self.line(depth, "}");
                }
                Stmt::For(l) => {
                    self.line(depth, &format!("for {} {{", loop_header(l)));
                    self.stmts(&l.body, depth + 1);
                    self.line(depth, "}");
                }
                Stmt::Store { offset, value } => {
                    self.line(depth, &format!("store out[{offset}] = {value}"));
                }
            }
        }
    }
}

impl Display for Kernel {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut p = Printer {
            k: self,
            out: String::new(),
        };
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| format!("{}: {:?}", a.name, a.shape))
            .collect();
        let _ = writeln!(
            p.out,
            "kernel {}({}) -> {:?}, parallel over [start, end) ⊆ [0, {})",
            self.name,
            args.join(", "),
            self.out_shape,
            self.extent
        );
        if !self.params.is_empty() {
            // A float constant's parameter holds its bits: shown as the
            // number.
            let mut floats = Vec::new();
            super::visit_stmts(&self.body, &mut |s| {
                if let Stmt::Let(_, Expr::ConstParam(v)) = s {
                    floats.push(*v);
                }
            });
            let params: Vec<String> = self
                .params
                .iter()
                .map(|(v, c)| match floats.contains(v) {
                    true => format!("{v} = {:?}", f64::from_bits(*c as u64)),
                    false => format!("{v} = {c}"),
                })
                .collect();
            let _ = writeln!(p.out, "  run-time constants: {}", params.join(", "));
        }
        if !self.strides.is_empty() {
            let strides: Vec<String> = self
                .strides
                .iter()
                .map(|s| format!("{} = {}·{}", s.var, s.index, s.stride))
                .collect();
            let _ = writeln!(p.out, "  run-time strides: {}", strides.join(", "));
        }
        if !self.buffers.is_uniform() {
            let halves: Vec<String> = (0..self.args.len())
                .filter_map(|a| Some(format!("{} {:?}", self.args[a].name, self.buffers.arg(a)?)))
                .chain(self.buffers.out.map(|d| format!("out {d:?}")))
                .collect();
            let _ = writeln!(
                p.out,
                "  half buffers (loaded widened, stored rounded): {}",
                halves.join(", ")
            );
        }
        if self.threads_per_output > 1 && self.shared_loops > 0 {
            let _ = writeln!(
                p.out,
                "  {} threads per row: the row's reductions spread over them, its elements dealt among them",
                self.threads_per_output
            );
        } else if self.threads_per_output > 1 {
            let _ = writeln!(
                p.out,
                "  {} threads per output: top-level reductions spread over them",
                self.threads_per_output
            );
        }
        p.stmts(&self.body, 1);
        f.write_str(&p.out)
    }
}
