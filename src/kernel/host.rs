//! The host-kernel interface: data-dependent stages (gathering rows by
//! integer ids, their deterministic segmented-sum gradients, conversions
//! between element types, a recomputed block) that affine index functions
//! cannot express, written as Rust code over typed slices.
//!
//! Owns [`HostKernel`] (one host stage's computation), its typed inputs
//! and output ([`HostIn`], [`HostOut`]) and [`Workers`] (the threads a
//! backend lends a host kernel). The operations themselves live in
//! `crate::ops`; the planner wraps a kernel as a stage
//! (`crate::planner::host`); the CPU backend runs it, a device backend its
//! [`DeviceForm`]. Must not know about storages, tensors or the tape.

use super::backend::{Operand, OperandMut};
use crate::dtype::Element;
use crate::{DType, Error};
use std::fmt::Debug;

/// `$body` over the slice `$v` of whichever element type `$value` (a
/// [`HostIn`], [`HostOut`] or their raw form, `$kind`) holds.
macro_rules! each_type {
    ($value:expr, $kind:ident, $v:ident => $body:expr) => {
        match $value {
            $kind::F32($v) => $body,
            $kind::F64($v) => $body,
            $kind::I32($v) => $body,
            $kind::I64($v) => $body,
            $kind::BF16($v) => $body,
            $kind::F16($v) => $body,
        }
    };
}

/// `$value` (of `$from`) as the `$to` of the same element type holding
/// `$body` of its slice `$v`.
macro_rules! map_type {
    ($value:expr, $from:ident => $to:ident, $v:ident => $body:expr) => {
        match $value {
            $from::F32($v) => $to::F32($body),
            $from::F64($v) => $to::F64($body),
            $from::I32($v) => $to::I32($body),
            $from::I64($v) => $to::I64($body),
            $from::BF16($v) => $to::BF16($body),
            $from::F16($v) => $to::F16($body),
        }
    };
}

/// A host kernel's input: a slice of one of the tensor element types.
#[derive(Clone, Copy, Debug)]
pub enum HostIn<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    BF16(&'a [half::bf16]),
    F16(&'a [half::f16]),
}

impl HostIn<'_> {
    /// Element `k` of an integer input as `i64` (`None` for floats or out
    /// of range).
    pub fn index(&self, k: usize) -> Option<i64> {
        match self {
            HostIn::I32(v) => v.get(k).map(|&x| i64::from(x)),
            HostIn::I64(v) => v.get(k).copied(),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        each_type!(self, HostIn, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `start..end` (within the slice).
    pub fn range(self, start: usize, end: usize) -> Self {
        map_type!(self, HostIn => HostIn, v => &v[start..end])
    }

    /// [`HostIn::cast_into`] in chunks over `workers` (on this thread
    /// when short): a conversion streams memory, and the half-precision
    /// ops run two or three of them each.
    pub fn cast_into_on(self, out: HostOut<'_>, workers: &dyn Workers) {
        self.in_chunks_on(out, workers, &|x, o| x.cast_into(o));
    }

    /// `f` over matching chunks of the input and `out` (as many elements
    /// as both hold), in parallel over `workers` (on this thread when
    /// short): for element-wise passes that stream memory.
    fn in_chunks_on(
        self,
        out: HostOut<'_>,
        workers: &dyn Workers,
        f: &(dyn Fn(HostIn<'_>, HostOut<'_>) + Sync),
    ) {
        let n = self.len().min(out.len());
        const CHUNK: usize = 1 << 15;
        if n < 2 * CHUNK {
            return f(self, out);
        }
        let out = RawOut::of(out);
        workers.parallel_for(n, CHUNK, &|start, end| {
            // SAFETY: the chunks are disjoint ranges of `out`'s first `n`
            // elements, and `out` is borrowed until `parallel_for` returns.
            let chunk = unsafe { out.range(start, end) };
            f(self.range(start, end), chunk);
        });
    }

    /// An f32 input's values rounded to the nearest values of the half
    /// type `half` (as converting to it and back does), into an f32
    /// `out`, over `workers`; any other pair of types is an error.
    pub fn round_to_half_on(
        self,
        half: DType,
        out: HostOut<'_>,
        workers: &dyn Workers,
    ) -> Result<(), Error> {
        use half::slice::HalfFloatSliceExt;
        let (HostIn::F32(_), HostOut::F32(_), true) = (self, &out, half.is_half()) else {
            return Err(Error::Invalid {
                function: "round_to_half".into(),
                message: format!("internal: rounds f32 values to {half:?} values in f32 only"),
            });
        };
        self.in_chunks_on(out, workers, &|x, o| {
            let (HostIn::F32(x), HostOut::F32(o)) = (x, o) else {
                return;
            };
            if half == DType::BF16 {
                return super::bf16_slices::round_to_bf16(x, o);
            }
            // f16 through a short buffer, both ways with F16C.
            let mut buffer = [half::f16::ZERO; 1024];
            for (x, o) in x.chunks(1024).zip(o.chunks_mut(1024)) {
                let b = &mut buffer[..x.len()];
                b.convert_from_f32_slice(x);
                b.convert_to_f32_slice(o);
            }
        });
        Ok(())
    }

    /// Converts the elements into `out`, as many as both hold, as
    /// [`crate::DType`]'s conversions do (Rust's `as` between f32, f64 and
    /// the integers; the half types as PyTorch converts them).
    pub fn cast_into(self, out: HostOut<'_>) {
        use half::slice::HalfFloatSliceExt;
        // The conversions of every half-precision op, over slices: the
        // `half` crate's use the CPU's conversion instructions (F16C)
        // where it has them, bf16's AVX2 (`bf16_slices`). Same values as
        // one at a time.
        let n = self.len();
        match (self, out) {
            (HostIn::F32(x), HostOut::F16(o)) if o.len() == n => o.convert_from_f32_slice(x),
            (HostIn::F32(x), HostOut::BF16(o)) if o.len() == n => {
                super::bf16_slices::f32_to_bf16(x, o)
            }
            (HostIn::F16(x), HostOut::F32(o)) if o.len() == n => x.convert_to_f32_slice(o),
            (HostIn::BF16(x), HostOut::F32(o)) if o.len() == n => {
                super::bf16_slices::bf16_to_f32(x, o)
            }
            (input, out) => input.cast_each(out),
        }
    }

    /// [`HostIn::cast_into`] one element at a time.
    fn cast_each(self, out: HostOut<'_>) {
        fn each<S: Element, D: Element>(x: &[S], out: &mut [D]) {
            for (o, &x) in out.iter_mut().zip(x) {
                *o = crate::dtype::cast::<S, D>(x);
            }
        }
        each_type!(self, HostIn, x => each_type!(out, HostOut, o => each(x, o)))
    }
}

/// A host kernel's output: the stage's buffer.
#[derive(Debug)]
pub enum HostOut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    BF16(&'a mut [half::bf16]),
    F16(&'a mut [half::f16]),
}

/// A [`HostOut`]'s start and type, shared by threads writing disjoint
/// ranges of it ([`HostIn::cast_into_on`]).
#[derive(Clone, Copy)]
enum RawOut {
    F32(*mut f32),
    F64(*mut f64),
    I32(*mut i32),
    I64(*mut i64),
    BF16(*mut half::bf16),
    F16(*mut half::f16),
}

// SAFETY: shared only where every thread writes its own range (see
// `HostIn::cast_into_on`).
unsafe impl Sync for RawOut {}

impl RawOut {
    fn of(out: HostOut<'_>) -> RawOut {
        map_type!(out, HostOut => RawOut, o => o.as_mut_ptr())
    }

    /// Elements `start..end` as an output.
    ///
    /// # Safety
    /// They lie in the slice this was made from, which is still borrowed,
    /// and no other thread touches them meanwhile.
    unsafe fn range<'a>(self, start: usize, end: usize) -> HostOut<'a> {
        let n = end - start;
        // SAFETY: as the caller promises.
        unsafe {
            map_type!(self, RawOut => HostOut, p => std::slice::from_raw_parts_mut(p.add(start), n))
        }
    }
}

impl HostOut<'_> {
    /// Elements held.
    pub fn len(&self) -> usize {
        each_type!(self, HostOut, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `values` converted to the element type (as `as` converts),
    /// as many as both hold.
    pub fn write_f64(self, values: &[f64]) {
        fn convert<T: Element>(out: &mut [T], values: &[f64]) {
            for (o, &v) in out.iter_mut().zip(values) {
                *o = T::from_f64(v);
            }
        }
        each_type!(self, HostOut, o => convert(o, values))
    }
}

/// Threads a backend lends a host kernel to split its work over.
pub trait Workers: Sync {
    /// Runs `f(start, end)` over chunks of `0..n` of at least `min_chunk`
    /// items (every index in exactly one chunk) and returns when all have
    /// run.
    fn parallel_for(&self, n: usize, min_chunk: usize, f: &(dyn Fn(usize, usize) + Sync));
}

/// Data seen as `[outer, size, inner]` around an indexed dimension of
/// `size`, with `count` indices along it (the layout of the indexing ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lines {
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
    pub count: usize,
}

impl Lines {
    /// `shape` around dimension `dim`, with `count` indices along it.
    pub fn of(shape: &[usize], dim: usize, count: usize) -> Lines {
        Lines {
            outer: shape[..dim].iter().product(),
            size: shape[dim],
            inner: shape[dim + 1..].iter().product(),
            count,
        }
    }

    /// Elements of the data: `outer · size · inner`.
    pub fn data_len(&self) -> usize {
        self.outer * self.size * self.inner
    }

    /// Elements picked (a gather's output): `outer · count · inner`.
    pub fn picked_len(&self) -> usize {
        self.outer * self.count * self.inner
    }

    /// Ids: one per picked element (`along`), else one per position.
    pub fn ids_len(&self, along: bool) -> usize {
        if along {
            self.picked_len()
        } else {
            self.count
        }
    }
}

/// What a host kernel computes, when a device backend has a kernel of its
/// own for it (the CPU runs [`HostKernel::run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceForm {
    /// Its one input converted element-wise to the output's type
    /// (`Backend::cast`).
    Cast,
    /// Its one f32 input rounded element-wise to the nearest values of
    /// the half type, into an f32 output (a conversion to it and back).
    RoundToHalf(DType),
    /// Inputs `(x, ids)` over `lines`: `y[o; t; i] = x[o; ids[t]; i]`
    /// (`ids` of `count` elements), or with `along`,
    /// `y[o; j; i] = x[o; ids[o; j; i]; i]` (`ids` of the output's shape).
    /// The ids are in range (checked before).
    Gather { lines: Lines, along: bool },
    /// Inputs `(ids, dy)`: the gradient of [`DeviceForm::Gather`],
    /// `dx[o; v; i] = Σ dy[o; t; i]` over the positions `t` whose id is
    /// `v`, each line `(o, i)` summed by one thread in increasing `t`:
    /// deterministic, no atomics.
    ScatterAdd { lines: Lines, along: bool },
    /// A stage that computes with tensors on any device itself (a
    /// recomputed block): the backend hands it the operands where they
    /// live ([`HostKernel::run_on`]).
    Block,
}

/// One host stage's computation: `out` from `inputs` (in the order of the
/// stage's sources), every element of `out` written.
pub trait HostKernel: Send + Sync + Debug {
    /// The kernel's name (errors, `explain`).
    fn name(&self) -> &str;
    /// Runs the kernel; `workers` may split the work.
    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error>;
    /// The output's element type when it is not the op's (a conversion's
    /// forward or backward); `None`: the op's.
    fn out_dtype(&self) -> Option<DType> {
        None
    }
    /// What it computes, for a device backend (`None`: host code only).
    fn device_form(&self) -> Option<DeviceForm> {
        None
    }
    /// For [`DeviceForm::Block`]: runs the stage over `inputs` and `out`
    /// in the memory of their device (every element of `out` written).
    fn run_on(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        let _ = (inputs, out);
        Err(Error::Device {
            device: "any".into(),
            message: format!("`{}` runs on the host only", self.name()),
        })
    }
}
