//! Data-dependent indexing: `index_select` (rows by integer ids, the
//! embedding look-up) and `gather` (PyTorch's `gather` along a dimension),
//! with exact, deterministic gradients.
//!
//! An access `w[ids[t]; d]` is not affine in the indices, so these ops are
//! not index functions: each is a host stage (`crate::planner::host`) with
//! a hand-written node plan, the only backward written by hand in the
//! crate. The gradients are **segmented sums**:
//!
//! | op | forward | gradient of the data |
//! | --- | --- | --- |
//! | `index_select(dim, ids)` | `y[o; t; i] = x[o; ids[t]; i]` | `dx[o; v; i] = Σ_{t : ids[t] = v} dy[o; t; i]`: the positions sorted by id once (a stable counting sort), each run summed in position order |
//! | `gather(dim, idx)` | `y[o; j; i] = x[o; idx[o; j; i]; i]` | `dx[o; k; i] = Σ_{j : idx[o; j; i] = k} dy[o; j; i]`, each line `(o, i)` summed by one thread in position order |
//!
//! Every gradient element is summed by one thread in a fixed order: no
//! atomics, and the result is bitwise the same at any thread count (and
//! on a GPU, whose kernels, `DeviceForm::Gather` and
//! `DeviceForm::ScatterAdd`, sum in the same order). Ids out of range are
//! an error naming the op, the id and the size, raised by the CPU kernel
//! before it writes anything, or on a device before the op runs (from the
//! ids' range recorded when they came from the host, else read back):
//! nothing is recorded. The ids carry no gradient; a graph of gradients
//! (`create_graph`) and forward mode through these ops are refused with an
//! error (not yet supported).

use super::apply_host;
use crate::kernel::host::{DeviceForm, Lines};
use crate::planner::host::{
    host_stage, single_stage_program, HostIn, HostKernel, HostOp, HostOut, Workers,
};
use crate::planner::{NodePlan, Program, Source};
use crate::tensor::{Dim, Tensor};
use crate::Error;
use std::sync::Arc;

/// Runs `f(first, last)` over chunks of `0..n` on the backend's workers,
/// each chunk about 32k elements of `work` (all on this thread when
/// small).
fn parallel_chunks(workers: &dyn Workers, n: usize, work: usize, f: impl Fn(usize, usize) + Sync) {
    let per_item = work.div_ceil(n.max(1)).max(1);
    workers.parallel_for(n, (1usize << 15).div_ceil(per_item), &f);
}

/// A raw output pointer shared by threads that write disjoint elements.
struct Shared<T>(*mut T);
// SAFETY: every user writes a disjoint set of elements (stated where used).
unsafe impl<T> Sync for Shared<T> {}
unsafe impl<T> Send for Shared<T> {}

impl<T> Shared<T> {
    /// Element `k` (a method, so closures capture the whole wrapper).
    fn at(&self, k: usize) -> *mut T {
        self.0.wrapping_add(k)
    }
}

fn id_error(op: &str, id: i64, size: usize, at: usize) -> Error {
    Error::shape(
        op,
        format!("index {id} at position {at} is out of range for a dimension of size {size}"),
    )
}

/// Checks every id of `ids` against `size` (the op's first error).
fn check_ids(op: &str, ids: &HostIn, size: usize) -> Result<(), Error> {
    for k in 0..ids.len() {
        let id = ids
            .index(k)
            .ok_or_else(|| crate::dtype::not_computable(op, crate::DType::F32))?;
        if id < 0 || id as usize >= size {
            return Err(id_error(op, id, size, k));
        }
    }
    Ok(())
}

/// The least and greatest of the integer values `ids` views, when they
/// were recorded as they came from the host (no transfer).
pub(super) fn known_range(ids: &Tensor) -> Option<(i64, i64)> {
    ids.storage_and_origin().0.known_range()
}

/// Checks the ids of an op running on a device, whose kernels take them
/// as in range: against the range recorded when they came from the host
/// (no transfer), else by reading them back (one wait for the device).
/// The same error as the CPU kernel's.
fn check_ids_on_device(op: &str, ids: &Tensor, size: usize) -> Result<(), Error> {
    if ids.device() == crate::Device::Cpu {
        return Ok(());
    }
    if let Some((lo, hi)) = known_range(ids) {
        if lo >= 0 && (hi as u64) < size as u64 {
            return Ok(());
        }
    }
    for (k, id) in ids.to_vec_i64()?.into_iter().enumerate() {
        if id < 0 || id as u64 >= size as u64 {
            return Err(id_error(op, id, size, k));
        }
    }
    Ok(())
}

/// Floats of either width through one generic body.
macro_rules! with_floats {
    ($op:expr, $data:expr, $out:expr, |$x:ident, $o:ident| $body:expr) => {
        match ($data, $out) {
            (HostIn::F32($x), HostOut::F32($o)) => $body,
            (HostIn::F64($x), HostOut::F64($o)) => $body,
            _ => Err(crate::dtype::not_computable($op, crate::DType::I64)),
        }
    };
}

/// `y[o; t; i] = x[o; ids[t]; i]`.
#[derive(Debug)]
struct SelectRows(Lines, &'static str);

impl HostKernel for SelectRows {
    fn name(&self) -> &str {
        "index_select"
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::Gather {
            lines: self.0,
            along: false,
        })
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error> {
        let Lines {
            outer,
            size,
            inner,
            count,
        } = self.0;
        let op = self.1;
        let ids = &inputs[1];
        check_ids(op, ids, size)?;
        with_floats!(op, inputs[0], out, |x, y| {
            let rows = outer * count;
            let y = Shared(y.as_mut_ptr());
            parallel_chunks(workers, rows, rows * inner, |lo, hi| {
                for r in lo..hi {
                    let (o, t) = (r / count, r % count);
                    let v = ids.index(t).unwrap_or(0) as usize;
                    let src = &x[(o * size + v) * inner..][..inner];
                    // SAFETY: row r of y belongs to this chunk alone.
                    let dst = unsafe { std::slice::from_raw_parts_mut(y.at(r * inner), inner) };
                    dst.copy_from_slice(src);
                }
            });
            Ok(())
        })
    }
}

/// `dx[o; v; i] = Σ_{t : ids[t] = v} dy[o; t; i]`, by runs of the ids
/// sorted once.
#[derive(Debug)]
struct SegmentSum(Lines, &'static str);

impl HostKernel for SegmentSum {
    fn name(&self) -> &str {
        "index_select_backward"
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::ScatterAdd {
            lines: self.0,
            along: false,
        })
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error> {
        let Lines {
            outer,
            size,
            inner,
            count,
        } = self.0;
        let op = self.1;
        let ids = &inputs[0];
        check_ids(op, ids, size)?;
        // A stable counting sort: `order[start[v]..start[v + 1]]` are the
        // positions with id v, in increasing order.
        let mut start = vec![0usize; size + 1];
        for t in 0..count {
            start[ids.index(t).unwrap_or(0) as usize + 1] += 1;
        }
        for v in 0..size {
            start[v + 1] += start[v];
        }
        let mut next = start.clone();
        let mut order = vec![0usize; count];
        for t in 0..count {
            let v = ids.index(t).unwrap_or(0) as usize;
            order[next[v]] = t;
            next[v] += 1;
        }
        with_floats!(op, inputs[1], out, |dy, dx| {
            let rows = outer * size;
            let dx = Shared(dx.as_mut_ptr());
            parallel_chunks(
                workers,
                rows,
                outer * count * inner + rows * inner,
                |lo, hi| {
                    for r in lo..hi {
                        let (o, v) = (r / size, r % size);
                        // SAFETY: row r of dx belongs to this chunk alone.
                        let acc =
                            unsafe { std::slice::from_raw_parts_mut(dx.at(r * inner), inner) };
                        acc.fill(Default::default());
                        for &t in &order[start[v]..start[v + 1]] {
                            let src = &dy[(o * count + t) * inner..][..inner];
                            for (a, &s) in acc.iter_mut().zip(src) {
                                *a += s;
                            }
                        }
                    }
                },
            );
            Ok(())
        })
    }
}

/// `y[o; j; i] = x[o; idx[o; j; i]; i]` (`idx` of shape `[outer, count,
/// inner]`).
#[derive(Debug)]
struct GatherAlong(Lines, &'static str);

impl HostKernel for GatherAlong {
    fn name(&self) -> &str {
        "gather"
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::Gather {
            lines: self.0,
            along: true,
        })
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, _: &dyn Workers) -> Result<(), Error> {
        let Lines {
            outer,
            size,
            inner,
            count,
        } = self.0;
        let op = self.1;
        let idx = &inputs[1];
        check_ids(op, idx, size)?;
        with_floats!(op, inputs[0], out, |x, y| {
            for o in 0..outer {
                for j in 0..count {
                    for i in 0..inner {
                        let p = (o * count + j) * inner + i;
                        let k = idx.index(p).unwrap_or(0) as usize;
                        y[p] = x[(o * size + k) * inner + i];
                    }
                }
            }
            Ok(())
        })
    }
}

/// `dx[o; k; i] = Σ_{j : idx[o; j; i] = k} dy[o; j; i]`: each line `(o, i)`
/// by one thread, in increasing `j`.
#[derive(Debug)]
struct ScatterSum(Lines, &'static str);

impl HostKernel for ScatterSum {
    fn name(&self) -> &str {
        "gather_backward"
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::ScatterAdd {
            lines: self.0,
            along: true,
        })
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error> {
        let Lines {
            outer,
            size,
            inner,
            count,
        } = self.0;
        let op = self.1;
        let idx = &inputs[0];
        check_ids(op, idx, size)?;
        with_floats!(op, inputs[1], out, |dy, dx| {
            dx.fill(Default::default());
            let lines = outer * inner;
            let dx = Shared(dx.as_mut_ptr());
            parallel_chunks(workers, lines, outer * count * inner, |lo, hi| {
                for l in lo..hi {
                    let (o, i) = (l / inner, l % inner);
                    for j in 0..count {
                        let p = (o * count + j) * inner + i;
                        let k = idx.index(p).unwrap_or(0) as usize;
                        // SAFETY: line (o, i) of dx belongs to this chunk alone.
                        unsafe { *dx.at((o * size + k) * inner + i) += dy[p] };
                    }
                }
            });
            Ok(())
        })
    }
}

/// An indexing op as a host op: its kernels and shapes.
struct Indexing {
    op: &'static str,
    x_shape: Vec<usize>,
    idx_shape: Vec<usize>,
    out_shape: Vec<usize>,
    forward: Arc<dyn HostKernel>,
    backward: Arc<dyn HostKernel>,
}

impl Indexing {
    fn program(&self) -> Result<Program, Error> {
        let args: [(&str, &[usize]); 2] = [("x", &self.x_shape), ("ids", &self.idx_shape)];
        let stage = host_stage(
            self.op,
            &args,
            vec![Source::Input(0), Source::Input(1)],
            &self.out_shape,
            self.forward.clone(),
        )?;
        Ok(single_stage_program(&args, stage))
    }
}

impl HostOp for Indexing {
    fn forward(&self) -> Result<Program, Error> {
        self.program()
    }

    fn node_plan(&self, wrt: &[usize]) -> Result<NodePlan, Error> {
        if wrt != [0] {
            return Err(Error::Invalid {
                function: self.op.into(),
                message: "the indices take no gradient (they are integers); only the data does"
                    .into(),
            });
        }
        let forward = self.program()?;
        // Inputs: x, ids, the output's gradient, the output.
        let name = format!("d{}", self.op);
        let inputs: [(&str, &[usize]); 4] = [
            ("x", &self.x_shape),
            ("ids", &self.idx_shape),
            (&name, &self.out_shape),
            (self.op, &self.out_shape),
        ];
        let stage = host_stage(
            self.backward.name(),
            &[("ids", &self.idx_shape), (&name, &self.out_shape)],
            vec![Source::Input(1), Source::Input(2)],
            &self.x_shape,
            self.backward.clone(),
        )?;
        Ok(NodePlan {
            forward,
            backward: single_stage_program(&inputs, stage),
            wrt: vec![0],
            derivatives: Vec::new(),
            forward_is_plain: false,
        })
    }
}

fn check_index_tensor(op: &str, x: &Tensor, idx: &Tensor) -> Result<(), Error> {
    if idx.dtype().is_float() {
        return Err(Error::DType {
            op: op.into(),
            message: format!(
                "the indices are {:?} {:?}; they must be an integer tensor (I64 or I32)",
                idx.dtype(),
                idx.shape()
            ),
        });
    }
    if !x.dtype().is_float() {
        return Err(crate::dtype::not_computable(op, x.dtype()));
    }
    Ok(())
}

fn check_dim(op: &str, x: &Tensor, dim: usize) -> Result<(), Error> {
    if dim >= x.rank() {
        return Err(Error::shape(
            op,
            format!(
                "input of shape {:?}: dimension {dim} does not exist (rank {})",
                x.shape(),
                x.rank()
            ),
        ));
    }
    Ok(())
}

impl Tensor {
    /// The entries at `ids` along `dim` (PyTorch's `index_select`): the
    /// result has `ids.len()` entries along `dim`, entry `t` being entry
    /// `ids[t]` of `self`. `ids` is a 1-D integer tensor; repeated ids are
    /// fine. The gradient is a deterministic segmented sum (module
    /// documentation).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let w = Tensor::from_vec_f64(vec![1., 2., 3., 4., 5., 6.], &[3, 2])?.requires_grad();
    /// let ids = Tensor::from_vec_i64(vec![2, 0, 2], &[3])?;
    /// let rows = w.index_select(0, &ids)?;
    /// assert_eq!(rows.to_vec_f64()?, vec![5., 6., 1., 2., 5., 6.]);
    /// rows.sum()?.backward()?;
    /// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![1., 1., 0., 0., 2., 2.]);
    /// let e = w.index_select(0, &Tensor::from_vec_i64(vec![3], &[1])?).unwrap_err().to_string();
    /// assert!(e.contains("index 3") && e.contains("size 3"), "{e}");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn index_select(&self, dim: impl Dim, ids: &Tensor) -> Result<Tensor, Error> {
        let dim = dim.resolve("index_select", self.shape())?;
        if ids.rank() != 1 {
            return Err(Error::shape(
                "index_select",
                format!(
                    "the ids have shape {:?}; index_select takes a 1-D index tensor",
                    ids.shape()
                ),
            ));
        }
        self.select("index_select", dim, ids)
    }

    /// Rows of the table `self` `[num, …]` at `ids` of any shape `S`
    /// (PyTorch's `F.embedding`): the result has shape `S + […]`. As
    /// [`Tensor::index_select`] along dimension 0, without reshaping the
    /// ids or the result.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let table = Tensor::from_vec(vec![0., 1., 10., 11., 20., 21.], &[3, 2])?;
    /// let ids = Tensor::from_vec_i64(vec![2, 2, 0, 1], &[2, 2])?;
    /// let h = table.embedding(&ids)?;
    /// assert_eq!(h.shape(), &[2, 2, 2]);
    /// assert_eq!(h.to_vec()?, vec![20., 21., 20., 21., 0., 1., 10., 11.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor, Error> {
        self.select("embedding", 0, ids)
    }

    /// The entries at `ids` (any shape `S`) along `dim`: `shape[..dim] + S +
    /// shape[dim + 1..]`.
    fn select(&self, op: &'static str, dim: usize, ids: &Tensor) -> Result<Tensor, Error> {
        check_dim(op, self, dim)?;
        check_index_tensor(op, self, ids)?;
        let (x, ids) = (self.contiguous()?, ids.contiguous()?);
        let lines = Lines::of(x.shape(), dim, ids.numel());
        check_ids_on_device(op, &ids, lines.size)?;
        let out_shape = [&x.shape()[..dim], ids.shape(), &x.shape()[dim + 1..]].concat();
        let host = || -> Arc<dyn HostOp> {
            Arc::new(Indexing {
                op,
                x_shape: x.shape().to_vec(),
                idx_shape: ids.shape().to_vec(),
                out_shape: out_shape.clone(),
                forward: Arc::new(SelectRows(lines, op)),
                backward: Arc::new(SegmentSum(lines, op)),
            })
        };
        apply_host(
            op,
            &format!("dim {dim}"),
            host,
            &[("x", &x), ("ids", &ids)],
            x.dtype(),
        )
    }

    /// Values along `dim` at the positions `index` gives (PyTorch's
    /// `gather`): for `dim = 1`, `y[a; j; b] = x[a; index[a; j; b]; b]`.
    /// `index` is an integer tensor of `self`'s rank, no larger than `self`
    /// in the other dimensions; the result has `index`'s shape. The
    /// gradient is a deterministic scatter-sum (module documentation).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec_f64(vec![1., 2., 3., 4.], &[2, 2])?.requires_grad();
    /// let idx = Tensor::from_vec_i64(vec![1, 1, 0, 1], &[2, 2])?;
    /// let y = x.gather(1, &idx)?;
    /// assert_eq!(y.to_vec_f64()?, vec![2., 2., 3., 4.]);
    /// y.sum()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec_f64()?, vec![0., 2., 1., 1.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn gather(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor, Error> {
        let op = "gather";
        let dim = dim.resolve(op, self.shape())?;
        check_index_tensor(op, self, index)?;
        let (xs, is) = (self.shape(), index.shape());
        let fits = is.len() == xs.len()
            && is
                .iter()
                .zip(xs)
                .enumerate()
                .all(|(d, (&i, &x))| d == dim || i <= x);
        if !fits {
            return Err(Error::shape(
                op,
                format!("input {xs:?} and index {is:?}: the index must have the input's rank and be no larger in dimensions other than {dim}"),
            ));
        }
        // The input cut to the index's extent in the other dimensions (a
        // view, copied below), so both share `outer` and `inner`.
        let mut x = self.clone();
        for (d, &n) in is.iter().enumerate() {
            if d != dim && n < x.shape()[d] {
                x = x.narrow(d, 0, n)?;
            }
        }
        let (x, index) = (x.contiguous()?, index.contiguous()?);
        let lines = Lines::of(x.shape(), dim, is[dim]);
        check_ids_on_device(op, &index, lines.size)?;
        let host = || -> Arc<dyn HostOp> {
            Arc::new(Indexing {
                op,
                x_shape: x.shape().to_vec(),
                idx_shape: index.shape().to_vec(),
                out_shape: index.shape().to_vec(),
                forward: Arc::new(GatherAlong(lines, op)),
                backward: Arc::new(ScatterSum(lines, op)),
            })
        };
        apply_host(
            op,
            &format!("dim {dim}"),
            host,
            &[("x", &x), ("ids", &index)],
            x.dtype(),
        )
    }
}
