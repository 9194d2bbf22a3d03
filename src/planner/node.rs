//! The plan of one recorded operation: its forward program and the
//! backward program of the arguments that need a gradient, planned
//! together.
//!
//! Owns [`plan_node`] and [`NodePlan`]. The derivatives of all requested
//! arguments are planned into one program, so they share their common
//! stages (the masked incoming gradient of a fused layer feeds `dx`, `dw`
//! and `dc`). A stage of the backward program that is a function of the
//! forward arguments alone and equal to a subexpression of the forward
//! function (a pre-activation, a row maximum, attention scores) is made a
//! stage of the forward program too, and the backward stage is tagged with
//! it ([`Stage::forward`](super::Stage::forward)): the tape saves that
//! forward value in runtime-efficient mode, and recomputes it with the very
//! same forward stage (the same bits) in memory-efficient mode, once per
//! stage, never per gradient element. Must not run or compile anything.

use super::extract::{canonical, forward_cuts, Builder, CutKey};
use super::normalize::normalize;
use super::program::{Program, Source};
use super::route::Target;
use crate::symbolic::{ArgDecl, IndexFn};
use crate::{DType, Error};

/// The forward and backward programs of one operation for one set of
/// arguments needing a gradient (see the module documentation).
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Inputs: the operation's arguments. Output 0: its value.
    pub forward: Program,
    /// Inputs: the operation's arguments, then the gradient flowing into
    /// its output (`d<name>`), then its output. One output per entry of
    /// `wrt`: the gradient of that argument.
    pub backward: Program,
    /// The arguments differentiated, in output order.
    pub wrt: Vec<usize>,
    /// The derivative of each, as derived (before planning).
    pub derivatives: Vec<IndexFn>,
    /// Whether `forward` is the function's plain program
    /// ([`plan_function_for`](super::plan_function_for)'s), the backward
    /// wanting none of its values: then an op recorded first need not
    /// plan it again.
    pub forward_is_plain: bool,
}

/// Plans `f` and its derivatives with respect to the arguments `wrt` (see
/// the module documentation).
///
/// ```
/// use tenjin::planner::plan_node;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("h[b; o] = max(sum{k}_0^63 (x[b; k] * w[o; k]) + c[o], 0)",
///                        &[("x", &[32, 64][..]), ("w", &[48, 64][..]), ("c", &[48][..])])?;
/// let p = plan_node(&f, &[0, 1, 2], tenjin::DType::F32)?;
/// // The pre-activation is a forward stage the backward reads.
/// assert!(p.backward.stages.iter().any(|s| s.forward.is_some()), "{}", p.backward);
/// assert_eq!(p.backward.outputs.len(), 3);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn plan_node(f: &IndexFn, wrt: &[usize], dtype: DType) -> Result<NodePlan, Error> {
    plan_node_for(f, wrt, dtype, Target::Cpu)
}

/// As [`plan_node`], with the loop nests planned for `target`.
pub fn plan_node_for(
    f: &IndexFn,
    wrt: &[usize],
    dtype: DType,
    target: Target,
) -> Result<NodePlan, Error> {
    let fnorm = normalize(f);
    let n = f.args().len();
    let forward_inputs: Vec<Source> = (0..n).map(Source::Input).collect();
    let candidates = forward_cuts(&fnorm, &forward_inputs);

    // Backward: every requested derivative into one program.
    let mut back = Builder::new(dtype, target);
    back.wanted = candidates.clone();
    let sources: Vec<Source> = (0..n + 2).map(Source::Input).collect();
    let mut derivatives = Vec::with_capacity(wrt.len());
    for &a in wrt {
        let name = &f.args().get(a).ok_or_else(|| f_invalid(f, a))?.name;
        derivatives.push(fnorm.derive_reusing_output(name)?);
    }
    let mut outputs = vec![0; wrt.len()];
    for k in planning_order(&derivatives, target) {
        outputs[k] = back.add(&derivatives[k], &sources)?;
    }

    // Forward: materialise what the backward wants and the forward has.
    let mut fwd = Builder::new(dtype, target);
    fwd.wanted = back
        .cut_as
        .iter()
        .flatten()
        .filter(|k| {
            k.sources
                .iter()
                .all(|s| matches!(s, Source::Input(i) if *i < n))
        })
        .filter(|k| candidates.iter().any(|c| c.same(k)))
        .cloned()
        .collect();
    // (`add` normalises `f` into `fnorm` itself.)
    let forward_is_plain = fwd.wanted.is_empty();
    let value = fwd.add(f, &forward_inputs)?;

    // Tag backward stages with the forward stages computing the same.
    let mut tag: Vec<Option<usize>> = vec![None; back.stages.len()];
    for j in 0..back.stages.len() {
        let Some(key) = &back.cut_as[j] else { continue };
        if let Some(k) = translate(key, &tag, n) {
            tag[j] = fwd.find(&k);
        }
    }
    for (stage, t) in back.stages.iter_mut().zip(&tag) {
        stage.forward = *t;
    }

    let mut back_inputs = f.args().to_vec();
    back_inputs.push(ArgDecl {
        name: format!("d{}", f.name()),
        shape: f.output_shape().to_vec(),
    });
    back_inputs.push(ArgDecl {
        name: f.name().to_string(),
        shape: f.output_shape().to_vec(),
    });
    Ok(NodePlan {
        forward: Program {
            inputs: f.args().to_vec(),
            stages: fwd.stages,
            outputs: vec![value],
        },
        backward: Program {
            inputs: back_inputs,
            stages: back.stages,
            outputs,
        },
        wrt: wrt.to_vec(),
        derivatives,
        forward_is_plain,
    })
}

/// The order in which the derivatives are planned into one program. On
/// a GPU, the smallest first: a parameter's gradient (a layer norm's
/// weight, summed over every row) cuts the row statistics it reads as
/// stages of their own, and the input's gradient, whose team per row
/// would otherwise compute them again, then reads those stages
/// (`extract`'s row-fused rule). On the CPU, in `wrt` order.
fn planning_order(derivatives: &[IndexFn], target: Target) -> Vec<usize> {
    let mut order: Vec<usize> = (0..derivatives.len()).collect();
    if target == Target::Gpu {
        order.sort_by_key(|&k| derivatives[k].output_shape().iter().product::<usize>());
    }
    order
}

/// A backward cut as the forward builder would key it: stage sources
/// renamed through `tag`; `None` when it reads something the forward does
/// not have (the incoming gradient, the output, an untagged stage).
fn translate(key: &CutKey, tag: &[Option<usize>], n: usize) -> Option<CutKey> {
    let sources: Vec<Source> = key
        .sources
        .iter()
        .map(|s| match *s {
            Source::Input(i) if i < n => Some(Source::Input(i)),
            Source::Stage(j) => tag.get(j).copied().flatten().map(Source::Stage),
            Source::Input(_) => None,
        })
        .collect::<Option<_>>()?;
    let (f, sources) = canonical(&key.f, &sources);
    Some(CutKey::new(f, sources))
}

fn f_invalid(f: &IndexFn, a: usize) -> Error {
    Error::Invalid {
        function: f.name().to_string(),
        message: format!("argument {a} does not exist ({} arguments)", f.args().len()),
    }
}
