//! `nn` layers and `optim` optimizers: updates against PyTorch's formulas
//! written out in f64, in-place updates, no symbolic work, compilation or
//! system allocation after the first step, and errors as data.

use std::sync::{Mutex, MutexGuard};
use tenjin::nn::{self, Conv2d, Conv2dConfig, Flatten, Linear, Module, ReLU, Sequential, Tanh};
use tenjin::optim::{Adam, AdamConfig, AdamW, Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

/// The counters (`tenjin::stats`, `alloc::stats`) are process-wide: tests
/// that read them must not run beside tests that compile or allocate.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// References: PyTorch's update formulas (torch/optim/sgd.py, adam.py,
// adamw.py, single-tensor paths), in f64.

#[derive(Clone)]
struct RefSgd {
    c: SgdConfig,
    buf: Option<Vec<f64>>,
}

impl RefSgd {
    fn step(&mut self, p: &mut [f64], g: &[f64]) {
        let c = self.c;
        let mut d: Vec<f64> = g.to_vec();
        if c.weight_decay != 0.0 {
            for (d, p) in d.iter_mut().zip(p.iter()) {
                *d += c.weight_decay * p;
            }
        }
        if c.momentum != 0.0 {
            match &mut self.buf {
                None => self.buf = Some(d.clone()),
                Some(buf) => {
                    for (b, d) in buf.iter_mut().zip(&d) {
                        *b = c.momentum * *b + (1.0 - c.dampening) * d;
                    }
                }
            }
            let buf = self.buf.as_ref().unwrap();
            if c.nesterov {
                for (d, b) in d.iter_mut().zip(buf) {
                    *d += c.momentum * b;
                }
            } else {
                d = buf.clone();
            }
        }
        for (p, d) in p.iter_mut().zip(&d) {
            *p -= c.lr * d;
        }
    }
}

#[derive(Clone)]
struct RefAdam {
    c: AdamConfig,
    decoupled: bool,
    m: Vec<f64>,
    v: Vec<f64>,
    /// AMSGrad's running maximum of `v`.
    vmax: Vec<f64>,
    t: i32,
}

impl RefAdam {
    fn new(c: AdamConfig, decoupled: bool, n: usize) -> RefAdam {
        RefAdam {
            c,
            decoupled,
            m: vec![0.0; n],
            v: vec![0.0; n],
            vmax: vec![0.0; n],
            t: 0,
        }
    }

    #[allow(clippy::needless_range_loop)] // written like the formulas
    fn step(&mut self, p: &mut [f64], g: &[f64]) {
        let c = self.c;
        let (b1, b2) = c.betas;
        self.t += 1;
        let mut g = g.to_vec();
        if self.decoupled {
            for p in p.iter_mut() {
                *p *= 1.0 - c.lr * c.weight_decay;
            }
        } else if c.weight_decay != 0.0 {
            for (g, p) in g.iter_mut().zip(p.iter()) {
                *g += c.weight_decay * p;
            }
        }
        for i in 0..p.len() {
            self.m[i] += (g[i] - self.m[i]) * (1.0 - b1); // lerp_
            self.v[i] = self.v[i] * b2 + (1.0 - b2) * g[i] * g[i];
        }
        let bc1 = 1.0 - b1.powi(self.t);
        let bc2 = 1.0 - b2.powi(self.t);
        let step_size = c.lr / bc1;
        for i in 0..p.len() {
            if c.amsgrad {
                self.vmax[i] = self.vmax[i].max(self.v[i]);
            }
            let v = if c.amsgrad { self.vmax[i] } else { self.v[i] };
            let denom = v.sqrt() / bc2.sqrt() + c.eps;
            p[i] -= step_size * self.m[i] / denom;
        }
    }
}

fn close(a: &[f64], b: &[f64], tol: f64) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("lengths {} and {}", a.len(), b.len()));
    }
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if (x - y).abs() > tol * (1.0 + y.abs()) {
            return Err(format!("element {i}: {x} vs reference {y}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// A problem with a known gradient: L = Σ ½·a·w² + c·w, so ∂L/∂w = a·w + c.

struct Quadratic {
    a: Tensor,
    c: Tensor,
    a_host: Vec<f64>,
    c_host: Vec<f64>,
}

impl Quadratic {
    fn new(shape: &[usize], dtype: DType, seed: u64) -> Quadratic {
        let a = Tensor::rand(shape, DType::F64, seed)
            .unwrap()
            .add_scalar(0.5)
            .unwrap();
        let c = Tensor::randn(shape, DType::F64, seed + 1).unwrap();
        let (a_host, c_host) = (a.to_vec_f64().unwrap(), c.to_vec_f64().unwrap());
        Quadratic {
            a: a.to_dtype(dtype).unwrap(),
            c: c.to_dtype(dtype).unwrap(),
            a_host,
            c_host,
        }
    }

    fn loss(&self, w: &Tensor) -> Result<Tensor, Error> {
        w.mul(w)?
            .mul(&self.a)?
            .mul_scalar(0.5)?
            .add(&w.mul(&self.c)?)?
            .sum()
    }

    fn grad(&self, w: &[f64]) -> Vec<f64> {
        w.iter()
            .zip(&self.a_host)
            .zip(&self.c_host)
            .map(|((w, a), c)| a * w + c)
            .collect()
    }
}

/// Runs `steps` optimizer steps on two parameters (a matrix and a scalar,
/// shape `[]`) with tenjin and with `reference`, comparing after each.
fn check_against_reference<O: Optimizer>(
    make: impl Fn(Vec<Tensor>) -> Result<O, Error>,
    mut reference: impl FnMut(usize, &mut [f64], &[f64]),
    dtype: DType,
    tol: f64,
    steps: usize,
) {
    let shapes: [&[usize]; 2] = [&[3, 4], &[]];
    let problems: Vec<Quadratic> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| Quadratic::new(s, dtype, 10 + 7 * k as u64))
        .collect();
    let params: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            Tensor::randn(s, dtype, 100 + k as u64)
                .unwrap()
                .requires_grad()
        })
        .collect();
    let mut host: Vec<Vec<f64>> = params.iter().map(|p| p.to_vec_f64().unwrap()).collect();
    let mut opt = make(params.clone()).unwrap();
    for step in 0..steps {
        opt.zero_grad();
        let mut loss = problems[0].loss(&params[0]).unwrap();
        loss = loss.add(&problems[1].loss(&params[1]).unwrap()).unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
        for k in 0..2 {
            let g = problems[k].grad(&host[k]);
            reference(k, &mut host[k], &g);
            let got = params[k].to_vec_f64().unwrap();
            if let Err(e) = close(&got, &host[k], tol) {
                panic!("step {step}, parameter {k}: {e}");
            }
        }
    }
}

fn sgd_case(c: SgdConfig) {
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        let mut refs = vec![RefSgd { c, buf: None }; 2];
        check_against_reference(
            |p| SGD::new(p, c),
            |k, p, g| refs[k].step(p, g),
            dtype,
            tol,
            5,
        );
    }
}

#[test]
fn sgd_plain_matches_pytorch() {
    let _g = serial();
    sgd_case(SgdConfig {
        lr: 0.1,
        ..Default::default()
    });
    sgd_case(SgdConfig {
        lr: 0.1,
        weight_decay: 0.05,
        ..Default::default()
    });
}

#[test]
fn sgd_momentum_matches_pytorch() {
    let _g = serial();
    sgd_case(SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        ..Default::default()
    });
    sgd_case(SgdConfig {
        lr: 0.05,
        momentum: 0.8,
        dampening: 0.3,
        weight_decay: 0.01,
        ..Default::default()
    });
}

#[test]
fn sgd_nesterov_matches_pytorch() {
    let _g = serial();
    sgd_case(SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        ..Default::default()
    });
    sgd_case(SgdConfig {
        lr: 0.05,
        momentum: 0.7,
        nesterov: true,
        weight_decay: 0.1,
        ..Default::default()
    });
}

fn adam_case(c: AdamConfig, decoupled: bool) {
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        let mut refs = [
            RefAdam::new(c, decoupled, 12),
            RefAdam::new(c, decoupled, 1),
        ];
        let step = |k: usize, p: &mut [f64], g: &[f64]| refs[k].step(p, g);
        if decoupled {
            check_against_reference(|p| AdamW::new(p, c), step, dtype, tol, 6);
        } else {
            check_against_reference(|p| Adam::new(p, c), step, dtype, tol, 6);
        }
    }
}

#[test]
fn adam_matches_pytorch() {
    let _g = serial();
    adam_case(
        AdamConfig {
            lr: 0.05,
            ..Default::default()
        },
        false,
    );
    adam_case(
        AdamConfig {
            lr: 0.02,
            betas: (0.8, 0.95),
            eps: 1e-6,
            weight_decay: 0.1,
            amsgrad: false,
            maximize: false,
        },
        false,
    );
}

#[test]
fn adamw_matches_pytorch() {
    let _g = serial();
    adam_case(AdamConfig::adamw(), true);
    adam_case(
        AdamConfig {
            lr: 0.05,
            betas: (0.5, 0.9),
            eps: 1e-8,
            weight_decay: 0.3,
            amsgrad: false,
            maximize: false,
        },
        true,
    );
}

#[test]
fn amsgrad_matches_the_reference() {
    let _g = serial();
    for decoupled in [false, true] {
        adam_case(
            AdamConfig {
                lr: 0.05,
                betas: (0.5, 0.9),
                weight_decay: 0.1,
                amsgrad: true,
                ..Default::default()
            },
            decoupled,
        );
    }
}

/// A parameter big enough that the in-place kernels are split over
/// threads: the update must still match element by element.
#[test]
fn large_parameter_in_place_matches_reference() {
    let _g = serial();
    let n = 200_003;
    let c = AdamConfig {
        lr: 0.01,
        weight_decay: 0.02,
        ..Default::default()
    };
    let w = Tensor::randn(&[n], DType::F32, 3).unwrap().requires_grad();
    let target = Tensor::randn(&[n], DType::F32, 4).unwrap();
    let mut host = w.to_vec_f64().unwrap();
    let mut reference = RefAdam::new(c, true, n);
    let mut opt = AdamW::new(vec![w.clone()], c).unwrap();
    for _ in 0..3 {
        opt.zero_grad();
        // L = Σ ½(w − t)², ∂L/∂w = w − t
        let d = w.sub(&target).unwrap();
        d.mul(&d)
            .unwrap()
            .mul_scalar(0.5)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let g = w.grad().unwrap().to_vec_f64().unwrap();
        opt.step().unwrap();
        reference.step(&mut host, &g);
        close(&w.to_vec_f64().unwrap(), &host, 1e-5).unwrap();
    }
}

// ---------------------------------------------------------------------------
// The training loop after its first step: no parsing of new ops, no
// derivation, no compilation, no system allocation; parameters updated in
// place.

fn mlp(dtype: DType) -> Sequential {
    Sequential::new()
        .add(Linear::with_options(4, 16, true, dtype, 1).unwrap())
        .add(Tanh)
        .add(Linear::with_options(16, 16, true, dtype, 2).unwrap())
        .add(ReLU)
        .add(Linear::with_options(16, 1, true, dtype, 3).unwrap())
}

fn steady_state(name: &str, make: impl Fn(Vec<Tensor>) -> Box<dyn Optimizer>) {
    for dtype in [DType::F32, DType::F64] {
        let model = mlp(dtype);
        let params = model.parameters();
        let first_weight = params[0].clone();
        let mut opt = make(params.clone());
        let x = Tensor::randn(&[32, 4], dtype, 5).unwrap();
        let y = Tensor::randn(&[32, 1], dtype, 6).unwrap();
        let mut losses = vec![];
        let mut iteration = |opt: &mut Box<dyn Optimizer>| {
            opt.zero_grad();
            let loss = model.forward(&x).unwrap().mse_loss(&y).unwrap();
            loss.backward().unwrap();
            opt.step().unwrap();
            losses.push(loss.item().unwrap());
        };
        iteration(&mut opt);
        let before = first_weight.to_vec_f64().unwrap();
        for step in 2..=8 {
            let stats = tenjin::stats();
            let allocs = tenjin::alloc::stats();
            if step == 3 {
                // A schedule: the new rate is a scalar argument.
                opt.set_learning_rate(opt.learning_rate() * 0.5).unwrap();
            }
            iteration(&mut opt);
            let after = tenjin::stats();
            let allocs_after = tenjin::alloc::stats();
            assert_eq!(
                after.derivations, stats.derivations,
                "{name} {dtype:?} step {step}: derived"
            );
            assert_eq!(
                after.kernels_compiled, stats.kernels_compiled,
                "{name} {dtype:?} step {step}: compiled"
            );
            assert_eq!(
                after.op_plans_built, stats.op_plans_built,
                "{name} {dtype:?} step {step}: built op plans"
            );
            assert_eq!(
                allocs_after.allocations, allocs.allocations,
                "{name} {dtype:?} step {step}: system allocations ({allocs:?} → {allocs_after:?})"
            );
        }
        // Updated in place: the tensor taken before training sees the change.
        assert!(first_weight.shares_data_with(&model.parameters()[0]));
        assert_ne!(first_weight.to_vec_f64().unwrap(), before);
        assert!(losses.last().unwrap() < &losses[0], "{name}: {losses:?}");
    }
}

#[test]
fn sgd_steady_state_is_free() {
    let _g = serial();
    tenjin::alloc::set_mode(tenjin::alloc::AllocMode::RuntimeEfficient);
    steady_state("SGD", |p| {
        Box::new(
            SGD::new(
                p,
                SgdConfig {
                    lr: 0.05,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
    steady_state("SGD+Nesterov", |p| {
        Box::new(
            SGD::new(
                p,
                SgdConfig {
                    lr: 0.02,
                    momentum: 0.9,
                    nesterov: true,
                    weight_decay: 1e-4,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
}

#[test]
fn adam_steady_state_is_free() {
    let _g = serial();
    tenjin::alloc::set_mode(tenjin::alloc::AllocMode::RuntimeEfficient);
    steady_state("Adam", |p| {
        Box::new(
            Adam::new(
                p,
                AdamConfig {
                    lr: 0.01,
                    weight_decay: 1e-3,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
    steady_state("AdamW", |p| {
        Box::new(AdamW::new(p, AdamConfig::adamw()).unwrap())
    });
}

/// The optimizer's own work per step: with the gradients in place, a step
/// compiles nothing, derives nothing and makes no system allocation, from
/// the first; plain SGD allocates nothing at all (in place), a stateful
/// optimizer takes one block per parameter from the pool (its one kernel
/// writes the parameter and its state into a fresh block).
#[test]
fn step_alone_compiles_nothing_and_allocates_from_the_pool_only() {
    let _g = serial();
    tenjin::alloc::set_mode(tenjin::alloc::AllocMode::RuntimeEfficient);
    let params = |seed: u64| {
        let w = Tensor::randn(&[64, 64], DType::F32, seed)
            .unwrap()
            .requires_grad();
        let b = Tensor::randn(&[64], DType::F32, seed + 1)
            .unwrap()
            .requires_grad();
        w.sum()
            .unwrap()
            .add(&b.sum().unwrap())
            .unwrap()
            .backward()
            .unwrap();
        vec![w, b]
    };
    let momentum = SgdConfig {
        lr: 0.1,
        momentum: 0.5,
        ..Default::default()
    };
    let mut opts: Vec<(Box<dyn Optimizer>, u64)> = vec![
        (
            Box::new(
                SGD::new(
                    params(1),
                    SgdConfig {
                        lr: 0.1,
                        ..Default::default()
                    },
                )
                .unwrap(),
            ),
            0,
        ),
        (Box::new(SGD::new(params(3), momentum).unwrap()), 2),
        (
            Box::new(Adam::new(params(5), AdamConfig::default()).unwrap()),
            2,
        ),
    ];
    for (opt, blocks) in &mut opts {
        for step in 0..3 {
            // The pool of the device the parameters live on.
            let pool = || tenjin::alloc::stats_for(tenjin::default_device());
            let (s, a) = (tenjin::stats(), pool());
            opt.step().unwrap();
            let (s2, a2) = (tenjin::stats(), pool());
            let compiled = |s: &tenjin::Stats| {
                (
                    s.op_plans_built,
                    s.derivations,
                    s.stages_planned,
                    s.kernels_compiled,
                )
            };
            assert_eq!(compiled(&s), compiled(&s2));
            let taken = a2.pool_hits + a2.pool_misses - a.pool_hits - a.pool_misses;
            assert_eq!(taken, *blocks, "step {step}");
            if step > 0 {
                assert_eq!(
                    a.allocations, a2.allocations,
                    "step {step}: a system allocation"
                );
            }
        }
    }
}

/// A stateful optimizer keeps its state in the parameter's block: a second
/// one created for the same parameter takes the block over, and the first
/// then refuses to step (an error, not a silent mix of states).
#[test]
fn a_second_stateful_optimizer_takes_the_parameter_over() {
    let _g = serial();
    let w = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])
        .unwrap()
        .requires_grad();
    let momentum = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let mut first = SGD::new(vec![w.clone()], momentum).unwrap();
    let mut second = Adam::new(vec![w.clone()], AdamConfig::default()).unwrap();
    w.sum().unwrap().backward().unwrap();
    let e = first.step().unwrap_err();
    assert!(e.to_string().contains("another optimizer"), "{e}");
    assert_eq!(w.to_vec_f64().unwrap(), vec![1.0, 2.0]); // untouched
    second.step().unwrap();
    assert!(w.to_vec_f64().unwrap()[0] < 1.0);
}

// ---------------------------------------------------------------------------
// Optimizer semantics and errors.

#[test]
fn in_place_update_invalidates_saved_values() {
    let _g = serial();
    let w = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])
        .unwrap()
        .requires_grad();
    let mut opt = SGD::new(
        vec![w.clone()],
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let loss = w.mul(&w).unwrap().sum().unwrap();
    loss.backward_retaining_graph(None).unwrap();
    opt.step().unwrap();
    // The graph saved w; w changed in place since: refused, not wrong.
    let e = loss.backward().unwrap_err().to_string();
    assert!(e.contains("modified in place"), "{e}");
}

#[test]
fn parameters_without_gradient_are_skipped() {
    let _g = serial();
    let a = Tensor::from_vec_f64(vec![1.0], &[1])
        .unwrap()
        .requires_grad();
    let b = Tensor::from_vec_f64(vec![5.0], &[1])
        .unwrap()
        .requires_grad();
    let mut opt = Adam::new(
        vec![a.clone(), b.clone()],
        AdamConfig {
            lr: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    a.mul_scalar(2.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    opt.step().unwrap();
    assert!((a.item().unwrap() - 0.5).abs() < 1e-7);
    assert_eq!(b.item().unwrap(), 5.0);
    assert!(a.grad().is_some());
    opt.zero_grad();
    assert!(a.grad().is_none());
    opt.step().unwrap(); // nothing has a gradient: nothing moves
    assert!((a.item().unwrap() - 0.5).abs() < 1e-7);
}

#[test]
fn optimizer_errors_are_data() {
    let _g = serial();
    let w = Tensor::ones(&[2, 2], DType::F32).unwrap().requires_grad();
    let constant = Tensor::ones(&[2], DType::F32).unwrap();
    let computed = w.exp().unwrap();
    let view = w.t().unwrap();
    let sgd = |p: Vec<Tensor>, c: SgdConfig| SGD::new(p, c).err().map(|e| e.to_string());
    let ok = SgdConfig::default();
    for (params, what) in [
        (vec![constant], "not a leaf that requires a gradient"),
        (vec![computed], "not a leaf"),
        (vec![view], "is a view"),
        (
            vec![w.clone(), w.clone()],
            "parameter 1 is parameter 0 again",
        ),
    ] {
        let e = sgd(params, ok).expect("refused");
        assert!(e.contains(what), "{e}");
    }
    for c in [
        SgdConfig { lr: -1.0, ..ok },
        SgdConfig { lr: f64::NAN, ..ok },
        SgdConfig {
            nesterov: true,
            ..ok
        },
        SgdConfig {
            momentum: 0.9,
            dampening: 0.1,
            nesterov: true,
            ..ok
        },
    ] {
        assert!(sgd(vec![w.clone()], c).is_some(), "{c:?}");
    }
    for c in [
        AdamConfig {
            betas: (1.0, 0.999),
            ..Default::default()
        },
        AdamConfig {
            eps: -1.0,
            ..Default::default()
        },
        AdamConfig {
            weight_decay: f64::INFINITY,
            ..Default::default()
        },
    ] {
        assert!(matches!(
            Adam::new(vec![w.clone()], c),
            Err(Error::Invalid { .. })
        ));
        assert!(AdamW::new(vec![w.clone()], c).is_err());
    }
    let mut opt = SGD::new(vec![w.clone()], ok).unwrap();
    assert!(opt.set_learning_rate(-0.1).is_err());
    assert_eq!(opt.learning_rate(), ok.lr);
}

// ---------------------------------------------------------------------------
// Layers.

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn modules_are_send_and_sync() {
    assert_send_sync::<Sequential>();
    assert_send_sync::<Linear>();
    assert_send_sync::<Conv2d>();
    assert_send_sync::<Box<dyn Module + Send + Sync>>();
}

#[test]
fn linear_init_and_forward() {
    let _g = serial();
    let layer = Linear::with_options(50, 40, true, DType::F64, 9).unwrap();
    let w = layer.weight().to_vec_f64().unwrap();
    let b = layer.bias().unwrap().to_vec_f64().unwrap();
    let bound = 1.0 / 50f64.sqrt();
    assert!(w.iter().chain(&b).all(|v| v.abs() <= bound));
    // Spread over the interval, weight and bias from different streams.
    let max = w.iter().cloned().fold(f64::MIN, f64::max);
    let min = w.iter().cloned().fold(f64::MAX, f64::min);
    assert!(max > 0.9 * bound && min < -0.9 * bound);
    assert_ne!(&w[..40], &b[..]);
    // Reproducible from the seed, different for another seed.
    let again = Linear::with_options(50, 40, true, DType::F64, 9).unwrap();
    assert_eq!(again.weight().to_vec_f64().unwrap(), w);
    let other = Linear::with_options(50, 40, true, DType::F64, 10).unwrap();
    assert_ne!(other.weight().to_vec_f64().unwrap(), w);
    assert!(layer.weight().is_leaf() && layer.weight().is_requires_grad());
    assert_eq!((layer.in_features(), layer.out_features()), (50, 40));
    // forward = x·Wᵀ + b, on a batch of rank 3 too.
    let x = Tensor::randn(&[2, 3, 50], DType::F64, 1).unwrap();
    let y = layer.forward(&x).unwrap();
    assert_eq!(y.shape(), &[2, 3, 40]);
    let xv = x.to_vec_f64().unwrap();
    let yv = y.to_vec_f64().unwrap();
    for r in 0..6 {
        for o in 0..40 {
            let e: f64 = (0..50).map(|i| xv[r * 50 + i] * w[o * 50 + i]).sum::<f64>() + b[o];
            assert!((yv[r * 40 + o] - e).abs() < 1e-12);
        }
    }
    let no_bias = Linear::with_options(3, 2, false, DType::F32, 0).unwrap();
    assert_eq!(no_bias.parameters().len(), 1);
    assert!(layer
        .forward(&Tensor::ones(&[2, 49], DType::F64).unwrap())
        .is_err());
}

#[test]
fn sequential_lists_shared_parameters_once() {
    let _g = serial();
    let shared = Linear::new(3, 3, 0).unwrap();
    let model = Sequential::new()
        .add(shared.clone())
        .add(Tanh)
        .add(shared.clone())
        .add(Linear::new(3, 1, 1).unwrap());
    let params = model.parameters();
    assert_eq!(params.len(), 4);
    // Gradients from both uses accumulate into the one weight.
    let x = Tensor::randn(&[5, 3], DType::F32, 2).unwrap();
    model
        .forward(&x)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert!(shared.weight().grad().is_some());
    let empty = Sequential::new();
    assert!(empty.is_empty());
    assert_eq!(
        empty.forward(&x).unwrap().to_vec().unwrap(),
        x.to_vec().unwrap()
    );
}

#[test]
fn conv_net_trains() {
    let _g = serial();
    // A 2-class problem on 1×6×6 images: a bright bar, horizontal or vertical.
    let n = 16;
    let mut data = vec![0f32; n * 36];
    let mut labels = vec![0usize; n];
    for k in 0..n {
        let at = 1 + k % 4;
        labels[k] = k % 2;
        for j in 0..6 {
            let (r, c) = if k % 2 == 0 { (at, j) } else { (j, at) };
            data[k * 36 + r * 6 + c] = 1.0;
        }
    }
    let noise = Tensor::randn(&[n, 1, 6, 6], DType::F32, 3)
        .unwrap()
        .mul_scalar(0.1)
        .unwrap();
    let x = Tensor::from_vec(data, &[n, 1, 6, 6])
        .unwrap()
        .add(&noise)
        .unwrap();
    let conv = Conv2dConfig {
        padding: [1, 1],
        stride: [2, 2],
        ..Default::default()
    };
    let model = Sequential::new()
        .add(Conv2d::with_config(1, 4, [3, 3], conv, DType::F32, 1).unwrap())
        .add(ReLU)
        .add(Flatten)
        .add(Linear::new(4 * 3 * 3, 2, 2).unwrap());
    assert_eq!(model.parameters().len(), 4);
    let mut opt = Adam::new(
        model.parameters(),
        AdamConfig {
            lr: 0.05,
            ..Default::default()
        },
    )
    .unwrap();
    let mut losses = vec![];
    for step in 0..30 {
        let stats = tenjin::stats();
        opt.zero_grad();
        let loss = model.forward(&x).unwrap().cross_entropy(&labels).unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
        losses.push(loss.item().unwrap());
        if step >= 1 {
            let after = tenjin::stats();
            assert_eq!(after.derivations, stats.derivations);
            assert_eq!(after.kernels_compiled, stats.kernels_compiled);
        }
    }
    assert!(losses[29] < 0.5 * losses[0], "{losses:?}");
}

#[test]
fn init_helpers() {
    let _g = serial();
    let u = nn::init::uniform(&[1000], -2.0, 3.0, DType::F64, 1)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    assert!(u.iter().all(|&v| (-2.0..3.0).contains(&v)));
    let mean = u.iter().sum::<f64>() / 1000.0;
    assert!((mean - 0.5).abs() < 0.2);
    let z = nn::init::normal(&[4000], 1.0, 0.5, DType::F32, 2)
        .unwrap()
        .to_vec_f64()
        .unwrap();
    let m = z.iter().sum::<f64>() / 4000.0;
    let sd = (z.iter().map(|v| (v - m).powi(2)).sum::<f64>() / 4000.0).sqrt();
    assert!((m - 1.0).abs() < 0.05 && (sd - 0.5).abs() < 0.05);
    assert_eq!(nn::init::fans(&[8, 4, 3, 3]).unwrap(), (36, 72));
    let x = nn::init::xavier_uniform(&[8, 4, 3, 3], DType::F32, 3).unwrap();
    let bound = (6.0f64 / 108.0).sqrt();
    assert!(x.to_vec_f64().unwrap().iter().all(|v| v.abs() <= bound));
    let k = nn::init::kaiming_uniform(&[8, 16], DType::F32, 3).unwrap();
    assert!(k
        .to_vec_f64()
        .unwrap()
        .iter()
        .all(|v| v.abs() <= (6.0f64 / 16.0).sqrt()));
    assert!(nn::init::fans(&[3]).is_err());
    assert!(nn::init::uniform(&[2], 1.0, 0.0, DType::F32, 0).is_err());
    assert!(nn::init::normal(&[2], 0.0, f64::NAN, DType::F32, 0).is_err());
}

#[test]
fn activations_and_flatten() {
    let _g = serial();
    let x = Tensor::from_vec(vec![-1.0, 0.5, 2.0, -0.25], &[2, 2]).unwrap();
    assert_eq!(
        ReLU.forward(&x).unwrap().to_vec().unwrap(),
        vec![0.0, 0.5, 2.0, 0.0]
    );
    let t = Tanh.forward(&x).unwrap().to_vec().unwrap();
    let s = nn::Sigmoid.forward(&x).unwrap().to_vec().unwrap();
    for (i, v) in [-1.0f32, 0.5, 2.0, -0.25].iter().enumerate() {
        assert!((t[i] - v.tanh()).abs() < 1e-6);
        assert!((s[i] - 1.0 / (1.0 + (-v).exp())).abs() < 1e-6);
    }
    let f = Flatten
        .forward(&Tensor::zeros(&[3, 2, 2, 2], DType::F32).unwrap())
        .unwrap();
    assert_eq!(f.shape(), &[3, 8]);
    // A view (transpose) is flattened through a copy.
    let v = Tensor::arange(6, DType::F32)
        .unwrap()
        .reshape(&[1, 2, 3])
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    assert_eq!(
        Flatten.forward(&v).unwrap().to_vec().unwrap(),
        vec![0., 3., 1., 4., 2., 5.]
    );
    assert!(ReLU.parameters().is_empty());
}

#[test]
fn conv2d_layer_errors() {
    let _g = serial();
    let bad = |c: Conv2dConfig| Conv2d::with_config(4, 4, [3, 3], c, DType::F32, 0).is_err();
    assert!(bad(Conv2dConfig {
        groups: 0,
        ..Default::default()
    }));
    assert!(bad(Conv2dConfig {
        stride: [0, 1],
        ..Default::default()
    }));
    assert!(bad(Conv2dConfig {
        groups: 3,
        ..Default::default()
    }));
    let conv = Conv2d::new(3, 2, [2, 2], 0).unwrap();
    assert_eq!(conv.weight().shape(), &[2, 3, 2, 2]);
    assert!(conv
        .forward(&Tensor::zeros(&[1, 4, 5, 5], DType::F32).unwrap())
        .is_err());
    let w = Tensor::ones(&[2, 3, 1, 1], DType::F32).unwrap();
    let from = Conv2d::from_parameters(w, None, Conv2dConfig::default()).unwrap();
    assert_eq!(from.parameters().len(), 1);
    assert!(!from.config().bias);
    let y = from
        .forward(&Tensor::ones(&[1, 3, 2, 2], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![3.0; 8]);
}

/// Regression (core): a scalar that folds the body to a constant (`x * 0`,
/// `x ** 0`) once left the output impossible to size.
#[test]
fn scalar_ops_that_fold_to_constants() {
    let _g = serial();
    let w = Tensor::from_vec_f64(vec![1.0, -2.0, 3.0], &[3])
        .unwrap()
        .requires_grad();
    assert_eq!(
        w.mul_scalar(0.0).unwrap().to_vec_f64().unwrap(),
        vec![0.0; 3]
    );
    assert_eq!(
        w.pow_scalar(0.0).unwrap().to_vec_f64().unwrap(),
        vec![1.0; 3]
    );
    w.mul_scalar(0.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec_f64().unwrap(), vec![0.0; 3]);
}
