//! Unit tests of the elimination: brute-force comparison on random
//! polytopes and the paper's figures built from `solve_lattice`.

use super::*;
use crate::symbolic::intlinalg::IntMatrix;
use crate::symbolic::lattice::solve_lattice;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

fn var(v: u32) -> Affine {
    Affine::var(VarId(v))
}

fn aff(terms: &[(u32, i64)], c: i64) -> Affine {
    Affine::from_terms(terms.iter().map(|&(v, k)| (VarId(v), k)), c).unwrap()
}

/// `lo ≤ form ≤ hi` as two rows.
fn between(form: &Affine, lo: i64, hi: i64) -> [Affine; 2] {
    [
        form.add_const(-lo).unwrap(),
        form.scale(-1).unwrap().add_const(hi).unwrap(),
    ]
}

fn points(rows: &[Affine], order: &[VarId], params: &dyn Fn(VarId) -> i64) -> BTreeSet<Vec<i64>> {
    let elim = eliminate(rows, order).unwrap();
    let mut out = BTreeSet::new();
    let end = enumerate(&elim, params, &mut |p| {
        assert!(out.insert(p.to_vec()), "visited twice")
    })
    .unwrap();
    assert_eq!(end, Enumeration::Complete);
    out
}

/// Every integer point of the rows with the order variables in `[-b, b]`.
fn brute(
    rows: &[Affine],
    order: &[VarId],
    params: &dyn Fn(VarId) -> i64,
    b: i64,
) -> BTreeSet<Vec<i64>> {
    let n = order.len() as u32;
    let side = 2 * b + 1;
    (0..side.pow(n))
        .map(|mut code| {
            (0..n)
                .map(|_| {
                    let x = code % side - b;
                    code /= side;
                    x
                })
                .collect::<Vec<i64>>()
        })
        .filter(|p| {
            let value = |v: VarId| {
                order
                    .iter()
                    .position(|&o| o == v)
                    .map_or_else(|| params(v), |i| p[i])
            };
            rows.iter().all(|r| r.eval(&value).unwrap() >= 0)
        })
        .collect()
}

#[test]
fn random_polytopes_match_brute_force() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    const B: i64 = 6;
    for case in 0..600 {
        let n = rng.gen_range(2..=4u32);
        let np = if case % 3 == 0 {
            0
        } else {
            rng.gen_range(1..=2u32)
        };
        let order: Vec<VarId> = (0..n).map(VarId).collect();
        let mut rows = Vec::new();
        for _ in 0..rng.gen_range(3..=8) {
            let terms: Vec<(u32, i64)> = (0..n + np).map(|v| (v, rng.gen_range(-3..=3))).collect();
            rows.push(aff(&terms, rng.gen_range(-8..=8)));
        }
        for v in 0..n {
            rows.extend(between(&var(v), -B, B));
        }
        // Shuffle the order sometimes: bounds must not depend on it.
        let mut order = order;
        if case % 2 == 1 {
            order.reverse();
        }
        let pvals: Vec<i64> = (0..np).map(|_| rng.gen_range(-4..=4)).collect();
        let params = |v: VarId| pvals[(v.0 - n) as usize];
        let want = brute(&rows, &order, &params, B);
        assert_eq!(
            points(&rows, &order, &params),
            want,
            "case {case}: {rows:?}"
        );
        assert_eq!(
            has_integer_point(&rows, &order, &params).unwrap(),
            !want.is_empty(),
            "case {case}"
        );
        let elim = eliminate(&rows, &order).unwrap();
        for (k, b) in elim.bounds.iter().enumerate() {
            for bound in b.lower.iter().chain(&b.upper) {
                assert!(
                    bound.vars().all(|v| !order[..=k].contains(&v)),
                    "bound on an earlier variable"
                );
            }
        }
        for c in &elim.conditions {
            assert!(c.vars().all(|v| !order.contains(&v)));
        }
    }
}

#[test]
fn infeasibility_and_tightening() {
    let (x, y) = (VarId(0), VarId(1));
    // x ≥ 1 and x ≤ 0: a constant row −1 ≥ 0.
    let e = eliminate(&[aff(&[(0, 1)], -1), aff(&[(0, -1)], 0)], &[x]).unwrap();
    assert!(e.infeasible);
    assert!(!has_integer_point(&[aff(&[(0, 1)], -1), aff(&[(0, -1)], 0)], &[x], &|_| 0).unwrap());
    // 2x ≥ 1 tightens to x ≥ 1.
    let e = eliminate(&[aff(&[(0, 2)], -1), aff(&[(0, -1)], 5)], &[x]).unwrap();
    assert_eq!(e.bounds[0].lower, vec![RatAffine::constant(1)]);
    // Real but not integer solutions: 3 ≤ 3x − 3y ≤ 4 → x − y = 1 after tightening… feasible;
    // 1 ≤ 3x − 3y ≤ 2 has none.
    let d = aff(&[(0, 3), (1, -3)], 0);
    let mut rows = between(&d, 1, 2).to_vec();
    rows.extend(between(&var(1), 0, 5));
    assert!(!has_integer_point(&rows, &[x, y], &|_| 0).unwrap());
    assert!(eliminate(&rows, &[x, y]).unwrap().infeasible);
}

#[test]
fn unbounded_variables() {
    let (x, y) = (VarId(0), VarId(1));
    // x ≥ y, 0 ≤ y ≤ 3: x unbounded above.
    let rows = [aff(&[(0, 1), (1, -1)], 0), var(1), aff(&[(1, -1)], 3)];
    let e = eliminate(&rows, &[x, y]).unwrap();
    assert!(e.bounds[0].upper.is_empty());
    assert_eq!(
        enumerate(&e, &|_| 0, &mut |_| panic!("visited")).unwrap(),
        Enumeration::Unbounded(x)
    );
    assert_eq!(
        integer_feasibility(&rows, &[x, y], &|_| 0).unwrap(),
        Feasibility::Feasible
    );
    // 2x = y with y ≥ 1 unbounded above and x eliminated first: undecided.
    let rows = [
        aff(&[(0, 2), (1, -1)], 0),
        aff(&[(0, -2), (1, 1)], 0),
        aff(&[(1, 1)], -1),
    ];
    assert_eq!(
        integer_feasibility(&rows, &[x, y], &|_| 0).unwrap(),
        Feasibility::Undecided(y)
    );
    assert!(has_integer_point(&rows, &[x, y], &|_| 0).unwrap());
}

#[test]
fn overflow_is_an_error_not_a_panic() {
    let (x, y) = (VarId(0), VarId(1));
    let rows = [
        aff(&[(0, i64::MAX), (1, 1)], i64::MIN),
        aff(&[(0, -3), (1, i64::MAX)], i64::MAX),
        aff(&[(0, i64::MIN), (1, -7)], 5),
        aff(&[(1, i64::MIN)], i64::MIN),
    ];
    for k in 1..=rows.len() {
        let _ = eliminate(&rows[..k], &[x, y]);
        let _ = has_integer_point(&rows[..k], &[x, y], &|_| i64::MAX);
        let _ = has_integer_point(&rows[..k], &[x], &|_| i64::MIN);
    }
}

/// Rows `lo ≤ α ≤ hi` rewritten in `(z, β)` through `α = particular·β + kernel·z`
/// (all divisors 1 here, so `w = u·β`).
fn alpha_box_rows(
    a: &[&[i64]],
    beta: &[VarId],
    z: &[VarId],
    lo: &[i64],
    hi: &[i64],
) -> Vec<Affine> {
    let sol = solve_lattice(&IntMatrix::from_rows(a)).unwrap();
    assert!(sol.divisors.iter().all(|&s| s == 1));
    let w: Vec<Affine> = (0..sol.rank)
        .map(|i| {
            aff(
                &beta
                    .iter()
                    .enumerate()
                    .map(|(c, b)| (b.0, sol.u_rows.get(i, c)))
                    .collect::<Vec<_>>(),
                0,
            )
        })
        .collect();
    let mut rows = Vec::new();
    for r in 0..sol.particular.rows() {
        let mut alpha = Affine::constant(0);
        for (i, wi) in w.iter().enumerate() {
            alpha = alpha
                .add(&wi.scale(sol.particular.get(r, i)).unwrap())
                .unwrap();
        }
        for (j, zj) in z.iter().enumerate() {
            alpha = alpha
                .add(&Affine::var(*zj).scale(sol.kernel.get(r, j)).unwrap())
                .unwrap();
        }
        rows.extend(between(&alpha, lo[r], hi[r]));
    }
    rows
}

fn count_alpha(a: &[i64], beta: i64, lo: &[i64], hi: &[i64]) -> usize {
    let mut n = 0;
    let mut alpha = lo.to_vec();
    loop {
        if a.iter().zip(&alpha).map(|(x, y)| x * y).sum::<i64>() == beta {
            n += 1;
        }
        let mut k = 0;
        while k < alpha.len() && alpha[k] == hi[k] {
            alpha[k] = lo[k];
            k += 1;
        }
        if k == alpha.len() {
            return n;
        }
        alpha[k] += 1;
    }
}

#[test]
fn paper_fig3() {
    let (beta, z) = (VarId(10), VarId(0));
    let (lo, hi) = ([1, 1], [6, 4]);
    let rows = alpha_box_rows(&[&[1, -2]], &[beta], &[z], &lo, &hi);
    let pts = points(&rows, &[z], &|_| -1);
    assert_eq!(pts, [vec![1], vec![2], vec![3]].into_iter().collect()); // Σ((−1)) = {1, 2, 3}
    assert_eq!(count_alpha(&[1, -2], -1, &lo, &hi), 3);
    assert_eq!(pts, brute(&rows, &[z], &|_| -1, 10));
}

#[test]
fn paper_fig4() {
    let (beta, z0, z1) = (VarId(10), VarId(0), VarId(1));
    let (lo, hi) = ([0, 0, 0], [13, 3, 3]);
    let rows = alpha_box_rows(&[&[1, -2, -2]], &[beta], &[z0, z1], &lo, &hi);
    let pts = points(&rows, &[z0, z1], &|_| 3);
    assert_eq!(count_alpha(&[1, -2, -2], 3, &lo, &hi), 15);
    assert_eq!(pts.len(), 15);
    assert_eq!(pts, brute(&rows, &[z0, z1], &|_| 3, 10));
}

#[test]
fn access_d_i_plus_k_bounds() {
    // d[i + k] over i ∈ [0, 2], j ∈ [0, 3], k ∈ [0, 4]: α = (β − z1, z0, z1).
    let (beta, z0, z1) = (VarId(10), VarId(0), VarId(1));
    let rows = alpha_box_rows(&[&[1, 0, 1]], &[beta], &[z0, z1], &[0, 0, 0], &[2, 3, 4]);
    let e = eliminate(&rows, &[z0, z1]).unwrap();
    let set = |v: &[RatAffine]| v.iter().cloned().collect::<BTreeSet<_>>();
    let c = |k| RatAffine::constant(k);
    let b = |k| RatAffine::integer(Affine::var(beta).add_const(k).unwrap());
    assert_eq!(e.bounds[0].var, z0);
    assert_eq!(
        (set(&e.bounds[0].lower), set(&e.bounds[0].upper)),
        (set(&[c(0)]), set(&[c(3)]))
    );
    assert_eq!(e.bounds[1].var, z1);
    assert_eq!(set(&e.bounds[1].lower), set(&[c(0), b(-2)]));
    assert_eq!(set(&e.bounds[1].upper), set(&[c(4), b(0)]));
    assert_eq!(e.bounds[1].lower.len() + e.bounds[1].upper.len(), 4);
    // β ∈ [0, 6] and nothing else.
    let conds: BTreeSet<Affine> = e.conditions.iter().cloned().collect();
    assert_eq!(
        conds,
        [Affine::var(beta), aff(&[(10, -1)], 6)]
            .into_iter()
            .collect()
    );
    for bv in -2..=8 {
        let pts = points(&rows, &[z0, z1], &|_| bv);
        assert_eq!(pts, brute(&rows, &[z0, z1], &|_| bv, 8));
        assert_eq!(
            pts.len(),
            if (0..=6).contains(&bv) {
                4 * (bv.min(4) - (bv - 2).max(0) + 1) as usize
            } else {
                0
            }
        );
    }
}
