//! Parameter groups against PyTorch (`bench/torch_param_groups.py` →
//! `tests/data/torch_param_groups.txt`): AdamW (one group with `amsgrad`),
//! SGD and RMSprop, each with two groups of their own options (the second
//! with `maximize`), follow
//! PyTorch's f64 and f32 trajectories; their state dicts number the
//! parameters across the groups as PyTorch does and keep each group's
//! rate, so PyTorch's optimizer state loads and resumes; bad groupings and
//! bad states are errors.

use std::collections::HashMap;
use tenjin::optim::{
    AdamConfig, AdamW, Optimizer, ParamGroup, RMSprop, RmspropConfig, SgdConfig, SGD,
};
use tenjin::{DType, Error, Tensor};

const NAMES: [&str; 3] = ["a", "b", "c"];
const INIT: [&[f64]; 3] = [&[0.5, -1.0, 2.0], &[1.5, -0.25], &[0.3, 0.7, -0.9, 1.1]];

/// PyTorch's run of one case.
#[derive(Default, Clone)]
struct Reference {
    /// Per step (1-based, index 0 unused), the parameters by name.
    steps: Vec<HashMap<String, Vec<f64>>>,
    /// The state after step 5, by key.
    state: Vec<(String, Vec<f64>)>,
}

fn reference() -> HashMap<String, Reference> {
    let mut out: HashMap<String, Reference> = HashMap::new();
    let mut current = String::new();
    for line in include_str!("data/torch_param_groups.txt").lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let numbers = |from: usize| -> Vec<f64> {
            words[from..].iter().map(|v| v.parse().unwrap()).collect()
        };
        match words[0] {
            "case" => current = words[1].to_string(),
            "step" => {
                let r = out.entry(current.clone()).or_default();
                let k: usize = words[1].parse().unwrap();
                r.steps.resize_with(k + 1, HashMap::new);
                r.steps[k].insert(words[2].to_string(), numbers(3));
            }
            "state" => {
                let r = out.entry(current.clone()).or_default();
                r.state.push((words[1].to_string(), numbers(2)));
            }
            _ => {}
        }
    }
    out
}

fn leaves(values: [&[f64]; 3], dtype: DType) -> Vec<Tensor> {
    values
        .iter()
        .map(|v| {
            Tensor::from_vec_f64(v.to_vec(), &[v.len()])
                .and_then(|t| t.to_dtype(dtype))
                .unwrap()
                .requires_grad()
        })
        .collect()
}

/// The cases of the reference: each optimizer in f64, then in f32 (`_f32`).
const CASES: [(&str, DType); 6] = [
    ("adamw", DType::F64),
    ("sgd", DType::F64),
    ("rmsprop", DType::F64),
    ("adamw_f32", DType::F32),
    ("sgd_f32", DType::F32),
    ("rmsprop_f32", DType::F32),
];

/// The script's optimizers, written in tenjin.
fn optimizer(name: &str, p: &[Tensor]) -> Result<Box<dyn Optimizer>, Error> {
    let (a, b, c) = (p[0].clone(), p[1].clone(), p[2].clone());
    Ok(match name.trim_end_matches("_f32") {
        "adamw" => {
            let base = AdamConfig {
                lr: 0.1,
                betas: (0.8, 0.95),
                weight_decay: 0.1,
                ..AdamConfig::adamw()
            };
            let second = AdamConfig {
                lr: 0.05,
                weight_decay: 0.0,
                amsgrad: true,
                maximize: true,
                ..base
            };
            Box::new(AdamW::with_groups(vec![
                ParamGroup::new(vec![a, b], base),
                ParamGroup::new(vec![c], second),
            ])?)
        }
        "sgd" => {
            let first = SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                nesterov: true,
                ..SgdConfig::default()
            };
            let second = SgdConfig {
                lr: 0.2,
                momentum: 0.5,
                dampening: 0.1,
                weight_decay: 0.01,
                maximize: true,
                ..SgdConfig::default()
            };
            Box::new(SGD::with_groups(vec![
                ParamGroup::new(vec![a], first),
                ParamGroup::new(vec![b, c], second),
            ])?)
        }
        "rmsprop" => {
            let base = RmspropConfig {
                lr: 0.01,
                alpha: 0.9,
                ..RmspropConfig::default()
            };
            Box::new(RMSprop::with_groups(vec![
                ParamGroup::new(
                    vec![a, b],
                    RmspropConfig {
                        centered: true,
                        ..base
                    },
                ),
                ParamGroup::new(
                    vec![c],
                    RmspropConfig {
                        momentum: 0.9,
                        lr: 0.02,
                        maximize: true,
                        ..base
                    },
                ),
            ])?)
        }
        _ => unreachable!("{name}"),
    })
}

fn step(opt: &mut dyn Optimizer, p: &[Tensor]) -> Result<(), Error> {
    opt.zero_grad();
    let mut loss = Tensor::scalar(0.0, p[0].dtype())?;
    for t in p {
        loss = loss.add(&t.mul(t)?.mul(t)?.sum()?.div_scalar(3.0)?)?;
    }
    loss.backward()?;
    opt.step()
}

/// Equal to 1e-12 relative in f64; in f32 to 1e-5 (the two libraries
/// round the update's terms in different orders, a few ulps a step).
fn assert_close(got: &[f64], want: &[f64], dtype: DType, what: &str) {
    let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1e-3),
            "{what}: {got:?}, PyTorch {want:?}"
        );
    }
}

#[test]
fn two_groups_follow_pytorch_and_number_the_state_across_groups() -> Result<(), Error> {
    let reference = reference();
    for (name, dtype) in CASES {
        let want = &reference[name];
        let p = leaves(INIT, dtype);
        let mut opt = optimizer(name, &p)?;
        for k in 1..=6 {
            step(opt.as_mut(), &p)?;
            for (t, n) in p.iter().zip(NAMES) {
                assert_close(
                    &t.to_vec_f64()?,
                    &want.steps[k][n],
                    dtype,
                    &format!("{name} step {k} {n}"),
                );
            }
            if k == 5 {
                let mut got: Vec<(String, Vec<f64>)> = opt
                    .state_dict()?
                    .into_iter()
                    .map(|(key, t)| (key, t.to_vec_f64().unwrap()))
                    .collect();
                got.sort_by(|x, y| x.0.cmp(&y.0));
                let mut want_state = want.state.clone();
                want_state.sort_by(|x, y| x.0.cmp(&y.0));
                let keys: Vec<&String> = got.iter().map(|(k, _)| k).collect();
                let want_keys: Vec<&String> = want_state.iter().map(|(k, _)| k).collect();
                assert_eq!(keys, want_keys, "{name}: state keys");
                for ((key, g), (_, w)) in got.iter().zip(&want_state) {
                    assert_close(g, w, dtype, &format!("{name} {key}"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn pytorchs_state_loads_and_the_next_step_is_pytorchs() -> Result<(), Error> {
    let reference = reference();
    for (name, dtype) in CASES {
        let want = &reference[name];
        let at5: Vec<&[f64]> = NAMES.iter().map(|n| &want.steps[5][*n][..]).collect();
        let p = leaves([at5[0], at5[1], at5[2]], dtype);
        let mut opt = optimizer(name, &p)?;
        let state = pytorchs_state(want, dtype);
        // The rates are PyTorch's too: set others first, the state sets them back.
        let rates = opt.learning_rates();
        opt.set_learning_rate(123.0)?;
        opt.load_state_dict(&state)?;
        assert_eq!(opt.learning_rates(), rates, "{name}: rates from the state");
        step(opt.as_mut(), &p)?;
        for (t, n) in p.iter().zip(NAMES) {
            assert_close(
                &t.to_vec_f64()?,
                &want.steps[6][n],
                dtype,
                &format!("{name} resumed, {n}"),
            );
        }
    }
    Ok(())
}

/// PyTorch's state after step 5 as tensors: steps and rates scalars, the
/// rest of the parameter's shape and dtype.
fn pytorchs_state(want: &Reference, dtype: DType) -> Vec<(String, Tensor)> {
    want.state
        .iter()
        .map(|(key, v)| {
            let t = if key.ends_with(".step") || key.starts_with("param_groups.") {
                Tensor::scalar(v[0], DType::F64).unwrap()
            } else {
                let k: usize = key.split('.').nth(1).unwrap().parse().unwrap();
                Tensor::from_vec_f64(v.clone(), &[INIT[k].len()])
                    .and_then(|t| t.to_dtype(dtype))
                    .unwrap()
            };
            (key.clone(), t)
        })
        .collect()
}

#[test]
fn a_state_with_bad_rates_is_refused_and_changes_nothing() -> Result<(), Error> {
    let want = &reference()["adamw"];
    let p = leaves(INIT, DType::F64);
    let mut opt = optimizer("adamw", &p)?;
    let full = pytorchs_state(want, DType::F64);
    let before = opt.learning_rates();
    let edit = |drop: &str, add: Option<(&str, f64)>| -> Vec<(String, Tensor)> {
        let mut s: Vec<(String, Tensor)> =
            full.iter().filter(|(n, _)| n != drop).cloned().collect();
        if let Some((n, v)) = add {
            s.push((n.into(), Tensor::scalar(v, DType::F64).unwrap()));
        }
        s
    };
    for (state, says) in [
        (edit("param_groups.1.lr", None), "no `param_groups.1.lr`"),
        (
            edit("", Some(("param_groups.2.lr", 0.1))),
            "unexpected key `param_groups.2.lr`",
        ),
        (
            edit("", Some(("param_groups.0.momentum", 0.1))),
            "unexpected key `param_groups.0.momentum`",
        ),
        (
            edit("param_groups.0.lr", Some(("param_groups.0.lr", -1.0))),
            "param_groups.0.lr must be finite and >= 0",
        ),
    ] {
        let e = opt
            .load_state_dict(&state)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(says), "{e}");
        assert_eq!(opt.learning_rates(), before, "{says}: rates unchanged");
        assert!(
            opt.state_dict()?
                .iter()
                .all(|(n, _)| n.starts_with("param_groups.")),
            "no state loaded"
        );
    }
    // Without any `param_groups` entry the rates stay as they are.
    opt.set_learning_rates(&[0.3, 0.4])?;
    opt.load_state_dict(
        &edit("param_groups.0.lr", None)
            .into_iter()
            .filter(|(n, _)| !n.starts_with("param_groups."))
            .collect::<Vec<_>>(),
    )?;
    assert_eq!(opt.learning_rates(), vec![0.3, 0.4]);
    Ok(())
}

#[test]
fn groups_are_checked() -> Result<(), Error> {
    let p = leaves(INIT, DType::F64);
    let c = SgdConfig::default();
    // A parameter in two groups is the same parameter twice.
    let e = SGD::with_groups(vec![
        ParamGroup::new(vec![p[0].clone(), p[1].clone()], c),
        ParamGroup::new(vec![p[1].clone()], c),
    ])
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("parameter 2 is parameter 1 again"), "{e}");
    // No parameter in any group.
    let e = SGD::with_groups(vec![ParamGroup::new(vec![], c), ParamGroup::new(vec![], c)])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no parameters to optimize"), "{e}");
    // A bad option names its group's value.
    let bad = SgdConfig {
        nesterov: true,
        ..c
    };
    let e = SGD::with_groups(vec![
        ParamGroup::new(vec![p[0].clone()], c),
        ParamGroup::new(vec![p[1].clone()], bad),
    ])
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("Nesterov"), "{e}");
    // An empty group beside others is allowed (as in PyTorch); rates are per group.
    let mut opt = SGD::with_groups(vec![
        ParamGroup::new(vec![p[0].clone()], c),
        ParamGroup::new(vec![], SgdConfig { lr: 0.5, ..c }),
    ])?;
    assert_eq!(opt.learning_rates(), vec![c.lr, 0.5]);
    opt.set_learning_rate(0.25)?;
    assert_eq!(opt.learning_rates(), vec![0.25, 0.25]);
    assert!(opt.set_learning_rates(&[0.1, -1.0]).is_err());
    assert_eq!(
        opt.learning_rates(),
        vec![0.25, 0.25],
        "a refused rate sets none"
    );
    Ok(())
}
