//! Derivatives lifted over a batch of incoming gradients, and the identity
//! seed folded in symbolically.
//!
//! Owns [`IndexFn::lift_seed`] and the delta rule behind it. A derivative
//! `d<x>[β] = Σ … d<f>[α(β, κ)] · …` is linear in its incoming gradient
//! `d<f>`; reading a batch of gradients `d<f>[b; α]` instead gives every
//! row of a Jacobian-vector product at once: `d<x>[b; β]`. When the batch
//! is the identity (`d<f>[b; α] = δ(b − α)`, a Jacobian's first step), the
//! gradient is not read at all: each read becomes a product of Kronecker
//! deltas, and a delta under a sum over one of its indices collapses the
//! sum (Laue et al.'s δ rule, with the range kept as a guard):
//!
//! | before | after | when |
//! | --- | --- | --- |
//! | `Σ_{v=lo}^{hi} (δ(c·v + r) · a)` | `[lo ≤ −c·r ≤ hi] · a[v := −c·r]` | `c = ±1` |
//! | `Σ_v (δ(r) · a)` | `δ(r) · Σ_v a` | `r` does not depend on `v` |
//! | `Σ_{v=c}^{c} a` | `a[v := c]` | one term |
//!
//! So the Hessian of logistic regression, `Σ_j δ(b − j)·X[i; j]` at its
//! first step, becomes the read `X[i; b]`: no identity is multiplied.
//! Must not know tensors or the tape.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use super::expr::{BinaryOp, CmpOp, Cond, Graph, Node, NodeId, ReduceOp, UnaryOp};
use super::index_fn::IndexFn;
use super::intervals::Intervals;
use super::subst::substitute;
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

impl IndexFn {
    /// This derivative (linear in its argument number `seed`, the incoming
    /// gradient) lifted over leading batch indices of sizes `batch`: the
    /// output becomes `batch ++ output shape`, and the seed is read as
    /// `seed[b…; α]`. With `identity`, the seed is the identity
    /// (`seed[b…; α] = δ(b − α)`, `batch` the seed's shape) and is no longer
    /// an argument. `seed` is `None` for a derivative that does not read its
    /// incoming gradient (it is then constant along the batch).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// // The derivative of y[j] = Σ_i x[i] · a[i; j] with respect to x.
    /// let d = IndexFn::parse("dx[i] = sum{j}_0^2 (dy[j] * a[i; j])", &[("dy", &[3][..]), ("a", &[2, 3][..])])?;
    /// let rows = d.lift_seed(Some(0), &[4], false)?;
    /// assert_eq!(rows.to_string(), "dx[dx_b0; i] = sum{j}_0^2 (dy[dx_b0; j] * a[i; j])");
    /// // With the identity, the sum collapses: the Jacobian is a read of `a`.
    /// let jac = d.lift_seed(Some(0), &[3], true)?;
    /// assert_eq!(jac.to_string(), "dx[dx_b0; i] = a[i; dx_b0]");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn lift_seed(
        &self,
        seed: Option<usize>,
        batch: &[usize],
        identity: bool,
    ) -> Result<IndexFn, Error> {
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("lift {} over a batch", self.name),
        };
        let mut out = self.clone();
        let b: Vec<VarId> = (0..batch.len())
            .map(|k| out.fresh_var(&format!("{}_b{k}", self.name)))
            .collect();
        out.out_vars = b
            .iter()
            .copied()
            .chain(self.out_vars.iter().copied())
            .collect();
        out.out_shape = batch
            .iter()
            .copied()
            .chain(self.out_shape.iter().copied())
            .collect();
        let Some(seed) = seed else {
            return Ok(out);
        };
        let decl = self
            .args
            .get(seed)
            .ok_or_else(|| self.invalid(format!("no argument number {seed}")))?;
        if identity && decl.shape != batch {
            return Err(self.invalid(format!(
                "an identity seed over {batch:?} for `{}` of shape {:?}",
                decl.name, decl.shape
            )));
        }
        let bvars: Vec<Affine> = b.iter().map(|&v| Affine::var(v)).collect();
        let root = rewrite(&mut out.graph, self.root, &mut |g, node| match node {
            Node::Access { arg, index } if *arg == seed => {
                let index = bvars.iter().chain(index.iter()).cloned().collect();
                Ok(Some(g.access(seed, index)))
            }
            _ => Ok(None),
        })
        .map_err(overflow)?;
        out.root = root;
        out.args[seed].shape = batch.iter().chain(&decl.shape).copied().collect();
        if identity {
            out = out
                .inline_arg(seed, &IndexFn::identity(batch)?)?
                .collapse_deltas()?;
        }
        out.check_bounds()?;
        Ok(out)
    }

    /// This function with the delta rules of the module documentation
    /// applied, and the guards they leave that the output's box implies
    /// dropped.
    pub fn collapse_deltas(&self) -> Result<IndexFn, Error> {
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("simplify {}", self.name),
        };
        let mut out = self.clone();
        out.root = collapse_deltas(&mut out.graph, out.root).map_err(overflow)?;
        out.root = drop_implied_guards(&mut out).map_err(overflow)?;
        let (graph, root) = out.graph.extract(out.root);
        out.graph = graph;
        out.root = root;
        Ok(out)
    }

    /// A new index variable named `base` (or `base_`, … when taken).
    fn fresh_var(&mut self, base: &str) -> VarId {
        let mut name = base.to_string();
        while self.var_names.contains(&name) {
            name.push('_');
        }
        self.var_names.push(name);
        VarId(self.var_names.len() as u32 - 1)
    }
}

/// A rewrite of one node (see [`rewrite`]).
type NodeRewrite<'a> = dyn FnMut(&mut Graph, &Node) -> Result<Option<NodeId>, Overflow> + 'a;

/// Rebuilds the DAG under `root` bottom-up, `f` replacing the nodes it
/// returns `Some` for (it sees each node with its children rebuilt).
fn rewrite(g: &mut Graph, root: NodeId, f: &mut NodeRewrite) -> Result<NodeId, Overflow> {
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    for n in g.reachable(root) {
        let node = g.node(n).map_children(&|c| map[&c]);
        let new = match f(g, &node)? {
            Some(id) => id,
            None => remake(g, node),
        };
        map.insert(n, new);
    }
    Ok(map[&root])
}

/// Interns `node` through the simplifying constructors (`1 · x = x`, a
/// guard with a constant condition picks its branch, …).
fn remake(g: &mut Graph, node: Node) -> NodeId {
    match node {
        Node::Unary(op, a) => g.unary(op, a),
        Node::Binary(op, a, b) => g.binary(op, a, b),
        Node::Select {
            cond,
            then,
            otherwise,
        } => g.select(cond, then, otherwise),
        Node::Reduce {
            op,
            var,
            range,
            body,
        } => g.reduce(op, var, range, body),
        other => g.intern(other),
    }
}

/// `f`'s body without the guards `e ≥ 0` that hold wherever they are
/// evaluated (the range guards a collapsed sum leaves behind are often
/// implied by the output's box).
fn drop_implied_guards(f: &mut IndexFn) -> Result<NodeId, Overflow> {
    let iv = Intervals::of(f);
    rewrite(&mut f.graph, f.root, &mut |_, node| match node {
        Node::Select {
            cond: Cond::Index(r, CmpOp::Ge),
            then,
            ..
        } => Ok(iv
            .of_affine(&r.num)
            .filter(|&(lo, _)| lo >= 0)
            .map(|_| *then)),
        _ => Ok(None),
    })
}

/// Applies the delta rules of the module documentation bottom-up.
fn collapse_deltas(g: &mut Graph, root: NodeId) -> Result<NodeId, Overflow> {
    rewrite(g, root, &mut |g, node| match node {
        Node::Reduce {
            op: ReduceOp::Sum,
            var,
            range,
            body,
        } => match single_term(range) {
            // `Σ_{v=c}^{c} a = a[v := c]` (a reshape's derivative sums one
            // term).
            Some(c) => {
                substitute(g, *body, &HashMap::from_iter([(*var, Affine::constant(c))])).map(Some)
            }
            None => sum_of_delta(g, *var, range, *body),
        },
        _ => Ok(None),
    })
}

/// The one value of a constant range of one term.
fn single_term(range: &super::expr::Range) -> Option<i64> {
    let constant = |r: &RatAffine| r.num.is_constant().then_some((r.num.constant, r.den));
    let (lo, hi) = match (&range.lower[..], &range.upper[..]) {
        ([lo], [hi]) => (constant(lo)?, constant(hi)?),
        _ => return None,
    };
    let lo = lo.0.div_euclid(lo.1) + i64::from(lo.0.rem_euclid(lo.1) != 0);
    let hi = hi.0.div_euclid(hi.1);
    (lo == hi).then_some(lo)
}

/// A product's factors: multiplied, divided, its sign, and the deltas
/// (`if {form = 0} then (…) else (0)`) guarding it.
struct Product {
    mul: Vec<NodeId>,
    div: Vec<NodeId>,
    negative: bool,
    /// The forms of the deltas, integer.
    deltas: Vec<Affine>,
}

impl Product {
    fn of(g: &Graph, n: NodeId) -> Product {
        let mut p = Product {
            mul: Vec::new(),
            div: Vec::new(),
            negative: false,
            deltas: Vec::new(),
        };
        p.collect(g, n, false);
        p
    }

    fn collect(&mut self, g: &Graph, n: NodeId, divided: bool) {
        match g.node(n) {
            Node::Binary(BinaryOp::Mul, a, b) => {
                self.collect(g, *a, divided);
                self.collect(g, *b, divided);
            }
            Node::Binary(BinaryOp::Div, a, b) => {
                self.collect(g, *a, divided);
                self.collect(g, *b, !divided);
            }
            Node::Unary(UnaryOp::Neg, a) => {
                self.negative = !self.negative;
                self.collect(g, *a, divided);
            }
            Node::Select {
                cond: Cond::Index(r, CmpOp::Eq),
                then,
                otherwise,
            } if !divided && g.const_value(*otherwise) == Some(0.0) && r.as_integer().is_some() => {
                self.deltas.push(r.num.clone());
                if g.const_value(*then) != Some(1.0) {
                    self.collect(g, *then, divided);
                }
            }
            _ if divided => self.div.push(n),
            _ => self.mul.push(n),
        }
    }

    /// The product, each delta a guard around it (only the taken branch
    /// is evaluated, as in the original).
    fn build(&self, g: &mut Graph) -> Result<NodeId, Overflow> {
        let mut acc = g.constant(1.0);
        for &m in &self.mul {
            acc = g.mul(acc, m);
        }
        for &d in &self.div {
            acc = g.div(acc, d);
        }
        if self.negative {
            acc = g.neg(acc);
        }
        wrap_deltas(g, &self.deltas, acc)
    }
}

/// `if {form = 0} then (…)` around `n` for every form.
fn wrap_deltas(g: &mut Graph, forms: &[Affine], n: NodeId) -> Result<NodeId, Overflow> {
    let zero = g.constant(0.0);
    let mut acc = n;
    for f in forms {
        acc = g.select(
            Cond::Index(RatAffine::integer(f.clone()), CmpOp::Eq),
            acc,
            zero,
        );
    }
    Ok(acc)
}

/// `Σ_v body` with the delta rules applied to each product of the body, or
/// `None` when neither holds.
fn sum_of_delta(
    g: &mut Graph,
    v: VarId,
    range: &super::expr::Range,
    body: NodeId,
) -> Result<Option<NodeId>, Overflow> {
    // A sum of products: the rules apply term by term.
    let terms = expand(g, body, false);
    if terms.len() > 1 && terms.len() <= MAX_TERMS {
        let mut changed = false;
        let mut out = g.constant(0.0);
        for (negative, t) in terms {
            let s = match sum_of_product(g, v, range, t)? {
                Some(s) => {
                    changed = true;
                    s
                }
                None => g.reduce(ReduceOp::Sum, v, range.clone(), t),
            };
            out = if negative {
                g.sub(out, s)
            } else {
                g.add(out, s)
            };
        }
        return Ok(changed.then_some(out));
    }
    sum_of_product(g, v, range, body)
}

/// The most terms a sum's body is expanded into.
const MAX_TERMS: usize = 32;

/// `n` as a sum of signed products, distributing products over sums
/// (`(p − q)·c = p·c − q·c`); a single term when it would exceed
/// [`MAX_TERMS`].
fn expand(g: &mut Graph, n: NodeId, negative: bool) -> Vec<(bool, NodeId)> {
    let node = g.node(n).clone();
    let out = match node {
        Node::Binary(BinaryOp::Add, a, b) => {
            let mut t = expand(g, a, negative);
            t.extend(expand(g, b, negative));
            t
        }
        Node::Binary(BinaryOp::Sub, a, b) => {
            let mut t = expand(g, a, negative);
            t.extend(expand(g, b, !negative));
            t
        }
        Node::Unary(UnaryOp::Neg, a) => expand(g, a, !negative),
        Node::Binary(op @ (BinaryOp::Mul | BinaryOp::Div), a, b) => {
            let left = expand(g, a, negative);
            let right = if op == BinaryOp::Mul {
                expand(g, b, false)
            } else {
                vec![(false, b)]
            };
            if left.len() * right.len() > MAX_TERMS || (left.len() == 1 && right.len() == 1) {
                return vec![(negative, n)];
            }
            let mut t = Vec::with_capacity(left.len() * right.len());
            for &(sl, l) in &left {
                for &(sr, r) in &right {
                    t.push((sl != sr, g.binary(op, l, r)));
                }
            }
            t
        }
        _ => vec![(negative, n)],
    };
    if out.len() > MAX_TERMS {
        vec![(negative, n)]
    } else {
        out
    }
}

/// `Σ_v body` for a product `body`, with the delta rules applied, or
/// `None` when neither holds.
fn sum_of_product(
    g: &mut Graph,
    v: VarId,
    range: &super::expr::Range,
    body: NodeId,
) -> Result<Option<NodeId>, Overflow> {
    let mut p = Product::of(g, body);
    // A delta that pins `v`: the sum has one term.
    let pin = p.deltas.iter().enumerate().find_map(|(k, form)| {
        let c = form.coeff(v);
        (c == 1 || c == -1).then(|| (k, form.clone(), c))
    });
    if let Some((k, form, c)) = pin {
        p.deltas.remove(k);
        // c·v + rest = 0  ⇔  v = −c·rest  (c = ±1).
        let rest = form.sub(&Affine::var(v).scale(c)?)?;
        let value = rest.scale(-c)?;
        let rest_of_body = p.build(g)?;
        let term = substitute(g, rest_of_body, &HashMap::from_iter([(v, value.clone())]))?;
        let zero = g.constant(0.0);
        let mut out = term;
        for lo in &range.lower {
            // value ≥ lo  ⇔  den·value − num ≥ 0.
            let cond = RatAffine::new(value.scale(lo.den)?.sub(&lo.num)?, 1)?;
            out = g.select(Cond::Index(cond, CmpOp::Ge), out, zero);
        }
        for hi in &range.upper {
            let cond = RatAffine::new(hi.num.sub(&value.scale(hi.den)?)?, 1)?;
            out = g.select(Cond::Index(cond, CmpOp::Ge), out, zero);
        }
        return Ok(Some(out));
    }
    // Deltas that do not depend on `v` leave the sum.
    let (outside, inside): (Vec<Affine>, Vec<Affine>) =
        p.deltas.iter().cloned().partition(|f| f.coeff(v) == 0);
    if outside.is_empty() {
        return Ok(None);
    }
    p.deltas = inside;
    let rest = p.build(g)?;
    let sum = g.reduce(ReduceOp::Sum, v, range.clone(), rest);
    wrap_deltas(g, &outside, sum).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(f: &IndexFn, args: &[(&str, &[f64])]) -> Vec<f64> {
        f.eval_f64(args).unwrap()
    }

    #[test]
    fn identity_seed_gives_the_jacobian_of_a_strided_window() {
        // y[t] = Σ_k x[2t + k] · w[k]: dx with the identity seed is the
        // Jacobian J[t; i] = w[i − 2t] where 0 ≤ i − 2t ≤ 2.
        let f = IndexFn::parse_with_sizes(
            "y[t] = sum{k}_0^2 (x[2*t + k] * w[k])",
            &[("x", &[9][..]), ("w", &[3][..])],
            &[("t", 4)],
        )
        .unwrap();
        let dx = f.derive("x").unwrap();
        let seed = dx.arg_index("dy").unwrap();
        let jac = dx.lift_seed(Some(seed), &[4], true).unwrap();
        assert!(!jac.to_string().contains("sum"), "{jac}");
        let x: Vec<f64> = (0..9).map(f64::from).collect();
        let w = [1.0, -2.0, 0.5];
        let j = eval(&jac, &[("x", &x), ("w", &w)]);
        for t in 0..4 {
            for i in 0..9 {
                let k = i as i64 - 2 * t as i64;
                let want = if (0..3).contains(&k) {
                    w[k as usize]
                } else {
                    0.0
                };
                assert_eq!(j[t * 9 + i], want, "t={t} i={i}");
            }
        }
    }

    #[test]
    fn batched_seed_equals_one_derivative_per_row() {
        let f = IndexFn::parse(
            "f[i] = exp (sum{k}_0^2 (x[i; k] * x[i; k]))",
            &[("x", &[2, 3][..])],
        )
        .unwrap();
        let dx = f.derive("x").unwrap();
        let seed = dx.arg_index("df").unwrap();
        let lifted = dx.lift_seed(Some(seed), &[3], false).unwrap();
        let x = [0.1, -0.2, 0.3, 0.4, 0.0, -0.1];
        let seeds = [1.0, 2.0, -1.0, 0.5, 0.0, 3.0];
        let all = eval(&lifted, &[("x", &x), ("df", &seeds)]);
        for b in 0..3 {
            let row = eval(&dx, &[("x", &x), ("df", &seeds[2 * b..2 * b + 2])]);
            assert_eq!(&all[6 * b..6 * b + 6], &row[..]);
        }
    }

    #[test]
    fn a_delta_on_output_indices_stays_a_guard() {
        // f[i] = x[i] · c: the Jacobian is c·δ(b − i), nothing to sum.
        let f = IndexFn::parse("f[i] = x[i] * c[i]", &[("x", &[3][..]), ("c", &[3][..])]).unwrap();
        let dx = f.derive("x").unwrap();
        let seed = dx.arg_index("df").unwrap();
        let jac = dx.lift_seed(Some(seed), &[3], true).unwrap();
        let j = eval(&jac, &[("x", &[0.0; 3]), ("c", &[2.0, 3.0, 4.0])]);
        assert_eq!(j, vec![2., 0., 0., 0., 3., 0., 0., 0., 4.]);
    }
}
