//! A block's shared memory on the simulated device, and the races a
//! missing barrier leaves in it.
//!
//! Owns [`SharedLayout`] (a module's `.shared` variables: their sizes,
//! alignments and addresses in the shared window, which starts at 0 as on
//! the hardware) and [`SharedMemory`] (one block's bytes, filled with
//! `0xFF` at the start so a read before any write shows as NaN or -1).
//! The instructions between two barriers form a *phase*; within one, a
//! word stored by one thread and loaded or stored by another is a race
//! (reported with both threads), because on the hardware the order of
//! the two is not defined. Must not know about global memory or the
//! interpreter's registers.

use std::collections::HashMap;

/// Race tracking is per 4-byte word.
const WORD: u64 = 4;
/// A word's loads in one phase came from more than one thread.
const SEVERAL: u64 = u64::MAX;

/// A module's `.shared` variables.
#[derive(Debug, Default)]
pub(crate) struct SharedLayout {
    symbols: HashMap<String, u64>,
    bytes: u64,
}

impl SharedLayout {
    /// Adds the variable of a declaration such as `.shared .align 8 .b8
    /// tile[2048];` or `.shared .f32 sum[256];` (its address: the next
    /// offset with its alignment).
    pub(crate) fn declare(&mut self, line: &str) -> Result<(), String> {
        let bad = || format!("unsupported shared declaration `{line}`");
        let words: Vec<&str> = line.trim_end_matches(';').split_whitespace().collect();
        let (&last, modifiers) = words.split_last().ok_or_else(bad)?;
        let width = modifiers
            .iter()
            .find_map(|w| match *w {
                ".b8" | ".u8" | ".s8" => Some(1),
                ".b16" | ".u16" | ".s16" | ".f16" => Some(2),
                ".b32" | ".u32" | ".s32" | ".f32" => Some(4),
                ".b64" | ".u64" | ".s64" | ".f64" => Some(8),
                _ => None,
            })
            .ok_or_else(bad)?;
        let align = match modifiers.iter().position(|w| *w == ".align") {
            Some(k) => modifiers
                .get(k + 1)
                .and_then(|a| a.parse::<u64>().ok())
                .filter(|a| a.is_power_of_two())
                .ok_or_else(bad)?,
            None => width,
        };
        let (name, count) = match last.split_once('[') {
            Some((name, n)) => {
                let n = n.strip_suffix(']').and_then(|n| n.parse::<u64>().ok());
                (name, n.ok_or_else(bad)?)
            }
            None => (last, 1),
        };
        let at = self.bytes.div_ceil(align) * align;
        self.bytes = at + count * width;
        self.symbols.insert(name.to_string(), at);
        Ok(())
    }

    /// The variables' addresses by name.
    pub(crate) fn symbols(&self) -> &HashMap<String, u64> {
        &self.symbols
    }
}

/// One block's shared memory with the current phase's accesses.
pub(crate) struct SharedMemory {
    bytes: Vec<u8>,
    /// Per word: the phase and thread of its last store (phase 0: none).
    stores: Vec<(u32, u64)>,
    /// Per word: the phase of its last load and the thread (or
    /// [`SEVERAL`]) that loaded it then.
    loads: Vec<(u32, u64)>,
    phase: u32,
}

impl SharedMemory {
    pub(crate) fn new(layout: &SharedLayout) -> SharedMemory {
        let words = layout.bytes.div_ceil(WORD) as usize;
        SharedMemory {
            bytes: vec![0xFF; layout.bytes as usize],
            stores: vec![(0, 0); words],
            loads: vec![(0, 0); words],
            phase: 1,
        }
    }

    /// Every thread of the block passed a barrier.
    pub(crate) fn next_phase(&mut self) {
        self.phase += 1;
    }

    /// The words of `size` bytes at `addr`, checked in bounds and aligned.
    fn words(&self, addr: u64, size: usize) -> Result<std::ops::Range<usize>, String> {
        let end = addr.checked_add(size as u64);
        if end.is_none_or(|e| e > self.bytes.len() as u64) {
            return Err(format!(
                "{size} bytes at shared address {addr:#x} lie outside the {} bytes of shared memory",
                self.bytes.len()
            ));
        }
        if !addr.is_multiple_of(size as u64) {
            return Err(format!(
                "misaligned shared access of {size} bytes at {addr:#x}"
            ));
        }
        Ok((addr / WORD) as usize..(addr + size as u64).div_ceil(WORD) as usize)
    }

    pub(crate) fn load(&mut self, addr: u64, size: usize, thread: u64) -> Result<u64, String> {
        for w in self.words(addr, size)? {
            let (phase, writer) = self.stores[w];
            if phase == self.phase && writer != thread {
                return Err(format!(
                    "a race: shared address {addr:#x} is loaded after thread {writer} stored it with no barrier between"
                ));
            }
            let (phase, reader) = &mut self.loads[w];
            if *phase == self.phase && *reader != thread {
                *reader = SEVERAL;
            } else if *phase != self.phase {
                (*phase, *reader) = (self.phase, thread);
            }
        }
        let mut le = [0u8; 8];
        le[..size].copy_from_slice(&self.bytes[addr as usize..addr as usize + size]);
        Ok(u64::from_le_bytes(le))
    }

    pub(crate) fn store(
        &mut self,
        addr: u64,
        size: usize,
        bits: u64,
        thread: u64,
    ) -> Result<(), String> {
        for w in self.words(addr, size)? {
            let (phase, writer) = self.stores[w];
            if phase == self.phase && writer != thread {
                return Err(format!(
                    "a race: threads {writer} and {thread} store shared address {addr:#x} with no barrier between"
                ));
            }
            let (phase, reader) = self.loads[w];
            if phase == self.phase && reader != thread {
                let who = if reader == SEVERAL {
                    "other threads".to_string()
                } else {
                    format!("thread {reader}")
                };
                return Err(format!(
                    "a race: shared address {addr:#x} is stored after {who} loaded it with no barrier between"
                ));
            }
            self.stores[w] = (self.phase, thread);
        }
        self.bytes[addr as usize..addr as usize + size]
            .copy_from_slice(&bits.to_le_bytes()[..size]);
        Ok(())
    }
}
