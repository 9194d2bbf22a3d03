//! The simulated device's memory: host blocks at addresses the host
//! cannot dereference, reachable only through the driver.
//!
//! Owns [`SimMemory`] (the device's `RawMemory` for the pooled allocator:
//! blocks at non-canonical x86-64 addresses, so host code that
//! dereferences a device pointer faults instead of reading; addresses are
//! never reused, so a pointer into a freed block is reported as a use
//! after free) and [`LaunchMemory`], the view one kernel launch has of it:
//! every access must fall inside one of the launch's buffer arguments
//! (out of bounds otherwise), be aligned, store only into a writable
//! argument (a store into an input is an error), and no element may be
//! stored by two threads (tracked per 4-byte word, and per 2-byte half
//! word in a region that 2-byte stores are made to).

use super::super::driver::Arg;
use super::interp::Memory;
use crate::alloc::RawMemory;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// The first address handed out: non-canonical on x86-64 (bits 48–63 are
/// not the sign extension of bit 47), so dereferencing it faults.
const BASE: u64 = 0xD000_0000_0000_0000;
/// Blocks are 64-byte aligned and separated by a gap, so an access that
/// runs past a block's end lands in no block.
const ALIGN: u64 = 64;
const GAP: u64 = 4096;

pub(crate) struct Blocks {
    /// Live blocks by address.
    live: BTreeMap<u64, Vec<u8>>,
    /// Freed blocks by address, with their sizes (use-after-free reports).
    freed: BTreeMap<u64, usize>,
    next: u64,
}

impl Blocks {
    /// The live block holding `addr..addr + len` and the offset of `addr`.
    fn find(&mut self, addr: u64, len: usize) -> Result<(&mut Vec<u8>, usize), String> {
        let found = self.live.range_mut(..=addr).next_back();
        if let Some((&start, bytes)) = found {
            let off = (addr - start) as usize;
            if off.checked_add(len).is_some_and(|end| end <= bytes.len()) {
                return Ok((bytes, off));
            }
        }
        if let Some((&start, &size)) = self.freed.range(..=addr).next_back() {
            if addr < start + size as u64 {
                return Err(format!(
                    "use after free: {addr:#x} lies in a block of {size} bytes freed earlier"
                ));
            }
        }
        Err(format!(
            "{len} bytes at {addr:#x} lie in no live device block"
        ))
    }

    /// Copies `dst.len()` bytes at device address `src` to the host.
    pub(crate) fn read(&mut self, src: u64, dst: &mut [u8]) -> Result<(), String> {
        let (bytes, off) = self.find(src, dst.len())?;
        dst.copy_from_slice(&bytes[off..off + dst.len()]);
        Ok(())
    }

    /// Copies host bytes to device address `dst`.
    pub(crate) fn write(&mut self, dst: u64, src: &[u8]) -> Result<(), String> {
        let (bytes, off) = self.find(dst, src.len())?;
        bytes[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }
}

/// The simulated device's memory.
pub(crate) struct SimMemory {
    blocks: Mutex<Blocks>,
}

impl SimMemory {
    pub(crate) fn new() -> SimMemory {
        SimMemory {
            blocks: Mutex::new(Blocks {
                live: BTreeMap::new(),
                freed: BTreeMap::new(),
                next: BASE,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RawMemory for SimMemory {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let mut b = self.lock();
        let addr = b.next;
        b.next = addr.checked_add((size as u64).div_ceil(ALIGN) * ALIGN + GAP)?;
        b.live.insert(addr, vec![0u8; size]);
        NonNull::new(addr as *mut u8)
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, size: usize) {
        let mut b = self.lock();
        let addr = ptr.as_ptr() as u64;
        if b.live.remove(&addr).is_some() {
            b.freed.insert(addr, size);
        }
    }

    unsafe fn zero(&self, ptr: NonNull<u8>, len: usize) -> Result<(), String> {
        let mut b = self.lock();
        let (bytes, off) = b.find(ptr.as_ptr() as u64, len)?;
        bytes[off..off + len].fill(0);
        Ok(())
    }
}

/// One buffer argument of a launch.
struct Region {
    start: u64,
    end: u64,
    writable: bool,
    /// The held block it lies in (`None` when empty) and its offset
    /// there.
    block: Option<usize>,
    delta: usize,
    /// Per 4-byte word of a writable region: 1 + the thread that stored
    /// it (0: none yet), for stores of 4 and 8 bytes.
    writers: Vec<u64>,
    /// The same per 2-byte half word, for 2-byte stores (two threads may
    /// store the two halves of one word); allocated on the region's first
    /// 2-byte store. A store of either width checks the other's record.
    halves: Vec<u64>,
}

/// The memory one launch sees: its buffer arguments, checked. The blocks
/// they lie in are taken out of the device's map for the launch (one look-
/// up per block, not per access) and put back when it ends.
pub(crate) struct LaunchMemory<'m> {
    blocks: &'m mut Blocks,
    /// Blocks taken for the launch: their addresses and bytes.
    held: Vec<(u64, Vec<u8>)>,
    regions: Vec<Region>,
    /// The region of the last load.
    last: std::cell::Cell<usize>,
}

impl<'m> LaunchMemory<'m> {
    /// The buffer arguments of a launch, each checked to lie in a live
    /// block.
    pub(crate) fn new(blocks: &'m mut Blocks, args: &[Arg]) -> Result<LaunchMemory<'m>, String> {
        let mut launch = LaunchMemory {
            blocks,
            held: Vec::new(),
            regions: Vec::new(),
            last: std::cell::Cell::new(0),
        };
        for (k, a) in args.iter().enumerate() {
            let Arg::Buffer {
                addr,
                bytes,
                writable,
            } = *a
            else {
                continue;
            };
            let block = if bytes == 0 {
                None
            } else {
                Some(
                    launch
                        .hold(addr, bytes)
                        .map_err(|e| format!("argument {k}: {e}"))?,
                )
            };
            let delta = block.map_or(0, |b| (addr - launch.held[b].0) as usize);
            launch.regions.push(Region {
                start: addr,
                end: addr + bytes as u64,
                writable,
                block,
                delta,
                writers: if writable {
                    vec![0; bytes.div_ceil(4)]
                } else {
                    Vec::new()
                },
                halves: Vec::new(),
            });
        }
        Ok(launch)
    }

    /// The held block containing `addr..addr + len`, taken from the map
    /// if not held yet.
    fn hold(&mut self, addr: u64, len: usize) -> Result<usize, String> {
        let inside = |(start, bytes): &(u64, Vec<u8>)| {
            addr >= *start && addr + len as u64 <= start + bytes.len() as u64
        };
        if let Some(k) = self.held.iter().position(inside) {
            return Ok(k);
        }
        let (_, off) = self.blocks.find(addr, len)?;
        let start = addr - off as u64;
        let bytes = self.blocks.live.remove(&start).unwrap_or_default();
        self.held.push((start, bytes));
        Ok(self.held.len() - 1)
    }

    fn describe(&self) -> String {
        let r: Vec<String> = self
            .regions
            .iter()
            .map(|r| format!("{:#x}..{:#x}", r.start, r.end))
            .collect();
        r.join(", ")
    }

    /// Checks alignment and that `addr..addr + size` lies in a region
    /// (a writable one for a store); returns that region.
    fn region(&self, addr: u64, size: usize, store: bool) -> Result<usize, String> {
        if !addr.is_multiple_of(size as u64) {
            return Err(format!("misaligned {size}-byte access at {addr:#x}"));
        }
        let inside = |r: &Region| addr >= r.start && addr + size as u64 <= r.end;
        // The common case first: a load from the region of the last load.
        let last = self.last.get();
        if !store && self.regions.get(last).is_some_and(inside) {
            return Ok(last);
        }
        if store {
            if let Some(k) = self.regions.iter().position(|r| r.writable && inside(r)) {
                return Ok(k);
            }
            if self.regions.iter().any(inside) {
                return Err(format!("a store into an input at {addr:#x}"));
            }
        } else if let Some(k) = self.regions.iter().position(inside) {
            self.last.set(k);
            return Ok(k);
        }
        Err(format!(
            "out of bounds: {size} bytes at {addr:#x} lie outside every argument ({})",
            self.describe()
        ))
    }

    /// The bytes of region `k` at `addr`.
    fn bytes(&mut self, k: usize, addr: u64, size: usize) -> &mut [u8] {
        let r = &self.regions[k];
        // A region found by `region` has a block (it is not empty).
        let off = r.delta + (addr - r.start) as usize;
        &mut self.held[r.block.unwrap_or(0)].1[off..off + size]
    }
}

impl Drop for LaunchMemory<'_> {
    fn drop(&mut self) {
        for (start, bytes) in self.held.drain(..) {
            self.blocks.live.insert(start, bytes);
        }
    }
}

impl Memory for LaunchMemory<'_> {
    fn load(&mut self, addr: u64, size: usize) -> Result<u64, String> {
        let k = self.region(addr, size, false)?;
        let mut buf = [0u8; 8];
        buf[..size].copy_from_slice(self.bytes(k, addr, size));
        Ok(u64::from_le_bytes(buf))
    }

    fn store(&mut self, addr: u64, size: usize, bits: u64, thread: u64) -> Result<(), String> {
        let k = self.region(addr, size, true)?;
        let r = &mut self.regions[k];
        let both = |w: u64| format!("threads {} and {thread} both store to {addr:#x}", w - 1);
        let offset = (addr - r.start) as usize;
        if size == 2 {
            if r.halves.is_empty() {
                r.halves = vec![0; r.writers.len() * 2];
            }
            let w = r.writers[offset / 4];
            if w != 0 && w != thread + 1 {
                return Err(both(w));
            }
            let h = &mut r.halves[offset / 2];
            if *h != 0 && *h != thread + 1 {
                return Err(both(*h));
            }
            *h = thread + 1;
        } else {
            let first = offset / 4;
            for w in &mut r.writers[first..first + size / 4] {
                if *w != 0 && *w != thread + 1 {
                    return Err(both(*w));
                }
                *w = thread + 1;
            }
            if !r.halves.is_empty() {
                for &h in &r.halves[offset / 2..(offset + size) / 2] {
                    if h != 0 && h != thread + 1 {
                        return Err(both(h));
                    }
                }
            }
        }
        self.bytes(k, addr, size)
            .copy_from_slice(&bits.to_le_bytes()[..size]);
        Ok(())
    }
}
