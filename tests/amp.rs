//! Mixed precision: `autocast` puts each op in the type PyTorch's lists
//! give it, gradients reach f32 master weights in f32, an MLP trains as
//! well under bf16 autocast as in f32, and the `GradScaler` skips exactly
//! the step whose gradients overflowed, backing off and growing its scale
//! as PyTorch's does.

mod common;

use tenjin::amp::{autocast, autocast_dtype, GradScaler, GradScalerConfig};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Device, Error, Tensor};

#[test]
fn each_op_runs_in_the_type_its_list_gives_it() {
    let x = Tensor::randn(&[4, 8], DType::F32, 0).unwrap();
    let w = Tensor::randn(&[3, 8], DType::F32, 1).unwrap();
    let img = Tensor::randn(&[1, 2, 5, 5], DType::F32, 2).unwrap();
    let k = Tensor::randn(&[3, 2, 3, 3], DType::F32, 3).unwrap();
    for half in [DType::BF16, DType::F16] {
        autocast(half, || {
            assert_eq!(autocast_dtype(), Some(half));
            // Products and convolutions: in the half type.
            assert_eq!(x.matmul(&w.t()?)?.dtype(), half);
            assert_eq!(x.linear(&w, None)?.dtype(), half);
            assert_eq!(
                img.conv2d(&k, None, [1, 1], [1, 1], [1, 1], 1)?.dtype(),
                half
            );
            // Softmax, norms, losses, long sums: in f32, from half inputs.
            let y = x.linear(&w, None)?;
            assert_eq!(y.softmax(1)?.dtype(), DType::F32);
            assert_eq!(y.layer_norm(1, None, None, 1e-5)?.dtype(), DType::F32);
            assert_eq!(y.sum()?.dtype(), DType::F32);
            assert_eq!(y.exp()?.dtype(), DType::F32);
            assert_eq!(y.cross_entropy(&[0, 1, 2, 0])?.dtype(), DType::F32);
            // The rest: in their arguments' type (half with f32 is f32).
            assert_eq!(y.tanh()?.dtype(), half);
            assert_eq!(y.add(&y)?.dtype(), half);
            assert_eq!(
                y.add(&Tensor::ones(&[4, 3], DType::F32)?)?.dtype(),
                DType::F32
            );
            // f64 is never converted.
            let x64 = x.to_dtype(DType::F64)?;
            assert_eq!(x64.matmul(&x64.t()?)?.dtype(), DType::F64);
            Ok(())
        })
        .unwrap();
        assert_eq!(autocast_dtype(), None);
    }
    // Scopes nest and restore; a non-half type is refused.
    autocast(DType::BF16, || {
        autocast(DType::F16, || {
            assert_eq!(autocast_dtype(), Some(DType::F16));
            Ok(())
        })?;
        assert_eq!(autocast_dtype(), Some(DType::BF16));
        Ok(())
    })
    .unwrap();
    let err = autocast(DType::F32, || Ok(())).unwrap_err().to_string();
    assert!(err.contains("autocast") && err.contains("F32"), "{err}");
}

#[test]
fn the_product_computes_in_the_half_type_and_its_gradient_reaches_f32_weights() {
    let x = Tensor::randn(&[5, 7], DType::F32, 4).unwrap();
    let w = Tensor::randn(&[3, 7], DType::F32, 5)
        .unwrap()
        .requires_grad();
    let y = autocast(DType::BF16, || x.linear(&w, None)).unwrap();
    // The value is the bf16 product of the bf16-rounded operands.
    let want = x
        .to_dtype(DType::BF16)
        .unwrap()
        .matmul(&w.detach().to_dtype(DType::BF16).unwrap().t().unwrap())
        .unwrap();
    assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
    y.sum().unwrap().backward().unwrap();
    let g = w.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    // d/dw Σ x·wᵀ = column sums of the bf16-rounded x (the gradient of the
    // product is a half tensor, each entry a sum of five bf16 values).
    let xb = x
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let sums = xb.sum_dims(&[0], false).unwrap().to_vec_f64().unwrap();
    for (row, got) in g.to_vec_f64().unwrap().chunks(7).enumerate() {
        for (c, (g, s)) in got.iter().zip(&sums).enumerate() {
            assert!(
                (g - s).abs() <= 2f64.powi(-7) * s.abs().max(1.0),
                "{row},{c}: {g} vs {s}"
            );
        }
    }
}

/// Four Gaussian blobs in 16 dimensions, 512 points, and their labels.
fn blobs() -> (Tensor, Vec<usize>) {
    let n = 512;
    let noise = Tensor::randn(&[n, 16], DType::F32, 11)
        .unwrap()
        .to_vec()
        .unwrap();
    let centres = Tensor::randn(&[4, 16], DType::F32, 12)
        .unwrap()
        .to_vec()
        .unwrap();
    let labels: Vec<usize> = (0..n).map(|i| (i * 7) % 4).collect();
    let x: Vec<f32> = (0..n * 16)
        .map(|k| 1.5 * centres[labels[k / 16] * 16 + k % 16] + noise[k])
        .collect();
    (Tensor::from_vec(x, &[n, 16]).unwrap(), labels)
}

struct Mlp {
    params: Vec<Tensor>,
}

impl Mlp {
    fn new() -> Mlp {
        Mlp::new_on(Device::Cpu)
    }

    fn new_on(device: Device) -> Mlp {
        let p = |shape: &[usize], seed| {
            Tensor::randn(shape, DType::F32, seed)
                .unwrap()
                .to_device(device)
                .unwrap()
                .mul_scalar(0.25)
                .unwrap()
                .requires_grad()
        };
        Mlp {
            params: vec![p(&[64, 16], 21), p(&[64], 22), p(&[4, 64], 23), p(&[4], 24)],
        }
    }

    fn logits(&self, x: &Tensor) -> Result<Tensor, Error> {
        let p = &self.params;
        x.linear(&p[0], Some(&p[1]))?
            .relu()?
            .linear(&p[2], Some(&p[3]))
    }

    fn accuracy(&self, x: &Tensor, labels: &[usize]) -> f64 {
        let logits = tenjin::no_grad(|| self.logits(x))
            .unwrap()
            .to_vec()
            .unwrap();
        let right = logits
            .chunks(4)
            .zip(labels)
            .filter(|(row, &l)| {
                let best = (0..4).fold(0, |b, c| if row[c] > row[b] { c } else { b });
                best == l
            })
            .count();
        right as f64 / labels.len() as f64
    }
}

/// Trains for `steps` full-batch SGD steps with `run` computing the loss;
/// returns the model, the last loss and the number of steps taken.
fn train(
    steps: usize,
    mut step: impl FnMut(&Mlp, &mut SGD, usize) -> Result<(f64, bool), Error>,
) -> (Mlp, f64, usize) {
    let model = Mlp::new();
    let config = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        ..Default::default()
    };
    let mut opt = SGD::new(model.params.clone(), config).unwrap();
    let (mut last, mut taken) = (f64::NAN, 0);
    for k in 0..steps {
        opt.zero_grad();
        let (loss, stepped) = step(&model, &mut opt, k).unwrap();
        last = loss;
        taken += usize::from(stepped);
    }
    (model, last, taken)
}

#[test]
fn an_mlp_trains_as_well_under_bf16_autocast_as_in_f32() {
    let (x, labels) = blobs();
    let plain = |m: &Mlp, opt: &mut SGD, _| {
        let loss = m.logits(&x)?.cross_entropy(&labels)?;
        loss.backward()?;
        opt.step()?;
        Ok((loss.item()?, true))
    };
    let (f32_model, f32_loss, _) = train(60, plain);
    let mixed = |m: &Mlp, opt: &mut SGD, _| {
        let loss = autocast(DType::BF16, || m.logits(&x)?.cross_entropy(&labels))?;
        assert_eq!(loss.dtype(), DType::F32);
        loss.backward()?;
        assert_eq!(m.params[0].grad().unwrap().dtype(), DType::F32);
        opt.step()?;
        Ok((loss.item()?, true))
    };
    let (bf16_model, bf16_loss, _) = train(60, mixed);
    let (a32, a16) = (
        f32_model.accuracy(&x, &labels),
        bf16_model.accuracy(&x, &labels),
    );
    // The stated margin: accuracy within 2 points, loss within 10%.
    assert!(a32 > 0.9, "f32 accuracy {a32}");
    assert!((a32 - a16).abs() <= 0.02, "f32 {a32}, bf16 {a16}");
    assert!(
        (f32_loss - bf16_loss).abs() <= 0.1 * f32_loss,
        "f32 {f32_loss}, bf16 {bf16_loss}"
    );
}

#[test]
fn the_grad_scaler_skips_exactly_the_step_that_overflowed_in_f16() {
    let (x, labels) = blobs();
    // (At PyTorch's first scale, 2¹⁶, this model's f16 weight gradients
    // overflow on the first step, as they would in PyTorch: the scaler
    // would back off there too. A smaller first scale leaves only the
    // injected overflow.)
    let config = GradScalerConfig {
        init_scale: 1024.0,
        growth_interval: 10,
        ..Default::default()
    };
    let mut scaler = GradScaler::new(config).unwrap();
    let mut scales = Vec::new();
    let mut skipped_at = Vec::new();
    let (model, loss, taken) = train(40, |m, opt, k| {
        let loss = autocast(DType::F16, || m.logits(&x)?.cross_entropy(&labels))?;
        // Step 5's loss overflows f16's range on the way back (an
        // injected overflow: 65504 is f16's largest finite).
        let scaled = match k {
            5 => scaler.scale(&loss)?.mul_scalar(1e30)?,
            _ => scaler.scale(&loss)?,
        };
        scaled.backward()?;
        let before: Vec<Vec<f32>> = m.params.iter().map(|p| p.to_vec().unwrap()).collect();
        let stepped = scaler.step(opt, &m.params)?;
        if !stepped {
            skipped_at.push(k);
            let after: Vec<Vec<f32>> = m.params.iter().map(|p| p.to_vec().unwrap()).collect();
            assert_eq!(before, after, "a skipped step changes nothing");
        }
        scaler.update()?;
        scales.push(scaler.scale_factor());
        Ok((loss.item()?, stepped))
    });
    assert_eq!(skipped_at, vec![5]);
    assert_eq!(taken, 39);
    // Backed off once at step 5; grown after 10 clean steps (6..=15, 16..=25, ...).
    assert_eq!(scales[4], 1024.0);
    assert_eq!(scales[5], 512.0);
    assert_eq!(scales[14], 512.0);
    assert_eq!(scales[15], 1024.0);
    assert_eq!(scales[25], 2048.0);
    assert!(
        loss.is_finite() && model.accuracy(&x, &labels) > 0.9,
        "loss {loss}"
    );
    // Misuse is an error, not a silent double unscale.
    let mut s = GradScaler::new(GradScalerConfig::default()).unwrap();
    s.unscale(&model.params).unwrap();
    assert!(s.unscale(&model.params).is_err());
    assert!(s.update().is_err()); // before step
    assert!(GradScaler::new(GradScalerConfig {
        backoff_factor: 1.5,
        ..Default::default()
    })
    .is_err());
}

/// The same f16 training steps with a `GradScaler` on the simulated GPU
/// (the half conversions, the probe kernel and the in-place unscale on
/// the device) and on the CPU: the same step skipped, the same scales,
/// losses within f16's rounding of each other.
#[test]
fn the_grad_scaler_steps_alike_on_the_simulated_gpu() {
    tenjin::cuda::simulate().expect("the simulated device");
    let (x, labels) = blobs();
    let x = x.narrow(0, 0, 64).unwrap().contiguous().unwrap();
    let labels = &labels[..64];
    let mut runs = Vec::new();
    for device in [Device::Cpu, Device::Cuda(0)] {
        let model = Mlp::new_on(device);
        let x = x.to_device(device).unwrap();
        let config = SgdConfig {
            lr: 0.05,
            ..Default::default()
        };
        let mut opt = SGD::new(model.params.clone(), config).unwrap();
        let mut scaler = GradScaler::new(GradScalerConfig {
            init_scale: 1024.0,
            growth_interval: 3,
            ..Default::default()
        })
        .unwrap();
        let mut run = Vec::new();
        for k in 0..8 {
            opt.zero_grad();
            let loss = autocast(DType::F16, || model.logits(&x)?.cross_entropy(labels)).unwrap();
            let scaled = scaler.scale(&loss).unwrap();
            let scaled = if k == 2 {
                scaled.mul_scalar(1e30).unwrap()
            } else {
                scaled
            };
            scaled.backward().unwrap();
            let stepped = scaler.step(&mut opt, &model.params).unwrap();
            scaler.update().unwrap();
            assert_eq!(model.params[0].device(), device);
            run.push((loss.item().unwrap(), stepped, scaler.scale_factor()));
        }
        runs.push(run);
    }
    let (cpu, gpu) = (&runs[0], &runs[1]);
    for (k, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        assert_eq!((c.1, c.2), (g.1, g.2), "step {k}: stepped and scale");
        assert!(
            (c.0 - g.0).abs() <= 1e-2 * c.0.abs(),
            "step {k}: loss {} vs {}",
            c.0,
            g.0
        );
    }
    assert!(!cpu[2].1 && cpu.iter().filter(|r| !r.1).count() == 1);
}

/// Autocast rounds an f32 argument of a lowered op to the half type's
/// values in one pass: the same values and gradients, bit for bit, as
/// converting the arguments with `to_dtype` and running the op on the
/// half tensors, for both half types, a bias, a part of a tensor (a
/// narrowed view), a transposed view, a weight broadcast over a batch and
/// an argument already in the half type, on the CPU and on the simulated
/// GPU.
#[test]
fn lowering_matches_the_explicit_conversions_bit_for_bit() {
    for device in [Device::Cpu, common::gpu()] {
        for half in [DType::BF16, DType::F16] {
            let on = |shape: &[usize], seed: u64| {
                Tensor::randn(shape, DType::F32, seed)
                    .unwrap()
                    .to_device(device)
                    .unwrap()
                    .requires_grad()
            };
            let (x, w, b, v) = (
                on(&[7, 9], 21),
                on(&[4, 9], 22),
                on(&[4], 23),
                on(&[4, 5], 24),
            );
            let run = |explicit: bool| -> Vec<Vec<u32>> {
                for t in [&x, &w, &b, &v] {
                    t.zero_grad();
                }
                let lower = |t: &Tensor| {
                    if explicit {
                        t.to_dtype(half).unwrap()
                    } else {
                        t.clone()
                    }
                };
                let part = x.narrow(0, 2, 5).unwrap();
                let vh = v.to_dtype(half).unwrap();
                let y = autocast(half, || {
                    let y = lower(&part).linear(&lower(&w), Some(&lower(&b)))?;
                    let z = y.matmul(&lower(&vh))?;
                    let t = lower(&w.t()?).t()?.matmul(&lower(&x).t()?)?;
                    // A batch (itself a broadcast) against one weight, which
                    // the product broadcasts over it.
                    let batch = lower(&x).reshape(&[1, 7, 9])?.broadcast_to(&[3, 7, 9])?;
                    let u = batch.matmul(&lower(&w).t()?)?;
                    Ok(vec![y, z, t, u])
                })
                .unwrap();
                let mut loss = Tensor::scalar(0.0, DType::F32)
                    .unwrap()
                    .to_device(device)
                    .unwrap();
                for y in &y {
                    assert_eq!(y.dtype(), half);
                    loss = loss
                        .add(&y.to_dtype(DType::F32).unwrap().sum().unwrap())
                        .unwrap();
                }
                loss.backward().unwrap();
                let bits = |t: &Tensor| -> Vec<u32> {
                    t.to_dtype(DType::F32)
                        .unwrap()
                        .to_vec()
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                };
                let mut out: Vec<Vec<u32>> = y.iter().map(bits).collect();
                out.extend([&x, &w, &b, &v].map(|t| bits(&t.grad().unwrap())));
                out
            };
            let (explicit, lowered) = (run(true), run(false));
            for (k, (e, l)) in explicit.iter().zip(&lowered).enumerate() {
                assert_eq!(e, l, "{device:?} {half:?}: result {k}");
            }
        }
    }
}
