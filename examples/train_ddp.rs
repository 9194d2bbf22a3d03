//! Data-parallel training: `train_mlp`'s digits classifier on `k` ranks,
//! each on its shard of every epoch (a batch of 64 split between them),
//! gradients averaged by `tenjin::distributed::DataParallel` before every
//! step, so every rank ends with the same parameters. Prints each rank's
//! throughput and test accuracy; exits non-zero unless every rank reaches
//! 95 % and all hold the same bits.
//!
//! ```sh
//! cargo run --release --example train_ddp -- --threads 2      # ranks as threads
//! cargo build --release --features mpi --example train_ddp    # ranks as processes
//! mpirun -np 2 target/release/examples/train_ddp
//! ```
//!
//! Under `mpirun` (Open MPI's or MPICH's environment variables seen) the
//! ranks are MPI processes, which needs the build with feature `mpi`; each
//! process runs one compute thread unless `TENJIN_NUM_THREADS` says
//! otherwise.
//!
//! `--nccl` (build with feature `nccl`, on a machine with a GPU and NCCL)
//! trains on CUDA device 0 twice, alone and as a world of one NCCL rank,
//! and exits non-zero unless the two end with the same parameters, bit
//! for bit.

// The digits module's training loop (and the curves, the device
// comparison) is train_mlp's; this example uses its data and helpers.
#[allow(dead_code)]
mod curves;
#[allow(dead_code)]
mod device_arg;
#[allow(dead_code)]
mod digits;
mod ranks;

use std::sync::Arc;
use std::time::Instant;
use tenjin::distributed::{Collective, DataParallel};
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::optim::Optimizer;
use tenjin::Error;

const EPOCHS: u64 = 40;
const GLOBAL_BATCH: usize = 64;

/// What a rank reports: its rank, steps, samples a second, test accuracy,
/// and whether its parameters are every rank's.
struct Report {
    rank: usize,
    steps: usize,
    samples_per_s: f64,
    accuracy: f64,
    same_as_all: bool,
    /// Every parameter's values (`--nccl` compares two runs' bits).
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    parameters: Vec<f64>,
}

fn run_rank(comm: Arc<dyn Collective>) -> Result<Report, Error> {
    let (rank, world) = (comm.rank(), comm.world_size());
    // Each rank starts from its own seed: DataParallel copies rank 0's.
    let model = Sequential::new()
        .add(Linear::new(digits::FEATURES, 128, 1 + 10 * rank as u64)?)
        .add(ReLU)
        .add(Linear::new(128, digits::CLASSES, 2 + 10 * rank as u64)?);
    let ddp = DataParallel::new(&model, comm.clone())?;
    let mut opt = digits::nesterov_sgd(&model)?;
    let (loader, data, test) = digits::training_loader(GLOBAL_BATCH / world)?;
    let loader = loader.shard(rank, world)?;
    let (mut steps, mut samples) = (0, 0);
    let start = Instant::now();
    for epoch in 0..EPOCHS {
        for batch in loader.epoch(epoch) {
            let (x, y) = batch?;
            opt.zero_grad();
            model.forward(&x)?.cross_entropy(&y)?.backward()?;
            ddp.sync_gradients()?;
            opt.step()?;
            steps += 1;
            samples += y.len();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let accuracy = digits::accuracy(&model, &data, &test)?;
    // Identical bits on every rank: the sum of the ranks' values of each
    // parameter element is world × this rank's.
    let mut own = Vec::new();
    for p in model.parameters() {
        own.extend(p.to_vec_f64()?);
    }
    let mut all = own.clone();
    comm.all_reduce_sum(&mut all)?;
    let same_as_all = own.iter().zip(&all).all(|(v, s)| v * world as f64 == *s);
    Ok(Report {
        rank,
        steps,
        samples_per_s: samples as f64 / seconds,
        accuracy,
        same_as_all,
        parameters: own,
    })
}

/// `--nccl`: on CUDA device 0, one rank over NCCL against the same
/// training alone; exits 1 unless their parameters are equal.
#[cfg(feature = "nccl")]
fn nccl_world_of_one() -> Result<(), Error> {
    if !tenjin::cuda::is_available() {
        eprintln!("--nccl: no CUDA GPU is available");
        std::process::exit(2);
    }
    tenjin::set_default_device(tenjin::Device::Cuda(0));
    let alone = run_rank(Arc::new(tenjin::distributed::Local))?;
    let nccl = run_rank(Arc::new(tenjin::distributed::Nccl::single(0)?))?;
    for (what, r) in [("alone", &alone), ("NCCL, world of 1", &nccl)] {
        println!(
            "cuda:0 {what}: {} steps, {:.0} samples/s, test accuracy {:.1}%",
            r.steps,
            r.samples_per_s,
            100.0 * r.accuracy
        );
    }
    let same = alone.parameters == nccl.parameters;
    println!(
        "parameters after {} steps: {}",
        nccl.steps,
        if same { "bitwise equal" } else { "DIFFERENT" }
    );
    if !same || nccl.accuracy < 0.95 {
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--nccl") {
        #[cfg(feature = "nccl")]
        return nccl_world_of_one();
        #[cfg(not(feature = "nccl"))]
        {
            eprintln!("--nccl needs the build with feature `nccl`");
            std::process::exit(2);
        }
    }
    let reports = ranks::run(run_rank)?;
    let mut ok = true;
    for r in &reports {
        println!(
            "rank {}: {} steps, {:.0} samples/s, test accuracy {:.1}%, parameters {} every rank's",
            r.rank,
            r.steps,
            r.samples_per_s,
            100.0 * r.accuracy,
            if r.same_as_all {
                "equal to"
            } else {
                "DIFFERENT from"
            }
        );
        ok &= r.accuracy >= 0.95 && r.same_as_all;
    }
    if !ok {
        eprintln!("a rank is below 95% test accuracy or holds other parameters");
        std::process::exit(1);
    }
    Ok(())
}
