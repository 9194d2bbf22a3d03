//! Exact bounds checking: every argument access stays inside its argument's
//! shape for every integer point of its domain.
//!
//! Owns `IndexFn::check_bounds`. The domain of an access is the output box,
//! the ranges of the reductions around it and the index guards on its path
//! (see `context`); a violation is an integer point of that domain with the
//! index below 0 or above size − 1, decided exactly by Fourier–Motzkin
//! elimination followed by a depth-first search through the nested bounds.
//! With concrete sizes, an access that interval arithmetic already keeps
//! in bounds (the common case: a box of loops, affine reads) skips that
//! proof; the intervals over-approximate, so this never accepts more.
//! Value-level guards are data dependent and not used (so an access must be
//! in bounds whatever the data says).

use super::affine::{Affine, Overflow};
use super::context::{domain_rows, edges, Contexts, CtxId, Fact};
use super::expr::{Node, NodeId};
use super::fourier_motzkin::has_integer_point;
use super::index_fn::IndexFn;
use super::intervals::Intervals;
use super::sizes::Extents;
use crate::Error;
use rustc_hash::FxHashSet as HashSet;

impl IndexFn {
    /// Checks that every access is in bounds on its whole domain, and that
    /// every index used is an output index or bound by an enclosing
    /// reduction. Parsing calls this; derivatives satisfy it by
    /// construction (the test suite checks that).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let err = IndexFn::parse_with_sizes("f[i] = x[i + 1]", &[("x", &[4][..])], &[("i", 4)]).unwrap_err();
    /// assert!(err.to_string().contains("x[1 + i]"), "{err}");
    /// // A guard makes it valid:
    /// IndexFn::parse_with_sizes("f[i] = if {i + 1 <= 3} then (x[i + 1]) else (0)",
    ///                           &[("x", &[4][..])], &[("i", 4)])?;
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn check_bounds(&self) -> Result<(), Error> {
        self.check_bounds_in(&Extents::of(self))
    }

    /// As [`IndexFn::check_bounds`], with the sizes `extents`: for every
    /// value of its size symbols too (each in its range).
    pub(crate) fn check_bounds_in(&self, extents: &Extents) -> Result<(), Error> {
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("bounds check of {}", self.name),
        };
        let mut graph = self.graph.clone();
        let mut contexts = Contexts::new();
        let mut seen: HashSet<(NodeId, CtxId)> = HashSet::default();
        // Concrete sizes: intervals over-approximate every index's values,
        // so an access they keep in bounds needs no exact proof.
        let intervals = extents.symbols.is_empty().then(|| Intervals::of(self));
        let mut stack = vec![(self.root, contexts.root())];
        while let Some((n, ctx)) = stack.pop() {
            if !seen.insert((n, ctx)) {
                continue;
            }
            if let Node::Access { arg, index } = graph.node(n).clone() {
                if let Some(iv) = &intervals {
                    if self.in_scope(&graph, contexts.facts(ctx), &index)
                        && iv.in_bounds(&index, &self.args[arg].shape)
                    {
                        continue;
                    }
                }
                self.check_access(&graph, &contexts, extents, (n, ctx), arg, &index)
                    .map_err(|e| match e {
                        AccessError::Overflow => overflow(Overflow),
                        AccessError::Outside(e) => e,
                    })?;
                continue;
            }
            for edge in edges(&mut graph, n) {
                for alt in &edge.alternatives {
                    let child_ctx = contexts.extend(ctx, alt);
                    stack.push((edge.child, child_ctx));
                }
            }
        }
        Ok(())
    }

    /// Whether every index of `index` is an output index or bound by a
    /// reduction entered on the path (`facts`).
    fn in_scope(&self, graph: &super::expr::Graph, facts: &[Fact], index: &[Affine]) -> bool {
        index.iter().flat_map(Affine::vars).all(|v| {
            self.out_vars.contains(&v)
                || facts.iter().any(|fact| {
                    matches!(fact, Fact::Bound(r)
                        if matches!(graph.node(*r), Node::Reduce { var, .. } if *var == v))
                })
        })
    }

    fn check_access(
        &self,
        graph: &super::expr::Graph,
        contexts: &Contexts,
        extents: &Extents,
        (n, ctx): (NodeId, CtxId),
        arg: usize,
        index: &[Affine],
    ) -> Result<(), AccessError> {
        let (mut rows, bound) =
            domain_rows(graph, &self.out_vars, &extents.out, contexts.facts(ctx))?;
        rows.extend(extents.symbol_rows());
        let mut vars = self.out_vars.clone();
        vars.extend(bound.iter().copied());
        vars.extend(extents.symbols.iter().copied());
        let no_params = |_| 0;
        if !has_integer_point(&rows, &vars, &no_params)? {
            return Ok(()); // the access is never reached
        }
        let shape = &self.args[arg].shape;
        for (d, form) in index.iter().enumerate() {
            for v in form.vars() {
                if !vars.contains(&v) {
                    return Err(AccessError::Outside(self.invalid(format!(
                        "index `{}` in {} is not an output index and not bound by an enclosing reduction",
                        self.var_name(v),
                        super::print::node_to_string(self, n)
                    ))));
                }
            }
            let size = &extents.args[arg][d];
            let below = form.scale(-1)?.add_const(-1)?; // form ≤ −1
            let above = form.sub(size)?; // form ≥ size
            for (violation, side) in [(below, "below 0"), (above, "at or above the size")] {
                let mut probe = rows.clone();
                probe.push(violation);
                if has_integer_point(&probe, &vars, &no_params)? {
                    return Err(AccessError::Outside(Error::OutOfBounds {
                        function: self.name.clone(),
                        access: super::print::node_to_string(self, n),
                        dimension: d,
                        size: shape[d],
                        message: if extents.symbols.is_empty() {
                            format!("the index can fall {side} for some point of the domain")
                        } else {
                            format!(
                                "the index can fall {side} ({}) for some point of the domain and some value of the sizes",
                                super::print::affine_to_string(self, size)
                            )
                        },
                    }));
                }
            }
        }
        Ok(())
    }
}

enum AccessError {
    Overflow,
    Outside(Error),
}

impl From<Overflow> for AccessError {
    fn from(_: Overflow) -> Self {
        AccessError::Overflow
    }
}
