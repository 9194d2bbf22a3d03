//! The wide executor against the f32x4 code: the same bits for every
//! element (NaN payloads aside), at every width the host has, whatever the
//! length and wherever the thread pool cuts the parallel loop.

use super::program::{is_cheap, Op, Program, Step};
use super::Width;
use crate::cpu::test_kernels::{kernel, mark_innermost, run_at, Ran};
use crate::cpu::wide_loop::MIN_TRIPS;
use crate::kernel::{Kernel, Stmt};
use crate::symbolic::IndexFn;

/// Values over the functions' interesting ranges, special values included.
fn data(n: usize, seed: u64) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -1e-40,
        88.72,
        88.73,
        -103.0,
        -120.0,
        0.624,
        0.626,
        f32::MIN_POSITIVE,
        f32::MAX,
        -1.0,
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|k| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if k % 11 == 3 {
                special[(s >> 60) as usize]
            } else {
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 12.0
            }
        })
        .collect()
}

fn widths() -> Vec<Width> {
    let w: Vec<Width> = [Width::Avx2, Width::Avx512]
        .into_iter()
        .filter(|&w| w <= Width::supported())
        .collect();
    if w.is_empty() {
        eprintln!("skipped: this host has neither AVX2+FMA nor AVX-512");
    }
    w
}

/// The same bits, up to the sign and payload of NaNs: when both operands
/// of an addition are NaN, x86 returns the first, and Cranelift may swap
/// commutative operands.
fn same_bits(a: &[f32], b: &[f32], what: &str) {
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        if !(x.is_nan() && y.is_nan()) {
            assert_eq!(x.to_bits(), y.to_bits(), "{what}: element {k}: {x} vs {y}");
        }
    }
}

const BODIES: &[&str] = &[
    "tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))",
    "log (abs x[i]) + log10 (x[i] * x[i] + 1)",
    "exp x[i]",
    "sqrt (abs x[i]) / (x[i] ** -3 + 2)",
    "max (x[i], y[i]) / min (y[i], x[i]) + sgn x[i] * floor (y[i])",
    "erf x[i] + sin (y[i]) * cos (x[i]) + atan x[i] + log1p (abs y[i]) + expm1 (x[i] / 8)",
    "x[i] ** y[i] + tanh (y[i])",
    "if {x[i] > y[i]} then (exp (x[i] - y[i])) else (tanh (y[i]) / 3)",
    "if {x[i] != x[i]} then (1) else (sigmoid x[i])",
];

#[test]
fn every_width_computes_the_f32x4_bits() {
    for len in [1, 5, 16, 255, 256, 257, 1000] {
        let (x, y) = (data(len, 1), data(len, 2));
        for body in BODIES {
            let src = format!("f[i] = {body}");
            let k = kernel(&src, &[("x", &[len][..]), ("y", &[len][..])]);
            let Ran {
                out: narrow,
                wide_loops: none,
                ..
            } = run_at(&k, &[&x, &y], Width::F32x4, &[]);
            assert_eq!(none, 0, "f32x4 ran the executor");
            for w in widths() {
                let Ran {
                    out: wide,
                    wide_loops: loops,
                    ..
                } = run_at(&k, &[&x, &y], w, &[len / 3, len / 3 + 1, 2 * len / 3]);
                let expect = len as u64 >= MIN_TRIPS
                    && Program::build(&vector_loop(&k)).is_some_and(|p| p.prefers_wide());
                assert_eq!(loops, expect as u32, "{src} at {w:?}");
                same_bits(&wide, &narrow, &format!("{src}, {len} elements, {w:?}"));
            }
        }
    }
}

/// Dense sweeps where `exp` overflows and where its results are
/// subnormal: AVX-512's one-instruction scaling (`vscalefps`) rounds as
/// the two-step scaling of the f32x4 code does.
#[test]
fn exp_rounds_alike_where_it_overflows_and_underflows() {
    let sweep = |lo: f32, hi: f32, n: usize| -> Vec<f32> {
        (0..=n)
            .map(|k| lo + (hi - lo) * k as f32 / n as f32)
            .collect()
    };
    for xs in [sweep(-110.0, -85.0, 50_000), sweep(85.0, 90.0, 20_000)] {
        let k = kernel(
            "f[i] = exp x[i] + sigmoid (x[i] / 2)",
            &[("x", &[xs.len()][..])],
        );
        let Ran {
            out: narrow,
            wide_loops: _,
            ..
        } = run_at(&k, &[&xs], Width::F32x4, &[]);
        for w in widths() {
            let Ran {
                out: wide,
                wide_loops: loops,
                ..
            } = run_at(&k, &[&xs], w, &[]);
            assert_eq!(loops, 1);
            same_bits(&wide, &narrow, &format!("exp sweep at {w:?}"));
        }
    }
}

/// The one vector loop of a one-dimensional kernel.
fn vector_loop(k: &Kernel) -> crate::kernel::Loop {
    let mut found = None;
    crate::kernel::visit_stmts(&k.body, &mut |s| {
        if let Stmt::For(l) = s {
            if l.vector {
                found = Some(l.clone());
            }
        }
    });
    found.expect("a vector loop")
}

/// Rows: the inner loop runs on the executor with per-row scalars (a
/// register computed outside it, a load invariant in it) and per-row
/// stream offsets; rows are cut among "threads" anywhere.
#[test]
fn rows_with_scalars_and_broadcasts() {
    let (rows, cols) = (7, 300);
    let x = data(rows * cols, 3);
    let b = data(rows, 4);
    let c = data(cols, 5);
    let src = "f[i; j] = exp (x[i; j] * b[i] / 16) / (1 + exp (c[j])) + tanh (b[i] * 2)";
    let k = kernel(
        src,
        &[
            ("x", &[rows, cols][..]),
            ("b", &[rows][..]),
            ("c", &[cols][..]),
        ],
    );
    let Ran {
        out: narrow,
        wide_loops: _,
        ..
    } = run_at(&k, &[&x, &b, &c], Width::F32x4, &[]);
    for w in widths() {
        let Ran {
            out: wide,
            wide_loops: loops,
            ..
        } = run_at(&k, &[&x, &b, &c], w, &[1, 2, 5]);
        assert_eq!(loops, 1, "{src} at {w:?}");
        same_bits(&wide, &narrow, &format!("{src} at {w:?}"));
    }
}

#[test]
fn slots_are_reused_and_dead_steps_dropped() {
    // A chain of 40 operations needs two slots: each step frees the
    // one it reads.
    let mut body = "x[i]".to_string();
    for k in 0..40 {
        body = format!("exp ({body} * {})", k % 3 + 2);
    }
    let k = kernel(&format!("f[i] = {body}"), &[("x", &[64][..])]);
    let p = Program::build(&vector_loop(&k)).unwrap();
    assert_eq!(p.steps.len(), 80);
    assert!(p.slots <= 2, "{} slots", p.slots);
    assert!(p.prefers_wide());
    // A copy needs no step.
    let k = kernel("f[i] = x[i]", &[("x", &[64][..])]);
    let p = Program::build(&vector_loop(&k)).unwrap();
    assert!(p.steps.is_empty() && p.copy.is_some());
    assert!(!p.prefers_wide());
}

#[test]
fn additions_and_multiplications_keep_the_f32x4_code() {
    let k = kernel(
        "f[i] = x[i] * 3 + x[i] * x[i] - 2 / x[i]",
        &[("x", &[64][..])],
    );
    let p = Program::build(&vector_loop(&k)).unwrap();
    assert!(p.steps.iter().any(|s| matches!(
        s,
        Step::Lanes {
            op: Op::Binary(crate::symbolic::BinaryOp::Div, ..),
            ..
        }
    )));
    assert!(!p.prefers_wide());
}

/// The chain's derivative: its three transcendental functions are
/// scheduled together, so its 24 cheap steps form two compiled runs (one
/// before, one after), and only the values read after a run are stored.
#[test]
fn cheap_steps_are_grouped_into_few_runs() {
    let f = IndexFn::parse(&format!("f[i] = {}", BODIES[0]), &[("x", &[64][..])]).unwrap();
    let df = f.derive("x").unwrap();
    let mut k = crate::kernel::lower(&df).unwrap();
    mark_innermost(&mut k.body);
    let p = Program::build(&vector_loop(&k)).unwrap();
    let lanes = p
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Lanes { op, .. } if !is_cheap(op)))
        .count();
    assert_eq!(lanes, 3, "{:?}", p.steps);
    let runs = p.segments();
    assert_eq!(runs.len(), 2, "{runs:?}");
    // In the last run, only the output leaves it.
    let last = runs[1].clone();
    let stored: Vec<usize> = last.clone().filter(|&k| p.escapes(k, last.end)).collect();
    assert_eq!(stored, vec![last.end - 1], "{:?}", p.steps);
    assert!(p.prefers_wide());
}

/// Marks every sum whose body has no loop a vector sum, as the planner
/// marks a contiguous one.
fn mark_sums(stmts: &mut [Stmt]) {
    for s in stmts {
        match s {
            Stmt::For(l) => mark_sums(&mut l.body),
            Stmt::Reduce {
                op: crate::symbolic::ReduceOp::Sum,
                body,
                ..
            } if !body
                .body
                .iter()
                .any(|b| matches!(b, Stmt::For(_) | Stmt::Reduce { .. })) =>
            {
                body.vector = true
            }
            _ => {}
        }
    }
}

/// Sums of a transcendental body run on the executor: within f32
/// rounding of the f64 sum, the same bits wherever the rows are cut, and
/// empty and short sums right.
#[test]
fn sums_run_wide_in_a_fixed_order() {
    let rows = 5;
    for len in [1, 3, 16, 63, 64, 65, 255, 256, 257, 1000] {
        let x = data(rows * len, 7);
        let x: Vec<f32> = x
            .iter()
            .map(|v| {
                if v.is_finite() {
                    v.clamp(-20.0, 20.0)
                } else {
                    0.5
                }
            })
            .collect();
        let y = data(len, 8);
        let y: Vec<f32> = y
            .iter()
            .map(|v| {
                if v.is_finite() {
                    v.clamp(-3.0, 3.0)
                } else {
                    1.0
                }
            })
            .collect();
        let src = format!(
            "f[i] = sum{{k}}_0^{} (tanh (x[i; k]) * y[k] + exp (y[k] / 4))",
            len - 1
        );
        let f = IndexFn::parse(&src, &[("x", &[rows, len][..]), ("y", &[len][..])]).unwrap();
        let mut k = crate::kernel::lower(&f).unwrap();
        mark_sums(&mut k.body);
        let exact: Vec<f64> = (0..rows)
            .map(|i| {
                (0..len)
                    .map(|j| {
                        let (a, b) = (x[i * len + j] as f64, y[j] as f64);
                        a.tanh() * b + (b / 4.0).exp()
                    })
                    .sum()
            })
            .collect();
        for w in widths() {
            let Ran {
                out: whole,
                wide_loops: loops,
                ..
            } = run_at(&k, &[&x, &y], w, &[]);
            assert_eq!(loops, (len as u64 >= MIN_TRIPS) as u32, "{src} at {w:?}");
            let Ran {
                out: cut,
                wide_loops: _,
                ..
            } = run_at(&k, &[&x, &y], w, &[1, 3]);
            same_bits(&whole, &cut, &src);
            for (i, (&got, &e)) in whole.iter().zip(&exact).enumerate() {
                let scale: f64 = (0..len).map(|j| 1.0 + (y[j] as f64).abs() * 2.0).sum();
                assert!(
                    (got as f64 - e).abs() <= 4e-7 * scale,
                    "{src} at {w:?}, row {i}: {got} vs {e}"
                );
            }
        }
    }
}

#[test]
fn index_values_and_random_draws_keep_the_f32x4_code() {
    let k = kernel("f[i] = exp (x[i] * i)", &[("x", &[64][..])]);
    assert!(Program::build(&vector_loop(&k)).is_none());
}
