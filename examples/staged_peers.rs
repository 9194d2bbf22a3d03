//! tenjin's side of `bench/staged.sh` (issue "Staged execution"): one JSON
//! line per workload with the median time in ms, or the peak bytes.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example staged_peers
//! cargo run --release --example staged_peers -- smoke   # one repetition each
//! cargo run --release --example staged_peers -- attention   # the attention line alone
//! ```
//!
//! - `mlp_hand_step`: one SGD step of the MLP 784-512-512-10 written as
//!   three `index_fn` lines (`max(Σ_k x·w + c, 0)`, twice, then the last
//!   layer) and the softmax cross-entropy as one line;
//!   `mlp_hand_first_step` is the first step of the process (derive, plan,
//!   compile everything); `mlp_linear_step` the same model through
//!   `nn::Linear`, `ReLU` and `cross_entropy`.
//! - `attention_line`: forward and backward (to q, k and v) of
//!   `o[i;d] = Σ_j exp(Σ_e q[i;e]·k[j;e]) / Σ_m exp(Σ_e q[i;e]·k[m;e]) · v[j;d]`,
//!   N = 512, E = 64, with a fixed incoming gradient.
//! - `*_mode`: the MLP step (batch 256) and the attention line in each
//!   memory mode: median time and the allocator's measured peaks (bytes
//!   in use, and reserved: in use plus the runtime-efficient pool's
//!   cached blocks), after an empty cache and one step.

mod bench_common;

use bench_common::{data, median_ms, report, sgd};
use std::time::Instant;
use tenjin::alloc::{self, AllocMode};
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::optim::Optimizer;
use tenjin::{save_policy, DType, Error, SavePolicy, Tensor};

/// The MLP's parameters (as `nn::Linear` initialises them) and a batch.
struct Mlp {
    layers: Vec<Linear>,
    x: Tensor,
    labels: Vec<usize>,
    onehot: Tensor,
}

impl Mlp {
    fn new(batch: usize) -> Result<Mlp, Error> {
        let layers = vec![
            Linear::new(784, 512, 1)?,
            Linear::new(512, 512, 2)?,
            Linear::new(512, 10, 3)?,
        ];
        let x = Tensor::from_vec(data(batch * 784, 3, 1.0), &[batch, 784])?;
        let labels: Vec<usize> = (0..batch).map(|i| (i * 7 + 3) % 10).collect();
        let mut onehot = vec![0f32; batch * 10];
        for (i, &l) in labels.iter().enumerate() {
            onehot[i * 10 + l] = 1.0;
        }
        let onehot = Tensor::from_vec(onehot, &[batch, 10])?;
        Ok(Mlp {
            layers,
            x,
            labels,
            onehot,
        })
    }

    fn parameters(&self) -> Vec<Tensor> {
        self.layers.iter().flat_map(|l| l.parameters()).collect()
    }

    /// The loss through three index-function lines and one loss line.
    fn loss_by_hand(&self) -> Result<Tensor, Error> {
        let mut h = self.x.clone();
        for (l, layer) in self.layers.iter().enumerate() {
            let k = layer.in_features() - 1;
            let line = if l + 1 < self.layers.len() {
                format!("h[b; o] = max(sum{{k}}_0^{k} (x[b; k] * w[o; k]) + c[o], 0)")
            } else {
                format!("y[b; o] = sum{{k}}_0^{k} (x[b; k] * w[o; k]) + c[o]")
            };
            let c = layer.bias().expect("bias");
            h = tenjin::index_fn(&line, &[("x", &h), ("w", layer.weight()), ("c", c)])?;
        }
        let b = self.labels.len();
        let max = "max{m}_0^9 (y[b; m])";
        let loss = format!(
            "l[] = sum{{b}}_0^{} ({max} + log (sum{{c}}_0^9 (exp (y[b; c] - {max}))) - sum{{c}}_0^9 (t[b; c] * y[b; c])) / {b}",
            b - 1
        );
        tenjin::index_fn(&loss, &[("y", &h), ("t", &self.onehot)])
    }

    fn loss_linear(&self, model: &Sequential) -> Result<Tensor, Error> {
        model.forward(&self.x)?.cross_entropy(&self.labels)
    }
}

fn mlp(batch: usize, reps: usize, first: bool) -> Result<(), Error> {
    let size = format!("batch={batch}");
    let m = Mlp::new(batch)?;
    let mut opt = sgd(m.parameters())?;
    let mut hand = || -> Result<(), Error> {
        opt.zero_grad();
        m.loss_by_hand()?.backward()?;
        opt.step()
    };
    if first {
        let t = Instant::now();
        hand()?;
        report(
            "mlp_hand_first_step",
            &size,
            "median_ms",
            t.elapsed().as_secs_f64() * 1e3,
        );
    }
    let model = Sequential::new()
        .add(m.layers[0].clone())
        .add(ReLU)
        .add(m.layers[1].clone())
        .add(ReLU)
        .add(m.layers[2].clone());
    let mut opt2 = sgd(model.parameters())?;
    let mut linear = || -> Result<(), Error> {
        opt2.zero_grad();
        m.loss_linear(&model)?.backward()?;
        opt2.step()
    };
    // Interleaved rounds, so both see the same machine.
    let (mut th, mut tl) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        th.push(median_ms(reps, &mut hand)?);
        tl.push(median_ms(reps, &mut linear)?);
    }
    th.sort_by(|a, b| a.total_cmp(b));
    tl.sort_by(|a, b| a.total_cmp(b));
    report("mlp_hand_step", &size, "median_ms", th[1]);
    report("mlp_linear_step", &size, "median_ms", tl[1]);
    Ok(())
}

const ATTENTION: &str = "o[i; d] = sum{j}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[j; e])) / sum{m}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[m; e]))) * v[j; d])";

fn attention_step() -> Result<impl FnMut() -> Result<(), Error>, Error> {
    let (n, e) = (512, 64);
    let q = Tensor::from_vec(data(n * e, 11, 0.1), &[n, e])?.requires_grad();
    let k = Tensor::from_vec(data(n * e, 12, 0.1), &[n, e])?.requires_grad();
    let v = Tensor::from_vec(data(n * e, 13, 1.0), &[n, e])?.requires_grad();
    let g = Tensor::from_vec(data(n * e, 14, 1.0), &[n, e])?;
    Ok(move || {
        for t in [&q, &k, &v] {
            t.zero_grad();
        }
        let o = tenjin::index_fn(ATTENTION, &[("q", &q), ("k", &k), ("v", &v)])?;
        o.backward_with(&g)
    })
}

fn attention(reps: usize) -> Result<(), Error> {
    let mut step = attention_step()?;
    report(
        "attention_line",
        "N=512,E=64",
        "median_ms",
        median_ms(reps, &mut step)?,
    );
    Ok(())
}

/// Median step time and measured peak bytes of `step` in each mode (with
/// its default save policy, and memory-efficient mode once more with
/// `SavePolicy::Nothing`, which recomputes GEMMs too), and the bytes held
/// between forward and backward (`forward` runs a forward pass and returns
/// what backward would start from).
fn modes<T>(
    name: &str,
    size: &str,
    reps: usize,
    mut step: impl FnMut() -> Result<(), Error>,
    mut forward: impl FnMut() -> Result<T, Error>,
) -> Result<(), Error> {
    let configs = [
        (AllocMode::RuntimeEfficient, None, "runtime"),
        (AllocMode::MemoryEfficient, None, "memory"),
        (
            AllocMode::MemoryEfficient,
            Some(SavePolicy::Nothing),
            "memory_nothing",
        ),
    ];
    for (mode, policy, tag) in configs {
        alloc::set_mode(mode);
        alloc::empty_cache();
        let mut step = || match policy {
            Some(p) => save_policy(p, &mut step),
            None => step(),
        };
        let mut forward = || match policy {
            Some(p) => save_policy(p, &mut forward),
            None => forward(),
        };
        step()?; // the mode's first step (plans are cached already)
        alloc::reset_peak();
        let ms = median_ms(reps, &mut step)?;
        let s = alloc::stats();
        report(&format!("{name}_{tag}_mode"), size, "median_ms", ms);
        report(
            &format!("{name}_{tag}_mode"),
            size,
            "peak_in_use_bytes",
            s.peak_in_use as f64,
        );
        report(
            &format!("{name}_{tag}_mode"),
            size,
            "peak_reserved_bytes",
            s.peak_reserved as f64,
        );
        let before = alloc::stats().bytes_in_use;
        let held = forward()?;
        let after = alloc::stats().bytes_in_use;
        drop(held);
        let held_bytes = after.saturating_sub(before) as f64;
        report(
            &format!("{name}_{tag}_mode"),
            size,
            "held_after_forward_bytes",
            held_bytes,
        );
    }
    alloc::set_mode(AllocMode::RuntimeEfficient);
    Ok(())
}

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let reps = if smoke { 1 } else { 21 };
    if std::env::args().any(|a| a == "attention") {
        // Attention alone (bench/staged.sh alternates it with PyTorch's).
        return attention(11);
    }
    let _ = DType::F32;
    // The hand-written MLP first: its first step compiles everything.
    mlp(64, reps, true)?;
    mlp(256, reps, false)?;
    attention(if smoke { 1 } else { 11 })?;
    {
        // Dropped before the attention line is measured: each workload's
        // peaks are its own.
        let m = Mlp::new(256)?;
        let mut opt = sgd(m.parameters())?;
        let mut step = || -> Result<(), Error> {
            opt.zero_grad();
            m.loss_by_hand()?.backward()?;
            opt.step()
        };
        modes("mlp_hand", "batch=256", reps, &mut step, || {
            m.loss_by_hand()
        })?;
    }
    let (n, e) = (512, 64);
    let q = Tensor::from_vec(data(n * e, 11, 0.1), &[n, e])?.requires_grad();
    let k = Tensor::from_vec(data(n * e, 12, 0.1), &[n, e])?.requires_grad();
    let v = Tensor::from_vec(data(n * e, 13, 1.0), &[n, e])?.requires_grad();
    modes(
        "attention_line",
        "N=512,E=64",
        if smoke { 1 } else { 11 },
        attention_step()?,
        || tenjin::index_fn(ATTENTION, &[("q", &q), ("k", &k), ("v", &v)]),
    )?;
    Ok(())
}
