//! Index functions the way users write them, one line each, parametrised
//! by the length of the dimension they reduce: the kinds of function the
//! cheap-gradient principle is checked on (issue "Staged execution").

use tenjin::symbolic::IndexFn;

/// One family of user-written functions, parametrised by the length of the
/// reduced dimension.
/// The function's text, argument shapes and explicit output sizes.
pub type Built = (
    String,
    Vec<(&'static str, Vec<usize>)>,
    Vec<(&'static str, usize)>,
);

pub struct Kind {
    pub name: &'static str,
    /// The function's text and argument shapes for a reduced length `n`.
    pub build: fn(usize) -> Built,
}

pub fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "dense layer, fused bias and relu",
            build: |k| {
                (
                    format!(
                        "h[b; o] = max(sum{{k}}_0^{} (x[b; k] * w[o; k]) + c[o], 0)",
                        k - 1
                    ),
                    vec![("x", vec![6, k]), ("w", vec![5, k]), ("c", vec![5])],
                    vec![],
                )
            },
        },
        Kind {
            name: "softmax over rows",
            build: |n| {
                let l = n - 1;
                (
                    format!("p[i; j] = exp (x[i; j] - max{{m}}_0^{l} (x[i; m])) / sum{{k}}_0^{l} (exp (x[i; k] - max{{m}}_0^{l} (x[i; m])))"),
                    vec![("x", vec![4, n])],
                    vec![],
                )
            },
        },
        Kind {
            name: "log-softmax over rows",
            build: |n| {
                let l = n - 1;
                (
                    format!("p[i; j] = x[i; j] - max{{m}}_0^{l} (x[i; m]) - log (sum{{k}}_0^{l} (exp (x[i; k] - max{{m}}_0^{l} (x[i; m]))))"),
                    vec![("x", vec![4, n])],
                    vec![],
                )
            },
        },
        Kind {
            name: "logsumexp over rows",
            build: |n| {
                let l = n - 1;
                (
                    format!("l[i] = max{{m}}_0^{l} (x[i; m]) + log (sum{{k}}_0^{l} (exp (x[i; k] - max{{m}}_0^{l} (x[i; m]))))"),
                    vec![("x", vec![4, n])],
                    vec![],
                )
            },
        },
        Kind {
            name: "layer norm over rows",
            build: |d| {
                let l = d - 1;
                let mean = |v: &str| format!("sum{{{v}}}_0^{l} (x[i; {v}]) / {d}");
                (
                    format!(
                        "y[i; j] = (x[i; j] - {}) / sqrt (sum{{k}}_0^{l} ((x[i; k] - {}) ** 2) / {d} + 0.00001) * g[j] + b[j]",
                        mean("m"),
                        mean("q")
                    ),
                    vec![("x", vec![3, d]), ("g", vec![d]), ("b", vec![d])],
                    vec![],
                )
            },
        },
        Kind {
            name: "attention in one expression",
            build: |n| {
                let l = n - 1;
                (
                    format!("o[i; d] = sum{{j}}_0^{l} (exp (sum{{e}}_0^3 (q[i; e] * k[j; e])) / sum{{m}}_0^{l} (exp (sum{{e}}_0^3 (q[i; e] * k[m; e]))) * v[j; d])"),
                    vec![("q", vec![16, 4]), ("k", vec![n, 4]), ("v", vec![n, 3])],
                    vec![],
                )
            },
        },
        Kind {
            name: "convolution with fused bias and relu",
            build: |c| {
                (
                    format!("y[b; o; t] = max(sum{{c}}_0^{} (sum{{k}}_0^2 (x[b; c; t + k] * w[o; c; k])) + bias[o], 0)", c - 1),
                    vec![("x", vec![2, c, 9]), ("w", vec![3, c, 3]), ("bias", vec![3])],
                    vec![("t", 7)],
                )
            },
        },
        Kind {
            name: "cross-entropy loss in one expression",
            build: |v| {
                let l = v - 1;
                (
                    format!("l[] = sum{{b}}_0^3 (max{{m}}_0^{l} (y[b; m]) + log (sum{{c}}_0^{l} (exp (y[b; c] - max{{m}}_0^{l} (y[b; m])))) - sum{{c}}_0^{l} (t[b; c] * y[b; c])) / 4"),
                    vec![("y", vec![4, v]), ("t", vec![4, v])],
                    vec![],
                )
            },
        },
        Kind {
            name: "mean squared error in one expression",
            build: |n| {
                (
                    format!(
                        "l[] = sum{{b}}_0^3 (sum{{j}}_0^{} ((y[b; j] - t[b; j]) ** 2)) / {}",
                        n - 1,
                        4 * n
                    ),
                    vec![("y", vec![4, n]), ("t", vec![4, n])],
                    vec![],
                )
            },
        },
        Kind {
            name: "Gram matrix",
            build: |n| {
                (
                    format!("g[i; j] = sum{{k}}_0^{} (x[i; k] * x[j; k])", n - 1),
                    vec![("x", vec![5, n])],
                    vec![],
                )
            },
        },
        Kind {
            name: "RBF kernel matrix",
            build: |n| {
                (
                    format!(
                        "r[i; j] = exp (-sum{{d}}_0^{} ((x[i; d] - y[j; d]) ** 2) / 2)",
                        n - 1
                    ),
                    vec![("x", vec![5, n]), ("y", vec![4, n])],
                    vec![],
                )
            },
        },
    ]
}

pub fn function(kind: &Kind, n: usize) -> IndexFn {
    let (src, args, sizes) = (kind.build)(n);
    let shapes: Vec<(&str, &[usize])> = args.iter().map(|(a, s)| (*a, &s[..])).collect();
    IndexFn::parse_with_sizes(&src, &shapes, &sizes)
        .unwrap_or_else(|e| panic!("{}: {e}", kind.name))
}
