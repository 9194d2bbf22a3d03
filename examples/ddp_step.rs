//! What data-parallel training costs a step: the MLP 784-512-512-10
//! (f32, SGD, random data), a global batch of 256 split between the `k`
//! ranks, timed three ways, alternated step by step: with the averaging
//! skipped, averaged after backward (`DataParallel::sync_gradients`), and
//! with each bucket's all-reduce started inside backward
//! (`DataParallel::backward`). The step's time over the first is the
//! exposed communication; the share of it that the overlap removes is
//! reported as `hidden_share`. Prints one JSON line per rank.
//! `--bucket-kib N` sets every bucket to N KiB (PyTorch's 1 MiB first and
//! 25 MiB after by default).
//!
//! ```sh
//! cargo run --release --example ddp_step -- --threads 2    # ranks as threads
//! cargo build --release --features mpi --example ddp_step
//! mpirun -np 2 target/release/examples/ddp_step            # ranks as processes
//! ```

mod ranks;

#[allow(dead_code)] // only its MLP and SGD are used here
mod bench_common;

use std::sync::Arc;
use std::time::Instant;
use tenjin::distributed::{Collective, DataParallel};
use tenjin::nn::Module;
use tenjin::optim::Optimizer;
use tenjin::{DType, Error, Tensor};

const GLOBAL_BATCH: usize = 256;

fn run_rank(comm: Arc<dyn Collective>, rounds: usize) -> Result<String, Error> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let model = bench_common::mlp()?;
    let ddp = match bucket_bytes() {
        Some(bytes) => DataParallel::with_bucket_bytes(&model, comm.clone(), bytes, bytes)?,
        None => DataParallel::new(&model, comm.clone())?,
    };
    let mut opt = bench_common::sgd(model.parameters())?;
    let batch = GLOBAL_BATCH / world;
    let x = Tensor::randn(&[batch, 784], DType::F32, 10 + rank as u64)?;
    let labels: Vec<usize> = (0..batch).map(|i| (i * 7 + rank) % 10).collect();
    // 0: no averaging; 1: averaged after backward; 2: each bucket's
    // all-reduce started inside backward (`DataParallel::backward`).
    let mut step = |how: u8| -> Result<f64, Error> {
        let t = Instant::now();
        opt.zero_grad();
        let loss = model.forward(&x)?.cross_entropy(&labels)?;
        match how {
            0 => loss.backward()?,
            1 => {
                loss.backward()?;
                ddp.sync_gradients()?
            }
            _ => ddp.backward(&loss)?,
        }
        opt.step()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for how in 0..3 {
        step(how)?; // compiles
    }
    let (mut local, mut synced, mut overlapped) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Every rank runs the same sequence, so the synced steps meet.
        synced.push(step(1)?);
        local.push(step(0)?);
        overlapped.push(step(2)?);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (s, l, o) = (median(synced), median(local), median(overlapped));
    // The all-reduce alone, of as many values as the gradients hold, in
    // their type (f32).
    let n: usize = model.parameters().iter().map(Tensor::numel).sum();
    let mut reduce = Vec::new();
    for _ in 0..rounds.min(11) {
        let buf = tenjin::distributed::Values::F32(vec![1.0f32; n]);
        comm.barrier()?;
        let t = Instant::now();
        comm.all_reduce_sum_start(buf)?.wait()?;
        reduce.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let r = median(reduce);
    comm.barrier()?;
    Ok(format!(
        "{{\"rank\": {rank}, \"world\": {world}, \"batch_per_rank\": {batch}, \"step_ms\": {s:.3}, \"step_without_sync_ms\": {l:.3}, \"exposed_communication_ms\": {:.3}, \"step_overlapped_ms\": {o:.3}, \"exposed_when_overlapped_ms\": {:.3}, \"hidden_share\": {:.2}, \"all_reduce_alone_ms\": {r:.3}, \"values_reduced\": {n}, \"samples_per_s_per_rank\": {:.0}, \"samples_per_s_total\": {:.0}}}",
        s - l,
        o - l,
        if s > l { ((s - o) / (s - l)).clamp(-1.0, 1.0) } else { 0.0 },
        batch as f64 / o.min(s) * 1e3,
        GLOBAL_BATCH as f64 / o.min(s) * 1e3
    ))
}

/// `--bucket-kib N`: buckets of N KiB instead of PyTorch's 1 + 25 MiB.
fn bucket_bytes() -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--bucket-kib")?;
    args.get(at + 1)?.parse::<usize>().ok().map(|k| k << 10)
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let rounds = if args.iter().any(|a| a == "smoke") {
        2
    } else {
        41
    };
    let lines = ranks::run(|comm| run_rank(comm, rounds))?;
    for l in lines {
        println!("{l}");
    }
    Ok(())
}
