//! tenjin: a JIT tensor runtime whose derivatives are symbolic index
//! expressions (Urban & van der Smagt 2017).
//!
//! The layers, each looking only down:
//!
//! - [`Tensor`] and its ops (every op one index function), the tape
//!   ([`trace`]: `backward`, [`explain`], memory plans), [`nn`], [`optim`];
//! - [`symbolic`]: element-wise defined index functions
//!   ([`symbolic::IndexFn`]), their parser and printer, a reference
//!   interpreter, exact integer linear algebra (Smith normal form,
//!   Fourier–Motzkin elimination) and symbolic derivation that is closed
//!   under itself (derivatives of derivatives);
//! - [`planner`]: a function and its derivatives as stages (what is
//!   computed once, what runs as a GEMM, what a derivative reads from the
//!   forward pass), backend-neutral;
//! - [`kernel`]: the loop-nest IR; [`jit`]: Cranelift code for it, cached;
//! - [`alloc`]: pooled memory in two modes.
//!
//! ```
//! use tenjin::symbolic::IndexFn;
//! let f = IndexFn::parse_with_sizes("f[i] = x[2*i] ** 2", &[("x", &[6][..])], &[("i", 3)])?;
//! let dx = f.derive("x")?;
//! let g = dx.eval_f64(&[("x", &[1., 2., 3., 4., 5., 6.][..]), ("df", &[1., 1., 1.][..])])?;
//! assert_eq!(g, vec![2., 0., 6., 0., 10., 0.]); // odd elements are never read: exact zeros
//! # Ok::<(), tenjin::Error>(())
//! ```

pub mod alloc;
pub mod autograd;
pub mod dtype;
pub mod error;
mod exec;
mod gradcheck;
pub mod jit;
pub mod kernel;
pub mod nn;
mod ops;
pub mod optim;
pub mod planner;
pub mod symbolic;
mod tensor;
pub mod trace;

pub use alloc::Device;
pub use dtype::DType;
pub use error::Error;
pub use gradcheck::{
    gradcheck, gradcheck_with, gradgradcheck, gradgradcheck_with, GradcheckOptions, GradcheckReport,
};
pub use ops::{index_fn, index_fn_with_sizes};
pub use tensor::Tensor;
pub use trace::{
    explain, no_grad, plan_cache_capacity, set_plan_cache_capacity, stats, Explanation,
    NoGradGuard, Stats, DEFAULT_PLAN_CAPACITY,
};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
