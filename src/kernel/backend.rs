//! The interface every backend implements, and the operands it runs on.
//!
//! Owns [`Backend`] (compile a planned stage for one device; fill, copy
//! and add into buffers there), [`Executable`] (a compiled stage),
//! [`Target`] (what the planner plans loop nests for) and the operands
//! ([`Operand`], [`OperandMut`]): `len` elements of a dtype in a buffer of
//! some device. The runtime (`crate::runtime`) reaches every backend
//! through these alone; the Cranelift CPU backend (`crate::cpu`) and the
//! GPU backend (`crate::gpu`) implement them and import neither each
//! other nor the planner. Must not plan, compile or run anything itself.
//!
//! **Host views are checked.** An operand of device memory has an address
//! the host cannot dereference: [`Operand::host_slice`] on it is an
//! [`Error::Device`] naming the device, never an empty or dangling slice.
//! Nothing in this interface is specific to one element type: operands
//! carry their [`DType`], and the slices they give are of any
//! [`Element`] type.
//!
//! ```
//! use tenjin::kernel::backend::Operand;
//! let x = [1.0f32, 2.0, 3.0];
//! let op = Operand::host(&x[..]);
//! assert_eq!(op.range(1, 2)?.host_slice::<f32>()?, &[2.0, 3.0]);
//! assert!(op.host_slice::<f64>().is_err()); // not its element type
//! # Ok::<(), tenjin::Error>(())
//! ```

use super::host::{HostIn, HostOut};
use super::route::Route;
use super::strided::Strided;
use crate::alloc::{Buffer, Device};
use crate::dtype::{DType, Element};
use crate::Error;
use std::marker::PhantomData;

/// What the planner plans loop nests for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Host cores: the outermost loop split across threads, f32 vector
    /// loops of [`super::LANES`] lanes, sums interchanged so inner loops
    /// read contiguous memory.
    Cpu,
    /// NVIDIA GPUs: one thread per output element, loops in the
    /// interpreter's order.
    Gpu,
}

/// The error for a host view of device memory.
fn no_host_view(device: Device) -> Error {
    Error::Device {
        device: device.to_string(),
        message: "device memory has no host view: it is read and written through its backend"
            .into(),
    }
}

/// Where an operand's elements are: the address of the first (in its
/// device's address space), how many, of which type, on which device.
#[derive(Clone, Copy, Debug)]
struct Span {
    ptr: *mut u8,
    len: usize,
    dtype: DType,
    device: Device,
}

impl Span {
    /// The first `len` elements of `dtype` of a block of `bytes` bytes at
    /// `ptr` on `device`.
    fn of_block(
        ptr: *mut u8,
        bytes: usize,
        device: Device,
        dtype: DType,
        len: usize,
    ) -> Result<Span, Error> {
        match len.checked_mul(dtype.size()) {
            Some(b) if b <= bytes => Ok(Span {
                ptr,
                len,
                dtype,
                device,
            }),
            _ => Err(Error::shape(
                "operand",
                format!("{len} {dtype:?} elements do not fit a block of {bytes} bytes on {device}"),
            )),
        }
    }

    /// The elements of a host slice.
    fn host<T: Element>(ptr: *const T, len: usize) -> Span {
        Span {
            ptr: ptr as *mut u8,
            len,
            dtype: T::DTYPE,
            device: Device::Cpu,
        }
    }

    /// Elements `start..start + n`.
    fn range(self, start: usize, n: usize) -> Result<Span, Error> {
        match start.checked_add(n) {
            Some(end) if end <= self.len => Ok(Span {
                ptr: self.ptr.wrapping_add(start * self.dtype.size()),
                len: n,
                ..self
            }),
            _ => Err(Error::shape(
                "operand",
                format!(
                    "elements {start}..{start}+{n} of an operand of {}",
                    self.len
                ),
            )),
        }
    }

    /// The first element as a host `T`: an error for device memory or
    /// another element type.
    fn host_ptr<T: Element>(self) -> Result<*mut T, Error> {
        if self.device != Device::Cpu {
            return Err(no_host_view(self.device));
        }
        if T::DTYPE != self.dtype {
            return Err(Error::DType {
                op: "operand".into(),
                message: format!("{:?} elements viewed as {:?}", self.dtype, T::DTYPE),
            });
        }
        Ok(self.ptr.cast::<T>())
    }
}

/// The accessors both operand types share.
macro_rules! span_accessors {
    () => {
        pub fn len(&self) -> usize {
            self.span.len
        }

        pub fn is_empty(&self) -> bool {
            self.span.len == 0
        }

        pub fn dtype(&self) -> DType {
            self.span.dtype
        }

        pub fn device(&self) -> Device {
            self.span.device
        }

        /// The address of the first element in the device's address
        /// space (what a device kernel is launched with; never
        /// dereferenced here).
        pub fn address(&self) -> u64 {
            self.span.ptr as u64
        }
    };
}

/// `len` elements of `dtype` in memory of `device`, read by a kernel.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    span: Span,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> Operand<'a> {
    /// The first `len` elements of `dtype` in `buffer`.
    pub fn of_buffer(buffer: &'a Buffer, dtype: DType, len: usize) -> Result<Operand<'a>, Error> {
        let ptr = buffer.as_ptr() as *mut u8;
        Ok(Operand {
            span: Span::of_block(ptr, buffer.len_bytes(), buffer.device(), dtype, len)?,
            _borrow: PhantomData,
        })
    }

    /// A host slice.
    pub fn host<T: Element>(data: &'a [T]) -> Operand<'a> {
        Operand {
            span: Span::host(data.as_ptr(), data.len()),
            _borrow: PhantomData,
        }
    }

    span_accessors!();

    /// The elements as a host slice: an error for device memory or
    /// another element type.
    pub fn host_slice<T: Element>(&self) -> Result<&'a [T], Error> {
        let ptr = self.span.host_ptr::<T>()?;
        // SAFETY: host memory borrowed for 'a, holding `len` initialised
        // elements of T (checked when made), aligned (allocator blocks are
        // 64-byte aligned; host slices are typed).
        Ok(unsafe { std::slice::from_raw_parts(ptr, self.span.len) })
    }

    /// The elements' bytes on the host (a copy's source; an error for
    /// device memory).
    pub fn host_bytes(&self) -> Result<&'a [u8], Error> {
        if self.span.device != Device::Cpu {
            return Err(no_host_view(self.span.device));
        }
        // SAFETY: host memory borrowed for 'a holding `len` initialised
        // elements; every element type is plain bytes.
        Ok(unsafe {
            std::slice::from_raw_parts(self.span.ptr, self.span.len * self.span.dtype.size())
        })
    }

    /// The host slice behind the operand, typed by its dtype (a host
    /// kernel's input; an error for device memory).
    pub fn host_in(self) -> Result<HostIn<'a>, Error> {
        Ok(match self.span.dtype {
            DType::F32 => HostIn::F32(self.host_slice()?),
            DType::F64 => HostIn::F64(self.host_slice()?),
            DType::I32 => HostIn::I32(self.host_slice()?),
            DType::I64 => HostIn::I64(self.host_slice()?),
            DType::BF16 => HostIn::BF16(self.host_slice()?),
            DType::F16 => HostIn::F16(self.host_slice()?),
        })
    }

    /// Elements `start..start + n`.
    pub fn range(&self, start: usize, n: usize) -> Result<Operand<'a>, Error> {
        Ok(Operand {
            span: self.span.range(start, n)?,
            _borrow: PhantomData,
        })
    }
}

/// `len` elements of `dtype` in memory of `device`, written by a kernel.
#[derive(Debug)]
pub struct OperandMut<'a> {
    span: Span,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> OperandMut<'a> {
    /// The first `len` elements of `dtype` in `buffer`.
    pub fn of_buffer(
        buffer: &'a mut Buffer,
        dtype: DType,
        len: usize,
    ) -> Result<OperandMut<'a>, Error> {
        let (bytes, device) = (buffer.len_bytes(), buffer.device());
        Ok(OperandMut {
            span: Span::of_block(buffer.as_mut_ptr(), bytes, device, dtype, len)?,
            _borrow: PhantomData,
        })
    }

    /// A host slice.
    pub fn host<T: Element>(data: &'a mut [T]) -> OperandMut<'a> {
        OperandMut {
            span: Span::host(data.as_mut_ptr(), data.len()),
            _borrow: PhantomData,
        }
    }

    span_accessors!();

    /// The elements as a mutable host slice: an error for device memory
    /// or another element type.
    pub fn host_slice_mut<T: Element>(self) -> Result<&'a mut [T], Error> {
        let ptr = self.span.host_ptr::<T>()?;
        // SAFETY: as in `Operand::host_slice`, and the operand was made
        // from a unique borrow for 'a.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.span.len) })
    }

    /// The elements' bytes on the host (a copy's destination; an error
    /// for device memory).
    pub fn host_bytes_mut(self) -> Result<&'a mut [u8], Error> {
        if self.span.device != Device::Cpu {
            return Err(no_host_view(self.span.device));
        }
        // SAFETY: as in `Operand::host_bytes`, from a unique borrow for 'a.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.span.ptr, self.span.len * self.span.dtype.size())
        })
    }

    /// The host slice behind the operand, typed by its dtype (a host
    /// kernel's output; an error for device memory).
    pub fn host_out(self) -> Result<HostOut<'a>, Error> {
        Ok(match self.span.dtype {
            DType::F32 => HostOut::F32(self.host_slice_mut()?),
            DType::F64 => HostOut::F64(self.host_slice_mut()?),
            DType::I32 => HostOut::I32(self.host_slice_mut()?),
            DType::I64 => HostOut::I64(self.host_slice_mut()?),
            DType::BF16 => HostOut::BF16(self.host_slice_mut()?),
            DType::F16 => HostOut::F16(self.host_slice_mut()?),
        })
    }

    /// The same elements, read (a kernel writing over one of its inputs
    /// receives its target this way; see [`Executable::run_in_place`]).
    pub fn as_operand(&self) -> Operand<'_> {
        Operand {
            span: self.span,
            _borrow: PhantomData,
        }
    }

    /// Elements `start..start + n`.
    pub fn range(self, start: usize, n: usize) -> Result<OperandMut<'a>, Error> {
        Ok(OperandMut {
            span: self.span.range(start, n)?,
            _borrow: PhantomData,
        })
    }

    /// Elements `start..start + n`, borrowed from this operand for a
    /// while.
    pub fn sub(&mut self, start: usize, n: usize) -> Result<OperandMut<'_>, Error> {
        Ok(OperandMut {
            span: self.span.range(start, n)?,
            _borrow: PhantomData,
        })
    }
}

/// One stage compiled by a backend for its device.
pub trait Executable: Send + Sync {
    /// Computes every element of `out` from `inputs` (ordered like the
    /// stage's arguments). The caller has checked every operand's length
    /// and device against the stage; element types are checked here.
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error>;

    /// Computes the output over input `aliased` (in-place reuse of a
    /// buffer whose last use this is). `Ok(false)`, having run nothing,
    /// when the route cannot (a GEMM reads whole rows).
    ///
    /// # Safety
    /// The stage reads argument `aliased` only at the output index itself,
    /// and that operand was made from a buffer nobody else reads or writes
    /// while this runs ([`OperandMut::as_operand`]): it is written through.
    unsafe fn run_in_place(&self, inputs: &[Operand<'_>], aliased: usize) -> Result<bool, Error>;

    /// Whether some loop runs as vector code, and how many sums do (for
    /// tests and diagnostics; backends without vector code say none).
    fn vector_loops(&self) -> (bool, usize) {
        (false, 0)
    }

    /// How many loops run at a width wider than the backend's portable
    /// vectors (the CPU's AVX2 or AVX-512 executor; for tests and
    /// diagnostics).
    fn wide_loops(&self) -> usize {
        0
    }
}

/// A backend: compiles the stages the planner planned for its
/// [`Target`], and moves data in the memory of its [`Device`].
pub trait Backend: Send + Sync {
    /// The memory its kernels read and write.
    fn device(&self) -> Device;

    /// What its loop nests are planned for.
    fn target(&self) -> Target;

    /// Compiles one stage's `route` computing in `dtype` (code for exactly
    /// the planned loop nests; a GEMM; a host kernel).
    fn compile(&self, route: &Route, dtype: DType) -> Result<Box<dyn Executable>, Error>;

    /// Sets every element of `out` to `value` (converted as `as` does).
    fn fill(&self, out: OperandMut<'_>, value: f64) -> Result<(), Error>;

    /// Copies `src` into `dst` (same dtype and length): within the device,
    /// or between it and the host.
    fn copy(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error>;

    /// `dst += src` element-wise (same dtype and length): gradient
    /// accumulation.
    fn add_assign(&self, dst: OperandMut<'_>, src: Operand<'_>) -> Result<(), Error>;

    /// `dst[at[r]..at[r] + run] += src[r·run..(r + 1)·run]` for every run
    /// `r` (same dtype; the runs of `dst` do not overlap): a strided
    /// window's gradient into its base's. By default an `add_assign` per
    /// run.
    fn add_runs(
        &self,
        mut dst: OperandMut<'_>,
        src: Operand<'_>,
        at: &[usize],
        run: usize,
    ) -> Result<(), Error> {
        for (r, &p) in at.iter().enumerate() {
            self.add_assign(dst.sub(p, run)?, src.range(r * run, run)?)?;
        }
        Ok(())
    }

    /// `dst[place(v)] += src[v]` for every element `v` of `place` (same
    /// dtype; `place`'s positions apart, element 0 at `start`): a strided
    /// window's gradient into its base's. By default its runs of
    /// consecutive positions through [`Backend::add_runs`].
    fn add_strided(
        &self,
        dst: OperandMut<'_>,
        src: Operand<'_>,
        start: usize,
        place: &Strided,
    ) -> Result<(), Error> {
        let (at, run) = place.runs(start, dst.len())?;
        self.add_runs(dst, src, &at, run)
    }

    /// `dst = src as dst's type` element-wise (same length, any element
    /// types; Rust's `as` semantics: floats to integers round toward zero
    /// and saturate, NaN gives 0).
    fn cast(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error>;

    /// Waits until every queued operation has finished.
    fn synchronize(&self) -> Result<(), Error>;
}

/// Checks that `src` and `dst` have one length (`op` names the caller in
/// the error).
pub fn check_len(op: &str, src: &Operand<'_>, dst: &OperandMut<'_>) -> Result<(), Error> {
    if src.len() != dst.len() {
        return Err(Error::shape(
            op,
            format!("{} elements into {}", src.len(), dst.len()),
        ));
    }
    Ok(())
}

/// Checks that `src` and `dst` have one dtype and length (`op` names the
/// caller in the error).
pub fn check_same(op: &str, src: &Operand<'_>, dst: &OperandMut<'_>) -> Result<(), Error> {
    if src.dtype() != dst.dtype() || src.len() != dst.len() {
        return Err(Error::shape(
            op,
            format!(
                "{} {:?} elements on {} against {} {:?} elements on {}",
                src.len(),
                src.dtype(),
                src.device(),
                dst.len(),
                dst.dtype(),
                dst.device()
            ),
        ));
    }
    Ok(())
}

/// The values of one float operand in host memory (test and diagnostic
/// hooks: the kernel observer, running one kernel on a GPU).
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl<'a> Values<'a> {
    /// The values of `op`, when it is a float operand in host memory.
    pub fn of(op: Operand<'a>) -> Option<Values<'a>> {
        match op.dtype() {
            DType::F32 => op.host_slice().ok().map(Values::F32),
            DType::F64 => op.host_slice().ok().map(Values::F64),
            _ => None,
        }
    }
}
