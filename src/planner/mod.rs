//! The planner: what runs, in which stages, by which route.
//!
//! Owns the decisions between an index function (a forward op, a
//! derivative, a second derivative) and the code a backend emits:
//! contraction detection (`contraction`), splitting element-wise work off a
//! contraction (`epilogue`), ordering nested sums for locality (`reorder`)
//! and the route of each function (`route`). It is backend-neutral: the
//! Cranelift JIT (`crate::jit`) and a GPU backend consume the same plans.
//! It may use the symbolic core and the kernel IR; it must not emit or run
//! code, allocate buffers or know about tensors.

pub mod contraction;
pub(crate) mod epilogue;
pub(crate) mod reorder;
pub mod route;

pub use route::{route, Route};
