//! Weights and optimizer state on disk: safetensors round trips, PyTorch
//! reading our files, `load_state_dict` for modules and optimizers (a run
//! resumed from saved state continues bit for bit), and RMSprop against
//! PyTorch's trajectories (`tests/data/torch_rmsprop.txt`, made by
//! `bench/torch_rmsprop.py`).

mod common;

use std::path::PathBuf;
use tenjin::nn::{BatchNorm, Linear, Module, ReLU, Sequential};
use tenjin::optim::{Adam, AdamConfig, Optimizer, RMSprop, RmspropConfig, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenjin-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir.join(name)
}

fn model(seed: u64) -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::new(3, 5, seed)?)
        .add(ReLU)
        .add(Linear::new(5, 2, seed + 1)?))
}

fn data() -> Result<(Tensor, Tensor), Error> {
    Ok((
        Tensor::randn(&[8, 3], DType::F32, 11)?,
        Tensor::randn(&[8, 2], DType::F32, 12)?,
    ))
}

fn train(m: &Sequential, opt: &mut dyn Optimizer, steps: usize) -> Result<Vec<f32>, Error> {
    let (x, y) = data()?;
    let mut losses = Vec::new();
    for _ in 0..steps {
        opt.zero_grad();
        let loss = m.forward(&x)?.mse_loss(&y)?;
        loss.backward()?;
        opt.step()?;
        losses.push(loss.item()? as f32);
    }
    Ok(losses)
}

fn params(m: &Sequential) -> Result<Vec<Vec<f32>>, Error> {
    m.parameters().iter().map(|p| p.to_vec()).collect()
}

type MakeOpt = fn(Vec<Tensor>) -> Result<Box<dyn Optimizer>, Error>;

/// Three steps, save model and optimizer, two more; a fresh model and
/// optimizer loaded from the files take the same two steps bit for bit.
#[test]
fn a_run_resumed_from_safetensors_continues_bit_for_bit() -> Result<(), Error> {
    let makers: [(&str, MakeOpt); 3] = [
        ("sgd", |p| {
            let c = SgdConfig {
                lr: 0.05,
                momentum: 0.9,
                ..Default::default()
            };
            Ok(Box::new(SGD::new(p, c)?))
        }),
        ("adam", |p| {
            let c = AdamConfig {
                lr: 0.01,
                ..Default::default()
            };
            Ok(Box::new(Adam::new(p, c)?))
        }),
        ("rmsprop", |p| {
            let c = RmspropConfig {
                lr: 0.01,
                momentum: 0.5,
                centered: true,
                ..Default::default()
            };
            Ok(Box::new(RMSprop::new(p, c)?))
        }),
    ];
    for (name, make) in makers {
        let a = model(1)?;
        let mut opt_a = make(a.parameters())?;
        train(&a, opt_a.as_mut(), 3)?;
        let weights = temp(&format!("{name}-model.safetensors"));
        let state = temp(&format!("{name}-opt.safetensors"));
        let sd = a.state_dict();
        let named: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
        tenjin::safetensors::save(&weights, &named)?;
        let os = opt_a.state_dict()?;
        assert!(!os.is_empty(), "{name}: no optimizer state after 3 steps");
        let named: Vec<(&str, &Tensor)> = os.iter().map(|(n, t)| (n.as_str(), t)).collect();
        tenjin::safetensors::save(&state, &named)?;
        let la = train(&a, opt_a.as_mut(), 2)?;

        let b = model(7)?; // other initial weights
        let mut opt_b = make(b.parameters())?;
        b.load_state_dict(&tenjin::safetensors::load(&weights)?)?;
        opt_b.load_state_dict(&tenjin::safetensors::load(&state)?)?;
        let lb = train(&b, opt_b.as_mut(), 2)?;
        assert_eq!(la, lb, "{name}: losses after resuming");
        assert_eq!(
            params(&a)?,
            params(&b)?,
            "{name}: parameters after resuming"
        );

        // Without the optimizer state the run differs (the state mattered).
        let c = model(7)?;
        let mut opt_c = make(c.parameters())?;
        c.load_state_dict(&tenjin::safetensors::load(&weights)?)?;
        let lc = train(&c, opt_c.as_mut(), 2)?;
        assert_ne!(
            la[1], lc[1],
            "{name}: the optimizer state made no difference"
        );
    }
    Ok(())
}

#[test]
fn names_follow_pytorch_and_bad_state_changes_nothing() -> Result<(), Error> {
    let m = model(1)?;
    let names: Vec<String> = m.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
    let bn = Sequential::new().add(BatchNorm::new(4, 1e-5, 0.1, DType::F32)?);
    let names: Vec<String> = bn.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "0.weight",
            "0.bias",
            "0.running_mean",
            "0.running_var",
            "0.num_batches_tracked"
        ]
    );

    let before = params(&m)?;
    let mut sd = model(2)?.state_dict();
    sd[3].1 = Tensor::zeros(&[3], DType::F32)?; // a wrong shape, last
    let e = m.load_state_dict(&sd).unwrap_err().to_string();
    assert!(e.contains("2.bias") && e.contains("[3]"), "{e}");
    assert_eq!(params(&m)?, before, "a failed load changed the weights");
    let mut sd = model(2)?.state_dict();
    sd.push(("extra".into(), Tensor::zeros(&[1], DType::F32)?));
    assert!(m
        .load_state_dict(&sd)
        .unwrap_err()
        .to_string()
        .contains("extra"));
    assert!(m
        .load_state_dict(&sd[..2])
        .unwrap_err()
        .to_string()
        .contains("missing"));

    let mut opt = Adam::new(m.parameters(), AdamConfig::default())?;
    let bad = [(
        "state.0.exp_avg".to_string(),
        Tensor::zeros(&[5, 3], DType::F32)?,
    )];
    assert!(opt.load_state_dict(&bad).is_err(), "exp_avg without step");
    let bad = [("state.9.step".to_string(), Tensor::scalar(1.0, DType::F64)?)];
    assert!(opt
        .load_state_dict(&bad)
        .unwrap_err()
        .to_string()
        .contains("state.9.step"));
    Ok(())
}

#[test]
fn safetensors_round_trips_every_dtype_and_views() -> Result<(), Error> {
    let path = temp("dtypes.safetensors");
    let f32s = Tensor::randn(&[2, 3], DType::F32, 1)?;
    let f64s = Tensor::randn(&[4], DType::F64, 2)?;
    let i32s = Tensor::from_vec_i32(vec![-1, 2, i32::MAX], &[3])?;
    let i64s = Tensor::from_vec_i64(vec![i64::MIN, 0, 1 << 40, 5], &[2, 2])?;
    let view = f32s.t()?;
    tenjin::safetensors::save(
        &path,
        &[
            ("a", &f32s),
            ("b", &f64s),
            ("c", &i32s),
            ("d", &i64s),
            ("e", &view),
        ],
    )?;
    let back = tenjin::safetensors::load(&path)?;
    let get = |n: &str| {
        back.iter()
            .find(|(m, _)| m == n)
            .map(|(_, t)| t.clone())
            .unwrap()
    };
    assert_eq!(get("a").to_vec()?, f32s.to_vec()?);
    assert_eq!(get("b").to_vec_f64()?, f64s.to_vec_f64()?);
    assert_eq!(get("c").dtype(), DType::I32);
    assert_eq!(get("c").to_vec_i64()?, vec![-1, 2, i32::MAX as i64]);
    assert_eq!(get("d").to_vec_i64()?, i64s.to_vec_i64()?);
    assert_eq!(get("d").shape(), &[2, 2]);
    assert_eq!(get("e").shape(), &[3, 2]);
    assert_eq!(get("e").to_vec()?, view.to_vec()?);
    assert!(tenjin::safetensors::save(&path, &[("a", &f32s), ("a", &f64s)]).is_err());
    assert!(tenjin::safetensors::load(temp("missing.safetensors")).is_err());
    Ok(())
}

/// PyTorch's `safetensors.torch.load_file` reads our file (skips with a
/// message when the venv of `../shared/bench/setup.sh` is absent).
#[test]
fn pytorch_loads_our_file() -> Result<(), Error> {
    let Some(python) = common::bench_python() else {
        return Ok(());
    };
    let path = temp("for-torch.safetensors");
    let m = model(3)?;
    let mut sd = m.state_dict();
    sd.push(("ids".into(), Tensor::from_vec_i64(vec![3, 1, 4], &[3])?));
    let named: Vec<(&str, &Tensor)> = sd.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tenjin::safetensors::save(&path, &named)?;
    let script = "import sys, torch\nfrom safetensors.torch import load_file\nd = load_file(sys.argv[1])\nfor k in sorted(d):\n    t = d[k]\n    print(k, str(t.dtype), list(t.shape), repr(float(t.double().sum())))\n";
    let out = std::process::Command::new(&python)
        .args(["-c", script, path.to_str().expect("a UTF-8 path")])
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    let mut want: Vec<String> = sd
        .iter()
        .map(|(n, t)| {
            let dtype = match t.dtype() {
                DType::F32 => "torch.float32",
                DType::I64 => "torch.int64",
                _ => unreachable!(),
            };
            let sum: f64 = t.to_vec_f64().unwrap().iter().sum();
            format!("{n} {dtype} {:?} {sum:?}", t.shape())
        })
        .collect();
    want.sort();
    for (got, want) in lines.iter().zip(&want) {
        let (g, w): (Vec<&str>, Vec<&str>) = (
            got.rsplitn(2, ' ').collect(),
            want.rsplitn(2, ' ').collect(),
        );
        assert_eq!(g[1], w[1], "PyTorch read {got}, we wrote {want}");
        let (gs, ws): (f64, f64) = (g[0].parse().unwrap(), w[0].parse().unwrap());
        assert!(
            (gs - ws).abs() <= 1e-9 * ws.abs().max(1.0),
            "{got} vs {want}"
        );
    }
    assert_eq!(lines.len(), want.len());
    Ok(())
}

#[test]
fn rmsprop_follows_pytorchs_trajectories() -> Result<(), Error> {
    let text = include_str!("data/torch_rmsprop.txt");
    let configs = [
        (
            "plain",
            RmspropConfig {
                lr: 0.01,
                ..Default::default()
            },
        ),
        (
            "centered_momentum_wd",
            RmspropConfig {
                lr: 0.01,
                alpha: 0.9,
                eps: 1e-6,
                weight_decay: 0.1,
                momentum: 0.9,
                centered: true,
                maximize: false,
            },
        ),
        (
            "momentum",
            RmspropConfig {
                lr: 0.05,
                momentum: 0.5,
                ..Default::default()
            },
        ),
    ];
    for (name, config) in configs {
        let start = text.find(&format!("case {name}\n")).expect("the case") + name.len() + 6;
        let rows: Vec<Vec<f64>> = text[start..]
            .lines()
            .take(5)
            .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
            .collect();
        let p = Tensor::from_vec_f64(vec![0.5, -1.0, 2.0], &[3])?.requires_grad();
        let mut opt = RMSprop::new(vec![p.clone()], config)?;
        for want in rows {
            opt.zero_grad();
            p.mul(&p)?.mul(&p)?.sum()?.div_scalar(3.0)?.backward()?;
            opt.step()?;
            for (g, w) in p.to_vec_f64()?.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-14 * w.abs().max(1.0),
                    "{name}: {g} vs PyTorch {w}"
                );
            }
        }
    }
    Ok(())
}

/// AMSGrad against PyTorch's trajectories (`bench/torch_adam_amsgrad.py`):
/// Adam and AdamW with `amsgrad`, five steps on Σp³/3, f64; the fourth
/// state row is PyTorch's `max_exp_avg_sq`.
#[test]
fn amsgrad_follows_pytorchs_trajectories() -> Result<(), Error> {
    let text = include_str!("data/torch_adam_amsgrad.txt");
    for name in ["adam", "adamw"] {
        let start = text.find(&format!("case {name}\n")).expect("the case") + name.len() + 6;
        let rows: Vec<Vec<f64>> = text[start..]
            .lines()
            .take(6)
            .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
            .collect();
        let p = Tensor::from_vec_f64(vec![0.5, -1.0, 2.0], &[3])?.requires_grad();
        let c = AdamConfig {
            lr: 0.3,
            betas: (0.5, 0.9),
            amsgrad: true,
            ..Default::default()
        };
        let mut opt: Box<dyn Optimizer> = if name == "adam" {
            Box::new(Adam::new(vec![p.clone()], c)?)
        } else {
            Box::new(tenjin::optim::AdamW::new(
                vec![p.clone()],
                AdamConfig {
                    weight_decay: 0.1,
                    ..c
                },
            )?)
        };
        for want in &rows[..5] {
            opt.zero_grad();
            p.mul(&p)?.mul(&p)?.sum()?.div_scalar(3.0)?.backward()?;
            opt.step()?;
            for (g, w) in p.to_vec_f64()?.iter().zip(want) {
                assert!(
                    (g - w).abs() <= 1e-14 * w.abs().max(1.0),
                    "{name}: {g} vs PyTorch {w}"
                );
            }
        }
        let state = opt.state_dict()?;
        let (_, vmax) = state
            .iter()
            .find(|(k, _)| k == "state.0.max_exp_avg_sq")
            .expect("PyTorch's name for the fourth row");
        for (g, w) in vmax.to_vec_f64()?.iter().zip(&rows[5]) {
            assert!(
                (g - w).abs() <= 1e-14 * w.abs().max(1.0),
                "{name}: max_exp_avg_sq {g} vs {w}"
            );
        }
        // And it loads back.
        opt.load_state_dict(&state)?;
    }
    Ok(())
}
