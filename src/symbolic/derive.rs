//! Element-wise derivation (Urban & van der Smagt, Alg. 4 with §5.2).
//!
//! Owns `IndexFn::derive`. Reverse accumulation on the body DAG gives, for
//! every access of the argument and every path context (reductions entered
//! = liberated sums, guards taken), the adjoint `Δ = df[α]·∂f/∂x[Aα̂+b]`.
//! Each such occurrence becomes one gather: the integer solutions of
//! `A·α̂ = β − b` are parametrised exactly (`lattice`), the domain of α̂ is
//! rewritten in the new parameters and solved with Fourier–Motzkin into
//! nested sum ranges, and what is not a range becomes a guard (cokernel
//! equalities, `is int` for non-unimodular maps, conditions on β alone).
//! Occurrences are summed. The result is again an [`IndexFn`], so it can be
//! derived again.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use super::context::{domain_rows, edges, Contexts, CtxId, Fact};
use super::expr::{CmpOp, Cond, Graph, Node, NodeId, Range, ReduceOp};
use super::fourier_motzkin::eliminate;
use super::index_fn::{ArgDecl, IndexFn};
use super::intlinalg::IntMatrix;
use super::lattice::solve_lattice;
use super::output_reuse::reuse_output_in_products;
use super::rules::partials;
use super::sizes::Extents;
use super::subst::{replace, substitute};
use crate::Error;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;

impl IndexFn {
    /// The derivative with respect to argument `arg`: a function named
    /// `d<arg>` over `arg`'s shape, taking this function's arguments plus
    /// `d<name>` (the incoming gradient, of this function's output shape):
    /// `d<arg>[β] = Σ_α d<name>[α] · ∂<name>[α]/∂<arg>[β]`.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i; j] = x[i + j]", &[("x", &[4][..])]).unwrap_err(); // i, j unsizable
    /// let f = IndexFn::parse_with_sizes("f[i; j] = x[i + j]", &[("x", &[4][..])], &[("i", 2), ("j", 3)])?;
    /// let dx = f.derive("x")?;
    /// assert_eq!(dx.to_string(), "dx[dx_0] = sum{dx_z0}_(max [0; -1 + dx_0])^(min [2; dx_0]) (df[dx_0 + -dx_z0; dx_z0])");
    /// let g = dx.eval_f64(&[("x", &[0.; 4][..]), ("df", &[1.; 6][..])])?;
    /// assert_eq!(g, vec![1., 2., 2., 1.]); // how often each x element is read
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn derive(&self, arg: &str) -> Result<IndexFn, Error> {
        self.derive_with(arg, false)
    }

    /// As [`IndexFn::derive`], with one more argument after `d<name>`: this
    /// function's forward output, named like the function and of its output
    /// shape. Wherever the derivative needs the function's value (`exp`,
    /// `tanh`, `sigmoid`, `sqrt`, `**` express their derivatives through it)
    /// it reads the saved value instead of recomputing it, which for a body
    /// with a reduction saves a whole inner loop per gradient element. A
    /// softmax's value met again inside the derivative's products, at any
    /// index, is read there too (`output_reuse`).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = exp (sum{k}_0^2 (x[i; k]))", &[("x", &[2, 3][..])])?;
    /// let dx = f.derive_reusing_output("x")?;
    /// assert_eq!(dx.to_string(), "dx[dx_0; dx_1] = df[dx_0] * f[dx_0]");
    /// let x = [0.1, 0.2, 0.3, 0.0, 0.0, 0.0];
    /// let y = f.eval_f64(&[("x", &x[..])])?;
    /// let g = dx.eval_f64(&[("x", &x[..]), ("df", &[1.0, 1.0][..]), ("f", &y[..])])?;
    /// assert_eq!(g[0], y[0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn derive_reusing_output(&self, arg: &str) -> Result<IndexFn, Error> {
        self.derive_with(arg, true)
    }

    fn derive_with(&self, arg: &str, reuse_output: bool) -> Result<IndexFn, Error> {
        self.derive_in(arg, reuse_output, &Extents::of(self))
            .map(|(f, _)| f)
    }

    /// The derivative with respect to `arg` for the sizes `extents` (for
    /// every value of their symbols), with its own sizes: the arguments',
    /// then the incoming gradient's and the saved output's (this
    /// function's output's); its output's, `arg`'s.
    pub(crate) fn derive_in(
        &self,
        arg: &str,
        reuse_output: bool,
        extents: &Extents,
    ) -> Result<(IndexFn, Extents), Error> {
        let p = self.arg_index(arg).ok_or_else(|| {
            self.invalid(format!(
                "cannot derive with respect to `{arg}`: not an argument"
            ))
        })?;
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("derive {} with respect to {arg}", self.name),
        };
        Derivation::new(self, p, reuse_output, extents)?
            .run()
            .map_err(|e| match e {
                DeriveError::Overflow => overflow(Overflow),
                DeriveError::Other(e) => e,
            })
    }
}

/// The most distinct expressions one derivative may add (a product of
/// about 300 distinct factors; its kernel compiles in about 3 s with a
/// stack frame of about 2 MiB).
pub(crate) const MAX_DERIVATIVE_NODES: usize = 200_000;

enum DeriveError {
    Overflow,
    Other(Error),
}

impl From<Overflow> for DeriveError {
    fn from(_: Overflow) -> Self {
        DeriveError::Overflow
    }
}

struct Derivation<'a> {
    f: &'a IndexFn,
    /// `f`'s sizes.
    extents: &'a Extents,
    target: usize,
    g: Graph,
    var_names: Vec<String>,
    prefix: String,
    beta: Vec<VarId>,
    contexts: Contexts,
    fresh: usize,
    /// `f[α]` read from the saved forward output, when it replaces the body.
    saved_output: Option<NodeId>,
}

impl<'a> Derivation<'a> {
    fn new(
        f: &'a IndexFn,
        target: usize,
        reuse_output: bool,
        extents: &'a Extents,
    ) -> Result<Self, Error> {
        let prefix = format!("d{}", f.args[target].name);
        let grad_name = format!("d{}", f.name);
        let mut new_args = vec![(grad_name, "the incoming gradient")];
        if reuse_output {
            new_args.push((f.name.clone(), "the saved output"));
        }
        for (name, what) in new_args {
            if f.arg_index(&name).is_some() {
                return Err(f.invalid(format!(
                    "cannot name {what} `{name}`: an argument already has that name"
                )));
            }
        }
        let mut g = f.graph.clone();
        let saved_output = reuse_output.then(|| {
            let index = f.out_vars.iter().map(|v| Affine::var(*v)).collect();
            g.access(f.args.len() + 1, index)
        });
        let mut var_names = f.var_names.clone();
        let beta = (0..f.args[target].shape.len())
            .map(|d| {
                var_names.push(format!("{prefix}_{d}"));
                VarId(var_names.len() as u32 - 1)
            })
            .collect();
        Ok(Derivation {
            f,
            extents,
            target,
            g,
            var_names,
            prefix,
            beta,
            contexts: Contexts::new(),
            fresh: 0,
            saved_output,
        })
    }

    /// An error when the derivative has grown past
    /// [`MAX_DERIVATIVE_NODES`] distinct expressions since `before`,
    /// instead of building (and later compiling) it.
    fn check_size(&self, before: usize) -> Result<(), DeriveError> {
        let grown = self.g.len().saturating_sub(before);
        if grown <= MAX_DERIVATIVE_NODES {
            return Ok(());
        }
        let f = self.f;
        Err(DeriveError::Other(f.invalid(format!(
            "the derivative with respect to `{}` needs more than {MAX_DERIVATIVE_NODES} distinct expressions \
             (the limit of one derivative: its kernel would take minutes to compile and megabytes of stack); \
             a product of hundreds of distinct factors grows with the square of their number \
             (each factor's derivative is the product of all the others): split it into several ops",
            f.args[self.target].name
        ))))
    }

    fn fresh_var(&mut self, kind: char) -> VarId {
        self.var_names
            .push(format!("{}_{kind}{}", self.prefix, self.fresh));
        self.fresh += 1;
        VarId(self.var_names.len() as u32 - 1)
    }

    fn run(mut self) -> Result<(IndexFn, Extents), DeriveError> {
        let f = self.f;
        let df_arg = f.args.len();
        let seed_index = f.out_vars.iter().map(|v| Affine::var(*v)).collect();
        let seed = self.g.access(df_arg, seed_index);
        let occurrences = self.accumulate(seed);
        let mut gathers = Vec::with_capacity(occurrences.len());
        let before = self.g.len();
        for ((node, ctx), adjoint) in occurrences {
            gathers.push(self.gather(node, ctx, adjoint)?);
            self.check_size(before)?;
        }
        let mut total = self.g.add_all(&gathers);
        if self.saved_output.is_some() {
            total = reuse_output_in_products(&mut self.g, f, total, f.args.len() + 1);
        }
        let mut args = f.args.clone();
        args.push(ArgDecl {
            name: format!("d{}", f.name),
            shape: f.out_shape.clone(),
        });
        if self.saved_output.is_some() {
            args.push(ArgDecl {
                name: f.name.clone(),
                shape: f.out_shape.clone(),
            });
        }
        let (graph, root) = self.g.extract(total);
        let mut extents = self.extents.clone();
        extents.args.push(extents.out.clone());
        if self.saved_output.is_some() {
            extents.args.push(extents.out.clone());
        }
        extents.out = extents.args[self.target].clone();
        let df = IndexFn {
            name: self.prefix.clone(),
            out_vars: self.beta.clone(),
            out_shape: f.args[self.target].shape.clone(),
            args,
            var_names: self.var_names,
            graph,
            root,
        };
        Ok((df, extents))
    }

    /// Reverse accumulation over (node, context) pairs, parents before
    /// children; returns the adjoint of every access of the target argument
    /// per context, in a deterministic order.
    fn accumulate(&mut self, seed: NodeId) -> BTreeMap<(NodeId, CtxId), NodeId> {
        // Per node and context, the contributions to its adjoint in the
        // order they arrive, summed when the node is taken: as a balanced
        // tree when there are many (`Graph::add_all`), so a node read by
        // 10,000 terms gets an adjoint 14 levels deep, not 10,000.
        let mut pending: BTreeMap<NodeId, BTreeMap<CtxId, Vec<NodeId>>> = BTreeMap::new();
        pending
            .entry(self.f.root)
            .or_default()
            .insert(self.contexts.root(), vec![seed]);
        let mut occurrences = BTreeMap::new();
        while let Some((n, contributions)) = pending.pop_last() {
            let by_ctx: BTreeMap<CtxId, NodeId> = contributions
                .into_iter()
                .map(|(ctx, terms)| (ctx, self.g.add_all(&terms)))
                .collect();
            if let Node::Access { arg, .. } = self.g.node(n) {
                if *arg == self.target {
                    for (ctx, adj) in by_ctx {
                        occurrences.insert((n, ctx), adj);
                    }
                }
                continue;
            }
            let node_edges = edges(&mut self.g, n);
            let local = partials(&mut self.g, n);
            let mut local = local.into_iter();
            for edge in node_edges.iter().filter(|e| e.carries_gradient) {
                let partial = local.next().unwrap_or_else(|| self.g.constant(0.0));
                if self.g.const_value(partial) == Some(0.0) {
                    continue;
                }
                for (&ctx, &adj) in &by_ctx {
                    let contribution = self.g.mul(adj, partial);
                    for alt in &edge.alternatives {
                        let child_ctx = self.contexts.extend(ctx, alt);
                        pending
                            .entry(edge.child)
                            .or_default()
                            .entry(child_ctx)
                            .or_default()
                            .push(contribution);
                    }
                }
            }
        }
        occurrences
    }

    /// One gather `dx[β] = guards · Σ_{z ∈ Σ(β)} Δ|_{α̂ = P·w + K·z}`.
    fn gather(
        &mut self,
        access: NodeId,
        ctx: CtxId,
        adjoint: NodeId,
    ) -> Result<NodeId, DeriveError> {
        let f = self.f;
        let Node::Access { index, .. } = self.g.node(access).clone() else {
            unreachable!("occurrences are accesses")
        };
        let facts = self.contexts.facts(ctx).to_vec();
        let (rows, bound) = domain_rows(&self.g, &f.out_vars, &self.extents.out, &facts)?;
        let mut alpha: Vec<VarId> = f.out_vars.clone();
        alpha.extend(bound);
        // A·α̂ + b = β  ⇔  A·α̂ = β − b.
        let mut a = IntMatrix::new(index.len(), alpha.len());
        for (r, form) in index.iter().enumerate() {
            for (c, v) in alpha.iter().enumerate() {
                a.set(r, c, form.coeff(*v));
            }
        }
        // b: the constant and the size symbols' terms (`x[−1 + N − i]`).
        let rhs: Vec<Affine> = index
            .iter()
            .zip(&self.beta)
            .map(|(form, b)| {
                let offset = Affine::from_terms(
                    form.terms
                        .iter()
                        .filter(|(v, _)| !alpha.contains(v))
                        .copied(),
                    form.constant,
                )?;
                Affine::var(*b).sub(&offset)
            })
            .collect::<Result<_, _>>()?;
        let sol = solve_lattice(&a)?;
        let combine = |row: &[i64]| -> Result<Affine, Overflow> {
            let mut acc = Affine::constant(0);
            for (c, r) in row.iter().zip(&rhs) {
                acc = acc.add(&r.scale(*c)?)?;
            }
            Ok(acc)
        };
        let mut guards: Vec<Cond> = Vec::new();
        for r in 0..sol.cokernel.rows() {
            let row: Vec<i64> = (0..sol.cokernel.cols())
                .map(|c| sol.cokernel.get(r, c))
                .collect();
            let form = combine(&row)?;
            if form.is_constant() {
                if form.constant != 0 {
                    return Ok(self.g.constant(0.0)); // never solvable: never read
                }
                continue;
            }
            guards.push(Cond::Index(RatAffine::new(form, 1)?, CmpOp::Eq));
        }
        // w_i = (u_i·β')/s_i: substituted where s_i = 1, a one-point sum otherwise.
        let mut w_forms = Vec::new();
        let mut w_vars = Vec::new();
        let mut lattice_rows = Vec::new();
        for i in 0..sol.rank {
            let row: Vec<i64> = (0..sol.u_rows.cols())
                .map(|c| sol.u_rows.get(i, c))
                .collect();
            let t = combine(&row)?;
            let s = sol.divisors[i];
            if s == 1 {
                w_forms.push(t);
            } else {
                let w = self.fresh_var('w');
                let sw = Affine::var(w).scale(s)?;
                lattice_rows.push(sw.sub(&t)?);
                lattice_rows.push(t.sub(&sw)?);
                guards.push(Cond::IsInt(RatAffine::new(t, s)?));
                w_forms.push(Affine::var(w));
                w_vars.push(w);
            }
        }
        let z_vars: Vec<VarId> = (0..sol.kernel.cols())
            .map(|_| self.fresh_var('z'))
            .collect();
        let mut map: HashMap<VarId, Affine> = HashMap::default();
        for (c, v) in alpha.iter().enumerate() {
            let mut form = Affine::constant(0);
            for (i, w) in w_forms.iter().enumerate() {
                form = form.add(&w.scale(sol.particular.get(c, i))?)?;
            }
            for (j, z) in z_vars.iter().enumerate() {
                form = form.add(&Affine::var(*z).scale(sol.kernel.get(c, j))?)?;
            }
            map.insert(*v, form);
        }
        let mut loop_rows = lattice_rows;
        for row in &rows {
            let row = row.substitute(&|v| map.get(&v).cloned())?;
            let is_param_only = row
                .vars()
                .all(|v| self.beta.contains(&v) || self.extents.is_symbol(v));
            if is_param_only {
                if !self.implied_by_box(&row) {
                    guards.push(Cond::Index(RatAffine::new(row, 1)?, CmpOp::Ge));
                }
            } else {
                loop_rows.push(row);
            }
        }
        let mut order = z_vars;
        order.extend(w_vars);
        let elim = eliminate(&loop_rows, &order)?;
        if elim.infeasible {
            return Ok(self.g.constant(0.0));
        }
        // Δ, restricted to the value facts of its path, at α̂ = P·w + K·z.
        let zero = self.g.constant(0.0);
        let mut body = adjoint;
        for fact in facts.iter().rev() {
            body = match fact {
                Fact::Value(cond, true) => self.g.select(cond.clone(), body, zero),
                Fact::Value(cond, false) => self.g.select(cond.clone(), zero, body),
                Fact::IsInt(r, true) => self.g.select(Cond::IsInt(r.clone()), body, zero),
                Fact::IsInt(r, false) => self.g.select(Cond::IsInt(r.clone()), zero, body),
                Fact::Bound(_) | Fact::Index(..) => body,
            };
        }
        if let Some(saved) = self.saved_output {
            body = replace(&mut self.g, body, f.root, saved);
        }
        body = substitute(&mut self.g, body, &map)?;
        for vb in &elim.bounds {
            if vb.lower.is_empty() || vb.upper.is_empty() {
                return Err(DeriveError::Other(f.invalid(format!(
                    "internal: the derivative's sum over `{}` is unbounded",
                    self.var_names[vb.var.0 as usize]
                ))));
            }
            let range = Range {
                lower: self.prune(&vb.lower, true),
                upper: self.prune(&vb.upper, false),
            };
            body = self.g.reduce(ReduceOp::Sum, vb.var, range, body);
        }
        for cond in guards.into_iter().rev() {
            body = self.g.select(cond, body, zero);
        }
        Ok(body)
    }

    /// Range of β_d is 0..=size−1: the minimum of `form` over that box
    /// and every value of the size symbols (`None` where it has none, or
    /// `form` reads another variable).
    fn box_min(&self, form: &Affine) -> Option<i64> {
        let sizes = &self.extents.args[self.target];
        let mut acc = Affine::constant(form.constant);
        for &(v, c) in &form.terms {
            let term = match self.beta.iter().position(|b| *b == v) {
                // At β_d = size − 1 when c < 0, else at 0.
                Some(d) if c < 0 => sizes[d].add_const(-1).ok()?.scale(c).ok()?,
                Some(_) => continue,
                None if self.extents.is_symbol(v) => Affine::var(v).scale(c).ok()?,
                None => return None,
            };
            acc = acc.add(&term).ok()?;
        }
        self.extents.least(&acc)
    }

    fn implied_by_box(&self, row: &Affine) -> bool {
        self.box_min(row).is_some_and(|m| m >= 0)
    }

    /// Drops bounds that another bound dominates on the whole β box (for a
    /// lower bound: another one is never smaller), keeping the first of
    /// bounds equal on the box (each dominating the other, like `0` and
    /// `β` when β's range is `0..=0`: dropping both would unbound the sum).
    fn prune(&self, bounds: &[RatAffine], lower: bool) -> Vec<RatAffine> {
        // Whether bound `j` is never weaker than bound `k` on the box.
        let dominates = |j: usize, k: usize| {
            // j − k (scaled by both denominators) ≥ 0 on the box.
            let (other, this) = (&bounds[j], &bounds[k]);
            let diff = other
                .num
                .scale(this.den)
                .and_then(|o| o.sub(&this.num.scale(other.den)?));
            let Ok(diff) = diff else { return false };
            let diff = if lower { Ok(diff) } else { diff.scale(-1) };
            let Ok(diff) = diff else { return false };
            self.box_min(&diff).is_some_and(|m| m >= 0)
        };
        let dominated = |k: usize| {
            (0..bounds.len()).any(|j| j != k && dominates(j, k) && (j < k || !dominates(k, j)))
        };
        bounds
            .iter()
            .enumerate()
            .filter(|(k, _)| !dominated(*k))
            .map(|(_, b)| b.clone())
            .collect()
    }
}
