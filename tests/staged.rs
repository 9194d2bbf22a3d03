//! Staged execution through the Tensor API (issue "Staged execution"):
//! the functions users write, run by their planned stages, equal the
//! reference interpreter in f64 and are bitwise identical at 1, 2 and 3
//! threads; forward values the backward reads are saved or recomputed with
//! the same bits; ops are one node each; a hand-written MLP equals the
//! `nn::Linear` one and its later steps derive, plan and compile nothing;
//! the memory plan of a long chain is linear.
//!
//! Thread counts, the allocator's mode and the counters are process-wide:
//! every test holds `SERIAL`.

mod common;

use common::user_functions::{function, kinds, Kind};
use std::sync::{Mutex, MutexGuard};
use tenjin::alloc::{self, AllocMode};
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::{DType, Error, SavePolicy, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    alloc::set_mode(AllocMode::RuntimeEfficient);
    tenjin::jit::set_num_threads(2);
    g
}

fn data(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| ((i * 7 + seed * 13) as f64 * 0.37).sin() * 0.8 + 0.05)
        .collect()
}

/// The function of `kind` at reduced length `n`, applied to tensors of
/// `dtype` that require a gradient; returns the output and the inputs.
fn run(kind: &Kind, n: usize, dtype: DType) -> Result<(Tensor, Vec<Tensor>), Error> {
    let (src, args, sizes) = (kind.build)(n);
    let inputs: Vec<Tensor> = args
        .iter()
        .enumerate()
        .map(|(k, (_, shape))| {
            let v = data(shape.iter().product(), k);
            let t = Tensor::from_vec_f64(v, shape).and_then(|t| t.to_dtype(dtype));
            t.map(|t| t.requires_grad())
        })
        .collect::<Result<_, _>>()?;
    let named: Vec<(&str, &Tensor)> = args.iter().map(|(a, _)| *a).zip(&inputs).collect();
    let y = tenjin::index_fn_with_sizes(&src, &named, &sizes)?;
    Ok((y, inputs))
}

fn incoming(y: &Tensor) -> Result<Tensor, Error> {
    let v = data(y.numel(), 99);
    Tensor::from_vec_f64(v, y.shape())?.to_dtype(y.dtype())
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-12 * g.abs().max(w.abs()).max(1.0);
        assert!((g - w).abs() <= tol, "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
fn f64_values_and_gradients_equal_the_reference_interpreter() {
    let _s = serial();
    for kind in kinds() {
        let (y, inputs) = run(&kind, 16, DType::F64).unwrap();
        let g = incoming(&y).unwrap();
        y.backward_with(&g).unwrap();
        let f = function(&kind, 16);
        let bufs: Vec<Vec<f64>> = inputs.iter().map(|t| t.to_vec_f64().unwrap()).collect();
        let named: Vec<(&str, &[f64])> = f
            .args()
            .iter()
            .zip(&bufs)
            .map(|(a, b)| (a.name.as_str(), &b[..]))
            .collect();
        let value = f.eval_f64(&named).unwrap();
        close(&y.to_vec_f64().unwrap(), &value, kind.name);
        let gv = g.to_vec_f64().unwrap();
        for (a, t) in f.args().iter().zip(&inputs) {
            let d = f.derive(&a.name).unwrap();
            let mut with = named.clone();
            with.push((d.args()[f.args().len()].name.as_str(), &gv[..]));
            let want = d.eval_f64(&with).unwrap();
            let got = t.grad().unwrap().to_vec_f64().unwrap();
            close(&got, &want, &format!("{}: d{}", kind.name, a.name));
        }
    }
}

/// Forward values and every gradient, as bits, at `threads` threads.
fn bits(kind: &Kind, threads: usize) -> Vec<Vec<u32>> {
    tenjin::jit::set_num_threads(threads);
    let (y, inputs) = run(kind, 64, DType::F32).unwrap();
    y.backward_with(&incoming(&y).unwrap()).unwrap();
    let mut out = vec![y.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()];
    for t in &inputs {
        out.push(
            t.grad()
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
        );
    }
    out
}

#[test]
fn results_are_bitwise_identical_at_one_two_and_three_threads() {
    let _s = serial();
    tenjin::jit::set_min_parallel_work(0); // split even small loops
    for kind in kinds() {
        let one = bits(&kind, 1);
        for threads in [2, 3] {
            assert!(
                bits(&kind, threads) == one,
                "{}: {threads} threads",
                kind.name
            );
        }
    }
    tenjin::jit::set_min_parallel_work(tenjin::jit::DEFAULT_MIN_PARALLEL_WORK);
    tenjin::jit::set_num_threads(2);
}

#[test]
fn softmax_log_softmax_and_cross_entropy_are_one_node_for_any_row_length() {
    let _s = serial();
    let x = Tensor::randn(&[4, 1000], DType::F32, 3)
        .unwrap()
        .requires_grad();
    let labels = [3, 999, 0, 512];
    type Op<'a> = (&'a str, &'a dyn Fn(&Tensor) -> Result<Tensor, Error>);
    let ops: [Op; 3] = [
        ("softmax", &|x| x.softmax(1)),
        ("log_softmax", &|x| x.log_softmax(1)),
        ("cross_entropy", &|x| x.cross_entropy(&labels)),
    ];
    // A tensor no recorded op produced has no plan to explain.
    let constant = x.detach().softmax(1).unwrap();
    let err = tenjin::explain(&constant).unwrap_err().to_string();
    assert!(
        err.contains("not produced by a recorded operation"),
        "{err}"
    );
    for (name, op) in ops {
        let before = tenjin::trace::live_nodes();
        let y = op(&x).unwrap();
        assert_eq!(tenjin::trace::live_nodes() - before, 1, "{name}");
        // Value and gradient work stay a small multiple of the input size.
        let e = tenjin::explain(&y).unwrap();
        let work: u64 = e.forward.iter().chain(&e.backward).map(|s| s.work).sum();
        assert!(work < 200 * x.numel() as u64, "{name}: {work}\n{e}");
        y.backward_with(&Tensor::ones(y.shape(), DType::F32).unwrap())
            .unwrap();
        x.zero_grad();
    }
}

/// A dense layer written as one line, and attention in one line: the
/// forward values the backward reads are saved or recomputed by the same
/// forward stage as the save policy says (the memory mode's default, or a
/// `save_policy` scope), so the gradients are the same bits; the memory
/// plan counts the saved values and predicts the measured peak under every
/// policy in both modes.
#[test]
fn forward_values_are_saved_or_recomputed_with_the_same_bits() {
    let _s = serial();
    let lines = [
        kinds()
            .into_iter()
            .find(|k| k.name.starts_with("dense"))
            .unwrap(),
        kinds()
            .into_iter()
            .find(|k| k.name.starts_with("attention"))
            .unwrap(),
    ];
    let cases = [
        (AllocMode::RuntimeEfficient, None),
        (AllocMode::MemoryEfficient, None),
        (AllocMode::MemoryEfficient, Some(SavePolicy::Nothing)),
        (AllocMode::RuntimeEfficient, Some(SavePolicy::Reductions)),
        (AllocMode::MemoryEfficient, Some(SavePolicy::Everything)),
    ];
    for kind in lines {
        let mut grads: Vec<Vec<Vec<u32>>> = Vec::new();
        let mut kept_by_policy = Vec::new();
        for (mode, scoped) in cases {
            alloc::set_mode(mode);
            alloc::empty_cache();
            let policy = scoped.unwrap_or(SavePolicy::of_mode(mode));
            let (y, inputs) = match scoped {
                Some(p) => tenjin::save_policy(p, || run(&kind, 32, DType::F32)),
                None => run(&kind, 32, DType::F32),
            }
            .unwrap();
            let e = tenjin::explain(&y).unwrap();
            let mut kept = 0;
            for line in e.forward.iter().filter(|l| !l.role.starts_with("output")) {
                let reduces = line.route != "loop"
                    || line.function.contains("sum{")
                    || line.function.contains("max{");
                let keeps = match policy {
                    SavePolicy::Everything => true,
                    SavePolicy::Reductions => reduces,
                    SavePolicy::Nothing => false,
                };
                if line.role == "intermediate" {
                    continue;
                }
                if keeps {
                    kept += 1;
                    assert_eq!(
                        line.role, "saved for backward",
                        "{}: {policy:?}\n{e}",
                        kind.name
                    );
                } else {
                    assert!(
                        line.role.starts_with("recomputed"),
                        "{}: {policy:?}\n{e}",
                        kind.name
                    );
                }
            }
            kept_by_policy.push((policy, kept));
            let loss = y.sum().unwrap();
            drop(y);
            let plan = loss.memory_plan().unwrap();
            let before = alloc::stats().bytes_in_use;
            alloc::reset_peak();
            loss.backward().unwrap();
            let s = alloc::stats();
            assert_eq!(
                before,
                plan.steps
                    .iter()
                    .rev()
                    .find(|p| p.phase == tenjin::trace::Phase::Forward)
                    .unwrap()
                    .live_bytes,
                "{}: {mode:?} {policy:?}\n{plan}",
                kind.name
            );
            assert_eq!(
                s.peak_in_use,
                plan.backward_peak_bytes(),
                "{}: {mode:?} {policy:?}\n{plan}",
                kind.name
            );
            grads.push(
                inputs
                    .iter()
                    .map(|t| {
                        t.grad()
                            .unwrap()
                            .to_vec()
                            .unwrap()
                            .iter()
                            .map(|x| x.to_bits())
                            .collect()
                    })
                    .collect(),
            );
        }
        assert!(grads.iter().all(|g| *g == grads[0]), "{}", kind.name);
        // Each line has a forward value its backward reads: everything
        // keeps it, nothing recomputes it; a dense layer keeps its GEMM
        // under the reductions policy.
        let kept = |p: SavePolicy| kept_by_policy.iter().find(|(q, _)| *q == p).unwrap().1;
        assert!(kept(SavePolicy::Everything) > 0, "{}", kind.name);
        assert_eq!(kept(SavePolicy::Nothing), 0, "{}", kind.name);
        if kind.name.starts_with("dense") {
            assert_eq!(
                kept(SavePolicy::Reductions),
                kept(SavePolicy::Everything),
                "{}",
                kind.name
            );
        }
    }
    alloc::set_mode(AllocMode::RuntimeEfficient);
}

/// The MLP written as index functions, one line per layer and one for the
/// loss, against the same model through `nn::Linear`.
#[test]
fn a_hand_written_mlp_equals_nn_linear_and_its_later_steps_do_no_symbolic_work() {
    let _s = serial();
    let (batch, dims) = (8, [20usize, 16, 12, 10]);
    let layers: Vec<Linear> = dims
        .windows(2)
        .enumerate()
        .map(|(l, w)| {
            let weight = Tensor::randn(&[w[1], w[0]], DType::F64, 10 + l as u64).unwrap();
            let bias = Tensor::randn(&[w[1]], DType::F64, 20 + l as u64).unwrap();
            Linear::from_parameters(weight.mul_scalar(0.3).unwrap(), Some(bias)).unwrap()
        })
        .collect();
    let x = Tensor::randn(&[batch, dims[0]], DType::F64, 1).unwrap();
    let labels: Vec<usize> = (0..batch).map(|i| (i * 7 + 3) % 10).collect();
    let mut onehot = vec![0.0; batch * 10];
    for (i, &l) in labels.iter().enumerate() {
        onehot[i * 10 + l] = 1.0;
    }
    let targets = Tensor::from_vec_f64(onehot, &[batch, 10]).unwrap();

    let model = Sequential::new()
        .add(layers[0].clone())
        .add(ReLU)
        .add(layers[1].clone())
        .add(ReLU)
        .add(layers[2].clone());
    let loss = model.forward(&x).unwrap().cross_entropy(&labels).unwrap();
    loss.backward().unwrap();
    let want_loss = loss.item().unwrap();
    let want: Vec<Vec<f64>> = model
        .parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec_f64().unwrap())
        .collect();
    model.parameters().iter().for_each(|p| p.zero_grad());

    let by_hand = || -> Result<Tensor, Error> {
        let mut h = x.clone();
        for (l, layer) in layers.iter().enumerate() {
            let (k, o) = (dims[l] - 1, dims[l + 1]);
            let line = if l + 1 < layers.len() {
                format!("h[b; o] = max(sum{{k}}_0^{k} (x[b; k] * w[o; k]) + c[o], 0)")
            } else {
                format!("y[b; o] = sum{{k}}_0^{k} (x[b; k] * w[o; k]) + c[o]")
            };
            let _ = o;
            h = tenjin::index_fn(
                &line,
                &[
                    ("x", &h),
                    ("w", layer.weight()),
                    ("c", layer.bias().unwrap()),
                ],
            )?;
        }
        let c = 9;
        let max = format!("max{{m}}_0^{c} (y[b; m])");
        let loss = format!(
            "l[] = sum{{b}}_0^{} ({max} + log (sum{{c}}_0^{c} (exp (y[b; c] - {max}))) - sum{{c}}_0^{c} (t[b; c] * y[b; c])) / {batch}",
            batch - 1
        );
        tenjin::index_fn(&loss, &[("y", &h), ("t", &targets)])
    };
    let loss = by_hand().unwrap();
    loss.backward().unwrap();
    close(&[loss.item().unwrap()], &[want_loss], "loss");
    for (p, w) in model.parameters().iter().zip(&want) {
        close(
            &p.grad().unwrap().to_vec_f64().unwrap(),
            w,
            "parameter gradient",
        );
    }
    let before = tenjin::stats();
    for _ in 0..2 {
        model.parameters().iter().for_each(|p| p.zero_grad());
        by_hand().unwrap().backward().unwrap();
    }
    let after = tenjin::stats();
    assert_eq!(after.derivations, before.derivations);
    assert_eq!(after.stages_planned, before.stages_planned);
    assert_eq!(after.kernels_compiled, before.kernels_compiled);
}

/// The memory plan replays the backward schedule in linear time: a chain of
/// 50,000 recorded ops is planned in well under a second on this machine
/// (a quadratic plan took 50 s at 100,000).
#[test]
fn the_memory_plan_of_a_long_chain_takes_linear_time() {
    let _s = serial();
    let x = Tensor::ones(&[4], DType::F32).unwrap().requires_grad();
    let mut y = x.clone();
    for _ in 0..50_000 {
        y = y.mul_scalar(1.0).unwrap();
    }
    let loss = y.sum().unwrap();
    drop(y);
    let t = std::time::Instant::now();
    let plan = loss.memory_plan().unwrap();
    let took = t.elapsed();
    assert_eq!(plan.steps.len(), 2 * 50_001 + 1);
    assert!(took.as_secs_f64() < 10.0, "{took:?}");
    loss.backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![1.0; 4]);
}
