//! The catalogue of index functions the test suites share: every kind of
//! index map, reduction and guard the symbolic core supports.

use super::{case, Case};

/// Every case with its name.
pub fn all() -> Vec<(&'static str, Case)> {
    vec![
        ("broadcast_outer", case("f[i; j] = x[i] * y[j]", &[("x", &[3]), ("y", &[4])])),
        ("diagonal", case("f[i] = x[i; i] ** 2", &[("x", &[4, 4])])),
        ("hankel", case("f[i; j] = x[i + j] * y[i; j]", &[("x", &[6]), ("y", &[3, 4])])),
        ("toeplitz", case("f[i; j] = x[i - j + 3] ** 2", &[("x", &[7])]).sizes(&[("i", 4), ("j", 4)])),
        ("flatten", case("f[i; j] = x[4*i + j] ** 3", &[("x", &[12])]).sizes(&[("i", 3), ("j", 4)])),
        ("strided", case("f[i] = x[2*i] ** 2", &[("x", &[7])]).sizes(&[("i", 4)])),
        ("skewed_2d", case("f[i; j] = x[i + 2*j; 3*i + j] ** 2", &[("x", &[4, 5])]).sizes(&[("i", 2), ("j", 2)])),
        ("three_way_sums", case("f[i; j; k] = x[i + j; j + k; i + k] ** 2", &[("x", &[3, 3, 3])]).sizes(&[("i", 2), ("j", 2), ("k", 2)])),
        ("rank_deficient", case("f[i; j] = x[i + j; i + j] * y[i; j]", &[("x", &[5, 5]), ("y", &[3, 3])])),
        ("triangular_sum", case("f[i] = sum{k}_0^(i) (x[k] ** 2 * y[i; k])", &[("x", &[5]), ("y", &[5, 5])]).sizes(&[("i", 5)])),
        ("banded_sum", case("f[i] = sum{k}_(max [0; i - 1])^(min [4; i + 1]) (x[k] * w[k - i + 1])", &[("x", &[5]), ("w", &[3])]).sizes(&[("i", 5)])),
        ("nested_dependent_sums", case("f[i] = sum{j}_0^(i) (sum{k}_(j)^(i) (x[j; k] ** 2))", &[("x", &[4, 4])]).sizes(&[("i", 4)])),
        ("empty_ranges", case("f[i] = sum{k}_(i)^(2) (x[k] ** 2) + y[i]", &[("x", &[3]), ("y", &[5])])),
        ("same_argument_twice", case("f[i; j] = x[i; j] * x[j; i]", &[("x", &[3, 3])])),
        ("shadowed_sum_names", case("f[i] = sum{k}_0^2 (x[i; k] * sum{k}_0^2 (y[k] ** 2))", &[("x", &[3, 3]), ("y", &[3])])),
        ("conv1d_stride2_dilation2", case("f[b; o; t] = sum{c}_0^1 (sum{k}_0^2 (x[b; c; 2*t + 2*k] * w[o; c; k]))", &[("x", &[2, 2, 11]), ("w", &[3, 2, 3])]).sizes(&[("t", 4)])),
        ("conv2d_stride2_dilation2", case("f[o; u; v] = sum{c}_0^1 (sum{p}_0^1 (sum{q}_0^1 (img[c; 2*u + 2*p; 2*v + 2*q] * w[o; c; p; q])))", &[("img", &[2, 7, 7]), ("w", &[2, 2, 2, 2])]).sizes(&[("u", 3), ("v", 3)])),
        ("average_pooling", case("f[i; j] = sum{p}_0^1 (sum{q}_0^1 (x[2*i + p; 2*j + q])) / 4", &[("x", &[4, 6])]).sizes(&[("i", 2), ("j", 3)])),
        ("max_pooling", case("f[i] = max{k}_0^2 (x[2*i + k])", &[("x", &[7])]).sizes(&[("i", 3)])),
        ("matmul", case("f[i; j] = sum{k}_0^3 (a[i; k] * b[k; j])", &[("a", &[3, 4]), ("b", &[4, 5])])),
        ("batched_matmul", case("f[n; i; j] = sum{k}_0^2 (a[n; i; k] * b[n; k; j])", &[("a", &[2, 3, 3]), ("b", &[2, 3, 4])])),
        ("einsum_two_index_contraction", case("f[i] = sum{j}_0^2 (sum{k}_0^3 (a[i; j; k] * b[j; k]))", &[("a", &[2, 3, 4]), ("b", &[3, 4])])),
        ("softmax", case("f[i; j] = exp x[i; j] / sum{k}_0^3 (exp x[i; k])", &[("x", &[2, 4])])),
        ("stable_softmax_with_row_max", case("f[i; j] = exp (x[i; j] - max{k}_0^3 (x[i; k])) / sum{k}_0^3 (exp (x[i; k] - max{m}_0^3 (x[i; m])))", &[("x", &[2, 4])])),
        ("logsumexp", case("f[i] = log (sum{k}_0^3 (exp x[i; k]))", &[("x", &[2, 4])])),
        ("layer_norm", case("f[i; j] = (x[i; j] - sum{k}_0^3 (x[i; k]) / 4) / sqrt (sum{k}_0^3 ((x[i; k] - sum{m}_0^3 (x[i; m]) / 4) ** 2) / 4 + 0.00001) * g[j] + b[j]", &[("x", &[2, 4]), ("g", &[4]), ("b", &[4])])),
        ("attention", case("f[i; d] = sum{j}_0^3 (exp (sum{e}_0^1 (q[i; e] * k[j; e])) / sum{l}_0^3 (exp (sum{e}_0^1 (q[i; e] * k[l; e]))) * v[j; d])", &[("q", &[3, 2]), ("k", &[4, 2]), ("v", &[4, 2])])),
        ("causal_attention", case("f[i; d] = sum{j}_0^(i) (exp (sum{e}_0^1 (q[i; e] * k[j; e])) / sum{l}_0^(i) (exp (sum{e}_0^1 (q[i; e] * k[l; e]))) * v[j; d])", &[("q", &[4, 2]), ("k", &[4, 2]), ("v", &[4, 2])])),
        ("scalar_output", case("f[] = sum{i}_0^3 (x[i] ** 2) + s[]", &[("x", &[4]), ("s", &[])])),
        ("index_values_as_numbers", case("f[i; j] = x[i; j] * (i - j) + idx(i + 2*j) * x[i; j] ** 2", &[("x", &[3, 3])])),
        ("padding_with_guards", case("f[i] = sum{k}_0^2 ((if {i + k - 1 >= 0} then (if {i + k - 1 <= 4} then (x[i + k - 1]) else (0)) else (0)) * w[k])", &[("x", &[5]), ("w", &[3])]).sizes(&[("i", 5)])),
        ("variable_exponent", case("f[i] = x[i] ** y[i]", &[("x", &[3]), ("y", &[3])]).positive()),
        ("relu_of_matmul", case("f[i; j] = max(sum{k}_0^2 (a[i; k] * b[k; j]), 0)", &[("a", &[3, 3]), ("b", &[3, 4])])),
        ("elementwise_chain", case("f[i] = tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))", &[("x", &[6])])),
        ("unary_functions", case("f[i] = sin x[i] + cos x[i] * abs x[i] + log10 (x[i] + 2) + sqrt (x[i] + 2) + sgn x[i]", &[("x", &[6])])),
        ("min_reduction", case("f[i] = min{k}_0^3 (x[i; k] * y[k])", &[("x", &[3, 4]), ("y", &[4])])),
        ("equality_guard_with_else", case("f[i; j] = if {i = j} then (x[i] ** 2) else (y[i; j] * x[j])", &[("x", &[3]), ("y", &[3, 3])])),
        ("is_int_guard", case("f[i] = if {1/2*i is int} then (x[i] ** 2) else (-x[i])", &[("x", &[5])])),
        ("upsampling", case("f[i] = sum{k}_0^1 (y[2*i + k] * x[i])", &[("x", &[3]), ("y", &[6])])),
        ("division", case("f[i; j] = a[i; j] / (1 + b[j] ** 2)", &[("a", &[2, 3]), ("b", &[3])])),
        ("mse_scalar", case("f[] = sum{i}_0^3 (sum{j}_0^2 ((a[i; j] - b[i; j]) ** 2)) / 12", &[("a", &[4, 3]), ("b", &[4, 3])])),
        ("cross_entropy_one_hot", case("f[] = -sum{i}_0^1 (sum{c}_0^2 (y[i; c] * (x[i; c] - log (sum{k}_0^2 (exp x[i; k])))))", &[("x", &[2, 3]), ("y", &[2, 3])])),
        ("autocorrelation", case("f[i] = sum{j}_0^2 (x[i + j] * x[j])", &[("x", &[5])]).sizes(&[("i", 3)])),
        ("transpose_broadcast", case("f[i; j; k] = x[k; i] * y[j]", &[("x", &[4, 2]), ("y", &[3])])),
        ("value_select", case("f[i] = if {x[i] > y[i]} then (x[i] * y[i]) else (x[i] + y[i])", &[("x", &[5]), ("y", &[5])])),
        ("mixed_radix_stride", case("f[i] = sum{j}_0^1 (sum{k}_0^1 (x[3*i + 2*j + k] ** 2))", &[("x", &[10])]).sizes(&[("i", 3)])),
        ("two_strides", case("f[i] = x[2*i] * y[3*i]", &[("x", &[5]), ("y", &[7])]).sizes(&[("i", 3)])),
        ("value_max_min", case("f[i] = max(x[i], y[i]) * min(x[i], 2 * y[i])", &[("x", &[5]), ("y", &[5])])),
        ("shifted_window", case("f[i] = x[i + 2] * x[i]", &[("x", &[9])]).sizes(&[("i", 7)])),
    ]
}

/// The case with this name.
pub fn named(name: &str) -> Case {
    all()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no case {name}"))
        .1
}
