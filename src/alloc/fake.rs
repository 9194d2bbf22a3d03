//! A fake device for tests (compiled for unit tests only): host memory
//! registered as a CUDA device's memory, so the crate treats it as device
//! memory (no host view, no backend) while the test can count the driver
//! calls.

use super::pool::{HostMemory, RawMemory};
use super::{register_device_memory, Device};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `capacity` bytes of "device" memory, counting the driver calls.
pub(crate) struct FakeDevice {
    pub(crate) capacity: usize,
    pub(crate) held: AtomicUsize,
    pub(crate) mallocs: AtomicUsize,
    pub(crate) frees: AtomicUsize,
}

impl FakeDevice {
    /// A fake device of `capacity` bytes registered as `Device::Cuda(n)`
    /// (each `n` once per process).
    pub(crate) fn open(n: usize, capacity: usize) -> &'static FakeDevice {
        let fake: &'static FakeDevice = Box::leak(Box::new(FakeDevice {
            capacity,
            held: AtomicUsize::new(0),
            mallocs: AtomicUsize::new(0),
            frees: AtomicUsize::new(0),
        }));
        assert!(
            register_device_memory(n, fake),
            "{} has an allocator already",
            Device::Cuda(n)
        );
        fake
    }
}

/// The fake device the runtime's unit tests share: 16 MiB registered once
/// as `Device::Cuda(MAX_CUDA_DEVICES - 2)`.
pub(crate) fn shared() -> Device {
    static OPEN: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    *OPEN.get_or_init(|| {
        let n = super::MAX_CUDA_DEVICES - 2;
        FakeDevice::open(n, 16 << 20);
        Device::Cuda(n)
    })
}

impl RawMemory for FakeDevice {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        if self.held.load(Ordering::SeqCst) + size > self.capacity {
            return None;
        }
        self.mallocs.fetch_add(1, Ordering::SeqCst);
        self.held.fetch_add(size, Ordering::SeqCst);
        HostMemory.alloc(size)
    }
    unsafe fn dealloc(&self, ptr: NonNull<u8>, size: usize) {
        self.frees.fetch_add(1, Ordering::SeqCst);
        self.held.fetch_sub(size, Ordering::SeqCst);
        HostMemory.dealloc(ptr, size)
    }
    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
        HostMemory.zero(ptr, len)
    }
}
