//! Why a recorded operation runs as it does: its stages, as a table.
//!
//! Owns [`explain`] and [`Explanation`]. It reads a node's programs (the
//! planner's decisions) and what the node saved (the tape's); it runs and
//! changes nothing.

use super::Node;
use crate::planner::algorithm::algorithm;
use crate::planner::{Program, Stage};
use crate::runtime::exec::Compiled;
use std::fmt;
use std::sync::Arc;

/// The plan of the operation that produced a tensor (see [`explain`](crate::explain)).
/// Printing it gives one line per stage of the forward and the backward
/// program: its domain, its route (`gemm`, `gemm+loop` or `loop`), the
/// bytes of its value, where that value goes, the algorithm the planner
/// chose for it (`implicit GEMM: 32 × (64×256×576)`, `padded copy`,
/// `strided sums (col2im), split by residue into phases`, ...) and its
/// function.
#[derive(Clone, Debug)]
pub struct Explanation {
    /// The op's name (`index_fn`, `linear`, ...).
    pub op: String,
    /// The function as written (views composed in).
    pub function: String,
    pub forward: Vec<StageLine>,
    pub backward: Vec<StageLine>,
    /// The arguments differentiated, by name.
    pub gradients: Vec<String>,
}

/// One stage of an [`Explanation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageLine {
    /// The stage's output shape (its domain).
    pub domain: Vec<usize>,
    /// `gemm`, `gemm+loop`, `loop`, `block loop` (a block of GPU threads
    /// per output element) or `host`.
    pub route: &'static str,
    /// Bytes of the stage's value.
    pub bytes: usize,
    /// What happens to the value: `output`, `saved for backward`,
    /// `gradient of w`, `forward stage 0 (from the tape)` ...
    pub role: String,
    /// The algorithm the planner chose, in words
    /// ([`crate::planner::algorithm::algorithm`]); for a reshape of dense
    /// data, that no kernel runs (`alias: …`).
    pub algorithm: String,
    /// The function the stage computes.
    pub function: String,
    /// The planner's estimate of the operations it executes.
    pub work: u64,
}

/// The plan of the recorded op that produced `node`'s output.
pub(crate) fn explain_node(node: &Arc<Node>) -> Explanation {
    let grad = &node.grad;
    let size = node.plan.dtype.size();
    let saved: Vec<bool> = {
        let s = node.saved.lock().unwrap_or_else(|e| e.into_inner());
        s.stages.iter().map(Option::is_some).collect()
    };
    let args = node.plan.f.args();
    let target = node.plan.backend.target();
    // A reshape of dense data runs no kernel either way: its output is its
    // input's storage, and its input's gradient the incoming buffer.
    let named = |s: &Stage, backward: bool| match (grad.alias, backward) {
        (false, _) => algorithm(s, target),
        (true, false) => "alias: the input's storage, reinterpreted (no kernel runs)".into(),
        (true, true) => "alias: the incoming gradient, reinterpreted (no kernel runs)".into(),
    };
    let forward = lines(
        &grad.forward,
        size,
        |s| named(s, false),
        |k| {
            let out = grad.forward.program.outputs.contains(&k);
            match (out, saved.get(k).copied().unwrap_or(false)) {
                (true, true) => "output, saved for backward".into(),
                (true, false) => "output".into(),
                (false, true) => "saved for backward".into(),
                (false, false) => {
                    let read = grad
                        .backward
                        .program
                        .stages
                        .iter()
                        .any(|s| s.forward == Some(k));
                    if read {
                        "recomputed by backward (save policy)".into()
                    } else {
                        "intermediate".into()
                    }
                }
            }
        },
    );
    let backward = lines(
        &grad.backward,
        size,
        |s| named(s, true),
        |k| {
            let stage = &grad.backward.program.stages[k];
            let outs: Vec<String> = grad
                .backward
                .program
                .outputs
                .iter()
                .enumerate()
                .filter(|(_, &o)| o == k)
                .map(|(p, _)| format!("gradient of {}", args[grad.plan.wrt[p]].name))
                .collect();
            match stage.forward {
                Some(t) if saved.get(t).copied().unwrap_or(false) => {
                    format!("forward stage {t} (from the tape)")
                }
                Some(t) => format!("forward stage {t} (recomputed)"),
                None if !outs.is_empty() => outs.join(", "),
                None => "intermediate".into(),
            }
        },
    );
    Explanation {
        op: node.plan.op.clone(),
        function: node.plan.f.to_string(),
        forward,
        backward,
        gradients: grad
            .plan
            .wrt
            .iter()
            .map(|&a| args[a].name.clone())
            .collect(),
    }
}

fn lines(
    c: &Compiled,
    size: usize,
    algorithm: impl Fn(&Stage) -> String,
    role: impl Fn(usize) -> String,
) -> Vec<StageLine> {
    c.program
        .stages
        .iter()
        .enumerate()
        .map(|(k, s)| StageLine {
            domain: s.f.output_shape().to_vec(),
            route: s.route.name(),
            bytes: s.len().saturating_mul(size),
            role: role(k),
            algorithm: algorithm(s),
            function: described(&c.program, k),
            work: s.work(),
        })
        .collect()
}

/// The stage's function with each argument named after its source.
fn described(p: &Program, k: usize) -> String {
    format!("{}   ({})", p.stages[k].f, p.sources_text(k, "").join(", "))
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.op, self.function)?;
        let table = |f: &mut fmt::Formatter<'_>, title: String, rows: &[StageLine]| {
            writeln!(f, "{title}")?;
            for (k, s) in rows.iter().enumerate() {
                writeln!(
                    f,
                    "  stage {k:<2} {:<16} {:<9} {:>10} B  {}: {}",
                    format!("{:?}", s.domain),
                    s.route,
                    s.bytes,
                    s.role,
                    s.algorithm
                )?;
                writeln!(f, "           {}", s.function)?;
            }
            Ok(())
        };
        table(
            f,
            format!("forward, {} stages:", self.forward.len()),
            &self.forward,
        )?;
        table(
            f,
            format!(
                "backward for {}, {} stages:",
                self.gradients.join(", "),
                self.backward.len()
            ),
            &self.backward,
        )
    }
}
