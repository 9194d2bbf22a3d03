//! The printer of index functions in the notation of Urban & van der Smagt
//! §6: `f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))`.
//!
//! Owns `impl Display for IndexFn` and [`node_to_string`]. The output is
//! deterministic and parses back (with `parse`) to an alpha-equal function
//! built by the same simplifying constructors: parentheses follow
//! precedence (`+ -` < `* /` < unary minus < `**` < application < atom,
//! right operands parenthesised at equal precedence), and variable names
//! are chosen so that no variable captures another when re-parsed. Must not
//! change the function or know about evaluation or derivation.
//!
//! Naming: output indices keep their names (made distinct, valid and
//! different from reserved words and argument names by a `_1`, `_2`, ...
//! suffix where needed); a binder keeps its name unless that name is
//! already used by a variable in scope, in which case it gets the first free
//! suffix (`sum{k}_0^3 (x[k] * sum{k}_0^3 (y[k]))` prints the inner `k` as
//! `k_1`). Sibling binders may share a name. Affine terms are ordered by the
//! scope position of their variables (output indices first, then binders
//! from the outside in), so printing does not depend on `VarId` numbering.
//! Constants come first in affine forms, as in the paper (`-2 + dd_0`).
//!
//! Its tests also cover the structure the parser builds and its semantic
//! errors (`parse_tests`).

use super::affine::{Affine, RatAffine, VarId};
use super::expr::{BinaryOp, Cond, Node, NodeId, Range, UnaryOp};
use super::index_fn::IndexFn;
use super::lexer::{is_identifier, is_reserved};
use std::fmt;

const ADD: u8 = 1;
const MUL: u8 = 2;
const NEG: u8 = 3;
const POW: u8 = 4;
const APP: u8 = 5;
const ATOM: u8 = 6;

/// Prints one node of `f` (with `f`'s output indices in scope), e.g. an
/// access `d[i + k]` for an error message.
pub(crate) fn node_to_string(f: &IndexFn, n: NodeId) -> String {
    let mut p = Printer::new(f);
    p.node(n, 0);
    p.out
}

/// An affine form of `f`'s variables (output indices, size symbols) as
/// the printer writes it (`-2 + T`).
pub(crate) fn affine_to_string(f: &IndexFn, a: &Affine) -> String {
    Printer::new(f).affine(a)
}

impl fmt::Display for IndexFn {
    /// `name[i; j] = body`, in the paper's notation.
    fn fmt(&self, fmt: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::new(self);
        let outs: Vec<&str> = p.scope.iter().map(|(_, n)| n.as_str()).collect();
        let head = format!("{}[{}] = ", self.name, outs.join("; "));
        p.node(self.root, 0);
        write!(fmt, "{head}{}", p.out)
    }
}

/// A constant in Rust's shortest round-trip form (`inf`, `nan`, and
/// exponent notation for very large or small magnitudes).
fn const_text(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-5) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// `name` if it lexes as one identifier, else a sanitised version.
fn sanitize(name: &str) -> String {
    if is_identifier(name) {
        return name.to_string();
    }
    let body: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if body.starts_with(|c: char| c.is_ascii_alphabetic()) {
        body
    } else {
        format!("v{body}")
    }
}

struct Printer<'a> {
    f: &'a IndexFn,
    /// Variables in scope with their display names (pairwise distinct),
    /// outermost first.
    scope: Vec<(VarId, String)>,
    out: String,
}

impl<'a> Printer<'a> {
    fn new(f: &'a IndexFn) -> Printer<'a> {
        let mut p = Printer {
            f,
            scope: Vec::new(),
            out: String::new(),
        };
        for &v in &f.out_vars {
            let name = p.fresh(v);
            p.scope.push((v, name));
        }
        p
    }

    fn base_name(&self, v: VarId) -> String {
        match self.f.var_names.get(v.0 as usize) {
            Some(n) => sanitize(n),
            None => format!("v{}", v.0),
        }
    }

    fn taken(&self, name: &str) -> bool {
        is_reserved(name)
            || self.f.args.iter().any(|a| a.name == name)
            || self.scope.iter().any(|(_, n)| n == name)
    }

    /// A display name for a variable entering scope.
    fn fresh(&self, v: VarId) -> String {
        let base = self.base_name(v);
        if !self.taken(&base) {
            return base;
        }
        (1..)
            .map(|k| format!("{base}_{k}"))
            .find(|n| !self.taken(n))
            .unwrap_or(base)
    }

    /// Scope position (innermost binding) and display name of a variable.
    fn lookup(&self, v: VarId) -> (usize, String) {
        match self.scope.iter().rposition(|(w, _)| *w == v) {
            Some(k) => (k, self.scope[k].1.clone()),
            None => (usize::MAX, self.base_name(v)),
        }
    }

    fn prec(&self, n: NodeId) -> u8 {
        match self.f.graph.node(n) {
            Node::Const(bits) if f64::from_bits(*bits) < 0.0 => NEG,
            Node::Unary(UnaryOp::Neg, _) => NEG,
            Node::Unary(..) => APP,
            Node::Binary(BinaryOp::Add | BinaryOp::Sub, ..) => ADD,
            Node::Binary(BinaryOp::Mul | BinaryOp::Div, ..) => MUL,
            Node::Binary(BinaryOp::Pow, ..) => POW,
            _ => ATOM,
        }
    }

    /// Prints `n`, parenthesised when its precedence is below `min`.
    fn node(&mut self, n: NodeId, min: u8) {
        let paren = self.prec(n) < min;
        if paren {
            self.out.push('(');
        }
        self.node_inner(n);
        if paren {
            self.out.push(')');
        }
    }

    fn node_inner(&mut self, n: NodeId) {
        let f = self.f;
        match f.graph.node(n) {
            Node::Const(bits) => self.out.push_str(&const_text(f64::from_bits(*bits))),
            Node::Access { arg, index } => {
                let name = f.args.get(*arg).map_or("?", |a| a.name.as_str());
                let parts: Vec<String> = index.iter().map(|a| self.affine(a)).collect();
                self.out.push_str(&format!("{name}[{}]", parts.join("; ")));
            }
            Node::Index(a) => {
                let text = match a.as_single_var() {
                    Some(v) => self.lookup(v).1,
                    None => format!("idx({})", self.affine(a)),
                };
                self.out.push_str(&text);
            }
            Node::Random { key, counter } => {
                self.out.push_str("random(");
                for (i, k) in key.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.node(*k, 0);
                }
                let counter = self.affine(counter);
                self.out.push_str(&format!("; {counter})"));
            }
            Node::Unary(UnaryOp::Neg, a) => {
                self.out.push('-');
                self.node(*a, NEG);
            }
            Node::Unary(op, a) => {
                self.out.push_str(op.name());
                self.out.push(' ');
                self.node(*a, ATOM);
            }
            Node::Binary(op @ (BinaryOp::Max | BinaryOp::Min), a, b) => {
                self.out
                    .push_str(if *op == BinaryOp::Max { "max(" } else { "min(" });
                self.node(*a, 0);
                self.out.push_str(", ");
                self.node(*b, 0);
                self.out.push(')');
            }
            Node::Binary(op, a, b) => {
                let (sym, left, right) = match op {
                    BinaryOp::Add => ("+", ADD, MUL),
                    BinaryOp::Sub => ("-", ADD, MUL),
                    BinaryOp::Mul => ("*", MUL, NEG),
                    BinaryOp::Div => ("/", MUL, NEG),
                    _ => ("**", APP, NEG),
                };
                self.node(*a, left);
                self.out.push_str(&format!(" {sym} "));
                self.node(*b, right);
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                self.out.push_str("if {");
                self.cond(cond);
                self.out.push_str("} then (");
                self.node(*then, 0);
                self.out.push_str(") else (");
                self.node(*otherwise, 0);
                self.out.push(')');
            }
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => {
                let bounds = self.range(range);
                let name = self.fresh(*var);
                self.out
                    .push_str(&format!("{}{{{name}}}{bounds} (", op.name()));
                self.scope.push((*var, name));
                self.node(*body, 0);
                self.scope.pop();
                self.out.push(')');
            }
        }
    }

    fn cond(&mut self, cond: &Cond) {
        match cond {
            Cond::Index(r, op) => {
                let text = format!("{} {} 0", self.rat(r), op.symbol());
                self.out.push_str(&text);
            }
            Cond::IsInt(r) => {
                let text = format!("{} is int", self.rat(r));
                self.out.push_str(&text);
            }
            Cond::Value(a, op, b) => {
                self.node(*a, 0);
                self.out.push_str(&format!(" {} ", op.symbol()));
                self.node(*b, 0);
            }
        }
    }

    /// `_lo^hi` with `max [...]` / `min [...]` lists where needed.
    fn range(&self, range: &Range) -> String {
        let side = |bounds: &[RatAffine], list: &str| match bounds {
            [r] if r.den == 1 && r.num.is_constant() => r.num.constant.to_string(),
            [r] => format!("({})", self.rat(r)),
            _ => {
                let parts: Vec<String> = bounds.iter().map(|r| self.rat(r)).collect();
                format!("({list} [{}])", parts.join("; "))
            }
        };
        format!(
            "_{}^{}",
            side(&range.lower, "max"),
            side(&range.upper, "min")
        )
    }

    /// `3 + i + -2*j`: the constant first (as in the paper's `-2 + dd_0`),
    /// then the terms in scope order.
    fn affine(&self, a: &Affine) -> String {
        let mut terms: Vec<(usize, VarId, String, i64)> = a
            .terms
            .iter()
            .map(|&(v, c)| {
                let (pos, name) = self.lookup(v);
                (pos, v, name, c)
            })
            .collect();
        terms.sort_by_key(|t| (t.0, t.1));
        let constant = (a.constant != 0 || terms.is_empty()).then(|| a.constant.to_string());
        let parts: Vec<String> = constant
            .into_iter()
            .chain(terms.into_iter().map(|(_, _, name, c)| match c {
                1 => name,
                -1 => format!("-{name}"),
                c => format!("{c}*{name}"),
            }))
            .collect();
        parts.join(" + ")
    }

    /// `num` for an integer form, else `num/den` or `(num)/den`.
    fn rat(&self, r: &RatAffine) -> String {
        let num = self.affine(&r.num);
        match r.den {
            1 => num,
            d if num.contains(' ') => format!("({num})/{d}"),
            d => format!("{num}/{d}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbolic::index_fn::ArgDecl;
    use crate::symbolic::parse::parse_fn;

    /// The input and three derivatives printed in the paper (§6).
    pub(crate) const PAPER: [&str; 3] = [
        "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))",
        "dd[dd_0] = sum{dd_z1}_(max [0; -2 + dd_0])^(min [4; dd_0]) (sum{dd_z0}_0^3 (((-(df[dd_0 + -dd_z1; dd_z0] * exp (-sum{k}_0^4 (((a[dd_0 + -dd_z1; k] + b[dd_z0; k]) ** 2 * c[dd_0 + -dd_z1; dd_0 + -dd_z1] + d[dd_0 + -dd_z1 + k] ** 3))))) * 3 * d[dd_0] ** (3 - 1))))",
        "dc[dc_0; dc_1] = if {dc_0 + -dc_1 = 0} then (sum{dc_z1}_0^4 (sum{dc_z0}_0^3 (((a[dc_1; dc_z1] + b[dc_z0; dc_z1]) ** 2 * (-(df[dc_1; dc_z0] * exp (-sum{k}_0^4 (((a[dc_1; k] + b[dc_z0; k]) ** 2 * c[dc_1; dc_1] + d[dc_1 + k] ** 3)))))))) else (0)",
    ];

    fn args() -> Vec<ArgDecl> {
        let decl = |name: &str, shape: &[usize]| ArgDecl {
            name: name.to_string(),
            shape: shape.to_vec(),
        };
        vec![
            decl("a", &[3, 5]),
            decl("b", &[4, 5]),
            decl("c", &[3, 3]),
            decl("d", &[8]),
            decl("df", &[3, 4]),
            decl("x", &[5]),
            decl("y", &[5, 5]),
        ]
    }

    /// Prints `src` after parsing and checks that the text is a fixed point.
    fn round_trip(src: &str) -> String {
        let f = parse_fn(src, args()).unwrap_or_else(|e| panic!("{src}: {e}"));
        let s = f.to_string();
        let g = parse_fn(&s, args()).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert!(f == g, "{src} printed as {s}");
        assert_eq!(g.to_string(), s);
        s
    }

    #[test]
    fn paper_examples_round_trip() {
        assert_eq!(
            round_trip(PAPER[0]),
            "f[i; j] = exp (-sum{k}_0^4 ((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3))"
        );
        let dd = round_trip(PAPER[1]);
        assert!(dd.starts_with("dd[dd_0] = sum{dd_z1}_(max [0; -2 + dd_0])^(min [4; dd_0]) ("));
        assert!(dd.contains("d[dd_0 + -dd_z1 + k] ** 3"), "{dd}");
        let dc = round_trip(PAPER[2]);
        assert!(dc.starts_with("dc[dc_0; dc_1] = if {dc_0 + -dc_1 = 0} then (sum{dc_z1}_0^4 ("));
        assert!(dc.ends_with(") else (0)"), "{dc}");
    }

    #[test]
    fn parentheses_follow_precedence() {
        let cases = [
            ("f[i] = x[i] - (d[i] - x[i])", "f[i] = x[i] - (d[i] - x[i])"),
            ("f[i] = x[i] + (d[i] + x[i])", "f[i] = x[i] + (d[i] + x[i])"),
            ("f[i] = (x[i] - d[i]) - x[i]", "f[i] = x[i] - d[i] - x[i]"),
            ("f[i] = x[i] / (d[i] * x[i])", "f[i] = x[i] / (d[i] * x[i])"),
            ("f[i] = (x[i] ** d[i]) ** 2", "f[i] = (x[i] ** d[i]) ** 2"),
            ("f[i] = x[i] ** d[i] ** 2", "f[i] = x[i] ** d[i] ** 2"),
            (
                "f[i] = -x[i] ** 2 + (-x[i]) ** 2",
                "f[i] = -x[i] ** 2 + (-x[i]) ** 2",
            ),
            (
                "f[i] = exp x[i] ** 2 * exp (x[i] + 1)",
                "f[i] = exp x[i] ** 2 * exp (x[i] + 1)",
            ),
            (
                "f[i] = (-3) ** x[i] + -3 * x[i]",
                "f[i] = (-3) ** x[i] + -3 * x[i]",
            ),
            ("f[i] = x[i] * -0.5 - -1e-7", "f[i] = x[i] * -0.5 - -1e-7"),
            (
                "f[i] = x[i] ** -1 + 3e20 + inf",
                "f[i] = x[i] ** -1 + 3e20 + inf",
            ),
            ("f[i] = -inf * x[i] + nan", "f[i] = -inf * x[i] + nan"),
            (
                "f[i] = -(x[i] * d[i]) + 2 * -x[i]",
                "f[i] = -(x[i] * d[i]) - 2 * x[i]",
            ),
            (
                "f[i; j] = idx(2*i - j + 1) * i",
                "f[i; j] = idx(1 + 2*i + -j) * i",
            ),
            (
                "f[i] = max(x[i], 0) + min(d[i], i)",
                "f[i] = max(x[i], 0) + min(d[i], i)",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(round_trip(src), want);
        }
    }

    #[test]
    fn bounds_and_guards() {
        let cases = [
            "f[i] = sum{k}_0^(i) (x[k])",
            "f[i] = sum{k}_-2^-1 (x[2 + k])",
            "f[i] = argmax{k}_(max [0; -2 + i; (1 + i)/2])^(min [4; 3*i/2]) (x[k])",
            "f[i; j] = if {(i + -j)/2 is int} then (x[i]) else (if {-1 + i >= 0} then (0) else (1))",
            "f[i] = if {x[i] > 0} then (x[i]) else (0.1 * x[i])",
            "f[i] = if {x[i] != i} then (x[i]) else (0)",
        ];
        for src in cases {
            assert_eq!(round_trip(src), src);
        }
        let s =
            round_trip("f[i] = if {2*i >= 3} then (x[i]) else (0) + if {i < 2} then (1) else (0)");
        assert_eq!(
            s,
            "f[i] = if {-3 + 2*i >= 0} then (x[i]) else (0) + if {-2 + i < 0} then (1) else (0)"
        );
    }

    #[test]
    fn names_never_capture() {
        let s = round_trip("f[i] = sum{k}_0^4 (y[i; k] * sum{k}_0^4 (x[k] * y[k; k]))");
        assert_eq!(
            s,
            "f[i] = sum{k}_0^4 (y[i; k] * sum{k_1}_0^4 (x[k_1] * y[k_1; k_1]))"
        );
        let s = round_trip("f[i] = sum{k}_0^4 (x[k]) + x[i] * sum{i}_0^i (x[i])");
        assert_eq!(
            s,
            "f[i] = sum{k}_0^4 (x[k]) + x[i] * sum{i_1}_0^(i) (x[i_1])"
        );
        // Names made by derivation may be anything: they are made valid,
        // distinct, and different from arguments and reserved words.
        let mut f = parse_fn("f[i; j] = sum{k}_0^4 (y[i; k] * x[j])", args()).unwrap();
        f.var_names = vec!["x".into(), "x".into(), "exp".into()];
        assert_eq!(
            f.to_string(),
            "f[x_1; x_2] = sum{exp_1}_0^4 (y[x_1; exp_1] * x[x_2])"
        );
        f.var_names = vec!["1 a".into(), "".into()];
        assert_eq!(
            f.to_string(),
            "f[v1_a; v] = sum{v2}_0^4 (y[v1_a; v2] * x[v])"
        );
    }

    #[test]
    fn single_nodes_print() {
        let f = parse_fn(PAPER[0], args()).unwrap();
        let access = f
            .graph
            .reachable(f.root)
            .into_iter()
            .find(|n| matches!(f.graph.node(*n), Node::Access { arg: 3, .. }));
        assert_eq!(node_to_string(&f, access.unwrap()), "d[i + k]");
    }
}

/// Tests of the parser: structure of the parsed graph and semantic errors.
#[cfg(test)]
mod parse_tests {
    use crate::symbolic::affine::{Affine, RatAffine, VarId};
    use crate::symbolic::expr::{CmpOp, Cond, Node};
    use crate::symbolic::index_fn::{ArgDecl, IndexFn};
    use crate::symbolic::parse::parse_fn;
    use crate::Error;

    fn decls(list: &[(&str, &[usize])]) -> Vec<ArgDecl> {
        let decl = |(name, shape): &(&str, &[usize])| ArgDecl {
            name: name.to_string(),
            shape: shape.to_vec(),
        };
        list.iter().map(decl).collect()
    }

    fn args() -> Vec<ArgDecl> {
        decls(&[("x", &[5]), ("y", &[5, 5]), ("d", &[8]), ("s", &[])])
    }

    fn parse(src: &str) -> IndexFn {
        parse_fn(src, args()).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    fn root(f: &IndexFn) -> &Node {
        f.graph.node(f.root)
    }

    #[test]
    fn binders_are_fresh_and_shadow() {
        let f = parse("f[i] = sum{k}_0^4 (y[i; k] * sum{k}_0^4 (x[k]))");
        assert_eq!(f.var_names, ["i", "k", "k"]);
        let Node::Reduce { var, body, .. } = root(&f) else {
            panic!()
        };
        assert_eq!(*var, VarId(1));
        let inner = f
            .graph
            .reachable(*body)
            .into_iter()
            .find_map(|n| match f.graph.node(n) {
                Node::Reduce { var, body, .. } => Some((*var, *body)),
                _ => None,
            });
        let (v, b) = inner.unwrap();
        assert_eq!(v, VarId(2));
        assert_eq!(
            f.graph.node(b),
            &Node::Access {
                arg: 0,
                index: vec![Affine::var(v)]
            }
        );
    }

    #[test]
    fn bounds_guards_and_index_values() {
        let (i, k) = (VarId(0), VarId(1));
        let f = parse("f[i] = sum{k}_(max [0; i - 2])^(min [4; i; 2*i/3]) (x[k])");
        let Node::Reduce { range, .. } = root(&f) else {
            panic!()
        };
        let im2 = Affine::var(i).add_const(-2).unwrap();
        assert_eq!(
            range.lower,
            [RatAffine::constant(0), RatAffine::integer(im2)]
        );
        let two_i = Affine::var(i).scale(2).unwrap();
        assert_eq!(range.upper[2], RatAffine::new(two_i, 3).unwrap());
        let f = parse("f[i] = if {i >= 2} then (x[i]) else (0)");
        let Node::Select { cond, .. } = root(&f) else {
            panic!()
        };
        let im2 = RatAffine::integer(Affine::var(i).add_const(-2).unwrap());
        assert_eq!(cond, &Cond::Index(im2, CmpOp::Ge));
        let f = parse("f[i] = if {(i - 1)/2 is int} then (x[i]) else (-1)");
        let Node::Select { cond, .. } = root(&f) else {
            panic!()
        };
        let half = RatAffine::new(Affine::var(i).add_const(-1).unwrap(), 2).unwrap();
        assert_eq!(cond, &Cond::IsInt(half));
        let f = parse("f[i] = if {x[i] * i < i * i} then (x[i]) else (0)");
        let Node::Select { cond, .. } = root(&f) else {
            panic!()
        };
        assert!(matches!(cond, Cond::Value(_, CmpOp::Lt, _)));
        let f = parse("f[i; k] = idx(i - k) + i + max(k, x[i])");
        let ik = Affine::var(i).sub(&Affine::var(k)).unwrap();
        assert!(f
            .graph
            .reachable(f.root)
            .iter()
            .any(|n| f.graph.node(*n) == &Node::Index(ik.clone())));
        assert_eq!(
            f.graph.len(),
            f.node_count(),
            "unused nodes are compacted away"
        );
    }

    fn invalid(src: &str) -> String {
        match parse_fn(src, args()) {
            Err(Error::Invalid { function, message }) => {
                assert_eq!(function, "f");
                message
            }
            other => panic!("{src}: expected an invalid-function error, got {other:?}"),
        }
    }

    #[test]
    fn semantic_errors_are_explained() {
        assert_eq!(invalid("f[i] = q[i]"), "unknown argument `q`");
        assert_eq!(
            invalid("f[i] = y[i]"),
            "argument `y` has rank 2 but is indexed with 1 index"
        );
        assert_eq!(
            invalid("f[i] = s[i]"),
            "argument `s` has rank 0 but is indexed with 1 index"
        );
        assert_eq!(
            invalid("f[i; j] = y[i*j; 0]"),
            "non-affine index expression `i*j`"
        );
        assert_eq!(
            invalid("f[i] = x[i/2]"),
            "non-integer index expression `i/2`"
        );
        assert_eq!(
            invalid("f[i] = x[1/2*i]"),
            "non-integer index expression `1/2*i`"
        );
        assert_eq!(
            invalid("f[i] = x[1.5]"),
            "non-integer index expression `1.5`"
        );
        assert_eq!(
            invalid("f[i] = x[i/0]"),
            "division by zero in index expression `i/0`"
        );
        assert_eq!(
            invalid("f[i] = x[x[i]]"),
            "non-affine index expression `x[i]`"
        );
        assert_eq!(invalid("f[i] = x[q]"), "unknown index `q`");
        assert_eq!(invalid("f[i] = x[i] * q"), "unknown index `q`");
        assert_eq!(invalid("f[i] = x[i] * x"), "argument `x` must be indexed");
        assert_eq!(invalid("f[i] = sum{k}_0^4 (x[k]) + k"), "unknown index `k`");
        assert_eq!(invalid("f[i] = sum{k}_0^k (x[k])"), "unknown index `k`");
        assert_eq!(invalid("f[i; i] = x[i]"), "duplicate output index `i`");
        assert_eq!(
            invalid("f[x] = s[]"),
            "index `x` has the same name as an argument"
        );
        assert_eq!(
            invalid("f[i] = idx(i/2)"),
            "non-integer index expression `i/2`"
        );
        assert_eq!(
            invalid("f[i] = sum{k}_(i*i)^4 (x[k])"),
            "non-affine bound `i*i`"
        );
        assert!(invalid("f[i] = if {x[i] is int} then (1) else (0)").contains("`x[i]`"));
        assert!(matches!(
            parse_fn("f[i] = x[i * 99999999999 * 99999999999]", args()),
            Err(Error::Overflow { .. })
        ));
        let bad = vec![ArgDecl {
            name: "exp".into(),
            shape: vec![],
        }];
        assert!(matches!(
            crate::symbolic::parse::parse_fn("f[] = 1", bad),
            Err(Error::Invalid { .. })
        ));
    }
}
