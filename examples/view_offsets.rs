//! Views at a new position every step (issue 28): what a step costs and
//! what it compiles once the first steps are done.
//!
//! - `walk`: a linear layer over `data.narrow(0, t, 16)` of a constant
//!   data set, `t` new every step.
//! - `walk_grad`: the same rows narrowed from a table that takes a
//!   gradient, `tanh` summed.
//! - `time_steps`: the same layer over `seq[:, t]` of a constant
//!   `[32, 128, 64]` batch of sequences (a view moving along the second
//!   dimension: read through a span of the batch).
//! - `time_steps_grad`: the same over `emb[:, t]` of a `[32, 128, 64]`
//!   tensor that takes a gradient (copied out of the span, its gradient
//!   placed back at its elements).
//! - `chunk_attention`: attention over `q, k, v = x.chunk(3, 2)` of a
//!   `[4, 128, 384]` tensor that takes a gradient (fixed positions: three
//!   views along the last dimension).
//! - `narrow_cat`: an embedding written as a new user would, 32 rows
//!   `table.narrow(0, id, 1)` joined by `cat`, then a matmul; beside it
//!   the same model with `embedding`.
//!
//! One JSON line per workload (median step time, and what the later
//! steps compiled, derived and planned); `bench/view_offsets.sh` runs it
//! beside PyTorch eager (`bench/view_offsets_peers.py`).
//!
//! `cargo run --release --example view_offsets`

use std::time::Instant;
use tenjin::{DType, Tensor};

/// Runs `step(t)` for `t` in `0..steps`; returns the median step time in
/// ms over the steps after the first `warm`, and the stats over them.
fn measure(
    steps: usize,
    warm: usize,
    mut step: impl FnMut(usize) -> Result<(), tenjin::Error>,
) -> Result<(f64, tenjin::Stats, tenjin::Stats), tenjin::Error> {
    let mut times = Vec::new();
    let mut before = tenjin::stats();
    for t in 0..steps {
        if t == warm {
            before = tenjin::stats();
        }
        let start = Instant::now();
        step(t)?;
        if t >= warm {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], before, tenjin::stats()))
}

fn report(name: &str, (ms, a, b): (f64, tenjin::Stats, tenjin::Stats), steps: usize) {
    println!(
        "{{\"system\": \"tenjin\", \"workload\": \"{name}\", \"median_ms\": {ms:.4}, \"later_steps\": {steps}, \"kernels_compiled\": {}, \"derivations\": {}, \"op_plans_built\": {}}}",
        b.kernels_compiled - a.kernels_compiled,
        b.derivations - a.derivations,
        b.op_plans_built - a.op_plans_built,
    );
}

fn main() -> Result<(), tenjin::Error> {
    let (steps, warm) = (60, 2);
    let data = Tensor::randn(&[1000, 64], DType::F32, 1)?;
    let w = Tensor::randn(&[64, 32], DType::F32, 2)?.requires_grad();
    let walk = measure(steps, warm, |t| {
        data.narrow(0, t * 7, 16)?
            .matmul(&w)?
            .tanh()?
            .sum()?
            .backward()
    })?;
    report("walk", walk, steps - warm);

    // The linear layer over time step `t` of `seq` (`seq[:, t]`).
    let layer_at = |seq: &Tensor, t: usize| -> Result<(), tenjin::Error> {
        let x = seq.narrow(1, t, 1)?.squeeze(1)?;
        x.matmul(&w)?.tanh()?.sum()?.backward()
    };
    let seq = Tensor::randn(&[32, 128, 64], DType::F32, 4)?;
    let time_steps = measure(steps, warm, |t| layer_at(&seq, t))?;
    report("time_steps", time_steps, steps - warm);

    let emb = Tensor::randn(&[32, 128, 64], DType::F32, 5)?.requires_grad();
    let time_steps_grad = measure(steps, warm, |t| layer_at(&emb, t))?;
    report("time_steps_grad", time_steps_grad, steps - warm);

    let qkv = Tensor::randn(&[4, 128, 384], DType::F32, 6)?.requires_grad();
    let chunk_attention = measure(steps, warm, |_| {
        let c = qkv.chunk(3, 2)?;
        let scores = c[0].matmul(&c[1].transpose(1, 2)?)?.softmax(-1)?;
        scores.matmul(&c[2])?.tanh()?.sum()?.backward()
    })?;
    report("chunk_attention", chunk_attention, steps - warm);

    let table = Tensor::randn(&[1000, 64], DType::F32, 3)?.requires_grad();
    let walk_grad = measure(steps, warm, |t| {
        table.narrow(0, t * 7, 16)?.tanh()?.sum()?.backward()
    })?;
    report("walk_grad", walk_grad, steps - warm);

    let ids = |t: usize| -> Vec<usize> { (0..32).map(|k| (t * 131 + k * 977) % 1000).collect() };
    let narrow_cat = measure(steps, warm, |t| {
        let rows: Vec<Tensor> = ids(t)
            .into_iter()
            .map(|i| table.narrow(0, i, 1))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = rows.iter().collect();
        Tensor::cat(&refs, 0)?.matmul(&w)?.sum()?.backward()
    })?;
    report("narrow_cat", narrow_cat, steps - warm);

    let embedding = measure(steps, warm, |t| {
        let ids: Vec<i64> = ids(t).into_iter().map(|i| i as i64).collect();
        let ids = Tensor::from_vec_i64(ids, &[32])?;
        table.embedding(&ids)?.matmul(&w)?.sum()?.backward()
    })?;
    report("embedding", embedding, steps - warm);
    Ok(())
}
