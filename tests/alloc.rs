//! The host allocator through its public API: pool reuse, memory-efficient
//! freeing, statistics, alignment, the cache, limits and out-of-memory.
//! The allocator is global, so tests run one at a time and start from a
//! reset state.

use std::sync::{Mutex, MutexGuard};
use tenjin::alloc::{self, AllocMode, Buffer};
use tenjin::Error;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial(mode: AllocMode) -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    alloc::set_mode(mode);
    alloc::set_memory_limit(None);
    alloc::empty_cache();
    alloc::reset_peak();
    guard
}

fn fill(b: &mut Buffer, seed: f32) {
    for (i, x) in b.as_mut_slice::<f32>().unwrap().iter_mut().enumerate() {
        *x = seed + i as f32;
    }
}

fn intact(b: &Buffer, seed: f32) -> bool {
    b.as_slice::<f32>()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &x)| x == seed + i as f32)
}

#[test]
fn runtime_efficient_reuses_blocks() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let a = alloc::allocate(3000).unwrap();
    drop(a);
    let s0 = alloc::stats();
    let b = alloc::allocate(4096).unwrap(); // same 4096-B class
    let s1 = alloc::stats();
    assert_eq!(s1.pool_hits, s0.pool_hits + 1);
    assert_eq!(s1.pool_misses, s0.pool_misses);
    assert_eq!(s1.allocations, s0.allocations);
    assert_eq!(s1.bytes_reserved, s0.bytes_reserved);
    assert_eq!(s1.bytes_in_use, s0.bytes_in_use + 4096);
    drop(b);
}

#[test]
fn fixed_pattern_is_flat_after_first_iteration() {
    let _g = serial(AllocMode::RuntimeEfficient);
    // A "training step": parameters live throughout, activations and
    // gradients of mixed sizes (small and large classes) come and go.
    let params: Vec<Buffer> = [784 * 512 * 4, 512 * 4, 512 * 10 * 4]
        .iter()
        .map(|&n| alloc::allocate_zeroed(n).unwrap())
        .collect();
    let step = || {
        let mut live = Vec::new();
        for &n in &[
            256 * 512 * 4,
            256 * 512 * 4,
            256 * 10 * 4,
            40,
            256 * 512 * 4,
        ] {
            live.push(alloc::allocate(n).unwrap());
        }
        live.truncate(2);
        for &n in &[784 * 512 * 4 + 12, 512 * 4, 256 * 512 * 4] {
            live.push(alloc::allocate(n).unwrap());
        }
    };
    step();
    let first = alloc::stats();
    for _ in 0..100 {
        step();
        let s = alloc::stats();
        assert_eq!(
            s.allocations, first.allocations,
            "no system allocation after step 1"
        );
        assert_eq!(s.frees, first.frees);
        assert_eq!(
            s.bytes_reserved, first.bytes_reserved,
            "reserved stays flat"
        );
        assert_eq!(s.peak_reserved, first.peak_reserved);
        assert_eq!(s.pool_misses, first.pool_misses);
    }
    assert_eq!(alloc::stats().pool_hits, first.pool_hits + 100 * 8);
    drop(params);
}

#[test]
fn memory_efficient_frees_immediately() {
    let _g = serial(AllocMode::MemoryEfficient);
    let s0 = alloc::stats();
    let b = alloc::allocate(100_000).unwrap();
    assert_eq!(b.block_bytes(), 100_032); // 64-B rounding only
    let s1 = alloc::stats();
    assert_eq!(s1.bytes_reserved, s0.bytes_reserved + 100_032);
    assert_eq!(s1.allocations, s0.allocations + 1);
    drop(b);
    let s2 = alloc::stats();
    assert_eq!(s2.bytes_reserved, s0.bytes_reserved);
    assert_eq!(s2.bytes_in_use, s0.bytes_in_use);
    assert_eq!(s2.frees, s0.frees + 1);
    assert_eq!(
        (s2.pool_hits, s2.pool_misses),
        (s0.pool_hits, s0.pool_misses)
    );
}

#[test]
fn stats_arithmetic_and_reset_peak() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let s0 = alloc::stats();
    assert_eq!(s0.bytes_cached(), 0);
    let a = alloc::allocate(1000).unwrap(); // 1024
    let b = alloc::allocate(5000).unwrap(); // 8192
    let c = alloc::allocate((1 << 20) + 1).unwrap(); // 1 MiB + 512
    assert_eq!(c.block_bytes(), (1 << 20) + 512);
    let held = 1024 + 8192 + (1 << 20) + 512;
    let s1 = alloc::stats();
    assert_eq!(s1.bytes_in_use, s0.bytes_in_use + held);
    assert_eq!(s1.bytes_reserved, s0.bytes_reserved + held);
    assert_eq!(s1.peak_in_use, s1.bytes_in_use);
    assert_eq!(s1.peak_reserved, s1.bytes_reserved);
    assert_eq!(s1.pool_misses, s0.pool_misses + 3);
    drop(c);
    let s2 = alloc::stats();
    assert_eq!(s2.bytes_in_use, s1.bytes_in_use - ((1 << 20) + 512));
    assert_eq!(
        s2.bytes_reserved, s1.bytes_reserved,
        "cached, still reserved"
    );
    assert_eq!(s2.bytes_cached(), (1 << 20) + 512);
    assert_eq!(s2.peak_in_use, s1.peak_in_use);
    alloc::reset_peak();
    let s3 = alloc::stats();
    assert_eq!(s3.peak_in_use, s3.bytes_in_use);
    assert_eq!(s3.peak_reserved, s3.bytes_reserved);
    alloc::empty_cache();
    let s4 = alloc::stats();
    assert_eq!(s4.bytes_reserved, s4.bytes_in_use);
    assert_eq!(
        s4.peak_reserved, s3.peak_reserved,
        "peaks only grow until reset"
    );
    assert_eq!(s4.frees, s3.frees + 1);
    drop((a, b));
}

#[test]
fn alignment_and_zeroing() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let mut held = Vec::new();
    for n in [0, 1, 3, 63, 64, 65, 1000, 4096, 100_003, 3 << 20] {
        let b = alloc::allocate_zeroed(n).unwrap();
        assert_eq!(b.as_ptr() as usize % 64, 0, "{n} bytes");
        assert_eq!(b.len_bytes(), n);
        assert!(b.block_bytes() >= n);
        assert_eq!(b.as_slice::<f32>().unwrap().len(), n / 4);
        assert_eq!(b.as_slice::<f64>().unwrap().len(), n / 8);
        assert!(b.as_slice::<f64>().unwrap().iter().all(|&x| x == 0.0));
        held.push(b);
    }
    // A reused block is zeroed again on request.
    let mut b = alloc::allocate(4000).unwrap();
    fill(&mut b, 7.0);
    drop(b);
    let hits = alloc::stats().pool_hits;
    let z = alloc::allocate_zeroed(4000).unwrap();
    assert_eq!(alloc::stats().pool_hits, hits + 1);
    assert!(z.as_slice::<f32>().unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn empty_cache_returns_blocks() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let s0 = alloc::stats();
    let bufs: Vec<Buffer> = (0..10)
        .map(|i| alloc::allocate(1000 * (i + 1)).unwrap())
        .collect();
    let s1 = alloc::stats();
    drop(bufs);
    let s2 = alloc::stats();
    assert_eq!(s2.bytes_in_use, s0.bytes_in_use);
    assert_eq!(s2.bytes_reserved, s1.bytes_reserved);
    alloc::empty_cache();
    let s3 = alloc::stats();
    assert_eq!(s3.bytes_reserved, s0.bytes_reserved);
    assert_eq!(s3.frees - s2.frees, s1.allocations - s0.allocations);
    // After emptying, the next request misses again.
    let _b = alloc::allocate(1000).unwrap();
    assert_eq!(alloc::stats().pool_misses, s3.pool_misses + 1);
}

#[test]
fn limit_gives_out_of_memory_and_keeps_data() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let base = alloc::stats();
    assert_eq!(base.bytes_cached(), 0);
    let limit = base.bytes_reserved + (1 << 20);
    alloc::set_memory_limit(Some(limit));
    assert_eq!(alloc::memory_limit(), Some(limit));
    let mut bufs: Vec<Buffer> = (0..4)
        .map(|_| alloc::allocate(128 << 10).unwrap())
        .collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        fill(b, 1000.0 * i as f32);
    }
    // Leave 128 KiB cached, 384 KiB in use: reserved = base + 512 KiB.
    let cached = bufs.pop().unwrap();
    drop(cached);
    let s = alloc::stats();
    assert_eq!(s.bytes_reserved, base.bytes_reserved + (512 << 10));
    // 768 KiB does not fit even after the cache is emptied.
    let err = alloc::allocate(700 << 10).unwrap_err();
    let in_use = base.bytes_in_use + (384 << 10);
    assert_eq!(
        err,
        Error::OutOfMemory {
            requested: 700 << 10,
            in_use,
            reserved: in_use,
            limit: Some(limit),
        }
    );
    assert!(err.to_string().contains("out of memory"));
    assert_eq!(alloc::stats().bytes_cached(), 0, "the cache was emptied");
    for (i, b) in bufs.iter().enumerate() {
        assert!(intact(b, 1000.0 * i as f32), "buffer {i} corrupted");
    }
    // Free one buffer (cached: 256 KiB in use, 384 KiB reserved) and a
    // 512 KiB request (the 512 KiB class) now fits under the limit.
    drop(bufs.remove(0));
    let mut big = alloc::allocate(500 << 10).unwrap();
    assert_eq!(big.block_bytes(), 512 << 10);
    fill(&mut big, -5.0);
    for (i, b) in bufs.iter().enumerate() {
        assert!(
            intact(b, 1000.0 * (i + 1) as f32),
            "buffer {} corrupted",
            i + 1
        );
    }
    assert!(intact(&big, -5.0));
    assert!(alloc::stats().bytes_reserved <= limit);
    drop(big);
    alloc::set_memory_limit(None);
}

#[test]
fn limit_retry_succeeds_by_emptying_cache() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let base = alloc::stats();
    alloc::set_memory_limit(Some(base.bytes_reserved + (1 << 20)));
    drop(alloc::allocate(1 << 20).unwrap()); // the whole budget, now cached
    let s = alloc::stats();
    // A different class does not fit beside the cached block; the allocator
    // empties the cache, retries and succeeds.
    let b = alloc::allocate(1000).unwrap();
    let t = alloc::stats();
    assert_eq!(t.frees, s.frees + 1);
    assert_eq!(t.allocations, s.allocations + 1);
    assert_eq!(t.bytes_reserved, base.bytes_reserved + 1024);
    drop(b);
    alloc::set_memory_limit(None);
}

#[test]
fn huge_request_is_an_error_not_an_abort() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let s0 = alloc::stats();
    for mode in [AllocMode::RuntimeEfficient, AllocMode::MemoryEfficient] {
        alloc::set_mode(mode);
        for n in [usize::MAX / 2, usize::MAX, usize::MAX - 63, 1 << 62] {
            match alloc::allocate(n) {
                Err(Error::OutOfMemory {
                    requested, limit, ..
                }) => {
                    assert_eq!(requested, n);
                    assert_eq!(limit, None);
                }
                other => panic!("{n} bytes in {mode:?}: {other:?}"),
            }
        }
    }
    let s1 = alloc::stats();
    assert_eq!(s1.bytes_in_use, s0.bytes_in_use);
    assert_eq!(s1.allocations, s0.allocations);
}

#[test]
fn mode_switch_with_live_buffers() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let base = alloc::stats();
    let mut pooled = alloc::allocate(10_000).unwrap(); // 16384 class
    fill(&mut pooled, 1.0);
    drop(alloc::allocate(500).unwrap()); // a cached 512 block
    alloc::set_mode(AllocMode::MemoryEfficient);
    assert_eq!(alloc::mode(), AllocMode::MemoryEfficient);
    assert_eq!(
        alloc::stats().bytes_cached(),
        0,
        "switching empties the cache"
    );
    let mut exact = alloc::allocate(10_000).unwrap();
    assert_eq!(exact.block_bytes(), 10_048);
    fill(&mut exact, 2.0);
    assert!(intact(&pooled, 1.0));
    alloc::set_mode(AllocMode::RuntimeEfficient);
    let frees = alloc::stats().frees;
    drop(exact); // not a class size: back to the system even in pool mode
    assert_eq!(alloc::stats().frees, frees + 1);
    alloc::set_mode(AllocMode::MemoryEfficient);
    drop(pooled); // a pooled block freed in memory-efficient mode
    let s = alloc::stats();
    assert_eq!(s.frees, frees + 2);
    assert_eq!(s.bytes_in_use, base.bytes_in_use);
    assert_eq!(s.bytes_reserved, base.bytes_reserved);
    alloc::set_mode(AllocMode::RuntimeEfficient);
}

#[test]
fn many_threads() {
    let _g = serial(AllocMode::RuntimeEfficient);
    let base = alloc::stats();
    std::thread::scope(|scope| {
        for t in 0..8 {
            scope.spawn(move || {
                for i in 0..500 {
                    let n = 64 << ((t + i) % 12);
                    let mut b = alloc::allocate(n).unwrap();
                    fill(&mut b, (t * 1000 + i) as f32);
                    assert!(intact(&b, (t * 1000 + i) as f32));
                    if i % 50 == 0 {
                        alloc::set_mode(if i % 100 == 0 {
                            AllocMode::MemoryEfficient
                        } else {
                            AllocMode::RuntimeEfficient
                        });
                    }
                }
            });
        }
    });
    // Buffers moved across threads are freed correctly too.
    let b = alloc::allocate(1 << 12).unwrap();
    std::thread::spawn(move || drop(b)).join().unwrap();
    alloc::set_mode(AllocMode::RuntimeEfficient);
    alloc::empty_cache();
    let s = alloc::stats();
    assert_eq!(s.bytes_in_use, base.bytes_in_use);
    assert_eq!(s.bytes_reserved, base.bytes_reserved);
    assert_eq!(s.allocations - base.allocations, s.frees - base.frees);
}
