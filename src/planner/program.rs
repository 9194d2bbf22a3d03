//! A plan: a small DAG of stages, each one index function with its route.
//!
//! Owns [`Program`], [`Stage`], [`Source`] and the reference evaluation of
//! a program ([`Program::eval_f64`], each stage through the symbolic
//! interpreter), against which the backends and the planner's rewrites are
//! tested. Must not decide what a stage is (that is `extract`).

use super::route::Route;
use crate::symbolic::{ArgDecl, IndexFn};
use crate::{DType, Error};

/// Where a stage's argument is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The program's input number `k`.
    Input(usize),
    /// The value of stage number `k` of the same program.
    Stage(usize),
}

/// One stage: a function computed over its whole domain into a buffer of
/// its own.
#[derive(Clone, Debug)]
pub struct Stage {
    /// What the stage computes. Its arguments are read from `sources`.
    pub f: IndexFn,
    /// Per argument of `f`: where its buffer comes from.
    pub sources: Vec<Source>,
    /// How a backend runs it.
    pub route: Route,
    /// In a backward program: the stage of the node's forward program that
    /// computes the same value (read from the tape when the forward pass
    /// saved it, recomputed by that forward stage otherwise).
    pub forward: Option<usize>,
}

impl Stage {
    /// Elements of the stage's value.
    pub fn len(&self) -> usize {
        self.f.output_shape().iter().product()
    }

    /// Whether the stage sums (or takes a maximum) over an index: a GEMM,
    /// a convolution, a row statistic. Recomputing such a value costs a
    /// reduction per element; recomputing any other costs one pass.
    pub fn reduces(&self) -> bool {
        !matches!(self.route, Route::Loop(_) | Route::Host(_))
            || self
                .f
                .graph
                .reachable(self.f.root)
                .into_iter()
                .any(|n| matches!(self.f.graph.node(n), crate::symbolic::Node::Reduce { .. }))
    }

    /// Whether the stage's value has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An estimate of the operations the stage executes (loop iterations
    /// times the simple operations of their bodies, multiply-adds of a
    /// GEMM), for tests that check asymptotics and for `explain`.
    pub fn work(&self) -> u64 {
        match &self.route {
            Route::Gemm(c) => (c.flops() / 2) as u64,
            Route::GemmThenLoop {
                contraction,
                kernel,
                ..
            } => ((contraction.flops() / 2) as u64).saturating_add(kernel.total_cost()),
            Route::Loop(kernel) => kernel.total_cost(),
            // The products, and 16 values per tile and channel transformed.
            Route::Winograd(w) => w.work(),
            Route::WinogradThenLoop { conv, kernel, .. } => {
                conv.work().saturating_add(kernel.total_cost())
            }
            // One pass over the output (gathers, segmented sums).
            Route::Host(_) => self.len() as u64,
        }
    }
}

/// A DAG of stages computing some outputs from some inputs; stages come in
/// an order where every stage follows the stages it reads.
#[derive(Clone, Debug)]
pub struct Program {
    /// The inputs (names and shapes), by position.
    pub inputs: Vec<ArgDecl>,
    pub stages: Vec<Stage>,
    /// The stage giving each output.
    pub outputs: Vec<usize>,
}

impl Program {
    /// Marks every contraction as one of `half` values held in f32 (see
    /// `Contraction::set_half_operands`): the program of an op on tensors
    /// of that half type, computed in f32 (`crate::ops`).
    pub fn mark_half_products(&mut self, half: DType) {
        for stage in &mut self.stages {
            if let Route::Gemm(c) | Route::GemmThenLoop { contraction: c, .. } = &mut stage.route {
                c.set_half_operands(Some(half));
            }
        }
    }

    /// Marks the half buffers of the loop stages: those reading inputs of
    /// the types `args`, and those writing outputs, of type `out` (stages
    /// between them keep `compute`): see `Kernel::buffers`. A stage with
    /// a half buffer that is not a loop is an error.
    pub fn type_buffers(
        &mut self,
        args: &[DType],
        out: DType,
        compute: DType,
    ) -> Result<(), Error> {
        for (k, stage) in self.stages.iter_mut().enumerate() {
            let types: Vec<DType> = stage
                .sources
                .iter()
                .map(|s| match *s {
                    Source::Input(i) => args.get(i).copied().unwrap_or(compute),
                    Source::Stage(_) => compute,
                })
                .collect();
            let written = if self.outputs.contains(&k) {
                out
            } else {
                compute
            };
            let buffers = crate::kernel::BufferTypes::of(&types, written, compute);
            if buffers.is_uniform() {
                continue;
            }
            match &mut stage.route {
                Route::Loop(kernel) => kernel.buffers = buffers,
                _ => {
                    return Err(Error::Invalid {
                        function: stage.f.name().to_string(),
                        message: format!(
                            "internal: only loop kernels load and store half buffers ({buffers:?})"
                        ),
                    })
                }
            }
        }
        Ok(())
    }

    /// The summed [`Stage::work`] of the stages `run` selects.
    pub fn work_where(&self, run: impl Fn(usize, &Stage) -> bool) -> u64 {
        self.stages
            .iter()
            .enumerate()
            .filter(|(k, s)| run(*k, s))
            .fold(0u64, |acc, (_, s)| acc.saturating_add(s.work()))
    }

    /// The summed [`Stage::work`] of all stages.
    pub fn work(&self) -> u64 {
        self.work_where(|_, _| true)
    }

    /// Evaluates the program with the reference interpreter, each stage in
    /// turn (f64); returns the outputs. `inputs` are ordered like
    /// [`Program::inputs`].
    ///
    /// ```
    /// use tenjin::planner::plan_function;
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i; j] = x[i; j] / sum{k}_0^2 (x[i; k])", &[("x", &[2, 3][..])])?;
    /// let p = plan_function(&f, tenjin::DType::F64)?;
    /// let x = [1., 2., 3., 4., 5., 6.];
    /// assert_eq!(p.eval_f64(&[&x])?[0], f.eval_f64(&[("x", &x[..])])?);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn eval_f64(&self, inputs: &[&[f64]]) -> Result<Vec<Vec<f64>>, Error> {
        let mut values: Vec<Option<Vec<f64>>> = vec![None; self.stages.len()];
        for (s, stage) in self.stages.iter().enumerate() {
            let bufs: Vec<&[f64]> = stage
                .sources
                .iter()
                .map(|src| match *src {
                    Source::Input(k) => inputs.get(k).copied().ok_or_else(|| missing(k)),
                    Source::Stage(j) => values[j].as_deref().ok_or_else(|| missing(j)),
                })
                .collect::<Result<_, _>>()?;
            let named: Vec<(&str, &[f64])> = stage
                .f
                .args()
                .iter()
                .zip(bufs)
                .map(|(a, b)| (a.name.as_str(), b))
                .collect();
            values[s] = Some(stage.f.eval_f64(&named)?);
        }
        self.outputs
            .iter()
            .map(|&o| values[o].clone().ok_or_else(|| missing(o)))
            .collect()
    }
}

fn missing(k: usize) -> Error {
    Error::Invalid {
        function: "program".into(),
        message: format!("no value for source {k}"),
    }
}

impl Program {
    /// Where each argument of stage `k` comes from, as `name = <input
    /// prefix><input name>` or `name = stage j`.
    pub(crate) fn sources_text(&self, k: usize, input_prefix: &str) -> Vec<String> {
        let s = &self.stages[k];
        s.f.args()
            .iter()
            .zip(&s.sources)
            .map(|(a, src)| match *src {
                Source::Input(i) => format!(
                    "{} = {input_prefix}{}",
                    a.name,
                    self.inputs.get(i).map_or("?", |d| d.name.as_str())
                ),
                Source::Stage(j) => format!("{} = stage {j}", a.name),
            })
            .collect()
    }
}

impl std::fmt::Display for Program {
    /// One line per stage: its name, shape and route, where its arguments
    /// come from, and its function.
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, s) in self.stages.iter().enumerate() {
            let from = self.sources_text(k, "input ");
            let out_mark = if self.outputs.contains(&k) {
                " (output)"
            } else {
                ""
            };
            writeln!(
                out,
                "stage {k}{out_mark}: {:?} by {} [{}]",
                s.f.output_shape(),
                s.route.name(),
                from.join(", ")
            )?;
            writeln!(out, "    {}", s.f)?;
        }
        Ok(())
    }
}
