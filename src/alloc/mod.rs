//! Memory for tensor data: buffers, per-device pools, allocation modes,
//! statistics and out-of-memory handling (DESIGN.md §5; DeepDSL thesis §4.4,
//! "runtime memory management").
//!
//! **What this module owns.** Every tensor buffer is a [`Buffer`] obtained
//! from the allocator of one [`Device`]. Each device's allocator has a
//! [`AllocMode`], switchable at run time:
//!
//! - [`AllocMode::RuntimeEfficient`] (the default): a caching pool. Requests
//!   are rounded to a size class ([`size_class`]: powers of two from 64 B up
//!   to 1 MiB, multiples of 512 B above). A dropped small block goes to its
//!   class's free list; a dropped large one stays in its segment (one
//!   system allocation), merged with free neighbours, and a later large
//!   request takes the smallest free block that fits and splits off the
//!   rest (PyTorch's caching allocator), so a smaller request reuses a
//!   larger cached block. When the cache holds more than the peak in use
//!   (and at least [`TRIM_FLOOR`]), its least recently freed blocks go back
//!   to the system until half of that remains. A loop with a fixed
//!   allocation pattern makes no system allocations after its first
//!   iteration; a loop over ever new shapes keeps reserved memory within
//!   about twice its peak in use.
//! - [`AllocMode::MemoryEfficient`]: requests are rounded only to 64 B
//!   ([`exact_size`]) and a dropped buffer's block goes back to the system at
//!   once.
//!
//! A block is freed according to the mode at the moment it is dropped, so
//! switching modes with live buffers is safe; switching to memory-efficient
//! mode also empties the cache. [`stats`] reports bytes in use and reserved
//! (in use plus cached), their peaks, and system and pool counters.
//! [`set_memory_limit`] caps reserved bytes; an allocation over the limit, or
//! one the system refuses, empties the cache, retries once and then returns
//! [`Error::OutOfMemory`](crate::Error::OutOfMemory) — it never aborts and
//! never touches live buffers.
//!
//! **What it must not touch.** It does not know what an op, a tensor, a shape
//! or a trace is: liveness (when a buffer's last use is over) is decided by
//! its callers, which simply drop the buffer. Raw memory comes from a small
//! internal backend trait, so a device allocator plugs into the same pool,
//! statistics and limit logic; only host memory ([`Device::Cpu`]) exists now.
//!
//! All functions are thread-safe: allocation and free may happen on any
//! thread (one mutex per device guards the pool; the hit path is a map
//! lookup and a `Vec::pop`).
//!
//! ```
//! use tenjin::alloc::{self, AllocMode};
//! alloc::set_mode(AllocMode::RuntimeEfficient);
//! drop(alloc::allocate(1000)?);              // cached in the 1024-B class
//! let before = alloc::stats();
//! let b = alloc::allocate(900)?;             // same class: a pool hit
//! let after = alloc::stats();
//! assert_eq!(after.pool_hits, before.pool_hits + 1);
//! assert_eq!(after.allocations, before.allocations);
//! assert_eq!(b.block_bytes(), 1024);
//! # Ok::<(), tenjin::Error>(())
//! ```

mod buffer;
#[cfg(test)]
pub(crate) mod fake;
mod pool;

pub use buffer::{Buffer, Element};
pub use pool::{exact_size, size_class, ALIGN, LARGE_GRANULE, SMALL_LIMIT, TRIM_FLOOR};

pub(crate) use pool::RawMemory;
use pool::{Allocator, HostMemory};
use std::sync::OnceLock;

/// A memory space with its own allocator, pool, mode, limit and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// Host memory.
    Cpu,
    /// The memory of CUDA device `n` (feature `cuda`; its allocator exists
    /// once the GPU backend has opened the device).
    Cuda(usize),
}

impl Device {
    /// The device as one integer (0: the CPU, `n + 1`: CUDA device `n`),
    /// for atomics.
    pub(crate) fn code(self) -> u64 {
        match self {
            Device::Cpu => 0,
            Device::Cuda(n) => n as u64 + 1,
        }
    }

    /// The device of [`Device::code`].
    pub(crate) fn from_code(code: u64) -> Device {
        match code {
            0 => Device::Cpu,
            n => Device::Cuda(n as usize - 1),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The most CUDA devices a process uses.
pub const MAX_CUDA_DEVICES: usize = 16;

/// How an allocator trades memory for speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AllocMode {
    /// Cache freed blocks in size-class free lists and reuse them.
    #[default]
    RuntimeEfficient,
    /// Return freed blocks to the system immediately.
    MemoryEfficient,
}

/// A snapshot of one device allocator's statistics. Byte counts are block
/// sizes (after size-class rounding), not requested sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in live buffers.
    pub bytes_in_use: usize,
    /// Highest `bytes_in_use` since start or [`reset_peak`].
    pub peak_in_use: usize,
    /// Bytes obtained from the system and not yet returned: in use plus cached.
    pub bytes_reserved: usize,
    /// Highest `bytes_reserved` since start or [`reset_peak`].
    pub peak_reserved: usize,
    /// Blocks obtained from the system.
    pub allocations: u64,
    /// Blocks returned to the system.
    pub frees: u64,
    /// Requests served from the cache (runtime-efficient mode).
    pub pool_hits: u64,
    /// Requests the cache could not serve (runtime-efficient mode).
    pub pool_misses: u64,
    /// Times the runtime-efficient cache held more than the peak in use
    /// (and at least [`TRIM_FLOOR`]) and returned its least recently
    /// freed blocks to the system, down to half of that.
    pub cache_trims: u64,
}

impl AllocStats {
    /// Bytes held in the cache: reserved but not in use.
    pub fn bytes_cached(&self) -> usize {
        self.bytes_reserved - self.bytes_in_use
    }
}

static HOST_MEMORY: HostMemory = HostMemory;
static CPU: Allocator = Allocator::new(Device::Cpu, &HOST_MEMORY);
static CUDA: [OnceLock<Allocator>; MAX_CUDA_DEVICES] =
    [const { OnceLock::new() }; MAX_CUDA_DEVICES];

/// Gives CUDA device `n` its allocator over `memory` (the GPU backend does
/// this when it opens the device; tests with a fake device memory).
/// Returns `false`, changing nothing, when `n` already has one or is out
/// of range.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn register_device_memory(n: usize, memory: &'static dyn RawMemory) -> bool {
    CUDA.get(n)
        .is_some_and(|slot| slot.set(Allocator::new(Device::Cuda(n), memory)).is_ok())
}

/// Whether `device` has an allocator (the host always; a CUDA device once
/// it is open).
pub(crate) fn has_allocator(device: Device) -> bool {
    allocator(device).is_some()
}

/// `device`'s allocator, if it has one.
fn allocator(device: Device) -> Option<&'static Allocator> {
    match device {
        Device::Cpu => Some(&CPU),
        Device::Cuda(n) => CUDA.get(n).and_then(OnceLock::get),
    }
}

/// `device`'s allocator, or the error saying why there is none.
fn allocator_or_err(device: Device) -> Result<&'static Allocator, crate::Error> {
    allocator(device).ok_or_else(|| crate::Error::Device {
        device: device.to_string(),
        message: "no allocator: the device is not open (it opens on first use by a tensor, \
                  with the `cuda` feature and a GPU present)"
            .into(),
    })
}

/// A host buffer of `bytes` bytes with unspecified (but initialised)
/// contents; see [`allocate_on`].
pub fn allocate(bytes: usize) -> Result<Buffer, crate::Error> {
    allocate_on(Device::Cpu, bytes)
}

/// A host buffer of `bytes` zero bytes.
pub fn allocate_zeroed(bytes: usize) -> Result<Buffer, crate::Error> {
    allocate_zeroed_on(Device::Cpu, bytes)
}

/// A buffer of `bytes` bytes on `device`, or
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory) if the limit or the
/// system refuses it even after emptying the cache.
///
/// ```
/// use tenjin::alloc::{allocate_on, Device};
/// assert!(matches!(
///     allocate_on(Device::Cpu, usize::MAX / 2),
///     Err(tenjin::Error::OutOfMemory { .. })
/// ));
/// ```
pub fn allocate_on(device: Device, bytes: usize) -> Result<Buffer, crate::Error> {
    Buffer::new(allocator_or_err(device)?, bytes, false)
}

/// A buffer of `bytes` zero bytes on `device`.
pub fn allocate_zeroed_on(device: Device, bytes: usize) -> Result<Buffer, crate::Error> {
    Buffer::new(allocator_or_err(device)?, bytes, true)
}

/// Sets the host allocator's mode; see [`set_mode_for`].
pub fn set_mode(mode: AllocMode) {
    set_mode_for(Device::Cpu, mode)
}

/// Sets `device`'s mode. Live buffers stay valid; switching to
/// [`AllocMode::MemoryEfficient`] also returns cached blocks to the system.
pub fn set_mode_for(device: Device, mode: AllocMode) {
    if let Some(a) = allocator(device) {
        a.set_mode(mode)
    }
}

/// The host allocator's mode.
pub fn mode() -> AllocMode {
    mode_for(Device::Cpu)
}

/// `device`'s mode.
pub fn mode_for(device: Device) -> AllocMode {
    allocator(device).map_or(AllocMode::default(), |a| a.mode())
}

/// Returns the host allocator's cached blocks to the system.
pub fn empty_cache() {
    empty_cache_for(Device::Cpu)
}

/// Returns `device`'s cached blocks to the system.
pub fn empty_cache_for(device: Device) {
    if let Some(a) = allocator(device) {
        a.empty_cache()
    }
}

/// The host allocator's statistics.
pub fn stats() -> AllocStats {
    stats_for(Device::Cpu)
}

/// `device`'s statistics.
pub fn stats_for(device: Device) -> AllocStats {
    allocator(device).map_or(AllocStats::default(), |a| a.stats())
}

/// Resets the host allocator's peaks to the current values.
pub fn reset_peak() {
    reset_peak_for(Device::Cpu)
}

/// Resets `device`'s peaks to the current values.
pub fn reset_peak_for(device: Device) {
    if let Some(a) = allocator(device) {
        a.reset_peak()
    }
}

/// Caps the host allocator's reserved bytes (`None`: no cap); see
/// [`set_memory_limit_for`].
pub fn set_memory_limit(limit: Option<usize>) {
    set_memory_limit_for(Device::Cpu, limit)
}

/// Caps `device`'s reserved bytes. An allocation that would exceed the cap
/// first empties the cache and retries once, then fails with
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory). Lowering the cap below
/// the current reserved bytes empties the cache; live buffers are untouched.
pub fn set_memory_limit_for(device: Device, limit: Option<usize>) {
    if let Some(a) = allocator(device) {
        a.set_limit(limit)
    }
}

/// The host allocator's limit.
pub fn memory_limit() -> Option<usize> {
    memory_limit_for(Device::Cpu)
}

/// `device`'s limit.
pub fn memory_limit_for(device: Device) -> Option<usize> {
    allocator(device).and_then(|a| a.limit())
}

#[cfg(test)]
mod tests {
    use super::pool::RawMemory;
    use super::*;
    use crate::Error;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Host memory that refuses to hold more than `capacity` bytes at once:
    /// a stand-in for a system (or device) that runs out.
    struct Scarce {
        capacity: usize,
        held: AtomicUsize,
    }

    impl RawMemory for Scarce {
        fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
            if self.held.load(Ordering::SeqCst) + size > self.capacity {
                return None;
            }
            let p = HostMemory.alloc(size)?;
            self.held.fetch_add(size, Ordering::SeqCst);
            Some(p)
        }
        unsafe fn dealloc(&self, ptr: NonNull<u8>, size: usize) {
            self.held.fetch_sub(size, Ordering::SeqCst);
            HostMemory.dealloc(ptr, size)
        }
        unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
            HostMemory.zero(ptr, len)
        }
    }

    /// The device allocator's logic against a fake device memory: both
    /// modes, statistics, the limit and the out-of-memory retry, and no
    /// host view of device memory.
    #[test]
    fn device_allocator_over_a_fake_device() {
        const N: usize = MAX_CUDA_DEVICES - 1;
        let dev = Device::Cuda(N);
        assert!(matches!(
            allocate_on(Device::Cuda(N - 3), 64),
            Err(Error::Device { .. })
        ));
        let fake = fake::FakeDevice::open(N, 8 << 20);
        assert!(!register_device_memory(N, fake), "registered once");
        // Runtime-efficient: after a warm-up iteration, no driver calls.
        set_mode_for(dev, AllocMode::RuntimeEfficient);
        let step = || {
            let a = allocate_on(dev, 3000).unwrap();
            let mut b = allocate_zeroed_on(dev, 2 << 20).unwrap();
            assert!(
                matches!(b.as_slice::<f32>(), Err(Error::Device { .. })),
                "device memory has no host view"
            );
            assert!(matches!(b.as_mut_slice::<f64>(), Err(Error::Device { .. })));
            assert_eq!(b.device(), dev);
            drop((a, b));
        };
        step();
        let mallocs = fake.mallocs.load(Ordering::SeqCst);
        for _ in 0..5 {
            step();
        }
        assert_eq!(
            fake.mallocs.load(Ordering::SeqCst),
            mallocs,
            "warm loop allocates nothing"
        );
        let st = stats_for(dev);
        assert_eq!(st.bytes_in_use, 0);
        assert!(st.bytes_reserved > 0 && st.pool_hits >= 10, "{st:?}");
        assert_eq!(
            st.bytes_reserved,
            fake.held.load(Ordering::SeqCst),
            "the device's statistics count the device's memory"
        );
        // Memory-efficient: freed at once.
        set_mode_for(dev, AllocMode::MemoryEfficient);
        assert_eq!(
            stats_for(dev).bytes_reserved,
            0,
            "switching empties the cache"
        );
        let frees = fake.frees.load(Ordering::SeqCst);
        drop(allocate_on(dev, 5000).unwrap());
        assert_eq!(fake.frees.load(Ordering::SeqCst), frees + 1);
        assert_eq!(fake.held.load(Ordering::SeqCst), 0);
        // OOM: a cached block is released and the request retried; then a
        // typed error, with live buffers untouched.
        set_mode_for(dev, AllocMode::RuntimeEfficient);
        let keep = allocate_on(dev, 3 << 20).unwrap();
        drop(allocate_on(dev, 4 << 20).unwrap()); // cached
        let retried = allocate_on(dev, (5 << 20) - 4096).expect("fits after emptying the cache");
        match allocate_on(dev, 6 << 20) {
            Err(Error::OutOfMemory { requested, .. }) => assert_eq!(requested, 6 << 20),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
        assert_eq!(keep.len_bytes(), 3 << 20);
        // The limit caps reserved bytes.
        drop(retried);
        set_memory_limit_for(dev, Some(4 << 20));
        assert!(matches!(
            allocate_on(dev, 2 << 20),
            Err(Error::OutOfMemory { limit: Some(_), .. })
        ));
        set_memory_limit_for(dev, None);
        drop(keep);
        empty_cache_for(dev);
        assert_eq!(fake.held.load(Ordering::SeqCst), 0);
        assert_eq!(stats_for(dev).bytes_reserved, 0);
    }

    /// A private allocator, so unit tests do not share global state.
    fn private(capacity: usize) -> (&'static Allocator, &'static Scarce) {
        let mem: &'static Scarce = Box::leak(Box::new(Scarce {
            capacity,
            held: AtomicUsize::new(0),
        }));
        (Box::leak(Box::new(Allocator::new(Device::Cpu, mem))), mem)
    }

    #[test]
    fn size_classes() {
        assert_eq!(size_class(1), Some(64));
        assert_eq!(size_class(64), Some(64));
        assert_eq!(size_class(4097), Some(8192));
        assert_eq!(size_class(SMALL_LIMIT - 1), Some(SMALL_LIMIT));
        assert_eq!(size_class(SMALL_LIMIT + 513), Some(SMALL_LIMIT + 1024));
        assert_eq!(size_class(usize::MAX - 10), None);
        assert_eq!(exact_size(65), Some(128));
        assert_eq!(exact_size(usize::MAX), None);
        for b in [0, 1, 63, 64, 1000, 5 << 20, (5 << 20) + 1] {
            let c = size_class(b).unwrap();
            assert!(c >= b && c.is_multiple_of(ALIGN) && size_class(c) == Some(c));
            let e = exact_size(b).unwrap();
            assert!(e >= b && e.is_multiple_of(ALIGN) && e <= c);
        }
    }

    #[test]
    fn system_refusal_empties_cache_and_retries() {
        let (a, mem) = private(4096);
        let b1 = Buffer::new(a, 2048, false).unwrap();
        let b2 = Buffer::new(a, 1024, false).unwrap();
        drop(b1); // cached: the system now holds 3072 of 4096 bytes
        assert_eq!(a.stats().bytes_reserved, 3072);
        // 2048 more does not fit the system unless the cache is emptied;
        // 3000 rounds to the 4096 class, which never fits.
        let b3 = Buffer::new(a, 3000, false).unwrap_err();
        assert!(matches!(
            b3,
            Error::OutOfMemory {
                requested: 3000,
                in_use: 1024,
                reserved: 1024,
                limit: None
            }
        ));
        assert_eq!(mem.held.load(Ordering::SeqCst), 1024);
        let b4 = Buffer::new(a, 2048, false).unwrap(); // fits after the flush
        let s = a.stats();
        assert_eq!((s.bytes_in_use, s.bytes_reserved), (3072, 3072));
        assert_eq!((s.allocations, s.frees), (3, 1));
        drop((b2, b4));
    }

    #[test]
    fn refusal_after_retry_keeps_contents() {
        let (a, _) = private(1 << 16);
        let mut b = Buffer::new(a, 1 << 15, true).unwrap();
        b.as_mut_slice::<f64>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f64);
        let err = Buffer::new(a, 1 << 16, false).unwrap_err();
        assert_eq!(
            err,
            Error::OutOfMemory {
                requested: 1 << 16,
                in_use: 1 << 15,
                reserved: 1 << 15,
                limit: None
            }
        );
        assert!(b
            .as_slice::<f64>()
            .unwrap()
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as f64));
    }

    #[test]
    fn mode_is_per_allocator_and_frees_follow_current_mode() {
        let (a, mem) = private(1 << 20);
        a.set_mode(AllocMode::MemoryEfficient);
        let b = Buffer::new(a, 100, false).unwrap();
        assert_eq!(b.block_bytes(), 128); // exact_size rounding, also a class
        a.set_mode(AllocMode::RuntimeEfficient);
        drop(b); // 128 is a class size: cached
        assert_eq!(a.stats().bytes_reserved, 128);
        let c = Buffer::new(a, 100, false).unwrap();
        assert_eq!(a.stats().pool_hits, 1);
        a.set_mode(AllocMode::MemoryEfficient);
        drop(c);
        assert_eq!(mem.held.load(Ordering::SeqCst), 0);
        assert_eq!(
            a.stats(),
            AllocStats {
                peak_in_use: 128,
                peak_reserved: 128,
                allocations: 1,
                frees: 1,
                pool_hits: 1,
                ..AllocStats::default()
            }
        );
    }

    #[test]
    fn zero_length_buffer() {
        let (a, _) = private(1 << 10);
        let b = Buffer::new(a, 0, true).unwrap();
        assert_eq!(b.len_bytes(), 0);
        assert!(b.as_slice::<f32>().unwrap().is_empty());
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
    }
}
