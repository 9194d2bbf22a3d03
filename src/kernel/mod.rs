//! The backend-neutral kernel IR: what a backend executes.
//!
//! Owns [`Kernel`] (an [`IndexFn`](crate::symbolic::IndexFn) lowered to a
//! loop nest: loops with run-time `max`/`min`/`ceil`/`floor` bounds, guards
//! as control flow, reductions, loads at flat affine offsets, stores), the
//! lowering `lower`, the structural cache key (`key`), and everything else
//! a backend is handed: the [`Route`](route::Route) of a stage, the
//! [`Contraction`](contraction::Contraction) a GEMM computes (with its
//! batch folded into M and N as the CPU's GEMM runs it, `fold`), the
//! host-kernel interface (`host`, with its conversions between f32 and
//! bf16 over slices, `bf16_slices`), the Winograd convolution a CPU runs
//! (`winograd`), the vector width [`LANES`], and the
//! [`Backend`](backend::Backend) interface itself with its operands. Every
//! backend consumes this IR: the Cranelift CPU backend (`crate::cpu`) and
//! the PTX backend (`crate::gpu`). It must therefore stay free of any
//! backend's types, and it must not parse or derive (that is
//! `crate::symbolic`'s job), plan (`crate::planner`), allocate buffers or
//! run anything.
//!
//! # Semantics
//!
//! A kernel is called with a half-open range `[start, end)` of its outermost
//! (parallel) output index; it runs its [`Kernel::body`] only when
//! `start < end`. Integer values ([`IVar`]) are `i64`: loop variables and the
//! two parameters [`START`] and [`END`]. Scalar values ([`Reg`]) have the
//! kernel's element type (`f32` or `f64`); each register is defined by
//! exactly one statement, and every use is dominated by its definition (it
//! is defined earlier in the same statement list or in an enclosing one).
//!
//! - `Let(r, e)` computes a pure expression. `Load` reads
//!   `args[arg][offset]`; it may only execute where the reference
//!   interpreter would read the same element, so backends must not move a
//!   load out of the branch or loop it sits in.
//! - `If` evaluates its condition and runs exactly one branch; `result`
//!   takes the branch's value.
//! - `Reduce` runs its loop `for var in max(⌈lower⌉) ..= min(⌊upper⌋)` in
//!   increasing order and folds the body's value like the interpreter
//!   (sum from 0; `max`/`min` from ∓∞ with the first operand winning ties;
//!   `argmax`/`argmin` keep the first index of a strictly better value,
//!   `-1` over an empty range). A `wide` sum accumulates in f64. A kernel
//!   with [`Kernel::threads_per_output`] above 1 folds its top-level
//!   reductions in another fixed order (strided shares, then a tree; a
//!   perfect nest of one reduction, [`nest::reduction_nest`], as one
//!   flattened range).
//! - `For` is an output loop; `Store` writes `out[offset]`.
//!
//! ```
//! use tenjin::symbolic::IndexFn;
//! let f = IndexFn::parse("f[i; j] = x[j; i] * y[i]", &[("x", &[3, 2][..]), ("y", &[2][..])])?;
//! let k = tenjin::kernel::lower(&f)?;
//! let text = k.to_string();
//! assert!(text.contains("load y[v2]"), "{text}"); // hoisted out of the j loop
//! assert!(text.contains("load x[v2 + v3*2]"), "{text}"); // a transpose is a strided load
//! # Ok::<(), tenjin::Error>(())
//! ```

pub mod backend;
pub mod bf16_slices;
pub mod contraction;
pub mod fold;
pub mod host;
pub mod key;
mod lower;
pub mod nest;
mod params;
mod print;
pub mod route;
pub(crate) mod sharing;
pub mod strided;
pub mod winograd;

pub use lower::lower;
pub use route::{Route, RouteKind};

/// Elements of one f32 vector in the CPU's vector loops ([`Loop::vector`]).
pub const LANES: i64 = 4;

use crate::symbolic::{ArgDecl, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::DType;

/// An integer (`i64`) value of a kernel: a loop variable or a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IVar(pub u32);

/// The first index of the parallel loop this call covers (inclusive).
pub const START: IVar = IVar(0);
/// The end of the parallel loop range this call covers (exclusive).
pub const END: IVar = IVar(1);

/// A scalar register of the kernel's element type, defined once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

/// `constant + Σ coeff·var` over integer values. Terms are sorted by
/// variable (outer loops first), with no zero coefficients.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Lin {
    pub constant: i64,
    pub terms: Vec<(IVar, i64)>,
}

impl Lin {
    pub fn constant(c: i64) -> Lin {
        Lin {
            constant: c,
            terms: Vec::new(),
        }
    }

    pub fn var(v: IVar) -> Lin {
        Lin {
            constant: 0,
            terms: vec![(v, 1)],
        }
    }

    /// The coefficient of `v` (0 when absent).
    pub fn coeff(&self, v: IVar) -> i64 {
        self.terms
            .iter()
            .find(|(x, _)| *x == v)
            .map_or(0, |&(_, c)| c)
    }

    /// `self + other`, `None` on overflow.
    pub fn checked_add(&self, other: &Lin) -> Option<Lin> {
        let mut terms: Vec<(IVar, i64)> = self.terms.clone();
        for &(v, c) in &other.terms {
            match terms.iter_mut().find(|(w, _)| *w == v) {
                Some(t) => t.1 = t.1.checked_add(c)?,
                None => terms.push((v, c)),
            }
        }
        terms.retain(|&(_, c)| c != 0);
        terms.sort();
        Some(Lin {
            constant: self.constant.checked_add(other.constant)?,
            terms,
        })
    }

    /// `k · self`, `None` on overflow.
    pub fn checked_scale(&self, k: i64) -> Option<Lin> {
        if k == 0 {
            return Some(Lin::constant(0));
        }
        Some(Lin {
            constant: self.constant.checked_mul(k)?,
            terms: self
                .terms
                .iter()
                .map(|&(v, c)| Some((v, c.checked_mul(k)?)))
                .collect::<Option<_>>()?,
        })
    }

    /// `self − other`, `None` on overflow.
    pub fn checked_sub(&self, other: &Lin) -> Option<Lin> {
        self.checked_add(&other.checked_scale(-1)?)
    }

    /// `self` without its `v` term.
    pub fn without(&self, v: IVar) -> Lin {
        Lin {
            constant: self.constant,
            terms: self
                .terms
                .iter()
                .filter(|(x, _)| *x != v)
                .copied()
                .collect(),
        }
    }

    /// The value at integer variable values (wrapping arithmetic, like the
    /// generated code).
    pub fn eval(&self, value: &dyn Fn(IVar) -> i64) -> i64 {
        self.terms.iter().fold(self.constant, |acc, &(v, c)| {
            acc.wrapping_add(c.wrapping_mul(value(v)))
        })
    }
}

/// A loop bound `num / den` (`den > 0`), rounded up when it is a lower
/// bound and down when it is an upper bound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bound {
    pub num: Lin,
    pub den: i64,
}

/// The condition of an [`Stmt::If`].
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// `form op 0` on integers.
    Index(Lin, CmpOp),
    /// `form` is divisible by the positive constant.
    Divisible(Lin, i64),
    /// `a op b` on scalars, with IEEE semantics (`!=` holds for NaN, the
    /// others do not).
    Value(Reg, CmpOp, Reg),
}

/// A pure scalar expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant (rounded to the element type by the backend).
    Const(f64),
    /// A constant read when the kernel is called: the `f64` whose bits
    /// the integer parameter holds (`Kernel::params`), rounded to the
    /// element type as [`Expr::Const`] is. Lowering makes none; a backend
    /// sharing one code between kernels that differ in constants (a
    /// mean's `1/B`) lifts them into it
    /// ([`Kernel::with_run_time_constants`]).
    ConstParam(IVar),
    /// `args[arg][offset]`, the offset in elements.
    Load {
        arg: usize,
        offset: Lin,
    },
    /// An integer value as a number.
    Index(Lin),
    /// The uniform value at the integer `counter` of the stream keyed by
    /// the three registers (`crate::symbolic::random`: key words from the
    /// numbers, SplitMix64's output function in 64-bit integers).
    Random {
        key: [Reg; 3],
        counter: Lin,
    },
    Unary(UnaryOp, Reg),
    /// `Pow` with a run-time exponent follows `crate::symbolic::expr::pow`.
    Binary(BinaryOp, Reg, Reg),
    /// `x ** n` for a constant integer `n` by repeated squaring, in the
    /// order of `f64::powi` (`1/x**|n|` for negative `n`).
    PowI(Reg, i32),
}

/// A loop `for var in max(⌈lower⌉) ..= min(⌊upper⌋)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub var: IVar,
    /// Never empty; the maximum of the rounded-up values is taken.
    pub lower: Vec<Bound>,
    /// Never empty; the minimum of the rounded-down values is taken.
    pub upper: Vec<Bound>,
    pub body: Vec<Stmt>,
    /// An upper bound of the trip count known at lowering time (for cost
    /// estimates, and a vector loop's unrolling). Backends read it on
    /// vector loops only: the CPU shares the code of nests that differ in
    /// it elsewhere (`crate::cpu`'s code cache).
    pub max_trips: u64,
    /// Run as f32x4 vector code: an output loop vectorised across its
    /// iterations, or a sum with vector partial sums. Lowering leaves it
    /// `false`; the planner decides (`crate::planner::vectorize`) and a
    /// backend obeys (a backend without vectors may ignore it).
    pub vector: bool,
}

impl Bound {
    /// The bound's value when its numerator is a constant: rounded up for
    /// a lower bound, down for an upper one.
    pub fn constant_value(&self, lower: bool) -> Option<i64> {
        if !self.num.terms.is_empty() || self.den <= 0 {
            return None;
        }
        let c = self.num.constant;
        Some(if lower {
            -(-c).div_euclid(self.den)
        } else {
            c.div_euclid(self.den)
        })
    }
}

impl Loop {
    /// Whether this is the parallel loop: its bounds hold the range of a
    /// call (`START`, `END`).
    pub fn is_parallel(&self) -> bool {
        self.lower
            .iter()
            .chain(&self.upper)
            .any(|b| b.num.coeff(START) != 0 || b.num.coeff(END) != 0)
    }

    /// `(first, last)` when every bound is a constant (`first > last`: an
    /// empty loop).
    pub fn constant_range(&self) -> Option<(i64, i64)> {
        let lo = self.lower.iter().map(|b| b.constant_value(true));
        let hi = self.upper.iter().map(|b| b.constant_value(false));
        Some((
            lo.collect::<Option<Vec<_>>>()?.into_iter().max()?,
            hi.collect::<Option<Vec<_>>>()?.into_iter().min()?,
        ))
    }
}

/// A statement (see the module documentation for the semantics).
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(Reg, Expr),
    If {
        cond: Cond,
        then: Vec<Stmt>,
        then_value: Reg,
        otherwise: Vec<Stmt>,
        otherwise_value: Reg,
        result: Reg,
    },
    Reduce {
        op: ReduceOp,
        /// Defined in `body.body`: the value folded at each iteration.
        value: Reg,
        result: Reg,
        body: Loop,
        /// A sum accumulated in f64 whatever the kernel's element type
        /// (each value widened, the result rounded once). Lowering leaves
        /// it `false`; the planner sets it on the outer sum of a long sum
        /// split into blocks (`crate::planner::blocked_sums`). Never set
        /// inside a vector loop.
        wide: bool,
    },
    For(Loop),
    Store {
        offset: Lin,
        value: Reg,
    },
}

impl Stmt {
    /// The same statement with each branch of an `If` rewritten by `f`;
    /// any other statement unchanged (the passes that rewrite loops and
    /// walk into both branches alike).
    pub fn map_branches(self, mut f: impl FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Stmt {
        match self {
            Stmt::If {
                cond,
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } => Stmt::If {
                cond,
                then: f(then),
                then_value,
                otherwise: f(otherwise),
                otherwise_value,
                result,
            },
            other => other,
        }
    }
}

/// A lowered index function: the loop nest that computes its output.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The function's name.
    pub name: String,
    /// The arguments, in the order the kernel receives their buffers.
    pub args: Vec<ArgDecl>,
    pub out_shape: Vec<usize>,
    /// Trip count of the parallel (outermost) output loop: the first output
    /// dimension, or 1 for a scalar output.
    pub extent: usize,
    /// Number of integer values (`IVar(0..num_ivars)`).
    pub num_ivars: u32,
    /// Number of scalar registers (`Reg(0..num_regs)`).
    pub num_regs: u32,
    /// Runs once per call with `start < end`; contains the parallel loop.
    pub body: Vec<Stmt>,
    /// Threads that compute one output element together. 1 (lowering's
    /// choice): one thread runs the body for an element. More (a power of
    /// two, set by the planner for the GPU, `crate::planner::spread`):
    /// a block of that many threads runs it, each thread folding a strided
    /// share of every *top-level* reduction (one not inside another loop)
    /// and the shares combined in a fixed tree order, so the result
    /// depends only on the sizes; one thread stores. A backend without
    /// blocks runs the body as if it were 1 (reductions in order).
    pub threads_per_output: u32,
    /// Innermost output loops a team walks together (with
    /// `threads_per_output` above 1). 0: a team per output element, as
    /// above. 1: a team per *row* (a point of the other output loops): the
    /// statements above the innermost output loop run once per row, their
    /// top-level reductions (the row's statistics) shared out as above,
    /// and the innermost loop's iterations are dealt among the threads
    /// (thread `t` takes `t`, `t + T`, …), each storing its own elements.
    /// A backend without blocks runs the body as it is.
    pub shared_loops: usize,
    /// The half-precision buffers among its arguments and output (see
    /// [`BufferTypes`]); none from lowering.
    pub buffers: BufferTypes,
    /// Integer parameters the code reads when it is called rather than
    /// having them compiled in: each variable with the value it takes in
    /// this kernel (for an [`Expr::ConstParam`], a float's bits). None from
    /// lowering; a backend sharing one code between kernels that differ
    /// only in sizes lifts the constants of bounds, guards and float
    /// values into them ([`Kernel::with_run_time_constants`]).
    pub params: Vec<(IVar, i64)>,
    /// Integer variables that are a loop variable times a run-time
    /// constant: the strides of loads and stores read when the code is
    /// called (a row of length `T` in a `[B, T, D]` tensor). None from
    /// lowering; [`Kernel::with_run_time_constants`] makes them, and only
    /// offsets' terms use them, with coefficient 1.
    pub strides: Vec<RunTimeStride>,
}

/// `var = index · stride`, where `index` is a loop variable and `stride` a
/// run-time constant ([`Kernel::params`]): a term of an offset whose
/// coefficient is read when the code is called ([`Kernel::strides`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunTimeStride {
    pub var: IVar,
    pub index: IVar,
    pub stride: IVar,
}

/// Which of a kernel's buffers hold a half type (`BF16`, `F16`) while it
/// computes in f32: each load from such an argument reads the 16-bit
/// value and widens it exactly, the store rounds to nearest even (ties to
/// even, NaN kept a NaN), so the kernel computes exactly what the f32
/// kernel computes on the widened values, rounded once. The default,
/// every buffer in the type the kernel computes in, is every kernel but a
/// GPU's conversions and what fusion builds on them (`crate::ops::fuse`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct BufferTypes {
    /// Per argument, its half type, if it holds one (empty: none does).
    pub args: Vec<Option<DType>>,
    /// The output's half type, if it holds one.
    pub out: Option<DType>,
}

impl BufferTypes {
    /// Whether every buffer holds the type the kernel computes in.
    pub fn is_uniform(&self) -> bool {
        self.out.is_none() && self.args.iter().all(Option::is_none)
    }

    /// Argument `arg`'s half type, if it holds one.
    pub fn arg(&self, arg: usize) -> Option<DType> {
        self.args.get(arg).copied().flatten()
    }

    /// The element type of argument `arg`'s buffer, for a kernel
    /// computing in `compute`.
    pub fn arg_dtype(&self, arg: usize, compute: DType) -> DType {
        self.arg(arg).unwrap_or(compute)
    }

    /// The element type of the output's buffer, for a kernel computing in
    /// `compute`.
    pub fn out_dtype(&self, compute: DType) -> DType {
        self.out.unwrap_or(compute)
    }

    /// The types of buffers holding `args` and `out` for a kernel
    /// computing in `compute`: the half ones marked.
    pub fn of(args: &[DType], out: DType, compute: DType) -> BufferTypes {
        let half = |d: DType| (d != compute && d.is_half()).then_some(d);
        BufferTypes {
            args: args.iter().map(|&d| half(d)).collect(),
            out: half(out),
        }
    }
}

/// Calls `f` on every statement of `stmts` in order, the statements nested
/// in branches and loop bodies included (each right after the statement
/// holding it): the one walk of a kernel's statements that only reads.
pub fn visit_stmts(stmts: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in stmts {
        f(s);
        match s {
            Stmt::If {
                then, otherwise, ..
            } => {
                visit_stmts(then, f);
                visit_stmts(otherwise, f);
            }
            Stmt::Reduce { body, .. } | Stmt::For(body) => visit_stmts(&body.body, f),
            Stmt::Let(..) | Stmt::Store { .. } => {}
        }
    }
}

impl Kernel {
    /// Number of output elements.
    pub fn out_len(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// Number of teams (or threads, with one thread per output): the
    /// points of the output loops no team shares.
    pub fn teams(&self) -> usize {
        self.teams_of(self.shared_loops)
    }

    /// The points of the output loops but the innermost `shared` ones.
    pub fn teams_of(&self, shared: usize) -> usize {
        let own = self.out_shape.len().saturating_sub(shared);
        self.out_shape[..own].iter().product()
    }

    /// An estimate of the work (in simple arithmetic operations) of one
    /// iteration of the parallel loop, for choosing how finely to split it.
    pub fn cost_per_iteration(&self) -> u64 {
        // Per row of the parallel loop: a loop over blocks of `den` rows
        // (`crate::planner::tile`, bounds `start / den`) costs its body
        // over `den` rows.
        let parallel = self.body.iter().find_map(|s| match s {
            Stmt::For(l) => {
                let rows = l
                    .lower
                    .iter()
                    .find(|b| b.num.coeff(START) != 0)
                    .map_or(1, |b| b.den.max(1) as u64);
                Some(stmts_cost(&l.body) / rows)
            }
            _ => None,
        });
        parallel.unwrap_or(1).max(1)
    }

    /// An estimate of the work of one whole run: every statement, loops
    /// counted with their largest trip count.
    pub fn total_cost(&self) -> u64 {
        stmts_cost(&self.body)
    }
}

fn stmts_cost(stmts: &[Stmt]) -> u64 {
    stmts
        .iter()
        .fold(0u64, |acc, s| acc.saturating_add(stmt_cost(s)))
}

fn stmt_cost(s: &Stmt) -> u64 {
    match s {
        Stmt::Let(_, e) => match e {
            Expr::Const(_) | Expr::ConstParam(_) => 0,
            Expr::Unary(op, _) => match op {
                UnaryOp::Detach => 0,
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sgn => 1,
                UnaryOp::Sqrt => 4,
                _ => 20,
            },
            Expr::Binary(BinaryOp::Pow, _, _) => 40,
            Expr::Binary(BinaryOp::Div, _, _) => 4,
            Expr::Random { .. } => 12,
            _ => 1,
        },
        // A guard on constants (a sum's length) runs one known branch.
        Stmt::If {
            cond: Cond::Index(form, op),
            then,
            otherwise,
            ..
        } if form.terms.is_empty() => {
            1 + stmts_cost(if op.holds(form.constant, 0) {
                then
            } else {
                otherwise
            })
        }
        Stmt::If {
            then, otherwise, ..
        } => 1 + stmts_cost(then).max(stmts_cost(otherwise)),
        Stmt::Reduce { body, .. } | Stmt::For(body) => {
            2 + body
                .max_trips
                .saturating_mul(stmts_cost(&body.body).saturating_add(2))
        }
        Stmt::Store { .. } => 1,
    }
}
