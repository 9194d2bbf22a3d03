//! Substitution of index variables by affine forms inside a DAG.
//!
//! Owns [`substitute`]: `e[v := form, ...]`, respecting binders (a reduction
//! that binds `v` hides it from the substitution inside its body) and
//! sharing (a node whose free variables are untouched is returned as is, and
//! each rewritten node is built once). The replacement forms must use fresh
//! variables, never ones bound inside `e`, so no capture can occur.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use super::expr::{Cond, Graph, Node, NodeId, Range};
use rustc_hash::FxHashMap as HashMap;

/// Rewrites `root` with every free occurrence of a key of `map` replaced by
/// its affine form.
pub(crate) fn substitute(
    g: &mut Graph,
    root: NodeId,
    map: &HashMap<VarId, Affine>,
) -> Result<NodeId, Overflow> {
    Substitution {
        map,
        memo: HashMap::default(),
    }
    .run(g, root)
}

struct Substitution<'a> {
    map: &'a HashMap<VarId, Affine>,
    memo: HashMap<NodeId, NodeId>,
}

impl Substitution<'_> {
    fn form(&self, a: &Affine) -> Result<Affine, Overflow> {
        a.substitute(&|v| self.map.get(&v).cloned())
    }

    fn rat(&self, r: &RatAffine) -> Result<RatAffine, Overflow> {
        r.substitute(&|v| self.map.get(&v).cloned())
    }

    fn run(&mut self, g: &mut Graph, n: NodeId) -> Result<NodeId, Overflow> {
        if !g.free_vars(n).iter().any(|v| self.map.contains_key(v)) {
            return Ok(n);
        }
        if let Some(&done) = self.memo.get(&n) {
            return Ok(done);
        }
        let out = match g.node(n).clone() {
            Node::Const(_) => n,
            Node::Access { arg, index } => {
                let index = index
                    .iter()
                    .map(|a| self.form(a))
                    .collect::<Result<_, _>>()?;
                g.access(arg, index)
            }
            Node::Index(a) => {
                let a = self.form(&a)?;
                g.index_value(a)
            }
            Node::Random { key, counter } => {
                let mut k = key;
                for w in &mut k {
                    *w = self.run(g, *w)?;
                }
                let counter = self.form(&counter)?;
                g.random(k, counter)
            }
            Node::Unary(op, a) => {
                let a = self.run(g, a)?;
                g.unary(op, a)
            }
            Node::Binary(op, a, b) => {
                let a = self.run(g, a)?;
                let b = self.run(g, b)?;
                g.binary(op, a, b)
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                let cond = match cond {
                    Cond::Index(r, op) => Cond::Index(self.rat(&r)?, op),
                    Cond::IsInt(r) => Cond::IsInt(self.rat(&r)?),
                    Cond::Value(a, op, b) => Cond::Value(self.run(g, a)?, op, self.run(g, b)?),
                };
                let then = self.run(g, then)?;
                let otherwise = self.run(g, otherwise)?;
                g.select(cond, then, otherwise)
            }
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => {
                let range = Range {
                    lower: range
                        .lower
                        .iter()
                        .map(|b| self.rat(b))
                        .collect::<Result<_, _>>()?,
                    upper: range
                        .upper
                        .iter()
                        .map(|b| self.rat(b))
                        .collect::<Result<_, _>>()?,
                };
                let body = if self.map.contains_key(&var) {
                    // `var` is rebound here: substitute the rest only.
                    let mut inner = self.map.clone();
                    inner.remove(&var);
                    substitute(g, body, &inner)?
                } else {
                    self.run(g, body)?
                };
                g.reduce(op, var, range, body)
            }
        };
        self.memo.insert(n, out);
        Ok(out)
    }
}

/// Rewrites `root` with every occurrence of node `target` replaced by node
/// `with` (which must have the same free variables, so no binding changes).
pub(crate) fn replace(g: &mut Graph, root: NodeId, target: NodeId, with: NodeId) -> NodeId {
    fn go(
        g: &mut Graph,
        n: NodeId,
        target: NodeId,
        with: NodeId,
        memo: &mut HashMap<NodeId, NodeId>,
    ) -> NodeId {
        // Children have smaller ids than their parents: nothing below
        // `target` can contain it.
        if n == target {
            return with;
        }
        if n < target {
            return n;
        }
        if let Some(&done) = memo.get(&n) {
            return done;
        }
        let node = g.node(n).clone();
        let children = node.children();
        let mut mapped = HashMap::default();
        for c in children {
            let r = go(g, c, target, with, memo);
            mapped.insert(c, r);
        }
        let out = g.intern(node.map_children(&|c| mapped[&c]));
        memo.insert(n, out);
        out
    }
    go(g, root, target, with, &mut HashMap::default())
}
