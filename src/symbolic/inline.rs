//! Composition of index functions: an argument replaced by the function
//! that computes it, and sums of functions over the same domain.
//!
//! Owns [`IndexFn::inline_arg`], [`IndexFn::map_output`] (a pointwise map
//! applied to a function's value, the backward pass's fold of an
//! element-wise gradient into the stage producing its input),
//! [`IndexFn::feed_into`] (the same for a gradient step that also reads
//! other values element for element),
//! [`IndexFn::add_fn`], [`IndexFn::identity`] and
//! [`IndexFn::has_reduction`]. Only functions without reductions are
//! inlined (their bodies bind no index, so substituting the output indices
//! is all there is, and nothing is recomputed per read but the element
//! itself): a Jacobian walk keeps the Kronecker deltas of its seed and the
//! element-wise factors it meets symbolic this way, until a sum collapses
//! them (`batch`) or a contraction needs a value. Must not know tensors.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use super::expr::{CmpOp, Cond, Graph, Node, NodeId};
use super::index_fn::{ArgDecl, IndexFn};
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

impl IndexFn {
    /// Whether the body holds a reduction.
    pub fn has_reduction(&self) -> bool {
        self.graph
            .reachable(self.root)
            .into_iter()
            .any(|n| matches!(self.graph.node(n), Node::Reduce { .. }))
    }

    /// The identity over `shape`: `id[b…; i…] = δ(b − i)`, of shape
    /// `shape ++ shape`, reading nothing.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let id = IndexFn::identity(&[2])?;
    /// assert_eq!(id.eval_f64(&[])?, vec![1., 0., 0., 1.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn identity(shape: &[usize]) -> Result<IndexFn, Error> {
        let r = shape.len();
        let var_names: Vec<String> = (0..r)
            .map(|k| format!("b{k}"))
            .chain((0..r).map(|k| format!("i{k}")))
            .collect();
        let mut graph = Graph::new();
        let (one, zero) = (graph.constant(1.0), graph.constant(0.0));
        let mut root = one;
        for k in 0..r {
            let form = Affine::var(VarId(k as u32))
                .sub(&Affine::var(VarId((r + k) as u32)))
                .map_err(|_| Error::Overflow {
                    op: "identity".into(),
                })?;
            let d = graph.select(Cond::Index(RatAffine::integer(form), CmpOp::Eq), one, zero);
            root = graph.mul(root, d);
        }
        Ok(IndexFn {
            name: "id".into(),
            out_vars: (0..2 * r as u32).map(VarId).collect(),
            out_shape: shape.iter().chain(shape).copied().collect(),
            args: Vec::new(),
            var_names,
            graph,
            root,
        })
    }

    /// The function reading its one argument `arg` (of `shape`) whole:
    /// `f[i…] = arg[i…]`, the term that [`IndexFn::add_fn`] adds to a
    /// function to add a buffer to its value.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = x[i] * 2", &[("x", &[3][..])])?;
    /// let g = f.add_fn(&IndexFn::read_whole("sum", &[3])?)?;
    /// assert_eq!(g.to_string(), "f[i] = x[i] * 2 + sum[i]");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn read_whole(arg: &str, shape: &[usize]) -> Result<IndexFn, Error> {
        let mut graph = Graph::new();
        let out_vars: Vec<VarId> = (0..shape.len() as u32).map(VarId).collect();
        let root = graph.access(0, out_vars.iter().map(|&v| Affine::var(v)).collect());
        Ok(IndexFn {
            name: "f".into(),
            out_vars,
            out_shape: shape.to_vec(),
            args: vec![ArgDecl {
                name: arg.into(),
                shape: shape.to_vec(),
            }],
            var_names: (0..shape.len()).map(|k| format!("i{k}")).collect(),
            graph,
            root,
        })
    }

    /// This function with argument `arg` replaced by `def`, a function
    /// without reductions of that argument's shape: every read
    /// `arg[e…]` becomes `def`'s body at `e…`. `def`'s arguments follow the
    /// remaining ones (renamed where names clash).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = sum{j}_0^2 (a[i; j] * w[j])", &[("a", &[2, 3][..]), ("w", &[3][..])])?;
    /// let a = IndexFn::parse("a[i; j] = x[j; i] * 2", &[("x", &[3, 2][..])])?;
    /// let g = f.inline_arg(0, &a)?;
    /// assert_eq!(g.to_string(), "f[i] = sum{j}_0^2 (x[j; i] * 2 * w[j])");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn inline_arg(&self, arg: usize, def: &IndexFn) -> Result<IndexFn, Error> {
        let decl = self
            .args
            .get(arg)
            .ok_or_else(|| self.invalid(format!("no argument number {arg}")))?;
        if decl.shape != def.out_shape || def.has_reduction() {
            return Err(self.invalid(format!(
                "cannot inline {} (shape {:?}{}) for `{}` of shape {:?}",
                def.name,
                def.out_shape,
                if def.has_reduction() {
                    ", with a reduction"
                } else {
                    ""
                },
                decl.name,
                decl.shape
            )));
        }
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("inline {} into {}", def.name, self.name),
        };
        let mut out = self.clone();
        let keep: Vec<usize> = (0..self.args.len()).filter(|&a| a != arg).collect();
        let base = keep.len();
        out.args = keep.iter().map(|&a| self.args[a].clone()).collect();
        append_args(&mut out.args, &def.args);
        let renumber: HashMap<usize, usize> = keep
            .iter()
            .enumerate()
            .map(|(new, &old)| (old, new))
            .collect();
        let mut map: HashMap<NodeId, NodeId> = HashMap::default();
        for n in self.graph.reachable(self.root) {
            let node = self.graph.node(n).map_children(&|c| map[&c]);
            let new = match node {
                Node::Access { arg: a, index } if a == arg => {
                    let at: HashMap<VarId, Affine> =
                        def.out_vars.iter().copied().zip(index).collect();
                    import(&mut out.graph, def, &at, base).map_err(overflow)?
                }
                Node::Access { arg: a, index } => out.graph.access(renumber[&a], index),
                other => out.graph.intern(other),
            };
            map.insert(n, new);
        }
        out.root = map[&self.root];
        let (graph, root) = out.graph.extract(out.root);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }

    /// Whether this function is a *pointwise map* of its one argument,
    /// `h[i…] = φ(a[i…])`: it reads `a` only at its own output index, uses
    /// no index as a value or in a condition, and has no reduction and no
    /// random numbers. Such a `φ` applies to any function's value element
    /// for element, whatever its shape ([`IndexFn::map_output`]).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let scale = IndexFn::parse("h[i; j] = g[i; j] * 0.125", &[("g", &[2, 3][..])])?;
    /// assert!(scale.is_pointwise_map());
    /// let shifted = IndexFn::parse_with_sizes("h[i] = g[i + 1]", &[("g", &[4][..])], &[("i", 3)])?;
    /// assert!(!shifted.is_pointwise_map());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn is_pointwise_map(&self) -> bool {
        let identity: Vec<Affine> = self.out_vars.iter().map(|&v| Affine::var(v)).collect();
        self.args.len() == 1
            && self.args[0].shape == self.out_shape
            && self
                .graph
                .reachable(self.root)
                .into_iter()
                .all(|n| match self.graph.node(n) {
                    Node::Const(_) | Node::Unary(..) | Node::Binary(..) => true,
                    Node::Access { arg, index } => *arg == 0 && *index == identity,
                    Node::Select { cond, .. } => matches!(cond, Cond::Value(..)),
                    Node::Index(_) | Node::Random { .. } | Node::Reduce { .. } => false,
                })
    }

    /// The pointwise map `h` ([`IndexFn::is_pointwise_map`]) applied to
    /// this function's value, element for element: `i… ↦ φ(self[i…])`,
    /// with this function's name, shape and arguments. `h` may be declared
    /// over another shape of as many elements (a gradient that reached it
    /// through a reshape); this function may have reductions.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = sum{j}_0^2 (a[i; j])", &[("a", &[2, 3][..])])?;
    /// let h = IndexFn::parse("h[i] = g[i] * 0.5", &[("g", &[2][..])])?;
    /// let g = f.map_output(&h)?;
    /// assert_eq!(g.to_string(), "f[i] = sum{j}_0^2 (a[i; j]) * 0.5");
    /// assert_eq!(g.eval_f64(&[("a", &[1., 2., 3., 4., 5., 6.][..])])?, vec![3., 7.5]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn map_output(&self, h: &IndexFn) -> Result<IndexFn, Error> {
        let elements = |shape: &[usize]| shape.iter().product::<usize>();
        if !h.is_pointwise_map() || elements(&h.out_shape) != elements(&self.out_shape) {
            return Err(self.invalid(format!(
                "cannot apply {} (shape {:?}) to the value of {} (shape {:?}): not a pointwise map of as many elements",
                h.name, h.out_shape, self.name, self.out_shape
            )));
        }
        let mut out = self.clone();
        let mut map: HashMap<NodeId, NodeId> = HashMap::default();
        for n in h.graph.reachable(h.root) {
            let g = &mut out.graph;
            let new = match h.graph.node(n).map_children(&|c| map[&c]) {
                Node::Const(bits) => g.constant(f64::from_bits(bits)),
                Node::Access { .. } => self.root,
                Node::Unary(op, a) => g.unary(op, a),
                Node::Binary(op, a, b) => g.binary(op, a, b),
                Node::Select {
                    cond,
                    then,
                    otherwise,
                } => g.select(cond, then, otherwise),
                other => {
                    return Err(self.invalid(format!("{other:?} in the pointwise map {}", h.name)))
                }
            };
            map.insert(n, new);
        }
        let (graph, root) = out.graph.extract(map[&h.root]);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }

    /// `other`'s output indices read as this function's, one for one (two
    /// functions over the same domain composed element for element).
    fn indices_for(&self, other: &IndexFn) -> HashMap<VarId, Affine> {
        other
            .out_vars
            .iter()
            .zip(&self.out_vars)
            .map(|(&o, &s)| (o, Affine::var(s)))
            .collect()
    }

    /// Whether this function may take another's value as argument `arg`
    /// through [`IndexFn::feed_into`]: it has no reduction, and reads `arg`
    /// (of its own shape) only at its output index.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let step = IndexFn::parse("h[i] = g[i] * y[i + 1]", &[("g", &[3][..]), ("y", &[4][..])])?;
    /// assert!(step.feeds_elementwise(0) && !step.feeds_elementwise(1));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn feeds_elementwise(&self, arg: usize) -> bool {
        !self.has_reduction() && self.reads_at_output_index(arg)
    }

    /// Whether every read of argument `arg` is at this function's own
    /// output index (`arg` has the output's shape and is read element for
    /// element).
    fn reads_at_output_index(&self, arg: usize) -> bool {
        let identity: Vec<Affine> = self.out_vars.iter().map(|&v| Affine::var(v)).collect();
        self.args
            .get(arg)
            .is_some_and(|a| a.shape == self.out_shape)
            && self
                .graph
                .reachable(self.root)
                .into_iter()
                .all(|n| match self.graph.node(n) {
                    Node::Access { arg: a, index } => *a != arg || *index == identity,
                    _ => true,
                })
    }

    /// This function's value fed to argument `arg` of `h`, a function of
    /// the same shape without reductions that reads `arg` only at its own
    /// output index and may read other arguments anywhere:
    /// `i… ↦ h(self[i…], …)[i…]`. The result has this function's name,
    /// shape and arguments, then `h`'s others (renamed where names clash).
    /// This function may have reductions; each is still computed once per
    /// output element. The backward pass folds a gradient step that reads
    /// its incoming gradient and saved values element for element (a
    /// `tanh`'s `(1 − y²)·df`) into the step computing that gradient this
    /// way ([`IndexFn::map_output`] is the case of a map reading nothing
    /// else).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = sum{j}_0^2 (a[i; j])", &[("a", &[2, 3][..])])?;
    /// let h = IndexFn::parse("h[i] = (1 - y[i] * y[i]) * g[i]", &[("g", &[2][..]), ("y", &[2][..])])?;
    /// let g = f.feed_into(&h, 0)?;
    /// assert_eq!(g.to_string(), "f[i] = (1 - y[i] * y[i]) * sum{j}_0^2 (a[i; j])");
    /// let v = g.eval_f64(&[("a", &[1., 2., 3., 4., 5., 6.][..]), ("y", &[0.5, 2.][..])])?;
    /// assert_eq!(v, vec![0.75 * 6., -3. * 15.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn feed_into(&self, h: &IndexFn, arg: usize) -> Result<IndexFn, Error> {
        if h.out_shape != self.out_shape || !h.feeds_elementwise(arg) {
            return Err(self.invalid(format!(
                "cannot feed {} (shape {:?}) to argument {arg} of {} (shape {:?}): it must have this shape, no reduction, and read that argument at its output index only",
                self.name, self.out_shape, h.name, h.out_shape
            )));
        }
        let mut out = self.clone();
        let base = out.args.len();
        let others: Vec<ArgDecl> = (0..h.args.len())
            .filter(|&a| a != arg)
            .map(|a| h.args[a].clone())
            .collect();
        append_args(&mut out.args, &others);
        let at = self.indices_for(h);
        let value = self.root;
        let body = import_reading(&mut out.graph, h, &at, &mut |g, a, index| {
            if a == arg {
                value
            } else {
                g.access(base + a - usize::from(a > arg), index)
            }
        })
        .map_err(|_| Error::Overflow {
            op: format!("feed {} into {}", self.name, h.name),
        })?;
        let (graph, root) = out.graph.extract(body);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }

    /// This function with argument `drop` read as argument `keep` (the
    /// same tensor passed twice): `drop` removed, the arguments after it
    /// renumbered. Composition names a tensor read by two composed
    /// functions twice (`x` and `x_1`); merged, the planner sees one
    /// operand (`Σ_i x[i; b]·d[i]·x[i; a]` is then one scaled GEMM).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = a[i] * b[i] + a_1[i]", &[("a", &[3][..]), ("b", &[3][..]), ("a_1", &[3][..])])?;
    /// let g = f.merge_args(0, 2)?;
    /// assert_eq!(g.to_string(), "f[i] = a[i] * b[i] + a[i]");
    /// assert_eq!(g.args().len(), 2);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn merge_args(&self, keep: usize, drop: usize) -> Result<IndexFn, Error> {
        let n = self.args.len();
        if keep == drop || keep >= n || drop >= n || self.args[keep].shape != self.args[drop].shape
        {
            return Err(self.invalid(format!(
                "cannot read argument {drop} as argument {keep} of {} arguments",
                n
            )));
        }
        let renumber = |a: usize| match a {
            a if a == drop => keep - usize::from(keep > drop),
            a if a > drop => a - 1,
            a => a,
        };
        let mut out = self.clone();
        out.args.remove(drop);
        let mut map: HashMap<NodeId, NodeId> = HashMap::default();
        for n in self.graph.reachable(self.root) {
            let new = match self.graph.node(n).map_children(&|c| map[&c]) {
                Node::Access { arg, index } => out.graph.access(renumber(arg), index),
                other => out.graph.intern(other),
            };
            map.insert(n, new);
        }
        let (graph, root) = out.graph.extract(map[&self.root]);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }

    /// `self + other` over the same output shape, `other` without
    /// reductions; `other`'s arguments follow this function's.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = x[i] * 2", &[("x", &[3][..])])?;
    /// let g = IndexFn::parse_with_sizes("g[j] = x[2 - j]", &[("x", &[3][..])], &[("j", 3)])?;
    /// let s = f.add_fn(&g)?;
    /// assert_eq!(s.eval_f64(&[("x", &[1., 2., 3.][..]), ("x_1", &[1., 2., 3.][..])])?, vec![5., 6., 7.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn add_fn(&self, other: &IndexFn) -> Result<IndexFn, Error> {
        if self.out_shape != other.out_shape || other.has_reduction() {
            return Err(self.invalid(format!(
                "cannot add {} of shape {:?} to a function of shape {:?}",
                other.name, other.out_shape, self.out_shape
            )));
        }
        let mut out = self.clone();
        let base = out.args.len();
        append_args(&mut out.args, &other.args);
        let at = self.indices_for(other);
        let body = import(&mut out.graph, other, &at, base).map_err(|_| Error::Overflow {
            op: format!("add {} to {}", other.name, self.name),
        })?;
        out.root = out.graph.add(out.root, body);
        Ok(out)
    }
}

/// `extra` appended to `args`, each renamed (`x` → `x_1`, …) where its
/// name is taken.
fn append_args(args: &mut Vec<ArgDecl>, extra: &[ArgDecl]) {
    for a in extra {
        let mut name = a.name.clone();
        let mut k = 1;
        while args.iter().any(|b| b.name == name) {
            name = format!("{}_{k}", a.name);
            k += 1;
        }
        args.push(ArgDecl {
            name,
            shape: a.shape.clone(),
        });
    }
}

/// `def`'s body (no reductions) copied into `g`, its output variables
/// replaced by the forms of `at` and its arguments numbered from `base`.
fn import(
    g: &mut Graph,
    def: &IndexFn,
    at: &HashMap<VarId, Affine>,
    base: usize,
) -> Result<NodeId, Overflow> {
    import_reading(g, def, at, &mut |g, arg, index| g.access(base + arg, index))
}

/// [`import`] with each read of `def`'s argument `a` at (substituted)
/// `index` made by `read(graph, a, index)`.
fn import_reading(
    g: &mut Graph,
    def: &IndexFn,
    at: &HashMap<VarId, Affine>,
    read: &mut dyn FnMut(&mut Graph, usize, Vec<Affine>) -> NodeId,
) -> Result<NodeId, Overflow> {
    let sub = |a: &Affine| a.substitute(&|v| at.get(&v).cloned());
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    for n in def.graph.reachable(def.root) {
        let node = def.graph.node(n).map_children(&|c| map[&c]);
        let new = match node {
            Node::Const(bits) => g.constant(f64::from_bits(bits)),
            Node::Access { arg, index } => {
                let index = index.iter().map(sub).collect::<Result<_, _>>()?;
                read(g, arg, index)
            }
            Node::Index(a) => g.index_value(sub(&a)?),
            Node::Random { key, counter } => g.random(key, sub(&counter)?),
            Node::Unary(op, a) => g.unary(op, a),
            Node::Binary(op, a, b) => g.binary(op, a, b),
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                let cond = match cond {
                    Cond::Index(r, op) => Cond::Index(r.substitute(&|v| at.get(&v).cloned())?, op),
                    Cond::IsInt(r) => Cond::IsInt(r.substitute(&|v| at.get(&v).cloned())?),
                    value => value,
                };
                g.select(cond, then, otherwise)
            }
            Node::Reduce { .. } => unreachable!("only functions without reductions are imported"),
        };
        map.insert(n, new);
    }
    Ok(map[&def.root])
}
