//! The scalar expression DAG of an index function.
//!
//! Owns [`Node`], [`Graph`] (a hash-consing arena: structurally equal nodes
//! are stored once, so common subexpressions are shared by construction) and
//! the simplifying constructors (constant folding, `x*1`, `x+0`, `x**1`,
//! `-(-x)`, `0*x`, ...). Every node knows its free index variables.
//!
//! Must not know about argument shapes, evaluation or derivation: those live
//! in `index_fn`, `eval` and `derive`.

use super::affine::{Affine, RatAffine, VarId};
use hashbrown::HashTable;
use rustc_hash::FxHasher;
use std::hash::{Hash, Hasher};

/// A node of the expression DAG, an index into its [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// Element-wise unary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Log10,
    Sqrt,
    Tanh,
    Sin,
    Cos,
    Abs,
    Sgn,
    Sigmoid,
    /// `log(1 + x)`, accurate near 0.
    Log1p,
    /// `exp(x) − 1`, accurate near 0.
    Expm1,
    Atan,
    /// The error function.
    Erf,
    /// Rounds toward −∞ (its derivative is 0).
    Floor,
    /// `x` itself, held constant by differentiation (its derivative is 0):
    /// JAX's `stop_gradient`, PyTorch's `detach`. Exact where the
    /// function does not depend on the value, as the shift of a stable
    /// log-sum-exp, `m + log Σ exp(x − m)`, for any `m`.
    Detach,
}

impl UnaryOp {
    /// The functions written by name (`exp x`), with their names.
    pub const NAMED: [(UnaryOp, &'static str); 16] = [
        (UnaryOp::Exp, "exp"),
        (UnaryOp::Log, "log"),
        (UnaryOp::Log10, "log10"),
        (UnaryOp::Sqrt, "sqrt"),
        (UnaryOp::Tanh, "tanh"),
        (UnaryOp::Sin, "sin"),
        (UnaryOp::Cos, "cos"),
        (UnaryOp::Abs, "abs"),
        (UnaryOp::Sgn, "sgn"),
        (UnaryOp::Sigmoid, "sigmoid"),
        (UnaryOp::Log1p, "log1p"),
        (UnaryOp::Expm1, "expm1"),
        (UnaryOp::Atan, "atan"),
        (UnaryOp::Erf, "erf"),
        (UnaryOp::Floor, "floor"),
        (UnaryOp::Detach, "detach"),
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "-",
            op => UnaryOp::NAMED
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, n)| *n)
                .unwrap_or("?"),
        }
    }

    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(o, _)| *o)
    }

    pub fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Log10 => x.log10(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sgn => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0 * x // keeps NaN a NaN
                }
            }
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            // musl's algorithms (the `libm` crate): Rust's `std` has no
            // `erf`, and the JIT calls the same functions.
            UnaryOp::Log1p => libm::log1p(x),
            UnaryOp::Expm1 => libm::expm1(x),
            UnaryOp::Atan => libm::atan(x),
            UnaryOp::Erf => libm::erf(x),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Detach => x,
        }
    }
}

/// Element-wise binary operations. `Max`/`Min` are value-level selects
/// (ReLU is `max(x, 0)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
}

impl BinaryOp {
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Pow => pow(a, b),
            // The first operand wins ties: this fixes where the subgradient
            // goes. A NaN operand wins (as in PyTorch): a NaN first operand
            // is kept, and a NaN second one fails the comparison.
            BinaryOp::Max => {
                if a >= b || a.is_nan() {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Min => {
                if a <= b || a.is_nan() {
                    a
                } else {
                    b
                }
            }
        }
    }
}

/// `a ** b`, with integral exponents computed exactly by repeated squaring
/// so that negative bases work (`(-2) ** 3 = -8`).
pub fn pow(a: f64, b: f64) -> f64 {
    if b == b.trunc() && b.abs() <= 64.0 {
        a.powi(b as i32)
    } else {
        a.powf(b)
    }
}

/// Comparison operators of guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Ge,
    Gt,
    Le,
    Lt,
}

impl CmpOp {
    pub const ALL: [(CmpOp, &'static str); 6] = [
        (CmpOp::Eq, "="),
        (CmpOp::Ne, "!="),
        (CmpOp::Ge, ">="),
        (CmpOp::Gt, ">"),
        (CmpOp::Le, "<="),
        (CmpOp::Lt, "<"),
    ];

    pub fn symbol(self) -> &'static str {
        CmpOp::ALL
            .iter()
            .find(|(o, _)| *o == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }

    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Ge => a >= b,
            CmpOp::Gt => a > b,
            CmpOp::Le => a <= b,
            CmpOp::Lt => a < b,
        }
    }

    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Ge => CmpOp::Lt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Lt => CmpOp::Ge,
        }
    }
}

/// The condition of a guard.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// `form op 0` on index values (exact, integer or rational arithmetic).
    Index(RatAffine, CmpOp),
    /// `form is int`.
    IsInt(RatAffine),
    /// `a op b` on computed values (value-level select; carries no gradient).
    Value(NodeId, CmpOp, NodeId),
}

/// Reductions over one bound index with inclusive bounds
/// `max(lower) ..= min(upper)` (lower bounds rounded up, upper rounded down).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// The first index (in increasing order) at which the body is maximal,
    /// as a number; `-1` over an empty range. Its derivative is zero.
    ArgMax,
    /// As `ArgMax`, for the minimum.
    ArgMin,
}

impl ReduceOp {
    pub const ALL: [(ReduceOp, &'static str); 5] = [
        (ReduceOp::Sum, "sum"),
        (ReduceOp::Max, "max"),
        (ReduceOp::Min, "min"),
        (ReduceOp::ArgMax, "argmax"),
        (ReduceOp::ArgMin, "argmin"),
    ];

    pub fn name(self) -> &'static str {
        ReduceOp::ALL
            .iter()
            .find(|(o, _)| *o == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }

    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(o, _)| *o)
    }
}

/// Inclusive range of a bound index: `max(lower) ..= min(upper)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    /// Rounded up; the maximum is taken. Never empty.
    pub lower: Vec<RatAffine>,
    /// Rounded down; the minimum is taken. Never empty.
    pub upper: Vec<RatAffine>,
}

impl Range {
    pub fn constant(lo: i64, hi: i64) -> Range {
        Range {
            lower: vec![RatAffine::constant(lo)],
            upper: vec![RatAffine::constant(hi)],
        }
    }

    pub fn vars(&self) -> impl Iterator<Item = VarId> + '_ {
        self.lower
            .iter()
            .chain(self.upper.iter())
            .flat_map(|b| b.vars())
    }
}

/// One node of the DAG.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// A constant, stored as its bit pattern so nodes can be hashed.
    Const(u64),
    /// `arg[index₀; index₁; ...]`, `arg` numbering the function's arguments.
    Access {
        arg: usize,
        index: Vec<Affine>,
    },
    /// An index value used as a number (`i`, `idx(i - j)`).
    Index(Affine),
    /// `random(k₀, k₁, k₂; counter)`: the uniform value in `[0, 1)` at the
    /// integer `counter` of the stream keyed by the three values
    /// (`crate::symbolic::random`). Constant for differentiation.
    Random {
        key: [NodeId; 3],
        counter: Affine,
    },
    Unary(UnaryOp, NodeId),
    Binary(BinaryOp, NodeId, NodeId),
    /// `if {cond} then (a) else (b)`; only the taken branch is evaluated.
    Select {
        cond: Cond,
        then: NodeId,
        otherwise: NodeId,
    },
    /// `op{var}_lo^hi (body)`.
    Reduce {
        op: ReduceOp,
        var: VarId,
        range: Range,
        body: NodeId,
    },
}

impl Node {
    /// The value of a `Const` node.
    pub fn as_const(&self) -> Option<f64> {
        match self {
            Node::Const(bits) => Some(f64::from_bits(*bits)),
            _ => None,
        }
    }

    /// The same node with every child id replaced through `f`.
    pub fn map_children(&self, f: &dyn Fn(NodeId) -> NodeId) -> Node {
        match self {
            Node::Const(_) | Node::Access { .. } | Node::Index(_) => self.clone(),
            Node::Unary(op, a) => Node::Unary(*op, f(*a)),
            Node::Binary(op, a, b) => Node::Binary(*op, f(*a), f(*b)),
            Node::Random { key, counter } => Node::Random {
                key: key.map(f),
                counter: counter.clone(),
            },
            Node::Select {
                cond,
                then,
                otherwise,
            } => Node::Select {
                cond: match cond {
                    Cond::Value(a, op, b) => Cond::Value(f(*a), *op, f(*b)),
                    other => other.clone(),
                },
                then: f(*then),
                otherwise: f(*otherwise),
            },
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => Node::Reduce {
                op: *op,
                var: *var,
                range: range.clone(),
                body: f(*body),
            },
        }
    }

    /// Child nodes, in order.
    pub fn children(&self) -> Vec<NodeId> {
        match self {
            Node::Const(_) | Node::Access { .. } | Node::Index(_) => vec![],
            Node::Unary(_, a) => vec![*a],
            Node::Binary(_, a, b) => vec![*a, *b],
            Node::Random { key, .. } => key.to_vec(),
            Node::Select {
                cond,
                then,
                otherwise,
            } => match cond {
                Cond::Value(a, _, b) => vec![*a, *b, *then, *otherwise],
                _ => vec![*then, *otherwise],
            },
            Node::Reduce { body, .. } => vec![*body],
        }
    }
}

/// A hash-consing arena of [`Node`]s. Children always have smaller ids than
/// their parents, so ids are a topological order.
#[derive(Clone, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    /// Every node's id, found by the node's hash (the node itself is kept
    /// once, in `nodes`).
    interned: HashTable<NodeId>,
    /// Free index variables of each node, sorted.
    free: Vec<Vec<VarId>>,
}

/// The hash that finds `node` in a graph's table.
fn node_hash(node: &Node) -> u64 {
    let mut h = FxHasher::default();
    node.hash(&mut h);
    h.finish()
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.nodes)
            .field("free", &self.free)
            .finish()
    }
}

fn merge_sorted(a: &[VarId], b: &[VarId]) -> Vec<VarId> {
    let mut out: Vec<VarId> = a.iter().chain(b.iter()).copied().collect();
    out.sort();
    out.dedup();
    out
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Free index variables of a node, sorted.
    pub fn free_vars(&self, id: NodeId) -> &[VarId] {
        &self.free[id.0 as usize]
    }

    /// Stores a node as it is (no simplification); returns the existing id
    /// for a structurally equal node.
    pub fn intern(&mut self, node: Node) -> NodeId {
        let hash = node_hash(&node);
        let nodes = &self.nodes;
        if let Some(&id) = self.interned.find(hash, |&id| nodes[id.0 as usize] == node) {
            return id;
        }
        let free = self.compute_free(&node);
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        let nodes = &self.nodes;
        self.interned
            .insert_unique(hash, id, |&id| node_hash(&nodes[id.0 as usize]));
        self.free.push(free);
        id
    }

    fn compute_free(&self, node: &Node) -> Vec<VarId> {
        let mut own: Vec<VarId> = match node {
            Node::Access { index, .. } => index.iter().flat_map(|a| a.vars()).collect(),
            Node::Index(a) | Node::Random { counter: a, .. } => a.vars().collect(),
            Node::Select {
                cond: Cond::Index(r, _) | Cond::IsInt(r),
                ..
            } => r.vars().collect(),
            Node::Reduce { range, .. } => range.vars().collect(),
            _ => vec![],
        };
        own.sort();
        own.dedup();
        let mut children: Vec<VarId> = Vec::new();
        for c in node.children() {
            children = merge_sorted(&children, &self.free[c.0 as usize]);
        }
        if let Node::Reduce { var, .. } = node {
            children.retain(|v| v != var);
        }
        merge_sorted(&own, &children)
    }

    pub fn constant(&mut self, c: f64) -> NodeId {
        // Normalise -0.0 to 0.0 so that folding is predictable.
        let c = if c == 0.0 { 0.0 } else { c };
        self.intern(Node::Const(c.to_bits()))
    }

    pub fn const_value(&self, id: NodeId) -> Option<f64> {
        self.node(id).as_const()
    }

    fn is_const(&self, id: NodeId, c: f64) -> bool {
        self.const_value(id) == Some(c)
    }

    pub fn access(&mut self, arg: usize, index: Vec<Affine>) -> NodeId {
        self.intern(Node::Access { arg, index })
    }

    pub fn index_value(&mut self, a: Affine) -> NodeId {
        if a.is_constant() {
            return self.constant(a.constant as f64);
        }
        self.intern(Node::Index(a))
    }

    /// `random(key; counter)` (see [`Node::Random`]).
    pub fn random(&mut self, key: [NodeId; 3], counter: Affine) -> NodeId {
        self.intern(Node::Random { key, counter })
    }

    /// Unary operation with folding of constants and `-(-x) = x`.
    pub fn unary(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        if let Some(c) = self.const_value(a) {
            return self.constant(op.apply(c));
        }
        if op == UnaryOp::Neg {
            if let Node::Unary(UnaryOp::Neg, inner) = self.node(a) {
                return *inner;
            }
        }
        self.intern(Node::Unary(op, a))
    }

    pub fn neg(&mut self, a: NodeId) -> NodeId {
        self.unary(UnaryOp::Neg, a)
    }

    /// Binary operation with the algebraic simplifications of the derivative
    /// printer: constant folding, `x+0`, `0+x`, `x-0`, `0-x = -x`, `x*1`,
    /// `1*x`, `x*0 = 0`, `x*-1 = -x`, `x/1`, `x**1`, `x**0 = 1`.
    ///
    /// `x*0 = 0` follows the convention of symbolic differentiation (a
    /// derivative that is structurally zero is zero even where the other
    /// factor would be infinite).
    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        if let (Some(x), Some(y)) = (self.const_value(a), self.const_value(b)) {
            return self.constant(op.apply(x, y));
        }
        match op {
            BinaryOp::Add if self.is_const(a, 0.0) => return b,
            BinaryOp::Add | BinaryOp::Sub if self.is_const(b, 0.0) => return a,
            BinaryOp::Sub if self.is_const(a, 0.0) => return self.neg(b),
            BinaryOp::Sub if a == b => return self.constant(0.0),
            BinaryOp::Mul if self.is_const(a, 0.0) || self.is_const(b, 0.0) => {
                return self.constant(0.0)
            }
            BinaryOp::Mul if self.is_const(a, 1.0) => return b,
            BinaryOp::Mul | BinaryOp::Div if self.is_const(b, 1.0) => return a,
            BinaryOp::Mul if self.is_const(a, -1.0) => return self.neg(b),
            BinaryOp::Mul | BinaryOp::Div if self.is_const(b, -1.0) => return self.neg(a),
            BinaryOp::Div if self.is_const(a, 0.0) => return self.constant(0.0),
            BinaryOp::Pow if self.is_const(b, 1.0) => return a,
            BinaryOp::Pow if self.is_const(b, 0.0) => return self.constant(1.0),
            _ => {}
        }
        // `-a * b` and `a * -b` keep the minus outside: `-(a * b)` prints and
        // simplifies better (double negations cancel).
        if op == BinaryOp::Mul || op == BinaryOp::Div {
            let na = self.strip_neg(a);
            let nb = self.strip_neg(b);
            if na.is_some() || nb.is_some() {
                let (x, sx) = na.map_or((a, false), |x| (x, true));
                let (y, sy) = nb.map_or((b, false), |y| (y, true));
                let inner = self.binary(op, x, y);
                return if sx != sy { self.neg(inner) } else { inner };
            }
        }
        if op == BinaryOp::Add {
            if let Some(nb) = self.strip_neg(b) {
                return self.binary(BinaryOp::Sub, a, nb);
            }
        }
        self.intern(Node::Binary(op, a, b))
    }

    fn strip_neg(&self, a: NodeId) -> Option<NodeId> {
        match self.node(a) {
            Node::Unary(UnaryOp::Neg, x) => Some(*x),
            _ => None,
        }
    }

    pub fn add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `t₁ + t₂ + …` (0 for no terms): associated to the left, and as a
    /// balanced tree from [`Graph::BALANCE_FROM`] terms on, so that passes
    /// recursing over the result go log₂(n) deep, not n.
    pub fn add_all(&mut self, terms: &[NodeId]) -> NodeId {
        self.fold_all(BinaryOp::Add, terms)
            .unwrap_or_else(|| self.constant(0.0))
    }

    /// `f₁ · f₂ · …` (`None` for no factors), shaped as [`Graph::add_all`].
    pub fn mul_all(&mut self, factors: &[NodeId]) -> Option<NodeId> {
        self.fold_all(BinaryOp::Mul, factors)
    }

    /// Chains this long or longer are built as balanced trees.
    pub const BALANCE_FROM: usize = 32;

    fn fold_all(&mut self, op: BinaryOp, items: &[NodeId]) -> Option<NodeId> {
        if items.len() >= Self::BALANCE_FROM {
            let (left, right) = items.split_at(items.len() / 2);
            let (l, r) = (self.fold_all(op, left)?, self.fold_all(op, right)?);
            return Some(self.binary(op, l, r));
        }
        let (&first, rest) = items.split_first()?;
        Some(rest.iter().fold(first, |acc, &n| self.binary(op, acc, n)))
    }

    pub fn sub(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryOp::Sub, a, b)
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryOp::Mul, a, b)
    }

    pub fn div(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryOp::Div, a, b)
    }

    /// Guard with folding: a constant condition picks its branch, equal
    /// branches drop the guard.
    pub fn select(&mut self, cond: Cond, then: NodeId, otherwise: NodeId) -> NodeId {
        if then == otherwise {
            return then;
        }
        match &cond {
            Cond::Index(r, op) if r.num.is_constant() => {
                let holds = op.holds(r.num.constant, 0);
                return if holds { then } else { otherwise };
            }
            Cond::IsInt(r) if r.num.is_constant() => {
                let holds = r.num.constant % r.den == 0;
                return if holds { then } else { otherwise };
            }
            Cond::Value(a, op, b) => {
                if let (Some(x), Some(y)) = (self.const_value(*a), self.const_value(*b)) {
                    return if op.holds(x, y) { then } else { otherwise };
                }
            }
            _ => {}
        }
        self.intern(Node::Select {
            cond,
            then,
            otherwise,
        })
    }

    /// Reduction; a sum of a constant zero is zero.
    pub fn reduce(&mut self, op: ReduceOp, var: VarId, range: Range, body: NodeId) -> NodeId {
        if op == ReduceOp::Sum && self.is_const(body, 0.0) {
            return body;
        }
        self.intern(Node::Reduce {
            op,
            var,
            range,
            body,
        })
    }

    /// A new graph holding only the nodes reachable from `root` (in the same
    /// relative order), and the root's id there.
    pub fn extract(&self, root: NodeId) -> (Graph, NodeId) {
        let mut out = Graph::new();
        // Old id to new: children come first, so each is set before read.
        let mut map = vec![NodeId(u32::MAX); self.nodes.len()];
        for n in self.reachable(root) {
            let node = self.node(n).map_children(&|c| map[c.0 as usize]);
            map[n.0 as usize] = out.intern(node);
        }
        (out, map[root.0 as usize])
    }

    /// Nodes reachable from `root`, children before parents.
    pub fn reachable(&self, root: NodeId) -> Vec<NodeId> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![root];
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n.0 as usize], true) {
                continue;
            }
            stack.extend(self.node(n).children());
        }
        (0..self.nodes.len() as u32)
            .map(NodeId)
            .filter(|n| seen[n.0 as usize])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_nodes_are_shared() {
        let mut g = Graph::new();
        let x = g.access(0, vec![Affine::var(VarId(0))]);
        let y = g.access(0, vec![Affine::var(VarId(0))]);
        assert_eq!(x, y);
        let a = g.add(x, y);
        let b = g.add(x, y);
        assert_eq!(a, b);
    }

    #[test]
    fn simplifications() {
        let mut g = Graph::new();
        let x = g.access(0, vec![]);
        let one = g.constant(1.0);
        let zero = g.constant(0.0);
        assert_eq!(g.mul(x, one), x);
        assert_eq!(g.add(x, zero), x);
        assert_eq!(g.binary(BinaryOp::Pow, x, one), x);
        let nx = g.neg(x);
        assert_eq!(g.neg(nx), x);
        let two = g.constant(2.0);
        let d = g.sub(two, one);
        assert_eq!(g.const_value(d), Some(1.0));
        assert_eq!(g.mul(x, zero), zero);
    }

    #[test]
    fn free_vars_exclude_bound_index() {
        let mut g = Graph::new();
        let (i, k) = (VarId(0), VarId(1));
        let body = g.access(0, vec![Affine::var(i), Affine::var(k)]);
        let s = g.reduce(ReduceOp::Sum, k, Range::constant(0, 3), body);
        assert_eq!(g.free_vars(body), &[i, k]);
        assert_eq!(g.free_vars(s), &[i]);
    }
}
