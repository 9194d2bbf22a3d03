//! [`DataParallel`]: one model's gradients averaged over the ranks of a
//! [`Collective`], in buckets, as PyTorch's `DistributedDataParallel`.

use super::{error, Collective, PendingReduce, Values};
use crate::nn::Module;
use crate::trace::{FinalGradients, Origin};
use crate::{DType, Error, Tensor};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// PyTorch's bucket sizes: the first bucket small, so its reduction starts
/// early; the rest large, so few reductions run.
const FIRST_BUCKET_BYTES: usize = 1 << 20;
const BUCKET_BYTES: usize = 25 << 20;

/// A model trained on every rank of `comm`, each on its own data: made
/// after the model and before its optimizer; call
/// [`DataParallel::sync_gradients`] between `backward` and the optimizer's
/// `step`.
///
/// - At creation every rank checks that it holds the same parameters
///   (names, shapes, dtypes); a difference is an `Err` on every rank,
///   naming the first one. Then rank 0's values are copied to all.
/// - Gradients go in buckets in reverse parameter order (the order
///   backward finishes them): the first of at most 1 MiB, the others of
///   at most 25 MiB, each of one dtype (a new bucket where it changes).
///   They travel in their own precision: f32 gradients as f32, others as
///   f64. All buckets' reductions are started, then collected; each
///   bucket's sum is divided by the number of ranks in place, and each
///   gradient is copied from its part straight into a pooled block on
///   its parameter's device (a leaf's gradient owns its storage, so it
///   cannot be a view into the bucket).
/// - [`DataParallel::no_sync`] accumulates gradients locally (gradient
///   accumulation): the next `sync_gradients` outside it averages them.
///
/// ```
/// use std::sync::Arc;
/// use tenjin::distributed::{DataParallel, Local};
/// use tenjin::nn::{Linear, Module};
/// let model = Linear::new(4, 2, 0)?;
/// let ddp = DataParallel::new(&model, Arc::new(Local))?;
/// let x = tenjin::Tensor::ones(&[3, 4], tenjin::DType::F32)?;
/// model.forward(&x)?.sum()?.backward()?;
/// ddp.sync_gradients()?; // one rank: the gradients stay as they are
/// assert_eq!(ddp.buckets().len(), 1);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct DataParallel {
    comm: Arc<dyn Collective>,
    params: Vec<(String, Tensor)>,
    /// The buckets, in the order they reduce.
    buckets: Vec<Bucket>,
    /// Inside `no_sync`.
    local_only: Cell<bool>,
    /// Each bucket's host buffer, kept from the last step (its sum) and
    /// filled again: no allocation in a steady loop.
    pool: RefCell<Vec<Option<Values>>>,
}

impl DataParallel {
    /// `model`'s parameters, checked against every rank's and set to rank
    /// 0's, in PyTorch's buckets.
    pub fn new(model: &dyn Module, comm: Arc<dyn Collective>) -> Result<DataParallel, Error> {
        DataParallel::with_bucket_bytes(model, comm, FIRST_BUCKET_BYTES, BUCKET_BYTES)
    }

    /// As [`DataParallel::new`] with other bucket sizes (bytes of the
    /// gradients' dtype; a parameter larger than a bucket has one alone).
    pub fn with_bucket_bytes(
        model: &dyn Module,
        comm: Arc<dyn Collective>,
        first: usize,
        rest: usize,
    ) -> Result<DataParallel, Error> {
        let params = model.named_parameters();
        if params.is_empty() {
            return Err(error(
                "DataParallel",
                "the model has no parameters to keep in step".into(),
            ));
        }
        check_same_parameters(comm.as_ref(), &params)?;
        broadcast_values(comm.as_ref(), &params)?;
        let buckets = buckets(&params, first, rest);
        Ok(DataParallel {
            comm,
            params,
            pool: RefCell::new(vec![None; buckets.len()]),
            buckets,
            local_only: Cell::new(false),
        })
    }

    /// The parameters' names per bucket, in the order they reduce.
    pub fn buckets(&self) -> Vec<Vec<String>> {
        self.buckets
            .iter()
            .map(|b| {
                b.members
                    .iter()
                    .map(|&(k, _)| self.params[k].0.clone())
                    .collect()
            })
            .collect()
    }

    /// Runs `f` (a forward and backward whose gradients are to accumulate)
    /// with synchronisation off: a `sync_gradients` inside does nothing.
    pub fn no_sync<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.local_only.replace(true);
        let out = f();
        self.local_only.set(before);
        out
    }

    /// Averages every parameter's gradient over the ranks (a parameter
    /// without one counts as zeros, and gets the average). A no-op inside
    /// [`DataParallel::no_sync`] and in a world of one rank. On an error
    /// (a rank that does not arrive, a mismatch) no gradient has changed.
    pub fn sync_gradients(&self) -> Result<(), Error> {
        // One rank: the average is the gradient itself.
        if self.local_only.get() || self.comm.world_size() == 1 {
            return Ok(());
        }
        let mut pending = Vec::with_capacity(self.buckets.len());
        for b in 0..self.buckets.len() {
            pending.push((b, self.comm.all_reduce_sum_start(self.bucket_values(b)?)?));
        }
        self.write_back(pending)
    }

    /// `loss.backward()` with the gradients averaged over the ranks, each
    /// bucket's all-reduce started as soon as backward has produced the
    /// last gradient in it, so communication overlaps the rest of
    /// backward (PyTorch's DDP does this from its autograd hooks). A bucket
    /// whose parameters already hold gradients (accumulation after
    /// [`DataParallel::no_sync`]) or get none is reduced after backward.
    /// Inside `no_sync`, or with one rank, it is `loss.backward()`. The
    /// averages equal [`DataParallel::sync_gradients`]'s bit for bit.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tenjin::distributed::{DataParallel, Local};
    /// use tenjin::nn::{Linear, Module};
    /// let model = Linear::new(4, 2, 0)?;
    /// let ddp = DataParallel::new(&model, Arc::new(Local))?;
    /// let x = tenjin::Tensor::ones(&[3, 4], tenjin::DType::F32)?;
    /// ddp.backward(&model.forward(&x)?.sum()?)?;
    /// assert!(model.parameters()[0].grad().is_some());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn backward(&self, loss: &Tensor) -> Result<(), Error> {
        if self.local_only.get() || self.comm.world_size() == 1 {
            return loss.backward();
        }
        let (slot_of, fills) = self.fills();
        let state = Rc::new(RefCell::new(Overlap {
            fills,
            started: Vec::new(),
            error: None,
        }));
        let observer = self.observer(slot_of, state.clone());
        let ran = crate::trace::observing_final_gradients(observer, || loss.backward());
        let mut st = state.borrow_mut();
        // The buffers of the buckets backward did not finish go back to
        // the pool for the reductions below.
        for (b, fill) in st.fills.iter_mut().enumerate() {
            if let Some(values) = fill.values.take() {
                self.pool.borrow_mut()[b] = Some(values);
            }
        }
        // The buckets started during backward, in the order they started;
        // then the others in bucket order (the same on every rank),
        // reduced from the committed gradients.
        let mut pending = std::mem::take(&mut st.started);
        for b in 0..self.buckets.len() {
            if !pending.iter().any(|(started, _)| *started == b) {
                pending.push((b, self.comm.all_reduce_sum_start(self.bucket_values(b)?)?));
            }
        }
        // Every started reduction is waited for, so the ranks stay in step
        // even when this rank's backward failed; then nothing is written.
        if let Some(e) = st.error.take().or(ran.err()) {
            for (_, reduce) in pending {
                let _ = reduce.wait();
            }
            return Err(e);
        }
        self.write_back(pending)
    }

    /// Bucket `b`'s gradients on the host, zeros for a parameter without
    /// one, in the bucket's wire type.
    fn bucket_values(&self, b: usize) -> Result<Values, Error> {
        let mut flat = self.buffer(b);
        for &(k, at) in &self.buckets[b].members {
            let (_, p) = &self.params[k];
            match p.grad() {
                Some(g) => read_part(&mut flat, at, &g)?,
                None => zero_part(&mut flat, at, p.numel()),
            }
        }
        Ok(flat)
    }

    /// Bucket `b`'s host buffer: the last step's, or a new one (its
    /// contents are overwritten before it is sent).
    fn buffer(&self, b: usize) -> Values {
        let bucket = &self.buckets[b];
        match self.pool.borrow_mut()[b].take() {
            Some(v) if v.len() == bucket.len && v.dtype() == wire_dtype(bucket.dtype) => v,
            _ => zeros(bucket.dtype, bucket.len),
        }
    }

    /// For [`DataParallel::backward`]: each parameter's leaf (by address)
    /// → its bucket, its offset there and its index; and each bucket's
    /// fill (late, with no buffer, when a parameter already holds a
    /// gradient).
    fn fills(&self) -> (Slots, Vec<Fill>) {
        let mut slot_of = HashMap::new();
        let mut fills = Vec::with_capacity(self.buckets.len());
        for (b, bucket) in self.buckets.iter().enumerate() {
            let mut late = false;
            for &(k, at) in &bucket.members {
                let (_, p) = &self.params[k];
                late |= p.grad().is_some();
                if let Origin::Leaf(leaf) = p.origin() {
                    slot_of.insert(Arc::as_ptr(leaf) as usize, (b, at, k));
                }
            }
            fills.push(Fill {
                values: if late { None } else { Some(self.buffer(b)) },
                missing: bucket.members.len(),
            });
        }
        (slot_of, fills)
    }

    /// What backward tells each parameter's final gradient: it is copied
    /// into its bucket, and a bucket's all-reduce starts when its last
    /// gradient is in. An error stops the filling and is kept for later.
    fn observer(&self, slot_of: Slots, state: Rc<RefCell<Overlap>>) -> FinalGradients {
        let params: Vec<Tensor> = self.params.iter().map(|(_, t)| t.clone()).collect();
        let comm = self.comm.clone();
        Rc::new(move |address, g| {
            let Some(&(b, at, k)) = slot_of.get(&address) else {
                return;
            };
            let st = &mut *state.borrow_mut();
            let fill = &mut st.fills[b];
            let (None, Some(values)) = (&st.error, &mut fill.values) else {
                return; // an error stopped the filling, or a late bucket
            };
            let g = Tensor::dense(params[k].shape().to_vec(), g.clone(), Origin::Constant);
            if let Err(e) = read_part(values, at, &g) {
                st.error = Some(e);
                return;
            }
            fill.missing -= 1;
            if fill.missing == 0 {
                let Some(values) = fill.values.take() else {
                    return;
                };
                match comm.all_reduce_sum_start(values) {
                    Ok(p) => st.started.push((b, p)),
                    Err(e) => st.error = Some(e),
                }
            }
        })
    }

    /// Waits for each bucket's sum; sets its parameters' gradients to
    /// their parts of the average, after every wait succeeded (all or
    /// nothing).
    fn write_back(&self, pending: Vec<(usize, PendingReduce)>) -> Result<(), Error> {
        let world = self.comm.world_size();
        let mut sums = Vec::with_capacity(pending.len());
        let mut failed = None;
        for (b, reduce) in pending {
            match reduce.wait() {
                Ok(sum) => sums.push((b, average(sum, world))),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut averaged = Vec::with_capacity(self.params.len());
        for (b, sum) in sums {
            for &(k, at) in &self.buckets[b].members {
                let p = &self.params[k].1;
                let part = at..at + p.numel();
                let g = match &sum {
                    Values::F32(v) => {
                        Tensor::from_host_on("DataParallel", &v[part], p.shape(), p.device())?
                    }
                    Values::F64(v) => {
                        Tensor::from_host_on("DataParallel", &v[part], p.shape(), p.device())?
                    }
                };
                averaged.push((
                    k,
                    if g.dtype() == p.dtype() {
                        g
                    } else {
                        g.to_dtype(p.dtype())?
                    },
                ));
            }
            self.pool.borrow_mut()[b] = Some(sum); // the next step's buffer
        }
        for (k, g) in averaged {
            self.params[k].1.set_grad(Some(&g))?;
        }
        Ok(())
    }
}

/// A bucket's sum over `world` ranks divided by `world`, in place.
fn average(mut sum: Values, world: usize) -> Values {
    match &mut sum {
        Values::F32(v) => v.iter_mut().for_each(|x| *x /= world as f32),
        Values::F64(v) => v.iter_mut().for_each(|x| *x /= world as f64),
    }
    sum
}

/// The type gradients of dtype `d` travel in: f32 as f32, the rest as f64.
fn wire_dtype(d: DType) -> DType {
    if d == DType::F32 {
        DType::F32
    } else {
        DType::F64
    }
}

/// `n` zeros of the type a gradient of dtype `d` travels in.
fn zeros(d: DType, n: usize) -> Values {
    match wire_dtype(d) {
        DType::F32 => Values::F32(vec![0.0; n]),
        _ => Values::F64(vec![0.0; n]),
    }
}

/// Gradient `g` copied into `into` from element `at` (f32 as it is, into
/// an f32 bucket; f64 as it is, and other types converted, into an f64
/// one); an error where an f32 bucket meets another type.
fn read_part(into: &mut Values, at: usize, g: &Tensor) -> Result<(), Error> {
    let n = g.numel();
    match into {
        Values::F32(v) => g.read_into(&mut v[at..at + n]),
        Values::F64(v) if g.dtype() == DType::F64 => g.read_into(&mut v[at..at + n]),
        Values::F64(v) => {
            v[at..at + n].copy_from_slice(&g.to_vec_f64()?);
            Ok(())
        }
    }
}

/// Elements `at..at + n` of `into` set to zero.
fn zero_part(into: &mut Values, at: usize, n: usize) {
    match into {
        Values::F32(v) => v[at..at + n].fill(0.0),
        Values::F64(v) => v[at..at + n].fill(0.0),
    }
}

/// Each parameter's leaf (by address) → its bucket, its offset in the
/// bucket's values, and its index among the parameters.
type Slots = HashMap<usize, (usize, usize, usize)>;

/// One bucket: its parameters, each with the offset of its first value in
/// the bucket's values, their number, and the parameters' dtype (one per
/// bucket).
struct Bucket {
    members: Vec<(usize, usize)>,
    len: usize,
    dtype: DType,
}

/// A bucket being filled during backward.
struct Fill {
    /// `None` once sent, and for a bucket reduced after backward instead
    /// (a parameter held a gradient).
    values: Option<Values>,
    /// Parameters whose final gradient has not arrived.
    missing: usize,
}

/// What the backward observer shares with [`DataParallel::backward`].
struct Overlap {
    fills: Vec<Fill>,
    /// The reductions started during backward, in the order they started.
    started: Vec<(usize, PendingReduce)>,
    error: Option<Error>,
}

/// Every rank's parameters against rank 0's: counts, names, shapes and
/// dtypes. Each rank finds its first difference with rank 0's; if any rank
/// found one, every rank returns an error (none waits for the others).
fn check_same_parameters(comm: &dyn Collective, params: &[(String, Tensor)]) -> Result<(), Error> {
    let own = signature(params);
    let mut len = [own.len() as f64];
    comm.broadcast(&mut len, 0)?;
    let mut first = vec![0.0; len[0] as usize];
    if comm.rank() == 0 {
        first.copy_from_slice(&own);
    }
    let differs = (own.len() != first.len()) as usize;
    // Ranks whose signature has rank 0's length take part in its broadcast
    // only if all do: agree on that first.
    let mut any = [differs as f64];
    comm.all_reduce_sum(&mut any)?;
    if any[0] > 0.0 {
        return Err(error(
            "DataParallel",
            format!(
                "rank {} has {} parameters; the ranks do not all have rank 0's count",
                comm.rank(),
                params.len()
            ),
        ));
    }
    comm.broadcast(&mut first, 0)?;
    let mismatch = first
        .chunks(ENTRY)
        .zip(own.chunks(ENTRY))
        .position(|(a, b)| a != b);
    let mut bad = [mismatch.is_some() as usize as f64];
    comm.all_reduce_sum(&mut bad)?;
    match mismatch {
        Some(k) => Err(error(
            "DataParallel",
            format!(
                "rank {}'s parameter {k} (`{}`, {:?} {:?}) differs from rank 0's",
                comm.rank(),
                params[k].0,
                params[k].1.shape(),
                params[k].1.dtype()
            ),
        )),
        None if bad[0] > 0.0 => Err(error(
            "DataParallel",
            format!(
                "{} rank(s) hold parameters that differ from rank 0's (see their errors)",
                bad[0]
            ),
        )),
        None => Ok(()),
    }
}

/// Values per parameter in a signature: a hash of the name, the dtype, the
/// rank and six dimensions (more are folded into the hash).
const ENTRY: usize = 9;

fn signature(params: &[(String, Tensor)]) -> Vec<f64> {
    let mut out = Vec::with_capacity(params.len() * ENTRY);
    for (name, t) in params {
        let shape = t.shape();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name
            .bytes()
            .chain(shape.iter().skip(6).flat_map(|d| d.to_le_bytes()))
        {
            h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
        }
        out.push((h >> 12) as f64); // 52 bits: exact in f64
        out.push(dtype_code(t.dtype()));
        out.push(shape.len() as f64);
        out.extend((0..6).map(|d| shape.get(d).map_or(-1.0, |&n| n as f64)));
    }
    out
}

fn dtype_code(d: DType) -> f64 {
    match d {
        DType::F32 => 0.0,
        DType::F64 => 1.0,
        DType::I32 => 2.0,
        DType::I64 => 3.0,
        DType::BF16 => 4.0,
        DType::F16 => 5.0,
    }
}

/// Rank 0's values copied into every rank's parameters, in place.
fn broadcast_values(comm: &dyn Collective, params: &[(String, Tensor)]) -> Result<(), Error> {
    if comm.world_size() == 1 {
        return Ok(());
    }
    let mut values = Vec::new();
    for (_, p) in params {
        values.extend(p.to_vec_f64()?);
    }
    comm.broadcast(&mut values, 0)?;
    let mut at = 0;
    let mut state = Vec::with_capacity(params.len());
    for (name, p) in params {
        let n = p.numel();
        state.push((
            name.clone(),
            Tensor::from_vec_f64(values[at..at + n].to_vec(), p.shape())?,
        ));
        at += n;
    }
    crate::nn::load_into(params, &state)
}

/// The buckets: parameters in reverse order, the first bucket up to
/// `first` bytes, the others up to `rest`; a new bucket where the dtype
/// changes (a bucket travels in one type).
fn buckets(params: &[(String, Tensor)], first: usize, rest: usize) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for k in (0..params.len()).rev() {
        let t = &params[k].1;
        let cap = if out.len() <= 1 { first } else { rest };
        match out.last_mut() {
            Some(b) if b.dtype == t.dtype() && (b.len + t.numel()) * t.dtype().size() <= cap => {
                b.members.push((k, b.len));
                b.len += t.numel();
            }
            _ => out.push(Bucket {
                members: vec![(k, 0)],
                len: t.numel(),
                dtype: t.dtype(),
            }),
        }
    }
    out
}
