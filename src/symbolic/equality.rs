//! Alpha-equivalence of index functions: `impl PartialEq for IndexFn`.
//!
//! Two functions are equal when they have the same name, output shape and
//! arguments (names and shapes) and their bodies are structurally equal
//! under a bijection of index variables: output indices are matched by
//! position, binders when entering corresponding reductions. Variable names
//! and `VarId` numbering are ignored; constants are compared by bits, except
//! that all NaNs are equal. Shared subexpressions are compared once per
//! variable context (memoised), so comparing DAGs stays linear in practice.
//! Must not modify either function.
//!
//! Its tests include the front end's property tests: random functions
//! print and parse back to equal functions, and random or mutated text
//! never makes the parser panic.

use super::affine::{Affine, RatAffine, VarId};
use super::expr::{Cond, Node, NodeId, Range};
use super::index_fn::IndexFn;
use rustc_hash::FxHashMap as HashMap;

impl PartialEq for IndexFn {
    /// Alpha-equivalence (see the module documentation).
    fn eq(&self, other: &IndexFn) -> bool {
        self.name == other.name && self.eq_but_name(other)
    }
}

impl IndexFn {
    /// Alpha-equivalence whatever the two functions are named (a stage
    /// compared with a cut, with no renamed copy made).
    pub(crate) fn eq_but_name(&self, other: &IndexFn) -> bool {
        if self.out_shape != other.out_shape
            || self.args != other.args
            || self.out_vars.len() != other.out_vars.len()
        {
            return false;
        }
        let mut m = Matcher {
            a: self,
            b: other,
            ab: HashMap::default(),
            ba: HashMap::default(),
            memo: HashMap::default(),
        };
        for (&x, &y) in self.out_vars.iter().zip(&other.out_vars) {
            if m.ab.insert(x, y).is_some() || m.ba.insert(y, x).is_some() {
                return false;
            }
        }
        m.node(self.root, other.root)
    }
}

/// Memo key: a node pair and the current binding of each side's free
/// variables.
type Key = (NodeId, NodeId, Vec<Option<VarId>>, Vec<Option<VarId>>);

struct Matcher<'a> {
    a: &'a IndexFn,
    b: &'a IndexFn,
    /// Current bijection between the variables of `a` and of `b`.
    ab: HashMap<VarId, VarId>,
    ba: HashMap<VarId, VarId>,
    memo: HashMap<Key, bool>,
}

impl Matcher<'_> {
    /// Whether `x` (of `a`) and `y` (of `b`) denote the same variable.
    /// Variables bound nowhere match only themselves.
    fn var(&self, x: VarId, y: VarId) -> bool {
        match (self.ab.get(&x), self.ba.get(&y)) {
            (Some(&y2), Some(&x2)) => y2 == y && x2 == x,
            (None, None) => x == y,
            _ => false,
        }
    }

    fn affine(&self, p: &Affine, q: &Affine) -> bool {
        if p.constant != q.constant || p.terms.len() != q.terms.len() {
            return false;
        }
        let mut mapped: Vec<(VarId, i64, VarId)> = p
            .terms
            .iter()
            .map(|&(x, c)| (self.ab.get(&x).copied().unwrap_or(x), c, x))
            .collect();
        mapped.sort();
        mapped
            .iter()
            .zip(&q.terms)
            .all(|(&(y, c, x), &(y2, c2))| y == y2 && c == c2 && self.var(x, y))
    }

    fn rat(&self, p: &RatAffine, q: &RatAffine) -> bool {
        p.den == q.den && self.affine(&p.num, &q.num)
    }

    fn range(&self, p: &Range, q: &Range) -> bool {
        let list = |x: &[RatAffine], y: &[RatAffine]| {
            x.len() == y.len() && x.iter().zip(y).all(|(r, s)| self.rat(r, s))
        };
        list(&p.lower, &q.lower) && list(&p.upper, &q.upper)
    }

    fn cond(&mut self, p: &Cond, q: &Cond) -> bool {
        match (p, q) {
            (Cond::Index(r, o), Cond::Index(s, o2)) => o == o2 && self.rat(r, s),
            (Cond::IsInt(r), Cond::IsInt(s)) => self.rat(r, s),
            (Cond::Value(a, o, b), Cond::Value(a2, o2, b2)) => {
                o == o2 && self.node(*a, *a2) && self.node(*b, *b2)
            }
            _ => false,
        }
    }

    fn node(&mut self, x: NodeId, y: NodeId) -> bool {
        let (ga, gb) = (&self.a.graph, &self.b.graph);
        let key: Key = (
            x,
            y,
            ga.free_vars(x)
                .iter()
                .map(|v| self.ab.get(v).copied())
                .collect(),
            gb.free_vars(y)
                .iter()
                .map(|v| self.ba.get(v).copied())
                .collect(),
        );
        if let Some(&r) = self.memo.get(&key) {
            return r;
        }
        let r = match (ga.node(x), gb.node(y)) {
            (Node::Const(p), Node::Const(q)) => {
                p == q || (f64::from_bits(*p).is_nan() && f64::from_bits(*q).is_nan())
            }
            (Node::Access { arg, index }, Node::Access { arg: a2, index: i2 }) => {
                arg == a2
                    && index.len() == i2.len()
                    && index.iter().zip(i2).all(|(p, q)| self.affine(p, q))
            }
            (Node::Index(p), Node::Index(q)) => self.affine(p, q),
            (
                Node::Random { key, counter },
                Node::Random {
                    key: k2,
                    counter: c2,
                },
            ) => {
                let (key, k2) = (*key, *k2);
                self.affine(counter, c2) && key.iter().zip(k2).all(|(a, b)| self.node(*a, b))
            }
            (Node::Unary(o, a), Node::Unary(o2, a2)) => o == o2 && self.node(*a, *a2),
            (Node::Binary(o, a, b), Node::Binary(o2, a2, b2)) => {
                o == o2 && self.node(*a, *a2) && self.node(*b, *b2)
            }
            (
                Node::Select {
                    cond,
                    then,
                    otherwise,
                },
                Node::Select {
                    cond: c2,
                    then: t2,
                    otherwise: e2,
                },
            ) => {
                let (cond, c2) = (cond.clone(), c2.clone());
                let (then, t2, otherwise, e2) = (*then, *t2, *otherwise, *e2);
                self.cond(&cond, &c2) && self.node(then, t2) && self.node(otherwise, e2)
            }
            (
                Node::Reduce {
                    op,
                    var,
                    range,
                    body,
                },
                Node::Reduce {
                    op: op2,
                    var: v2,
                    range: r2,
                    body: b2,
                },
            ) => {
                op == op2 && self.range(range, r2) && {
                    let (var, v2, body, b2) = (*var, *v2, *body, *b2);
                    let old_ab = self.ab.insert(var, v2);
                    let old_ba = self.ba.insert(v2, var);
                    let r = self.node(body, b2);
                    restore(&mut self.ab, var, old_ab);
                    restore(&mut self.ba, v2, old_ba);
                    r
                }
            }
            _ => false,
        };
        self.memo.insert(key, r);
        r
    }
}

fn restore(map: &mut HashMap<VarId, VarId>, k: VarId, old: Option<VarId>) {
    match old {
        Some(v) => map.insert(k, v),
        None => map.remove(&k),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolic::expr::{BinaryOp, CmpOp, Graph, ReduceOp, UnaryOp};
    use crate::symbolic::index_fn::ArgDecl;
    use crate::symbolic::parse::parse_fn;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn args() -> Vec<ArgDecl> {
        let decl = |name: &str, shape: &[usize]| ArgDecl {
            name: name.to_string(),
            shape: shape.to_vec(),
        };
        vec![decl("x", &[5]), decl("y", &[5, 5])]
    }

    fn parse(src: &str) -> IndexFn {
        parse_fn(src, args()).unwrap()
    }

    #[test]
    fn alpha_equivalence_ignores_names() {
        let a = parse("f[i; j] = sum{k}_0^4 (y[i; k] * x[k] + j)");
        let b = parse("f[p; q] = sum{z}_0^4 (y[p; z] * x[z] + q)");
        assert!(a == b);
        let c = parse("f[p; q] = sum{z}_0^4 (y[q; z] * x[z] + p)");
        assert!(a != c, "output indices are matched by position");
        let d = parse("g[i; j] = sum{k}_0^4 (y[i; k] * x[k] + j)");
        assert!(a != d, "names of functions matter");
    }

    #[test]
    fn binders_are_matched_by_scope() {
        let a = parse("f[i] = sum{k}_0^4 (y[i; k] * sum{k}_0^4 (x[k]))");
        let b = parse("f[i] = sum{k}_0^4 (y[i; k] * sum{l}_0^4 (x[l]))");
        let c = parse("f[i] = sum{k}_0^4 (y[i; k] * sum{l}_0^4 (x[k]))");
        assert!(a == b);
        assert!(a != c);
        let d = parse("f[i] = sum{k}_0^3 (y[i; k] * sum{l}_0^4 (x[l]))");
        assert!(a != d, "ranges matter");
    }

    #[test]
    fn constants_by_bits_and_nans_equal() {
        assert!(parse("f[i] = x[i] + nan") == parse("f[i] = x[i] + 0 / 0"));
        assert!(parse("f[i] = x[i] + 0.1") != parse("f[i] = x[i] + 0.10000000000000002"));
    }

    #[test]
    fn shared_dag_is_compared_in_linear_time() {
        // 2^60 paths through the tree; the memo keeps this instant.
        let mut f = parse("f[i] = x[i]");
        let mut n = f.root;
        for _ in 0..60 {
            let m = f.graph.mul(n, n);
            n = f.graph.unary(crate::symbolic::expr::UnaryOp::Exp, m);
        }
        f.root = n;
        assert!(f == f.clone());
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let valid = [
            "f[i; j] = exp (-sum{k}_0^4 (((y[i; k] + y[j; k]) ** 2 * y[i; i] + x[i + k] ** 3)))",
            "f[i] = sum{k}_(max [0; -2 + i])^(min [4; i]) (if {i + -k = 0} then (x[k]) else (0))",
            "f[i; j] = if {(i - j)/2 is int} then (idx(i - j) * max(x[i], s[])) else (-1.5e-3)",
            "f[i] = argmax{k}_0^(i) (x[k] ** -1 / sqrt abs x[i]) + inf - nan",
        ];
        let alphabet = [
            "f",
            "i",
            "j",
            "k",
            "x",
            "y",
            "s",
            "q",
            "[",
            "]",
            ";",
            "=",
            "(",
            ")",
            "{",
            "}",
            "_",
            "^",
            ",",
            "+",
            "-",
            "*",
            "/",
            "**",
            "!=",
            ">=",
            "<",
            " ",
            "\n",
            "0",
            "1",
            "2.5",
            "1e9",
            "99999999999999999999",
            "exp",
            "sum",
            "max",
            "min",
            "if",
            "then",
            "else",
            "idx",
            "is",
            "int",
            "inf",
            "@",
            "é",
        ];
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..10_000 {
            let src: String = if round % 2 == 0 {
                let n = rng.gen_range(0..40);
                (0..n)
                    .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
                    .collect()
            } else {
                let mut chars: Vec<char> = valid[rng.gen_range(0..valid.len())].chars().collect();
                for _ in 0..rng.gen_range(1..5) {
                    let at = rng.gen_range(0..=chars.len());
                    let c = alphabet[rng.gen_range(0..alphabet.len())]
                        .chars()
                        .next()
                        .unwrap_or(' ');
                    match rng.gen_range(0..3) {
                        0 => chars.insert(at, c),
                        1 if at < chars.len() => drop(chars.remove(at)),
                        _ if at < chars.len() => chars[at] = c,
                        _ => {}
                    }
                }
                chars.into_iter().collect()
            };
            let _ = parse_fn(&src, fuzz_args());
        }
        for src in valid {
            parse_fn(src, fuzz_args()).unwrap_or_else(|e| panic!("{src}: {e}"));
        }
    }

    fn fuzz_args() -> Vec<ArgDecl> {
        let mut a = args();
        a.push(ArgDecl {
            name: "s".into(),
            shape: vec![],
        });
        a
    }

    /// Random functions built with the graph's constructors.
    struct Gen {
        rng: StdRng,
        g: Graph,
        names: Vec<String>,
    }

    const CONSTS: [f64; 14] = [
        0.0,
        1.0,
        2.0,
        -3.0,
        0.5,
        -2.25,
        1e-7,
        -3e20,
        1e300,
        0.1,
        123456.789,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];

    impl Gen {
        fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
            xs[self.rng.gen_range(0..xs.len())]
        }

        fn affine(&mut self, scope: &[VarId]) -> Affine {
            let n = self.rng.gen_range(0..=2.min(scope.len()));
            let terms: Vec<(VarId, i64)> = (0..n)
                .map(|_| (self.pick(scope), self.pick(&[-2, -1, 1, 1, 3])))
                .collect();
            let c = if self.rng.gen_bool(0.5) {
                self.rng.gen_range(-3..=3)
            } else {
                0
            };
            Affine::from_terms(terms, c).unwrap()
        }

        fn rat(&mut self, scope: &[VarId], dens: &[i64]) -> RatAffine {
            let den = self.pick(dens);
            RatAffine::new(self.affine(scope), den).unwrap()
        }

        fn access(&mut self, scope: &[VarId]) -> NodeId {
            let arg = self.rng.gen_range(0..2);
            let index = (0..=arg).map(|_| self.affine(scope)).collect();
            self.g.access(arg, index)
        }

        fn expr(&mut self, depth: u32, scope: &mut Vec<VarId>) -> NodeId {
            if depth == 0 || self.rng.gen_bool(0.2) {
                return match self.rng.gen_range(0..4) {
                    0 => {
                        let c = self.pick(&CONSTS);
                        self.g.constant(c)
                    }
                    1 if !scope.is_empty() => {
                        let a = self.affine(scope);
                        self.g.index_value(a)
                    }
                    _ => self.access(scope),
                };
            }
            match self.rng.gen_range(0..8) {
                0 => {
                    let ops = [UnaryOp::Neg, UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log10];
                    let op = self.pick(
                        &ops.into_iter()
                            .chain([UnaryOp::Sigmoid])
                            .collect::<Vec<_>>(),
                    );
                    let a = self.expr(depth - 1, scope);
                    self.g.unary(op, a)
                }
                1..=3 => {
                    use BinaryOp::*;
                    let op = self.pick(&[Add, Sub, Mul, Div, Pow, Max, Min]);
                    let a = self.expr(depth - 1, scope);
                    let b = self.expr(depth - 1, scope);
                    self.g.binary(op, a, b)
                }
                4 | 5 => {
                    let ops = [
                        ReduceOp::Sum,
                        ReduceOp::Sum,
                        ReduceOp::Max,
                        ReduceOp::ArgMin,
                    ];
                    let op = self.pick(&ops);
                    let (nl, nu) = (self.rng.gen_range(1..=2), self.rng.gen_range(1..=2));
                    let lower = (0..nl).map(|_| self.rat(scope, &[1, 1, 2])).collect();
                    let upper = (0..nu).map(|_| self.rat(scope, &[1, 1, 3])).collect();
                    let name = self.pick(&["k", "k", "l", "i"]).to_string();
                    self.names.push(name);
                    let v = VarId(self.names.len() as u32 - 1);
                    scope.push(v);
                    let body = self.expr(depth - 1, scope);
                    scope.pop();
                    self.g.reduce(op, v, Range { lower, upper }, body)
                }
                _ => {
                    let op = self.pick(&CmpOp::ALL).0;
                    let cond = match self.rng.gen_range(0..3) {
                        0 => Cond::Index(self.rat(scope, &[1, 1, 2]), op),
                        1 => Cond::IsInt(self.rat(scope, &[1, 2, 3])),
                        _ => {
                            let a = self.access(scope);
                            Cond::Value(a, op, self.expr(depth - 1, scope))
                        }
                    };
                    let a = self.expr(depth - 1, scope);
                    let b = self.expr(depth - 1, scope);
                    self.g.select(cond, a, b)
                }
            }
        }
    }

    #[test]
    fn random_functions_print_and_parse_back() {
        let mut gen = Gen {
            rng: StdRng::seed_from_u64(2017),
            g: Graph::new(),
            names: vec![],
        };
        for round in 0..1000 {
            let n_out = round % 3;
            gen.g = Graph::new();
            gen.names = ["i", "j"][..n_out].iter().map(|s| s.to_string()).collect();
            let mut scope: Vec<VarId> = (0..n_out as u32).map(VarId).collect();
            let root = gen.expr(1 + round as u32 % 5, &mut scope);
            let f = IndexFn {
                name: "f".into(),
                out_vars: (0..n_out as u32).map(VarId).collect(),
                out_shape: vec![5; n_out],
                args: args(),
                var_names: gen.names.clone(),
                graph: gen.g.clone(),
                root,
            };
            let s = f.to_string();
            let mut g = parse_fn(&s, args()).unwrap_or_else(|e| panic!("{s}: {e}"));
            g.out_shape = f.out_shape.clone();
            assert!(
                f == g,
                "round {round}: {s}\nparsed back as {g:?}\nfrom {f:?}"
            );
            assert_eq!(g.to_string(), s);
        }
    }
}
