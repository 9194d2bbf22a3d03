//! On the GPU, contraction operands copied into a layout cuBLAS takes in
//! one call, and products computed in an output order it takes in one.
//!
//! Owns [`relayouts`], [`output_order`] and [`cublas_calls`]. cuBLAS needs the batch, `M`,
//! `N` and `K` indices of a product each to be one dimension of uniform
//! stride in its operands (`Contraction::blas`); where they are not, a
//! contraction runs as several calls (loops over a second batch
//! dimension, accumulated slices of `K`) or as a loop kernel:
//!
//! | contraction | operand | why |
//! | --- | --- | --- |
//! | attention `Σ_e q[b; i; h; e]·k[b; j; h; e]` | `q`, `k` in [B, T, H, E] | the batch `(b, h)` has strides T·H·E and E: 8 calls of 12 instead of one of 96 |
//! | a convolution's input gradient `Σ_{o,kh,kw} w[o; c; kh; kw]·col[n; o; kh; kw; y; x]` | `w` | `K = (o, kh, kw)` has the output index `c` in the middle: a loop kernel |
//!
//! An operand read at plain indices is then copied as a stage whose
//! dimensions are ordered `[batch…, M…, K…]` (the operand holding `M`) or
//! `[batch…, K…, N…]`, with the batch, `M` and `N` in the output's order
//! and `K` in the order of the operand that needs no copy (if one does
//! not). PyTorch does the same (`.contiguous()` before `bmm`). The caller
//! (`super::extract`) keeps the copies only when the contraction then
//! needs fewer cuBLAS calls ([`cublas_calls`]). Must not decide anything
//! else.

use super::contraction::detect;
use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, ReduceOp, UnaryOp};
use crate::symbolic::IndexFn;

/// One operand to copy: its access node and its indices in the order the
/// copy stores them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Relayout {
    pub node: NodeId,
    pub order: Vec<VarId>,
}

/// The cuBLAS calls `f` makes as a GEMM on the GPU: `None` when it is no
/// contraction cuBLAS can run (a loop kernel).
pub(crate) fn cublas_calls(f: &IndexFn) -> Option<usize> {
    let c = detect(f)?;
    let plan = c.blas()?;
    Some(
        plan.outer
            .iter()
            .chain(c.k_outer())
            .map(|d| d.len)
            .product(),
    )
}

/// The operands of the contraction `f` to copy (see the module
/// documentation); `None` when `f` is no contraction of two plain reads,
/// runs as one cuBLAS call already, or no copy would change a layout.
pub(crate) fn relayouts(f: &IndexFn) -> Option<Vec<Relayout>> {
    if cublas_calls(f).is_some_and(|c| c <= 1) {
        return None;
    }
    let g = &f.graph;
    // The summed indices, outermost first, down to the product.
    let mut sums = Vec::new();
    let mut n = f.root;
    loop {
        n = match *g.node(n) {
            Node::Reduce {
                op: ReduceOp::Sum,
                var,
                body,
                ..
            } => {
                sums.push(var);
                body
            }
            Node::Unary(UnaryOp::Neg, a) => a,
            Node::Binary(BinaryOp::Mul, a, b) if g.const_value(a).is_some() => b,
            Node::Binary(BinaryOp::Mul, a, b) if g.const_value(b).is_some() => a,
            _ => break,
        };
    }
    // The two reads of the product, at plain indices.
    let reads: Vec<(NodeId, Vec<VarId>)> = g
        .reachable(n)
        .into_iter()
        .filter_map(|m| match g.node(m) {
            Node::Access { index, .. } => Some(
                index
                    .iter()
                    .map(|a| a.as_single_var())
                    .collect::<Option<Vec<VarId>>>()
                    .map(|vars| (m, vars)),
            ),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let [(na, va), (nb, vb)] = &reads[..] else {
        return None;
    };
    let out = &f.out_vars;
    // The output ends with M and N (or N and M): its last two runs of
    // indices read by one operand only; everything before is the batch
    // (an index one operand lacks is a batch of stride 0 there: the
    // image of a convolution's input gradient).
    let side = |v: &VarId| match (va.contains(v), vb.contains(v)) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    };
    let mut end = out.len();
    let mut runs: Vec<(bool, Vec<VarId>)> = Vec::new();
    while runs.len() < 2 && end > 0 {
        let Some(s) = side(&out[end - 1]) else {
            break;
        };
        if runs.last().is_some_and(|(last, _)| *last == s) {
            break;
        }
        let mut start = end;
        while start > 0 && side(&out[start - 1]) == Some(s) {
            start -= 1;
        }
        runs.push((s, out[start..end].to_vec()));
        end = start;
    }
    let batch: Vec<VarId> = out[..end].to_vec();
    let own = |a: bool| -> Vec<VarId> {
        runs.iter()
            .find(|(s, _)| *s == a)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (ma, mb) = (own(true), own(false));
    if ma.is_empty() && mb.is_empty() {
        return None;
    }
    // Every index is a batch, M, N or summed one, each read once, and
    // every summed index is read by both.
    let known = |vars: &[VarId]| {
        vars.iter().all(|v| out.contains(v) || sums.contains(v))
            && vars.len() == vars.iter().collect::<std::collections::HashSet<_>>().len()
    };
    if !known(va) || !known(vb) || sums.iter().any(|k| !va.contains(k) || !vb.contains(k)) {
        return None;
    }
    // The operand whose own output indices come first holds M.
    let a_first = match (ma.first(), mb.first()) {
        (Some(x), Some(y)) => out.iter().position(|v| v == x) < out.iter().position(|v| v == y),
        (Some(_), None) => true,
        _ => false,
    };
    let ((left, lv, m), (right, rv, nn)) = if a_first {
        ((*na, va, ma), (*nb, vb, mb))
    } else {
        ((*nb, vb, mb), (*na, va, ma))
    };
    let summed_in = |vars: &[VarId]| -> Vec<VarId> {
        vars.iter().copied().filter(|v| sums.contains(v)).collect()
    };
    let cat = |parts: &[&[VarId]]| -> Vec<VarId> { parts.concat() };
    // The batch indices an operand reads, in the output's order.
    let batch_of = |vars: &[VarId]| -> Vec<VarId> {
        batch.iter().copied().filter(|v| vars.contains(v)).collect()
    };
    // A layout cuBLAS takes: the batch first, then M and K (or N and K)
    // in either order (a transposed matrix).
    let fits = |vars: &[VarId], own: &[VarId], k: &[VarId]| {
        let b = batch_of(vars);
        *vars == cat(&[&b, own, k]) || *vars == cat(&[&b, k, own])
    };
    // A copy keeps the operand's own order of its two groups (K before
    // or after M or N), so it reads runs of its source in order.
    let copy = |node: NodeId, vars: &[VarId], own: &[VarId], k: &[VarId]| {
        let b = batch_of(vars);
        let k_first = vars
            .iter()
            .find(|v| !b.contains(v))
            .is_some_and(|v| k.contains(v));
        let order = if k_first {
            cat(&[&b, k, own])
        } else {
            cat(&[&b, own, k])
        };
        Relayout { node, order }
    };
    // K in the order of an operand that keeps its layout, if one can.
    let best = [summed_in(lv), summed_in(rv)]
        .into_iter()
        .map(|k| {
            let mut copies = Vec::new();
            if !fits(lv, &m, &k) {
                copies.push(copy(left, lv, &m, &k));
            }
            if !fits(rv, &nn, &k) {
                copies.push(copy(right, rv, &nn, &k));
            }
            copies
        })
        .min_by_key(|c| c.len())?;
    (!best.is_empty()).then_some(best)
}

/// The output order in which cuBLAS may compute the contraction `f` in
/// fewer calls than in `f`'s own: the indices both operands read (the
/// batch), then the others (`M` and `N`), each group in the output's
/// order (`dv[b; j; h; e] = Σ_i p[b; h; i; j] · g[b; h; i; e]` in
/// `[b; h; j; e]`: one call of 96 instead of 8 of 12). `None` when `f` runs as one call, is no contraction, or is in
/// that order already. Whether the calls do drop (with the operands
/// copied as [`relayouts`] says) is the caller's to check.
pub(crate) fn output_order(f: &IndexFn) -> Option<Vec<VarId>> {
    if cublas_calls(f)? <= 1 {
        return None;
    }
    let c = detect(f)?;
    let [(a, _), (b, _)] = c.operands();
    let g = &f.graph;
    let reads = |arg: usize| -> Vec<VarId> {
        g.reachable(f.root)
            .into_iter()
            .filter_map(|m| match g.node(m) {
                Node::Access { arg: x, .. } if *x == arg => Some(g.free_vars(m).to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    let (va, vb) = (reads(a), reads(b));
    let out = &f.out_vars;
    let group = |keep: &dyn Fn(&VarId) -> bool| -> Vec<VarId> {
        out.iter().copied().filter(|v| keep(v)).collect()
    };
    let both = |v: &VarId| va.contains(v) && vb.contains(v);
    let order: Vec<VarId> = [group(&both), group(&|v| !both(v))].concat();
    (order != *out && order.len() == out.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copies `f` gets, each as its indices' names.
    fn copies(src: &str, args: &[(&str, &[usize])]) -> Option<Vec<Vec<String>>> {
        let f = IndexFn::parse(src, args).unwrap();
        relayouts(&f).map(|r| {
            r.iter()
                .map(|r| r.order.iter().map(|v| f.var_name(*v).to_string()).collect())
                .collect()
        })
    }

    #[test]
    fn a_convolutions_input_gradient_copies_the_weight_only() {
        let got = copies(
            "dx[n; c; y; x] = sum{z2}_0^2 (sum{z1}_0^2 (sum{z0}_0^63 (w[z0; c; z1; z2] * s[n; z0; z1; z2; y; x])))",
            &[("w", &[64, 64, 3, 3]), ("s", &[2, 64, 3, 3, 8, 8])],
        );
        assert_eq!(
            got,
            Some(vec![vec![
                "z0".into(),
                "z1".into(),
                "z2".into(),
                "c".into()
            ]])
        );
    }

    #[test]
    fn attention_with_interleaved_heads_copies_both_operands() {
        let got = copies(
            "f[b; h; i; j] = sum{e}_0^7 (q[b; i; h; e] * k[b; j; h; e])",
            &[("q", &[2, 16, 3, 8]), ("k", &[2, 16, 3, 8])],
        )
        .unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(got.contains(&names(&["b", "h", "i", "e"])), "{got:?}");
        assert!(got.contains(&names(&["b", "h", "j", "e"])), "{got:?}");
    }

    #[test]
    fn a_gradient_in_the_heads_interleaved_layout_is_computed_head_major() {
        let f = IndexFn::parse(
            "dv[b; j; h; e] = sum{i}_0^15 (p[b; h; i; j] * g[b; h; i; e])",
            &[("p", &[2, 3, 16, 16]), ("g", &[2, 3, 16, 8])],
        )
        .unwrap();
        let order: Vec<String> = output_order(&f)
            .unwrap()
            .iter()
            .map(|v| f.var_name(*v).to_string())
            .collect();
        assert_eq!(order, ["b", "h", "j", "e"]);
        let plain = IndexFn::parse(
            "f[b; h; i; e] = sum{j}_0^15 (p[b; h; i; j] * v[b; h; j; e])",
            &[("p", &[2, 3, 16, 16]), ("v", &[2, 3, 16, 8])],
        )
        .unwrap();
        assert_eq!(output_order(&plain), None);
    }

    #[test]
    fn a_product_cublas_takes_in_one_call_is_left_alone() {
        let got = copies(
            "f[b; i; j] = sum{k}_0^63 (a[b; i; k] * w[k; j])",
            &[("a", &[4, 32, 64]), ("w", &[64, 16])],
        );
        assert_eq!(got, None);
    }
}
