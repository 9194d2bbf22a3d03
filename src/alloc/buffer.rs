//! [`Buffer`]: an owning, 64-byte aligned block that returns itself to its
//! allocator when dropped.

use std::fmt;
use std::ptr::NonNull;

use super::pool::Allocator;
use super::Device;

pub use crate::dtype::Element;

/// An owning block of memory from a device allocator (see
/// [`allocate`](super::allocate)). Its address is aligned to 64 bytes and its
/// contents are always initialised: zeros when obtained with
/// [`allocate_zeroed`](super::allocate_zeroed), otherwise unspecified (a
/// reused block keeps its previous contents). Dropping it returns the block
/// to its allocator, which caches it or gives it back to the system
/// according to the mode at that moment.
///
/// Only host memory has a host view: on a device buffer, [`Buffer::as_slice`]
/// is an error naming the device (its address is the device's, which the
/// host cannot dereference).
///
/// ```
/// let mut b = tenjin::alloc::allocate_zeroed(4 * 8)?;
/// assert_eq!(b.len_bytes(), 32);
/// assert_eq!(b.as_ptr() as usize % 64, 0);
/// b.as_mut_slice::<f32>()?[3] = 1.5;
/// assert_eq!(b.as_slice::<f32>()?, &[0., 0., 0., 1.5, 0., 0., 0., 0.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Buffer {
    ptr: NonNull<u8>,
    len_bytes: usize,
    block_bytes: usize,
    allocator: &'static Allocator,
}

// SAFETY: a Buffer uniquely owns its block; shared access is read-only.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    pub(crate) fn new(
        allocator: &'static Allocator,
        len_bytes: usize,
        zeroed: bool,
    ) -> Result<Buffer, crate::Error> {
        let (ptr, block_bytes) = allocator.alloc(len_bytes)?;
        let buffer = Buffer {
            ptr,
            len_bytes,
            block_bytes,
            allocator,
        };
        if zeroed {
            // SAFETY: the block has block_bytes ≥ len_bytes writable bytes.
            unsafe { allocator.memory().zero(ptr, len_bytes) }.map_err(|message| {
                crate::Error::Device {
                    device: allocator.device().to_string(),
                    message,
                }
            })?;
        }
        Ok(buffer)
    }

    /// The number of bytes requested (the usable length).
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// The size of the underlying block, after size-class rounding; this is
    /// what the statistics count.
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// The device whose allocator owns this buffer.
    pub fn device(&self) -> Device {
        self.allocator.device()
    }

    /// The start of the buffer, 64-byte aligned: a host pointer for host
    /// memory, the device's address for device memory.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The start of the buffer, 64-byte aligned, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The error for a host view of device memory.
    fn no_host_view(&self) -> crate::Error {
        crate::Error::Device {
            device: self.device().to_string(),
            message: format!(
                "a buffer of {} bytes in device memory has no host view",
                self.len_bytes
            ),
        }
    }

    /// The buffer as `len_bytes / size_of::<T>()` elements (trailing bytes
    /// that do not make a whole element are not part of the view); an
    /// [`Error::Device`](crate::Error::Device) for device memory.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], crate::Error> {
        if self.device() != Device::Cpu {
            return Err(self.no_host_view());
        }
        // SAFETY: host memory; the block is initialised, aligned to
        // 64 ≥ align_of::<T>(), and every bit pattern is a valid T (sealed:
        // f32, f64, i32, i64).
        Ok(unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<T>(),
                self.len_bytes / std::mem::size_of::<T>(),
            )
        })
    }

    /// The buffer as mutable elements; see [`Buffer::as_slice`].
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], crate::Error> {
        if self.device() != Device::Cpu {
            return Err(self.no_host_view());
        }
        // SAFETY: as in as_slice, and `&mut self` makes the view unique.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.as_ptr().cast::<T>(),
                self.len_bytes / std::mem::size_of::<T>(),
            )
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the block came from this allocator with this block size and
        // the buffer is gone after this.
        unsafe { self.allocator.free(self.ptr, self.block_bytes) };
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("device", &self.device())
            .field("len_bytes", &self.len_bytes)
            .field("block_bytes", &self.block_bytes)
            .field("ptr", &self.ptr)
            .finish()
    }
}
