//! Lowering `IndexFn → Kernel`.
//!
//! One loop per output index (the outermost one is the parallel loop over
//! `[start, end)`), one loop per reduction, guards as branches, and the body
//! DAG with each shared subexpression computed once per point.
//!
//! **Placement.** A node is computed in the outermost scope where all its
//! free index variables are bound, as long as moving it there is safe:
//! output loops are never empty when a kernel runs, and neither are
//! reductions whose bounds cannot cross (interval arithmetic over the output
//! box), so anything may leave them. A reduction that may be empty, or a
//! guard, protects what it contains: a node leaves it only when it is
//! *speculable*, i.e. every argument access reachable from it is in bounds
//! for all values its index variables can take (intervals from the output
//! box and the reductions' bounds). A node only leaves a guard when it also
//! leaves a loop (no speculation without a saving). Loads that a guard or a
//! possibly empty range protects therefore stay where they are.

use super::{Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Reg, Stmt, END, START};
use crate::symbolic::index_fn::row_major_strides;
use crate::symbolic::intervals::Intervals;
use crate::symbolic::{Affine, BinaryOp, IndexFn, Node, NodeId, RatAffine, UnaryOp, VarId};
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

/// Lowers an index function to its kernel.
///
/// ```
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i] = sum{k}_0^2 (a[i; k])", &[("a", &[4, 3][..])])?;
/// let k = tenjin::kernel::lower(&f)?;
/// assert_eq!(k.extent, 4);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn lower(f: &IndexFn) -> Result<Kernel, Error> {
    let mut l = Lowerer::new(f)?;
    let rank = f.out_vars.len();
    // Scopes: root, then one per output loop (a dummy one for rank 0).
    let mut loops = Vec::new();
    let mut scope = ROOT;
    for d in 0..rank.max(1) {
        let var = l.new_ivar();
        let (lower, upper) = if d == 0 {
            (Lin::var(START), lin_add_const(&Lin::var(END), -1)?)
        } else {
            (Lin::constant(0), Lin::constant(f.out_shape[d] as i64 - 1))
        };
        let bound = if rank == 0 { None } else { Some(f.out_vars[d]) };
        scope = l.push_scope(scope, Kind::OutLoop, bound.map(|v| (v, var)));
        let trips = if rank == 0 { 1 } else { f.out_shape[d] as u64 };
        loops.push((scope, var, lower, upper, trips));
    }
    let value = l.materialize(f.root, scope)?;
    let mut offset = Lin::constant(0);
    let mut stride = 1i64;
    for d in (0..rank).rev() {
        offset = lin_add(&offset, &lin_scale(&Lin::var(loops[d].1), stride)?)?;
        stride = stride
            .checked_mul(f.out_shape[d] as i64)
            .ok_or_else(|| overflow(f))?;
    }
    l.scopes[scope].stmts.push(Stmt::Store { offset, value });
    for (s, var, lower, upper, trips) in loops.into_iter().rev() {
        let body = std::mem::take(&mut l.scopes[s].stmts);
        let parent = l.scopes[s].parent.unwrap_or(ROOT);
        l.scopes[parent].stmts.push(Stmt::For(Loop {
            var,
            lower: vec![Bound { num: lower, den: 1 }],
            upper: vec![Bound { num: upper, den: 1 }],
            body,
            max_trips: trips,
            vector: false,
        }));
    }
    Ok(Kernel {
        name: f.name.clone(),
        args: f.args.clone(),
        out_shape: f.out_shape.clone(),
        extent: if rank == 0 { 1 } else { f.out_shape[0] },
        num_ivars: l.next_ivar,
        num_regs: l.next_reg,
        body: std::mem::take(&mut l.scopes[ROOT].stmts),
        threads_per_output: 1,
        shared_loops: 0,
        buffers: Default::default(),
        params: Vec::new(),
        strides: Vec::new(),
    })
}

type ScopeId = usize;
const ROOT: ScopeId = 0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Root,
    /// Never empty while the kernel runs.
    OutLoop,
    /// A reduction loop; `true` when its range is never empty.
    RedLoop(bool),
    Branch,
}

struct Scope {
    parent: Option<ScopeId>,
    kind: Kind,
    /// The index variable a loop binds, and its integer value.
    binds: Option<(VarId, IVar)>,
    stmts: Vec<Stmt>,
}

struct Lowerer<'a> {
    f: &'a IndexFn,
    /// Row-major strides of each argument.
    strides: Vec<Vec<i64>>,
    scopes: Vec<Scope>,
    memo: HashMap<(NodeId, ScopeId), Reg>,
    /// Per node: may it be computed speculatively (see the module docs)?
    speculable: Vec<bool>,
    /// Upper bound of each reduction's trip count, by node.
    trips: HashMap<NodeId, u64>,
    /// Reductions whose range is non-empty wherever they are evaluated.
    nonempty: HashMap<NodeId, bool>,
    next_ivar: u32,
    next_reg: u32,
}

fn overflow(f: &IndexFn) -> Error {
    Error::Overflow {
        op: format!("lowering {}", f.name),
    }
}

fn lin_add(a: &Lin, b: &Lin) -> Result<Lin, Error> {
    a.checked_add(b).ok_or_else(lin_overflow)
}

fn lin_add_const(a: &Lin, c: i64) -> Result<Lin, Error> {
    lin_add(a, &Lin::constant(c))
}

fn lin_scale(a: &Lin, k: i64) -> Result<Lin, Error> {
    a.checked_scale(k).ok_or_else(lin_overflow)
}

fn lin_overflow() -> Error {
    Error::Overflow {
        op: "lowering: flat offset".into(),
    }
}

impl<'a> Lowerer<'a> {
    fn new(f: &'a IndexFn) -> Result<Self, Error> {
        let strides = f
            .args
            .iter()
            .map(|a| row_major_strides(&a.shape).ok_or_else(|| overflow(f)))
            .collect::<Result<Vec<_>, Error>>()?;
        let mut l = Lowerer {
            f,
            strides,
            scopes: vec![Scope {
                parent: None,
                kind: Kind::Root,
                binds: None,
                stmts: Vec::new(),
            }],
            memo: HashMap::default(),
            speculable: Vec::new(),
            trips: HashMap::default(),
            nonempty: HashMap::default(),
            next_ivar: 2, // START and END
            next_reg: 0,
        };
        l.analyse();
        Ok(l)
    }

    /// Speculability of every node and the trip bounds and emptiness of
    /// every reduction (`symbolic::intervals`).
    fn analyse(&mut self) {
        let iv = Intervals::of(self.f);
        self.speculable = iv.speculable;
        self.trips = iv.trips;
        self.nonempty = iv.nonempty;
    }

    fn new_ivar(&mut self) -> IVar {
        self.next_ivar += 1;
        IVar(self.next_ivar - 1)
    }

    fn new_reg(&mut self) -> Reg {
        self.next_reg += 1;
        Reg(self.next_reg - 1)
    }

    fn push_scope(&mut self, parent: ScopeId, kind: Kind, binds: Option<(VarId, IVar)>) -> ScopeId {
        self.scopes.push(Scope {
            parent: Some(parent),
            kind,
            binds,
            stmts: Vec::new(),
        });
        self.scopes.len() - 1
    }

    fn ancestors(&self, s: ScopeId) -> impl Iterator<Item = ScopeId> + '_ {
        std::iter::successors(Some(s), move |&c| self.scopes[c].parent)
    }

    /// The outermost scope, from `s` outwards, where `n` may be computed.
    fn placement(&self, n: NodeId, s: ScopeId) -> ScopeId {
        let free = self.f.graph.free_vars(n);
        let spec = self.speculable[n.0 as usize];
        let mut best = s;
        let mut cur = s;
        loop {
            let scope = &self.scopes[cur];
            let bound_here = scope.binds.is_some_and(|(v, _)| free.contains(&v));
            let crossable = match scope.kind {
                Kind::Root => false,
                Kind::OutLoop => !bound_here,
                Kind::RedLoop(nonempty) => !bound_here && (spec || nonempty),
                Kind::Branch => spec,
            };
            if !crossable {
                return best;
            }
            cur = scope.parent.unwrap_or(ROOT);
            if scope.kind != Kind::Branch {
                best = cur;
            }
        }
    }

    fn emit(&mut self, s: ScopeId, stmt: Stmt) {
        self.scopes[s].stmts.push(stmt);
    }

    fn let_(&mut self, s: ScopeId, e: Expr) -> Reg {
        let r = self.new_reg();
        self.emit(s, Stmt::Let(r, e));
        r
    }

    /// The integer value of an index variable as seen from scope `s`.
    fn ivar(&self, v: VarId, s: ScopeId) -> Result<IVar, Error> {
        self.ancestors(s)
            .find_map(|a| match self.scopes[a].binds {
                Some((w, iv)) if w == v => Some(iv),
                _ => None,
            })
            .ok_or_else(|| {
                self.f.invalid(format!(
                    "index `{}` is neither an output index nor bound by an enclosing reduction",
                    self.f.var_name(v)
                ))
            })
    }

    fn lin(&self, a: &Affine, s: ScopeId) -> Result<Lin, Error> {
        let mut out = Lin::constant(a.constant);
        for &(v, c) in &a.terms {
            out = lin_add(&out, &lin_scale(&Lin::var(self.ivar(v, s)?), c)?)?;
        }
        Ok(out)
    }

    fn bound(&self, r: &RatAffine, s: ScopeId) -> Result<Bound, Error> {
        Ok(Bound {
            num: self.lin(&r.num, s)?,
            den: r.den,
        })
    }

    /// The register holding `n`'s value, visible in scope `s`; emits its
    /// computation (and its operands') where [`Lowerer::placement`] says.
    fn materialize(&mut self, n: NodeId, s: ScopeId) -> Result<Reg, Error> {
        let visible = self
            .ancestors(s)
            .find_map(|a| self.memo.get(&(n, a)).copied());
        if let Some(r) = visible {
            return Ok(r);
        }
        let p = self.placement(n, s);
        let node = self.f.graph.node(n).clone();
        let r = match node {
            Node::Const(bits) => self.let_(p, Expr::Const(f64::from_bits(bits))),
            Node::Index(a) => {
                let lin = self.lin(&a, p)?;
                self.let_(p, Expr::Index(lin))
            }
            Node::Random { key, counter } => {
                let mut regs = [Reg(0); 3];
                for (r, k) in regs.iter_mut().zip(key) {
                    *r = self.materialize(k, p)?;
                }
                let counter = self.lin(&counter, p)?;
                self.let_(p, Expr::Random { key: regs, counter })
            }
            Node::Access { arg, index } => {
                let mut offset = Lin::constant(0);
                for (form, &stride) in index.iter().zip(&self.strides[arg]) {
                    offset = lin_add(&offset, &lin_scale(&self.lin(form, p)?, stride)?)?;
                }
                self.let_(p, Expr::Load { arg, offset })
            }
            // A value held constant for differentiation is the value.
            Node::Unary(UnaryOp::Detach, a) => self.materialize(a, p)?,
            Node::Unary(op, a) => {
                let a = self.materialize(a, p)?;
                self.let_(p, Expr::Unary(op, a))
            }
            Node::Binary(op, a, b) => {
                let ra = self.materialize(a, p)?;
                match (op, self.f.graph.const_value(b)) {
                    (BinaryOp::Pow, Some(e)) if e == e.trunc() && e.abs() <= 64.0 => {
                        self.let_(p, Expr::PowI(ra, e as i32))
                    }
                    _ => {
                        let rb = self.materialize(b, p)?;
                        self.let_(p, Expr::Binary(op, ra, rb))
                    }
                }
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                let cond = match cond {
                    crate::symbolic::Cond::Index(r, op) => Cond::Index(self.lin(&r.num, p)?, op),
                    crate::symbolic::Cond::IsInt(r) => Cond::Divisible(self.lin(&r.num, p)?, r.den),
                    crate::symbolic::Cond::Value(a, op, b) => {
                        let a = self.materialize(a, p)?;
                        let b = self.materialize(b, p)?;
                        Cond::Value(a, op, b)
                    }
                };
                let t = self.push_scope(p, Kind::Branch, None);
                let then_value = self.materialize(then, t)?;
                let e = self.push_scope(p, Kind::Branch, None);
                let otherwise_value = self.materialize(otherwise, e)?;
                let result = self.new_reg();
                let stmt = Stmt::If {
                    cond,
                    then: std::mem::take(&mut self.scopes[t].stmts),
                    then_value,
                    otherwise: std::mem::take(&mut self.scopes[e].stmts),
                    otherwise_value,
                    result,
                };
                self.emit(p, stmt);
                result
            }
            Node::Reduce {
                op,
                var,
                range,
                body,
            } => {
                let lower = range
                    .lower
                    .iter()
                    .map(|b| self.bound(b, p))
                    .collect::<Result<Vec<_>, _>>()?;
                let upper = range
                    .upper
                    .iter()
                    .map(|b| self.bound(b, p))
                    .collect::<Result<Vec<_>, _>>()?;
                let iv = self.new_ivar();
                let nonempty = self.nonempty.get(&n).copied().unwrap_or(false);
                let l = self.push_scope(p, Kind::RedLoop(nonempty), Some((var, iv)));
                let value = self.materialize(body, l)?;
                let result = self.new_reg();
                let stmt = Stmt::Reduce {
                    op,
                    value,
                    result,
                    wide: false,
                    body: Loop {
                        var: iv,
                        lower,
                        upper,
                        body: std::mem::take(&mut self.scopes[l].stmts),
                        max_trips: self.trips.get(&n).copied().unwrap_or(1),
                        vector: false,
                    },
                };
                self.emit(p, stmt);
                result
            }
        };
        self.memo.insert((n, p), r);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
        IndexFn::parse_with_sizes(src, args, sizes).unwrap()
    }

    #[test]
    fn loads_of_outer_indices_leave_inner_loops() {
        let f = parse(
            "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))",
            &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
            &[],
        );
        let k = lower(&f).unwrap();
        let Stmt::For(outer) = &k.body[k.body.len() - 1] else {
            panic!("{k}")
        };
        // c[i; i] is loaded in the i loop, before the j loop.
        let c_load = outer
            .body
            .iter()
            .any(|s| matches!(s, Stmt::Let(_, Expr::Load { arg: 2, .. })));
        assert!(c_load, "{k}");
    }

    #[test]
    fn guarded_loads_stay_in_their_branch() {
        let f = parse(
            "f[i] = sum{k}_0^2 ((if {i + k - 1 >= 0} then (if {i + k - 1 <= 4} then (x[i + k - 1]) else (0)) else (0)) * w[k])",
            &[("x", &[5]), ("w", &[3])],
            &[("i", 5)],
        );
        let k = lower(&f).unwrap();
        let text = k.to_string();
        // The load of x happens inside both ifs.
        let load = text.find("load x").unwrap();
        let first_if = text.find("if ").unwrap();
        assert!(first_if < load, "{text}");
    }

    #[test]
    fn loads_protected_by_a_possibly_empty_range_stay_inside() {
        // x[i - 1] is only in bounds where the range 0..=i-1 is non-empty.
        let f = parse(
            "f[i] = sum{k}_0^(i - 1) (x[i - 1] * y[k])",
            &[("x", &[4]), ("y", &[4])],
            &[("i", 4)],
        );
        let k = lower(&f).unwrap();
        let text = k.to_string();
        let sum = text.find("sum").unwrap();
        let load = text.find("load x").unwrap();
        assert!(sum < load, "{text}");
    }
}
