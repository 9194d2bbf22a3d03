//! Derivatives of index functions against central finite differences (f64),
//! for every kind of index map and reduction the symbolic core supports, and
//! Hessian-vector products (derivatives of derivatives).

mod common;
use common::{cases, check_gradients, check_hvp};

const TOL: f64 = 1e-7;

macro_rules! gradient_tests {
    ($($name:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check_gradients(&cases::named(stringify!($name)), 7, TOL);
            }
        )*
    };
}

gradient_tests! {
    broadcast_outer;
    diagonal;
    hankel;
    toeplitz;
    flatten;
    strided;
    skewed_2d;
    three_way_sums;
    rank_deficient;
    triangular_sum;
    banded_sum;
    nested_dependent_sums;
    empty_ranges;
    same_argument_twice;
    shadowed_sum_names;
    conv1d_stride2_dilation2;
    conv2d_stride2_dilation2;
    average_pooling;
    max_pooling;
    matmul;
    batched_matmul;
    einsum_two_index_contraction;
    softmax;
    stable_softmax_with_row_max;
    logsumexp;
    layer_norm;
    attention;
    causal_attention;
    scalar_output;
    index_values_as_numbers;
    padding_with_guards;
    variable_exponent;
    relu_of_matmul;
    elementwise_chain;
    unary_functions;
    min_reduction;
    equality_guard_with_else;
    is_int_guard;
    upsampling;
    division;
    mse_scalar;
    cross_entropy_one_hot;
    autocorrelation;
    transpose_broadcast;
    value_select;
    mixed_radix_stride;
    two_strides;
    value_max_min;
    shifted_window;
}

#[test]
fn at_least_forty_functions_are_covered() {
    let n = cases::all().len();
    assert!(n >= 40, "{n} cases");
}

/// Hessian-vector products for nonlinear functions, including a
/// non-unimodular map, dependent ranges, reductions and attention.
#[test]
fn hessian_vector_products() {
    let pick = [
        ("diagonal", "x"),
        ("strided", "x"),
        ("two_strides", "y"),
        ("triangular_sum", "x"),
        ("nested_dependent_sums", "x"),
        ("banded_sum", "w"),
        ("softmax", "x"),
        ("logsumexp", "x"),
        ("layer_norm", "x"),
        ("attention", "q"),
        ("causal_attention", "k"),
        ("elementwise_chain", "x"),
        ("autocorrelation", "x"),
        ("variable_exponent", "y"),
        ("mixed_radix_stride", "x"),
        ("same_argument_twice", "x"),
    ];
    for (name, arg) in pick {
        check_hvp(&cases::named(name), arg, 11, 1e-6);
    }
}

/// Reading the saved forward output gives the same derivative as
/// recomputing it, for every case and argument, and the printed form
/// re-parses.
#[test]
fn derivatives_reusing_the_saved_output_agree() {
    use common::{assert_close, eval, random_inputs, random_vec, with};
    use rand::{rngs::StdRng, SeedableRng};
    for (name, c) in cases::all() {
        let f = c.parse();
        let mut rng = StdRng::seed_from_u64(3);
        let inputs = random_inputs(&f, &mut rng, c.positive);
        let n_out: usize = f.output_shape().iter().product();
        let base = with(
            &inputs,
            &format!("d{}", f.name()),
            random_vec(&mut rng, n_out, false),
        );
        let saved = with(&base, f.name(), eval(&f, &inputs));
        for a in f.args() {
            let plain = f.derive(&a.name).unwrap();
            let reusing = f.derive_reusing_output(&a.name).unwrap();
            reusing.check_bounds().unwrap();
            assert!(
                reusing.node_count() <= plain.node_count() + 1,
                "{name}: {reusing}"
            );
            let what = format!("{name} d/d{}: {reusing}", a.name);
            assert_close(&what, &eval(&reusing, &saved), &eval(&plain, &base), 1e-12);
        }
    }
}

/// `detach` is the value, held constant by differentiation: the derivative
/// of `x · detach(x)` is `detach(x)`, not `2x`, and the shift of a stable
/// log-sum-exp may be detached without changing its derivative (the
/// value does not depend on the shift).
#[test]
fn detach_is_the_value_with_a_zero_derivative() {
    use tenjin::symbolic::IndexFn;
    let f = IndexFn::parse("f[i] = x[i] * detach (x[i])", &[("x", &[3][..])]).unwrap();
    let x = [1.5, -2.0, 3.0];
    assert_eq!(f.eval_f64(&[("x", &x[..])]).unwrap(), vec![2.25, 4.0, 9.0]);
    let dx = f.derive("x").unwrap();
    let g = dx
        .eval_f64(&[("x", &x[..]), ("df", &[1.0, 1.0, 1.0][..])])
        .unwrap();
    assert_eq!(g, x.to_vec());
    // lse with the shift detached and with it differentiated: the same
    // gradient (the softmax), at rows with and without ties.
    let lse = |shift: &str| {
        IndexFn::parse(
            &format!(
                "l[i] = {shift} + log sum{{k}}_0^3 (exp (x[i; k] - {shift}))",
                shift = shift.replace("M", "max{m}_0^3 (x[i; m])")
            ),
            &[("x", &[2, 4][..])],
        )
        .unwrap()
    };
    let xs = [0.5, 2.0, -1.0, 2.0, 3.0, 3.0, 3.0, 3.0];
    let at = |f: IndexFn| {
        f.derive("x")
            .unwrap()
            .eval_f64(&[("x", &xs[..]), ("dl", &[1.0, 1.0][..])])
            .unwrap()
    };
    let (detached, plain) = (at(lse("detach (M)")), at(lse("M")));
    for (a, b) in detached.iter().zip(&plain) {
        assert!((a - b).abs() < 1e-15, "{detached:?} vs {plain:?}");
    }
    assert!((detached[4] - 0.25).abs() < 1e-15);
}
