//! Host stages: data-dependent operations (gathering rows by integer ids,
//! their deterministic segmented-sum gradients) that affine index
//! functions cannot express, run by Rust code on the CPU.
//!
//! Owns the [`HostKernel`] trait (one host stage's computation over typed
//! slices), the [`HostOp`] trait (an operation's forward program and its
//! hand-written node plan: the one place in the crate where a backward is
//! written by hand, because the derivative of a data-dependent access is
//! not an index function), and [`host_stage`], which wraps a kernel as a
//! [`Stage`] with [`Route::Host`]. A host stage's `f` only *describes* the
//! stage (its name, argument shapes and output shape; its body is `0`):
//! nothing may evaluate, derive or lower it, and the runtime refuses to
//! (create-graph derivatives, forward-mode tangents).
//!
//! It must not know about storages, tensors or the tape: the operations
//! themselves live in `crate::ops`.

use super::{NodePlan, Program, Route, Source, Stage};
use crate::symbolic::IndexFn;
use crate::Error;
use std::fmt::Debug;
use std::sync::Arc;

/// A host kernel's input: a slice of one of the tensor element types.
#[derive(Clone, Copy, Debug)]
pub enum HostIn<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl HostIn<'_> {
    /// Element `k` of an integer input as `i64` (`None` for floats or out
    /// of range).
    pub fn index(&self, k: usize) -> Option<i64> {
        match self {
            HostIn::I32(v) => v.get(k).map(|&x| i64::from(x)),
            HostIn::I64(v) => v.get(k).copied(),
            HostIn::F32(_) | HostIn::F64(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostIn::F32(v) => v.len(),
            HostIn::F64(v) => v.len(),
            HostIn::I32(v) => v.len(),
            HostIn::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A host kernel's output: the stage's float buffer.
#[derive(Debug)]
pub enum HostOut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

/// One host stage's computation: `out` from `inputs` (in the order of the
/// stage's sources), every element of `out` written.
pub trait HostKernel: Send + Sync + Debug {
    /// The kernel's name (errors, `explain`).
    fn name(&self) -> &str;
    fn run(&self, inputs: &[HostIn], out: HostOut) -> Result<(), Error>;
    /// The output's element type when it is not the op's (a conversion's
    /// forward or backward); `None`: the op's.
    fn out_dtype(&self) -> Option<crate::DType> {
        None
    }
}

/// An operation run by host stages: its forward program and, per set of
/// arguments needing a gradient, its node plan.
pub trait HostOp: Send + Sync {
    /// The forward program (inputs: the operation's arguments).
    fn forward(&self) -> Result<Program, Error>;
    /// The forward and backward programs when the arguments `wrt` need a
    /// gradient (see [`NodePlan`]).
    fn node_plan(&self, wrt: &[usize]) -> Result<NodePlan, Error>;
}

/// A stage run by `kernel` over `sources`, described by a function named
/// `name` with arguments `args` and output shape `out`.
pub fn host_stage(
    name: &str,
    args: &[(&str, &[usize])],
    sources: Vec<Source>,
    out: &[usize],
    kernel: Arc<dyn HostKernel>,
) -> Result<Stage, Error> {
    let ix: Vec<String> = (0..out.len()).map(|d| format!("i{d}")).collect();
    let sizes: Vec<(&str, usize)> = ix
        .iter()
        .map(String::as_str)
        .zip(out.iter().copied())
        .collect();
    let text = format!("{name}[{}] = 0", ix.join("; "));
    Ok(Stage {
        f: IndexFn::parse_with_sizes(&text, args, &sizes)?,
        sources,
        route: Route::Host(kernel),
        forward: None,
    })
}

/// A one-stage program over `inputs`.
pub fn single_stage_program(inputs: &[(&str, &[usize])], stage: Stage) -> Program {
    Program {
        inputs: inputs
            .iter()
            .map(|(n, s)| crate::symbolic::ArgDecl {
                name: n.to_string(),
                shape: s.to_vec(),
            })
            .collect(),
        stages: vec![stage],
        outputs: vec![0],
    }
}
