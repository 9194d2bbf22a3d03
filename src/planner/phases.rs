//! A strided contraction split by the residue of its output index: stride
//! `s` as `s` stride-1 contractions (PyTorch's "four phases" of a stride-2
//! convolution's input gradient), found on the function.
//!
//! Owns [`plan`]. The derivative of a strided read solves its sums'
//! ranges exactly, and the solution divides by the stride: the input
//! gradient of a 3×3 convolution at stride 2 is
//! `dx[u] = Σ_o Σ_{z ∈ [max(−15, ⌈(−1 − u)/2⌉), min(0, ⌊(1 − u)/2⌋)]} w[o; 1 + u + 2z] · dy[o; −z]`,
//! one tap or two by the parity of `u`. No constant range holds those
//! taps without 1.5× more zero terms, so `super::window` refuses it, and
//! `extract` used to cut the inner `Σ_o` over every `(tap, position)` pair
//! (a col2im product of 18.9 MB for a `[32, 64, 32, 32]` image, a GEMM with
//! 16 columns per call) and read it back through the solved ranges.
//!
//! Here each residue `p` of `u = s·a + p` is a function of its own, over
//! `a`:
//!
//! 1. `u` is substituted; the bounds whose denominators now divide their
//!    coefficients become integer (`⌈(−2 − 2a)/2⌉ = −1 − a`);
//! 2. a sum whose range now slides with `a` (both binding bounds `c·a + r`)
//!    is shifted, `z = z′ + c·a`, so that its range is constant but for the
//!    clamps at the borders: `Σ_{z′ ∈ [max(a − 15, −1), min(a, 0)]}
//!    w[o; 2 + 2z′] · dy[o; a − z′]`, a stride-1 convolution of `dy` with
//!    the taps of the phase, which `super::window` turns into a padded copy
//!    and an implicit GEMM;
//! 3. the phases are read back by one loop, `dx[u] = Σ_p Σ_{a ∈ [⌈(u −
//!    p)/s⌉, ⌊(u − p)/s⌋]} phase_p[a]` (one term for the phase of `u`, none
//!    for the others), which `super::residues` splits into strided copies.
//!
//! Every phase runs the products of its own taps, no zero term and no
//! extra multiply-add: the split changes which products a GEMM call
//! groups and their order (the phases' sums are over `(o, taps)` as one K),
//! not what is summed. It is applied only where every phase becomes a
//! convolution-shaped contraction (`super::window` takes it); pools and
//! other strided loops keep `super::residues`' loop-level split.
//!
//! Must not decide how a phase runs (that is `extract`, which plans each
//! phase like any function) and must not change the function it is given.

use super::residues::MAX_PHASES;
use super::route::{routes_to_gemm, Target};
use super::window;
use crate::symbolic::affine::{Affine, RatAffine, VarId};
use crate::symbolic::expr::{BinaryOp, Graph, Node, NodeId, Range, ReduceOp};
use crate::symbolic::subst::substitute;
use crate::symbolic::{ArgDecl, IndexFn};
use num_integer::Integer;
use rustc_hash::FxHashMap as HashMap;

/// The most phases a function is split into (a stride of 4 in each of two
/// dimensions).
const MAX_TOTAL_PHASES: i64 = 16;

/// A split (see the module documentation).
pub(crate) struct PhasePlan {
    /// One function per phase, over `f`'s arguments.
    pub phases: Vec<IndexFn>,
    /// `f` again, reading `f`'s arguments (unused) followed by the phases,
    /// in order.
    pub reader: IndexFn,
}

/// The split of `f` by the residues of its output indices (see the module
/// documentation), or `None` when no sum's bounds divide by an output
/// index, or a phase would not be a convolution-shaped contraction.
pub(crate) fn plan(f: &IndexFn, target: Target) -> Option<PhasePlan> {
    let strides = strides(f)?;
    let mut phases = Vec::new();
    let mut residues = Vec::new();
    for p in residue_tuples(&strides) {
        let phase = phase(f, &strides, &p)?;
        if phase.output_shape().contains(&0) {
            // A residue no output index takes (a dimension shorter than its
            // stride): nothing to compute or read.
            continue;
        }
        if window::plan(&phase, target).is_none() && !routes_to_gemm(&phase, target) {
            return None;
        }
        phase.check_bounds().ok()?;
        phases.push(phase);
        residues.push(p);
    }
    let reader = reader(f, &strides, &residues, &phases)?;
    reader.check_bounds().ok()?;
    Some(PhasePlan { phases, reader })
}

/// Per output dimension, the stride its sums' bounds divide by (1 where
/// none does); `None` when no dimension has one, a stride is above
/// [`MAX_PHASES`] or the phases would be more than [`MAX_TOTAL_PHASES`].
fn strides(f: &IndexFn) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; f.out_vars.len()];
    for n in f.graph.reachable(f.root) {
        let Node::Reduce { range, .. } = f.graph.node(n) else {
            continue;
        };
        for b in range.lower.iter().chain(&range.upper) {
            for (k, &u) in f.out_vars.iter().enumerate() {
                let c = b.num.coeff(u);
                if b.den > 1 && c % b.den != 0 {
                    let d = b.den / c.gcd(&b.den);
                    strides[k] = strides[k].checked_mul(d / strides[k].gcd(&d))?;
                }
            }
        }
    }
    let total = strides.iter().try_fold(1i64, |t, &s| t.checked_mul(s))?;
    let splits = strides.iter().any(|&s| s > 1);
    (splits && strides.iter().all(|&s| s <= MAX_PHASES) && total <= MAX_TOTAL_PHASES)
        .then_some(strides)
}

/// Every tuple of residues, the last dimension's varying fastest.
fn residue_tuples(strides: &[i64]) -> Vec<Vec<i64>> {
    let mut tuples = vec![Vec::new()];
    for &s in strides {
        tuples = tuples
            .into_iter()
            .flat_map(|t| {
                (0..s).map(move |p| {
                    let mut t = t.clone();
                    t.push(p);
                    t
                })
            })
            .collect();
    }
    tuples
}

/// The phase `residues` of `f`: every output index `u` with a stride `s`
/// replaced by `s·u + p`, bounds made integer, sliding sums shifted.
fn phase(f: &IndexFn, strides: &[i64], residues: &[i64]) -> Option<IndexFn> {
    let mut g = f.graph.clone();
    let mut map: HashMap<VarId, Affine> = HashMap::default();
    let mut shape = f.out_shape.clone();
    let mut split = Vec::new();
    for (k, (&u, (&s, &p))) in f
        .out_vars
        .iter()
        .zip(strides.iter().zip(residues))
        .enumerate()
    {
        if s > 1 {
            map.insert(u, Affine::from_terms([(u, s)], p).ok()?);
            // The indices u with u ≡ p (mod s) in [0, size).
            let size = i64::try_from(f.out_shape[k]).ok()?;
            let len = (size - p + s - 1).div_euclid(s).max(0);
            shape[k] = usize::try_from(len).ok()?;
            split.push(u);
        }
    }
    let root = substitute(&mut g, f.root, &map).ok()?;
    let domain: HashMap<VarId, i64> = f
        .out_vars
        .iter()
        .zip(&shape)
        .map(|(&u, &len)| Some((u, i64::try_from(len).ok()? - 1)))
        .collect::<Option<_>>()?;
    let root = settle(&mut g, root, &split, &domain)?;
    let (graph, root) = g.extract(root);
    let name = format!("{}_phase{}", f.name, residues_label(residues));
    Some(IndexFn {
        name,
        out_shape: shape,
        graph,
        root,
        ..f.clone()
    })
}

fn residues_label(residues: &[i64]) -> String {
    residues
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("_")
}

/// `root` with every sum's bounds made integer where their denominators
/// divide their coefficients, every sum that slides with one of the split
/// output indices `split` shifted to follow it, and every sum of one term
/// at each point of `domain` (each variable from 0 to its maximum)
/// replaced by its term.
fn settle(
    g: &mut Graph,
    root: NodeId,
    split: &[VarId],
    domain: &HashMap<VarId, i64>,
) -> Option<NodeId> {
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    for n in g.reachable(root) {
        let node = g.node(n).map_children(&|c| map[&c]);
        let Node::Reduce {
            op,
            var,
            range,
            mut body,
        } = node
        else {
            map.insert(n, g.intern(node));
            continue;
        };
        let mut range = Range {
            lower: range.lower.iter().map(|b| exact(b, true)).collect(),
            upper: range.upper.iter().map(|b| exact(b, false)).collect(),
        };
        if let Some((u, c)) = split
            .iter()
            .find_map(|&u| sliding(&range, u, domain.get(&u)? / 2).map(|c| (u, c)))
        {
            // var = var′ + c·u
            let mut with = HashMap::default();
            with.insert(var, Affine::from_terms([(var, 1), (u, c)], 0).ok()?);
            body = substitute(g, body, &with).ok()?;
            for b in range.lower.iter_mut().chain(&mut range.upper) {
                let shift = Affine::from_terms([(u, c.checked_mul(b.den)?)], 0).ok()?;
                *b = RatAffine::new(b.num.sub(&shift).ok()?, b.den).ok()?;
            }
        }
        let one_term = matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min);
        if let Some(c) = single_point(&range, domain).filter(|_| one_term) {
            // One term everywhere: the body at that point.
            let mut at = HashMap::default();
            at.insert(var, Affine::constant(c));
            map.insert(n, substitute(g, body, &at).ok()?);
            continue;
        }
        let reduce = g.intern(Node::Reduce {
            op,
            var,
            range,
            body,
        });
        map.insert(n, reduce);
    }
    map.get(&root).copied()
}

/// `Some(c)` when `range` is `{c}` at every point of `domain` (each
/// variable from 0 to its maximum): `c` is both a constant lower and a
/// constant upper bound, and no other bound excludes it anywhere.
fn single_point(range: &Range, domain: &HashMap<VarId, i64>) -> Option<i64> {
    let constant = |b: &RatAffine| {
        b.as_integer()
            .filter(|a| a.is_constant())
            .map(|a| a.constant)
    };
    let c = range.lower.iter().filter_map(constant).max()?;
    if range.upper.iter().filter_map(constant).min()? != c {
        return None;
    }
    // The least and greatest value of a form over the domain.
    let extent = |a: &Affine| -> Option<(i64, i64)> {
        a.terms
            .iter()
            .try_fold((a.constant, a.constant), |(lo, hi), &(v, k)| {
                let end = k.checked_mul(*domain.get(&v)?)?;
                Some((lo.checked_add(end.min(0))?, hi.checked_add(end.max(0))?))
            })
    };
    for b in &range.lower {
        let (_, hi) = extent(&b.num)?;
        if Integer::div_ceil(&hi, &b.den) > c {
            return None;
        }
    }
    for b in &range.upper {
        let (lo, _) = extent(&b.num)?;
        if Integer::div_floor(&lo, &b.den) < c {
            return None;
        }
    }
    Some(c)
}

/// `b` as an integer form when its denominator divides every coefficient
/// (`⌈⌉` for a lower bound, `⌊⌋` for an upper one).
fn exact(b: &RatAffine, lower: bool) -> RatAffine {
    if b.den == 1 || b.num.terms.iter().any(|&(_, c)| c % b.den != 0) {
        return b.clone();
    }
    let c = b.num.constant;
    let constant = if lower {
        Integer::div_ceil(&c, &b.den)
    } else {
        Integer::div_floor(&c, &b.den)
    };
    RatAffine::integer(Affine {
        terms: b.num.terms.iter().map(|&(v, k)| (v, k / b.den)).collect(),
        constant,
    })
}

/// `Some(c)` when `range` slides with `u` at rate `c`: at the middle of
/// `u`'s range, both its binding lower and upper bounds are integer forms
/// `c·u + r` with the same `c ≠ 0`, whatever other variables hold (taken
/// at 0 here, as `super::residues` does).
fn sliding(range: &Range, u: VarId, mid: i64) -> Option<i64> {
    let mut rate = None;
    for (bounds, lower) in [(&range.lower, true), (&range.upper, false)] {
        let value = |x| if x == u { mid } else { 0 };
        let at = |b: &RatAffine| {
            let rounded = if lower {
                b.eval_ceil(&value)
            } else {
                b.eval_floor(&value)
            };
            rounded.unwrap_or(0)
        };
        let binding = if lower {
            bounds.iter().max_by_key(|b| at(b))?
        } else {
            bounds.iter().min_by_key(|b| at(b))?
        };
        let c = binding.num.coeff(u);
        if c == 0 || binding.den != 1 || rate.is_some_and(|r| r != c) {
            return None;
        }
        rate = Some(c);
    }
    rate
}

/// `f` as the sum over its phases, each read where its residue holds:
/// `Σ_p Σ_{a ∈ [⌈(u − p)/s⌉, ⌊(u − p)/s⌋]} phase_p[a]`.
fn reader(
    f: &IndexFn,
    strides: &[i64],
    residues: &[Vec<i64>],
    phases: &[IndexFn],
) -> Option<IndexFn> {
    let mut g = Graph::new();
    let mut var_names = f.var_names.clone();
    // One summed index per split dimension, shared by the phases' sums.
    let summed: Vec<Option<VarId>> = f
        .out_vars
        .iter()
        .zip(strides)
        .map(|(&u, &s)| {
            (s > 1).then(|| {
                let v = VarId(u32::try_from(var_names.len()).unwrap_or(u32::MAX));
                var_names.push(format!("{}_phase", f.var_names[u.0 as usize]));
                v
            })
        })
        .collect();
    let mut args = f.args.clone();
    let mut total = None;
    for (k, (p, phase)) in residues.iter().zip(phases).enumerate() {
        let arg = args.len();
        args.push(ArgDecl {
            name: format!("phase{k}"),
            shape: phase.output_shape().to_vec(),
        });
        let index: Vec<Affine> = f
            .out_vars
            .iter()
            .zip(&summed)
            .map(|(&u, a)| Affine::var(a.unwrap_or(u)))
            .collect();
        let mut term = g.intern(Node::Access { arg, index });
        for (((&u, a), &s), &r) in f.out_vars.iter().zip(&summed).zip(strides).zip(p).rev() {
            let Some(a) = a else { continue };
            let at = RatAffine::new(Affine::from_terms([(u, 1)], -r).ok()?, s).ok()?;
            term = g.intern(Node::Reduce {
                op: ReduceOp::Sum,
                var: *a,
                range: Range {
                    lower: vec![at.clone()],
                    upper: vec![at],
                },
                body: term,
            });
        }
        total = Some(match total {
            None => term,
            Some(t) => g.intern(Node::Binary(BinaryOp::Add, t, term)),
        });
    }
    Some(IndexFn {
        name: f.name.clone(),
        out_vars: f.out_vars.clone(),
        out_shape: f.out_shape.clone(),
        args,
        var_names,
        graph: g,
        root: total?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::plan_function;
    use crate::DType;

    /// The input gradient of a 3×3, stride-2, padding-1 convolution.
    const INPUT_GRADIENT: &str = "dx[b; c; u; v] = sum{z2}_(max [-7; (-1 - v)/2])^(min [0; (1 - v)/2]) (sum{z1}_(max [-7; (-1 - u)/2])^(min [0; (1 - u)/2]) (sum{o}_0^31 (w[o; c; 1 + u + 2*z1; 1 + v + 2*z2] * dy[b; o; -z1; -z2])))";

    fn input_gradient() -> IndexFn {
        IndexFn::parse_with_sizes(
            INPUT_GRADIENT,
            &[("w", &[32, 32, 3, 3][..]), ("dy", &[4, 32, 8, 8][..])],
            &[("u", 16), ("v", 16)],
        )
        .unwrap()
    }

    #[test]
    fn a_strided_input_gradient_splits_into_four_stride_one_phases() {
        let f = input_gradient();
        let plan = plan(&f, Target::Cpu).expect("split");
        assert_eq!(plan.phases.len(), 4);
        for p in &plan.phases {
            assert_eq!(p.output_shape(), [4, 32, 8, 8]);
            // No bound divides any more.
            let divides = p.graph.reachable(p.root).into_iter().any(|n| {
                matches!(p.graph.node(n), Node::Reduce { range, .. }
                    if range.lower.iter().chain(&range.upper).any(|b| b.den > 1))
            });
            assert!(!divides, "{p}");
        }
        // The phase of even rows and columns is the middle tap alone.
        assert!(
            !plan.phases[0].to_string().contains("z1"),
            "{}",
            plan.phases[0]
        );
        assert_eq!(plan.reader.args().len(), 2 + 4);
    }

    #[test]
    fn the_phases_compute_the_function() {
        let f = input_gradient();
        let p = plan_function(&f, DType::F64).unwrap();
        assert!(p.stages.len() > 4, "{p}");
        let w: Vec<f64> = (0..32 * 32 * 9)
            .map(|i| ((i * 7 % 13) as f64 - 6.0) / 8.0)
            .collect();
        let dy: Vec<f64> = (0..4 * 32 * 64)
            .map(|i| ((i * 5 % 11) as f64 - 5.0) / 8.0)
            .collect();
        let want = f.eval_f64(&[("w", &w), ("dy", &dy)]).unwrap();
        let got = p.eval_f64(&[&w, &dy]).unwrap().remove(0);
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{k}: {a} vs {b}");
        }
    }

    #[test]
    fn a_weight_gradient_and_a_pool_gradient_are_left_whole() {
        // The taps of a weight gradient fit a constant range: `window`
        // takes the function as it is (`extract` tries it first).
        let dw = IndexFn::parse_with_sizes(
            "dw[o; c; k] = sum{t}_(max [0; (1 - k)/2])^7 (sum{b}_0^3 (dy[b; o; t] * x[b; c; -1 + k + 2*t]))",
            &[("dy", &[4, 8, 8][..]), ("x", &[4, 8, 16][..])],
            &[("k", 3)],
        )
        .unwrap();
        assert!(plan(&dw, Target::Cpu).is_none());
        let p = plan_function(&dw, DType::F32).unwrap();
        assert_eq!(p.stages.last().unwrap().route.name(), "gemm", "{p}");
        // No contraction: the loop-level split (`super::residues`) serves.
        let pool = IndexFn::parse_with_sizes(
            "dx[u] = sum{z}_(max [-7; (-1 + -u)/2])^(min [0; (1 + -u)/2]) (dy[-z])",
            &[("dy", &[8][..])],
            &[("u", 16)],
        )
        .unwrap();
        assert!(plan(&pool, Target::Cpu).is_none());
    }
}
