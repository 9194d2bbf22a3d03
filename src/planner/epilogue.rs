//! Contractions with element-wise work after them (`max(Σ_k a·b, 0)`,
//! `exp(Σ_k a·b) / 2 + c[i]`, ...): one GEMM, then one fused element-wise
//! kernel.
//!
//! Owns [`split`] and [`added_argument`]: finding the outermost sum that `contraction::detect` accepts
//! inside a function that is not itself a contraction, and rewriting the
//! function into the contraction (over the output's indices) and an
//! epilogue that reads it from a temporary. Must not generate code: the
//! caller compiles both halves.

use super::contraction::{self, Contraction};
use crate::symbolic::expr::{BinaryOp, Node, ReduceOp};
use crate::symbolic::subst::replace;
use crate::symbolic::{Affine, ArgDecl, IndexFn};

/// A function split into a GEMM stage and an element-wise stage.
pub(crate) struct Split {
    /// Computes the contraction for every output index (as a broadcast over
    /// the indices it does not use).
    pub contraction: Contraction,
    /// The original function with the sum replaced by a read of the
    /// contraction's result, passed as one more argument (the last).
    pub epilogue: IndexFn,
}

/// `Some` when a sum inside `f` (not `f` itself) is a contraction whose
/// result depends on exactly the output indices.
pub(crate) fn split(f: &IndexFn) -> Option<Split> {
    let g = &f.graph;
    let mut candidates: Vec<_> = g
        .reachable(f.root)
        .into_iter()
        .filter(|&n| n != f.root)
        .filter(|&n| {
            matches!(
                g.node(n),
                Node::Reduce {
                    op: ReduceOp::Sum,
                    ..
                }
            )
        })
        // Over exactly the output's indices: a sum over fewer would be
        // computed for every point of the output (a broadcast), where the
        // loop nest computes it once per point of its own indices.
        .filter(|&n| {
            let free = g.free_vars(n);
            free.len() == f.out_vars.len() && free.iter().all(|v| f.out_vars.contains(v))
        })
        .collect();
    // The outermost candidate first: it covers the most work.
    candidates.sort_by(|a, b| b.cmp(a));
    for n in candidates {
        let (graph, root) = g.extract(n);
        let inner = f.with_body(graph, root);
        let Some(contraction) = contraction::detect(&inner) else {
            continue;
        };
        let name = fresh_arg_name(f, &format!("{}_contraction", f.name));
        let mut graph = f.graph.clone();
        let index = f.out_vars.iter().map(|v| Affine::var(*v)).collect();
        let read = graph.access(f.args.len(), index);
        let body = replace(&mut graph, f.root, n, read);
        let (graph, root) = graph.extract(body);
        let mut args = f.args.clone();
        args.push(ArgDecl {
            name,
            shape: f.out_shape.clone(),
        });
        let epilogue = IndexFn {
            args,
            ..f.with_body(graph, root)
        };
        return Some(Split {
            contraction,
            epilogue,
        });
    }
    None
}

fn fresh_arg_name(f: &IndexFn, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while f.args().iter().any(|a| a.name == name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    name
}

/// The argument an epilogue only adds to the product, `tmp[i…] + c[i…]`
/// (the product its last argument, `c` of the output's shape read at the
/// output index): a GPU adds it with the GEMM's `beta = 1`
/// (`Contraction::accumulate`), where an epilogue kernel would read and
/// write the product again.
pub(crate) fn added_argument(epilogue: &IndexFn) -> Option<usize> {
    let g = &epilogue.graph;
    let identity: Vec<Affine> = epilogue.out_vars.iter().map(|&v| Affine::var(v)).collect();
    let whole = |n| match g.node(n) {
        Node::Access { arg, index } if *index == identity => Some(*arg),
        _ => None,
    };
    let Node::Binary(BinaryOp::Add, x, y) = g.node(epilogue.root) else {
        return None;
    };
    let product = epilogue.args().len().checked_sub(1)?;
    let (x, y) = (whole(*x)?, whole(*y)?);
    let addend = match (x == product, y == product) {
        (true, false) => y,
        (false, true) => x,
        _ => return None,
    };
    (epilogue.args()[addend].shape == epilogue.output_shape()).then_some(addend)
}
