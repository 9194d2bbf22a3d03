//! Contractions: recognising index functions that a (batched) matrix
//! product computes exactly, and describing that product.
//!
//! Owns [`detect`] (pattern matching on the [`IndexFn`] IR: a scaled chain
//! of sums with constant bounds around a product of exactly two accesses
//! whose index maps are strided views), which builds a [`Contraction`]
//! (the kernel IR's description: which index variables are batch, M, N and
//! K dimensions, their strides in elements, the scale). It is
//! backend-neutral: the CPU backend runs a contraction with its own GEMM,
//! a GPU backend with cuBLAS. Must not run anything: a function that
//! is not a contraction (or not one this module can prove safe) gets `None`
//! and is left to the generic kernel.
//!
//! # What is recognised
//!
//! `f[out] = s · Σ_{k₁} … Σ_{kₚ} (c · a[map_a] * b[map_b])` where
//!
//! * the sums are plain `sum` reductions (at least one) whose bounds are
//!   constants (`sum{k}_1^3`, `sum{k}_0^(K-1)`); constant factors (`2 * …`,
//!   `… / 4`, `-…`) may appear outside, between or inside the sums and are
//!   folded into one scale (gemm's `beta`);
//! * the product has exactly two argument accesses (the same argument twice
//!   is fine, e.g. `a[i;k] * a[j;k]`);
//! * every dimension of an access is an affine form of the index
//!   variables (`a[i; k + 1]`, `a[0; k]`, `x[b; c; 2*t + 3*k - 1]`,
//!   `a[n - 1 - i]`). The access is then a strided view: each variable has
//!   one stride per operand, the sum of its coefficients times the strides
//!   of the dimensions it appears in (0 where it is absent), so
//!   permutations, transposes, broadcasts, sub-ranges, reversals and the
//!   windows of a convolution (`t + k`: one GEMM per tap over a shifted
//!   view) need no copies;
//! * each summed variable appears in both accesses (K); an output variable
//!   appearing in both (or neither) is a batch dimension, in `a` only an M
//!   dimension, in `b` only an N dimension;
//! * every access is in bounds for the whole domain (checked here again, so
//!   `run_*` never reads outside a buffer of the declared length).
//!
//! Rejected (`None`): triangular or index-dependent bounds (the planner's
//! `window` module rewrites those of a convolution first), guards,
//! element-wise functions,
//! products of three accesses, reductions other than `sum`, products with
//! no sum (outer products are element-wise work).
//!
//! [`detect_scaled`], the CPU route's form, also accepts a product of three
//! accesses of which one is a *diagonal factor* read at summed indices only
//! (`Σ_i x[i; a] · d[i] · x[i; b]`): the CPU's GEMM multiplies it into a
//! packed operand. Both mark a contraction *symmetric* when its two factors
//! are one view with M and N swapped (`Xᵀ·X`, `Xᵀ·diag(d)·X`, batched or
//! not): the CPU then computes one triangle and mirrors it.
//!
//! # Plan
//!
//! Variables of length 1 are dropped (their offset goes into the base
//! pointer). Within each role, variables whose strides nest in every operand
//! and the output (`stride(u) == len(v)·stride(v)`) are fused into one
//! dimension, so `Σ_j Σ_k a[i;j;k]·b[j;k]` is one GEMM with K = J·K and a
//! batched matmul over contiguous batches needs no fusion at all. The
//! longest remaining M, N and K dimensions go to gemm; other M/N/batch
//! dimensions become outer loops over gemm calls, and other K dimensions
//! become an inner loop that accumulates into the output (`read_dst`).
//!

use crate::symbolic::affine::VarId;
use crate::symbolic::expr::{BinaryOp, Node, NodeId, Range, ReduceOp, UnaryOp};
use crate::symbolic::IndexFn;

pub use crate::kernel::contraction::Contraction;
use crate::kernel::contraction::Diag;
use crate::kernel::contraction::Dim;

/// Inclusive range `lo..=hi` of an index variable (`lo > hi`: empty).
#[derive(Clone, Copy, Debug)]
struct VarRange {
    var: VarId,
    lo: i64,
    hi: i64,
}

impl VarRange {
    fn len(&self) -> usize {
        if self.hi < self.lo {
            0
        } else {
            usize::try_from(self.hi as i128 - self.lo as i128 + 1).unwrap_or(usize::MAX)
        }
    }
}

/// Per-variable view of one access: stride (elements) of each variable it
/// uses, and the offset of the element at the variables' lower bounds.
struct View {
    arg: usize,
    strides: Vec<(VarId, isize)>,
    base: usize,
}

impl View {
    fn stride(&self, v: VarId) -> Option<isize> {
        self.strides.iter().find(|(w, _)| *w == v).map(|(_, s)| *s)
    }
}

/// `Some(plan)` when `f` is a contraction that a (batched) GEMM computes
/// exactly (see the module documentation for the accepted form), `None`
/// otherwise. Never panics.
///
/// ```
/// use tenjin::planner::contraction::detect;
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("f[i; j] = sum{k}_0^2 (a[i; k] * b[k; j])",
///                        &[("a", &[2, 3][..]), ("b", &[3, 2][..])])?;
/// let plan = detect(&f).expect("a matmul");
/// let mut out = vec![0.0; 4];
/// plan.run_f64(&[&[1., 2., 3., 4., 5., 6.], &[1., 0., 0., 1., 1., 1.]], &mut out);
/// assert_eq!(out, vec![4., 5., 10., 11.]);
/// assert_eq!(plan.flops(), 2 * 4 * 3);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn detect(f: &IndexFn) -> Option<Contraction> {
    detect_with(f, false)
}

/// [`detect`], and also a product of three accesses of which one, the
/// diagonal factor, is read at summed indices only: `Σ_i a[i; b] · d[i] ·
/// a[i; k]` (`Xᵀ·diag(d)·X`, a Gauss–Newton or logistic-regression
/// Hessian). The CPU's GEMM applies `d` while it packs an operand, so the
/// product `d[i] · a[i; k]` is never materialised; a BLAS call has no such
/// factor, so GPU routes use [`detect`].
///
/// ```
/// use tenjin::planner::contraction::{detect, detect_scaled};
/// use tenjin::symbolic::IndexFn;
/// let f = IndexFn::parse("h[a; b] = sum{i}_0^99 (x[i; a] * d[i] * x[i; b])",
///                        &[("x", &[100, 8][..]), ("d", &[100][..])])?;
/// assert!(detect(&f).is_none());
/// let plan = detect_scaled(&f).expect("a scaled Gram matrix");
/// assert!(plan.has_diagonal() && plan.is_symmetric());
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn detect_scaled(f: &IndexFn) -> Option<Contraction> {
    detect_with(f, true)
}

fn detect_with(f: &IndexFn, diagonal: bool) -> Option<Contraction> {
    let max_accesses = if diagonal { 3 } else { 2 };
    let g = &f.graph;
    let mut scale = 1.0f64;

    // Constant factors and sums, from the root down to the product.
    let mut sums: Vec<VarRange> = Vec::new();
    let mut node = f.root;
    loop {
        if let Some(inner) = peel_constant(f, node, &mut scale)? {
            node = inner;
            continue;
        }
        match g.node(node) {
            Node::Reduce {
                op: ReduceOp::Sum,
                var,
                range,
                body,
            } => {
                let (lo, hi) = constant_range(range)?;
                sums.push(VarRange { var: *var, lo, hi });
                node = *body;
            }
            _ => break,
        }
    }
    if sums.is_empty() {
        return None; // no contraction: element-wise work for the generic kernel
    }

    // The product: exactly two accesses and constant factors.
    let mut accesses: Vec<NodeId> = Vec::new();
    let mut stack = vec![node];
    let mut visits = 0usize;
    while let Some(n) = stack.pop() {
        // Constructors fold constant subtrees, so a product of two accesses
        // is a handful of nodes; the cap only guards against a huge tree
        // hidden in a shared DAG.
        visits += 1;
        if visits > 1024 {
            return None;
        }
        match g.node(n) {
            Node::Const(_) => scale *= g.const_value(n)?,
            Node::Access { .. } => {
                accesses.push(n);
                if accesses.len() > max_accesses {
                    return None;
                }
            }
            Node::Unary(UnaryOp::Neg, x) => {
                scale = -scale;
                stack.push(*x);
            }
            Node::Binary(BinaryOp::Mul, x, y) => {
                stack.push(*x);
                stack.push(*y);
            }
            Node::Binary(BinaryOp::Div, x, y) => {
                let c = g.const_value(*y)?;
                if c == 0.0 {
                    return None;
                }
                scale /= c;
                stack.push(*x);
            }
            _ => return None,
        }
    }
    if accesses.len() < 2 || !scale.is_finite() || scale == 0.0 {
        return None;
    }
    // `stack` pops right factors first: restore source order.
    accesses.reverse();

    // Every variable with its range: outputs first, then the sums.
    let mut ranges: Vec<VarRange> = Vec::new();
    if f.out_vars.len() != f.out_shape.len() {
        return None;
    }
    for (&v, &size) in f.out_vars.iter().zip(&f.out_shape) {
        let hi = i64::try_from(size).ok()? - 1;
        ranges.push(VarRange { var: v, lo: 0, hi });
    }
    ranges.extend(sums.iter().copied());
    for (i, r) in ranges.iter().enumerate() {
        if ranges[..i].iter().any(|q| q.var == r.var) {
            return None; // a name bound twice
        }
    }
    let n_out = f.out_vars.len();

    let out_len = f
        .out_shape
        .iter()
        .try_fold(1usize, |acc, &s| acc.checked_mul(s))?;
    let k_total = sums
        .iter()
        .try_fold(1usize, |acc, r| acc.checked_mul(r.len()))?;
    // With nothing to write or nothing to sum, no operand is ever read, so
    // their bounds do not matter.
    let reads = out_len > 0 && k_total > 0;

    let arg_lens = f
        .args
        .iter()
        .map(|a| {
            a.shape
                .iter()
                .try_fold(1usize, |acc, &s| acc.checked_mul(s))
        })
        .collect::<Option<Vec<usize>>>()?;
    let mut views = accesses
        .iter()
        .map(|&n| view(f, n, &ranges, reads))
        .collect::<Option<Vec<View>>>()?;
    // The diagonal factor: the first read at summed indices only.
    let view_d = if views.len() == 3 {
        let summed = |v: &View| {
            v.strides
                .iter()
                .all(|(x, _)| sums.iter().any(|s| s.var == *x))
        };
        let at = views.iter().position(summed)?;
        Some(views.remove(at))
    } else {
        None
    };
    let (view_a, view_b) = (views.remove(0), views.remove(0));

    // Output strides (row-major over the output shape).
    let out_strides = row_major_strides(&f.out_shape)?;

    let (mut batch, mut ms, mut ns, mut ks) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, r) in ranges.iter().enumerate() {
        let (sa, sb) = (view_a.stride(r.var), view_b.stride(r.var));
        let dim = Dim {
            len: r.len(),
            a: sa.unwrap_or(0),
            b: sb.unwrap_or(0),
            out: if i < n_out { out_strides[i] } else { 0 },
            d: view_d.as_ref().and_then(|d| d.stride(r.var)).unwrap_or(0),
        };
        if i >= n_out {
            if sa.is_none() || sb.is_none() {
                return None; // a sum over one factor only
            }
            ks.push(dim);
            continue;
        }
        match (sa.is_some(), sb.is_some()) {
            (true, false) => ms.push(dim),
            (false, true) => ns.push(dim),
            _ => batch.push(dim),
        }
    }
    // Every variable an access uses must be an output or a sum variable.
    for v in view_a
        .strides
        .iter()
        .chain(&view_b.strides)
        .chain(view_d.iter().flat_map(|d| &d.strides))
        .map(|(v, _)| *v)
    {
        if !ranges.iter().any(|r| r.var == v) {
            return None;
        }
    }

    let (m, rest_m) = pick_output(fuse_all(ms));
    let (n, rest_n) = pick_output(fuse_all(ns));
    let (k, k_outer) = pick_k(fuse_all(ks));
    batch.extend(rest_m);
    batch.extend(rest_n);
    let batch = fuse_all(batch);
    let symmetric = view_a.arg == view_b.arg
        && view_a.base == view_b.base
        && m.len == n.len
        && (m.a, m.b, n.a) == (n.b, 0, 0)
        && k.a == k.b
        && k_outer.iter().chain(&batch).all(|d| d.a == d.b);

    Some(Contraction {
        arg_a: view_a.arg,
        arg_b: view_b.arg,
        arg_lens,
        out_len,
        base_a: view_a.base,
        base_b: view_b.base,
        m,
        n,
        k,
        batch,
        k_outer,
        k_total,
        scale,
        diag: view_d.map(|d| Diag {
            arg: d.arg,
            base: d.base,
        }),
        symmetric,
        accumulate: None,
        threads: 1,
        half_operands: None,
    })
}

/// `Some(Some(inner))` when `node` is a constant factor applied to `inner`
/// (`c * x`, `x * c`, `x / c`, `-x`), folding the factor into `scale`;
/// `Some(None)` when it is not; `None` for a division by zero.
pub(crate) fn peel_constant(f: &IndexFn, node: NodeId, scale: &mut f64) -> Option<Option<NodeId>> {
    let g = &f.graph;
    Some(match g.node(node) {
        Node::Unary(UnaryOp::Neg, x) => {
            *scale = -*scale;
            Some(*x)
        }
        Node::Binary(BinaryOp::Mul, x, y) => match (g.const_value(*x), g.const_value(*y)) {
            (Some(c), _) => {
                *scale *= c;
                Some(*y)
            }
            (_, Some(c)) => {
                *scale *= c;
                Some(*x)
            }
            _ => None,
        },
        Node::Binary(BinaryOp::Div, x, y) => match g.const_value(*y) {
            Some(c) if c != 0.0 => {
                *scale /= c;
                Some(*x)
            }
            Some(_) => return None,
            None => None,
        },
        _ => None,
    })
}

/// `(lo, hi)` of a range whose bounds are all constants.
pub(crate) fn constant_range(range: &Range) -> Option<(i64, i64)> {
    let no_vars = |_: VarId| 0i64;
    let mut lo = i64::MIN;
    for b in &range.lower {
        if !b.num.is_constant() {
            return None;
        }
        lo = lo.max(b.eval_ceil(&no_vars).ok()?);
    }
    let mut hi = i64::MAX;
    for b in &range.upper {
        if !b.num.is_constant() {
            return None;
        }
        hi = hi.min(b.eval_floor(&no_vars).ok()?);
    }
    if range.lower.is_empty() || range.upper.is_empty() {
        return None;
    }
    Some((lo, hi))
}

fn row_major_strides(shape: &[usize]) -> Option<Vec<isize>> {
    crate::symbolic::index_fn::row_major_strides(shape)?
        .into_iter()
        .map(|s| isize::try_from(s).ok())
        .collect()
}

/// The strided view of the access `node`, or `None` when a dimension is not
/// `constant` or `var + constant`, a variable repeats, or (when `reads`) an
/// index can leave its dimension.
fn view(f: &IndexFn, node: NodeId, ranges: &[VarRange], reads: bool) -> Option<View> {
    let Node::Access { arg, index } = f.graph.node(node) else {
        return None;
    };
    let shape = &f.args.get(*arg)?.shape;
    if index.len() != shape.len() {
        return None;
    }
    let strides = row_major_strides(shape)?;
    let mut vars: Vec<(VarId, isize)> = Vec::new();
    let mut base: i128 = 0;
    for (d, form) in index.iter().enumerate() {
        let size = shape[d] as i128;
        // The index at every variable's lower bound, and its extremes over
        // the box of the variables' ranges.
        let (mut at_lo, mut min, mut max) = (form.constant as i128, 0i128, 0i128);
        for &(v, c) in &form.terms {
            let r = ranges.iter().find(|r| r.var == v)?;
            let c128 = c as i128;
            let step = isize::try_from(c).ok()?.checked_mul(strides[d])?;
            match vars.iter_mut().find(|(w, _)| *w == v) {
                Some((_, s)) => *s = s.checked_add(step)?,
                None => vars.push((v, step)),
            }
            at_lo += c128 * r.lo as i128;
            let span = c128 * (r.hi as i128 - r.lo as i128);
            min += span.min(0);
            max += span.max(0);
        }
        if reads && (at_lo + min < 0 || at_lo + max >= size) {
            return None;
        }
        base += at_lo * strides[d] as i128;
    }
    vars.retain(|(_, s)| *s != 0);
    // Unused when nothing is read; keep it a valid offset anyway.
    let base = if reads {
        usize::try_from(base).ok()?
    } else {
        0
    };
    Some(View {
        arg: *arg,
        strides: vars,
        base,
    })
}

/// Drops length-1 dimensions and fuses nesting pairs until none is left.
fn fuse_all(mut dims: Vec<Dim>) -> Vec<Dim> {
    dims.retain(|d| d.len != 1);
    'outer: loop {
        for i in 0..dims.len() {
            for j in 0..dims.len() {
                if i == j {
                    continue;
                }
                if let Some(fused) = dims[i].fuse(dims[j]) {
                    dims[i] = fused;
                    dims.remove(j);
                    continue 'outer;
                }
            }
        }
        return dims;
    }
}

/// A dimension of the output with unit stride is the GEMM's M or N, rather
/// than a longer one, when it has at least this many elements (a vector of
/// f32 at AVX-512): the GEMM then stores whole vectors of C (col2im's
/// `[n; t0; c; k0; k1; t1]` writes rows of `t1`, not columns of `n`).
const UNIT_STRIDE_MIN_LEN: usize = 16;

/// The M or N dimension for the GEMM (see [`UNIT_STRIDE_MIN_LEN`], else
/// the longest) and the others (for loops).
fn pick_output(mut dims: Vec<Dim>) -> (Dim, Vec<Dim>) {
    match (0..dims.len()).find(|&i| dims[i].out == 1 && dims[i].len >= UNIT_STRIDE_MIN_LEN) {
        Some(i) => {
            let d = dims.remove(i);
            (d, dims)
        }
        None => pick(dims),
    }
}

/// The GEMM's K and the outer summed dimensions: the longest, of equal
/// lengths the one whose terms lie closest together, and the others from
/// the widest strides to the narrowest, so that the terms of the folded K
/// (`Σ_n Σ_y Σ_x` of a convolution's weight gradient) walk memory in
/// order rather than jumping between images at every term. (A GPU makes
/// a call per point of the outer ones, so the longest is K; the CPU sums
/// them all in one K and orders it by spread where that packs its terms
/// in runs: `Contraction::folded`.)
fn pick_k(mut dims: Vec<Dim>) -> (Dim, Vec<Dim>) {
    let spread = |d: &Dim| d.a.unsigned_abs().saturating_add(d.b.unsigned_abs());
    let Some(best) =
        (0..dims.len()).max_by_key(|&i| (dims[i].len, std::cmp::Reverse(spread(&dims[i]))))
    else {
        return (Dim::UNIT, dims);
    };
    let k = dims.remove(best);
    dims.sort_by_key(|d| std::cmp::Reverse(spread(d)));
    (k, dims)
}

/// The longest dimension (for gemm) and the others (for loops).
fn pick(mut dims: Vec<Dim>) -> (Dim, Vec<Dim>) {
    let Some(best) = (0..dims.len()).max_by_key(|&i| dims[i].len) else {
        return (Dim::UNIT, dims);
    };
    let d = dims.remove(best);
    (d, dims)
}

#[cfg(test)]
mod tests {
    //! The CPU's order of a folded K (`Contraction::folded`), on
    //! contractions this module detects.

    use super::detect;
    use crate::symbolic::IndexFn;

    #[test]
    fn a_strided_weight_gradient_sums_its_images_outermost_and_its_columns_innermost() {
        // The weight gradient of a stride-2 convolution: 8 images of 4 × 4
        // positions; the images are the longest summed dimension, so the
        // planner makes them the GEMM's K, but the CPU's one K walks the
        // columns innermost (terms 1 and 2 apart), the images outermost.
        let f = IndexFn::parse_with_sizes(
            "dw[o; c; p; q] = sum{n}_0^7 (sum{y}_0^3 (sum{x}_0^3 (dy[n; o; y; x] * xp[n; c; p + 2*y; q + 2*x])))",
            &[("dy", &[8, 2, 4, 4][..]), ("xp", &[8, 3, 9, 9][..])],
            &[("p", 3), ("q", 3)],
        )
        .unwrap();
        let c = detect(&f).expect("a contraction");
        assert_eq!(c.k.len, 8, "the planner's K: the images");
        let k = c.folded().k;
        let lens: Vec<usize> = k.iter().map(|d| d.len).collect();
        assert_eq!(lens, vec![8, 4, 4]);
        let inner = k.last().unwrap();
        let mut strides = [inner.a, inner.b];
        strides.sort_unstable();
        assert_eq!(strides, [1, 2]);
        assert_eq!(k[0].a.abs().max(k[0].b.abs()), 3 * 81, "images outermost");
    }

    #[test]
    fn terms_that_do_not_pack_in_runs_keep_the_planners_order() {
        // A convolution's input gradient reads the weights flipped: its
        // taps run backwards, so the channels stay innermost.
        let f = IndexFn::parse_with_sizes(
            "dx[c; t] = sum{o}_0^15 (sum{k}_0^2 (w[o; c; 2 + -k] * g[o; t + k]))",
            &[("w", &[16, 4, 3][..]), ("g", &[16, 10][..])],
            &[("t", 8)],
        )
        .unwrap();
        let c = detect(&f).expect("a contraction");
        let k = c.folded().k;
        assert_eq!(k.last().map(|d| d.len), Some(16));
    }
}
