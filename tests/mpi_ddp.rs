//! Data-parallel exactness across processes (feature `mpi`; `.ci/run`
//! runs this binary under `mpirun -np 2` and `-np 3`; alone it is a world
//! of one rank). `harness = false`: MPI is initialised once per process,
//! so `main` is the test.
//!
//! Every rank trains a small MLP on its share of a batch of 12 (every
//! k-th sample) for 20 SGD steps with `DataParallel::backward` (buckets
//! reduced while backward runs), and also, alone and
//! locally, on the whole batch; the two must agree within 1e-6 relative.
//! Then, where the world size is a power of two, a linear model on data
//! whose every partial sum is exact (dyadic values of few bits, a batch of
//! 8, so every mean divides by a power of two) agrees bit for bit after 3
//! steps (each step adds about 12 bits to the weights: by the fifth they
//! would no longer fit in f64's 53 and rounding would depend on the order
//! of the sums).
//!
//! Faults, with an argument (`.ci/run` runs both under `mpirun -np 2`):
//! - `fault-late`: the last rank arrives at an all-reduce 3 s late; the
//!   others' calls end with an error after their 2 s timeout, and every
//!   process still finalises MPI and exits 0 (the late rank completes the
//!   abandoned collective while their handles wait one more timeout).
//! - `fault-kill`: the last rank exits midway without finalising; the
//!   others end with an error within their timeout (or the launcher ends
//!   them first), so `mpirun` returns a failure instead of hanging.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tenjin::distributed::{Collective, DataParallel, Local, Mpi};
use tenjin::nn::{Linear, Module, Sequential, Tanh};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

/// Rows `rows` of the batch: inputs `[n, 3]` and targets `[n, 2]`; with
/// `exact`, small dyadic values.
fn rows(rows: &[usize], exact: bool) -> Result<(Tensor, Tensor), Error> {
    let value = |k: usize, scale: f64| -> f64 {
        if exact {
            ((k * 7 % 9) as f64 - 4.0) / 8.0
        } else {
            (k as f64 * scale).sin()
        }
    };
    let x: Vec<f64> = rows
        .iter()
        .flat_map(|&r| (0..3).map(move |c| value(r * 3 + c, 0.37)))
        .collect();
    let y: Vec<f64> = rows
        .iter()
        .flat_map(|&r| (0..2).map(move |c| value(r * 2 + c + 5, 0.91)))
        .collect();
    Ok((
        Tensor::from_vec_f64(x, &[rows.len(), 3])?,
        Tensor::from_vec_f64(y, &[rows.len(), 2])?,
    ))
}

fn mlp() -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::with_options(3, 8, true, DType::F64, 0)?)
        .add(Tanh)
        .add(Linear::with_options(8, 2, true, DType::F64, 1)?))
}

/// A linear layer with dyadic weights (exact products and sums).
fn linear() -> Result<Sequential, Error> {
    let w = Tensor::from_vec_f64(vec![0.5, -0.25, 0.125, 0.75, 0.0, -0.5], &[2, 3])?;
    let b = Tensor::from_vec_f64(vec![0.25, -0.125], &[2])?;
    Ok(Sequential::new().add(Linear::from_parameters(w, Some(b))?))
}

/// 20 steps of `model` on `rows` synchronised by `comm`; the parameters.
fn train(
    model: &Sequential,
    comm: Arc<dyn Collective>,
    rows_: &[usize],
    exact: bool,
) -> Result<Vec<f64>, Error> {
    let ddp = DataParallel::new(model, comm)?;
    let (lr, steps) = if exact { (0.0625, 3) } else { (0.1, 20) };
    let mut opt = SGD::new(
        model.parameters(),
        SgdConfig {
            lr,
            ..Default::default()
        },
    )?;
    let (x, y) = rows(rows_, exact)?;
    for _ in 0..steps {
        opt.zero_grad();
        let loss = model.forward(&x)?.mse_loss(&y)?;
        if exact {
            loss.backward()?;
            ddp.sync_gradients()?;
        } else {
            // Buckets reduced while backward runs.
            ddp.backward(&loss)?;
        }
        opt.step()?;
    }
    let mut out = Vec::new();
    for p in model.parameters() {
        out.extend(p.to_vec_f64()?);
    }
    Ok(out)
}

/// The timeout of the fault runs' collectives.
const TIMEOUT: Duration = Duration::from_secs(2);

/// `fault-late` or `fault-kill` (see the module documentation).
fn fault(comm: Mpi, kill: bool) -> Result<(), Error> {
    let (rank, world) = (comm.rank(), comm.world_size());
    if world < 2 {
        println!("a fault run needs 2 ranks or more (under mpirun)");
        return Ok(());
    }
    comm.barrier()?;
    let last = world - 1;
    if rank == last {
        if kill {
            println!("rank {rank}: exiting without finalising MPI");
            std::process::exit(3);
        }
        std::thread::sleep(TIMEOUT + Duration::from_secs(1));
        let mut v = vec![1.0];
        comm.all_reduce_sum(&mut v)?;
        println!("rank {rank} of {world}: arrived late; its all-reduce completed");
        return Ok(());
    }
    let start = Instant::now();
    let r = comm.all_reduce_sum(&mut [1.0]);
    let waited = start.elapsed();
    let e = r.expect_err("a rank that does not arrive is an error");
    assert!(
        waited >= TIMEOUT && waited < TIMEOUT + Duration::from_secs(2),
        "rank {rank}: the error came after {waited:?}, not after the {TIMEOUT:?} timeout"
    );
    assert!(e.to_string().contains("another rank did not arrive"), "{e}");
    assert!(
        comm.barrier().is_err(),
        "rank {rank}: broken after a timeout"
    );
    println!(
        "rank {rank} of {world}: an error after {:.2} s, as expected: {e}",
        waited.as_secs_f64()
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(kind) = args.iter().find(|a| a.starts_with("fault-")) {
        let comm = Mpi::init()?.with_timeout(TIMEOUT);
        return fault(comm, kind == "fault-kill");
    }
    let comm: Arc<dyn Collective> = Arc::new(Mpi::init()?);
    let (rank, world) = (comm.rank(), comm.world_size());
    for exact in [false, true] {
        let batch = if exact { 8 } else { 12 };
        if exact && !(world.is_power_of_two() && batch % world == 0) {
            println!(
                "rank {rank} of {world}: no exact variant (the shares of 8 are not powers of two)"
            );
            continue;
        }
        let whole: Vec<usize> = (0..batch).collect();
        let share: Vec<usize> = (rank..batch).step_by(world).collect();
        let make = if exact { linear } else { mlp };
        let alone = train(&make()?, Arc::new(Local), &whole, exact)?;
        let together = train(&make()?, comm.clone(), &share, exact)?;
        let worst = alone
            .iter()
            .zip(&together)
            .map(|(a, t)| (a - t).abs() / a.abs().max(1e-300))
            .fold(0.0f64, f64::max);
        let what = if exact { "exact data" } else { "MLP" };
        println!("rank {rank} of {world}, {what}: largest relative difference from one process on the whole batch {worst:.3e}");
        if exact {
            assert_eq!(
                alone, together,
                "rank {rank}: bitwise equality on exact data"
            );
        } else {
            assert!(worst <= 1e-6, "rank {rank}: {worst} over 1e-6");
        }
    }
    comm.barrier()?;
    println!("rank {rank} of {world}: ok");
    Ok(())
}
