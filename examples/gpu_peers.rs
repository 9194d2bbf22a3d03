//! tenjin's side of `bench/gpu.sh` (issue "GPU speed"): one JSON line per
//! workload with the median time in ms on a GPU, and for the element-wise
//! workloads the bytes they move. Every timed repetition ends by waiting
//! for the device (`tenjin::cuda::synchronize`), as PyTorch's side does.
//!
//! ```sh
//! cargo run --release --features cuda --example gpu_peers -- --device cuda
//! cargo run --release --features cuda --example gpu_peers -- --device cuda tf32
//! cargo run --release --example gpu_peers -- --device sim   # tiny sizes, one repetition
//! cargo run --release --features cuda --example gpu_peers -- --device cuda --only softmax,conv2d
//! ```
//!
//! Workloads (full size on `cuda`; a tiny configuration of each on `sim`):
//! - `gpt_step`: a GPT-2-small-class transformer (12 layers, d = 768,
//!   12 heads, T = 1024, batch 8, vocabulary 50,257, GELU MLP of 4·d,
//!   pre-norm, learned positions), one AdamW step, the loss read back;
//! - `matmul`: a 4096³ product of f32, bf16 and f16 matrices (half ones
//!   multiplied on the tensor cores with f32 sums, their result rounded to
//!   the half type: PyTorch's half matmul), the product alone;
//! - `half_products`: the GPT step's products alone, over bf16 matrices
//!   (the attention's two per head, batched; a projection, the MLP's two,
//!   a weight gradient), each with its result rounded to bf16;
//! - `gpt_step_autocast`: the same step with its forward and loss under
//!   `tenjin::autocast(BF16)` (master weights and AdamW in f32), against
//!   PyTorch eager under `torch.autocast("cuda", torch.bfloat16)`;
//! - `mlp_step`: 784-512-512-10 with ReLU, cross-entropy and SGD, batch
//!   64, 256 and 1024;
//! - `attention`: value and gradients of `Σ softmax(QKᵀ/√E)·V·G` at
//!   N = 512 and 2048, E = 64 (one line);
//! - `elementwise_forward`, `elementwise_value_grad`: the chain
//!   `tanh(x)·sigmoid(2x) + x²/(1 + e^{−x})` over 16M f32 values (one
//!   fused kernel forward, `realize`d, with fusion on, the GPU's default;
//!   each op a kernel with `TENJIN_FUSION=0`, as in PyTorch eager);
//! - `elementwise_exp`: `exp` of the same 16M values, one kernel, whose
//!   bytes per second `bench/gpu.sh` sets against a device copy;
//! - `softmax`, `layer_norm`: value and gradient over [4096, 4096];
//! - `conv2d`: value and gradients, B = 32, 64→64 channels, 32×32, 3×3,
//!   padding 1.
//!
//! `TENJIN_GPU_PROFILE=1` prints each workload's per-kernel device times
//! to stderr (`tenjin::cuda::profile_report`: device times between
//! events around each kernel, nothing waiting for the device).
//!
//! `tf32` sets `tenjin::cuda::set_math_mode(MathMode::Tf32)` (the script
//! sets PyTorch's `allow_tf32` to match); the mode is in every line.
//! `half-copies=never` (or `always`) sets `tenjin::cuda::set_half_copies`
//! to `HalfCopies::Never` (`Always`): half products over their f32
//! operands (over half copies of them), the comparisons for the copies'
//! rule.

// Shared with the other examples; this one uses only part of each.
#[allow(dead_code)]
mod bench_common;
#[allow(dead_code)]
mod device_arg;

use bench_common::data;
use device_arg::Where;
use tenjin::cuda::MathMode;
use tenjin::nn::{LayerNorm, Module};
use tenjin::optim::{AdamConfig, AdamW, Optimizer, SgdConfig, SGD};
use tenjin::{DType, Device, Error, Tensor};

/// The sizes of one run: full on a GPU, tiny on the simulated device.
struct Sizes {
    gpt: Gpt,
    matmul: usize,
    mlp: ([usize; 4], &'static [usize]),
    attention: (&'static [usize], usize),
    elementwise: usize,
    rows: [usize; 2],
    conv: [usize; 4],
    reps: usize,
}

#[derive(Clone, Copy)]
struct Gpt {
    layers: usize,
    width: usize,
    heads: usize,
    context: usize,
    batch: usize,
    vocab: usize,
}

const FULL: Sizes = Sizes {
    gpt: Gpt {
        layers: 12,
        width: 768,
        heads: 12,
        context: 1024,
        batch: 8,
        vocab: 50_257,
    },
    matmul: 4096,
    mlp: ([784, 512, 512, 10], &[64, 256, 1024]),
    attention: (&[512, 2048], 64),
    elementwise: 1 << 24,
    rows: [4096, 4096],
    conv: [32, 64, 32, 32],
    reps: 11,
};

const TINY: Sizes = Sizes {
    gpt: Gpt {
        layers: 1,
        width: 16,
        heads: 2,
        context: 8,
        batch: 2,
        vocab: 32,
    },
    matmul: 24,
    mlp: ([20, 16, 16, 4], &[8]),
    attention: (&[16], 8),
    elementwise: 4096,
    rows: [4, 300],
    conv: [1, 4, 6, 6],
    reps: 1,
};

/// One JSON line for `workload` at `size`.
fn report(workload: &str, size: &str, ms: f64, bytes: Option<f64>) {
    let mode = match tenjin::cuda::math_mode() {
        MathMode::Full => "full",
        MathMode::Tf32 => "tf32",
    };
    let bytes = bytes.map_or(String::new(), |b| format!(r#", "bytes": {b}"#));
    println!(
        r#"{{"system": "tenjin", "workload": "{workload}", "size": "{size}", "math": "{mode}", "median_ms": {ms:.4}{bytes}}}"#
    );
    // `TENJIN_GPU_PROFILE=1`: where the time went (each kernel's device
    // time between two events recorded around it).
    if tenjin::cuda::is_profiling() {
        eprintln!(
            "{workload} {size}, the timed runs:\n{}",
            tenjin::cuda::profile_report(true)
        );
    }
}

/// Median wall time in ms of `reps` runs of `f` after one warm-up, each
/// ending when `device` has finished.
fn median_ms(
    reps: usize,
    device: Device,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<f64, Error> {
    let mut warm = false;
    bench_common::median_ms(reps, || {
        f()?;
        tenjin::cuda::synchronize(device)?;
        if !std::mem::replace(&mut warm, true) {
            // The profile leaves out the warm-up (compilation, first loads).
            let _ = tenjin::cuda::profile_report(true);
        }
        Ok(())
    })
}

/// An f32 tensor on `device` with values in [-scale, scale).
fn on(device: Device, shape: &[usize], seed: u64, scale: f32) -> Result<Tensor, Error> {
    Tensor::from_vec_on(data(shape.iter().product(), seed, scale), shape, device)
}

fn param(device: Device, shape: &[usize], seed: u64, scale: f32) -> Result<Tensor, Error> {
    Ok(on(device, shape, seed, scale)?.requires_grad())
}

/// One pre-norm transformer block's parameters.
struct Block {
    ln1: LayerNorm,
    ln2: LayerNorm,
    w: [Tensor; 6],
    b: [Tensor; 2],
}

/// The products of a GPT step (`g`), over bf16 matrices: the attention's
/// scores and context for every head at once, a projection, the MLP's
/// two products and a projection's weight gradient.
fn half_products(device: Device, g: Gpt, reps: usize) -> Result<(), Error> {
    let (heads, t, d) = (g.batch * g.heads, g.context, g.width);
    let (dh, rows) = (d / g.heads, g.batch * g.context);
    let shapes: [(&str, Vec<usize>, Vec<usize>); 6] = [
        ("scores", vec![heads, t, dh], vec![heads, dh, t]),
        ("context", vec![heads, t, t], vec![heads, t, dh]),
        ("projection", vec![rows, d], vec![d, d]),
        ("mlp_up", vec![rows, d], vec![d, 4 * d]),
        ("mlp_down", vec![rows, 4 * d], vec![4 * d, d]),
        ("weight_grad", vec![d, rows], vec![rows, d]),
    ];
    for (k, (name, sa, sb)) in shapes.iter().enumerate() {
        let a = on(device, sa, 80 + k as u64, 1.0)?.to_dtype(DType::BF16)?;
        let b = on(device, sb, 90 + k as u64, 1.0)?.to_dtype(DType::BF16)?;
        let ms = median_ms(reps, device, || a.matmul(&b)?.realize())?;
        let size = format!("{name},{sa:?}x{sb:?},bf16").replace(' ', "");
        report("half_products", &size, ms, None);
    }
    Ok(())
}

/// The GPT step; with `autocast`, its forward (the loss included) under
/// `tenjin::autocast` of that half type, the weights and AdamW in f32.
fn gpt_step(device: Device, g: Gpt, reps: usize, autocast: Option<DType>) -> Result<(), Error> {
    let (d, h, t, b) = (g.width, g.heads, g.context, g.batch);
    let s = 1.0 / (d as f32).sqrt();
    let blocks: Vec<Block> = (0..g.layers)
        .map(|l| {
            let seed = 100 * (l as u64 + 1);
            let ln = || -> Result<LayerNorm, Error> {
                let n = LayerNorm::new(&[d], 1e-5, DType::F32)?;
                n.to_device(device)?;
                Ok(n)
            };
            Ok(Block {
                ln1: ln()?,
                ln2: ln()?,
                w: [
                    param(device, &[d, d], seed, s)?,
                    param(device, &[d, d], seed + 1, s)?,
                    param(device, &[d, d], seed + 2, s)?,
                    param(device, &[d, d], seed + 3, s)?,
                    param(device, &[d, 4 * d], seed + 4, s)?,
                    param(device, &[4 * d, d], seed + 5, s / 2.0)?,
                ],
                b: [
                    param(device, &[4 * d], seed + 6, 0.0)?,
                    param(device, &[d], seed + 7, 0.0)?,
                ],
            })
        })
        .collect::<Result<_, Error>>()?;
    let tokens = param(device, &[g.vocab, d], 1, 0.1)?;
    let positions = param(device, &[t, d], 2, 0.1)?;
    let ln_f = LayerNorm::new(&[d], 1e-5, DType::F32)?;
    ln_f.to_device(device)?;
    let mut params = vec![tokens.clone(), positions.clone()];
    for bl in &blocks {
        params.extend(bl.w.iter().cloned());
        params.extend(bl.b.iter().cloned());
        params.extend(bl.ln1.parameters());
        params.extend(bl.ln2.parameters());
    }
    params.extend(ln_f.parameters());
    let mut opt = AdamW::new(params, AdamConfig::adamw())?;
    let mut mask = vec![0.0f32; t * t];
    (0..t).for_each(|i| (i + 1..t).for_each(|j| mask[i * t + j] = -1e9));
    let mask = Tensor::from_vec_on(mask, &[t, t], device)?;
    let ids: Vec<i64> = (0..b * (t + 1))
        .map(|k| ((k * 7919) % g.vocab) as i64)
        .collect();
    let (x, y): (Vec<i64>, Vec<i64>) = (0..b)
        .flat_map(|r| (0..t).map(move |i| r * (t + 1) + i))
        .map(|k| (ids[k], ids[k + 1]))
        .unzip();
    let x = Tensor::from_vec_i64(x, &[b, t])?.to_device(device)?;
    let y = Tensor::from_vec_i64(y, &[b * t])?.to_device(device)?;
    let dh = d / h;
    let heads = |z: &Tensor| z.reshape(&[b, t, h, dh])?.transpose(1, 2);
    // `TENJIN_GPT_PHASES=1`: each phase (forward, backward, optimizer) ends
    // by waiting for the device, and stderr gets, per phase, the host's time
    // to issue its calls and the time until the device has finished them.
    let phases = std::env::var_os("TENJIN_GPT_PHASES").is_some();
    let mut clock = Phases::new(device, phases);
    let forward = || -> Result<Tensor, Error> {
        let mut z = tokens.embedding(&x)?.add(&positions)?;
        for bl in &blocks {
            let a = bl.ln1.forward(&z)?;
            let (q, k, v) = (
                heads(&a.matmul(&bl.w[0])?)?,
                heads(&a.matmul(&bl.w[1])?)?,
                heads(&a.matmul(&bl.w[2])?)?,
            );
            let scores = q
                .matmul(&k.transpose(2, 3)?)?
                .mul_scalar(1.0 / (dh as f64).sqrt())?
                .add(&mask)?;
            let attended = scores
                .softmax(3)?
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape(&[b, t, d])?;
            z = z.add(&attended.matmul(&bl.w[3])?)?;
            let m = bl
                .ln2
                .forward(&z)?
                .matmul(&bl.w[4])?
                .add(&bl.b[0])?
                .gelu()?
                .matmul(&bl.w[5])?
                .add(&bl.b[1])?;
            z = z.add(&m)?;
        }
        let logits = ln_f
            .forward(&z)?
            .matmul(&tokens.transpose(0, 1)?)?
            .reshape(&[b * t, g.vocab])?;
        logits.cross_entropy_with(&y, Default::default())
    };
    let ms = median_ms(reps, device, || {
        clock.start();
        opt.zero_grad();
        let loss = match autocast {
            Some(half) => tenjin::autocast(half, forward)?,
            None => forward()?,
        };
        clock.mark()?;
        loss.backward()?;
        clock.mark()?;
        opt.step()?;
        clock.mark()?;
        loss.item().map(drop)
    })?;
    clock.report();
    let size = format!(
        "layers={},d={d},heads={h},T={t},B={b},vocab={}",
        g.layers, g.vocab
    );
    match autocast {
        Some(half) => report("gpt_step_autocast", &format!("{size},{half:?}"), ms, None),
        None => report("gpt_step", &size, ms, None),
    }
    Ok(())
}

/// Host issue time and device completion time per phase of a step (see
/// `TENJIN_GPT_PHASES` in `gpt_step`); inert when off.
struct Phases {
    device: Device,
    on: bool,
    t0: std::time::Instant,
    launches: u64,
    /// Per step, per phase: (host ms, device ms, launches).
    steps: Vec<Vec<[f64; 3]>>,
}

impl Phases {
    fn new(device: Device, on: bool) -> Self {
        Phases {
            device,
            on,
            t0: std::time::Instant::now(),
            launches: 0,
            steps: Vec::new(),
        }
    }

    /// PTX launches and cuBLAS calls so far.
    fn launches() -> u64 {
        let s = tenjin::stats();
        s.ptx_launches + s.cublas_calls
    }

    fn start(&mut self) {
        self.t0 = std::time::Instant::now();
        self.launches = Self::launches();
        if self.on {
            self.steps.push(Vec::new());
        }
    }

    /// Ends a phase: the host's issue time, then the wait for the device.
    fn mark(&mut self) -> Result<(), Error> {
        if !self.on {
            return Ok(());
        }
        let host = self.t0.elapsed().as_secs_f64() * 1e3;
        tenjin::cuda::synchronize(self.device)?;
        let device = self.t0.elapsed().as_secs_f64() * 1e3;
        let launches = Self::launches();
        let phase = [host, device, (launches - self.launches) as f64];
        if let Some(step) = self.steps.last_mut() {
            step.push(phase);
        }
        self.launches = launches;
        self.t0 = std::time::Instant::now();
        Ok(())
    }

    /// Medians over the steps after the first (which compiles).
    fn report(&self) {
        if !self.on {
            return;
        }
        let timed = self.steps.get(1..).unwrap_or_default();
        let median = |phase: usize, k: usize| {
            let mut v: Vec<f64> = timed
                .iter()
                .filter_map(|s| s.get(phase))
                .map(|p| p[k])
                .collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        for (i, name) in ["forward", "backward", "optimizer"].iter().enumerate() {
            eprintln!(
                "gpt_step phase {name}: {} launches, the host issues them in {:.2} ms, the device is done at {:.2} ms",
                median(i, 2),
                median(i, 0),
                median(i, 1)
            );
        }
    }
}

fn mlp_step(device: Device, widths: [usize; 4], batch: usize, reps: usize) -> Result<(), Error> {
    let w: Vec<Tensor> = (0..3)
        .map(|l| {
            let (i, o) = (widths[l], widths[l + 1]);
            param(device, &[i, o], 10 + l as u64, 1.0 / (i as f32).sqrt())
        })
        .collect::<Result<_, Error>>()?;
    let bias: Vec<Tensor> = (0..3)
        .map(|l| param(device, &[widths[l + 1]], 20 + l as u64, 0.0))
        .collect::<Result<_, Error>>()?;
    let mut opt = SGD::new(
        w.iter().chain(&bias).cloned().collect(),
        SgdConfig {
            lr: 0.01,
            ..Default::default()
        },
    )?;
    let x = on(device, &[batch, widths[0]], 30, 1.0)?;
    let labels: Vec<i64> = (0..batch).map(|k| (k % widths[3]) as i64).collect();
    let y = Tensor::from_vec_i64(labels, &[batch])?.to_device(device)?;
    let ms = median_ms(reps, device, || {
        opt.zero_grad();
        let mut z = x.clone();
        for l in 0..3 {
            z = z.matmul(&w[l])?.add(&bias[l])?;
            if l < 2 {
                z = z.relu()?;
            }
        }
        let loss = z.cross_entropy_with(&y, Default::default())?;
        loss.backward()?;
        opt.step()
    })?;
    let size = format!(
        "{}-{}-{}-{},batch={batch}",
        widths[0], widths[1], widths[2], widths[3]
    );
    report("mlp_step", &size, ms, None);
    Ok(())
}

/// Times value and gradients of `Σ f(inputs) · G` with respect to every
/// input.
fn value_grad(
    device: Device,
    workload: &str,
    size: &str,
    shapes: &[&[usize]],
    reps: usize,
    bytes: Option<f64>,
    f: impl Fn(&[Tensor]) -> Result<Tensor, Error>,
) -> Result<(), Error> {
    let xs: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| param(device, s, 40 + k as u64, 1.0))
        .collect::<Result<_, Error>>()?;
    let out = f(&xs)?.shape().to_vec();
    let g = on(device, &out, 50, 1.0)?;
    let ms = median_ms(reps, device, || {
        xs.iter().for_each(Tensor::zero_grad);
        f(&xs)?.mul(&g)?.sum()?.backward()
    })?;
    report(workload, size, ms, bytes);
    Ok(())
}

fn chain(x: &Tensor) -> Result<Tensor, Error> {
    let e = x.neg()?.exp()?.add_scalar(1.0)?;
    x.tanh()?
        .mul(&x.mul_scalar(2.0)?.sigmoid()?)?
        .add(&x.mul(x)?.div(&e)?)
}

fn main() -> Result<(), Error> {
    let sizes = match device_arg::from_args() {
        Where::Cuda => FULL,
        Where::Sim => {
            tenjin::cuda::simulate()?;
            TINY
        }
        Where::Cpu => {
            eprintln!("gpu_peers measures a GPU: --device cuda (or sim for a smoke run)");
            std::process::exit(2);
        }
    };
    if std::env::args().any(|a| a == "tf32") {
        tenjin::cuda::set_math_mode(MathMode::Tf32);
    }
    use tenjin::cuda::{set_half_copies, HalfCopies};
    for arg in std::env::args() {
        match arg.as_str() {
            "half-copies=never" => set_half_copies(HalfCopies::Never),
            "half-copies=always" => set_half_copies(HalfCopies::Always),
            _ => {}
        }
    }
    // `--only a,b`: just these workloads (the device script runs each in a
    // process of its own, under its own time limit).
    let args: Vec<String> = std::env::args().collect();
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|k| args.get(k + 1))
        .map(|list| list.split(',').map(str::to_owned).collect());
    let run = |workload: &str| {
        only.as_ref()
            .is_none_or(|o| o.iter().any(|w| w == workload))
    };
    let device = Device::Cuda(0);
    let reps = sizes.reps;
    if run("matmul") {
        let n = sizes.matmul;
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let a = on(device, &[n, n], 70, 1.0)?.to_dtype(dtype)?;
            let b = on(device, &[n, n], 71, 1.0)?.to_dtype(dtype)?;
            // The rounding of a half product is deferred: run it.
            let ms = median_ms(reps, device, || a.matmul(&b)?.realize())?;
            let name = format!("{dtype:?}").to_lowercase();
            report("matmul", &format!("{n}^3,{name}"), ms, None);
        }
    }
    if run("half_products") {
        half_products(device, sizes.gpt, reps)?;
    }
    let (widths, batches) = sizes.mlp;
    for &batch in batches.iter().filter(|_| run("mlp_step")) {
        mlp_step(device, widths, batch, reps)?;
    }
    let (lengths, e) = sizes.attention;
    for &n in lengths.iter().filter(|_| run("attention")) {
        value_grad(
            device,
            "attention",
            &format!("N={n},E={e}"),
            &[&[n, e], &[n, e], &[n, e]],
            reps,
            None,
            |x| {
                let scale = 1.0 / (e as f64).sqrt();
                x[0].matmul(&x[1].transpose(0, 1)?)?
                    .mul_scalar(scale)?
                    .softmax(1)?
                    .matmul(&x[2])
            },
        )?;
    }
    let n = sizes.elementwise;
    if run("elementwise_forward") {
        let x = on(device, &[n], 60, 3.0)?;
        // Fusion defers the chain's ops until the result is read: run it.
        let ms = median_ms(reps, device, || chain(&x)?.realize())?;
        // One read and one write of each element.
        report(
            "elementwise_forward",
            &format!("n={n}"),
            ms,
            Some(8.0 * n as f64),
        );
    }
    if run("elementwise_exp") {
        // One kernel: its bandwidth against the device's copy.
        let x = on(device, &[n], 61, 3.0)?;
        // Fusion defers an element-wise result until it is read: run it.
        let ms = median_ms(reps, device, || x.exp()?.realize())?;
        report(
            "elementwise_exp",
            &format!("n={n}"),
            ms,
            Some(8.0 * n as f64),
        );
    }
    if run("elementwise_value_grad") {
        value_grad(
            device,
            "elementwise_value_grad",
            &format!("n={n}"),
            &[&[n]],
            reps,
            None,
            |x| chain(&x[0]),
        )?;
    }
    let [r, c] = sizes.rows;
    let rows = format!("{r}x{c}");
    if run("softmax") {
        value_grad(device, "softmax", &rows, &[&[r, c]], reps, None, |x| {
            x[0].softmax(1)
        })?;
    }
    if run("layer_norm") {
        value_grad(device, "layer_norm", &rows, &[&[r, c]], reps, None, |x| {
            x[0].layer_norm(1, None, None, 1e-5)
        })?;
    }
    let [b, ch, hh, ww] = sizes.conv;
    if run("conv2d") {
        value_grad(
            device,
            "conv2d",
            &format!("B={b},C=O={ch},{hh}x{ww},3x3,p1"),
            &[&[b, ch, hh, ww], &[ch, ch, 3, 3]],
            reps,
            None,
            |x| x[0].conv2d(&x[1], None, [1, 1], [1, 1], [1, 1], 1),
        )?;
    }
    // Last: the largest, and the longest to compile.
    if run("gpt_step") {
        gpt_step(device, sizes.gpt, reps.min(5), None)?;
    }
    if run("gpt_step_autocast") {
        gpt_step(device, sizes.gpt, reps.min(5), Some(DType::BF16))?;
    }
    Ok(())
}
