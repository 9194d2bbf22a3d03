//! Data-parallel training on ranks that are threads (`distributed::
//! InProcess`): the collectives (sums in rank order, broadcast, errors and
//! timeouts), `DataParallel` (rank 0's parameters everywhere, gradients
//! averaged so three ranks on a third of a batch each compute the
//! whole batch's step, `no_sync` accumulation, buckets in reverse order),
//! a mismatch of parameters refused on every rank, and the loader's
//! shards.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tenjin::data::{DataLoader, TensorDataset};
use tenjin::distributed::{Collective, DataParallel, InProcess, Local};
use tenjin::nn::{Linear, Module, Sequential, Tanh};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

/// Runs `f(rank's collective)` on a thread per rank; the results by rank.
fn on_ranks<T: Send>(world: usize, f: impl Fn(InProcess) -> T + Sync) -> Vec<T> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(world)
            .into_iter()
            .map(|c| s.spawn(move || f(c)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    })
}

#[test]
fn collectives_sum_in_rank_order_and_broadcast() {
    let out = on_ranks(4, |c| -> Result<(Vec<f64>, Vec<f64>), Error> {
        // 0.1 + 0.2 + 0.3 + 0.4 in rank order, the same bits everywhere.
        let mut v = vec![0.1 * (c.rank() + 1) as f64, 1.0];
        let pending =
            c.all_reduce_sum_start(tenjin::distributed::Values::F64(vec![c.rank() as f64]))?;
        c.all_reduce_sum(&mut v)?;
        let ranks = pending.wait()?;
        let mut b = vec![c.rank() as f64; 3];
        c.broadcast(&mut b, 2)?;
        c.barrier()?;
        assert_eq!(ranks, tenjin::distributed::Values::F64(vec![6.0]));
        Ok((v, b))
    });
    let want = ((0.1 + 0.2) + 0.30000000000000004) + 0.4;
    for r in out {
        let (v, b) = r.unwrap();
        assert_eq!(v, vec![want, 4.0]);
        assert_eq!(b, vec![2.0; 3]);
    }
}

#[test]
fn mismatched_calls_fail_on_every_rank_and_a_missing_rank_times_out() {
    let out = on_ranks(2, |c| {
        let mut v = vec![0.0; 1 + c.rank()];
        c.all_reduce_sum(&mut v).map_err(|e| e.to_string())
    });
    for r in out {
        let e = r.unwrap_err();
        assert!(e.contains("rank 0 gave 1 values, rank 1 2"), "{e}");
    }
    let out = on_ranks(2, |c| {
        let c = c.with_timeout(Duration::from_millis(200));
        if c.rank() == 1 {
            return Ok(()); // never arrives
        }
        let start = Instant::now();
        let r = c.barrier().map_err(|e| e.to_string());
        assert!(start.elapsed() < Duration::from_secs(10));
        r
    });
    let e = out[0].clone().unwrap_err();
    assert!(e.contains("ranks [1] did not arrive"), "{e}");
}

/// An MLP in f64, initialised from `seed` (ranks start different on purpose).
fn model(seed: u64) -> Result<Sequential, Error> {
    Ok(Sequential::new()
        .add(Linear::with_options(3, 8, true, DType::F64, seed)?)
        .add(Tanh)
        .add(Linear::with_options(8, 2, true, DType::F64, seed + 100)?))
}

/// Twelve samples; a rank's share is every third from `rank` on.
fn batch(rank: usize, world: usize) -> Result<(Tensor, Tensor), Error> {
    let rows: Vec<usize> = (rank..12).step_by(world).collect();
    let x: Vec<f64> = rows
        .iter()
        .flat_map(|&r| (0..3).map(move |c| ((r * 3 + c) as f64 * 0.37).sin()))
        .collect();
    let y: Vec<f64> = rows
        .iter()
        .flat_map(|&r| (0..2).map(move |c| ((r * 2 + c) as f64 * 0.91).cos()))
        .collect();
    Ok((
        Tensor::from_vec_f64(x, &[rows.len(), 3])?,
        Tensor::from_vec_f64(y, &[rows.len(), 2])?,
    ))
}

/// Five SGD steps of `m` on its rank's share, synchronised by `ddp`; the
/// parameters after them.
fn train(
    m: &Sequential,
    ddp: &DataParallel,
    rank: usize,
    world: usize,
) -> Result<Vec<Vec<f64>>, Error> {
    let mut opt = SGD::new(
        m.parameters(),
        SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )?;
    let (x, y) = batch(rank, world)?;
    for _ in 0..5 {
        opt.zero_grad();
        m.forward(&x)?.mse_loss(&y)?.backward()?;
        ddp.sync_gradients()?;
        opt.step()?;
    }
    m.parameters().iter().map(|p| p.to_vec_f64()).collect()
}

#[test]
fn three_ranks_on_thirds_of_a_batch_take_the_whole_batchs_steps() -> Result<(), Error> {
    // One rank on the whole batch.
    let alone = model(0)?;
    let ddp = DataParallel::new(&alone, Arc::new(Local))?;
    let want = train(&alone, &ddp, 0, 1)?;
    let out = on_ranks(3, |c| -> Result<Vec<Vec<f64>>, Error> {
        let rank = c.rank();
        let m = model(rank as u64 * 7)?; // rank 0's seed is the lone run's
        let ddp = DataParallel::new(&m, Arc::new(c))?;
        // Rank 0's values everywhere before training.
        let first = m.parameters()[0].to_vec_f64()?;
        assert_eq!(first, model(0)?.parameters()[0].to_vec_f64()?);
        train(&m, &ddp, rank, 3)
    });
    let ranks: Vec<Vec<Vec<f64>>> = out.into_iter().collect::<Result<_, _>>()?;
    for r in &ranks[1..] {
        assert_eq!(r, &ranks[0], "every rank holds the same bits");
    }
    // Equal shares: the mean of the ranks' mean losses is the batch's mean.
    for (got, want) in ranks[0].iter().zip(&want) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} against {w}");
        }
    }
    Ok(())
}

#[test]
fn no_sync_accumulates_and_the_next_sync_averages_the_sum() -> Result<(), Error> {
    let out = on_ranks(2, |c| -> Result<(Vec<f64>, Vec<f64>), Error> {
        let rank = c.rank();
        let m = model(3)?;
        let ddp = DataParallel::new(&m, Arc::new(c))?;
        let (x, y) = batch(rank, 2)?;
        let half = |k: usize| -> Result<(Tensor, Tensor), Error> {
            Ok((x.narrow(0, 3 * k, 3)?, y.narrow(0, 3 * k, 3)?))
        };
        let w = m.parameters()[0].clone();
        ddp.no_sync(|| -> Result<(), Error> {
            let (a, b) = half(0)?;
            m.forward(&a)?.mse_loss(&b)?.backward()?;
            ddp.sync_gradients() // does nothing here
        })?;
        let local = w.grad().unwrap().to_vec_f64()?;
        let (a, b) = half(1)?;
        m.forward(&a)?.mse_loss(&b)?.backward()?;
        ddp.sync_gradients()?;
        Ok((local, w.grad().unwrap().to_vec_f64()?))
    });
    let out: Vec<(Vec<f64>, Vec<f64>)> = out.into_iter().collect::<Result<_, _>>()?;
    assert_ne!(out[0].0, out[1].0, "inside no_sync each rank keeps its own");
    assert_eq!(
        out[0].1, out[1].1,
        "after the sync every rank has the average"
    );
    // The average of the two ranks' two-micro-batch sums, by hand.
    let m = model(3)?;
    let w = m.parameters()[0].clone();
    for rank in 0..2 {
        let (x, y) = batch(rank, 2)?;
        for k in 0..2 {
            m.forward(&x.narrow(0, 3 * k, 3)?)?
                .mse_loss(&y.narrow(0, 3 * k, 3)?)?
                .mul_scalar(0.5)?
                .backward()?;
        }
    }
    for (g, want) in out[0].1.iter().zip(w.grad().unwrap().to_vec_f64()?) {
        assert!((g - want).abs() <= 1e-12, "{g} against {want}");
    }
    Ok(())
}

#[test]
fn different_parameters_are_refused_on_every_rank() {
    let out = on_ranks(3, |c| {
        let rank = c.rank();
        let m = if rank == 2 {
            Sequential::new()
                .add(Linear::with_options(3, 8, true, DType::F64, 0).unwrap())
                .add(Linear::with_options(8, 5, true, DType::F64, 1).unwrap())
        } else {
            model(0).unwrap()
        };
        DataParallel::new(&m, Arc::new(c))
            .err()
            .map(|e| e.to_string())
    });
    let e2 = out[2].clone().expect("rank 2 refused");
    assert!(
        e2.contains("rank 2's parameter 2 (`1.weight`, [5, 8]"),
        "{e2}"
    );
    for e in &out[..2] {
        let e = e.clone().expect("the others refused too");
        assert!(e.contains("1 rank(s) hold parameters that differ"), "{e}");
    }
}

#[test]
fn buckets_hold_parameters_in_reverse_order_up_to_their_size() -> Result<(), Error> {
    let m = model(0)?; // 0.weight 24, 0.bias 8, 2.weight 16, 2.bias 2 (f64)
    let ddp = DataParallel::with_bucket_bytes(&m, Arc::new(Local), 8 * 18, 8 * 30)?;
    assert_eq!(
        ddp.buckets(),
        vec![
            vec!["2.bias".to_string(), "2.weight".into()],
            vec!["0.bias".into()],
            vec!["0.weight".into()],
        ]
    );
    Ok(())
}

#[test]
fn shards_split_every_epoch_between_the_ranks() -> Result<(), Error> {
    let x = Tensor::from_vec_f64((0..10).map(f64::from).collect(), &[10])?;
    let shards: Vec<Vec<usize>> = (0..3)
        .map(|r| -> Result<Vec<usize>, Error> {
            let l = DataLoader::new(TensorDataset::new(vec![x.clone()])?, 2)?
                .shuffle(5)
                .shard(r, 3)?;
            assert_eq!(l.len(), 2, "4 samples in batches of 2");
            Ok(l.order(1))
        })
        .collect::<Result<_, _>>()?;
    let mut all: Vec<usize> = shards.concat();
    assert_eq!(all.len(), 12);
    all.sort();
    all.dedup();
    assert_eq!(
        all,
        (0..10).collect::<Vec<_>>(),
        "every sample, two repeated as padding"
    );
    assert!(DataLoader::new(TensorDataset::new(vec![x])?, 2)?
        .shard(3, 3)
        .is_err());
    Ok(())
}

/// Each parameter's gradient values.
type Grads = Vec<Vec<f64>>;

#[test]
fn backward_with_overlap_gives_the_averages_of_backward_then_sync() -> Result<(), Error> {
    // Small buckets, so several reductions start while backward runs.
    let out = on_ranks(3, |c| -> Result<(Grads, Grads), Error> {
        let rank = c.rank();
        let comm: Arc<dyn Collective> = Arc::new(c);
        let grads = |overlap: bool| -> Result<Grads, Error> {
            let m = model(0)?;
            let ddp = DataParallel::with_bucket_bytes(&m, comm.clone(), 8 * 10, 8 * 20)?;
            let (x, y) = batch(rank, 3)?;
            let loss = m.forward(&x)?.mse_loss(&y)?;
            if overlap {
                ddp.backward(&loss)?;
            } else {
                loss.backward()?;
                ddp.sync_gradients()?;
            }
            m.parameters()
                .iter()
                .map(|p| p.grad().expect("a gradient").to_vec_f64())
                .collect()
        };
        Ok((grads(true)?, grads(false)?))
    });
    let out: Vec<(Grads, Grads)> = out.into_iter().collect::<Result<_, _>>()?;
    for (overlapped, after) in &out {
        assert_eq!(overlapped, after, "the same averages, bit for bit");
        assert_eq!(overlapped, &out[0].0, "on every rank");
    }
    // Accumulated gradients (after no_sync) reduce after backward, still right.
    let out = on_ranks(2, |c| -> Result<Vec<f64>, Error> {
        let rank = c.rank();
        let m = model(0)?;
        let ddp = DataParallel::new(&m, Arc::new(c))?;
        let (x, y) = batch(rank, 2)?;
        ddp.no_sync(|| m.forward(&x)?.mse_loss(&y)?.backward())?;
        ddp.backward(&m.forward(&x)?.mse_loss(&y)?)?;
        m.parameters()[0].grad().unwrap().to_vec_f64()
    });
    let out: Vec<Vec<f64>> = out.into_iter().collect::<Result<_, _>>()?;
    assert_eq!(out[0], out[1]);
    let m = model(0)?;
    for rank in 0..2 {
        let (x, y) = batch(rank, 2)?;
        m.forward(&x)?.mse_loss(&y)?.mul_scalar(1.0)?.backward()?;
    }
    // Each rank accumulated twice its own gradient: the average of the two
    // ranks' doubled gradients is the sum of their gradients.
    for (g, want) in out[0]
        .iter()
        .zip(m.parameters()[0].grad().unwrap().to_vec_f64()?)
    {
        assert!((g - want).abs() <= 1e-12, "{g} against {want}");
    }
    Ok(())
}

/// A parameter read by several element-wise ops: its gradient is a sum of
/// terms (on a GPU, where the backward folds them, added by the kernels
/// computing them), and the overlapped backward reduces it once, when the
/// last term has arrived.
struct ReadThrice {
    w: Tensor,
}

impl Module for ReadThrice {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let w = &self.w;
        x.mul(w)?
            .tanh()?
            .add(&w.sigmoid()?.mul(w)?)?
            .add(&w.neg()?.exp()?)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("w".into(), self.w.clone())]
    }
}

impl ReadThrice {
    /// The module with its one parameter, the same on every rank.
    fn new() -> Result<ReadThrice, Error> {
        let w = (0..6).map(|k| 0.1 * k as f64 - 0.2).collect();
        Ok(ReadThrice {
            w: Tensor::from_vec_f64(w, &[6])?.requires_grad(),
        })
    }

    /// The sum of its output on rank `rank`'s batch.
    fn loss(&self, rank: usize) -> Result<Tensor, Error> {
        let x = (0..12).map(|k| ((k + 12 * rank) as f64 * 0.37).sin());
        self.forward(&Tensor::from_vec_f64(x.collect(), &[2, 6])?)?
            .sum()
    }
}

#[test]
fn a_parameter_read_several_times_reduces_once_its_gradient_is_whole() -> Result<(), Error> {
    let out = on_ranks(2, |c| -> Result<(Vec<f64>, Vec<f64>), Error> {
        let rank = c.rank();
        let comm: Arc<dyn Collective> = Arc::new(c);
        let grads = |overlap: bool| -> Result<Vec<f64>, Error> {
            let m = ReadThrice::new()?;
            let ddp = DataParallel::new(&m, comm.clone())?;
            let loss = m.loss(rank)?;
            if overlap {
                ddp.backward(&loss)?;
            } else {
                loss.backward()?;
                ddp.sync_gradients()?;
            }
            m.w.grad().expect("a gradient").to_vec_f64()
        };
        Ok((grads(true)?, grads(false)?))
    });
    let out: Vec<(Vec<f64>, Vec<f64>)> = out.into_iter().collect::<Result<_, _>>()?;
    for (overlapped, after) in &out {
        assert_eq!(overlapped, after, "the same averages, bit for bit");
        assert_eq!(overlapped, &out[0].0, "on every rank");
    }
    // The average of the two ranks' whole gradients, computed here.
    let m = ReadThrice::new()?;
    for rank in 0..2 {
        m.loss(rank)?.mul_scalar(0.5)?.backward()?;
    }
    for (g, want) in out[0].0.iter().zip(m.w.grad().unwrap().to_vec_f64()?) {
        assert!((g - want).abs() <= 1e-12, "{g} against {want}");
    }
    Ok(())
}

/// NCCL (feature `nccl`): with no GPU or no NCCL library every entry point
/// is an error naming what is missing, on every rank of a shared id;
/// where both are present, a world of one rank reduces and broadcasts
/// through the device and returns its input.
#[cfg(feature = "nccl")]
#[test]
fn nccl_refuses_cleanly_without_a_gpu_or_library_and_a_world_of_one_round_trips() {
    use tenjin::distributed::{Nccl, NcclId};
    let shared = on_ranks(2, |c| NcclId::share(&c).map_err(|e| e.to_string()));
    match NcclId::new() {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("libnccl"), "{e}");
            assert!(shared[0].as_ref().unwrap_err().contains("libnccl"));
            let e1 = shared[1].as_ref().unwrap_err();
            assert!(e1.contains("rank 0 could not make an NCCL id"), "{e1}");
        }
        Ok(_) => assert_eq!(shared[0], shared[1], "both ranks hold rank 0's id"),
    }
    let single = Nccl::single(0);
    if !tenjin::cuda::is_available() {
        let e = single.err().expect("no GPU: an error").to_string();
        assert!(e.contains("no CUDA device 0"), "{e}");
        eprintln!("SKIPPED: no CUDA GPU; NCCL refused with: {e}");
        return;
    }
    let Ok(comm) = single else {
        eprintln!(
            "SKIPPED: a GPU but no usable NCCL: {}",
            single.err().unwrap()
        );
        return;
    };
    let mut v = vec![1.5, -2.0, f64::INFINITY];
    comm.all_reduce_sum(&mut v).unwrap();
    assert_eq!(v, vec![1.5, -2.0, f64::INFINITY]);
    comm.broadcast(&mut v, 0).unwrap();
    assert_eq!(v, vec![1.5, -2.0, f64::INFINITY]);
    assert!(comm.broadcast(&mut v, 1).is_err());
    comm.barrier().unwrap();
}

/// A collective that notes the type of every all-reduce it passes on.
struct Recording {
    inner: InProcess,
    types: std::sync::Mutex<Vec<DType>>,
}

impl Collective for Recording {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn all_reduce_sum_start(
        &self,
        buf: tenjin::distributed::Values,
    ) -> Result<tenjin::distributed::PendingReduce, Error> {
        self.types.lock().unwrap().push(buf.dtype());
        self.inner.all_reduce_sum_start(buf)
    }
    fn broadcast(&self, buf: &mut [f64], root: usize) -> Result<(), Error> {
        self.inner.broadcast(buf, root)
    }
}

#[test]
fn gradients_travel_in_their_own_precision_one_bucket_per_dtype() -> Result<(), Error> {
    // An f32 layer between two f64 ones: three buckets (a new one where
    // the dtype changes), the middle one all-reduced as f32.
    let out = on_ranks(2, |c| -> Result<_, Error> {
        let rank = c.rank();
        let m = Sequential::new()
            .add(Linear::with_options(3, 4, true, DType::F64, 1)?)
            .add(Linear::with_options(4, 4, true, DType::F32, 2)?)
            .add(Linear::with_options(4, 2, true, DType::F64, 3)?);
        let comm = Arc::new(Recording {
            inner: c,
            types: Default::default(),
        });
        let ddp = DataParallel::new(&m, comm.clone())?;
        let (x, _) = batch(rank, 2)?;
        // Each layer's input in its own dtype.
        let h = m.layers()[0].forward(&x)?.to_dtype(DType::F32)?;
        let h = m.layers()[1].forward(&h)?.to_dtype(DType::F64)?;
        m.layers()[2].forward(&h)?.sum()?.backward()?;
        let own: Vec<Vec<f64>> = m
            .parameters()
            .iter()
            .map(|p| p.grad().unwrap().to_vec_f64())
            .collect::<Result<_, _>>()?;
        comm.types.lock().unwrap().clear();
        ddp.sync_gradients()?;
        let grads: Vec<Tensor> = m.parameters().iter().map(|p| p.grad().unwrap()).collect();
        let after: Vec<Vec<f64>> = grads
            .iter()
            .map(|g| g.to_vec_f64())
            .collect::<Result<_, _>>()?;
        let types = comm.types.lock().unwrap().clone();
        Ok((own, after, types, ddp.buckets(), grads))
    });
    let out: Vec<_> = out.into_iter().collect::<Result<_, _>>()?;
    let (own0, after0, types, buckets, grads) = &out[0];
    let own1 = &out[1].0;
    assert_eq!(buckets.len(), 3, "{buckets:?}");
    assert_eq!(types, &vec![DType::F64, DType::F32, DType::F64]);
    for (g, p) in grads
        .iter()
        .zip([DType::F64, DType::F64, DType::F32, DType::F32])
    {
        assert_eq!(g.dtype(), p, "each gradient in its parameter's dtype");
    }
    for (k, g) in after0.iter().enumerate() {
        for (e, &v) in g.iter().enumerate() {
            let (a, b) = (own0[k][e], own1[k][e]);
            // f32 sums in f32 (halving is exact), f64 in f64.
            let want = if k == 2 || k == 3 {
                f64::from((a as f32 + b as f32) / 2.0)
            } else {
                (a + b) / 2.0
            };
            assert_eq!(v, want, "parameter {k}, element {e}");
        }
    }
    assert_eq!(&out[1].1, after0, "both ranks hold the same averages");
    Ok(())
}
