//! Tokens and exact numbers of the index-function notation (Urban & van der
//! Smagt §6), the lexical half of `parse`.
//!
//! Owns the token type, the tokenizer, the token [`Cursor`] with syntax-error
//! reporting, the list of reserved words (shared with `print`, which must
//! never emit a reserved word as a variable name), exact decimal literals and
//! the exact rational affine forms ([`Form`]) the parser converts index
//! expressions, bounds and guards into. It knows nothing about the
//! expression graph. Nothing here panics: the tokenizer never fails (a
//! character outside the notation becomes a [`TokKind::Bad`] token that the
//! parser reports in order) and all arithmetic is checked.
//!
//! Its tests also cover the whole front end's syntax errors and nesting
//! limits.

use super::affine::{Affine, RatAffine, VarId};
use super::expr::BinaryOp;
use crate::Error;
use std::collections::BTreeMap;

/// Words that cannot name an index or an argument.
pub(crate) const RESERVED: [&str; 24] = [
    "exp", "log", "log10", "sqrt", "tanh", "sin", "cos", "abs", "sgn", "sigmoid", "sum", "max",
    "min", "argmax", "argmin", "if", "then", "else", "idx", "is", "int", "inf", "nan", "random",
];

/// Whether `name` is a reserved word of the notation.
pub(crate) fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name)
}

/// Whether `name` is lexed as one identifier: an ASCII letter followed by
/// ASCII letters, digits and `_`.
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Punctuation, longest first so that `**` wins over `*`.
const PUNCT: [&str; 21] = [
    "**", "!=", ">=", "<=", "[", "]", ";", "=", "(", ")", "{", "}", "_", "^", ",", "+", "-", "*",
    "/", ">", "<",
];

/// The kind of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokKind {
    /// An identifier or a reserved word.
    Ident,
    /// `123`, `1.5`, `2e-3`, `1.5E+2` (without sign).
    Number,
    /// One of the punctuation strings.
    Punct(&'static str),
    /// A character that belongs to no token.
    Bad,
    /// End of input.
    Eof,
}

/// One token with its byte span and 1-based line and column (in characters).
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub kind: TokKind,
    pub start: usize,
    pub end: usize,
    pub line: usize,
    pub column: usize,
}

/// Splits `src` into tokens; the last token is always [`TokKind::Eof`].
pub(crate) fn lex(src: &str) -> Vec<Token> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let (mut pos, mut line, mut column) = (0usize, 1usize, 1usize);
    while pos < bytes.len() {
        let c = src[pos..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            pos += c.len_utf8();
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
            continue;
        }
        let start = pos;
        let kind = if c.is_ascii_alphabetic() {
            while pos < bytes.len() && (bytes[pos].is_ascii_alphanumeric() || bytes[pos] == b'_') {
                pos += 1;
            }
            TokKind::Ident
        } else if c.is_ascii_digit() {
            pos = number_end(bytes, pos);
            TokKind::Number
        } else if let Some(p) = PUNCT.iter().find(|p| src[pos..].starts_with(**p)) {
            pos += p.len();
            TokKind::Punct(p)
        } else {
            pos += c.len_utf8();
            TokKind::Bad
        };
        toks.push(Token {
            kind,
            start,
            end: pos,
            line,
            column,
        });
        column += src[start..pos].chars().count();
    }
    toks.push(Token {
        kind: TokKind::Eof,
        start: src.len(),
        end: src.len(),
        line,
        column,
    });
    toks
}

/// End of the number starting at `pos` (a digit).
fn number_end(b: &[u8], mut pos: usize) -> usize {
    let digits = |mut p: usize| {
        while p < b.len() && b[p].is_ascii_digit() {
            p += 1;
        }
        p
    };
    pos = digits(pos);
    if pos + 1 < b.len() && b[pos] == b'.' && b[pos + 1].is_ascii_digit() {
        pos = digits(pos + 1);
    }
    if pos < b.len() && (b[pos] == b'e' || b[pos] == b'E') {
        let mut p = pos + 1;
        if p < b.len() && (b[p] == b'+' || b[p] == b'-') {
            p += 1;
        }
        if p < b.len() && b[p].is_ascii_digit() {
            pos = digits(p);
        }
    }
    pos
}

/// A position in the token list of one source text.
pub(crate) struct Cursor<'a> {
    pub src: &'a str,
    /// Ends with an [`TokKind::Eof`] token.
    pub toks: Vec<Token>,
    pub pos: usize,
}

impl Cursor<'_> {
    /// The current token (`Eof` at the end).
    pub(crate) fn peek(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    /// The token `k` places ahead.
    pub(crate) fn peek_at(&self, k: usize) -> &Token {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)]
    }

    /// The source text of token `k`.
    pub(crate) fn text(&self, k: usize) -> &str {
        let t = &self.toks[k.min(self.toks.len() - 1)];
        &self.src[t.start..t.end]
    }

    /// Whether the current token is the punctuation `p`.
    pub(crate) fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek().kind, TokKind::Punct(q) if q == p)
    }

    /// Whether the current token is the word `w`.
    pub(crate) fn is_word(&self, w: &str) -> bool {
        self.peek().kind == TokKind::Ident && self.text(self.pos) == w
    }

    /// Returns the current token and moves past it (never past `Eof`).
    pub(crate) fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if t.kind != TokKind::Eof {
            self.pos += 1;
        }
        t
    }

    /// A syntax error at the current token.
    pub(crate) fn syntax(&self, expected: &str) -> Error {
        let t = self.peek();
        let found = if t.kind == TokKind::Eof {
            "end of input".to_string()
        } else {
            self.text(self.pos).to_string()
        };
        Error::Syntax {
            line: t.line,
            column: t.column,
            expected: expected.to_string(),
            found,
        }
    }

    /// Consumes punctuation `p` or fails with `expected`.
    pub(crate) fn expect(&mut self, p: &str, expected: &str) -> Result<Token, Error> {
        if self.is_punct(p) {
            Ok(self.bump())
        } else {
            Err(self.syntax(expected))
        }
    }

    /// Consumes the word `w` or fails.
    pub(crate) fn expect_word(&mut self, w: &str) -> Result<(), Error> {
        if self.is_word(w) {
            self.bump();
            Ok(())
        } else {
            Err(self.syntax(&format!("`{w}`")))
        }
    }

    /// After a list item: `true` after `;`, `false` before `]`.
    pub(crate) fn list_sep(&mut self) -> Result<bool, Error> {
        if self.is_punct(";") {
            self.bump();
            Ok(true)
        } else if self.is_punct("]") {
            Ok(false)
        } else {
            Err(self.syntax("`]` or `;`"))
        }
    }
}

/// The exact value of a number literal as `(numerator, denominator)` with
/// `denominator = 10^k`, or `None` when it does not fit in `i64`.
pub(crate) fn exact_decimal(text: &str) -> Option<(i64, i64)> {
    let (mantissa, exp) = match text.find(['e', 'E']) {
        Some(p) => {
            let e = &text[p + 1..];
            let e = e.strip_prefix('+').unwrap_or(e);
            // Longer exponents never give a value that fits.
            let exp: i64 = if e.trim_start_matches('-').len() > 6 {
                return None;
            } else {
                e.parse().ok()?
            };
            (&text[..p], exp)
        }
        None => (text, 0),
    };
    let (int_part, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int_part}{frac}")
        .trim_start_matches('0')
        .to_string();
    let mut exp = exp - frac.len() as i64;
    while exp < 0 && digits.ends_with('0') {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        return Some((0, 1));
    }
    if digits.len() > 19 || exp.abs() > 19 {
        return None;
    }
    let mut n: i64 = digits.parse().ok()?;
    let mut d: i64 = 1;
    for _ in 0..exp.abs() {
        if exp > 0 {
            n = n.checked_mul(10)?;
        } else {
            d = d.checked_mul(10)?;
        }
    }
    Some((n, d))
}

/// An exact rational `n/d` in lowest terms with `d > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Q {
    pub n: i64,
    pub d: i64,
}

pub(crate) fn gcd_u128(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Q {
    pub(crate) const ZERO: Q = Q { n: 0, d: 1 };

    /// `n/d` reduced; `None` for a zero denominator or a result outside i64.
    /// Callers pass products and sums of two i64 products, which stay far
    /// from `i128::MIN`, so negation and division cannot overflow.
    pub(crate) fn new(n: i128, d: i128) -> Option<Q> {
        if d == 0 {
            return None;
        }
        let g = gcd_u128(n.unsigned_abs(), d.unsigned_abs()).max(1) as i128;
        let (n, d) = if d < 0 {
            (-(n / g), -(d / g))
        } else {
            (n / g, d / g)
        };
        Some(Q {
            n: i64::try_from(n).ok()?,
            d: i64::try_from(d).ok()?,
        })
    }

    pub(crate) fn add(self, o: Q) -> Option<Q> {
        let (a, b, c, d) = (self.n as i128, self.d as i128, o.n as i128, o.d as i128);
        Q::new(a * d + c * b, b * d)
    }

    pub(crate) fn mul(self, o: Q) -> Option<Q> {
        Q::new(self.n as i128 * o.n as i128, self.d as i128 * o.d as i128)
    }
}

/// An exact affine form `c + Σ q·v` with rational coefficients.
#[derive(Clone, Debug)]
pub(crate) struct Form {
    pub terms: BTreeMap<VarId, Q>,
    pub c: Q,
}

impl Form {
    pub(crate) fn constant(c: Q) -> Form {
        Form {
            terms: BTreeMap::new(),
            c,
        }
    }

    pub(crate) fn var(v: VarId) -> Form {
        Form {
            terms: BTreeMap::from([(v, Q { n: 1, d: 1 })]),
            c: Q::ZERO,
        }
    }

    pub(crate) fn from_affine(a: &Affine) -> Form {
        Form {
            terms: a
                .terms
                .iter()
                .map(|&(v, c)| (v, Q { n: c, d: 1 }))
                .collect(),
            c: Q {
                n: a.constant,
                d: 1,
            },
        }
    }

    /// `-self`.
    pub(crate) fn neg(&self) -> Option<Form> {
        self.scale(Q { n: -1, d: 1 })
    }

    /// `self - o`.
    pub(crate) fn sub(&self, o: &Form) -> Option<Form> {
        self.add(&o.neg()?)
    }

    /// `self op y` when that is affine (`Add`, `Sub`, `Mul` by a constant,
    /// `Div` by a non-zero constant).
    pub(crate) fn combine(&self, op: BinaryOp, y: &Form) -> Result<Form, BadKind> {
        let overflow = |f: Option<Form>| f.ok_or(BadKind::Overflow);
        match op {
            BinaryOp::Add => overflow(self.add(y)),
            BinaryOp::Sub => overflow(self.sub(y)),
            BinaryOp::Mul => match (self.as_const(), y.as_const()) {
                (Some(c), _) => overflow(y.scale(c)),
                (_, Some(c)) => overflow(self.scale(c)),
                _ => Err(BadKind::NonAffine),
            },
            BinaryOp::Div => match y.as_const() {
                Some(c) if c.n == 0 => Err(BadKind::DivZero),
                Some(c) => overflow(Q::new(c.d as i128, c.n as i128).and_then(|r| self.scale(r))),
                None => Err(BadKind::NonAffine),
            },
            _ => Err(BadKind::NonAffine),
        }
    }

    pub(crate) fn as_const(&self) -> Option<Q> {
        self.terms.is_empty().then_some(self.c)
    }

    pub(crate) fn add(&self, o: &Form) -> Option<Form> {
        let mut terms = self.terms.clone();
        for (v, q) in &o.terms {
            let sum = terms.get(v).copied().unwrap_or(Q::ZERO).add(*q)?;
            if sum.n == 0 {
                terms.remove(v);
            } else {
                terms.insert(*v, sum);
            }
        }
        Some(Form {
            terms,
            c: self.c.add(o.c)?,
        })
    }

    pub(crate) fn scale(&self, k: Q) -> Option<Form> {
        let mut terms = BTreeMap::new();
        for (v, q) in &self.terms {
            let p = q.mul(k)?;
            if p.n != 0 {
                terms.insert(*v, p);
            }
        }
        Some(Form {
            terms,
            c: self.c.mul(k)?,
        })
    }

    pub(crate) fn to_affine(&self) -> Result<Affine, BadKind> {
        if self.c.d != 1 || self.terms.values().any(|q| q.d != 1) {
            return Err(BadKind::NonInteger);
        }
        Affine::from_terms(self.terms.iter().map(|(v, q)| (*v, q.n)), self.c.n)
            .map_err(|_| BadKind::Overflow)
    }

    pub(crate) fn to_rat(&self) -> Result<RatAffine, BadKind> {
        let mut l: i64 = 1;
        for q in self.terms.values().chain(std::iter::once(&self.c)) {
            let g = gcd_u128(l as u128, q.d as u128) as i64;
            l = (l / g).checked_mul(q.d).ok_or(BadKind::Overflow)?;
        }
        let scale = |q: &Q| (q.n).checked_mul(l / q.d).ok_or(BadKind::Overflow);
        let terms = self
            .terms
            .iter()
            .map(|(v, q)| Ok((*v, scale(q)?)))
            .collect::<Result<Vec<_>, BadKind>>()?;
        let num = Affine::from_terms(terms, scale(&self.c)?).map_err(|_| BadKind::Overflow)?;
        RatAffine::new(num, l).map_err(|_| BadKind::Overflow)
    }
}

/// Why an expression has no (suitable) affine form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadKind {
    NonAffine,
    NonInteger,
    DivZero,
    Overflow,
}

/// The offending kind and its source span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bad {
    pub kind: BadKind,
    pub start: usize,
    pub end: usize,
}

impl Bad {
    /// The error for an expression that is not the affine form `ctx` needs
    /// (`ctx`: "index expression", "bound", ...), quoting the source text.
    pub(crate) fn error(&self, src: &str, function: &str, ctx: &str) -> Error {
        let text = src.get(self.start..self.end).unwrap_or("").trim();
        let message = match self.kind {
            BadKind::NonAffine => format!("non-affine {ctx} `{text}`"),
            BadKind::NonInteger => format!("non-integer {ctx} `{text}`"),
            BadKind::DivZero => format!("division by zero in {ctx} `{text}`"),
            BadKind::Overflow => {
                let op = format!("{function}: {ctx} `{text}`");
                return Error::Overflow { op };
            }
        };
        let function = function.to_string();
        Error::Invalid { function, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokKind, String)> {
        lex(src)
            .into_iter()
            .map(|t| (t.kind, src[t.start..t.end].to_string()))
            .collect()
    }

    #[test]
    fn tokens_and_positions() {
        let t = kinds("sum{k}_0^4 x**2 != 1.5e-3");
        let texts: Vec<&str> = t.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(
            texts,
            ["sum", "{", "k", "}", "_", "0", "^", "4", "x", "**", "2", "!=", "1.5e-3", ""]
        );
        let toks = lex("a\n  b");
        assert_eq!((toks[1].line, toks[1].column), (2, 3));
        assert_eq!(lex("é@x")[2].column, 3);
    }

    #[test]
    fn exact_decimals() {
        assert_eq!(exact_decimal("120"), Some((120, 1)));
        assert_eq!(exact_decimal("1.50"), Some((15, 10)));
        assert_eq!(exact_decimal("1.5E+2"), Some((150, 1)));
        assert_eq!(exact_decimal("2e-3"), Some((2, 1000)));
        assert_eq!(exact_decimal("0.000"), Some((0, 1)));
        assert_eq!(exact_decimal("1e30"), None);
        assert_eq!(exact_decimal("1e99999999999999"), None);
        assert_eq!(exact_decimal("99999999999999999999"), None);
    }

    // Tests of the whole text front end (lexer and parser) on bad input.

    use crate::symbolic::index_fn::ArgDecl;
    use crate::symbolic::parse::parse_fn;

    fn parse(src: &str) -> Result<crate::symbolic::IndexFn, Error> {
        let decl = |name: &str, shape: &[usize]| ArgDecl {
            name: name.to_string(),
            shape: shape.to_vec(),
        };
        parse_fn(
            src,
            vec![decl("x", &[5]), decl("y", &[5, 5]), decl("s", &[])],
        )
    }

    fn syntax(src: &str) -> (usize, usize, String, String) {
        match parse(src) {
            Err(Error::Syntax {
                line,
                column,
                expected,
                found,
            }) => (line, column, expected, found),
            other => panic!("{src}: expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn syntax_errors_point_at_the_token() {
        let e =
            |l: usize, c: usize, exp: &str, found: &str| (l, c, exp.to_string(), found.to_string());
        assert_eq!(syntax("f[i] = x[i"), e(1, 11, "`]` or `;`", "end of input"));
        assert_eq!(
            syntax("f[i] = max(x[i], 1"),
            e(1, 19, "`)` or an operator", "end of input")
        );
        assert_eq!(syntax("f[i] = x[i) + 1"), e(1, 11, "`]` or `;`", ")"));
        assert_eq!(
            syntax("f[i] =\n  x[i] +\n\t* 2"),
            e(3, 2, "an expression", "*")
        );
        assert_eq!(
            syntax("f[i] = x[i] @ 2"),
            e(1, 13, "an operator or end of input", "@")
        );
        assert_eq!(syntax("f[i] = exp -x[i]"), e(1, 12, "an expression", "-"));
        assert_eq!(syntax("f[i = x[i]"), e(1, 5, "`]` or `;`", "="));
        assert_eq!(syntax("[i] = x[i]"), e(1, 1, "a function name", "["));
        assert_eq!(syntax("f[sum] = 1"), e(1, 3, "an index name", "sum"));
        assert_eq!(syntax("f[i] = sum{k}_0 x[k]").2, "`^` and an upper bound");
        assert_eq!(syntax("f[i] = sum{k}_(min [0; i])^4 (x[k])").3, "min");
        assert_eq!(syntax("f[i] = sum{k}_0^(max [4; i]) (x[k])").3, "max");
        assert!(syntax("f[i] = if {x[i]} then (1) else (0)")
            .2
            .contains("is int"));
        assert_eq!(syntax("f[i] = max x[i]").2, "`(` or `{`");
        assert_eq!(syntax("f[i] = x[i] 1.").3, "1");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let openers = [
            "(",
            "-",
            "exp ",
            "x[",
            "2 ** ",
            "sum{k}_0^1 ",
            "idx(",
            "if {1 = ",
        ];
        let more = [
            "max(1, ",
            "sum{k}_(max [0; ",
            "if {1 = 1} then (",
            "y[0; ",
            "-exp (",
        ];
        for open in openers.into_iter().chain(more) {
            let src = format!("f[i] = {}", open.repeat(10_000));
            let (_, _, expected, _) = syntax(&src);
            assert!(expected.contains("nesting too deep"), "{open}: {expected}");
        }
        let ok = format!("f[i] = {}x[i]{}", "(".repeat(60), ")".repeat(60));
        assert!(parse(&ok).is_ok());
        let long = format!("f[i] = x[i]{}", " + x[i]".repeat(10_000));
        assert!(parse(&long).is_ok());
    }
}
