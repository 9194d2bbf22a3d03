//! What the digits training examples (`train_mlp`, `train_cnn`) share:
//! the embedded data set (UCI "Optical Recognition of Handwritten Digits",
//! test set, E. Alpaydin and C. Kaynak 1998, CC BY 4.0; see
//! data/README.md: 1797 8×8 images, split 1437 / 360 with a fixed seed),
//! and the training loop with its progress bar and statistics, its batches
//! from a `tenjin::data::DataLoader` (shuffled per epoch, full batches
//! only, collated on a worker thread). Not an example itself (a folder
//! without `main.rs`).

use crate::curves;
use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tenjin::amp::{GradScaler, GradScalerConfig};
use tenjin::data::{DataLoader, Dataset};
use tenjin::nn::{Conv2d, Conv2dConfig, Flatten, Lambda, Linear, Module, ReLU, Sequential};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

const DIGITS: &[u8] = include_bytes!("../../data/digits.csv.gz");
pub const FEATURES: usize = 64;
pub const CLASSES: usize = 10;
const TRAIN: usize = 1437;
const BATCH: usize = 64;
/// The loader's shuffling seed.
const SEED: u64 = 1;

pub struct Digits {
    pixels: Vec<f32>,
    labels: Vec<usize>,
}

impl Digits {
    fn len(&self) -> usize {
        self.labels.len()
    }

    /// Rows `rows` as a `[rows.len(), 64]` tensor and their labels.
    pub fn batch(&self, rows: &[usize]) -> Result<(Tensor, Vec<usize>), Error> {
        let mut x = Vec::with_capacity(rows.len() * FEATURES);
        for &r in rows {
            x.extend_from_slice(&self.pixels[r * FEATURES..(r + 1) * FEATURES]);
        }
        let y = rows.iter().map(|&r| self.labels[r]).collect();
        Ok((Tensor::from_vec(x, &[rows.len(), FEATURES])?, y))
    }
}

/// Rows of the data set, as the loader sees them: sample `i` is row
/// `rows[i]`; a batch is `[batch, 64]` pixels and the labels.
pub struct Split {
    data: Arc<Digits>,
    pub rows: Vec<usize>,
}

impl Dataset for Split {
    type Batch = (Tensor, Vec<usize>);

    fn len(&self) -> usize {
        self.rows.len()
    }

    fn batch(&self, indices: &[usize]) -> Result<(Tensor, Vec<usize>), Error> {
        let rows: Vec<usize> = indices.iter().map(|&i| self.rows[i]).collect();
        self.data.batch(&rows)
    }
}

/// The training split's loader, the whole data set and the test rows.
pub type Splits = (DataLoader<Split>, Arc<Digits>, Vec<usize>);

/// The training split in shuffled full batches of 64 (one shape, one set
/// of kernels), and the data with the test rows.
pub fn training_batches() -> Result<Splits, Error> {
    training_loader(BATCH)
}

/// As [`training_batches`], in batches of `batch`.
pub fn training_loader(batch: usize) -> Result<Splits, Error> {
    let data = Arc::new(load());
    let order = shuffled(data.len(), 2024);
    let (train, test) = order.split_at(TRAIN);
    let split = Split {
        data: data.clone(),
        rows: train.to_vec(),
    };
    let loader = DataLoader::new(split, batch)?.shuffle(SEED).drop_last(true);
    Ok((loader, data, test.to_vec()))
}

/// The embedded CSV: 64 pixel values in 0..=16 (scaled to [0, 1]), then the
/// label.
pub fn load() -> Digits {
    let mut text = String::new();
    GzDecoder::new(DIGITS)
        .read_to_string(&mut text)
        .expect("the embedded data set is valid gzip");
    let mut d = Digits {
        pixels: vec![],
        labels: vec![],
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        let v: Vec<u32> = line
            .split(',')
            .map(|s| s.trim().parse().expect("integers"))
            .collect();
        assert_eq!(v.len(), FEATURES + 1, "64 pixels and a label per row");
        d.pixels
            .extend(v[..FEATURES].iter().map(|&p| p as f32 / 16.0));
        d.labels.push(v[FEATURES] as usize);
    }
    d
}

/// A reproducible permutation of `0..n` (Fisher–Yates with a xorshift).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p.swap(i, (s % (i as u64 + 1)) as usize);
    }
    p
}

/// The convolutional network of `train_cnn`: conv 3×3 (1 → 16 channels,
/// padding 1), ReLU, 2×2 max pool, conv 3×3 (16 → 32, padding 1), ReLU,
/// 2×2 max pool, linear 128 → 10.
#[allow(dead_code)] // train_cnn's and loader_step's, not train_mlp's
pub fn cnn() -> Result<Sequential, Error> {
    let padded = Conv2dConfig {
        padding: [1, 1],
        ..Default::default()
    };
    Ok(Sequential::new()
        .add(Lambda::new(|x| x.reshape(&[x.shape()[0], 1, 8, 8])))
        .add(Conv2d::with_config(1, 16, [3, 3], padded, DType::F32, 1)?)
        .add(ReLU)
        .add(Lambda::new(|x| x.max_pool2d([2, 2], [2, 2])))
        .add(Conv2d::with_config(16, 32, [3, 3], padded, DType::F32, 2)?)
        .add(ReLU)
        .add(Lambda::new(|x| x.max_pool2d([2, 2], [2, 2])))
        .add(Flatten)
        .add(Linear::new(32 * 2 * 2, CLASSES, 3)?))
}

/// Fraction of `rows` the model classifies correctly.
pub fn accuracy(model: &Sequential, data: &Digits, rows: &[usize]) -> Result<f64, Error> {
    let (x, y) = data.batch(rows)?;
    let logits = tenjin::no_grad(|| model.forward(&x))?.to_vec()?;
    let correct = logits
        .chunks(CLASSES)
        .zip(&y)
        .filter(|(row, &label)| {
            let best = (0..CLASSES)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap_or(0);
            best == label
        })
        .count();
    Ok(correct as f64 / rows.len() as f64)
}

/// SGD with Nesterov momentum (learning rate 0.05, momentum 0.9) over
/// `model`'s parameters.
pub fn nesterov_sgd(model: &Sequential) -> Result<SGD, Error> {
    let config = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        nesterov: true,
        ..Default::default()
    };
    SGD::new(model.parameters(), config)
}

/// Trains `model` with `opt` for `epochs` epochs of full batches of 64 on
/// the training split, showing progress; prints accuracies, step times
/// and the caches' statistics, saves the curves as `name` (see
/// `examples/curves`), and returns the test accuracy.
pub fn train(
    name: &str,
    model: &Sequential,
    opt: &mut impl Optimizer,
    epochs: usize,
) -> Result<f64, Error> {
    // Under `--autocast`, the forward runs in the half type with f32
    // master weights; f16 scales its loss (`GradScaler`).
    let half = crate::device_arg::autocast_arg();
    let mut scaler = match half {
        Some(DType::F16) => Some(GradScaler::new(GradScalerConfig::default())?),
        _ => None,
    };
    let params = model.parameters();
    if let Some(d) = half {
        println!("autocast: the forward in {d:?}, f32 master weights");
    }
    let (loader, data, test) = training_batches()?;
    let train = &loader.dataset().rows;
    println!(
        "digits: {} training and {} test images of 8×8 pixels, {CLASSES} classes",
        train.len(),
        test.len()
    );
    let steps_per_epoch = loader.len();
    let bar = ProgressBar::new((epochs * steps_per_epoch) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {msg}")
            .expect("a valid template"),
    );
    let mut step_times: Vec<Duration> = Vec::new();
    let mut first_step = Duration::ZERO;
    let mut first_stats = tenjin::stats();
    // The loop's own time, batches included (evaluation left out).
    let mut looping = Duration::ZERO;
    let (mut step_losses, mut epoch_losses) = (Vec::new(), Vec::new());
    let (mut train_accs, mut test_accs) = (Vec::new(), Vec::new());
    for epoch in 0..epochs {
        let mut epoch_loss = 0.0;
        let start = Instant::now();
        for (b, batch) in loader.epoch(epoch as u64).enumerate() {
            let (x, y) = batch?;
            let t = Instant::now();
            opt.zero_grad();
            let forward = || model.forward(&x)?.cross_entropy(&y);
            let loss = match half {
                Some(d) => tenjin::autocast(d, forward)?,
                None => forward()?,
            };
            match scaler.as_mut() {
                Some(s) => {
                    s.scale(&loss)?.backward()?;
                    s.step(opt, &params)?;
                    s.update()?;
                }
                None => {
                    loss.backward()?;
                    opt.step()?;
                }
            }
            let elapsed = t.elapsed();
            if step_times.is_empty() && epoch == 0 && b == 0 {
                first_step = elapsed;
                first_stats = tenjin::stats();
            } else {
                step_times.push(elapsed);
            }
            let l = loss.item()?;
            epoch_loss += l;
            step_losses.push(((epoch * steps_per_epoch + b + 1) as f64, l));
            bar.inc(1);
        }
        if epoch > 0 {
            looping += start.elapsed();
        }
        let test_acc = accuracy(model, &data, &test)?;
        let end = ((epoch + 1) * steps_per_epoch) as f64;
        epoch_losses.push((end, epoch_loss / steps_per_epoch as f64));
        test_accs.push(((epoch + 1) as f64, test_acc));
        train_accs.push(((epoch + 1) as f64, accuracy(model, &data, train)?));
        bar.set_message(format!(
            "epoch {:>2}  loss {:.4}  test accuracy {:.1}%",
            epoch + 1,
            epoch_loss / steps_per_epoch as f64,
            100.0 * test_acc
        ));
    }
    bar.finish();

    let train_acc = accuracy(model, &data, train)?;
    let test_acc = accuracy(model, &data, &test)?;
    step_times.sort();
    let median = step_times[step_times.len() / 2];
    let stats = tenjin::stats();
    println!(
        "train accuracy {:.1}%, test accuracy {:.1}%",
        100.0 * train_acc,
        100.0 * test_acc
    );
    println!("first step (compiles and derives everything): {first_step:.2?}");
    println!(
        "steady-state step (median of {}): {median:.2?}",
        step_times.len()
    );
    if epochs > 1 {
        println!(
            "per step with its batch from the loader (epochs 2 on): {:.2?}",
            looping / ((epochs - 1) * steps_per_epoch) as u32
        );
    }
    let panels = [
        curves::Panel {
            title: format!("{name}: cross-entropy"),
            x_label: "step",
            series: vec![
                curves::Series {
                    name: "per step",
                    points: step_losses,
                },
                curves::Series {
                    name: "epoch mean",
                    points: epoch_losses,
                },
            ],
        },
        curves::Panel {
            title: format!("{name}: accuracy"),
            x_label: "epoch",
            series: vec![
                curves::Series {
                    name: "train",
                    points: train_accs,
                },
                curves::Series {
                    name: "test",
                    points: test_accs,
                },
            ],
        },
    ];
    if let Err(e) = curves::save(name, &panels) {
        eprintln!("the curves were not saved: {e}");
    }
    println!("after the first step: {first_stats}");
    println!("at the end:           {stats}");
    println!(
        "training steps after the first: {} derivations, {} kernels compiled (the evaluation batches compile their own forward kernels once)",
        stats.derivations - first_stats.derivations,
        stats.kernels_compiled - first_stats.kernels_compiled
    );
    Ok(test_acc)
}

/// The losses of the first `steps` training steps of `model` with `opt`
/// (batches of 64 in the order of the first epoch of [`train`]).
pub fn first_steps(
    model: &Sequential,
    opt: &mut impl Optimizer,
    steps: usize,
) -> Result<Vec<f64>, Error> {
    let (loader, _, _) = training_batches()?;
    let mut losses = Vec::with_capacity(steps);
    for epoch in 0.. {
        for batch in loader.epoch(epoch) {
            if losses.len() == steps {
                return Ok(losses);
            }
            let (x, y) = batch?;
            opt.zero_grad();
            let loss = model.forward(&x)?.cross_entropy(&y)?;
            loss.backward()?;
            opt.step()?;
            losses.push(loss.item()?);
        }
    }
    Ok(losses)
}

/// Runs `steps` steps of the model `build` makes on the CPU, then on the
/// simulated GPU (`crate::device_arg::compare_on_simulated_gpu`).
pub fn compare_on_simulated_gpu(
    build: impl Fn() -> Result<Sequential, Error>,
    steps: usize,
) -> Result<(), Error> {
    crate::device_arg::compare_on_simulated_gpu(steps, |_| {
        let model = build()?;
        let mut opt = nesterov_sgd(&model)?;
        first_steps(&model, &mut opt, steps)
    })
}
