//! Data-parallel training (PyTorch's `torch.distributed` and
//! `DistributedDataParallel`): the same training loop on `k` ranks, each
//! on its own shard of the data, gradients averaged across the ranks
//! before every optimizer step, so the ranks keep identical parameters.
//!
//! Owns the [`Collective`] interface (rank, world size, all-reduce,
//! broadcast, barrier, a non-blocking all-reduce), its backends — [`Local`]
//! (one rank, always built), [`InProcess`] (ranks that are threads of
//! one process, sharing memory: tests and one machine), `Mpi` (ranks
//! that are processes under `mpirun`, feature `mpi`) and `Nccl` (ranks
//! that each drive a GPU, feature `nccl`) — and
//! [`DataParallel`], which checks that every rank holds the same
//! parameters, broadcasts rank 0's, and averages gradients in buckets.
//! Collectives work on host buffers ([`Values`]: f32 or f64 for an
//! all-reduce, f64 for a broadcast); a rank that does not arrive
//! makes the others' calls fail after a timeout instead of hanging. Must
//! not touch the tape or the kernels: gradients are read and written
//! through `Tensor::grad` and `Tensor::set_grad`.
//!
//! ```
//! use std::sync::Arc;
//! use tenjin::distributed::{Collective, InProcess};
//! let ranks = InProcess::group(3);
//! let sums: Vec<Vec<f64>> = std::thread::scope(|s| {
//!     let handles: Vec<_> = ranks
//!         .into_iter()
//!         .map(|c| s.spawn(move || {
//!             let mut v = vec![c.rank() as f64, 1.0];
//!             c.all_reduce_sum(&mut v).map(|_| v)
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
//! });
//! assert!(sums.iter().all(|v| v == &vec![3.0, 3.0])); // 0 + 1 + 2, 1 + 1 + 1
//! ```

mod data_parallel;
mod in_process;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "nccl")]
mod nccl;

pub use data_parallel::DataParallel;
pub use in_process::InProcess;
#[cfg(feature = "mpi")]
pub use mpi::Mpi;
#[cfg(feature = "nccl")]
pub use nccl::{Nccl, NcclId};

use crate::{DType, Error};

/// What every rank of a group can do together. Every rank must call the
/// collectives in the same order (as with MPI and NCCL); the `n`-th call
/// of each rank meets the `n`-th call of the others.
pub trait Collective: Send + Sync {
    /// This process's (or thread's) number, `0..world_size()`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn world_size(&self) -> usize;

    /// Replaces `buf` by the element-wise sum of every rank's `buf` (all of
    /// one length), summed in rank order: every rank gets the same bits.
    fn all_reduce_sum(&self, buf: &mut [f64]) -> Result<(), Error> {
        let sum = self
            .all_reduce_sum_start(Values::F64(buf.to_vec()))?
            .wait()?
            .into_f64("all_reduce")?;
        buf.copy_from_slice(&sum);
        Ok(())
    }

    /// Starts an all-reduce of `buf` and returns at once; the sum, of
    /// `buf`'s type, is [`PendingReduce::wait`]'s. Every rank passes the
    /// same type and length. Several may be in flight.
    fn all_reduce_sum_start(&self, buf: Values) -> Result<PendingReduce, Error>;

    /// Replaces `buf` on every rank by rank `root`'s.
    fn broadcast(&self, buf: &mut [f64], root: usize) -> Result<(), Error>;

    /// Returns when every rank has called it.
    fn barrier(&self) -> Result<(), Error> {
        self.all_reduce_sum(&mut [])
    }
}

/// A buffer as it travels between ranks: gradients go in their own
/// precision (f32 gradients as f32, half the bytes of f64).
///
/// ```
/// use tenjin::distributed::Values;
/// let v = Values::F32(vec![1.0, 2.0]);
/// assert_eq!((v.len(), v.dtype()), (2, tenjin::DType::F32));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Values {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F64(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::F32,
            Values::F64(_) => DType::F64,
        }
    }

    /// The `f64` values; an error naming `op` for `f32` ones.
    pub fn into_f64(self, op: &str) -> Result<Vec<f64>, Error> {
        match self {
            Values::F64(v) => Ok(v),
            Values::F32(_) => Err(error(op, "f32 values where f64 were expected".into())),
        }
    }

    /// The element-wise sum of `parts` in their order; an error when they
    /// differ in type or length.
    pub(crate) fn sum(parts: &[&Values]) -> Result<Values, String> {
        let first = parts.first().ok_or("no values to sum")?;
        if let Some(r) = parts
            .iter()
            .position(|p| p.dtype() != first.dtype() || p.len() != first.len())
        {
            return Err(format!(
                "rank 0 gave {} {:?} values, rank {r} {} {:?}",
                first.len(),
                first.dtype(),
                parts[r].len(),
                parts[r].dtype()
            ));
        }
        fn add<'a, T: Copy + std::ops::AddAssign + Default + 'a>(
            parts: impl Iterator<Item = &'a [T]>,
            n: usize,
        ) -> Vec<T> {
            let mut sum = vec![T::default(); n];
            for part in parts {
                for (s, v) in sum.iter_mut().zip(part) {
                    *s += *v;
                }
            }
            sum
        }
        let n = first.len();
        // The types are all `first`'s (checked above).
        Ok(match first {
            Values::F32(_) => Values::F32(add(
                parts.iter().filter_map(|p| match p {
                    Values::F32(v) => Some(&v[..]),
                    Values::F64(_) => None,
                }),
                n,
            )),
            Values::F64(_) => Values::F64(add(
                parts.iter().filter_map(|p| match p {
                    Values::F64(v) => Some(&v[..]),
                    Values::F32(_) => None,
                }),
                n,
            )),
        })
    }
}

/// An all-reduce in flight: [`PendingReduce::wait`] gives its sum.
pub struct PendingReduce(Box<dyn FnOnce() -> Result<Values, Error> + Send>);

impl PendingReduce {
    /// A reduce whose sum `wait` computes or collects.
    pub fn new(wait: impl FnOnce() -> Result<Values, Error> + Send + 'static) -> PendingReduce {
        PendingReduce(Box::new(wait))
    }

    /// Blocks until every rank has contributed; the sum, or the error that
    /// ended the collective (a timeout, a mismatch between ranks).
    pub fn wait(self) -> Result<Values, Error> {
        (self.0)()
    }
}

/// One rank alone: every collective returns its input (PyTorch's world of
/// size 1). The default a training loop gets without a launcher.
///
/// ```
/// use tenjin::distributed::{Collective, Local};
/// let mut v = vec![1.0, 2.0];
/// Local.all_reduce_sum(&mut v)?;
/// assert_eq!((Local.rank(), Local.world_size(), v), (0, 1, vec![1.0, 2.0]));
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Collective for Local {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum_start(&self, buf: Values) -> Result<PendingReduce, Error> {
        Ok(PendingReduce::new(move || Ok(buf)))
    }

    fn broadcast(&self, _: &mut [f64], root: usize) -> Result<(), Error> {
        check_root(root, 1)
    }
}

/// An error unless `root` is a rank of a world of `world`.
pub(crate) fn check_root(root: usize, world: usize) -> Result<(), Error> {
    if root >= world {
        let ranks = if world == 1 { "rank" } else { "ranks" };
        return Err(error(
            "broadcast",
            format!("root {root} in a world of {world} {ranks}"),
        ));
    }
    Ok(())
}

pub(crate) fn error(op: &str, message: String) -> Error {
    Error::Invalid {
        function: format!("distributed::{op}"),
        message,
    }
}
