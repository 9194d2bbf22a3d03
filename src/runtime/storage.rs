//! [`Storage`]: the dense, typed memory behind tensors, on any device.
//!
//! Owns one allocator [`Buffer`] with its element count, dtype and a
//! version counter that in-place writes bump (the tape refuses to use a
//! saved value that was overwritten after it was saved), or, for a
//! *window*, a range of another storage's block (read-only; its version
//! and device are that storage's; [`Storage::window`]). Every method
//! works by device: data moves through the device's backend
//! (`super::backend_for`), and where no backend runs on a device, or a
//! host view of its memory is asked for, the answer is an
//! [`Error::Device`] naming it, never an empty slice. Nothing here is
//! specific to one element type: values cross as any [`Element`] type,
//! dispatched once by `with_element!`. It must not know about shapes,
//! views or the trace.
//!
//! A storage may be *deferred*: allocated, with the kernel that computes it
//! and that kernel's inputs attached but not yet run (an element-wise
//! op's result that a later op may compute inside its own kernel instead;
//! see `crate::ops::fuse`). Every access settles it first: [`Storage::read`]
//! runs the kernel if it has not run, and [`Storage::write`] (an in-place
//! write) also settles every deferred storage that reads this one, so a
//! deferred result always holds the values its inputs had when it was
//! made. A deferred storage dropped unread never runs.

use super::backend_for;

mod add;
use super::compiled::CompiledKernel;
use crate::alloc::{self, Buffer, Device};
use crate::dtype::{with_element, DType, Element};
use crate::kernel::backend::{Operand, OperandMut};
use crate::Error;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

/// Dense memory of `len` elements of one dtype on one device.
pub(crate) struct Storage {
    memory: Memory,
    len: usize,
    dtype: DType,
    /// Where the block lives (`Device::code`): it changes when a module
    /// moves its parameters ([`Storage::move_to`]).
    device: AtomicU64,
    version: AtomicU64,
    /// Who laid out the block beyond `len` (an optimizer's state), `0` for
    /// nobody; see [`Storage::replace_buffer`].
    owner: AtomicU64,
    /// For integer data that came from the host: `(version, least,
    /// greatest)` element as of that version (an index tensor moved to a
    /// device is checked against a dimension without reading it back).
    known_range: Mutex<Option<(u64, i64, i64)>>,
    /// The kernel that computes this storage and its inputs, while it has
    /// not run (see the module's doc).
    deferred: Mutex<Option<Deferred>>,
    /// Whether `deferred` holds a kernel (read without the lock).
    is_deferred: AtomicBool,
    /// Deferred storages whose kernels read this one (dead ones pruned):
    /// settled before this one is written in place.
    readers: Mutex<Vec<Weak<Storage>>>,
}

/// Where a storage's elements are.
enum Memory {
    /// A block of its own.
    Own(RwLock<Buffer>),
    /// Elements `start..start + len` of another storage's block (one with
    /// a block of its own): a *window*, read-only, that kernels read in
    /// place (how a view at a run-time position reaches a kernel whose
    /// plan does not depend on the position; see `crate::ops::window`).
    Window { root: Arc<Storage>, start: usize },
}

/// A kernel run later into a deferred storage.
struct Deferred {
    kernel: Arc<CompiledKernel>,
    inputs: Vec<Arc<Storage>>,
    /// What its maker says about it (the ops layer: the function, for a
    /// reader to inline), dropped with the kernel once it has run.
    about: Arc<dyn Any + Send + Sync>,
}

/// A deferred storage's readers are pruned of dead entries past this many.
const READERS_PRUNED_PAST: usize = 16;

impl Storage {
    /// `len` host elements with unspecified contents (every kernel writes
    /// its whole output).
    pub(crate) fn uninit(dtype: DType, len: usize) -> Result<Arc<Storage>, Error> {
        Self::with(Device::Cpu, dtype, len, false)
    }

    /// `len` elements on `device` with unspecified contents.
    pub(crate) fn uninit_on(
        device: Device,
        dtype: DType,
        len: usize,
    ) -> Result<Arc<Storage>, Error> {
        Self::with(device, dtype, len, false)
    }

    /// `len` zeros on `device`.
    pub(crate) fn zeros_on(
        device: Device,
        dtype: DType,
        len: usize,
    ) -> Result<Arc<Storage>, Error> {
        Self::with(device, dtype, len, true)
    }

    fn with(device: Device, dtype: DType, len: usize, zeroed: bool) -> Result<Arc<Storage>, Error> {
        if !alloc::has_allocator(device) {
            // Opens the device (and registers its memory) on first use.
            backend_for(device)?;
        }
        let bytes = len
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::OutOfMemory {
                requested: usize::MAX,
                in_use: alloc::stats_for(device).bytes_in_use,
                reserved: alloc::stats_for(device).bytes_reserved,
                limit: alloc::memory_limit_for(device),
            })?;
        let buf = if zeroed {
            alloc::allocate_zeroed_on(device, bytes)?
        } else {
            alloc::allocate_on(device, bytes)?
        };
        Ok(Arc::new(Storage::over(
            Memory::Own(RwLock::new(buf)),
            len,
            dtype,
            device,
        )))
    }

    fn over(memory: Memory, len: usize, dtype: DType, device: Device) -> Storage {
        Storage {
            memory,
            len,
            dtype,
            device: AtomicU64::new(device.code()),
            version: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            known_range: Mutex::new(None),
            deferred: Mutex::new(None),
            is_deferred: AtomicBool::new(false),
            readers: Mutex::new(Vec::new()),
        }
    }

    /// Elements `start..start + len` of `of`'s elements as a storage of
    /// their own, sharing the memory: a read-only window (writing one is
    /// an error), whose version is its root's, so a value saved through it
    /// is refused once the root is written in place. `None` when the range
    /// does not lie in `of`.
    pub(crate) fn window(of: &Arc<Storage>, start: usize, len: usize) -> Option<Arc<Storage>> {
        if start.checked_add(len)? > of.len {
            return None;
        }
        let (root, start) = match &of.memory {
            Memory::Own(_) => (of.clone(), start),
            Memory::Window { root, start: s } => (root.clone(), s + start),
        };
        let device = root.device();
        Some(Arc::new(Storage::over(
            Memory::Window { root, start },
            len,
            of.dtype,
            device,
        )))
    }

    /// Whether this storage is a window of another's memory.
    pub(crate) fn is_window(&self) -> bool {
        matches!(self.memory, Memory::Window { .. })
    }

    /// The storage owning the memory: this one, or a window's root.
    fn root(self: &Arc<Storage>) -> &Arc<Storage> {
        match &self.memory {
            Memory::Own(_) => self,
            Memory::Window { root, .. } => root,
        }
    }

    /// The block, for a storage with one of its own.
    fn own(&self) -> Result<&RwLock<Buffer>, Error> {
        match &self.memory {
            Memory::Own(b) => Ok(b),
            Memory::Window { .. } => Err(Error::Invalid {
                function: "storage".into(),
                message: "internal: a window of another storage's memory is read-only".into(),
            }),
        }
    }

    /// A storage of `kernel`'s output size on its device, computed by
    /// `kernel` from `inputs` on first access rather than now (see the
    /// module's doc). Its version is that of a storage just written.
    /// Deferred inputs are settled first: a deferred kernel never reads a
    /// deferred storage, so settling never recurses and no chain of them
    /// forms.
    pub(crate) fn deferred(
        kernel: Arc<CompiledKernel>,
        inputs: Vec<Arc<Storage>>,
        about: Arc<dyn Any + Send + Sync>,
    ) -> Result<Arc<Storage>, Error> {
        for s in &inputs {
            if s.device() != kernel.device() {
                return Err(device_mismatch(kernel.name(), kernel.device(), s.device()));
            }
            s.settle()?;
        }
        let out = Storage::uninit_on(
            kernel.device(),
            kernel.dtype(),
            kernel.output_shape().iter().product(),
        )?;
        out.version.store(1, Relaxed);
        // A window's root is what an in-place write goes through.
        for s in inputs.iter().map(Storage::root) {
            let mut readers = s.readers.lock().unwrap_or_else(|e| e.into_inner());
            if readers.len() >= READERS_PRUNED_PAST {
                readers.retain(|r| r.strong_count() > 0);
            }
            readers.push(Arc::downgrade(&out));
        }
        *out.deferred.lock().unwrap_or_else(|e| e.into_inner()) = Some(Deferred {
            kernel,
            inputs,
            about,
        });
        out.is_deferred.store(true, Relaxed);
        Ok(out)
    }

    /// Whether this storage's kernel has not run yet.
    pub(crate) fn is_deferred(&self) -> bool {
        self.is_deferred.load(Relaxed)
    }

    /// What the maker of this deferred storage attached to it, while its
    /// kernel has not run.
    pub(crate) fn deferred_about(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        if !self.is_deferred() {
            return None;
        }
        let d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        d.as_ref().map(|w| w.about.clone())
    }

    /// The storage of a half type this deferred storage is the f32
    /// widening of, while its kernel has not run
    /// (`CompiledKernel::widens_half`): a half GEMM reads that instead.
    pub(crate) fn widening_of(&self) -> Option<Arc<Storage>> {
        if !self.is_deferred() {
            return None;
        }
        let d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        d.as_ref()
            .filter(|w| w.kernel.widens_half())
            .and_then(|w| w.inputs.first().cloned())
    }

    /// Runs this storage's deferred kernel, if it has not run (its inputs
    /// are not deferred: see [`Storage::deferred`]). On an error it stays
    /// deferred.
    pub(crate) fn settle(&self) -> Result<(), Error> {
        if !self.is_deferred() {
            return Ok(());
        }
        let mut d = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = d.as_ref() {
            let sized: Vec<(&Arc<Storage>, usize)> =
                w.inputs.iter().map(|s| (s, s.len())).collect();
            let mut out = self.own()?.write().unwrap_or_else(|e| e.into_inner());
            super::exec::run_into(&w.kernel, &sized, self, &mut out)?;
            *d = None;
            self.is_deferred.store(false, Relaxed);
        }
        Ok(())
    }

    /// Settles every deferred storage that reads this one (before this one
    /// is overwritten). On an error the ones not settled stay listed.
    fn settle_readers(&self) -> Result<(), Error> {
        let readers = std::mem::take(&mut *self.readers.lock().unwrap_or_else(|e| e.into_inner()));
        for (k, r) in readers.iter().enumerate() {
            if let Some(r) = r.upgrade() {
                if let Err(e) = r.settle() {
                    self.readers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(readers[k..].iter().cloned());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A copy of the host `data` on `device`.
    pub(crate) fn from_slice_on<T: Element>(
        device: Device,
        data: &[T],
    ) -> Result<Arc<Storage>, Error> {
        let backend = backend_for(device)?;
        let s = Storage::uninit_on(device, T::DTYPE, data.len())?;
        {
            let mut g = s.write()?;
            let dst = OperandMut::of_buffer(&mut g, T::DTYPE, data.len())?;
            backend.copy(Operand::host(data), dst)?;
        }
        s.record_range(data);
        Ok(s)
    }

    /// A copy of the elements on `device` (through the host between two
    /// devices).
    pub(crate) fn to_device(&self, device: Device) -> Result<Arc<Storage>, Error> {
        let (from, to) = (self.device(), device);
        if from != Device::Cpu && to != Device::Cpu && from != to {
            return self.to_device(Device::Cpu)?.to_device(to);
        }
        // The device side's backend moves the bytes (the CPU's, host to
        // host).
        let backend = backend_for(if from == Device::Cpu { to } else { from })?;
        let out = Storage::uninit_on(to, self.dtype, self.len)?;
        {
            let src = self.read()?;
            let mut dst = out.write()?;
            backend.copy(self.operand(&src, self.len)?, out.operand_mut(&mut dst)?)?;
            if from == Device::Cpu && !self.dtype.is_float() {
                with_element!(self.dtype, T => out.record_range(&src.as_slice::<T>()?[..self.len]));
            }
        }
        Ok(out)
    }

    /// Records the least and greatest of `data` (this storage's current
    /// values) when they are integers.
    fn record_range<T: Element>(&self, data: &[T]) {
        if T::DTYPE.is_float() || data.is_empty() {
            return;
        }
        let (lo, hi) = data.iter().fold((i64::MAX, i64::MIN), |(lo, hi), v| {
            let v = v.to_i64();
            (lo.min(v), hi.max(v))
        });
        *self.known_range.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((self.version(), lo, hi));
    }

    /// The least and greatest element, when recorded from the host and not
    /// written since.
    pub(crate) fn known_range(&self) -> Option<(i64, i64)> {
        let known = *self.known_range.lock().unwrap_or_else(|e| e.into_inner());
        known
            .filter(|&(version, _, _)| version == self.version())
            .map(|(_, lo, hi)| (lo, hi))
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn device(&self) -> Device {
        match &self.memory {
            Memory::Own(_) => Device::from_code(self.device.load(Relaxed)),
            Memory::Window { root, .. } => root.device(),
        }
    }

    /// Takes `moved` (a copy of this storage made by
    /// [`Storage::to_device`], held by nobody else) in place of the block:
    /// the storage, and every tensor sharing it, lives on `moved`'s device
    /// from now on. What lay past `len` (an optimizer's state) is gone and
    /// the layout's owner is cleared, so that optimizer refuses to run
    /// rather than read it.
    pub(crate) fn adopt(&self, moved: Arc<Storage>) -> Result<(), Error> {
        let device = moved.device();
        let block = moved.into_buffer().ok_or_else(|| Error::Invalid {
            function: "to_device".into(),
            message: "internal: a moved block is shared".into(),
        })?;
        let mut g = self.write()?;
        *g = block;
        self.owner.store(0, Relaxed);
        self.device.store(device.code(), Relaxed);
        Ok(())
    }

    /// Bytes of the underlying block (what the allocator counts).
    /// A window counts none: its memory is its root's.
    pub(crate) fn block_bytes(&self) -> usize {
        match &self.memory {
            Memory::Own(b) => b.read().unwrap_or_else(|e| e.into_inner()).block_bytes(),
            Memory::Window { .. } => 0,
        }
    }

    /// Elements the underlying block can hold (at least `len`): an
    /// optimizer keeps a parameter's state in the same block, after its
    /// `len` elements (see `optim`).
    /// A window holds its `len` elements only.
    pub(crate) fn capacity(&self) -> usize {
        match &self.memory {
            Memory::Own(b) => {
                b.read().unwrap_or_else(|e| e.into_inner()).len_bytes() / self.dtype.size()
            }
            Memory::Window { .. } => self.len,
        }
    }

    /// The token of whoever last put a block here with
    /// [`Storage::replace_buffer`] (`0`: nobody).
    pub(crate) fn owner(&self) -> u64 {
        self.owner.load(Relaxed)
    }

    /// Puts `new` in place of the block (a parameter update computed into a
    /// fresh buffer), records `owner` as the layout's owner and returns the
    /// old block; counts as a write. `new` must hold at least `len`
    /// elements, on this storage's device.
    pub(crate) fn replace_buffer(&self, new: Buffer, owner: u64) -> Result<Buffer, Error> {
        if new.device() != self.device() {
            return Err(device_mismatch(
                "replace_buffer",
                self.device(),
                new.device(),
            ));
        }
        if new.len_bytes() < self.len * self.dtype.size() {
            return Err(Error::Shape {
                op: "replace_buffer".into(),
                message: format!(
                    "a block of {} bytes cannot hold {} {:?} elements",
                    new.len_bytes(),
                    self.len,
                    self.dtype
                ),
            });
        }
        let mut block = self.write()?;
        self.owner.store(owner, Relaxed);
        Ok(std::mem::replace(&mut *block, new))
    }

    /// The block of a storage nobody else holds.
    pub(crate) fn into_buffer(self: Arc<Storage>) -> Option<Buffer> {
        match Arc::into_inner(self)?.memory {
            Memory::Own(b) => Some(b.into_inner().unwrap_or_else(|e| e.into_inner())),
            Memory::Window { .. } => None,
        }
    }

    /// Bumped by every [`Storage::write`] (a window's: its root's).
    pub(crate) fn version(&self) -> u64 {
        match &self.memory {
            Memory::Own(_) => self.version.load(Relaxed),
            Memory::Window { root, .. } => root.version(),
        }
    }

    /// The block, read-locked, its deferred kernel run first (a window's:
    /// its root's whole block; [`Storage::operand`] picks the window).
    pub(crate) fn read(&self) -> Result<RwLockReadGuard<'_, Buffer>, Error> {
        match &self.memory {
            Memory::Own(b) => {
                self.settle()?;
                Ok(b.read().unwrap_or_else(|e| e.into_inner()))
            }
            Memory::Window { root, .. } => root.read(),
        }
    }

    /// The block, write-locked for a write (the version is bumped), after
    /// this storage's deferred kernel and those of the deferred storages
    /// reading it have run.
    pub(crate) fn write(&self) -> Result<RwLockWriteGuard<'_, Buffer>, Error> {
        let block = self.own()?;
        self.settle()?;
        self.settle_readers()?;
        self.version.fetch_add(1, Relaxed);
        Ok(block.write().unwrap_or_else(|e| e.into_inner()))
    }

    /// The first `n` elements of the block held by `guard` (this storage's
    /// block, read-locked), where `n` may exceed `len` up to the block's
    /// capacity (an optimizer's state after a parameter); a window's first
    /// `n` elements in its root's block.
    pub(crate) fn operand<'g>(&self, guard: &'g Buffer, n: usize) -> Result<Operand<'g>, Error> {
        match &self.memory {
            Memory::Own(_) => Operand::of_buffer(guard, self.dtype, n),
            Memory::Window { start, .. } => {
                Operand::of_buffer(guard, self.dtype, start + n)?.range(*start, n)
            }
        }
    }

    /// The `len` elements of the block held by `guard` (write-locked).
    pub(crate) fn operand_mut<'g>(&self, guard: &'g mut Buffer) -> Result<OperandMut<'g>, Error> {
        self.own()?;
        OperandMut::of_buffer(guard, self.dtype, self.len)
    }

    /// Elements `start..start + n` of the whole block (past `len` may lie
    /// an optimizer's state), copied to the host as `T` (this storage's
    /// element type).
    fn download<T: Element>(&self, start: usize, n: usize) -> Result<Vec<T>, Error> {
        let backend = backend_for(self.device())?;
        let g = self.read()?;
        let all = self.operand(&g, self.capacity())?;
        let mut host = vec![T::ZERO; n];
        backend.copy(all.range(start, n)?, OperandMut::host(&mut host))?;
        Ok(host)
    }

    /// Writes the host `values` (of this storage's element type) at
    /// elements `start..` of the whole block.
    fn upload<T: Element>(&self, start: usize, values: &[T]) -> Result<(), Error> {
        let backend = backend_for(self.device())?;
        let mut g = self.write()?;
        let capacity = g.len_bytes() / self.dtype.size();
        let all = OperandMut::of_buffer(&mut g, self.dtype, capacity)?;
        backend.copy(Operand::host(values), all.range(start, values.len())?)
    }

    /// Copies the elements into `out` as they are: `T` must be this
    /// storage's element type and `out` as long as it (`false`, with
    /// nothing copied, otherwise). No allocation, no conversion.
    pub(crate) fn read_into<T: Element>(&self, out: &mut [T]) -> Result<bool, Error> {
        if T::DTYPE != self.dtype || out.len() != self.len {
            return Ok(false);
        }
        let backend = backend_for(self.device())?;
        let g = self.read()?;
        backend.copy(self.operand(&g, self.len)?, OperandMut::host(out))?;
        Ok(true)
    }

    /// A copy of the elements converted to f64.
    pub(crate) fn to_f64_vec(&self) -> Result<Vec<f64>, Error> {
        with_element!(self.dtype, T => {
            Ok(self.download::<T>(0, self.len)?.into_iter().map(T::to_f64).collect())
        })
    }

    /// A copy of the elements of an integer storage as `i64` (`None` for a
    /// float storage).
    pub(crate) fn to_i64_vec(&self) -> Result<Option<Vec<i64>>, Error> {
        if self.dtype.is_float() {
            return Ok(None);
        }
        with_element!(self.dtype, T => {
            Ok(Some(self.download::<T>(0, self.len)?.into_iter().map(T::to_i64).collect()))
        })
    }

    /// Elements `start..start + n` of the whole block (past `len` lies an
    /// optimizer's state) as f64; `None` beyond the block.
    pub(crate) fn read_span(&self, start: usize, n: usize) -> Result<Option<Vec<f64>>, Error> {
        if !self.spans(start, n) {
            return Ok(None);
        }
        with_element!(self.dtype, T => {
            Ok(Some(self.download::<T>(start, n)?.into_iter().map(T::to_f64).collect()))
        })
    }

    /// Writes `values` (converted to the element type) at `start..` of the
    /// whole block (see [`Storage::read_span`]); `false`, with nothing
    /// written, beyond the block.
    pub(crate) fn write_span(&self, start: usize, values: &[f64]) -> Result<bool, Error> {
        if !self.spans(start, values.len()) {
            return Ok(false);
        }
        with_element!(self.dtype, T => {
            let converted: Vec<T> = values.iter().map(|&v| <T as Element>::from_f64(v)).collect();
            self.upload(start, &converted)?;
        });
        Ok(true)
    }

    /// Whether `start..start + n` lies in the block.
    fn spans(&self, start: usize, n: usize) -> bool {
        start
            .checked_add(n)
            .is_some_and(|end| end <= self.capacity())
    }

    /// A copy of the elements converted to `dtype` (Rust's `as`), on the
    /// same device.
    pub(crate) fn cast_to(&self, dtype: DType) -> Result<Arc<Storage>, Error> {
        let backend = backend_for(self.device())?;
        let out = Storage::uninit_on(self.device(), dtype, self.len)?;
        {
            let src = self.read()?;
            let mut dst = out.write()?;
            backend.cast(self.operand(&src, self.len)?, out.operand_mut(&mut dst)?)?;
        }
        Ok(out)
    }

    /// Sets every element to `value` (converted to the element type).
    pub(crate) fn fill(&self, value: f64) -> Result<(), Error> {
        self.fill_span(0, self.len, value)
    }

    /// Sets elements `start..start + n` to `value` (converted to the
    /// element type). On a GPU the value travels as a kernel's launch
    /// parameter: queued in stream order, no copy from host memory and no
    /// wait (how an optimizer's changing hyperparameters reach the
    /// device).
    pub(crate) fn fill_span(&self, start: usize, n: usize, value: f64) -> Result<(), Error> {
        let backend = backend_for(self.device())?;
        let mut g = self.write()?;
        backend.fill(self.operand_mut(&mut g)?.range(start, n)?, value)
    }

    /// Overwrites the first elements with those of `other` (same dtype and
    /// device; as many as the shorter of the two holds).
    pub(crate) fn copy_from(&self, other: &Storage) -> Result<(), Error> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let backend = self.backend_with("copy_from", other)?;
        let n = self.len.min(other.len);
        let b = other.read()?;
        let mut a = self.write()?;
        let src = other.operand(&b, n)?;
        backend.copy(src, self.operand_mut(&mut a)?.range(0, n)?)
    }

    /// The backend of this storage's device, when `other` lives there too.
    fn backend_with(
        &self,
        op: &str,
        other: &Storage,
    ) -> Result<&'static dyn crate::kernel::backend::Backend, Error> {
        if other.device() != self.device() {
            return Err(device_mismatch(op, self.device(), other.device()));
        }
        backend_for(self.device())
    }
}

/// The error for two operands on different devices.
pub(crate) fn device_mismatch(op: &str, a: Device, b: Device) -> Error {
    Error::Device {
        device: a.to_string(),
        message: format!(
            "{op}: operands on {a} and {b}; move one with to_device (nothing moves between devices silently)"
        ),
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Storage({:?}, {} elements, {})",
            self.dtype,
            self.len,
            self.device()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage on a fake device (device memory no backend runs on):
    /// every method that needs the data or a backend is an error naming
    /// the device; none gives an empty slice or silently does nothing.
    #[test]
    fn storage_on_a_device_errs_from_every_host_method() {
        let dev = crate::alloc::fake::shared();
        let names_it = |r: Result<(), Error>| match r {
            Err(Error::Device { device, .. }) => assert_eq!(device, dev.to_string()),
            other => panic!("expected an error naming {dev}, got {other:?}"),
        };
        let s = Storage::zeros_on(dev, DType::F32, 8).unwrap();
        let u = Storage::uninit_on(dev, DType::F32, 8).unwrap();
        assert_eq!((s.device(), s.len(), s.dtype()), (dev, 8, DType::F32));
        names_it(Storage::from_slice_on(dev, &[1f32, 2.0]).map(drop));
        names_it(s.to_f64_vec().map(drop));
        names_it(s.read_span(0, 4).map(drop));
        names_it(s.write_span(0, &[1.0]).map(drop));
        names_it(s.fill(2.0));
        names_it(s.copy_from(&u));
        names_it(s.add_assign(&u));
        let i = Storage::zeros_on(dev, DType::I64, 3).unwrap();
        names_it(i.to_i64_vec().map(drop));
        // An operand of device memory exists (a device kernel takes its
        // address); its host view does not.
        let g = s.read().unwrap();
        let op = s.operand(&g, 8).unwrap();
        assert_eq!(op.device(), dev);
        names_it(op.host_slice::<f32>().map(drop));
        drop(g);
        // Across devices: an error naming both, nothing copied.
        let host = Storage::from_slice_on(Device::Cpu, &[1f32; 8]).unwrap();
        for r in [host.copy_from(&s), host.add_assign(&s), s.copy_from(&host)] {
            match r {
                Err(Error::Device { message, .. }) => {
                    assert!(message.contains("cpu") && message.contains(&dev.to_string()))
                }
                other => panic!("expected a device mismatch, got {other:?}"),
            }
        }
        assert_eq!(host.to_f64_vec().unwrap(), vec![1.0; 8]);
    }

    /// A deferred storage runs its kernel on first access; an in-place
    /// write to one of its inputs runs it first, so it holds the values
    /// the input had; one dropped unread releases its inputs; its version
    /// is that of a storage just written, and settling does not change it.
    /// (No run counts here: the kernel counters are the process's, and
    /// the library's tests run in parallel; `tests/fusion.rs` counts.)
    #[test]
    fn a_deferred_storage_runs_on_first_access() {
        let f = crate::symbolic::IndexFn::parse("f[i] = x[i] * 2", &[("x", &[3][..])]).unwrap();
        let k = crate::jit::compile(&f, DType::F32).unwrap();
        let x = Storage::from_slice_on(Device::Cpu, &[1f32, 2., 3.]).unwrap();
        let y = Storage::deferred(k.clone(), vec![x.clone()], Arc::new(())).unwrap();
        assert!(y.is_deferred() && y.deferred_about().is_some());
        assert_eq!(y.version(), 1);
        x.fill(5.0).unwrap(); // settles `y` first
        assert!(!y.is_deferred() && y.deferred_about().is_none());
        assert_eq!(y.to_f64_vec().unwrap(), vec![2., 4., 6.]);
        assert_eq!(y.version(), 1);
        let held = Arc::strong_count(&x);
        let z = Storage::deferred(k.clone(), vec![x.clone()], Arc::new(())).unwrap();
        assert_eq!(Arc::strong_count(&x), held + 1);
        drop(z);
        assert_eq!(
            Arc::strong_count(&x),
            held,
            "dropped unread: input released"
        );
        // A deferred input is settled before another deferred kernel reads it.
        let a = Storage::deferred(k.clone(), vec![x.clone()], Arc::new(())).unwrap();
        let b = Storage::deferred(k, vec![a.clone()], Arc::new(())).unwrap();
        assert!(!a.is_deferred() && b.is_deferred());
        assert_eq!(b.to_f64_vec().unwrap(), vec![20.; 3]);
    }

    /// On the host every method works through the CPU backend, for every
    /// element type.
    #[test]
    fn host_storage_round_trips() {
        let a = Storage::from_slice_on(Device::Cpu, &[1i32, -2, 3]).unwrap();
        assert_eq!(a.to_i64_vec().unwrap(), Some(vec![1, -2, 3]));
        let b = Storage::from_slice_on(Device::Cpu, &[10i32, 20, 30]).unwrap();
        a.add_assign(&b).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), vec![11.0, 18.0, 33.0]);
        // A storage added to itself is refused (it would lock itself twice).
        assert!(a.add_assign(&a).is_err());
        a.copy_from(&a).unwrap();
        let f = Storage::zeros_on(Device::Cpu, DType::F64, 4).unwrap();
        assert!(f.write_span(1, &[0.5, 1.5]).unwrap());
        assert!(!f.write_span(3, &[1.0; 8]).unwrap(), "beyond the block");
        assert_eq!(f.read_span(0, 4).unwrap(), Some(vec![0.0, 0.5, 1.5, 0.0]));
        assert_eq!(f.to_i64_vec().unwrap(), None);
        f.fill(-2.0).unwrap();
        assert_eq!(f.to_f64_vec().unwrap(), vec![-2.0; 4]);
        let g = Storage::zeros_on(Device::Cpu, DType::F32, 4).unwrap();
        assert!(
            matches!(g.add_assign(&f), Err(Error::Shape { .. })),
            "dtypes differ"
        );
    }
}
