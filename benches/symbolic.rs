//! Speed of the symbolic step, which the first iteration of every training
//! loop pays: derivation of the paper's example and of a strided, dilated
//! conv2d; Smith normal form and Fourier–Motzkin on 6×6 systems.
//!
//! `cargo bench --bench symbolic`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use tenjin::symbolic::fourier_motzkin::eliminate;
use tenjin::symbolic::intlinalg::{smith_normal_form, IntMatrix};
use tenjin::symbolic::{Affine, IndexFn, VarId};

const PAPER: &str =
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";
const CONV2D: &str = "f[n; o; u; v] = sum{c}_0^15 (sum{p}_0^2 (sum{q}_0^2 (x[n; c; 2*u + 2*p; 2*v + 2*q] * w[o; c; p; q])))";

fn paper() -> IndexFn {
    IndexFn::parse(
        PAPER,
        &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
    )
    .unwrap()
}

fn conv2d() -> IndexFn {
    IndexFn::parse_with_sizes(
        CONV2D,
        &[("x", &[8, 16, 32, 32]), ("w", &[32, 16, 3, 3])],
        &[("u", 14), ("v", 14)],
    )
    .unwrap()
}

/// A fixed 6×6 integer matrix with a non-trivial Smith form.
fn matrix6() -> IntMatrix {
    IntMatrix::from_rows(&[
        vec![2, 4, 4, -6, 3, 1],
        vec![-6, 6, 12, 5, -2, 7],
        vec![10, -4, -16, 3, 9, -8],
        vec![1, 2, 3, 4, 5, 6],
        vec![7, -8, 9, -10, 11, 12],
        vec![3, 0, -3, 6, 1, -4],
    ])
}

/// 6 variables, 6 coupling inequalities and their 12 box bounds.
fn fm_rows() -> (Vec<Affine>, Vec<VarId>) {
    let vars: Vec<VarId> = (0..6).map(VarId).collect();
    let m = [
        [1, -1, 0, 0, 2, 0],
        [0, 1, -2, 0, 0, 1],
        [1, 0, 1, -1, 0, 0],
        [0, 0, 0, 1, -1, 1],
        [-1, 0, 0, 0, 1, 1],
        [0, 2, 0, 1, 0, -1],
    ];
    let mut rows = Vec::new();
    for (r, coeffs) in m.iter().enumerate() {
        let terms = vars.iter().copied().zip(coeffs.iter().copied());
        rows.push(Affine::from_terms(terms, r as i64 - 3).unwrap());
    }
    for &v in &vars {
        rows.push(Affine::var(v));
        rows.push(Affine::constant(9).sub(&Affine::var(v)).unwrap());
    }
    (rows, vars)
}

fn benches(c: &mut Criterion) {
    let f = paper();
    c.bench_function("derive paper example, all four arguments", |b| {
        b.iter(|| {
            for arg in ["a", "b", "c", "d"] {
                black_box(f.derive(arg).unwrap());
            }
        })
    });
    c.bench_function("derive paper example by d", |b| {
        b.iter(|| black_box(f.derive("d").unwrap()))
    });
    let conv = conv2d();
    c.bench_function("derive conv2d stride 2 dilation 2 by x", |b| {
        b.iter(|| black_box(conv.derive("x").unwrap()))
    });
    c.bench_function("derive conv2d stride 2 dilation 2 by w", |b| {
        b.iter(|| black_box(conv.derive("w").unwrap()))
    });
    c.bench_function("parse paper example", |b| b.iter(|| black_box(paper())));
    let m = matrix6();
    c.bench_function("smith normal form 6x6", |b| {
        b.iter(|| black_box(smith_normal_form(&m).unwrap()))
    });
    let (rows, vars) = fm_rows();
    c.bench_function("fourier-motzkin 6 variables 18 rows", |b| {
        b.iter(|| black_box(eliminate(&rows, &vars).unwrap()))
    });
}

criterion_group! {
    name = symbolic;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = benches
}
criterion_main!(symbolic);
