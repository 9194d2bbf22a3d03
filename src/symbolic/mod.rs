//! The symbolic core: element-wise defined index functions and their exact
//! derivatives.
//!
//! Owns the IR ([`IndexFn`]: affine index maps, a hash-consed scalar DAG,
//! sums and reductions with exactly solved ranges, guards), its parser and
//! printer (the notation of Urban & van der Smagt §6), the reference
//! interpreter (the oracle for every backend), integer linear algebra (Smith
//! normal form, pseudo-inverse, kernel, cokernel), Fourier–Motzkin
//! elimination and derivation (Alg. 4 with sum liberation, §5.2).
//!
//! It must not know about tensors, buffers, devices or threads.

pub mod affine;
pub mod compose;
#[doc(hidden)]
pub mod fourier_motzkin;
#[doc(hidden)]
pub mod intlinalg;
#[doc(hidden)]
pub mod lattice;

pub use affine::{Affine, Overflow, RatAffine, VarId};
#[doc(hidden)]
pub mod expr;
pub mod index_fn;

mod batch;
mod check;
mod context;
mod derive;
mod equality;
mod eval;
mod inline;
pub(crate) mod intervals;
mod lexer;
mod output_reuse;
mod parse;
pub(crate) mod print;
pub mod random;
mod rules;
pub(crate) mod shape_hash;
pub mod sizes;
pub(crate) mod subst;
mod tangent;

pub use expr::{BinaryOp, CmpOp, Cond, Graph, Node, NodeId, Range, ReduceOp, UnaryOp};
pub use index_fn::{ArgDecl, IndexFn};
