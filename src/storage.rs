//! [`Storage`]: the dense, typed memory behind tensors.
//!
//! Owns one allocator [`Buffer`] with its element count, dtype and a
//! version counter that in-place writes bump (the tape refuses to use a
//! saved value that was overwritten after it was saved). It must not know
//! about shapes, views or the trace: it sits just above `alloc`, below
//! `exec` (which runs kernels on storages) and the tape.

use crate::alloc::{self, Buffer};
use crate::dtype::DType;
use crate::Error;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::dtype::Element;

/// Dense memory of `len` elements of one dtype.
pub(crate) struct Storage {
    buf: RwLock<Buffer>,
    len: usize,
    dtype: DType,
    version: AtomicU64,
    /// Who laid out the block beyond `len` (an optimizer's state), `0` for
    /// nobody; see [`Storage::replace_buffer`].
    owner: AtomicU64,
}

impl Storage {
    /// `len` elements with unspecified contents (every kernel writes its
    /// whole output).
    pub(crate) fn uninit(dtype: DType, len: usize) -> Result<Arc<Storage>, Error> {
        Self::with(dtype, len, false)
    }

    /// `len` zeros.
    pub(crate) fn zeros(dtype: DType, len: usize) -> Result<Arc<Storage>, Error> {
        Self::with(dtype, len, true)
    }

    fn with(dtype: DType, len: usize, zeroed: bool) -> Result<Arc<Storage>, Error> {
        let bytes = len.checked_mul(dtype.size()).ok_or(Error::OutOfMemory {
            requested: usize::MAX,
            in_use: alloc::stats().bytes_in_use,
            reserved: alloc::stats().bytes_reserved,
            limit: alloc::memory_limit(),
        })?;
        let buf = if zeroed {
            alloc::allocate_zeroed(bytes)?
        } else {
            alloc::allocate(bytes)?
        };
        Ok(Arc::new(Storage {
            buf: RwLock::new(buf),
            len,
            dtype,
            version: AtomicU64::new(0),
            owner: AtomicU64::new(0),
        }))
    }

    /// A copy of `data`.
    pub(crate) fn from_slice<T: Element>(data: &[T]) -> Result<Arc<Storage>, Error> {
        let s = Storage::uninit(T::DTYPE, data.len())?;
        s.write().as_mut_slice::<T>()[..data.len()].copy_from_slice(data);
        Ok(s)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of the underlying block (what the allocator counts).
    pub(crate) fn block_bytes(&self) -> usize {
        self.read().block_bytes()
    }

    /// Elements the underlying block can hold (at least `len`): an
    /// optimizer keeps a parameter's state in the same block, after its
    /// `len` elements (see `optim`).
    pub(crate) fn capacity(&self) -> usize {
        self.read().len_bytes() / self.dtype.size()
    }

    /// The token of whoever last put a block here with
    /// [`Storage::replace_buffer`] (`0`: nobody).
    pub(crate) fn owner(&self) -> u64 {
        self.owner.load(Relaxed)
    }

    /// Puts `new` in place of the block (a parameter update computed into a
    /// fresh buffer), records `owner` as the layout's owner and returns the
    /// old block; counts as a write. `new` must hold at least `len`
    /// elements.
    pub(crate) fn replace_buffer(&self, new: Buffer, owner: u64) -> Result<Buffer, Error> {
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
        let mut block = self.write();
        self.owner.store(owner, Relaxed);
        Ok(std::mem::replace(&mut *block, new))
    }

    /// The block of a storage nobody else holds.
    pub(crate) fn into_buffer(self: Arc<Storage>) -> Option<Buffer> {
        Arc::into_inner(self).map(|s| s.buf.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// Bumped by every [`Storage::write`].
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Relaxed)
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Buffer> {
        self.buf.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Buffer> {
        self.version.fetch_add(1, Relaxed);
        self.buf.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The elements as `T` (must be this storage's dtype).
    pub(crate) fn slice<'a, T: Element>(&self, guard: &'a Buffer) -> &'a [T] {
        debug_assert_eq!(T::DTYPE, self.dtype);
        &guard.as_slice::<T>()[..self.len]
    }

    /// A copy of the elements converted to f64.
    pub(crate) fn to_f64_vec(&self) -> Vec<f64> {
        let g = self.read();
        match self.dtype {
            DType::F32 => widen(self.slice::<f32>(&g)),
            DType::F64 => self.slice::<f64>(&g).to_vec(),
            DType::I32 => widen(self.slice::<i32>(&g)),
            DType::I64 => widen(self.slice::<i64>(&g)),
        }
    }

    /// A copy of the elements of an `I32` or `I64` storage as `i64`
    /// (`None` for a float storage).
    pub(crate) fn to_i64_vec(&self) -> Option<Vec<i64>> {
        let g = self.read();
        match self.dtype {
            DType::I32 => Some(
                self.slice::<i32>(&g)
                    .iter()
                    .map(|&x| i64::from(x))
                    .collect(),
            ),
            DType::I64 => Some(self.slice::<i64>(&g).to_vec()),
            DType::F32 | DType::F64 => None,
        }
    }

    /// Elements `start..start + n` of the whole block (past `len` lies an
    /// optimizer's state) as f64, or `None` beyond the block or for an
    /// integer storage.
    pub(crate) fn read_span(&self, start: usize, n: usize) -> Option<Vec<f64>> {
        let g = self.read();
        let end = start.checked_add(n)?;
        Some(match self.dtype {
            DType::F32 => widen(g.as_slice::<f32>().get(start..end)?),
            DType::F64 => g.as_slice::<f64>().get(start..end)?.to_vec(),
            DType::I32 | DType::I64 => return None,
        })
    }

    /// Writes `values` at `start..` of the whole block (see
    /// [`Storage::read_span`]); `false` (nothing written) beyond the block
    /// or for an integer storage.
    pub(crate) fn write_span(&self, start: usize, values: &[f64]) -> bool {
        let end = start + values.len();
        let mut g = self.write();
        match self.dtype {
            DType::F32 => match g.as_mut_slice::<f32>().get_mut(start..end) {
                Some(s) => s.iter_mut().zip(values).for_each(|(o, &v)| *o = v as f32),
                None => return false,
            },
            DType::F64 => match g.as_mut_slice::<f64>().get_mut(start..end) {
                Some(s) => s.copy_from_slice(values),
                None => return false,
            },
            DType::I32 | DType::I64 => return false,
        }
        true
    }

    /// Overwrites the elements with those of `other` (same dtype and length).
    pub(crate) fn copy_from(&self, other: &Storage) {
        fn copy<T: Element>(a: &mut Buffer, b: &Buffer, n: usize) {
            a.as_mut_slice::<T>()[..n].copy_from_slice(&b.as_slice::<T>()[..n]);
        }
        let b = other.read();
        let mut a = self.write();
        let n = self.len.min(other.len);
        // Bits are copied: a same-sized integer type moves any element.
        match self.dtype.size() {
            4 => copy::<i32>(&mut a, &b, n),
            _ => copy::<i64>(&mut a, &b, n),
        }
    }

    /// `self += other`, element-wise (gradient accumulation).
    pub(crate) fn add_assign(&self, other: &Storage) {
        fn add<T: Element>(a: &mut [T], b: &[T]) {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.add(*y);
            }
        }
        let b = other.read();
        let mut a = self.write();
        let n = self.len;
        match self.dtype {
            DType::F32 => add(&mut a.as_mut_slice::<f32>()[..n], other.slice::<f32>(&b)),
            DType::F64 => add(&mut a.as_mut_slice::<f64>()[..n], other.slice::<f64>(&b)),
            DType::I32 => add(&mut a.as_mut_slice::<i32>()[..n], other.slice::<i32>(&b)),
            DType::I64 => add(&mut a.as_mut_slice::<i64>()[..n], other.slice::<i64>(&b)),
        }
    }
}

/// The elements as f64 (`Element::to_f64`).
fn widen<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({:?}, {} elements)", self.dtype, self.len)
    }
}
