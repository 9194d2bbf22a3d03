//! The planner (issue "Staged execution"): staged programs compute what the
//! reference interpreter computes, and the functions users write get
//! derivatives whose work grows like the value's (the cheap-gradient
//! principle, checked on the plan's estimated work, without timing).

mod common;

use common::user_functions::{function, kinds};
use tenjin::planner::{plan_function, plan_node, NodePlan};
use tenjin::symbolic::IndexFn;
use tenjin::DType;

fn data(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 7 + seed * 13) as f64 * 0.37).sin() * 0.8 + 0.05)
        .collect()
}

fn close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let tol = 1e-12 * x.abs().max(y.abs()).max(1.0);
        assert!((x - y).abs() <= tol, "{what}: element {i}: {x} vs {y}");
    }
}

fn all_args(f: &IndexFn) -> Vec<usize> {
    (0..f.args().len()).collect()
}

/// Forward and backward programs, evaluated stage by stage with the
/// reference interpreter, equal the function and its derivatives.
#[test]
fn staged_programs_equal_the_reference_interpreter() {
    for kind in kinds() {
        let f = function(&kind, 8);
        let plan = plan_node(&f, &all_args(&f), DType::F64).unwrap();
        let inputs: Vec<Vec<f64>> = f
            .args()
            .iter()
            .enumerate()
            .map(|(k, a)| data(a.shape.iter().product(), k))
            .collect();
        let named: Vec<(&str, &[f64])> = f
            .args()
            .iter()
            .zip(&inputs)
            .map(|(a, d)| (a.name.as_str(), &d[..]))
            .collect();
        let value = f.eval_f64(&named).unwrap();
        let refs: Vec<&[f64]> = inputs.iter().map(|d| &d[..]).collect();
        let staged = plan.forward.eval_f64(&refs).unwrap();
        close(
            &staged[0],
            &value,
            &format!("{}: forward\n{}", kind.name, plan.forward),
        );
        let plain = plan_function(&f, DType::F64)
            .unwrap()
            .eval_f64(&refs)
            .unwrap();
        close(&plain[0], &value, &format!("{}: plain forward", kind.name));

        let df = data(value.len(), 99);
        let mut back_inputs: Vec<&[f64]> = refs.clone();
        back_inputs.push(&df);
        back_inputs.push(&value);
        let grads = plan.backward.eval_f64(&back_inputs).unwrap();
        for (g, d) in grads.iter().zip(&plan.derivatives) {
            let mut named = named.clone();
            named.push((d.args()[f.args().len()].name.as_str(), &df[..]));
            named.push((f.name(), &value[..]));
            let want = d.eval_f64(&named).unwrap();
            close(
                g,
                &want,
                &format!("{}: {}\n{}", kind.name, d.name(), plan.backward),
            );
        }
    }
}

/// The work of value and gradient together, with forward values the
/// backward reads counted once (runtime-efficient mode) or recomputed
/// (memory-efficient mode).
fn value_and_grad_work(plan: &NodePlan, recompute: bool) -> u64 {
    let forward = plan.forward.work();
    let backward = plan
        .backward
        .work_where(|_, s| s.forward.is_none() || recompute);
    forward + backward
}

/// The cheap-gradient principle on the plan: doubling the reduced
/// dimension at most about doubles the work of value and gradient, and
/// the gradient's work stays a small multiple of the value's.
#[test]
fn value_and_gradient_work_grows_like_the_value() {
    for kind in kinds() {
        let small = function(&kind, 64);
        let large = function(&kind, 128);
        let ps = plan_node(&small, &all_args(&small), DType::F32).unwrap();
        let pl = plan_node(&large, &all_args(&large), DType::F32).unwrap();
        for recompute in [false, true] {
            let (ws, wl) = (
                value_and_grad_work(&ps, recompute),
                value_and_grad_work(&pl, recompute),
            );
            let growth = wl as f64 / ws as f64;
            assert!(
                growth <= 2.3,
                "{} (recompute {recompute}): value+grad work grew {growth:.2}x when the reduced dimension doubled ({ws} -> {wl})\nforward\n{}backward\n{}",
                kind.name,
                pl.forward,
                pl.backward
            );
            let value = plan_function(&large, DType::F32).unwrap().work();
            let ratio = wl as f64 / value as f64;
            assert!(
                ratio <= 8.0,
                "{} (recompute {recompute}): value+grad work is {ratio:.1}x the value's\nforward\n{}backward\n{}",
                kind.name,
                pl.forward,
                pl.backward
            );
        }
    }
}

/// The estimate sees what staging removes: the dense layer's weight
/// gradient run as one loop nest (as before the planner) recomputes the
/// inner sum per gradient element, and its work quadruples when the
/// reduced dimension doubles.
#[test]
fn an_unstaged_derivative_is_quadratic_in_the_estimate() {
    let kind = &kinds()[0];
    let work = |n: usize| {
        let f = function(kind, n);
        let d = f.derive_reusing_output("w").unwrap();
        tenjin::planner::Stage {
            route: tenjin::planner::Route::Loop(tenjin::kernel::lower(&d).unwrap()),
            f: d,
            sources: vec![],
            forward: None,
        }
        .work()
    };
    let growth = work(128) as f64 / work(64) as f64;
    assert!(growth > 3.5, "{growth}");
}

/// Every function of the shared catalogue (every kind of index map,
/// reduction and guard), planned with all its derivatives, equals the
/// interpreter stage by stage (f64, relative 1e-12), and so does its
/// second derivative with respect to each argument of the first.
#[test]
fn every_catalogue_case_plans_and_equals_the_interpreter() {
    use rand::SeedableRng;
    for (name, case) in common::cases::all() {
        let f = case.parse();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let inputs = common::random_inputs(&f, &mut rng, case.positive);
        let refs: Vec<&[f64]> = inputs.iter().map(|(_, d)| &d[..]).collect();
        let named: Vec<(&str, &[f64])> = inputs.iter().map(|(n, d)| (n.as_str(), &d[..])).collect();
        let value = f.eval_f64(&named).unwrap();
        let plan =
            plan_node(&f, &all_args(&f), DType::F64).unwrap_or_else(|e| panic!("{name}: {e}"));
        close(
            &plan.forward.eval_f64(&refs).unwrap()[0],
            &value,
            &format!("{name}: forward"),
        );
        let df = common::random_vec(&mut rng, value.len(), false);
        let mut back: Vec<&[f64]> = refs.clone();
        back.push(&df);
        back.push(&value);
        let grads = plan.backward.eval_f64(&back).unwrap();
        for (g, d) in grads.iter().zip(&plan.derivatives) {
            let mut with = named.clone();
            with.push((d.args()[f.args().len()].name.as_str(), &df[..]));
            with.push((f.name(), &value[..]));
            close(
                g,
                &d.eval_f64(&with).unwrap(),
                &format!("{name}: {}", d.name()),
            );
            // The derivative planned as a function of its own arguments.
            let p = plan_function(d, DType::F64)
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", d.name()));
            let mut dargs: Vec<&[f64]> = refs.clone();
            dargs.push(&df);
            dargs.push(&value);
            close(
                &p.eval_f64(&dargs).unwrap()[0],
                g,
                &format!("{name}: {} alone", d.name()),
            );
            // Second order: the derivative's own node plan, with respect to
            // the function's first argument.
            let second = plan_node(d, &[0], DType::F64)
                .unwrap_or_else(|e| panic!("{name}: second order of {}: {e}", d.name()));
            let ddf = common::random_vec(&mut rng, g.len(), false);
            let mut dback = dargs.clone();
            dback.push(&ddf);
            dback.push(g);
            let got = second.backward.eval_f64(&dback).unwrap();
            let dd = &second.derivatives[0];
            let mut dnamed: Vec<(&str, &[f64])> = d
                .args()
                .iter()
                .zip(&dargs)
                .map(|(a, v)| (a.name.as_str(), *v))
                .collect();
            dnamed.push((dd.args()[d.args().len()].name.as_str(), &ddf[..]));
            dnamed.push((d.name(), &g[..]));
            close(
                &got[0],
                &dd.eval_f64(&dnamed).unwrap(),
                &format!("{name}: {}", dd.name()),
            );
        }
    }
}

/// Softmax's row maximum is one stage, read by the sum of exponentials
/// and by the output (not computed again inside the sum), and its
/// derivative reads no argmax: the maximum is a detached shift.
#[test]
fn softmax_plans_one_row_maximum_and_no_argmax() {
    let x = tenjin::Tensor::randn(&[8, 300], DType::F64, 1)
        .unwrap()
        .requires_grad();
    let e = tenjin::explain(&x.softmax(1).unwrap()).unwrap();
    let with = |lines: &[tenjin::trace::StageLine], what: &str| {
        lines.iter().filter(|s| s.function.contains(what)).count()
    };
    assert_eq!(with(&e.forward, "max{"), 1, "{e}");
    // The maximum, then the values with the row's sum of exponentials
    // inline (hoisted to its row): the backward reads the output, not
    // the sum.
    assert_eq!(e.forward.len(), 2, "{e}");
    assert_eq!(with(&e.backward, "argmax"), 0, "{e}");
    assert_eq!(with(&e.backward, "max{"), 0, "{e}");
    assert_eq!(with(&e.backward, "exp"), 0, "{e}");
}

/// Layer norm is one index function: the mean is one stage that the
/// variance reads (no sum inside a sum), the value one pass after them,
/// and no stage of its derivative is a constant (the terms of
/// `Σ_k (x[k] − mean)` cancel: folded, not materialised).
#[test]
fn layer_norm_plans_its_statistics_once() {
    let x = tenjin::Tensor::randn(&[8, 300], DType::F64, 2)
        .unwrap()
        .requires_grad();
    let e = tenjin::explain(&x.layer_norm(1, None, None, 1e-5).unwrap()).unwrap();
    assert_eq!(e.forward.len(), 3, "{e}");
    for s in &e.forward {
        assert!(s.function.matches("sum{").count() <= 1, "{e}");
    }
    for s in e.forward.iter().chain(&e.backward) {
        let body = s.function.split(" = ").nth(1).unwrap_or("");
        assert!(body.trim().parse::<f64>().is_err(), "a constant stage: {e}");
    }
}

/// On the GPU a layer norm's weight gradient cuts the row statistics as
/// stages (it sums over the rows), and the input's gradient, whose team
/// per row would compute them again, reads those stages: its kernel folds
/// the two row sums of the incoming gradient and nothing else.
#[test]
fn a_layer_norms_input_gradient_reads_the_statistics_its_weight_gradient_cut() {
    use tenjin::planner::{plan_node_for, Route, Target};
    let (mean, var) = (
        "sum{m}_0^767 (x[i; j; m]) * 0.0013020833333333333",
        "sum{s}_0^767 ((x[i; j; s] - sum{m}_0^767 (x[i; j; m]) * 0.0013020833333333333) ** 2) * 0.0013020833333333333",
    );
    let f = IndexFn::parse(
        &format!("f[i; j; k] = (x[i; j; k] - {mean}) / sqrt ({var} + 0.00001) * w[k] + b[k]"),
        &[
            ("x", &[8, 1024, 768][..]),
            ("w", &[768][..]),
            ("b", &[768][..]),
        ],
    )
    .unwrap();
    let plan = plan_node_for(&f, &[0, 1, 2], DType::F32, Target::Gpu).unwrap();
    let back = &plan.backward;
    let dx = &back.stages[back.outputs[0]];
    assert!(
        dx.sources.len() >= 5,
        "dx reads x, w, df and two statistics: {back}"
    );
    let Route::Loop(k) = &dx.route else {
        panic!("{back}")
    };
    assert_eq!(k.to_string().matches("sum").count(), 2, "{k}");
    // The statistics are computed once in the program.
    let stats = back
        .stages
        .iter()
        .filter(|s| s.f.output_shape() == [8, 1024])
        .count();
    assert_eq!(stats, 2, "{back}");
}

/// On the GPU a softmax over many rows is one stage forward and one
/// backward, a team per row. The forward folds the row maximum once
/// (written twice, as the shift beside and inside the log-sum-exp, it is
/// one node after the planner merges alpha-equal copies); the backward
/// reads the output and the incoming gradient and folds one sum.
#[test]
fn a_row_fused_softmax_folds_its_maximum_once() {
    use tenjin::planner::{plan_node_for, Route, Target};
    let f = IndexFn::parse(
        "f[i; j] = exp (x[i; j] - (detach max{m}_0^1023 (x[i; m]) + log sum{k}_0^1023 (exp (x[i; k] - detach max{p}_0^1023 (x[i; p])))))",
        &[("x", &[1024, 1024][..])],
    )
    .unwrap();
    let plan = plan_node_for(&f, &[0], DType::F32, Target::Gpu).unwrap();
    for (program, maxima, sums) in [(&plan.forward, 1, 1), (&plan.backward, 0, 1)] {
        assert_eq!(program.stages.len(), 1, "{program}");
        let Route::Loop(k) = &program.stages[0].route else {
            panic!("{program}")
        };
        assert_eq!(k.shared_loops, 1, "{k}");
        let text = k.to_string();
        assert_eq!(text.matches("max v").count(), maxima, "{k}");
        assert_eq!(text.matches("sum").count(), sums, "{k}");
    }
    // Two reads: the incoming gradient and the output.
    assert_eq!(
        plan.backward.stages[0].f.args().len(),
        2,
        "{}",
        plan.backward
    );
}

/// A mean loss over rows that picks each row's label: on the GPU the
/// row's pick and its log-sum-exp are stages of an output per row (inline,
/// one team would scan every row), the derivative one pass over the
/// logits; on the CPU the loss is one stage.
#[test]
fn a_few_output_loss_spreads_its_row_reductions_on_the_gpu() {
    use tenjin::planner::{plan_function_for, plan_node_for, Target};
    let f = IndexFn::parse(
        "l[] = sum{i}_0^511 (log sum{k}_0^999 (exp x[i; k]) - sum{c}_0^999 (if {t[i] = c} then (x[i; c]) else (0))) * 0.001953125",
        &[("x", &[512, 1000][..]), ("t", &[512][..])],
    )
    .unwrap();
    let gpu = plan_function_for(&f, DType::F32, Target::Gpu).unwrap();
    let shapes: Vec<_> = gpu
        .stages
        .iter()
        .map(|s| s.f.output_shape().to_vec())
        .collect();
    assert_eq!(shapes, [vec![512], vec![512], vec![]], "{gpu}");
    assert_eq!(plan_function(&f, DType::F32).unwrap().stages.len(), 1);
    // Short rows stay inline: a stage would cost more than it saves.
    let short = IndexFn::parse(
        "l[] = sum{i}_0^511 (log sum{k}_0^99 (exp x[i; k]))",
        &[("x", &[512, 100][..])],
    )
    .unwrap();
    let p = plan_function_for(&short, DType::F32, Target::Gpu).unwrap();
    assert_eq!(p.stages.len(), 1, "{p}");
    // The derivative reads the forward's row statistics: one stage of
    // the logits' shape.
    let plan = plan_node_for(&f, &[0], DType::F32, Target::Gpu).unwrap();
    let backward: Vec<_> = plan
        .backward
        .stages
        .iter()
        .filter(|s| s.f.output_shape() == [512, 1000])
        .collect();
    assert_eq!(backward.len(), 1, "{}", plan.backward);
    // Its value equals the reference interpreter's.
    let x = data(512 * 1000, 3);
    let t: Vec<f64> = (0..512).map(|i| ((i * 37) % 1000) as f64).collect();
    let want = f.eval_f64(&[("x", &x[..]), ("t", &t[..])]).unwrap();
    let got = gpu.eval_f64(&[&x[..], &t[..]]).unwrap();
    close(&got[0], &want, "spread loss");
}

/// A product plus a whole argument (a term of a gradient added to the sum
/// so far) is one GEMM on the GPU, cuBLAS adding the argument with
/// `beta = 1`; the CPU runs the addition as the GEMM's epilogue.
#[test]
fn a_product_plus_an_argument_is_one_gemm_on_the_gpu() {
    use tenjin::planner::{route_for, Target};
    let f = IndexFn::parse(
        "f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j]) + c[i; j]",
        &[
            ("a", &[64, 64][..]),
            ("b", &[64, 64][..]),
            ("c", &[64, 64][..]),
        ],
    )
    .unwrap();
    assert_eq!(
        route_for(&f, DType::F32, Target::Gpu).unwrap().name(),
        "gemm"
    );
    assert_eq!(
        route_for(&f, DType::F32, Target::Cpu).unwrap().name(),
        "gemm+loop"
    );
    // A broadcast bias is not the output's shape: an epilogue.
    let g = IndexFn::parse(
        "f[i; j] = sum{k}_0^63 (a[i; k] * b[k; j]) + c[j]",
        &[("a", &[64, 64][..]), ("b", &[64, 64][..]), ("c", &[64][..])],
    )
    .unwrap();
    assert_eq!(
        route_for(&g, DType::F32, Target::Gpu).unwrap().name(),
        "gemm+loop"
    );
}
