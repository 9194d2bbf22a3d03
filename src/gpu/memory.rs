//! Device memory behind the allocator's `RawMemory` interface, so device
//! buffers get the host pool's logic unchanged: both modes, block rounding
//! and splitting, statistics, the limit and the out-of-memory retry (empty
//! the cache, retry, then a typed error) — see `crate::alloc`.
//!
//! Owns only the driver calls: `cuMemAlloc`/`cuMemFree` (synchronous, so
//! a freed block is never in use by queued work) and `cuMemsetD8`.

use crate::alloc::RawMemory;
use cudarc::driver::{result, CudaContext};
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory of one device.
pub(crate) struct DeviceMemory {
    pub(crate) ctx: Arc<CudaContext>,
}

impl RawMemory for DeviceMemory {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        self.ctx.bind_to_thread().ok()?;
        // SAFETY: a plain allocation in the bound context.
        let p = unsafe { result::malloc_sync(size) }.ok()?;
        NonNull::new(p as *mut u8)
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, _size: usize) {
        if self.ctx.bind_to_thread().is_ok() {
            // Work queued on the stream may still read the block.
            super::counters::count(&super::counters::COUNTERS.synchronizations, 1);
            let _ = self.ctx.synchronize();
            let _ = result::free_sync(ptr.as_ptr() as u64);
        }
    }

    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        result::memset_d8_sync(ptr.as_ptr() as u64, 0, len).map_err(|e| e.to_string())
    }
}
