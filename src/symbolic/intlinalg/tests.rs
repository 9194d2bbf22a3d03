//! Unit tests of the Smith normal form and what is read off it.
use super::*;
use num_integer::Integer;
use rand::{Rng, SeedableRng};

fn check_snf(a: &IntMatrix) -> Snf {
    let snf = smith_normal_form(a).unwrap();
    let (n, m) = (a.rows(), a.cols());
    assert_eq!(
        snf.u.mul(a).unwrap().mul(&snf.v).unwrap(),
        snf.s,
        "S = UAV for {a:?}"
    );
    for i in 0..n {
        for j in 0..m {
            if i != j {
                assert_eq!(snf.s.get(i, j), 0);
            }
        }
    }
    let d = snf.divisors();
    assert!(d.iter().all(|&x| x > 0));
    assert!(d.windows(2).all(|w| w[1] % w[0] == 0), "chain {d:?}");
    for i in snf.rank..n.min(m) {
        assert_eq!(snf.s.get(i, i), 0);
    }
    assert_eq!(det(&snf.u).unwrap().magnitude(), BigInt::one().magnitude());
    assert_eq!(det(&snf.v).unwrap().magnitude(), BigInt::one().magnitude());
    let k = kernel(&snf);
    assert_eq!((k.rows(), k.cols()), (m, m - snf.rank));
    assert!(a.mul(&k).unwrap().is_zero());
    let c = cokernel(&snf);
    assert_eq!((c.rows(), c.cols()), (n - snf.rank, n));
    assert!(c.mul(a).unwrap().is_zero());
    // A·I·A = A over the rationals.
    // A·I·A = A over the rationals: with I = N/D, A·N·A = D·A (in i128).
    let pinv = pseudo_inverse(&snf).unwrap();
    let d = pinv
        .iter()
        .flatten()
        .fold(1i128, |l, x| l.lcm(&i128::from(*x.denom())));
    let nmat: Vec<Vec<i128>> = pinv
        .iter()
        .map(|row| {
            row.iter()
                .map(|x| i128::from(*x.numer()) * (d / i128::from(*x.denom())))
                .collect()
        })
        .collect();
    let ai: Vec<Vec<i128>> = (0..n)
        .map(|r| {
            (0..n)
                .map(|q| (0..m).map(|p| i128::from(a.get(r, p)) * nmat[p][q]).sum())
                .collect()
        })
        .collect();
    for (r, air) in ai.iter().enumerate() {
        for c in 0..m {
            let aia: i128 = air
                .iter()
                .enumerate()
                .map(|(q, x)| x * i128::from(a.get(q, c)))
                .sum();
            assert_eq!(aia, d * i128::from(a.get(r, c)));
        }
    }
    snf
}

#[test]
fn known_smith_forms() {
    let cases: [(Vec<Vec<i64>>, Vec<i64>); 4] = [
        (
            vec![vec![2, 4, 4], vec![-6, 6, 12], vec![10, -4, -16]],
            vec![2, 6, 12],
        ),
        (
            vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]],
            vec![1, 3],
        ),
        (
            vec![
                vec![-6, 111, -36, 6],
                vec![5, -672, 210, 74],
                vec![0, -255, 81, 24],
                vec![-7, 255, -81, -10],
            ],
            vec![1, 3, 21],
        ),
        (
            vec![vec![9, -36, 30], vec![-36, 192, -180], vec![30, -180, 180]],
            vec![3, 12, 60],
        ),
    ];
    for (rows, want) in cases {
        let snf = check_snf(&IntMatrix::from_rows(&rows));
        assert_eq!(snf.divisors(), want);
        assert_eq!(snf.rank, want.len());
    }
}

#[test]
fn degenerate_shapes() {
    for (n, m) in [(0, 0), (0, 3), (3, 0), (2, 3), (1, 1)] {
        let snf = check_snf(&IntMatrix::new(n, m));
        assert_eq!(snf.rank, 0);
        assert_eq!(kernel(&snf), IntMatrix::identity(m));
    }
    assert_eq!(det(&IntMatrix::new(0, 0)), Some(BigInt::one()));
    assert_eq!(det(&IntMatrix::new(2, 3)), None);
}

fn random_matrix(rng: &mut impl Rng, n: usize, m: usize, zero_frac: f64) -> IntMatrix {
    let data = (0..n * m)
        .map(|_| {
            if rng.gen_bool(zero_frac) {
                0
            } else {
                rng.gen_range(-30..=30)
            }
        })
        .collect();
    IntMatrix::from_vec(n, m, data).unwrap()
}

#[test]
fn random_matrices() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    for k in 0..2000 {
        let (n, m) = (rng.gen_range(1..=8), rng.gen_range(1..=8));
        // The first thousand are dense, the rest sparse (rank deficiency).
        let zero_frac = if k < 1000 {
            0.0
        } else {
            rng.gen_range(0.0..0.7)
        };
        check_snf(&random_matrix(&mut rng, n, m, zero_frac));
    }
}

#[test]
fn dense_8x8_matrices_fit() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    for _ in 0..1000 {
        let snf = check_snf(&random_matrix(&mut rng, 8, 8, 0.0));
        // Reduced transforms stay far from the i64 limit (about 2^47 here).
        let max = snf
            .u
            .data()
            .iter()
            .chain(snf.v.data())
            .map(|x| x.unsigned_abs())
            .max();
        assert!(max < Some(1 << 52));
    }
}

#[test]
fn overflow_is_an_error_not_a_panic() {
    let a = IntMatrix::from_rows(&[vec![i64::MAX, 0], vec![0, i64::MAX - 1]]);
    assert_eq!(smith_normal_form(&a), Err(Overflow));
    let huge = [i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1, 0, 1, -1];
    for &x in &huge {
        for &y in &huge {
            for &z in &huge {
                let a = IntMatrix::from_rows(&[vec![x, y], vec![z, x], vec![y, z]]);
                if let Ok(snf) = smith_normal_form(&a) {
                    assert_eq!(snf.u.mul(&a).and_then(|p| p.mul(&snf.v)), Ok(snf.s.clone()));
                }
            }
        }
    }
    assert_eq!(extended_gcd(i64::MIN, 0), Err(Overflow));
    assert_eq!(extended_gcd(i64::MIN, i64::MIN), Err(Overflow));
    assert_eq!(extended_gcd(i64::MIN, 3).map(|t| t.0), Ok(1));
    let m = IntMatrix::from_rows(&[vec![i64::MAX]]);
    assert_eq!(m.mul(&IntMatrix::from_rows(&[vec![2]])), Err(Overflow));
}

#[test]
fn extended_gcd_signs() {
    for a in -20i64..=20 {
        for b in -20i64..=20 {
            let (g, x, y) = extended_gcd(a, b).unwrap();
            assert_eq!(g, a.gcd(&b));
            assert_eq!(a * x + b * y, g);
        }
    }
}
