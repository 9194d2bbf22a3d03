//! The [`DataLoader`]: a data set walked in batches, in a shuffled order
//! fixed by a seed and the epoch, the batches collated ahead on a worker
//! thread.
//!
//! Owns the order of an epoch ([`DataLoader::order`]: Fisher–Yates driven
//! by SplitMix64 of the seed and the epoch, the same on every machine and
//! at every thread count) and the prefetching iterator [`Batches`]: a
//! worker thread calls `Dataset::batch` for the next batches while the
//! training loop runs, at most `prefetch` batches ahead, through a bounded
//! channel; dropping the iterator stops and joins the worker. Must not run
//! kernels itself (a data set's `batch` decides what it does).

use super::Dataset;
use crate::tensor::SplitMix64;
use crate::Error;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A data set in batches of `batch_size` samples (PyTorch's
/// `DataLoader`). Built with [`DataLoader::new`], then configured:
///
/// | option | default | meaning |
/// | --- | --- | --- |
/// | [`shuffle`](DataLoader::shuffle) | off | a new order every epoch, from the seed and the epoch |
/// | [`drop_last`](DataLoader::drop_last) | `false` | leave out a last batch smaller than `batch_size` |
/// | [`prefetch`](DataLoader::prefetch) | 2 | batches collated ahead on a worker thread (0: on the caller's thread, when asked for) |
///
/// ```
/// use tenjin::data::{DataLoader, TensorDataset};
/// use tenjin::Tensor;
/// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[6])?;
/// let loader = DataLoader::new(TensorDataset::new(vec![x])?, 4)?;
/// let sizes: Vec<usize> = loader.epoch(0).map(|b| b.map(|b| b[0].shape()[0])).collect::<Result<_, _>>()?;
/// assert_eq!(sizes, [4, 2]);
/// assert_eq!(loader.len(), 2);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct DataLoader<D: Dataset> {
    dataset: Arc<D>,
    batch_size: usize,
    seed: Option<u64>,
    drop_last: bool,
    prefetch: usize,
    /// `(rank, world)`: this rank's share of each epoch.
    shard: Option<(usize, usize)>,
}

impl<D: Dataset> DataLoader<D> {
    /// Batches of `batch_size` samples of `dataset`, in order, two
    /// prefetched. An empty data set or a batch size of 0 is an error.
    pub fn new(dataset: D, batch_size: usize) -> Result<DataLoader<D>, Error> {
        let err = |message: String| Error::Invalid {
            function: "DataLoader".into(),
            message,
        };
        if dataset.is_empty() {
            return Err(err("the data set is empty: there is nothing to load".into()));
        }
        if batch_size == 0 {
            return Err(err("batch_size 0: a batch holds at least one sample".into()));
        }
        Ok(DataLoader {
            dataset: Arc::new(dataset),
            batch_size,
            seed: None,
            drop_last: false,
            prefetch: 2,
            shard: None,
        })
    }

    /// Shuffles every epoch, the order a function of `seed` and the epoch.
    pub fn shuffle(mut self, seed: u64) -> DataLoader<D> {
        self.seed = Some(seed);
        self
    }

    /// Whether a last batch smaller than `batch_size` is left out.
    pub fn drop_last(mut self, drop: bool) -> DataLoader<D> {
        self.drop_last = drop;
        self
    }

    /// How many batches are collated ahead on a worker thread (0: none,
    /// each batch is collated when the loop asks for it).
    pub fn prefetch(mut self, batches: usize) -> DataLoader<D> {
        self.prefetch = batches;
        self
    }

    /// This rank's share of every epoch in data-parallel training
    /// (PyTorch's `DistributedSampler`): the epoch's order (the same on
    /// every rank, from the shared seed) padded by its first samples to a
    /// multiple of `world`, then every `world`-th sample from `rank` on.
    /// The ranks see disjoint samples (but for the padding) and the same
    /// number of batches. `rank` must be below `world`.
    ///
    /// ```
    /// # use tenjin::data::{DataLoader, TensorDataset};
    /// # let x = tenjin::Tensor::from_vec(vec![0.0; 10], &[10])?;
    /// let all = DataLoader::new(TensorDataset::new(vec![x.clone()])?, 2)?.shuffle(4);
    /// let r1 = DataLoader::new(TensorDataset::new(vec![x])?, 2)?.shuffle(4).shard(1, 3)?;
    /// let full = all.order(0);
    /// assert_eq!(r1.order(0), vec![full[1], full[4], full[7], full[0]]); // 10 padded to 12
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn shard(mut self, rank: usize, world: usize) -> Result<DataLoader<D>, Error> {
        if world == 0 || rank >= world {
            return Err(Error::Invalid {
                function: "DataLoader".into(),
                message: format!("shard {rank} of {world}: the rank must be below the world size"),
            });
        }
        self.shard = Some((rank, world));
        Ok(self)
    }

    /// The data set.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        let n = match self.shard {
            Some((_, world)) => self.dataset.len().div_ceil(world),
            None => self.dataset.len(),
        };
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch (fewer samples than a batch, with
    /// `drop_last`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The order of the samples in `epoch`: `0..len` without shuffling,
    /// else a permutation fixed by the seed and the epoch (with
    /// [`DataLoader::shard`], this rank's share of it).
    ///
    /// ```
    /// # use tenjin::data::{DataLoader, TensorDataset};
    /// # let x = tenjin::Tensor::from_vec(vec![0.0; 100], &[100])?;
    /// let loader = DataLoader::new(TensorDataset::new(vec![x])?, 10)?.shuffle(1);
    /// assert_eq!(loader.order(3), loader.order(3));
    /// assert_ne!(loader.order(3), loader.order(4));
    /// let mut sorted = loader.order(3);
    /// sorted.sort();
    /// assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let n = self.dataset.len();
        let mut order: Vec<usize> = (0..n).collect();
        if let Some(seed) = self.seed {
            let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for i in (1..n).rev() {
                // An unbiased-enough draw in 0..=i (Lemire's multiply-high).
                let j = ((rng.next_u64() as u128 * (i as u128 + 1)) >> 64) as usize;
                order.swap(i, j);
            }
        }
        match self.shard {
            Some((rank, world)) => {
                let padded = n.div_ceil(world) * world;
                (rank..padded)
                    .step_by(world)
                    .map(|k| order[k % n])
                    .collect()
            }
            None => order,
        }
    }

    /// The batches of `epoch`, in order (see [`DataLoader::order`]).
    pub fn epoch(&self, epoch: u64) -> Batches<D::Batch> {
        let order = self.order(epoch);
        let chunks: Vec<Vec<usize>> = order
            .chunks(self.batch_size)
            .filter(|c| !self.drop_last || c.len() == self.batch_size)
            .map(<[usize]>::to_vec)
            .collect();
        let dataset = self.dataset.clone();
        if self.prefetch == 0 {
            let mut chunks = chunks.into_iter();
            return Batches {
                source: Source::Inline(Box::new(move || chunks.next().map(|c| dataset.batch(&c)))),
                worker: None,
            };
        }
        let (send, receive) = sync_channel(self.prefetch);
        let worker = std::thread::spawn(move || {
            for c in chunks {
                let failed = {
                    let batch = dataset.batch(&c);
                    let failed = batch.is_err();
                    if send.send(batch).is_err() {
                        return; // the loop stopped early
                    }
                    failed
                };
                if failed {
                    return; // the error ends the epoch
                }
            }
        });
        Batches {
            source: Source::Worker(receive),
            worker: Some(worker),
        }
    }
}

/// The batches of one epoch ([`DataLoader::epoch`]): each a `Result` (the
/// data set's error ends the epoch after it is returned).
pub struct Batches<B> {
    source: Source<B>,
    worker: Option<JoinHandle<()>>,
}

type NextBatch<B> = Box<dyn FnMut() -> Option<Result<B, Error>> + Send>;

enum Source<B> {
    Inline(NextBatch<B>),
    Worker(Receiver<Result<B, Error>>),
}

impl<B> Iterator for Batches<B> {
    type Item = Result<B, Error>;

    fn next(&mut self) -> Option<Result<B, Error>> {
        match &mut self.source {
            Source::Inline(next) => next(),
            Source::Worker(receive) => receive.recv().ok(),
        }
    }
}

impl<B> Drop for Batches<B> {
    fn drop(&mut self) {
        // Closing the channel stops the worker at its next batch.
        self.source = Source::Inline(Box::new(|| None));
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
