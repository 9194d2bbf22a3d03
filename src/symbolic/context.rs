//! Path contexts: what is known on the way from the root of a body to a node.
//!
//! Owns [`Fact`] (a reduction entered, an index guard taken, a value guard
//! taken), interned fact lists ([`Contexts`]), the control-flow edges of
//! each node kind ([`edges`]) and the integer domain of a context as rows
//! `form ≥ 0` ([`domain_rows`]). The bounds checker and the derivation both
//! walk the DAG with these; neither repeats the rules of which branch adds
//! which fact.

use super::affine::{Affine, Overflow, RatAffine, VarId};
use super::expr::{BinaryOp, CmpOp, Cond, Graph, Node, NodeId, Range, ReduceOp};
use rustc_hash::FxHashMap as HashMap;

/// One fact that holds on a path from the root.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fact {
    /// The path entered the body of this reduction node: its index is free
    /// below and lies in its range.
    Bound(NodeId),
    /// An index condition `form op 0`; `op` is never `Ne` (that splits into
    /// `Lt` and `Gt` paths, which partition it).
    Index(RatAffine, CmpOp),
    /// `form is int` holds (`true`) or fails (`false`).
    IsInt(RatAffine, bool),
    /// A value-level condition holds (`true`) or fails (`false`).
    Value(Cond, bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CtxId(pub u32);

/// Interned fact lists; `CtxId(0)` is the empty context at the root.
pub(crate) struct Contexts {
    lists: Vec<Vec<Fact>>,
    ids: HashMap<Vec<Fact>, CtxId>,
}

impl Contexts {
    pub fn new() -> Contexts {
        let mut c = Contexts {
            lists: Vec::new(),
            ids: HashMap::default(),
        };
        c.intern(Vec::new());
        c
    }

    pub fn root(&self) -> CtxId {
        CtxId(0)
    }

    fn intern(&mut self, facts: Vec<Fact>) -> CtxId {
        if let Some(&id) = self.ids.get(&facts) {
            return id;
        }
        let id = CtxId(self.lists.len() as u32);
        self.lists.push(facts.clone());
        self.ids.insert(facts, id);
        id
    }

    pub fn facts(&self, ctx: CtxId) -> &[Fact] {
        &self.lists[ctx.0 as usize]
    }

    pub fn extend(&mut self, ctx: CtxId, more: &[Fact]) -> CtxId {
        if more.is_empty() {
            return ctx;
        }
        let mut facts = self.lists[ctx.0 as usize].clone();
        facts.extend_from_slice(more);
        self.intern(facts)
    }
}

/// How control reaches a child: the alternative fact lists (a partition of
/// the ways in; usually one) and whether a gradient flows along the edge.
pub(crate) struct Edge {
    pub child: NodeId,
    pub alternatives: Vec<Vec<Fact>>,
    pub carries_gradient: bool,
}

fn plain(child: NodeId) -> Edge {
    Edge {
        child,
        alternatives: vec![vec![]],
        carries_gradient: true,
    }
}

/// Facts for taking the branch where `form op 0` holds.
fn index_branch(form: &RatAffine, op: CmpOp) -> Vec<Vec<Fact>> {
    match op {
        CmpOp::Ne => vec![
            vec![Fact::Index(form.clone(), CmpOp::Lt)],
            vec![Fact::Index(form.clone(), CmpOp::Gt)],
        ],
        op => vec![vec![Fact::Index(form.clone(), op)]],
    }
}

/// The control edges out of node `n`. Adds the `argmax`/`argmin` nodes that
/// the subgradient of a max/min reduction refers to.
pub(crate) fn edges(g: &mut Graph, n: NodeId) -> Vec<Edge> {
    match g.node(n).clone() {
        // A random value is constant for differentiation: no edge carries a
        // gradient into its key.
        Node::Const(_) | Node::Index(_) | Node::Access { .. } | Node::Random { .. } => vec![],
        Node::Unary(_, a) => vec![plain(a)],
        Node::Binary(op @ (BinaryOp::Max | BinaryOp::Min), a, b) => {
            // max(a, b) = if {a >= b} then a else b (the first operand wins ties).
            let cmp = if op == BinaryOp::Max {
                CmpOp::Ge
            } else {
                CmpOp::Le
            };
            let cond = Cond::Value(a, cmp, b);
            vec![
                Edge {
                    child: a,
                    alternatives: vec![vec![Fact::Value(cond.clone(), true)]],
                    carries_gradient: true,
                },
                Edge {
                    child: b,
                    alternatives: vec![vec![Fact::Value(cond, false)]],
                    carries_gradient: true,
                },
            ]
        }
        Node::Binary(_, a, b) => vec![plain(a), plain(b)],
        Node::Select {
            cond,
            then,
            otherwise,
        } => {
            let (then_facts, else_facts) = match &cond {
                Cond::Index(r, op) => (index_branch(r, *op), index_branch(r, op.negate())),
                Cond::IsInt(r) => (
                    vec![vec![Fact::IsInt(r.clone(), true)]],
                    vec![vec![Fact::IsInt(r.clone(), false)]],
                ),
                Cond::Value(..) => (
                    vec![vec![Fact::Value(cond.clone(), true)]],
                    vec![vec![Fact::Value(cond.clone(), false)]],
                ),
            };
            let mut out = Vec::new();
            if let Cond::Value(a, _, b) = &cond {
                for operand in [*a, *b] {
                    out.push(Edge {
                        child: operand,
                        alternatives: vec![vec![]],
                        carries_gradient: false,
                    });
                }
            }
            out.push(Edge {
                child: then,
                alternatives: then_facts,
                carries_gradient: true,
            });
            out.push(Edge {
                child: otherwise,
                alternatives: else_facts,
                carries_gradient: true,
            });
            out
        }
        Node::Reduce {
            op,
            var,
            range,
            body,
        } => {
            let mut facts = vec![Fact::Bound(n)];
            let arg_op = match op {
                ReduceOp::Max => Some(ReduceOp::ArgMax),
                ReduceOp::Min => Some(ReduceOp::ArgMin),
                _ => None,
            };
            if let Some(arg_op) = arg_op {
                // The subgradient goes to the first extremal index only.
                let chosen = g.reduce(arg_op, var, range, body);
                let here = g.index_value(Affine::var(var));
                facts.push(Fact::Value(Cond::Value(here, CmpOp::Eq, chosen), true));
            }
            vec![Edge {
                child: body,
                alternatives: vec![facts],
                carries_gradient: matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min),
            }]
        }
    }
}

/// Rows `form ≥ 0` stating `lower ≤ v ≤ upper` for a range.
pub(crate) fn range_rows(v: VarId, range: &Range) -> Result<Vec<Affine>, Overflow> {
    let mut rows = Vec::new();
    for l in &range.lower {
        // v ≥ num/den  ⇔  den·v − num ≥ 0 for integer v.
        rows.push(Affine::var(v).scale(l.den)?.sub(&l.num)?);
    }
    for u in &range.upper {
        rows.push(u.num.sub(&Affine::var(v).scale(u.den)?)?);
    }
    Ok(rows)
}

/// Rows `form ≥ 0` for an index condition `num/den op 0` (den > 0).
pub(crate) fn condition_rows(form: &RatAffine, op: CmpOp) -> Result<Vec<Affine>, Overflow> {
    let num = &form.num;
    let neg = num.scale(-1)?;
    Ok(match op {
        CmpOp::Ge => vec![num.clone()],
        CmpOp::Gt => vec![num.add_const(-1)?],
        CmpOp::Le => vec![neg],
        CmpOp::Lt => vec![neg.add_const(-1)?],
        CmpOp::Eq => vec![num.clone(), neg],
        // Not convex; callers split it into Lt and Gt first.
        CmpOp::Ne => vec![],
    })
}

/// The integer domain of a context: the output box, the ranges of every
/// entered reduction and every index condition taken, as rows `form ≥ 0`;
/// with the bound variables in order, outermost first.
pub(crate) fn domain_rows(
    g: &Graph,
    out_vars: &[VarId],
    out_extents: &[Affine],
    facts: &[Fact],
) -> Result<(Vec<Affine>, Vec<VarId>), Overflow> {
    let mut rows = Vec::new();
    for (&v, n) in out_vars.iter().zip(out_extents) {
        rows.push(Affine::var(v));
        rows.push(n.add_const(-1)?.sub(&Affine::var(v))?);
    }
    let mut bound = Vec::new();
    for fact in facts {
        match fact {
            Fact::Bound(r) => {
                if let Node::Reduce { var, range, .. } = g.node(*r) {
                    rows.extend(range_rows(*var, range)?);
                    bound.push(*var);
                }
            }
            Fact::Index(form, op) => rows.extend(condition_rows(form, *op)?),
            Fact::IsInt(..) | Fact::Value(..) => {}
        }
    }
    Ok((rows, bound))
}
