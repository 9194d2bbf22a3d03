//! The parser of the index-function notation (Urban & van der Smagt §6):
//! `f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))`.
//!
//! Owns [`parse_fn`]: text → [`IndexFn`] with name resolution (output
//! indices, binders with shadowing, declared arguments), exact affine
//! conversion of index expressions, bounds and guards, and error reporting
//! (syntax errors with line and column, semantic errors naming the
//! function). Output sizes are not inferred here (`index_fn` does that) and
//! bounds are not checked here (`check` does that). Must never panic, on any
//! input: recursion is bounded and all index arithmetic is checked.
//!
//! Every expression is parsed once into both a value node (built with the
//! graph's simplifying constructors) and, where possible, an exact rational
//! affine form; the context decides which one is used. Nodes that end up
//! unused (index expressions, guard operands) are dropped by a final
//! compaction of the graph.
//!
//! Two leniencies let the paper's printed derivatives (§6) parse as they
//! are: a `)` missing before `else` (their `dc`) and `)`s missing at the
//! very end of the input (their `da`, `db`) are supplied.

use super::affine::{Affine, RatAffine, VarId};
use super::expr::{BinaryOp, CmpOp, Cond, Graph, Node, NodeId, Range, ReduceOp, UnaryOp};
use super::index_fn::{ArgDecl, IndexFn};
use super::lexer::{exact_decimal, is_identifier, is_reserved, lex, Bad, BadKind, Form, Q};
use super::lexer::{Cursor, TokKind, Token};
use crate::Error;

/// Maximum syntactic nesting (parentheses, brackets, unary minus, function
/// application, `**`, reductions) before the parser gives up.
const MAX_DEPTH: usize = 256;

/// Chains of `+`/`-` (or `*`/`/`) with this many operands or more are
/// folded as balanced trees (see `Parser::fold`), as the graph builds them.
const BALANCE_FROM: usize = Graph::BALANCE_FROM;

/// Stack the parser may use below its entry point. Release builds reach
/// [`MAX_DEPTH`] first; unoptimised builds have much larger frames and
/// stop here, well inside a 2 MiB thread stack.
const STACK_BUDGET: usize = 1 << 20;

/// The address of a local: an estimate of the current stack position.
#[inline(never)]
fn stack_addr() -> usize {
    let probe = 0u8;
    std::hint::black_box(&probe) as *const u8 as usize
}

/// A parsed expression: its value node and, if it has one, its affine form.
struct Val {
    node: NodeId,
    form: Result<Form, Bad>,
    start: usize,
    end: usize,
}

fn val(node: NodeId, form: Result<Form, Bad>, start: usize, end: usize) -> Val {
    Val {
        node,
        form,
        start,
        end,
    }
}

struct Parser<'a> {
    cur: Cursor<'a>,
    depth: usize,
    stack_base: usize,
    fname: String,
    args: &'a [ArgDecl],
    graph: Graph,
    var_names: Vec<String>,
    scope: Vec<(String, VarId)>,
    /// Size symbols (`crate::symbolic::sizes`): names every index
    /// expression may use, after the indices in scope.
    symbols: Vec<(String, VarId)>,
}

/// Parses an index function. The result has an empty `out_shape` (the
/// caller infers sizes and checks bounds); `var_names[v]` names every index
/// variable, output indices are `VarId(0..n)` and every binder occurrence
/// gets a fresh variable.
pub(crate) fn parse_fn(src: &str, args: Vec<ArgDecl>) -> Result<IndexFn, Error> {
    parse_fn_with_symbols(src, args, &[]).map(|(f, _)| f)
}

/// As [`parse_fn`], with size symbols: names index expressions and sum
/// bounds may use besides the indices in scope. Each gets a variable after
/// the output indices (`VarId(n..n + k)`, in the order given), returned
/// with the function, whether the text uses it or not.
pub(crate) fn parse_fn_with_symbols(
    src: &str,
    args: Vec<ArgDecl>,
    symbols: &[String],
) -> Result<(IndexFn, Vec<VarId>), Error> {
    let mut p = Parser {
        cur: Cursor {
            src,
            toks: lex(src),
            pos: 0,
        },
        depth: 0,
        stack_base: stack_addr(),
        fname: "index function".to_string(),
        args: &args,
        graph: Graph::new(),
        var_names: Vec::new(),
        scope: Vec::new(),
        symbols: Vec::new(),
    };
    if p.peek().kind != TokKind::Ident {
        return Err(p.syntax("a function name"));
    }
    p.fname = p.text(p.pos).to_string();
    p.pos += 1;
    for (k, a) in args.iter().enumerate() {
        if !is_identifier(&a.name) || is_reserved(&a.name) {
            return Err(p.invalid(format!(
                "`{}` cannot name an argument (it must be an identifier and not a reserved word)",
                a.name
            )));
        }
        if args[..k].iter().any(|b| b.name == a.name) {
            return Err(p.invalid(format!("argument `{}` is declared twice", a.name)));
        }
    }
    p.expect("[", "`[`")?;
    let mut out_vars = Vec::new();
    if !p.is_punct("]") {
        loop {
            let name = p.index_name()?;
            if p.scope.iter().any(|(n, _)| *n == name) {
                return Err(p.invalid(format!("duplicate output index `{name}`")));
            }
            let v = p.new_var(name.clone());
            p.scope.push((name, v));
            out_vars.push(v);
            if !p.list_sep()? {
                break;
            }
        }
    }
    p.expect("]", "`]`")?;
    for name in symbols {
        if p.scope.iter().any(|(n, _)| n == name) {
            return Err(p.invalid(format!("`{name}` names both an output index and a size")));
        }
        let v = p.new_var(name.clone());
        p.symbols.push((name.clone(), v));
    }
    p.expect("=", "`=`")?;
    let body = p.expr()?;
    if p.peek().kind != TokKind::Eof {
        return Err(p.syntax("an operator or end of input"));
    }
    let (graph, root) = compact(&p.graph, body.node);
    let symbol_vars = p.symbols.iter().map(|(_, v)| *v).collect();
    let f = IndexFn {
        name: p.fname,
        out_vars,
        out_shape: Vec::new(),
        var_names: p.var_names,
        graph,
        root,
        args,
    };
    Ok((f, symbol_vars))
}

/// Copies the nodes reachable from `root` into a fresh graph (same
/// structure, no unused nodes).
fn compact(g: &Graph, root: NodeId) -> (Graph, NodeId) {
    let mut out = Graph::new();
    let mut map: Vec<NodeId> = (0..g.len() as u32).map(NodeId).collect();
    for n in g.reachable(root) {
        let m = |x: &mut NodeId| *x = map.get(x.0 as usize).copied().unwrap_or(*x);
        let mut node = g.node(n).clone();
        match &mut node {
            Node::Unary(_, a) | Node::Reduce { body: a, .. } => m(a),
            Node::Binary(_, a, b) => {
                m(a);
                m(b);
            }
            Node::Random { key, .. } => key.iter_mut().for_each(m),
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                if let Cond::Value(a, _, b) = cond {
                    m(a);
                    m(b);
                }
                m(then);
                m(otherwise);
            }
            Node::Const(_) | Node::Access { .. } | Node::Index(_) => {}
        }
        let id = out.intern(node);
        if let Some(slot) = map.get_mut(n.0 as usize) {
            *slot = id;
        }
    }
    let root = map.get(root.0 as usize).copied().unwrap_or(root);
    (out, root)
}

impl<'a> std::ops::Deref for Parser<'a> {
    type Target = Cursor<'a>;
    fn deref(&self) -> &Cursor<'a> {
        &self.cur
    }
}

impl std::ops::DerefMut for Parser<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cur
    }
}

impl Parser<'_> {
    fn invalid(&self, message: String) -> Error {
        Error::Invalid {
            function: self.fname.clone(),
            message,
        }
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH || stack_addr().abs_diff(self.stack_base) > STACK_BUDGET {
            return Err(self.syntax("a less deeply nested expression (nesting too deep)"));
        }
        Ok(())
    }

    /// A name for a new index (output index or binder).
    fn index_name(&mut self) -> Result<String, Error> {
        if self.peek().kind != TokKind::Ident || is_reserved(self.text(self.pos)) {
            return Err(self.syntax("an index name"));
        }
        let name = self.text(self.pos).to_string();
        self.bump();
        if self.args.iter().any(|a| a.name == name) {
            return Err(self.invalid(format!("index `{name}` has the same name as an argument")));
        }
        Ok(name)
    }

    fn new_var(&mut self, name: String) -> VarId {
        self.var_names.push(name);
        VarId(self.var_names.len() as u32 - 1)
    }

    /// The innermost index of that name in scope.
    fn lookup_index(&self, name: &str) -> Result<VarId, Error> {
        if let Some((_, v)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Ok(*v);
        }
        if let Some((_, v)) = self.symbols.iter().find(|(n, _)| n == name) {
            return Ok(*v);
        }
        Err(self.invalid(if self.args.iter().any(|a| a.name == name) {
            format!("argument `{name}` must be indexed")
        } else {
            format!("unknown index `{name}`")
        }))
    }

    fn bad_error(&self, bad: Bad, ctx: &str) -> Error {
        bad.error(self.src, &self.fname, ctx)
    }

    /// The integer affine form of an index expression, or the error.
    fn to_int(&self, v: &Val, ctx: &str) -> Result<Affine, Error> {
        self.convert(v, ctx, Form::to_affine)
    }

    /// The rational affine form of a bound or guard, or the error.
    fn to_rat(&self, v: &Val, ctx: &str) -> Result<RatAffine, Error> {
        self.convert(v, ctx, Form::to_rat)
    }

    fn convert<T>(
        &self,
        v: &Val,
        ctx: &str,
        conv: fn(&Form) -> Result<T, BadKind>,
    ) -> Result<T, Error> {
        let form = v.form.as_ref().map_err(|b| self.bad_error(*b, ctx))?;
        conv(form).map_err(|kind| {
            let (start, end) = (v.start, v.end);
            self.bad_error(Bad { kind, start, end }, ctx)
        })
    }

    /// A value that has no affine form.
    fn opaque(&self, node: NodeId, start: usize, end: usize) -> Val {
        let kind = BadKind::NonAffine;
        val(node, Err(Bad { kind, start, end }), start, end)
    }

    fn binary(&mut self, op: BinaryOp, a: Val, b: Val) -> Val {
        let node = self.graph.binary(op, a.node, b.node);
        let (start, end) = (a.start, b.end);
        let form = match (a.form, b.form) {
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(x), Ok(y)) => x.combine(op, &y).map_err(|kind| Bad { kind, start, end }),
        };
        val(node, form, start, end)
    }

    /// `expr := term (('+'|'-') term)*` and `term := unary (('*'|'/')
    /// unary)*`, read as flat lists (a nesting level costs few stack frames:
    /// the limit must hold in debug builds) and folded by [`Self::fold`].
    fn expr(&mut self) -> Result<Val, Error> {
        self.enter()?;
        let mut first_term: Option<Val> = None;
        let mut more_terms: Vec<(BinaryOp, Val)> = Vec::new();
        let mut term_op = BinaryOp::Add;
        let mut first_factor = self.unary()?;
        let mut more_factors: Vec<(BinaryOp, Val)> = Vec::new();
        loop {
            let op = match self.peek().kind {
                TokKind::Punct("+") => BinaryOp::Add,
                TokKind::Punct("-") => BinaryOp::Sub,
                TokKind::Punct("*") => BinaryOp::Mul,
                TokKind::Punct("/") => BinaryOp::Div,
                _ => break,
            };
            self.bump();
            let operand = self.unary()?;
            if matches!(op, BinaryOp::Mul | BinaryOp::Div) {
                more_factors.push((op, operand));
                continue;
            }
            let factor = std::mem::replace(&mut first_factor, operand);
            let term = self.fold(BinaryOp::Mul, factor, std::mem::take(&mut more_factors));
            match first_term {
                None => first_term = Some(term),
                Some(_) => more_terms.push((term_op, term)),
            }
            term_op = op;
        }
        let term = self.fold(BinaryOp::Mul, first_factor, more_factors);
        let value = match first_term {
            None => term,
            Some(first) => {
                more_terms.push((term_op, term));
                self.fold(BinaryOp::Add, first, more_terms)
            }
        };
        self.depth -= 1;
        Ok(value)
    }

    /// Folds `first op1 v1 op2 v2 ...`, where every op is `direct` (`+` or
    /// `*`) or its inverse: left to right, as written, below
    /// [`BALANCE_FROM`] operands; longer chains as `balanced(direct
    /// operands) inverse balanced(inverse operands)`, so a 10,000-term sum
    /// is a tree of depth 14 and no later pass recurses 10,000 deep.
    fn fold(&mut self, direct: BinaryOp, first: Val, rest: Vec<(BinaryOp, Val)>) -> Val {
        if rest.len() + 1 < BALANCE_FROM {
            return rest
                .into_iter()
                .fold(first, |acc, (op, v)| self.binary(op, acc, v));
        }
        let inverse = match direct {
            BinaryOp::Add => BinaryOp::Sub,
            _ => BinaryOp::Div,
        };
        let (pos, neg): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(op, _)| *op == direct);
        let pos = self.balanced(direct, first, pos.into_iter().map(|(_, v)| v).collect());
        let mut neg = neg.into_iter().map(|(_, v)| v);
        match neg.next() {
            Some(n) => {
                let neg = self.balanced(direct, n, neg.collect());
                self.binary(inverse, pos, neg)
            }
            None => pos,
        }
    }

    /// `first op v1 op v2 ...` as a balanced tree.
    fn balanced(&mut self, op: BinaryOp, first: Val, rest: Vec<Val>) -> Val {
        let mut level = rest;
        level.insert(0, first);
        loop {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            let mut it = level.into_iter();
            while let Some(a) = it.next() {
                next.push(match it.next() {
                    Some(b) => self.binary(op, a, b),
                    None => a,
                });
            }
            match <[Val; 1]>::try_from(next) {
                Ok([root]) => return root,
                Err(more) => level = more,
            }
        }
    }

    /// `unary := '-' unary | power` and `power := app ['**' unary]`.
    fn unary(&mut self) -> Result<Val, Error> {
        let mut negs = Vec::new();
        while self.is_punct("-") {
            negs.push(self.bump().start);
            self.enter()?;
        }
        let mut v = self.app()?;
        if self.is_punct("**") {
            self.bump();
            self.enter()?;
            let e = self.unary()?;
            self.depth -= 1;
            v = self.binary(BinaryOp::Pow, v, e);
        }
        for start in negs.into_iter().rev() {
            v = self.negate(v, start);
            self.depth -= 1;
        }
        Ok(v)
    }

    fn negate(&mut self, x: Val, start: usize) -> Val {
        let node = self.graph.neg(x.node);
        let end = x.end;
        let overflow = Bad {
            kind: BadKind::Overflow,
            start,
            end,
        };
        let form = x.form.and_then(|f| f.neg().ok_or(overflow));
        val(node, form, start, end)
    }

    /// `app := FUNC app | atom`
    fn app(&mut self) -> Result<Val, Error> {
        let mut funcs = Vec::new();
        while self.peek().kind == TokKind::Ident {
            let Some(op) = UnaryOp::from_name(self.text(self.pos)) else {
                break;
            };
            funcs.push((op, self.bump().start));
            self.enter()?;
        }
        let mut v = self.atom()?;
        for (op, start) in funcs.into_iter().rev() {
            let node = self.graph.unary(op, v.node);
            v = self.opaque(node, start, v.end);
            self.depth -= 1;
        }
        Ok(v)
    }

    /// Dispatches on the first token of an atom; keeps its own frame small.
    fn atom(&mut self) -> Result<Val, Error> {
        let src: &str = self.src;
        let t = self.peek();
        let (kind, word) = (t.kind, &src[t.start..t.end]);
        let next = self.peek_at(1).kind;
        match (kind, word) {
            (TokKind::Number, _) => Ok(self.number()),
            (TokKind::Punct("("), _) => self.paren(),
            (TokKind::Ident, "inf" | "nan") => Ok(self.special_const(word == "inf")),
            (TokKind::Ident, "idx") => self.idx(),
            (TokKind::Ident, "random") => self.random(),
            (TokKind::Ident, "max" | "min") if next == TokKind::Punct("(") => self.max_min(),
            (TokKind::Ident, "max" | "min") if next != TokKind::Punct("{") => {
                self.bump();
                Err(self.syntax("`(` or `{`"))
            }
            (TokKind::Ident, "if") => self.select(),
            (TokKind::Ident, w) if ReduceOp::from_name(w).is_some() => self.reduction(),
            (TokKind::Ident, w) if !is_reserved(w) && next == TokKind::Punct("[") => self.access(),
            (TokKind::Ident, w) if !is_reserved(w) => self.index_atom(),
            _ => Err(self.syntax("an expression")),
        }
    }

    fn number(&mut self) -> Val {
        let t = self.bump();
        let text = &self.src[t.start..t.end];
        let node = self.graph.constant(text.parse().unwrap_or(f64::NAN));
        let (kind, start, end) = (BadKind::Overflow, t.start, t.end);
        let form = exact_decimal(text)
            .and_then(|(n, d)| Q::new(n as i128, d as i128))
            .map(Form::constant)
            .ok_or(Bad { kind, start, end });
        val(node, form, start, end)
    }

    fn special_const(&mut self, inf: bool) -> Val {
        let t = self.bump();
        let node = self
            .graph
            .constant(if inf { f64::INFINITY } else { f64::NAN });
        let (kind, start, end) = (BadKind::NonInteger, t.start, t.end);
        val(node, Err(Bad { kind, start, end }), start, end)
    }

    /// `'(' expr ')'`. A `)` missing at the very end of the input is
    /// supplied: the paper's printed derivatives wrt. `a` and `b` lack one.
    fn paren(&mut self) -> Result<Val, Error> {
        let start = self.bump().start;
        let mut v = self.expr()?;
        v.end = match self.peek().kind {
            TokKind::Eof => self.src.len(),
            _ => self.expect(")", "`)` or an operator")?.end,
        };
        v.start = start;
        Ok(v)
    }

    /// `'idx' '(' affine-expr ')'`
    fn idx(&mut self) -> Result<Val, Error> {
        let start = self.bump().start;
        self.expect("(", "`(`")?;
        let v = self.expr()?;
        let end = self.expect(")", "`)` or an operator")?.end;
        let a = self.to_int(&v, "index expression")?;
        let node = self.graph.index_value(a.clone());
        Ok(val(node, Ok(Form::from_affine(&a)), start, end))
    }

    /// `'random' '(' expr ',' expr ',' expr ';' affine-expr ')'`
    fn random(&mut self) -> Result<Val, Error> {
        let start = self.bump().start;
        self.expect("(", "`(`")?;
        let mut key = [NodeId(0); 3];
        for (w, k) in key.iter_mut().enumerate() {
            *k = self.expr()?.node;
            let sep = if w < 2 { "," } else { ";" };
            self.expect(sep, if w < 2 { "`,`" } else { "`;`" })?;
        }
        let v = self.expr()?;
        let end = self.expect(")", "`)` or an operator")?.end;
        let counter = self.to_int(&v, "random counter")?;
        let node = self.graph.random(key, counter);
        Ok(self.opaque(node, start, end))
    }

    /// `('max'|'min') '(' expr ',' expr ')'`
    fn max_min(&mut self) -> Result<Val, Error> {
        let t = self.bump();
        let op = if &self.src[t.start..t.end] == "max" {
            BinaryOp::Max
        } else {
            BinaryOp::Min
        };
        self.bump();
        let a = self.expr()?;
        self.expect(",", "`,` or an operator")?;
        let b = self.expr()?;
        let end = self.expect(")", "`)` or an operator")?.end;
        let node = self.graph.binary(op, a.node, b.node);
        Ok(self.opaque(node, t.start, end))
    }

    /// An index in scope used as a number.
    fn index_atom(&mut self) -> Result<Val, Error> {
        let t = self.bump();
        let v = self.lookup_index(&self.src[t.start..t.end])?;
        let node = self.graph.index_value(Affine::var(v));
        Ok(val(node, Ok(Form::var(v)), t.start, t.end))
    }

    /// `IDENT '[' [index (';' index)*] ']'`
    fn access(&mut self) -> Result<Val, Error> {
        let t = self.bump();
        self.bump();
        let mut vals = Vec::new();
        if !self.is_punct("]") {
            loop {
                vals.push(self.expr()?);
                if !self.list_sep()? {
                    break;
                }
            }
        }
        self.access_end(t, vals)
    }

    fn access_end(&mut self, t: Token, vals: Vec<Val>) -> Result<Val, Error> {
        let name = &self.src[t.start..t.end];
        let Some(arg) = self.args.iter().position(|a| a.name == name) else {
            return Err(self.invalid(format!("unknown argument `{name}`")));
        };
        let end = self.expect("]", "`]` or `;`")?.end;
        let rank = self.args[arg].shape.len();
        if vals.len() != rank {
            let count = vals.len();
            let plural = if count == 1 { "index" } else { "indices" };
            return Err(self.invalid(format!(
                "argument `{name}` has rank {rank} but is indexed with {count} {plural}"
            )));
        }
        let index = vals
            .iter()
            .map(|v| self.to_int(v, "index expression"))
            .collect::<Result<Vec<_>, Error>>()?;
        let node = self.graph.access(arg, index);
        Ok(self.opaque(node, t.start, end))
    }

    /// `RED '{' IDENT '}' '_' bound '^' bound app`
    fn reduction(&mut self) -> Result<Val, Error> {
        let (start, op, var, range) = self.reduction_head()?;
        self.enter()?;
        let body = self.app()?;
        self.depth -= 1;
        self.scope.pop();
        let node = self.graph.reduce(op, var, range, body.node);
        Ok(self.opaque(node, start, body.end))
    }

    /// Everything before the body; brings the new variable into scope.
    fn reduction_head(&mut self) -> Result<(usize, ReduceOp, VarId, Range), Error> {
        let t = self.bump();
        let op = ReduceOp::from_name(&self.src[t.start..t.end]).unwrap_or(ReduceOp::Sum);
        self.expect("{", "`{`")?;
        let name = self.index_name()?;
        self.expect("}", "`}`")?;
        self.expect("_", "`_` and a lower bound")?;
        let lower = self.bound(true)?;
        self.expect("^", "`^` and an upper bound")?;
        let upper = self.bound(false)?;
        let v = self.new_var(name.clone());
        self.scope.push((name, v));
        Ok((t.start, op, v, Range { lower, upper }))
    }

    /// `bound := NUMBER | '-' NUMBER | IDENT | '(' boundexpr ')'`
    fn bound(&mut self, lower: bool) -> Result<Vec<RatAffine>, Error> {
        let t = self.peek().clone();
        match t.kind {
            TokKind::Number => Ok(vec![{
                let v = self.atom()?;
                self.to_rat(&v, "bound")?
            }]),
            TokKind::Punct("-") if self.peek_at(1).kind == TokKind::Number => Ok(vec![{
                let v = self.unary()?;
                self.to_rat(&v, "bound")?
            }]),
            TokKind::Ident if !is_reserved(self.text(self.pos)) => {
                let name = self.text(self.pos).to_string();
                self.bump();
                let v = self.lookup_index(&name)?;
                Ok(vec![RatAffine::integer(Affine::var(v))])
            }
            TokKind::Punct("(") => {
                self.bump();
                let list = (self.is_word("max") || self.is_word("min"))
                    && self.peek_at(1).kind == TokKind::Punct("[");
                let mut out = Vec::new();
                if list {
                    let want = if lower { "max" } else { "min" };
                    if !self.is_word(want) {
                        let side = if lower { "a lower" } else { "an upper" };
                        return Err(self.syntax(&format!(
                            "`{want} [` ({side} bound list takes the {want}imum)"
                        )));
                    }
                    self.bump();
                    self.bump();
                    loop {
                        let v = self.expr()?;
                        out.push(self.to_rat(&v, "bound")?);
                        if !self.list_sep()? {
                            break;
                        }
                    }
                    self.bump();
                } else {
                    let v = self.expr()?;
                    out.push(self.to_rat(&v, "bound")?);
                }
                self.expect(")", "`)`")?;
                Ok(out)
            }
            _ => Err(self.syntax("a bound (a number, an index or `(`)")),
        }
    }

    /// `'if' '{' cond '}' 'then' '(' expr ')' 'else' '(' expr ')'`
    fn select(&mut self) -> Result<Val, Error> {
        let start = self.bump().start;
        let cond = self.cond_block()?;
        let then = self.expr()?;
        self.then_end()?;
        let otherwise = self.expr()?;
        let end = self.expect(")", "`)` or an operator")?.end;
        let node = self.graph.select(cond, then.node, otherwise.node);
        Ok(self.opaque(node, start, end))
    }

    /// `'{' cond '}' 'then' '('`
    fn cond_block(&mut self) -> Result<Cond, Error> {
        self.expect("{", "`{`")?;
        let cond = self.cond()?;
        self.expect("}", "`}`")?;
        self.expect_word("then")?;
        self.expect("(", "`(`")?;
        Ok(cond)
    }

    /// `')' 'else' '('`. The paper's printed derivative wrt. `c` omits the
    /// `)`; `then (a else (b)` is accepted too (no other reading exists).
    fn then_end(&mut self) -> Result<(), Error> {
        if !self.is_word("else") {
            self.expect(")", "`)` or an operator")?;
        }
        self.expect_word("else")?;
        self.expect("(", "`(`")?;
        Ok(())
    }

    /// `cond := expr CMP expr | expr 'is' 'int'`
    fn cond(&mut self) -> Result<Cond, Error> {
        let a = self.expr()?;
        if self.is_word("is") {
            self.bump();
            self.expect_word("int")?;
            return Ok(Cond::IsInt(self.to_rat(&a, "`is int` operand")?));
        }
        let op = match self.peek().kind {
            TokKind::Punct(p) => CmpOp::ALL.iter().find(|(_, s)| *s == p).map(|(o, _)| *o),
            _ => None,
        };
        let Some(op) = op else {
            return Err(self.syntax("a comparison (`=`, `!=`, `<`, `<=`, `>`, `>=`) or `is int`"));
        };
        self.bump();
        let b = self.expr()?;
        if let (Ok(x), Ok(y)) = (&a.form, &b.form) {
            if let Some(Ok(r)) = x.sub(y).map(|d| d.to_rat()) {
                return Ok(Cond::Index(r, op));
            }
        }
        Ok(Cond::Value(a.node, op, b.node))
    }
}

#[cfg(test)]
mod tests;
