//! [`IndexFn`]: one element-wise defined function `out[α] = body(α)`.
//!
//! Owns the function record (name, output indices and sizes, declared
//! arguments, the index-variable table and the body DAG), size inference and
//! the public entry points (`parse`, `derive`, `eval_f64`, ...). The pieces
//! of work live in sibling modules: `parse`, `print`, `check`, `eval`,
//! `derive`.

use super::affine::VarId;
use super::expr::{Graph, Node, NodeId};
use crate::Error;

/// A declared argument: its name and shape (row-major, dense).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgDecl {
    pub name: String,
    pub shape: Vec<usize>,
}

/// Row-major strides (elements) of a dense `shape`, `None` when they
/// overflow `i64`.
///
/// ```
/// assert_eq!(tenjin::symbolic::index_fn::row_major_strides(&[2, 3, 4]), Some(vec![12, 4, 1]));
/// ```
pub fn row_major_strides(shape: &[usize]) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].checked_mul(i64::try_from(shape[d + 1]).ok()?)?;
    }
    Some(strides)
}

/// An element-wise defined tensor function, e.g.
/// `f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))`.
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j])",
///                        &[("a", &[2, 3][..]), ("b", &[3, 2][..])])?;
/// assert_eq!(f.output_shape(), &[2, 2]);
/// let y = f.eval_f64(&[("a", &[1., 2., 3., 4., 5., 6.][..]), ("b", &[1., 0., 0., 1., 1., 1.][..])])?;
/// assert_eq!(y, vec![4., 5., 10., 11.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct IndexFn {
    pub(crate) name: String,
    pub(crate) out_vars: Vec<VarId>,
    pub(crate) out_shape: Vec<usize>,
    pub(crate) args: Vec<ArgDecl>,
    /// Name of every index variable, indexed by `VarId`.
    pub(crate) var_names: Vec<String>,
    pub(crate) graph: Graph,
    pub(crate) root: NodeId,
}

impl IndexFn {
    /// Parses a function in the paper's notation; output sizes are inferred
    /// from the arguments (an output index that appears alone in an argument
    /// dimension takes that dimension's size).
    pub fn parse(src: &str, args: &[(&str, &[usize])]) -> Result<IndexFn, Error> {
        IndexFn::parse_with_sizes(src, args, &[])
    }

    /// As [`IndexFn::parse`], with explicit sizes for output indices (they
    /// take precedence over inference).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse_with_sizes("f[i] = x[i + 2]", &[("x", &[9][..])], &[("i", 7)])?;
    /// assert_eq!(f.output_shape(), &[7]);
    /// assert!(IndexFn::parse_with_sizes("f[i] = x[i + 2]", &[("x", &[9][..])], &[("i", 8)]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn parse_with_sizes(
        src: &str,
        args: &[(&str, &[usize])],
        sizes: &[(&str, usize)],
    ) -> Result<IndexFn, Error> {
        let decls: Vec<ArgDecl> = args
            .iter()
            .map(|(n, s)| ArgDecl {
                name: n.to_string(),
                shape: s.to_vec(),
            })
            .collect();
        let mut f = super::parse::parse_fn(src, decls)?;
        f.out_shape = f.infer_sizes(sizes)?;
        f.check_bounds()?;
        Ok(f)
    }

    /// The function's name (`f` in `f[i] = ...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This function with the body `root` of `graph` (the rest cloned,
    /// the old graph not).
    pub(crate) fn with_body(&self, graph: Graph, root: NodeId) -> IndexFn {
        IndexFn {
            name: self.name.clone(),
            out_vars: self.out_vars.clone(),
            out_shape: self.out_shape.clone(),
            args: self.args.clone(),
            var_names: self.var_names.clone(),
            graph,
            root,
        }
    }

    /// The output shape.
    pub fn output_shape(&self) -> &[usize] {
        &self.out_shape
    }

    /// The declared arguments, in order.
    pub fn args(&self) -> &[ArgDecl] {
        &self.args
    }

    /// The names of the output indices.
    pub fn output_indices(&self) -> Vec<&str> {
        self.out_vars.iter().map(|v| self.var_name(*v)).collect()
    }

    pub(crate) fn var_name(&self, v: VarId) -> &str {
        &self.var_names[v.0 as usize]
    }

    pub(crate) fn arg_index(&self, name: &str) -> Option<usize> {
        self.args.iter().position(|a| a.name == name)
    }

    /// Number of distinct nodes reachable from the body (a measure of size
    /// with common subexpressions counted once).
    pub fn node_count(&self) -> usize {
        self.graph.reachable(self.root).len()
    }

    pub(crate) fn invalid(&self, message: impl Into<String>) -> Error {
        Error::Invalid {
            function: self.name.clone(),
            message: message.into(),
        }
    }

    /// Sizes of the output indices: explicit ones first, else the size of an
    /// argument dimension the index appears alone in.
    fn infer_sizes(&self, explicit: &[(&str, usize)]) -> Result<Vec<usize>, Error> {
        let args: Vec<Vec<usize>> = self.args.iter().map(|a| a.shape.clone()).collect();
        self.infer_out_sizes(&args, explicit, &|n| n.to_string())
    }

    /// The output's sizes, of any kind `S` (a number, an affine form of
    /// size symbols) given each argument's (`args`): an `explicit` one,
    /// else that of an argument dimension the index appears alone in (two
    /// that differ are an error, unless one is given); `show` writes one.
    pub(crate) fn infer_out_sizes<S: Clone + PartialEq>(
        &self,
        args: &[Vec<S>],
        explicit: &[(&str, S)],
        show: &dyn Fn(&S) -> String,
    ) -> Result<Vec<S>, Error> {
        let given = |name: &str| {
            explicit
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.clone())
        };
        for (name, _) in explicit {
            if !self.out_vars.iter().any(|v| self.var_name(*v) == *name) {
                return Err(self.invalid(format!(
                    "a size was given for `{name}`, which is not an output index"
                )));
            }
        }
        let mut inferred: Vec<Option<(S, String)>> = vec![None; self.out_vars.len()];
        for n in self.graph.reachable(self.root) {
            if let Node::Access { arg, index } = self.graph.node(n) {
                let decl = &self.args[*arg];
                for (d, form) in index.iter().enumerate() {
                    let Some(v) = form.as_single_var() else {
                        continue;
                    };
                    let Some(pos) = self.out_vars.iter().position(|o| *o == v) else {
                        continue;
                    };
                    let size = &args[*arg][d];
                    match &inferred[pos] {
                        None => {
                            inferred[pos] = Some((size.clone(), format!("{}[dim {d}]", decl.name)))
                        }
                        Some((s, from)) if s != size && given(self.var_name(v)).is_none() => {
                            return Err(self.invalid(format!(
                                "index `{}` is sized {} by {from} but {} by {}[dim {d}]",
                                self.var_name(v),
                                show(s),
                                show(size),
                                decl.name
                            )))
                        }
                        _ => {}
                    }
                }
            }
        }
        self.out_vars
            .iter()
            .zip(inferred)
            .map(|(v, inf)| {
                let name = self.var_name(*v);
                given(name).or(inf.map(|(s, _)| s)).ok_or_else(|| {
                    self.invalid(format!(
                        "output index `{name}` cannot be sized: it appears alone in no argument dimension; give its size"
                    ))
                })
            })
            .collect()
    }
}
