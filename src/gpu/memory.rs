//! Device memory behind the allocator's `RawMemory` interface, so device
//! buffers get the host pool's logic unchanged: both modes, block rounding
//! and splitting, statistics, the limit and the out-of-memory retry (empty
//! the cache, retry, then a typed error) — see `crate::alloc`.
//!
//! Owns only the driver calls: `cuMemAllocAsync`/`cuMemFreeAsync` and
//! `cuMemsetD8Async` on the device's stream (stream-ordered: no free
//! waits for the device), or `cuMemAlloc`/`cuMemFree` after a wait where
//! the device has no stream-ordered allocator.

use crate::alloc::RawMemory;
use cudarc::driver::{result, CudaContext, CudaStream};
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory of one device.
pub(crate) struct DeviceMemory {
    pub(crate) ctx: Arc<CudaContext>,
    /// The device's one stream: with `stream_ordered`, blocks are
    /// allocated, zeroed and freed in its order (`cuMemAllocAsync`,
    /// `cuMemFreeAsync`), so a free never waits for the device — the work
    /// queued before it finishes before the memory is reused, as in
    /// PyTorch's caching allocator on one stream.
    pub(crate) stream: Arc<CudaStream>,
    /// Whether the device has the driver's stream-ordered allocator
    /// (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`); without it a free
    /// waits for the device first.
    pub(crate) stream_ordered: bool,
}

impl RawMemory for DeviceMemory {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        self.ctx.bind_to_thread().ok()?;
        // SAFETY: a plain allocation in the bound context, on its stream.
        let p = if self.stream_ordered {
            unsafe { result::malloc_async(self.stream.cu_stream(), size) }.ok()?
        } else {
            unsafe { result::malloc_sync(size) }.ok()?
        };
        NonNull::new(p as *mut u8)
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, _size: usize) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        if self.stream_ordered {
            // Freed after the work queued on the stream: no wait.
            let _ = result::free_async(ptr.as_ptr() as u64, self.stream.cu_stream());
        } else {
            // Work queued on the stream may still read the block.
            super::counters::count(&super::counters::COUNTERS.synchronizations, 1);
            let _ = self.ctx.synchronize();
            let _ = result::free_sync(ptr.as_ptr() as u64);
        }
    }

    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        result::memset_d8_async(ptr.as_ptr() as u64, 0, len, self.stream.cu_stream())
            .map_err(|e| e.to_string())
    }
}
