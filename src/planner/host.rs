//! Host stages: data-dependent operations (gathering rows by integer ids,
//! their deterministic segmented-sum gradients) that affine index
//! functions cannot express, run by Rust code on the CPU.
//!
//! Owns the [`HostOp`] trait (an operation's forward program and its
//! hand-written node plan: the one place in the crate where a backward is
//! written by hand, because the derivative of a data-dependent access is
//! not an index function), and [`host_stage`], which wraps a kernel as a
//! [`Stage`] with [`Route::Host`]. A host stage's `f` only *describes* the
//! stage (its name, argument shapes and output shape; its body is `0`):
//! nothing may evaluate, derive or lower it, and the runtime refuses to
//! (create-graph derivatives, forward-mode tangents). The kernels
//! themselves implement the kernel IR's [`HostKernel`] interface.
//!
//! It must not know about storages, tensors or the tape: the operations
//! themselves live in `crate::ops`.

use super::{NodePlan, Program, Route, Source, Stage};
pub use crate::kernel::host::{HostIn, HostKernel, HostOut, Workers};
use crate::symbolic::IndexFn;
use crate::Error;
use std::sync::Arc;

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
