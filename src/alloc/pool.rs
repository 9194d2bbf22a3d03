//! The per-device allocator: size classes, the caching pool, statistics and
//! the out-of-memory protocol. Raw memory comes from a [`RawMemory`]
//! backend, so a device allocator plugs in by implementing that trait.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use super::{AllocMode, AllocStats, Device};
use crate::Error;

/// Alignment of every block, in bytes (one cache line, enough for AVX-512).
pub const ALIGN: usize = 64;

/// Requests up to this many bytes are pooled in power-of-two size classes.
pub const SMALL_LIMIT: usize = 1 << 20;

/// Requests above [`SMALL_LIMIT`] are pooled in multiples of this many bytes.
pub const LARGE_GRANULE: usize = 512;

/// The block size a request of `bytes` gets in runtime-efficient mode: the
/// next power of two that is at least [`ALIGN`] for requests up to
/// [`SMALL_LIMIT`] (1 MiB), and the next multiple of [`LARGE_GRANULE`]
/// (512 B) above it. `None` when the rounded size does not fit in `usize`.
///
/// ```
/// use tenjin::alloc::size_class;
/// assert_eq!(size_class(0), Some(64));
/// assert_eq!(size_class(65), Some(128));
/// assert_eq!(size_class(1 << 20), Some(1 << 20));
/// assert_eq!(size_class((1 << 20) + 1), Some((1 << 20) + 512));
/// assert_eq!(size_class(usize::MAX), None);
/// ```
pub fn size_class(bytes: usize) -> Option<usize> {
    let b = bytes.max(ALIGN);
    if b <= SMALL_LIMIT {
        Some(b.next_power_of_two())
    } else {
        round_up(b, LARGE_GRANULE)
    }
}

/// The block size a request of `bytes` gets in memory-efficient mode: the
/// next multiple of [`ALIGN`] (at least one). `None` on overflow.
///
/// ```
/// use tenjin::alloc::exact_size;
/// assert_eq!(exact_size(0), Some(64));
/// assert_eq!(exact_size(100), Some(128));
/// assert_eq!(exact_size(3 << 20), Some(3 << 20));
/// ```
pub fn exact_size(bytes: usize) -> Option<usize> {
    round_up(bytes.max(ALIGN), ALIGN)
}

fn round_up(b: usize, granule: usize) -> Option<usize> {
    b.checked_add(granule - 1).map(|x| x / granule * granule)
}

/// Where an allocator gets its raw memory from: the system heap for the host,
/// a driver for a device. Implementations must not panic or abort on
/// refusal: they return `None`.
pub(crate) trait RawMemory: Sync {
    /// A block of `size` bytes aligned to [`ALIGN`], with initialised
    /// contents (host blocks are zeroed), or `None` if refused.
    fn alloc(&self, size: usize) -> Option<NonNull<u8>>;
    /// Returns a block obtained from [`RawMemory::alloc`] with this `size`.
    ///
    /// # Safety
    /// `ptr` came from `self.alloc(size)` and is not used afterwards.
    unsafe fn dealloc(&self, ptr: NonNull<u8>, size: usize);
}

/// Host memory from the global Rust allocator.
pub(crate) struct HostMemory;

impl RawMemory for HostMemory {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let layout = std::alloc::Layout::from_size_align(size, ALIGN).ok()?;
        // Zeroed so that every byte a `Buffer` exposes is initialised (typed
        // views are then sound); pool hits reuse already-initialised blocks.
        // SAFETY: size ≥ ALIGN > 0.
        NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, size: usize) {
        let layout = std::alloc::Layout::from_size_align_unchecked(size, ALIGN);
        std::alloc::dealloc(ptr.as_ptr(), layout);
    }
}

/// A cached block's address. Blocks in the free lists are owned by the pool.
struct Block(NonNull<u8>);
// SAFETY: a cached block is plain memory owned by the pool, not aliased.
unsafe impl Send for Block {}

struct State {
    mode: AllocMode,
    limit: Option<usize>,
    /// Free lists by block size (runtime-efficient mode only).
    cache: BTreeMap<usize, Vec<Block>>,
    in_use: usize,
    cached: usize,
    peak_in_use: usize,
    peak_reserved: usize,
    allocations: u64,
    frees: u64,
    pool_hits: u64,
    pool_misses: u64,
}

impl State {
    fn reserved(&self) -> usize {
        self.in_use + self.cached
    }

    fn note_peaks(&mut self) {
        self.peak_in_use = self.peak_in_use.max(self.in_use);
        self.peak_reserved = self.peak_reserved.max(self.reserved());
    }

    fn oom(&self, requested: usize) -> Error {
        Error::OutOfMemory {
            requested,
            in_use: self.in_use,
            reserved: self.reserved(),
            limit: self.limit,
        }
    }
}

/// One device's allocator: a mode, a pool, a limit and statistics behind a
/// mutex. All methods may be called from any thread.
pub(crate) struct Allocator {
    device: Device,
    memory: &'static dyn RawMemory,
    state: Mutex<State>,
}

impl Allocator {
    pub(crate) const fn new(device: Device, memory: &'static dyn RawMemory) -> Self {
        Allocator {
            device,
            memory,
            state: Mutex::new(State {
                mode: AllocMode::RuntimeEfficient,
                limit: None,
                cache: BTreeMap::new(),
                in_use: 0,
                cached: 0,
                peak_in_use: 0,
                peak_reserved: 0,
                allocations: 0,
                frees: 0,
                pool_hits: 0,
                pool_misses: 0,
            }),
        }
    }

    pub(crate) fn device(&self) -> Device {
        self.device
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements that can panic (none do
        // while the lock is held), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block for `requested` bytes: `(address, block size)`.
    pub(crate) fn alloc(&self, requested: usize) -> Result<(NonNull<u8>, usize), Error> {
        let mut st = self.lock();
        let size = match st.mode {
            AllocMode::RuntimeEfficient => {
                let size = size_class(requested).ok_or_else(|| st.oom(requested))?;
                if let Some(Block(ptr)) = st.cache.get_mut(&size).and_then(Vec::pop) {
                    st.cached -= size;
                    st.in_use += size;
                    st.pool_hits += 1;
                    st.note_peaks();
                    return Ok((ptr, size));
                }
                st.pool_misses += 1;
                size
            }
            AllocMode::MemoryEfficient => exact_size(requested).ok_or_else(|| st.oom(requested))?,
        };
        // Over the limit or refused by the system: empty the cache, retry once.
        for attempt in 0..2 {
            let fits = match (st.limit, st.reserved().checked_add(size)) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(limit), Some(after)) => after <= limit,
            };
            if fits {
                if let Some(ptr) = self.memory.alloc(size) {
                    st.allocations += 1;
                    st.in_use += size;
                    st.note_peaks();
                    return Ok((ptr, size));
                }
            }
            if attempt == 0 {
                self.release_cache(&mut st);
            }
        }
        Err(st.oom(requested))
    }

    /// Takes back a block of `size` bytes handed out by [`Allocator::alloc`].
    ///
    /// # Safety
    /// `ptr` came from `self.alloc` with block size `size` and is not used
    /// afterwards.
    pub(crate) unsafe fn free(&self, ptr: NonNull<u8>, size: usize) {
        let mut st = self.lock();
        st.in_use -= size;
        if st.mode == AllocMode::RuntimeEfficient && size_class(size) == Some(size) {
            st.cached += size;
            st.cache.entry(size).or_default().push(Block(ptr));
        } else {
            self.memory.dealloc(ptr, size);
            st.frees += 1;
        }
    }

    fn release_cache(&self, st: &mut State) {
        for (size, blocks) in std::mem::take(&mut st.cache) {
            for Block(ptr) in blocks {
                // SAFETY: cached blocks came from `self.memory.alloc(size)`.
                unsafe { self.memory.dealloc(ptr, size) };
                st.frees += 1;
                st.cached -= size;
            }
        }
    }

    pub(crate) fn empty_cache(&self) {
        let mut st = self.lock();
        self.release_cache(&mut st);
    }

    pub(crate) fn set_mode(&self, mode: AllocMode) {
        let mut st = self.lock();
        st.mode = mode;
        if mode == AllocMode::MemoryEfficient {
            self.release_cache(&mut st);
        }
    }

    pub(crate) fn mode(&self) -> AllocMode {
        self.lock().mode
    }

    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        let mut st = self.lock();
        st.limit = limit;
        if limit.is_some_and(|l| st.reserved() > l) {
            self.release_cache(&mut st);
        }
    }

    pub(crate) fn limit(&self) -> Option<usize> {
        self.lock().limit
    }

    pub(crate) fn stats(&self) -> AllocStats {
        let st = self.lock();
        AllocStats {
            bytes_in_use: st.in_use,
            peak_in_use: st.peak_in_use,
            bytes_reserved: st.reserved(),
            peak_reserved: st.peak_reserved,
            allocations: st.allocations,
            frees: st.frees,
            pool_hits: st.pool_hits,
            pool_misses: st.pool_misses,
        }
    }

    pub(crate) fn reset_peak(&self) {
        let mut st = self.lock();
        st.peak_in_use = st.in_use;
        st.peak_reserved = st.reserved();
    }
}

impl Drop for Allocator {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (size, blocks) in std::mem::take(&mut st.cache) {
            for Block(ptr) in blocks {
                // SAFETY: cached blocks came from `self.memory.alloc(size)`.
                unsafe { self.memory.dealloc(ptr, size) };
            }
        }
    }
}
