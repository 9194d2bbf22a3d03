//! What a planned stage runs, in words: the algorithm `explain` shows.
//!
//! Owns [`algorithm`]. The planner chooses a convolution's algorithm on its
//! index functions, never on the op's name (a hand-written line gets the
//! same stages as `conv2d`); this module names the result of those choices,
//! read off the stage's route and function:
//!
//! | stage | named |
//! | --- | --- |
//! | a contraction whose rows (CPU) fold the batch through a table of offsets | `implicit GEMM: B × (M×N×K), rows read through a table` |
//! | a contraction summing several dimensions as one K (CPU) | `implicit GEMM: …, K over S summed dimensions through a table` (taps read in place) |
//! | any other contraction | `GEMM: B × (M×N×K)` (the CPU's products, or a GPU's cuBLAS calls) |
//! | a symmetric contraction | `…, one triangle mirrored` |
//! | a loop that copies one argument, unguarded, to more elements than it has | `im2col: windows unrolled` |
//! | a loop that reads one argument once, guarded | `padded copy` |
//! | a loop that reads one argument once | `copy` |
//! | a loop of one-term sums of bare reads of several arguments, whose bounds divide by a stride | `phases interleaved: strided copies` (`super::phases`' reader) |
//! | a loop with a sum whose bounds divide by a stride of at most `MAX_PHASES` | `strided sums (col2im), split by residue into phases` on the CPU (`super::residues`), `strided sums (col2im)` on a GPU |
//! | a loop with a sum whose bounds divide by more | `sums over ranges that divide` |
//! | any other loop with a sum | `direct loop` |
//! | any other loop | `element-wise loop` |
//!
//! Must not decide anything: it reads a plan and changes nothing.

use super::program::Stage;
use super::residues::MAX_PHASES;
use super::route::Target;
use crate::kernel::contraction::Contraction;
use crate::kernel::winograd::Form;
use crate::kernel::Route;
use crate::symbolic::expr::{Node, NodeId, Range};
use crate::symbolic::IndexFn;

/// The algorithm of `stage` on `target`, in words (see the module
/// documentation).
///
/// ```
/// use tenjin::planner::{algorithm::algorithm, plan_function, route::Target};
/// use tenjin::symbolic::IndexFn;
/// let conv = IndexFn::parse_with_sizes(
///     "y[n; o; t] = sum{c}_0^15 (sum{k}_0^2 (x[n; c; t + k] * w[o; c; k]))",
///     &[("x", &[4, 16, 66][..]), ("w", &[32, 16, 3][..])],
///     &[("t", 64)],
/// )?;
/// let p = plan_function(&conv, tenjin::DType::F32)?;
/// let last = p.stages.last().unwrap();
/// let named = algorithm(last, Target::Cpu);
/// assert!(named.starts_with("implicit GEMM: 4 × ("), "{named}"); // taps read in place
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn algorithm(stage: &Stage, target: Target) -> String {
    match &stage.route {
        Route::Gemm(c) | Route::GemmThenLoop { contraction: c, .. } => gemm(c, target),
        Route::Host(_) => "host code".into(),
        Route::Loop(_) => looped(&stage.f, target).into(),
        Route::Winograd(w) | Route::WinogradThenLoop { conv: w, .. } => {
            let [_, o, c, ..] = w.sizes();
            let tiles = w.tile_count();
            match w.form {
                Form::Convolution => format!(
                    "Winograd F(2×2, 3×3): 16 × ({o}×{tiles}×{c}) over 2×2 tiles, transforms around the products"
                ),
                Form::FilterGradient => format!(
                    "Winograd F(3×3, 2×2): 16 × ({o}×{c}×{tiles}) summed over 2×2 tiles, transforms around the products"
                ),
            }
        }
    }
}

/// A contraction's products on `target`.
fn gemm(c: &Contraction, target: Target) -> String {
    let [calls, m, n, k] = c.gemm_shape_on(target);
    let mut tables = Vec::new();
    if target == Target::Cpu {
        let folded = c.folded();
        if folded.m.len() > 1 || folded.n.len() > 1 {
            tables.push("rows read through a table".to_string());
        }
        if !c.k_outer.is_empty() {
            tables.push(format!(
                "K over {} summed dimensions through a table",
                c.k_outer.len() + 1
            ));
        }
    }
    let name = if tables.is_empty() {
        "GEMM"
    } else {
        "implicit GEMM"
    };
    let mut words = format!("{name}: {calls} × ({m}×{n}×{k})");
    if c.symmetric {
        tables.push("one triangle mirrored".into());
    }
    for t in tables {
        words.push_str(", ");
        words.push_str(&t);
    }
    words
}

/// A loop nest's algorithm, from its function.
fn looped(f: &IndexFn, target: Target) -> &'static str {
    let nodes = f.graph.reachable(f.root);
    let node = |id: NodeId| f.graph.node(id);
    let ranges: Vec<&Range> = nodes
        .iter()
        .filter_map(|&id| match node(id) {
            Node::Reduce { range, .. } => Some(range),
            _ => None,
        })
        .collect();
    if ranges.is_empty() {
        let reads: Vec<usize> = nodes
            .iter()
            .filter_map(|&id| match node(id) {
                Node::Access { arg, .. } => Some(*arg),
                _ => None,
            })
            .collect();
        let guarded = nodes
            .iter()
            .any(|&id| matches!(node(id), Node::Select { .. }));
        let computes = nodes
            .iter()
            .any(|&id| matches!(node(id), Node::Unary(..) | Node::Binary(..)));
        let len = |shape: &[usize]| shape.iter().product::<usize>();
        let out = len(f.output_shape());
        return match reads.as_slice() {
            [a] if !computes && out > len(&f.args()[*a].shape) && !guarded => {
                "im2col: windows unrolled"
            }
            [_] if !computes && guarded => "padded copy",
            [_] if !computes => "copy",
            _ => "element-wise loop",
        };
    }
    // Bounds dividing by a stride the CPU splits into phases, or by more
    // (a reshape's derivative, whose sums pick one term by division).
    let divisor = ranges
        .iter()
        .flat_map(|r| r.lower.iter().chain(&r.upper))
        .map(|bound| bound.den)
        .max()
        .unwrap_or(1);
    // `super::phases`' reader: sums of bare reads (no arithmetic inside a
    // sum) of several arguments, the stride-1 phases of a strided sum.
    let bare_sums = nodes.iter().all(|&id| match node(id) {
        Node::Reduce { body, .. } => {
            matches!(node(*body), Node::Access { .. } | Node::Reduce { .. })
        }
        _ => true,
    });
    let mut read: Vec<usize> = nodes
        .iter()
        .filter_map(|&id| match node(id) {
            Node::Access { arg, .. } => Some(*arg),
            _ => None,
        })
        .collect();
    read.sort_unstable();
    read.dedup();
    match (divisor, target) {
        (1, _) => "direct loop",
        (2..=MAX_PHASES, _) if bare_sums && read.len() > 1 => "phases interleaved: strided copies",
        (2..=MAX_PHASES, Target::Cpu) => "strided sums (col2im), split by residue into phases",
        (2..=MAX_PHASES, Target::Gpu) => "strided sums (col2im)",
        _ => "sums over ranges that divide (index arithmetic per element)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::plan_function_for;
    use crate::DType;

    /// The algorithm of the last stage of `src`'s plan on `target`.
    fn last(src: &str, args: &[(&str, &[usize])], target: Target) -> String {
        let f = IndexFn::parse_with_sizes(src, args, &[("i", 4)]).unwrap();
        let p = plan_function_for(&f, DType::F32, target).unwrap();
        algorithm(p.stages.last().unwrap(), target)
    }

    #[test]
    fn loops_are_named_by_what_their_function_does() {
        let x: &[(&str, &[usize])] = &[("x", &[4, 8])];
        let cpu = Target::Cpu;
        assert_eq!(last("y[i; j] = x[j; i]", &[("x", &[8, 4])], cpu), "copy");
        assert_eq!(
            last("y[i; j] = exp x[i; j] * 2", x, cpu),
            "element-wise loop"
        );
        assert_eq!(
            last(
                "y[i; j] = if {i >= 1} then (x[i - 1; j]) else (0)",
                &[("x", &[3, 8])],
                cpu
            ),
            "padded copy"
        );
        assert_eq!(
            last("y[i] = sum{j}_0^7 (x[i; j] * x[i; j])", x, cpu),
            "direct loop"
        );
    }

    #[test]
    fn strided_sums_are_split_into_phases_on_the_cpu_only() {
        let src = "dx[u] = sum{z}_(max [-7; (-1 + -u)/2])^(min [0; (1 + -u)/2]) (dy[-z])";
        let f = IndexFn::parse_with_sizes(src, &[("dy", &[8][..])], &[("u", 16)]).unwrap();
        let named = |target| {
            let p = plan_function_for(&f, DType::F32, target).unwrap();
            algorithm(p.stages.last().unwrap(), target)
        };
        assert_eq!(
            named(Target::Cpu),
            "strided sums (col2im), split by residue into phases"
        );
        assert_eq!(named(Target::Gpu), "strided sums (col2im)");
    }

    #[test]
    fn products_name_their_calls_and_shapes() {
        let mm: &[(&str, &[usize])] = &[("a", &[4, 32]), ("b", &[32, 48])];
        let src = "c[i; j] = sum{k}_0^31 (a[i; k] * b[k; j])";
        assert_eq!(last(src, mm, Target::Cpu), "GEMM: 1 × (4×48×32)");
        assert_eq!(last(src, mm, Target::Gpu), "GEMM: 1 × (4×48×32)");
    }
}
