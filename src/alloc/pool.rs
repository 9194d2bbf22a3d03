//! The per-device allocator: size classes, the caching pool, statistics and
//! the out-of-memory protocol. Raw memory comes from a [`RawMemory`]
//! backend, so a device allocator plugs in by implementing that trait.

use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use super::{AllocMode, AllocStats, Device};
use crate::Error;

/// Alignment of every block, in bytes (one cache line, enough for AVX-512).
pub const ALIGN: usize = 64;

/// Requests up to this many bytes are pooled in power-of-two size classes.
pub const SMALL_LIMIT: usize = 1 << 20;

/// A runtime-efficient pool never trims its cache below this many bytes.
pub const TRIM_FLOOR: usize = 8 << 20;

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
    /// Sets `len` bytes at `ptr` (inside a block of this memory) to zero.
    ///
    /// # Safety
    /// `ptr..ptr+len` lies in a live block obtained from `self.alloc`.
    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String>;
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

    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
        std::ptr::write_bytes(ptr.as_ptr(), 0, len);
        Ok(())
    }
}

/// A cached block's address. Blocks in the free lists are owned by the pool.
struct Block(NonNull<u8>);
// SAFETY: a cached block is plain memory owned by the pool, not aliased.
unsafe impl Send for Block {}

/// A block of the large pool: part (or all) of a segment, one system
/// allocation.
struct LargeBlock {
    size: usize,
    /// The address of its segment.
    segment: usize,
    /// When it became free (the pool's clock), `None` while in use.
    free_since: Option<u64>,
}

/// Blocks above [`SMALL_LIMIT`] in runtime-efficient mode, as in PyTorch's
/// caching allocator: a request takes the smallest free block that fits
/// (best fit) and splits off the rest as a free block of its own; a freed
/// block merges with free neighbours of its segment. A smaller request
/// thus reuses a larger cached block, and a segment whose blocks are all
/// free is one block again, which can go back to the system.
struct LargePool {
    /// Every block by address.
    blocks: BTreeMap<usize, LargeBlock>,
    /// Free blocks by (size, address), for best fit.
    free: BTreeSet<(usize, usize)>,
    /// Segment address → size.
    segments: BTreeMap<usize, usize>,
}

impl LargePool {
    /// Takes the best-fitting free block for `size` bytes, splitting off
    /// the rest: its address.
    fn take(&mut self, size: usize, now: u64) -> Option<usize> {
        let &(found, addr) = self.free.range((size, 0)..).next()?;
        self.free.remove(&(found, addr));
        let block = self.blocks.get_mut(&addr)?;
        block.size = size;
        block.free_since = None;
        let segment = block.segment;
        if found > size {
            let rest = addr + size;
            self.blocks.insert(
                rest,
                LargeBlock {
                    size: found - size,
                    segment,
                    free_since: Some(now),
                },
            );
            self.free.insert((found - size, rest));
        }
        Some(addr)
    }

    /// Registers a new segment, in use as one block.
    fn add_segment(&mut self, addr: usize, size: usize) {
        self.segments.insert(addr, size);
        self.blocks.insert(
            addr,
            LargeBlock {
                size,
                segment: addr,
                free_since: None,
            },
        );
    }

    /// Marks the block at `addr` free and merges it with free neighbours
    /// in its segment; `false` when `addr` is not a large block.
    fn give_back(&mut self, addr: usize, now: u64) -> bool {
        let Some(block) = self.blocks.get(&addr) else {
            return false;
        };
        let (mut start, mut size, segment) = (addr, block.size, block.segment);
        let next = addr + size;
        if let Some(n) = self.blocks.get(&next) {
            if n.segment == segment && n.free_since.is_some() {
                self.free.remove(&(n.size, next));
                size += n.size;
                self.blocks.remove(&next);
            }
        }
        if let Some((&p, prev)) = self.blocks.range(..addr).next_back() {
            if prev.segment == segment && prev.free_since.is_some() && p + prev.size == addr {
                self.free.remove(&(prev.size, p));
                size += prev.size;
                self.blocks.remove(&addr);
                start = p;
            }
        }
        self.blocks.insert(
            start,
            LargeBlock {
                size,
                segment,
                free_since: Some(now),
            },
        );
        self.free.insert((size, start));
        true
    }

    /// The segments whose blocks are all free: (free since, address, size).
    fn whole_free_segments(&self) -> Vec<(u64, usize, usize)> {
        self.segments
            .iter()
            .filter_map(|(&addr, &size)| {
                let b = self.blocks.get(&addr)?;
                Some((b.free_since?, addr, size)).filter(|_| b.size == size)
            })
            .collect()
    }

    /// Forgets the wholly free segment at `addr` (the caller frees it).
    fn remove_segment(&mut self, addr: usize, size: usize) {
        self.segments.remove(&addr);
        self.blocks.remove(&addr);
        self.free.remove(&(size, addr));
    }
}

struct State {
    mode: AllocMode,
    limit: Option<usize>,
    /// Free lists by block size up to [`SMALL_LIMIT`] (runtime-efficient
    /// mode only), each block with the time it was freed.
    cache: BTreeMap<usize, Vec<(Block, u64)>>,
    /// Blocks above [`SMALL_LIMIT`] (runtime-efficient mode only).
    large: LargePool,
    /// The pool's clock: one tick per free.
    clock: u64,
    in_use: usize,
    cached: usize,
    peak_in_use: usize,
    peak_reserved: usize,
    allocations: u64,
    frees: u64,
    pool_hits: u64,
    pool_misses: u64,
    trims: u64,
}

impl State {
    /// Returns cached blocks to the system, least recently freed first,
    /// until at most `target` bytes are cached (or nothing more can go:
    /// free parts of segments still in use stay).
    fn trim(&mut self, memory: &dyn RawMemory, target: usize) {
        let mut candidates: Vec<(u64, usize, usize, bool)> = self
            .large
            .whole_free_segments()
            .into_iter()
            .map(|(t, addr, size)| (t, addr, size, true))
            .collect();
        for (&size, blocks) in &self.cache {
            for (Block(ptr), t) in blocks {
                candidates.push((*t, ptr.as_ptr() as usize, size, false));
            }
        }
        candidates.sort_unstable();
        let mut released_small: std::collections::HashSet<usize> = Default::default();
        for (_, addr, size, large) in candidates {
            if self.cached <= target {
                break;
            }
            if large {
                self.large.remove_segment(addr, size);
            } else {
                released_small.insert(addr);
            }
            self.release(memory, addr, size);
        }
        if !released_small.is_empty() {
            for blocks in self.cache.values_mut() {
                blocks.retain(|(Block(p), _)| !released_small.contains(&(p.as_ptr() as usize)));
            }
            self.cache.retain(|_, blocks| !blocks.is_empty());
        }
    }

    /// Gives the cached block (or wholly free segment) of `size` bytes at
    /// `addr`, which the pool no longer lists, back to the system.
    fn release(&mut self, memory: &dyn RawMemory, addr: usize, size: usize) {
        if let Some(ptr) = NonNull::new(addr as *mut u8) {
            // SAFETY: cached blocks and segments came from
            // `memory.alloc(size)`, and nothing refers to this one now.
            unsafe { memory.dealloc(ptr, size) };
        }
        self.cached -= size;
        self.frees += 1;
    }

    /// Returns every wholly free large segment to the system.
    fn release_free_segments(&mut self, memory: &dyn RawMemory) {
        for (_, addr, size) in self.large.whole_free_segments() {
            self.large.remove_segment(addr, size);
            self.release(memory, addr, size);
        }
    }

    fn release_cache(&mut self, memory: &dyn RawMemory) {
        for (size, blocks) in std::mem::take(&mut self.cache) {
            for (Block(ptr), _) in blocks {
                self.release(memory, ptr.as_ptr() as usize, size);
            }
        }
        self.release_free_segments(memory);
    }

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
                large: LargePool {
                    blocks: BTreeMap::new(),
                    free: BTreeSet::new(),
                    segments: BTreeMap::new(),
                },
                clock: 0,
                in_use: 0,
                cached: 0,
                peak_in_use: 0,
                peak_reserved: 0,
                allocations: 0,
                frees: 0,
                pool_hits: 0,
                pool_misses: 0,
                trims: 0,
            }),
        }
    }

    pub(crate) fn device(&self) -> Device {
        self.device
    }

    pub(crate) fn memory(&self) -> &'static dyn RawMemory {
        self.memory
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements that can panic (none do
        // while the lock is held), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block for `requested` bytes: `(address, block size)`.
    pub(crate) fn alloc(&self, requested: usize) -> Result<(NonNull<u8>, usize), Error> {
        let mut st = self.lock();
        let runtime = st.mode == AllocMode::RuntimeEfficient;
        let size = match st.mode {
            AllocMode::RuntimeEfficient => {
                let size = size_class(requested).ok_or_else(|| st.oom(requested))?;
                let now = st.clock;
                let hit = if size <= SMALL_LIMIT {
                    st.cache
                        .get_mut(&size)
                        .and_then(Vec::pop)
                        .map(|(Block(ptr), _)| ptr)
                } else {
                    st.large
                        .take(size, now)
                        .and_then(|addr| NonNull::new(addr as *mut u8))
                };
                if let Some(ptr) = hit {
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
                    if runtime && size > SMALL_LIMIT {
                        st.large.add_segment(ptr.as_ptr() as usize, size);
                    }
                    st.note_peaks();
                    return Ok((ptr, size));
                }
            }
            if attempt == 0 {
                st.release_cache(self.memory);
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
        st.clock += 1;
        let now = st.clock;
        let runtime = st.mode == AllocMode::RuntimeEfficient;
        if st.large.give_back(ptr.as_ptr() as usize, now) {
            st.cached += size;
            if !runtime {
                st.release_free_segments(self.memory);
            }
        } else if runtime && size <= SMALL_LIMIT && size_class(size) == Some(size) {
            st.cached += size;
            st.cache.entry(size).or_default().push((Block(ptr), now));
        } else {
            self.memory.dealloc(ptr, size);
            st.frees += 1;
        }
        if runtime && st.cached > st.peak_in_use.max(TRIM_FLOOR) {
            st.trims += 1;
            let target = st.peak_in_use.max(TRIM_FLOOR) / 2;
            st.trim(self.memory, target);
        }
    }

    pub(crate) fn empty_cache(&self) {
        let mut st = self.lock();
        st.release_cache(self.memory);
    }

    pub(crate) fn set_mode(&self, mode: AllocMode) {
        let mut st = self.lock();
        st.mode = mode;
        if mode == AllocMode::MemoryEfficient {
            st.release_cache(self.memory);
        }
    }

    pub(crate) fn mode(&self) -> AllocMode {
        self.lock().mode
    }

    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        let mut st = self.lock();
        st.limit = limit;
        if limit.is_some_and(|l| st.reserved() > l) {
            st.release_cache(self.memory);
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
            cache_trims: st.trims,
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
        let memory = self.memory;
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        st.release_cache(memory);
    }
}
