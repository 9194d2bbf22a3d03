//! Sizes that stay symbols (issue 28): index functions whose dimensions
//! are affine forms in named sizes (`B`, `T − 2`, `2·M`), derived exactly
//! for every value of them at once.
//!
//! Owns [`Extents`] (each dimension's size as an affine form in the size
//! symbols, constants for a concrete function) and [`SymbolicFn`] (a
//! function with symbolic sizes: parsed, bounds-checked, derived, printed
//! and bound to values). A size symbol is a variable of the function like
//! an index, never summed and never an output index, ranging over
//! `[2, ∞)` (0 and 1 stay specialised, as in torch.compile); the solver
//! treats it as a parameter, so the derivative's sum ranges come out as
//! affine forms in it (`sum{b}_0^(-1 + B)`), conditions on sizes become
//! guards, and facts that hold for every size are proved over the whole
//! range (`Extents::least`). Sizes used as numbers (`idx(B)`, a mean's
//! `1/B`) stay symbols too: nothing is folded. Must not plan or compile:
//! [`SymbolicFn::bind`] gives the concrete function the rest of the
//! pipeline takes.
//!
//! ```
//! use tenjin::symbolic::sizes::SymbolicFn;
//! let f = SymbolicFn::parse(
//!     "y[b; o] = sum{k}_0^3 (x[b; k] * w[k; o])",
//!     &[("x", &["B", "4"][..]), ("w", &["4", "3"][..])],
//!     &[],
//! )?;
//! let dw = f.derive("w")?;
//! assert_eq!(dw.to_string(), "dw[dw_0; dw_1] = sum{dw_z0}_0^(-1 + B) (dy[dw_z0; dw_1] * x[dw_z0; dw_0])");
//! // One derivative for every batch size:
//! for b in [2, 5, 64] {
//!     assert_eq!(dw.bind(&[("B", b)])?.to_string(), f.bind(&[("B", b)])?.derive("w")?.to_string());
//! }
//! # Ok::<(), tenjin::Error>(())
//! ```

use super::affine::{Affine, VarId};
use super::index_fn::{ArgDecl, IndexFn};
use super::parse::parse_fn_with_symbols;
use super::subst::substitute;
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

/// The least value a size symbol takes (unless its declared range starts
/// higher).
pub const MIN_SIZE: i64 = 2;

/// Each dimension's size as an affine form in the size symbols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Extents {
    /// The size symbols' variables.
    pub(crate) symbols: Vec<VarId>,
    /// Each symbol's range: its least value (at least [`MIN_SIZE`]) and
    /// its greatest, if declared.
    pub(crate) ranges: Vec<(i64, Option<i64>)>,
    /// Per argument, per dimension.
    pub(crate) args: Vec<Vec<Affine>>,
    /// Per output dimension.
    pub(crate) out: Vec<Affine>,
}

impl Extents {
    /// A concrete function's sizes: constants, no symbols.
    pub(crate) fn of(f: &IndexFn) -> Extents {
        let constants =
            |shape: &[usize]| shape.iter().map(|&n| Affine::constant(n as i64)).collect();
        Extents {
            symbols: Vec::new(),
            ranges: Vec::new(),
            args: f.args.iter().map(|a| constants(&a.shape)).collect(),
            out: constants(&f.out_shape),
        }
    }

    /// Rows `S − lo ≥ 0` and `hi − S ≥ 0`: each symbol's range.
    pub(crate) fn symbol_rows(&self) -> Vec<Affine> {
        let mut rows = Vec::new();
        for (&s, &(lo, hi)) in self.symbols.iter().zip(&self.ranges) {
            rows.push(Affine {
                terms: vec![(s, 1)],
                constant: -lo,
            });
            if let Some(hi) = hi {
                rows.push(Affine {
                    terms: vec![(s, -1)],
                    constant: hi,
                });
            }
        }
        rows
    }

    pub(crate) fn is_symbol(&self, v: VarId) -> bool {
        self.symbols.contains(&v)
    }

    /// The least value of `form`, a form in the symbols alone, over every
    /// value of them in their ranges; `None` when it has none (a negative
    /// coefficient of a symbol with no greatest value: it falls without
    /// bound) or `form` reads another variable.
    pub(crate) fn least(&self, form: &Affine) -> Option<i64> {
        form.terms.iter().try_fold(form.constant, |acc, &(v, c)| {
            let (lo, hi) = self.ranges[self.symbols.iter().position(|&s| s == v)?];
            let at = if c >= 0 { lo } else { hi? };
            acc.checked_add(c.checked_mul(at)?)
        })
    }
}

/// An index function whose sizes are affine forms in named size symbols
/// (see the module documentation).
#[derive(Clone, Debug)]
pub struct SymbolicFn {
    /// The function; its shapes hold every symbol at its least value
    /// (what the parser needs, never used for a decision).
    pub(crate) f: IndexFn,
    pub(crate) extents: Extents,
}

impl SymbolicFn {
    /// Parses `src` with arguments whose sizes are given as text: integers,
    /// size symbols, or affine forms of them (`"B"`, `"784"`, `"T - 2"`,
    /// `"2*M + 1"`); output sizes are inferred from the arguments as
    /// [`IndexFn::parse`] does, or given in `sizes`. Every access is proved
    /// in bounds, and every size at least 0, for every value of the
    /// symbols (each at least [`MIN_SIZE`]).
    ///
    /// ```
    /// use tenjin::symbolic::sizes::SymbolicFn;
    /// // In bounds for every T:
    /// let f = SymbolicFn::parse("y[t] = x[t] + x[t + 2]", &[("x", &["T"][..])], &[("t", "T - 2")])?;
    /// assert_eq!(f.output_sizes(), ["-2 + T"]);
    /// // Out of bounds for some T:
    /// assert!(SymbolicFn::parse("y[t] = x[t + 2]", &[("x", &["T"][..])], &[("t", "T - 1")]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn parse(
        src: &str,
        args: &[(&str, &[&str])],
        sizes: &[(&str, &str)],
    ) -> Result<SymbolicFn, Error> {
        SymbolicFn::parse_in(src, args, sizes, &[])
    }

    /// As [`SymbolicFn::parse`], with declared ranges for some symbols
    /// (`("T", 8..=128)`; `usize::MAX` for no greatest value): proofs hold
    /// over those ranges only, and binding checks them.
    ///
    /// ```
    /// use tenjin::symbolic::sizes::SymbolicFn;
    /// // x[7] is in bounds only from N = 8 on.
    /// let src = "y[i] = x[i] * x[7]";
    /// assert!(SymbolicFn::parse(src, &[("x", &["N"][..])], &[]).is_err());
    /// let f = SymbolicFn::parse_in(src, &[("x", &["N"][..])], &[], &[("N", 8..=usize::MAX)])?;
    /// assert!(f.bind(&[("N", 7)]).is_err());
    /// assert_eq!(f.bind(&[("N", 9)])?.output_shape(), &[9]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn parse_in(
        src: &str,
        args: &[(&str, &[&str])],
        sizes: &[(&str, &str)],
        ranges: &[(&str, std::ops::RangeInclusive<usize>)],
    ) -> Result<SymbolicFn, Error> {
        let mut names: Vec<String> = Vec::new();
        let mut texts: Vec<Vec<Terms>> = Vec::new();
        for (arg, dims) in args {
            let dims = dims
                .iter()
                .map(|d| size_terms(d, &format!("a size of `{arg}`")))
                .collect::<Result<Vec<_>, Error>>()?;
            collect_symbols(&dims, &mut names);
            texts.push(dims);
        }
        let given = sizes
            .iter()
            .map(|(i, d)| Ok((*i, size_terms(d, &format!("the size of `{i}`"))?)))
            .collect::<Result<Vec<_>, Error>>()?;
        collect_symbols(
            &given.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
            &mut names,
        );
        let declared = names
            .iter()
            .map(|n| symbol_range(n, ranges))
            .collect::<Result<Vec<_>, Error>>()?;
        for (n, _) in ranges {
            if !names.iter().any(|m| m == n) {
                return Err(Error::Invalid {
                    function: "symbolic sizes".into(),
                    message: format!("a range was given for `{n}`, which is no size"),
                });
            }
        }
        // The parser reads only the arguments' ranks; their placeholder
        // shapes are set below, once the sizes are forms.
        let decls = args
            .iter()
            .zip(&texts)
            .map(|((name, _), dims)| ArgDecl {
                name: name.to_string(),
                shape: vec![0; dims.len()],
            })
            .collect();
        let (mut f, symbols) = parse_fn_with_symbols(src, decls, &names)?;
        let form = |terms: &Terms| -> Result<Affine, Error> {
            let symbol = |s: &String| symbols[names.iter().position(|n| n == s).unwrap_or(0)];
            let vars = terms
                .iter()
                .filter_map(|(s, c)| Some((symbol(s.as_ref()?), *c)));
            let constant = terms
                .iter()
                .filter(|(s, _)| s.is_none())
                .map(|(_, c)| c)
                .sum();
            Affine::from_terms(vars, constant).map_err(|_| f_overflow(src))
        };
        let arg_extents = texts
            .iter()
            .map(|dims| dims.iter().map(&form).collect())
            .collect::<Result<Vec<Vec<Affine>>, Error>>()?;
        let given = given
            .iter()
            .map(|(i, t)| Ok((*i, form(t)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let out = f.infer_out_sizes(&arg_extents, &given, &|e| show(&f, e))?;
        let extents = Extents {
            symbols,
            ranges: declared,
            args: arg_extents,
            out,
        };
        let sized = extents.args.iter().flatten().map(|e| (None, e));
        let sized = sized.chain(
            f.out_vars
                .iter()
                .zip(&extents.out)
                .map(|(v, e)| (Some(*v), e)),
        );
        for (v, e) in sized {
            if extents.least(e).is_none_or(|m| m < 0) {
                let what = v.map_or("a size".to_string(), |v| {
                    format!("the size of `{}`", f.var_name(v))
                });
                return Err(f.invalid(format!(
                    "{what}, {}, is negative for some value of the sizes (each at least {MIN_SIZE}, or its declared least)",
                    show(&f, e)
                )));
            }
        }
        // Every symbol at its least value.
        let least = |sizes: &[Affine]| -> Vec<usize> {
            sizes
                .iter()
                .map(|e| extents.least(e).map_or(0, |n| n.max(0) as usize))
                .collect()
        };
        f.out_shape = least(&extents.out);
        for (decl, sizes) in f.args.iter_mut().zip(&extents.args) {
            decl.shape = least(sizes);
        }
        f.check_bounds_in(&extents)?;
        Ok(SymbolicFn { f, extents })
    }

    /// The derivative with respect to `arg`, as [`IndexFn::derive`], for
    /// every value of the sizes: its sum ranges and guards are affine in
    /// them.
    pub fn derive(&self, arg: &str) -> Result<SymbolicFn, Error> {
        let (f, extents) = self.f.derive_in(arg, false, &self.extents)?;
        Ok(SymbolicFn { f, extents })
    }

    /// As [`SymbolicFn::derive`], reading the function's saved output
    /// where the derivative needs its value, as
    /// [`IndexFn::derive_reusing_output`] does.
    pub fn derive_reusing_output(&self, arg: &str) -> Result<SymbolicFn, Error> {
        let (f, extents) = self.f.derive_in(arg, true, &self.extents)?;
        Ok(SymbolicFn { f, extents })
    }

    /// The size symbols, in the order they were first named.
    pub fn symbols(&self) -> Vec<&str> {
        self.extents
            .symbols
            .iter()
            .map(|&s| self.f.var_name(s))
            .collect()
    }

    /// The output's sizes, as text.
    pub fn output_sizes(&self) -> Vec<String> {
        self.extents.out.iter().map(|e| show(&self.f, e)).collect()
    }

    /// Each argument's name and sizes, as text (what [`SymbolicFn::parse`]
    /// takes back).
    pub fn arg_sizes(&self) -> Vec<(String, Vec<String>)> {
        self.f
            .args
            .iter()
            .zip(&self.extents.args)
            .map(|(a, e)| (a.name.clone(), e.iter().map(|e| show(&self.f, e)).collect()))
            .collect()
    }

    /// The concrete function at `values` (one per symbol, each at least
    /// [`MIN_SIZE`]): every symbol replaced by its value, in the body, the
    /// sum ranges and the guards alike.
    pub fn bind(&self, values: &[(&str, usize)]) -> Result<IndexFn, Error> {
        let f = &self.f;
        let mut map: HashMap<VarId, Affine> = HashMap::default();
        for (&s, &(lo, hi)) in self.extents.symbols.iter().zip(&self.extents.ranges) {
            let name = f.var_name(s);
            let value = values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, v)| v)
                .ok_or_else(|| f.invalid(format!("no value for the size `{name}`")))?;
            if (value as i64) < MIN_SIZE {
                return Err(f.invalid(format!(
                    "the size `{name}` is {value}: a symbol stands for {MIN_SIZE} or more (sizes 0 and 1 are planned as constants)"
                )));
            }
            if (value as i64) < lo || hi.is_some_and(|hi| value as i64 > hi) {
                let hi = hi.map_or("∞".to_string(), |h| h.to_string());
                return Err(f.invalid(format!(
                    "the size `{name}` is {value}, outside its declared range [{lo}, {hi}]"
                )));
            }
            map.insert(s, Affine::constant(value as i64));
        }
        for (n, _) in values {
            if !self.symbols().contains(n) {
                return Err(f.invalid(format!("`{n}` is not a size of this function")));
            }
        }
        let size = |e: &Affine| -> Result<usize, Error> {
            let n = e.eval(&|v| map.get(&v).map_or(0, |a| a.constant));
            n.ok()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| f.invalid(format!("the size {} is negative here", show(f, e))))
        };
        let mut g = f.graph.clone();
        let root = substitute(&mut g, f.root, &map).map_err(|_| f_overflow(&f.name))?;
        let (graph, root) = g.extract(root);
        let bound = IndexFn {
            name: f.name.clone(),
            out_vars: f.out_vars.clone(),
            out_shape: self
                .extents
                .out
                .iter()
                .map(size)
                .collect::<Result<_, _>>()?,
            args: f
                .args
                .iter()
                .zip(&self.extents.args)
                .map(|(a, e)| {
                    Ok(ArgDecl {
                        name: a.name.clone(),
                        shape: e.iter().map(size).collect::<Result<_, Error>>()?,
                    })
                })
                .collect::<Result<_, Error>>()?,
            var_names: f.var_names.clone(),
            graph,
            root,
        };
        Ok(bound)
    }
}

impl std::fmt::Display for SymbolicFn {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.f.fmt(out)
    }
}

/// A size's terms: `(symbol, coefficient)`, `None` for a constant
/// (`"2*M + 1"` → `[(M, 2), (None, 1)]`).
type Terms = Vec<(Option<String>, i64)>;

/// The terms of a size's text.
fn size_terms(text: &str, what: &str) -> Result<Terms, Error> {
    let bad = || {
        Error::Invalid {
        function: "symbolic sizes".into(),
        message: format!("{what}, `{text}`, is not an affine form of sizes (such as `B`, `784`, `T - 2`, `2*M + 1`)"),
    }
    };
    let spaced = text.replace('-', " - ").replace('+', " + ");
    let mut terms = Vec::new();
    let mut sign = 1i64;
    let mut expect_term = true;
    for word in spaced.split_whitespace() {
        match (word, expect_term) {
            ("+", false) | ("-", false) => {
                sign = if word == "-" { -1 } else { 1 };
                expect_term = true;
            }
            ("-", true) => sign = -sign,
            (_, true) => {
                let (coeff, name) = match word.split_once('*') {
                    Some((a, b)) => match (a.parse::<i64>(), b.parse::<i64>()) {
                        (Ok(c), Err(_)) => (c, Some(b)),
                        (Err(_), Ok(c)) => (c, Some(a)),
                        _ => return Err(bad()),
                    },
                    None => match word.parse::<i64>() {
                        Ok(c) => (c, None),
                        Err(_) => (1, Some(word)),
                    },
                };
                if let Some(n) = name {
                    let ident = n
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !ident {
                        return Err(bad());
                    }
                }
                terms.push((
                    name.map(str::to_string),
                    sign.checked_mul(coeff).ok_or_else(bad)?,
                ));
                sign = 1;
                expect_term = false;
            }
            _ => return Err(bad()),
        }
    }
    if expect_term {
        return Err(bad());
    }
    Ok(terms)
}

/// Adds the symbols `dims` name to `names`, in order, once each.
fn collect_symbols(dims: &[Terms], names: &mut Vec<String>) {
    for (s, _) in dims.iter().flatten() {
        if let Some(s) = s {
            if !names.contains(s) {
                names.push(s.clone());
            }
        }
    }
}

/// The declared range of the symbol `name` (`[MIN_SIZE, ∞)` unless
/// declared; a declared one must start at `MIN_SIZE` or above and not be
/// empty).
fn symbol_range(
    name: &str,
    ranges: &[(&str, std::ops::RangeInclusive<usize>)],
) -> Result<(i64, Option<i64>), Error> {
    let Some((_, r)) = ranges.iter().find(|(n, _)| *n == name) else {
        return Ok((MIN_SIZE, None));
    };
    let (lo, hi) = (*r.start() as i64, *r.end());
    let hi = (hi != usize::MAX).then_some(hi as i64);
    if lo < MIN_SIZE || hi.is_some_and(|h| h < lo) {
        return Err(Error::Invalid {
            function: "symbolic sizes".into(),
            message: format!(
                "the range of `{name}`, {r:?}, must start at {MIN_SIZE} or above and not be empty (sizes 0 and 1 are planned as constants)"
            ),
        });
    }
    Ok((lo, hi))
}

/// `e` as text, in the function's names.
fn show(f: &IndexFn, e: &Affine) -> String {
    super::print::affine_to_string(f, e)
}

fn f_overflow(what: &str) -> Error {
    Error::Overflow {
        op: format!("symbolic sizes of {what}"),
    }
}
