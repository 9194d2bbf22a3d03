//! The `DataLoader`: every sample once per epoch, shuffled by the seed
//! and the epoch alone (the same with and without prefetching), batch
//! sizes with and without `drop_last`, a data set's error ending the
//! epoch, an early stop joining the worker, and the errors for an empty
//! data set, a zero batch size and mismatched tensors.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use tenjin::data::{Collated, DataLoader, Dataset, TensorDataset};
use tenjin::{Error, Tensor};

fn rows(n: usize) -> TensorDataset {
    let x = Tensor::from_vec_f64((0..2 * n).map(|v| v as f64).collect(), &[n, 2]).unwrap();
    let y = Tensor::from_vec_i64((0..n as i64).collect(), &[n]).unwrap();
    TensorDataset::new(vec![x, y]).unwrap()
}

/// The sample numbers of an epoch, batch by batch (read from the labels).
fn epoch_ids(loader: &DataLoader<TensorDataset>, epoch: u64) -> Vec<Vec<i64>> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.unwrap();
            let ids = b[1].to_vec_i64().unwrap();
            // The rows of x follow the labels.
            let x = b[0].to_vec_f64().unwrap();
            for (k, &id) in ids.iter().enumerate() {
                assert_eq!(x[2 * k], 2.0 * id as f64);
                assert_eq!(x[2 * k + 1], 2.0 * id as f64 + 1.0);
            }
            ids
        })
        .collect()
}

#[test]
fn every_sample_once_per_epoch_in_an_order_fixed_by_seed_and_epoch() {
    let loader = DataLoader::new(rows(103), 10).unwrap().shuffle(42);
    assert_eq!(loader.len(), 11);
    let e0 = epoch_ids(&loader, 0);
    assert_eq!(e0.len(), 11);
    assert_eq!(e0.last().unwrap().len(), 3);
    let mut all: Vec<i64> = e0.concat();
    all.sort();
    assert_eq!(all, (0..103).collect::<Vec<_>>());
    // Reproducible, a new order each epoch, the same without prefetching.
    assert_eq!(epoch_ids(&loader, 0), e0);
    assert_ne!(epoch_ids(&loader, 1), e0);
    let inline = DataLoader::new(rows(103), 10)
        .unwrap()
        .shuffle(42)
        .prefetch(0);
    assert_eq!(epoch_ids(&inline, 0), e0);
    // Another seed, another order; no shuffle, the natural order.
    let other = DataLoader::new(rows(103), 10).unwrap().shuffle(43);
    assert_ne!(epoch_ids(&other, 0), e0);
    let plain = DataLoader::new(rows(103), 10).unwrap();
    assert_eq!(plain.order(5), (0..103).collect::<Vec<_>>());
}

#[test]
fn drop_last_leaves_out_the_partial_batch() {
    let loader = DataLoader::new(rows(103), 10)
        .unwrap()
        .shuffle(1)
        .drop_last(true);
    assert_eq!(loader.len(), 10);
    let e = epoch_ids(&loader, 0);
    assert_eq!(e.len(), 10);
    assert!(e.iter().all(|b| b.len() == 10));
    let tiny = DataLoader::new(rows(3), 10).unwrap().drop_last(true);
    assert!(tiny.is_empty());
    assert_eq!(tiny.epoch(0).count(), 0);
}

/// A data set that fails at one sample and counts its batches.
struct Flaky {
    bad: usize,
    made: Arc<AtomicUsize>,
}

impl Dataset for Flaky {
    type Batch = Vec<usize>;
    fn len(&self) -> usize {
        100
    }
    fn batch(&self, indices: &[usize]) -> Result<Vec<usize>, Error> {
        self.made.fetch_add(1, Relaxed);
        if indices.contains(&self.bad) {
            return Err(Error::Invalid {
                function: "Flaky".into(),
                message: format!("sample {} is unreadable", self.bad),
            });
        }
        Ok(indices.to_vec())
    }
}

#[test]
fn a_data_set_error_ends_the_epoch_and_an_early_stop_joins_the_worker() {
    let made = Arc::new(AtomicUsize::new(0));
    let loader = DataLoader::new(
        Flaky {
            bad: 35,
            made: made.clone(),
        },
        10,
    )
    .unwrap();
    let got: Vec<Result<Vec<usize>, Error>> = loader.epoch(0).collect();
    assert_eq!(got.len(), 4, "three batches, then the error");
    let err = got[3].as_ref().unwrap_err().to_string();
    assert!(err.contains("sample 35"), "{err}");
    // Stopping after one batch: the worker stops too (at most the
    // prefetched batches are made), and nothing hangs.
    made.store(0, Relaxed);
    let first = loader.epoch(1).next().unwrap().unwrap();
    assert_eq!(first, (0..10).collect::<Vec<_>>());
    assert!(
        made.load(Relaxed) <= 4,
        "{} batches made",
        made.load(Relaxed)
    );
}

#[test]
fn bad_loaders_and_data_sets_are_errors() {
    let empty = TensorDataset::new(vec![Tensor::from_vec(vec![], &[0, 3]).unwrap()]).unwrap();
    let err = DataLoader::new(empty, 4).err().unwrap().to_string();
    assert!(err.contains("empty"), "{err}");
    let err = DataLoader::new(rows(5), 0).err().unwrap().to_string();
    assert!(err.contains("batch_size 0"), "{err}");
    let a = Tensor::from_vec(vec![0.0; 6], &[3, 2]).unwrap();
    let b = Tensor::from_vec(vec![0.0; 4], &[4]).unwrap();
    let err = TensorDataset::new(vec![a, b]).err().unwrap().to_string();
    assert!(err.contains("first dimension"), "{err}");
    assert!(TensorDataset::new(vec![]).is_err());
    assert!(TensorDataset::new(vec![Tensor::scalar(1.0, tenjin::DType::F32).unwrap()]).is_err());
    let err = rows(5).batch(&[1, 7]).unwrap_err().to_string();
    assert!(err.contains("sample 7"), "{err}");
}

/// A data set read sample by sample with a collate function: the batches
/// hold each sample once per epoch, in the loader's order, with or without
/// prefetching; a failing sample ends the epoch with its error.
#[test]
fn samples_collated_by_a_function_follow_the_loaders_order() {
    let make = || Collated::new(23, |i| Ok(i as i64), |ids: Vec<i64>| Ok(ids));
    let loader = DataLoader::new(make(), 5).unwrap().shuffle(3);
    let inline = DataLoader::new(make(), 5).unwrap().shuffle(3).prefetch(0);
    for epoch in 0..3 {
        let batches: Vec<Vec<i64>> = loader.epoch(epoch).map(|b| b.unwrap()).collect();
        let flat: Vec<usize> = batches.concat().iter().map(|&i| i as usize).collect();
        assert_eq!(flat, loader.order(epoch), "the loader's order");
        let again: Vec<Vec<i64>> = inline.epoch(epoch).map(|b| b.unwrap()).collect();
        assert_eq!(batches, again, "prefetching changes nothing");
        assert_eq!(batches.last().unwrap().len(), 3, "23 = 4·5 + 3");
    }
    let failing = Collated::new(
        4,
        |i| {
            if i == 2 {
                Err(Error::Invalid {
                    function: "sample".into(),
                    message: "sample 2 is corrupt".into(),
                })
            } else {
                Ok(i)
            }
        },
        |ids: Vec<usize>| Ok(ids),
    );
    let results: Vec<_> = DataLoader::new(failing, 2).unwrap().epoch(0).collect();
    assert!(results[0].is_ok());
    let e = results[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("sample 2 is corrupt"), "{e}");
}
