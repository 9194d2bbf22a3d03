//! The example of Urban & van der Smagt (2017), §6: our derivatives agree
//! with finite differences, have the paper's ranges and guards, and the
//! paper's printed derivatives parse and evaluate to the same values.

mod common;
use common::{assert_close, case, check_gradients, eval, random_inputs, random_vec, with, Case};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tenjin::symbolic::IndexFn;

const F: &str =
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";

const PAPER_DD: &str = "dd[dd_0] = sum{dd_z1}_(max [0; -2 + dd_0])^(min [4; dd_0]) (sum{dd_z0}_0^3 (((-(df[dd_0 + -dd_z1; dd_z0] * exp (-sum{k}_0^4 (((a[dd_0 + -dd_z1; k] + b[dd_z0; k]) ** 2 * c[dd_0 + -dd_z1; dd_0 + -dd_z1] + d[dd_0 + -dd_z1 + k] ** 3))))) * 3 * d[dd_0] ** (3 - 1))))";
const PAPER_DC: &str = "dc[dc_0; dc_1] = if {dc_0 + -dc_1 = 0} then (sum{dc_z1}_0^4 (sum{dc_z0}_0^3 (((a[dc_1; dc_z1] + b[dc_z0; dc_z1]) ** 2 * (-(df[dc_1; dc_z0] * exp (-sum{k}_0^4 (((a[dc_1; k] + b[dc_z0; k]) ** 2 * c[dc_1; dc_1] + d[dc_1 + k] ** 3)))))))) else (0)";
const PAPER_DA: &str = "da[da_0; da_1] = sum{da_z0}_0^3 (((-(df[da_0; da_z0] * exp (-sum{k}_0^4 (((a[da_0; k] + b[da_z0; k]) ** 2 * c[da_0; da_0] + d[da_0 + k] ** 3)))) * c[da_0; da_0] * 2 * (a[da_0; da_1] + b[da_z0; da_1]) ** (2 - 1)))";
const PAPER_DB: &str = "db[db_0; db_1] = sum{db_z0}_0^2 (((-(df[db_z0; db_0] * exp (-sum{k}_0^4 (((a[db_z0; k] + b[db_0; k]) ** 2 * c[db_z0; db_z0] + d[db_z0 + k] ** 3)))) * c[db_z0; db_z0] * 2 * (a[db_z0; db_1] + b[db_0; db_1]) ** (2 - 1)))";

fn paper_case() -> Case {
    case(
        F,
        &[("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])],
    )
}

const SHAPES: [(&str, &[usize]); 5] = [
    ("a", &[3, 5]),
    ("b", &[4, 5]),
    ("c", &[3, 3]),
    ("d", &[8]),
    ("df", &[3, 4]),
];

#[test]
fn all_four_derivatives_match_finite_differences() {
    let derivs = check_gradients(&paper_case(), 1, 1e-8);
    let names: Vec<&str> = derivs.iter().map(|d| d.name()).collect();
    assert_eq!(names, ["da", "db", "dc", "dd"]);
}

#[test]
fn dd_sums_over_the_kernel_with_the_dependent_range() {
    let f = paper_case().parse();
    let dd = f.derive("d").unwrap().to_string();
    assert!(
        dd.contains("sum{dd_z1}_(max [0; -2 + dd_0])^(min [4; dd_0])"),
        "dd should range over max(0, dd_0 - 2)..min(4, dd_0):\n{dd}"
    );
    assert!(dd.contains("sum{dd_z0}_0^3"), "{dd}");
}

#[test]
fn dc_carries_the_cokernel_guard() {
    let f = paper_case().parse();
    let dc = f.derive("c").unwrap();
    let text = dc.to_string();
    assert!(
        text.contains("if {dc_0 + -dc_1 = 0}") || text.contains("if {-dc_0 + dc_1 = 0}"),
        "dc should be guarded by dc_0 = dc_1:\n{text}"
    );
    let mut rng = StdRng::seed_from_u64(3);
    let inputs = random_inputs(&dc, &mut rng, false);
    let values = eval(&dc, &inputs);
    for r in 0..3 {
        for c in 0..3 {
            assert_eq!(
                values[r * 3 + c] == 0.0,
                r != c,
                "dc[{r}; {c}] = {}",
                values[r * 3 + c]
            );
        }
    }
}

#[test]
fn the_papers_printed_derivatives_evaluate_to_ours() {
    let f = paper_case().parse();
    let mut rng = StdRng::seed_from_u64(5);
    let mut inputs = random_inputs(&f, &mut rng, false);
    inputs = with(&inputs, "df", random_vec(&mut rng, 12, false));
    for (arg, printed) in [
        ("a", PAPER_DA),
        ("b", PAPER_DB),
        ("c", PAPER_DC),
        ("d", PAPER_DD),
    ] {
        // dc_0 appears alone in no argument dimension, so its size is given.
        let sizes: &[(&str, usize)] = if arg == "c" { &[("dc_0", 3)] } else { &[] };
        let theirs = IndexFn::parse_with_sizes(printed, &SHAPES, sizes)
            .unwrap_or_else(|e| panic!("{printed}: {e}"));
        let ours = f.derive(arg).unwrap();
        assert_eq!(theirs.output_shape(), ours.output_shape());
        assert_close(
            &format!("d{arg}"),
            &eval(&ours, &inputs),
            &eval(&theirs, &inputs),
            1e-12,
        );
    }
}

#[test]
fn forward_value_at_a_known_point() {
    // All inputs zero except d = 0.1: f = exp(-5 * 0.001) everywhere.
    let f = paper_case().parse();
    let zeros = |n| vec![0.0; n];
    let inputs = vec![
        ("a".to_string(), zeros(15)),
        ("b".to_string(), zeros(20)),
        ("c".to_string(), zeros(9)),
        ("d".to_string(), vec![0.1; 8]),
    ];
    let y = eval(&f, &inputs);
    assert_eq!(y.len(), 12);
    for v in y {
        assert!((v - (-0.005f64).exp()).abs() < 1e-15);
    }
}

#[test]
fn dd_reads_the_saved_forward_output_instead_of_recomputing_it() {
    let f = paper_case().parse();
    let dd = f.derive_reusing_output("d").unwrap().to_string();
    assert!(!dd.contains("exp"), "{dd}");
    assert!(dd.contains("f[dd_0 + -dd_z1; dd_z0]"), "{dd}");
}
