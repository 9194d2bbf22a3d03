//! Unit tests of `solve_lattice`: the paper's cases and a brute-force
//! comparison on random systems.

use super::*;
use rand::{Rng, SeedableRng};

fn m(rows: &[&[i64]]) -> IntMatrix {
    IntMatrix::from_rows(rows)
}

fn solve(rows: &[&[i64]]) -> LatticeSolution {
    solve_lattice(&m(rows)).unwrap()
}

#[test]
fn access_d_i_plus_k() {
    let sol = solve(&[&[1, 0, 1]]);
    assert_eq!(sol.rank, 1);
    assert_eq!(sol.kernel, m(&[&[0, -1], &[1, 0], &[0, 1]]));
    assert_eq!(sol.particular, m(&[&[1], &[0], &[0]]));
    assert_eq!(sol.divisors, vec![1]);
    assert_eq!(sol.u_rows, m(&[&[1]]));
    assert_eq!(sol.cokernel.rows(), 0);
    assert_eq!((sol.pivot(0), sol.pivot(1)), (Some(1), Some(2)));
}

#[test]
fn paper_fig3() {
    let sol = solve(&[&[1, -2]]);
    assert_eq!(sol.kernel, m(&[&[2], &[1]]));
    assert_eq!(sol.particular, m(&[&[1], &[0]]));
    assert_eq!(
        (sol.divisors.clone(), sol.u_rows.clone()),
        (vec![1], m(&[&[1]]))
    );
}

#[test]
fn paper_fig4() {
    let sol = solve(&[&[1, -2, -2]]);
    assert_eq!(sol.particular, m(&[&[1], &[0], &[0]]));
    assert_eq!(sol.kernel, m(&[&[2, 2], &[1, 0], &[0, 1]]));
}

#[test]
fn access_c_i_i() {
    let sol = solve(&[&[1, 0, 0], &[1, 0, 0]]);
    assert_eq!(sol.rank, 1);
    assert_eq!(sol.cokernel, m(&[&[1, -1]]));
    assert_eq!(sol.kernel, m(&[&[0, 0], &[1, 0], &[0, 1]]));
    assert_eq!(
        sol.particular_solution(&[3, 3]).unwrap(),
        Some(vec![3, 0, 0])
    );
    assert_eq!(sol.particular_solution(&[3, 4]).unwrap(), None);
}

#[test]
fn strided_access() {
    let sol = solve(&[&[2]]);
    assert_eq!(sol.divisors, vec![2]);
    assert_eq!(sol.kernel.cols(), 0);
    assert_eq!(
        (sol.particular.clone(), sol.u_rows.clone()),
        (m(&[&[1]]), m(&[&[1]]))
    );
    assert_eq!(sol.particular_solution(&[6]).unwrap(), Some(vec![3]));
    assert_eq!(sol.particular_solution(&[5]).unwrap(), None);
}

#[test]
fn degenerate_shapes() {
    let sol = solve_lattice(&IntMatrix::new(2, 3)).unwrap();
    assert_eq!(sol.rank, 0);
    assert_eq!(sol.kernel, IntMatrix::identity(3));
    assert_eq!(sol.cokernel, IntMatrix::identity(2));
    let sol = solve_lattice(&IntMatrix::new(0, 2)).unwrap();
    assert_eq!(sol.kernel, IntMatrix::identity(2));
}

#[test]
fn overflow_is_an_error_not_a_panic() {
    let big = [i64::MAX, i64::MIN, i64::MAX - 1, 3];
    for &x in &big {
        for &y in &big {
            let _ = solve_lattice(&m(&[&[x, y, 1], &[y, 1, x]]));
        }
    }
    assert!(solve_lattice(&m(&[&[i64::MAX, 0], &[0, i64::MAX - 1]])).is_err());
}

/// `z` with `kernel·z = d`, by back substitution along the pivots.
fn kernel_coords(sol: &LatticeSolution, d: &[i64]) -> Option<Vec<i64>> {
    let k = &sol.kernel;
    let mut z = vec![0i64; k.cols()];
    for j in (0..k.cols()).rev() {
        let p = sol.pivot(j)?;
        let rest: i64 = (j + 1..k.cols()).map(|l| k.get(p, l) * z[l]).sum();
        let num = d[p] - rest;
        if num % k.get(p, j) != 0 {
            return None;
        }
        z[j] = num / k.get(p, j);
    }
    let ok = (0..k.rows()).all(|r| (0..k.cols()).map(|j| k.get(r, j) * z[j]).sum::<i64>() == d[r]);
    ok.then_some(z)
}

fn check_structure(a: &IntMatrix, sol: &LatticeSolution) {
    let (n, mm) = (a.rows(), a.cols());
    assert!(a.mul(&sol.kernel).unwrap().is_zero());
    assert!(sol.cokernel.mul(a).unwrap().is_zero());
    assert_eq!(sol.cokernel.rows(), n - sol.rank);
    assert_eq!(sol.kernel.cols(), mm - sol.rank);
    // A·particular = U⁻¹-part: A·particular·w = β for w = (u·β)/s, i.e.
    // A·particular·diag(s)⁻¹·u_rows agrees with the identity on C·β = 0.
    let mut pivots = Vec::new();
    for j in 0..sol.kernel.cols() {
        let p = sol.pivot(j).unwrap();
        assert!(sol.kernel.get(p, j) > 0);
        for l in 0..sol.kernel.cols() {
            if l != j {
                let x = sol.kernel.get(p, l);
                assert!(x >= 0 && x < sol.kernel.get(p, j) || sol.pivot(l) < Some(p) && x == 0);
            }
        }
        for i in 0..sol.rank {
            let x = sol.particular.get(p, i);
            assert!(x >= 0 && x < sol.kernel.get(p, j));
        }
        pivots.push(p);
    }
    assert!(pivots.windows(2).all(|w| w[0] < w[1]));
    for r in 0..sol.cokernel.rows() {
        assert!(sol
            .cokernel
            .row(r)
            .iter()
            .find(|&&x| x != 0)
            .is_some_and(|&x| x > 0));
    }
}

#[test]
fn random_systems_match_brute_force() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    const B: i64 = 3;
    for _ in 0..500 {
        let (n, mm) = (rng.gen_range(1..=4), rng.gen_range(1..=5));
        let a = IntMatrix::from_vec(n, mm, (0..n * mm).map(|_| rng.gen_range(-4..=4)).collect())
            .unwrap();
        let sol = solve_lattice(&a).unwrap();
        check_structure(&a, &sol);
        // All α in the box, grouped by β = A·α.
        let count = (2 * B + 1).pow(mm as u32);
        let points: Vec<Vec<i64>> = (0..count)
            .map(|mut k| {
                (0..mm)
                    .map(|_| {
                        let x = k % (2 * B + 1) - B;
                        k /= 2 * B + 1;
                        x
                    })
                    .collect()
            })
            .collect();
        let image = |alpha: &[i64]| -> Vec<i64> {
            (0..n)
                .map(|r| (0..mm).map(|c| a.get(r, c) * alpha[c]).sum())
                .collect()
        };
        for trial in 0..6 {
            let beta: Vec<i64> = if trial % 2 == 0 {
                image(&points[rng.gen_range(0..points.len())])
            } else {
                (0..n).map(|_| rng.gen_range(-12..=12)).collect()
            };
            let brute: Vec<&Vec<i64>> = points.iter().filter(|p| image(p) == beta).collect();
            match sol.particular_solution(&beta).unwrap() {
                None => assert!(brute.is_empty(), "{a:?} β={beta:?}: solutions exist"),
                Some(alpha0) => {
                    assert_eq!(image(&alpha0), beta);
                    // Every box solution is α0 + K·z …
                    for p in &brute {
                        let d: Vec<i64> = p.iter().zip(&alpha0).map(|(x, y)| x - y).collect();
                        assert!(
                            kernel_coords(&sol, &d).is_some(),
                            "{a:?} β={beta:?} α={p:?}"
                        );
                    }
                    // … and every α0 + K·z in the box is a solution.
                    let k = sol.kernel.cols();
                    let zs = 9i64.pow(k as u32);
                    let mut inside = 0;
                    for mut code in 0..zs {
                        let z: Vec<i64> = (0..k)
                            .map(|_| {
                                let x = code % 9 - 4;
                                code /= 9;
                                x
                            })
                            .collect();
                        let alpha: Vec<i64> = (0..mm)
                            .map(|r| {
                                alpha0[r] + (0..k).map(|j| sol.kernel.get(r, j) * z[j]).sum::<i64>()
                            })
                            .collect();
                        if alpha.iter().all(|x| x.abs() <= B) {
                            assert_eq!(image(&alpha), beta);
                            inside += 1;
                        }
                    }
                    assert!(inside <= brute.len());
                }
            }
        }
    }
}
