//! How the data-parallel examples (`train_ddp`, `ddp_step`) get their
//! ranks: processes under `mpirun`/`mpiexec` (its environment variables
//! seen; needs the build with feature `mpi`), else `--threads K` threads of
//! this process (2 by default). Not an example itself (a folder without
//! `main.rs`).

use std::sync::Arc;
use tenjin::distributed::{Collective, InProcess};
use tenjin::Error;

/// Runs `rank(comm)` on every rank this process holds: one under an MPI
/// launcher (with one compute thread unless `TENJIN_NUM_THREADS` says
/// otherwise), else each of `--threads K` threads; the results in rank
/// order. Under a launcher without feature `mpi`, says so and exits 2.
pub fn run<T: Send>(
    rank: impl Fn(Arc<dyn Collective>) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    let launched = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if launched {
        #[cfg(feature = "mpi")]
        {
            if std::env::var_os("TENJIN_NUM_THREADS").is_none() {
                tenjin::jit::set_num_threads(1);
            }
            return Ok(vec![rank(Arc::new(tenjin::distributed::Mpi::init()?))?]);
        }
        #[cfg(not(feature = "mpi"))]
        {
            eprintln!("started by an MPI launcher, but built without feature `mpi`: build with --features mpi");
            std::process::exit(2);
        }
    }
    let args: Vec<String> = std::env::args().collect();
    let k = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(2usize);
    let rank = &rank;
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(k)
            .into_iter()
            .map(|c| s.spawn(move || rank(Arc::new(c))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank panicked"))
            .collect()
    })
}
