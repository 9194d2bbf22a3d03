//! [`Mpi`]: ranks that are processes started by `mpirun`/`mpiexec`, over
//! the system's MPI library (feature `mpi`, rsmpi).
//!
//! One thread of the process talks to MPI (`tenjin-mpi`: it initialises
//! MPI, runs the collectives in the order they were asked for, and
//! finalises MPI when the [`Mpi`] handle is dropped), so a started
//! all-reduce runs while the training thread goes on, and every wait has a
//! timeout: a rank that does not arrive gives the others an error instead
//! of a hang. After a timeout the communicator is broken (MPI cannot
//! cancel a collective): every later call is an error.

use super::{check_root, error, Collective, PendingReduce, Values};
use crate::Error;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

type Reply = Sender<Result<Values, String>>;

/// A collective for the MPI thread, with where its result goes.
enum Job {
    AllReduce(Values, Reply),
    Broadcast(Vec<f64>, usize, Reply),
}

/// This process's rank in `MPI_COMM_WORLD` (see the module documentation).
///
/// ```no_run
/// use tenjin::distributed::{Collective, Mpi};
/// let comm = Mpi::init()?; // under `mpirun -np 2`
/// let mut v = vec![comm.rank() as f64];
/// comm.all_reduce_sum(&mut v)?; // 0 + 1 on both ranks
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Mpi {
    rank: usize,
    world: usize,
    jobs: Mutex<Option<Sender<Job>>>,
    thread: Option<JoinHandle<()>>,
    /// Disconnected when the MPI thread has ended.
    ended: Mutex<Receiver<()>>,
    calls: AtomicU64,
    timeout: Duration,
    broken: Arc<AtomicBool>,
}

impl Mpi {
    /// Initialises MPI on its own thread (once per process), with a 60 s
    /// timeout per collective. Without a launcher MPI makes a world of
    /// one rank. An error when MPI was initialised already or the library
    /// refuses.
    pub fn init() -> Result<Mpi, Error> {
        let (send, jobs) = channel::<Job>();
        let (ready, started) = channel::<Result<(usize, usize), String>>();
        let (ending, ended) = channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tenjin-mpi".into())
            .spawn(move || {
                serve(jobs, ready);
                drop(ending);
            })
            .map_err(|e| error("Mpi::init", format!("cannot start the MPI thread: {e}")))?;
        let (rank, world) = started
            .recv()
            .map_err(|_| error("Mpi::init", "the MPI thread stopped while starting".into()))?
            .map_err(|m| error("Mpi::init", m))?;
        Ok(Mpi {
            rank,
            world,
            jobs: Mutex::new(Some(send)),
            thread: Some(thread),
            ended: Mutex::new(ended),
            calls: AtomicU64::new(0),
            timeout: Duration::from_secs(60),
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    /// This handle with another timeout for each collective.
    pub fn with_timeout(mut self, timeout: Duration) -> Mpi {
        self.timeout = timeout;
        self
    }

    /// Hands `job` to the MPI thread; what waits for its result.
    fn submit(
        &self,
        op: &'static str,
        job: impl FnOnce(Reply) -> Job,
    ) -> Result<impl FnOnce() -> Result<Values, Error> + Send + 'static, Error> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            return Err(error(
                op,
                format!("call {call}: an earlier collective timed out; the communicator is broken"),
            ));
        }
        let (reply, result): (Reply, Receiver<_>) = channel();
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.send(job(reply)).is_ok());
        if sent != Some(true) {
            return Err(error(op, "the MPI thread has stopped".into()));
        }
        let (rank, timeout, broken) = (self.rank, self.timeout, self.broken.clone());
        Ok(move || match result.recv_timeout(timeout) {
            Ok(r) => r.map_err(|m| error(op, m)),
            Err(RecvTimeoutError::Timeout) => {
                broken.store(true, Ordering::SeqCst);
                Err(error(
                    op,
                    format!("rank {rank} waited {timeout:?} for call {call}; another rank did not arrive"),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(error(op, "the MPI thread has stopped".into()))
            }
        })
    }
}

/// The MPI thread: initialise, report the rank and size, run jobs in
/// order until the handle goes, finalise (dropping the universe).
fn serve(jobs: Receiver<Job>, ready: Sender<Result<(usize, usize), String>>) {
    let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = ready.send(Err("MPI is initialised already in this process".into()));
        return;
    };
    let world = universe.world();
    let _ = ready.send(Ok((world.rank() as usize, world.size() as usize)));
    for job in jobs {
        match job {
            Job::AllReduce(send, reply) => {
                let sum = match send {
                    Values::F32(send) => {
                        let mut sum = vec![0.0; send.len()];
                        world.all_reduce_into(&send[..], &mut sum[..], SystemOperation::sum());
                        Values::F32(sum)
                    }
                    Values::F64(send) => {
                        let mut sum = vec![0.0; send.len()];
                        world.all_reduce_into(&send[..], &mut sum[..], SystemOperation::sum());
                        Values::F64(sum)
                    }
                };
                let _ = reply.send(Ok(sum));
            }
            Job::Broadcast(mut buf, root, reply) => {
                world
                    .process_at_rank(root as i32)
                    .broadcast_into(&mut buf[..]);
                let _ = reply.send(Ok(Values::F64(buf)));
            }
        }
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum_start(&self, buf: Values) -> Result<PendingReduce, Error> {
        let wait = self.submit("all_reduce", |reply| Job::AllReduce(buf, reply))?;
        Ok(PendingReduce::new(wait))
    }

    fn broadcast(&self, buf: &mut [f64], root: usize) -> Result<(), Error> {
        check_root(root, self.world)?;
        let data = buf.to_vec();
        let got = self.submit("broadcast", |reply| Job::Broadcast(data, root, reply))?()?;
        buf.copy_from_slice(&got.into_f64("broadcast")?);
        Ok(())
    }
}

impl Drop for Mpi {
    /// Stops the MPI thread, which finalises MPI. After a timeout the
    /// thread is in a collective a rank did not join: it gets one more
    /// timeout to finish (a late rank that arrives lets every rank
    /// finalise), and is left behind if it does not.
    fn drop(&mut self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        let finished = !self.broken.load(Ordering::SeqCst)
            || matches!(
                self.ended
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .recv_timeout(self.timeout),
                Err(RecvTimeoutError::Disconnected)
            );
        if finished {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}
