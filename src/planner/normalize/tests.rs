//! The rules of the table, each on a function it fits, checked against the
//! interpreter.

use super::*;

fn parse(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
    IndexFn::parse_with_sizes(src, args, sizes).unwrap()
}

fn data(n: usize, seed: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64) * 0.61 + seed).sin()).collect()
}

/// `src` normalises to `want`, and the values agree.
fn normalizes_to(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)], want: &str) {
    let f = parse(src, args, sizes);
    assert_eq!(normalize(&f).to_string(), want);
    same_values(&f);
}

/// Normalised and original agree (f64, relative 1e-12) on data.
fn same_values(f: &IndexFn) {
    let g = normalize(f);
    let bufs: Vec<Vec<f64>> = f
        .args()
        .iter()
        .enumerate()
        .map(|(k, a)| data(a.shape.iter().product(), k as f64))
        .collect();
    let inputs: Vec<(&str, &[f64])> = f
        .args()
        .iter()
        .zip(&bufs)
        .map(|(a, b)| (a.name.as_str(), &b[..]))
        .collect();
    let (a, b) = (f.eval_f64(&inputs).unwrap(), g.eval_f64(&inputs).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= 1e-12 * x.abs().max(1.0),
            "{f}\n{g}\n{x} {y}"
        );
    }
    g.check_bounds().unwrap();
}

#[test]
fn invariant_factors_and_guards_leave_sums() {
    normalizes_to(
        "f[i; k] = sum{j}_0^3 (-(a[i; j] * b[i; k]) / c[k])",
        &[("a", &[2, 4]), ("b", &[2, 5]), ("c", &[5])],
        &[],
        "f[i; k] = -(1 / c[k] * b[i; k] * sum{j}_0^3 (a[i; j]))",
    );
    normalizes_to(
        "f[i] = sum{j}_0^3 (if {x[i] > 0} then (a[i; j]) else (0))",
        &[("x", &[2]), ("a", &[2, 4])],
        &[],
        "f[i] = if {x[i] > 0} then (sum{j}_0^3 (a[i; j])) else (0)",
    );
}

#[test]
fn masks_factor_out_of_guarded_products() {
    // The derivative of a fused layer with respect to x.
    normalizes_to(
            "dx[b; k] = sum{o}_0^3 (if {sum{q}_0^4 (x[b; q] * w[o; q]) >= 0} then (dh[b; o] * w[o; k]) else (0))",
            &[("x", &[2, 5]), ("w", &[4, 5]), ("dh", &[2, 4])],
            &[],
            "dx[b; k] = sum{o}_0^3 (if {sum{q}_0^4 (x[b; q] * w[o; q]) >= 0} then (dh[b; o]) else (0) * w[o; k])",
        );
}

#[test]
fn reads_valid_only_inside_a_possibly_empty_sum_stay_inside() {
    // x[i - 1] is in bounds only where 0..=i-1 is non-empty.
    let f = parse(
        "f[i] = sum{k}_0^(i - 1) (x[i - 1] * y[k])",
        &[("x", &[4]), ("y", &[4])],
        &[("i", 4)],
    );
    assert_eq!(normalize(&f).to_string(), f.to_string());
    same_values(&f);
    // Always in bounds: it may leave.
    normalizes_to(
        "f[i] = sum{k}_0^(i - 1) (x[i] * y[k])",
        &[("x", &[4]), ("y", &[4])],
        &[("i", 4)],
        "f[i] = sum{k}_0^(-1 + i) (y[k]) * x[i]",
    );
}

#[test]
fn nests_are_summed_in_elimination_order() {
    // The normaliser term of attention's key gradient: summing i
    // innermost (as derivation nests it) factors nothing out.
    let f = parse(
            "dk[a; b] = sum{j}_0^5 (sum{d}_0^2 (sum{i}_0^4 (do[i; d] * v[j; d] * e[i; j] * z[i] * e[i; a] * q[i; b])))",
            &[("do", &[5, 3]), ("v", &[6, 3]), ("e", &[5, 6]), ("z", &[5]), ("q", &[5, 2])],
            &[("a", 6)],
        );
    let g = normalize(&f);
    assert_eq!(
            g.to_string(),
            "dk[a; b] = sum{i}_0^4 (sum{j}_0^5 (sum{d}_0^2 (do[i; d] * v[j; d]) * e[i; j]) * z[i] * q[i; b] * e[i; a])"
        );
    same_values(&f);
}
