//! A character-level language model, trained on tenjin's own sources:
//! token and position embeddings, two causal self-attention blocks with
//! MLPs (pre-layer-norm, residual), cross-entropy over the next character's
//! id, Adam. A progress bar shows the loss; at the end the example prints
//! the loss next to the corpus's unigram entropy, saves the weights to a
//! safetensors file, loads them into a fresh model and generates samples.
//!
//! ```sh
//! cargo run --release --example char_lm                 # about a minute on 2 cores
//! cargo run --release --example char_lm -- --steps 40   # shorter
//! cargo run --release --example char_lm -- --check      # CI: reproducibility and a loss below the unigram entropy
//! cargo run --release --example char_lm -- --device cuda # on CUDA device 0 (exit status 2 where there is none)
//! cargo run --release --example char_lm -- --device sim  # CI: the first steps on the CPU and on the simulated GPU, compared
//! cargo run --release --example char_lm -- --step-time  # the median step on one fixed batch, a JSON line (bench/char_lm.sh)
//! cargo run --release --example char_lm -- --length-sweep  # every sequence length from 8 to 128 once: compilations, and a new length's cost
//! cargo run --release --example char_lm -- --length-sweep --device sim  # the same on the simulated GPU (a narrower model): PTX modules loaded and shared
//! cargo run --release --example char_lm -- --length-sweep --specialised  # either, with every kernel's sizes compiled in
//! cargo run --release --example char_lm -- --length-sweep --dynamic  # either, in a `jit::dynamic_sizes` scope (every size dynamic from the first)
//! cargo run --release --example char_lm -- --autocast bf16  # the forward under tenjin::autocast (f16: with a GradScaler)
//! ```
//!
//! The corpus is this crate's README and a few of its sources, embedded
//! with `include_str!` (the crate's license applies).

mod curves;
mod device_arg;

use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeSet;
use tenjin::amp::{GradScaler, GradScalerConfig};
use tenjin::data::{DataLoader, Dataset};
use tenjin::nn::{Embedding, LayerNorm, Module};
use tenjin::optim::{Adam, AdamConfig, Optimizer};
use tenjin::{CrossEntropyOptions, DType, Error, Tensor};

const CORPUS: &[&str] = &[
    include_str!("../README.md"),
    include_str!("../src/ops/elementwise.rs"),
    include_str!("../src/ops/indexing.rs"),
    include_str!("../src/nn/mod.rs"),
];

/// Sizes of the model and of a batch.
#[derive(Clone, Copy)]
struct Config {
    context: usize,
    width: usize,
    hidden: usize,
    blocks: usize,
    batch: usize,
}

const CONFIG: Config = Config {
    context: 64,
    width: 64,
    hidden: 256,
    blocks: 2,
    batch: 32,
};

/// SplitMix64: batches and sampling, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The corpus as ids, and the characters behind the ids.
struct Text {
    ids: Vec<i64>,
    chars: Vec<char>,
}

impl Text {
    fn new() -> Text {
        let text: String = CORPUS.concat();
        let chars: Vec<char> = text.chars().collect::<BTreeSet<_>>().into_iter().collect();
        let ids = text
            .chars()
            .map(|c| chars.binary_search(&c).expect("a known character") as i64)
            .collect();
        Text { ids, chars }
    }

    /// The entropy (nats) of the characters' frequencies: the loss of the
    /// best model that ignores context.
    fn unigram_entropy(&self) -> f64 {
        let mut counts = vec![0usize; self.chars.len()];
        for &i in &self.ids {
            counts[i as usize] += 1;
        }
        let n = self.ids.len() as f64;
        counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.ln()
            })
            .sum()
    }

    /// `batch` windows of `context + 1` ids: inputs and next-id targets.
    fn batch(&self, rng: &mut Rng, c: Config) -> Result<(Tensor, Tensor), Error> {
        let starts: Vec<usize> = (0..c.batch)
            .map(|_| rng.below(self.ids.len() - c.context - 1))
            .collect();
        windows(&self.ids, &starts, c.context)
    }
}

/// The windows of `context + 1` ids starting at `starts`: inputs
/// `[batch, context]` and next-id targets `[batch·context]`.
fn windows(ids: &[i64], starts: &[usize], context: usize) -> Result<(Tensor, Tensor), Error> {
    let mut x = Vec::with_capacity(starts.len() * context);
    let mut y = Vec::with_capacity(starts.len() * context);
    for &s in starts {
        x.extend_from_slice(&ids[s..s + context]);
        y.extend_from_slice(&ids[s + 1..s + context + 1]);
    }
    Ok((
        Tensor::from_vec_i64(x, &[starts.len(), context])?,
        Tensor::from_vec_i64(y, &[starts.len() * context])?,
    ))
}

/// Every window of the corpus, numbered by its start: what the
/// `DataLoader` shuffles, batches and collates ahead on its worker.
struct Windows {
    ids: std::sync::Arc<[i64]>,
    context: usize,
}

impl Dataset for Windows {
    type Batch = (Tensor, Tensor);

    fn len(&self) -> usize {
        self.ids.len() - self.context - 1
    }

    fn batch(&self, starts: &[usize]) -> Result<(Tensor, Tensor), Error> {
        windows(&self.ids, starts, self.context)
    }
}

fn param(shape: &[usize], scale: f64, seed: u64) -> Result<Tensor, Error> {
    Ok(Tensor::randn(shape, DType::F32, seed)?
        .mul_scalar(scale)?
        .requires_grad())
}

struct Block {
    ln1: LayerNorm,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    ln2: LayerNorm,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Block {
    fn new(c: Config, seed: u64) -> Result<Block, Error> {
        let (d, h) = (c.width, c.hidden);
        let s = 1.0 / (d as f64).sqrt();
        Ok(Block {
            ln1: LayerNorm::new(&[d], 1e-5, DType::F32)?,
            wq: param(&[d, d], s, seed)?,
            wk: param(&[d, d], s, seed + 1)?,
            wv: param(&[d, d], s, seed + 2)?,
            wo: param(&[d, d], s / (2.0 * c.blocks as f64).sqrt(), seed + 3)?,
            ln2: LayerNorm::new(&[d], 1e-5, DType::F32)?,
            w1: param(&[d, h], s, seed + 4)?,
            b1: Tensor::zeros(&[h], DType::F32)?.requires_grad(),
            w2: param(
                &[h, d],
                1.0 / (h as f64).sqrt() / (2.0 * c.blocks as f64).sqrt(),
                seed + 5,
            )?,
            b2: Tensor::zeros(&[d], DType::F32)?.requires_grad(),
        })
    }

    /// `x + attention(ln1 x)`, then `+ mlp(ln2 x)`; `mask` is 0 on and
    /// below the diagonal, −10⁹ above (causal).
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor, Error> {
        let d = x.shape()[2] as f64;
        let h = self.ln1.forward(x)?;
        let (q, k, v) = (
            h.matmul(&self.wq)?,
            h.matmul(&self.wk)?,
            h.matmul(&self.wv)?,
        );
        let scores = q
            .matmul(&k.transpose(1, 2)?)?
            .mul_scalar(1.0 / d.sqrt())?
            .add(mask)?;
        let attended = scores.softmax(2)?.matmul(&v)?.matmul(&self.wo)?;
        let x = x.add(&attended)?;
        let h = self.ln2.forward(&x)?;
        let m = h
            .matmul(&self.w1)?
            .add(&self.b1)?
            .gelu()?
            .matmul(&self.w2)?
            .add(&self.b2)?;
        x.add(&m)
    }

    fn named(&self, prefix: &str, out: &mut Vec<(String, Tensor)>) {
        for (n, t) in [
            ("wq", &self.wq),
            ("wk", &self.wk),
            ("wv", &self.wv),
            ("wo", &self.wo),
            ("w1", &self.w1),
            ("b1", &self.b1),
            ("w2", &self.w2),
            ("b2", &self.b2),
        ] {
            out.push((format!("{prefix}.{n}"), t.clone()));
        }
        for (ln, name) in [(&self.ln1, "ln1"), (&self.ln2, "ln2")] {
            for (n, t) in ln.named_parameters() {
                out.push((format!("{prefix}.{name}.{n}"), t));
            }
        }
    }
}

struct Model {
    c: Config,
    tokens: Embedding,
    positions: Tensor,
    blocks: Vec<Block>,
    ln: LayerNorm,
    head: Tensor,
    mask: Tensor,
}

impl Model {
    fn new(c: Config, vocab: usize, seed: u64) -> Result<Model, Error> {
        let mut mask = vec![0.0f32; c.context * c.context];
        for i in 0..c.context {
            for j in i + 1..c.context {
                mask[i * c.context + j] = -1e9;
            }
        }
        Ok(Model {
            c,
            tokens: Embedding::from_weight(param(&[vocab, c.width], 0.1, seed)?),
            positions: param(&[c.context, c.width], 0.1, seed + 1)?,
            blocks: (0..c.blocks)
                .map(|b| Block::new(c, seed + 10 * (b as u64 + 1)))
                .collect::<Result<_, _>>()?,
            ln: LayerNorm::new(&[c.width], 1e-5, DType::F32)?,
            head: param(&[c.width, vocab], 1.0 / (c.width as f64).sqrt(), seed + 2)?,
            mask: Tensor::from_vec(mask, &[c.context, c.context])?,
        })
    }

    /// Logits `[B·T, vocab]` for ids `[B, T]`, `T` at most the context.
    fn logits(&self, ids: &Tensor) -> Result<Tensor, Error> {
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        // Shorter windows than the context take the first `t` positions
        // and the mask's top-left `t × t` (views at run-time positions).
        let (positions, mask) = if t == self.c.context {
            (self.positions.clone(), self.mask.clone())
        } else {
            (
                self.positions.narrow(0, 0, t)?,
                self.mask.narrow(0, 0, t)?.narrow(1, 0, t)?,
            )
        };
        let mut x = self.tokens.forward(ids)?.add(&positions)?;
        for block in &self.blocks {
            x = block.forward(&x, &mask)?;
        }
        let logits = self.ln.forward(&x)?.matmul(&self.head)?;
        logits.reshape(&[b * t, self.head.shape()[1]])
    }

    /// The loss of a batch and its next-character accuracy (the argmax of
    /// each position's logits against its label, read on the host).
    fn loss_and_accuracy(&self, x: &Tensor, y: &Tensor) -> Result<(Tensor, f64), Error> {
        let logits = self.logits(x)?;
        let loss = logits.cross_entropy_with(y, CrossEntropyOptions::default())?;
        let best = logits.argmax(-1, false)?.to_vec_i64()?;
        let labels = y.to_vec_i64()?;
        let hits = best.iter().zip(&labels).filter(|(a, b)| a == b).count();
        Ok((loss, hits as f64 / labels.len() as f64))
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![
            ("tokens.weight".to_string(), self.tokens.weight.clone()),
            ("positions".to_string(), self.positions.clone()),
            ("head".to_string(), self.head.clone()),
        ];
        for (n, t) in self.ln.named_parameters() {
            out.push((format!("ln.{n}"), t));
        }
        for (k, b) in self.blocks.iter().enumerate() {
            b.named(&format!("blocks.{k}"), &mut out);
        }
        out
    }

    /// `n` characters after `prompt`, sampled at `temperature`.
    fn generate(
        &self,
        text: &Text,
        prompt: &str,
        n: usize,
        temperature: f64,
        rng: &mut Rng,
    ) -> Result<String, Error> {
        let t = self.c.context;
        let space = text.chars.binary_search(&' ').unwrap_or(0) as i64;
        let mut ids: Vec<i64> = prompt
            .chars()
            .map(|c| text.chars.binary_search(&c).map_or(space, |i| i as i64))
            .collect();
        let mut out = String::from(prompt);
        tenjin::no_grad(|| -> Result<(), Error> {
            for _ in 0..n {
                let mut window: Vec<i64> = ids.iter().rev().take(t).rev().copied().collect();
                let filled = window.len();
                window.resize(t, space);
                let logits = self.logits(&Tensor::from_vec_i64(window, &[1, t])?)?;
                let row = logits.narrow(0, filled - 1, 1)?.to_vec_f64()?;
                let max = row.iter().cloned().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = row
                    .iter()
                    .map(|l| ((l - max) / temperature).exp())
                    .collect();
                let mut u = rng.uniform() * weights.iter().sum::<f64>();
                let mut next = weights.len() - 1;
                for (k, w) in weights.iter().enumerate() {
                    if u < *w {
                        next = k;
                        break;
                    }
                    u -= w;
                }
                ids.push(next as i64);
                out.push(text.chars[next]);
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// Trains from `seed` for `steps`; the losses of every step.
/// The trained model, each step's loss and each step's next-character
/// accuracy on its batch.
type Trained = (Model, Vec<f64>, Vec<f64>);

/// The model from `seed` and its Adam (rate 3e-3).
fn model_and_adam(text: &Text, seed: u64) -> Result<(Model, Adam), Error> {
    let model = Model::new(CONFIG, text.chars.len(), seed)?;
    let params: Vec<Tensor> = model
        .named_parameters()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let opt = Adam::new(
        params,
        AdamConfig {
            lr: 3e-3,
            ..Default::default()
        },
    )?;
    Ok((model, opt))
}

fn train(
    text: &Text,
    steps: usize,
    seed: u64,
    bar: Option<&ProgressBar>,
) -> Result<Trained, Error> {
    let (model, mut opt) = model_and_adam(text, seed)?;
    // Shuffled windows in full batches, collated ahead on a worker thread.
    let windows = Windows {
        ids: text.ids.clone().into(),
        context: CONFIG.context,
    };
    let loader = DataLoader::new(windows, CONFIG.batch)?
        .shuffle(seed)
        .drop_last(true);
    let batches = (0..).flat_map(|epoch| loader.epoch(epoch));
    let (mut losses, mut accuracies) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
    // Under `--autocast`, the forward runs in the half type with f32
    // master weights; f16 scales its loss (`GradScaler`).
    let half = device_arg::autocast_arg();
    let mut scaler = match half {
        Some(DType::F16) => Some(GradScaler::new(GradScalerConfig::default())?),
        _ => None,
    };
    let params: Vec<Tensor> = model
        .named_parameters()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    for (step, batch) in batches.take(steps).enumerate() {
        let (x, y) = batch?;
        opt.zero_grad();
        let forward = || model.loss_and_accuracy(&x, &y);
        let (loss, accuracy) = match half {
            Some(d) => tenjin::autocast(d, forward)?,
            None => forward()?,
        };
        match scaler.as_mut() {
            Some(s) => {
                s.scale(&loss)?.backward()?;
                s.step(&mut opt, &params)?;
                s.update()?;
            }
            None => {
                loss.backward()?;
                opt.step()?;
            }
        }
        losses.push(loss.item()?);
        accuracies.push(accuracy);
        if let Some(bar) = bar {
            let recent = &losses[losses.len().saturating_sub(20)..];
            bar.set_message(format!(
                "loss {:.3}",
                recent.iter().sum::<f64>() / recent.len() as f64
            ));
            bar.set_position(step as u64 + 1);
        }
    }
    Ok((model, losses, accuracies))
}

/// `--step-time`: the median of `reps` training steps (forward, loss,
/// backward, Adam, the loss read) on one fixed batch, after 5 to warm up,
/// as the JSON line `bench/char_lm.sh` compares with `bench/char_lm_peers.py`.
fn step_time(text: &Text, reps: usize) -> Result<(), Error> {
    let (model, mut opt) = model_and_adam(text, 1)?;
    let (x, y) = text.batch(&mut Rng(3), CONFIG)?;
    let mut step = || -> Result<f64, Error> {
        opt.zero_grad();
        let loss = model
            .logits(&x)?
            .cross_entropy_with(&y, CrossEntropyOptions::default())?;
        loss.backward()?;
        opt.step()?;
        loss.item()
    };
    for _ in 0..5 {
        step()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = std::time::Instant::now();
        std::hint::black_box(step()?);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let c = CONFIG;
    println!(
        "{{\"system\": \"tenjin\", \"workload\": \"char_lm_step\", \"size\": \"B={},T={},d={},hidden={},blocks={},vocab={}\", \"threads\": {}, \"median_ms\": {:.4}}}",
        c.batch,
        c.context,
        c.width,
        c.hidden,
        c.blocks,
        text.chars.len(),
        tenjin::jit::num_threads(),
        times[reps / 2]
    );
    Ok(())
}

/// `--length-sweep`: training steps (forward, loss, backward, Adam) on
/// windows of every length from 8 to 128, each once, on a model whose
/// context is 128 (issue 28: a sequence length that varies). Prints the
/// time, what Cranelift compiled per kernel of a step, what was derived
/// and planned, and what a new length costs over a length met once.
fn length_sweep(text: &Text) -> Result<(), Error> {
    let c = Config {
        context: 128,
        ..CONFIG
    };
    // The simulated GPU interprets every instruction: the same blocks,
    // narrower and on a batch of 2, whose kernels are the same ops.
    let simulated = tenjin::default_device() != tenjin::Device::Cpu && tenjin::cuda::is_simulated();
    let c = if simulated {
        Config {
            width: 16,
            hidden: 32,
            batch: 2,
            ..c
        }
    } else {
        c
    };
    let model = Model::new(c, text.chars.len(), 1)?;
    let params: Vec<Tensor> = model
        .named_parameters()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    let mut opt = Adam::new(params, AdamConfig::default())?;
    let mut rng = Rng(5);
    let lengths = 8..=128usize;
    let mut step = |t: usize| -> Result<(), Error> {
        let (x, y) = text.batch(&mut rng, Config { context: t, ..c })?;
        opt.zero_grad();
        model
            .logits(&x)?
            .cross_entropy_with(&y, CrossEntropyOptions::default())?
            .backward()?;
        opt.step()
    };
    // The loop kernels of one step: those a repeated step runs.
    let gpu = tenjin::default_device() != tenjin::Device::Cpu;
    // `--specialised`: every kernel's sizes compiled in (the comparison).
    if std::env::args().any(|a| a == "--specialised") {
        tenjin::jit::set_run_time_constants(false);
    }
    // `--dynamic`: every size dynamic from the first (`mark_dynamic`).
    let _dynamic = std::env::args()
        .any(|a| a == "--dynamic")
        .then(tenjin::jit::dynamic_sizes);
    let runs = |s: tenjin::Stats| {
        if gpu {
            s.gpu_kernels_run
        } else {
            s.cpu_kernels_run
        }
    };
    step(64)?;
    let before_one = runs(tenjin::stats());
    step(64)?;
    let per_step = runs(tenjin::stats()) - before_one;
    let (before, start) = (tenjin::stats(), std::time::Instant::now());
    let mut timed = |t: usize| -> Result<f64, Error> {
        let t0 = std::time::Instant::now();
        step(t)?;
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    };
    let new: Vec<f64> = lengths.clone().map(&mut timed).collect::<Result<_, _>>()?;
    let (seconds, after) = (start.elapsed().as_secs_f64(), tenjin::stats());
    // The same lengths again: each step's plans and code are cached now.
    let again: Vec<f64> = lengths.clone().map(&mut timed).collect::<Result<_, _>>()?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let extra: Vec<f64> = new.iter().zip(&again).map(|(a, b)| a - b).collect();
    let n = lengths.count() as f64;
    if gpu {
        // Its loop kernels' PTX modules: loaded, or shared with a kernel of
        // the same nest (the sizes read at launch).
        println!(
            "lengths 8..=128 once each in {seconds:.2} s on {}: {} PTX modules loaded ({:.2} per kernel run by a step, {per_step} kernels), {:.1} kernels sharing a module, {:.1} derivations and {:.1} op plans per step",
            tenjin::default_device(),
            after.ptx_modules_loaded - before.ptx_modules_loaded,
            (after.ptx_modules_loaded - before.ptx_modules_loaded) as f64 / per_step as f64,
            (after.ptx_modules_shared - before.ptx_modules_shared) as f64 / n,
            (after.derivations - before.derivations) as f64 / n,
            (after.op_plans_built - before.op_plans_built) as f64 / n,
        );
        return Ok(());
    }
    println!(
        "lengths 8..=128 once each in {seconds:.2} s: {} Cranelift compilations ({:.2} per kernel run by a step, {per_step} kernels), {:.1} kernels reusing code, {:.1} derivations and {:.1} op plans per step",
        after.cpu_code_compiled - before.cpu_code_compiled,
        (after.cpu_code_compiled - before.cpu_code_compiled) as f64 / per_step as f64,
        (after.cpu_code_shared - before.cpu_code_shared) as f64 / n,
        (after.derivations - before.derivations) as f64 / n,
        (after.op_plans_built - before.op_plans_built) as f64 / n,
    );
    println!(
        "a step at a new length: {:.2} ms more than the second step at that length (medians; the second {:.2} ms)",
        median(extra),
        median(again)
    );
    Ok(())
}

fn mean_tail(losses: &[f64], n: usize) -> f64 {
    let tail = &losses[losses.len().saturating_sub(n)..];
    tail.iter().sum::<f64>() / tail.len() as f64
}

fn main() -> Result<(), Error> {
    let sweep = std::env::args().any(|a| a == "--length-sweep");
    match device_arg::from_args() {
        device_arg::Where::Sim if sweep => {
            tenjin::cuda::simulate()?;
            tenjin::set_default_device(tenjin::Device::Cuda(0));
        }
        device_arg::Where::Sim => {
            let text = Text::new();
            let steps = 20;
            return device_arg::compare_on_simulated_gpu(steps, |_| {
                Ok(train(&text, steps, 1, None)?.1)
            });
        }
        device_arg::Where::Cuda => tenjin::set_default_device(tenjin::Device::Cuda(0)),
        device_arg::Where::Cpu => {}
    }
    let args: Vec<String> = std::env::args().collect();
    let check = args.iter().any(|a| a == "--check");
    let steps = args
        .iter()
        .position(|a| a == "--steps")
        .and_then(|k| args.get(k + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if check { 150 } else { 1200 });
    let text = Text::new();
    if args.iter().any(|a| a == "--step-time") {
        return step_time(&text, 31);
    }
    if sweep {
        return length_sweep(&text);
    }
    let entropy = text.unigram_entropy();
    println!(
        "corpus: {} characters, {} distinct; unigram entropy {entropy:.3} nats",
        text.ids.len(),
        text.chars.len()
    );
    if check {
        // The same seed gives the same losses, bit for bit.
        let (_, a, _) = train(&text, 5, 7, None)?;
        let (_, b, _) = train(&text, 5, 7, None)?;
        assert_eq!(a, b, "the same seed gave different losses");
        println!("same seed, same losses: {:?}", a);
    }
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = std::time::Instant::now();
    let (model, losses, accuracies) = train(&text, steps, 1, Some(&bar))?;
    bar.finish();
    let final_loss = mean_tail(&losses, 50);
    println!(
        "{steps} steps in {:.1} s: loss {:.3} -> {final_loss:.3} nats (mean of the last 50 steps); unigram entropy {entropy:.3}",
        start.elapsed().as_secs_f64(),
        mean_tail(&losses[..losses.len().min(10)], 10),
    );
    let per_step: Vec<(f64, f64)> = losses
        .iter()
        .enumerate()
        .map(|(k, &l)| ((k + 1) as f64, l))
        .collect();
    // The mean of the last 50 steps at each step: the trend under the noise.
    let smoothed: Vec<(f64, f64)> = (0..losses.len())
        .map(|k| ((k + 1) as f64, mean_tail(&losses[..=k], 50)))
        .collect();
    let entropy_line = vec![(1.0, entropy), (losses.len() as f64, entropy)];
    let panel = curves::Panel {
        title: "char_lm: cross-entropy (nats per character)".into(),
        x_label: "step",
        series: vec![
            curves::Series {
                name: "per step",
                points: per_step,
            },
            curves::Series {
                name: "mean of the last 50",
                points: smoothed,
            },
            curves::Series {
                name: "unigram entropy",
                points: entropy_line,
            },
        ],
    };
    let accuracy = curves::Panel {
        title: "char_lm: next-character accuracy on the training batch".into(),
        x_label: "step",
        series: vec![
            curves::Series {
                name: "per step",
                points: (0..accuracies.len())
                    .map(|k| ((k + 1) as f64, accuracies[k]))
                    .collect(),
            },
            curves::Series {
                name: "mean of the last 50",
                points: (0..accuracies.len())
                    .map(|k| ((k + 1) as f64, mean_tail(&accuracies[..=k], 50)))
                    .collect(),
            },
        ],
    };
    println!(
        "next-character accuracy on the training batches: {:.3} -> {:.3} (means of the first 10 and last 50 steps)",
        mean_tail(&accuracies[..accuracies.len().min(10)], 10),
        mean_tail(&accuracies, 50)
    );
    if let Err(e) = curves::save("char_lm", &[panel, accuracy]) {
        eprintln!("the curves were not saved: {e}");
    }

    // Save, load into a fresh model, generate from the loaded one.
    let path =
        std::env::temp_dir().join(format!("tenjin-char-lm-{}.safetensors", std::process::id()));
    let named = model.named_parameters();
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tenjin::safetensors::save(&path, &refs)?;
    let loaded = Model::new(CONFIG, text.chars.len(), 12345)?;
    let own = loaded.named_parameters();
    let state = tenjin::safetensors::load(&path)?;
    for (name, target) in &own {
        let (_, value) = state
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| Error::Invalid {
                function: "char_lm".into(),
                message: format!("{name} missing from the file"),
            })?;
        tenjin::no_grad(|| -> Result<(), Error> {
            // Copy in place: a state dict of one tensor.
            Embedding::from_weight(target.clone())
                .load_state_dict(&[("weight".to_string(), value.clone())])
        })?;
    }
    std::fs::remove_file(&path).ok();
    let mut rng = Rng(2026);
    let (x, y) = text.batch(&mut rng, CONFIG)?;
    let (a, b) = tenjin::no_grad(|| {
        Ok::<_, Error>((
            model.loss_and_accuracy(&x, &y)?.0.item()?,
            loaded.loss_and_accuracy(&x, &y)?.0.item()?,
        ))
    })?;
    println!(
        "saved to and reloaded from {}: loss on a batch {a:.4} (trained) = {b:.4} (reloaded)",
        path.display()
    );
    for prompt in ["The ", "impl Tensor {\n    pub fn "] {
        println!(
            "--- sample from {prompt:?}:\n{}\n",
            loaded.generate(&text, prompt, 200, 0.8, &mut rng)?
        );
    }
    if check && !(final_loss < entropy - 0.3 && a == b) {
        eprintln!("check failed: loss {final_loss:.3} vs unigram entropy {entropy:.3}, reloaded {b} vs {a}");
        std::process::exit(1);
    }
    Ok(())
}
