//! Persistent worker pool that splits the outermost loop of a CPU kernel.
//!
//! This module owns exactly two things:
//!
//! * **threads**: worker threads named `tenjin-pool-N`, spawned lazily (never more
//!   than [`num_threads`]` − 1`, and only when a call needs them) and kept for the
//!   lifetime of the process. Between jobs a worker busy-waits for 50 µs (so
//!   back-to-back kernels find it awake) and then parks on its own condvar, so
//!   an idle pool costs no CPU;
//! * **partitioning**: [`parallel_for`] cuts `0..n` into equal chunks (about four
//!   per thread, never shorter than `min_chunk` except the last) and hands them
//!   out with an atomic `fetch_add` over chunk indices. The calling thread
//!   participates and returns only when every chunk is done.
//!
//! It knows nothing about kernels, buffers, dtypes or cost models: deciding
//! whether a kernel is worth splitting (the work threshold, `min_chunk`) and
//! *what* a chunk computes is the caller's business. Because every index is
//! handed to exactly one `body(start, end)` call, a kernel that computes each
//! output element entirely inside the chunk that owns it produces bitwise
//! identical results for any thread count and any chunk-to-thread assignment.
//!
//! Concurrency rules:
//!
//! * **Concurrent callers** (different user threads calling [`parallel_for`] at
//!   the same time) are *serialised*: the pool runs one job at a time, guarded by
//!   a mutex; a second caller blocks until the first job is finished, then gets
//!   the pool. This avoids oversubscribing the cores.
//! * **Nesting**: a `parallel_for` issued from inside a `body` (on a worker or on
//!   the participating caller) runs inline as a single `body(0, n)` call.
//!   Caveat: a `body` that hands work to *another* thread which then calls
//!   `parallel_for`, and waits for it, deadlocks (that thread is not "inside the
//!   pool" and blocks on the mutex held by the running job).
//! * **Panics** in `body` are caught on whichever thread ran the chunk; the
//!   remaining chunks still run, and once all of them are finished the first
//!   payload is re-raised on the caller with [`std::panic::resume_unwind`]. The
//!   workers survive, so the pool stays usable.
//!
//! Protocol (one job at a time): the caller publishes the job and a new epoch
//! in one control word, wakes the parked workers it wants, and runs chunks
//! itself. A worker that notices the new epoch must *join* it (a CAS on the
//! control word that fails once the job is closed) before it may look at the
//! job. When the caller runs out of chunks it *closes* the job and waits only for
//! the workers that joined; a worker that was slow to wake up (busy core,
//! parked) simply misses the job, so the caller never waits for a thread that
//! has not started.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Upper bound on the thread count (counts are packed into 16-bit fields).
const MAX_THREADS: usize = 1 << 12;
/// Target number of chunks per thread (load balancing vs. per-chunk overhead).
const CHUNKS_PER_THREAD: usize = 4;
/// How long an idle worker (or a waiting caller) busy-waits before parking.
const SPIN: Duration = Duration::from_micros(50);

// Layout of the control word `Shared::ctl`:
//   bits  0..16  workers that joined the current job and have not left it;
//   bit  16      the job is closed (no more joins);
//   bits 17..33  participants: workers with index < this may join;
//   bits 33..64  epoch (wrapping; a worker fooled by a wrap merely misses a job).
const JOINED_MASK: u64 = 0xffff;
const CLOSED: u64 = 1 << 16;
const PARTICIPANTS_SHIFT: u32 = 17;
const EPOCH_SHIFT: u32 = 33;

fn epoch_of(ctl: u64) -> u64 {
    ctl >> EPOCH_SHIFT
}

fn participants_of(ctl: u64) -> usize {
    ((ctl >> PARTICIPANTS_SHIFT) & 0xffff) as usize
}

// ---------------------------------------------------------------------------
// Thread count
// ---------------------------------------------------------------------------

/// Value from [`set_num_threads`]; 0 means "not set".
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);
/// `TENJIN_NUM_THREADS`, else the available cores; read once.
static DEFAULT_THREADS: OnceLock<usize> = OnceLock::new();

fn default_threads() -> usize {
    let from_env = std::env::var("TENJIN_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let n = from_env.unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()));
    n.clamp(1, MAX_THREADS)
}

/// Number of threads kernels use: set_num_threads, else TENJIN_NUM_THREADS, else available cores.
///
/// `TENJIN_NUM_THREADS` is read once (on first use); `0` counts as 1 and an
/// unparsable value is ignored. The result is at least 1 (and capped at 4096).
pub fn num_threads() -> usize {
    match OVERRIDE.load(Ordering::Relaxed) {
        0 => *DEFAULT_THREADS.get_or_init(default_threads),
        n => n,
    }
}

/// Sets the thread count (n ≥ 1; 0 is treated as 1). Takes effect for the next parallel_for; the pool grows lazily, extra workers idle.
pub fn set_num_threads(n: usize) {
    OVERRIDE.store(n.clamp(1, MAX_THREADS), Ordering::Relaxed);
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

thread_local! {
    /// True on pool workers (always) and on a caller while it runs a job:
    /// `parallel_for` then runs inline instead of re-entering the pool.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// One job: lives on the stack of the `parallel_for` call that runs it.
struct Job<'a> {
    body: &'a (dyn Fn(usize, usize) + Sync + 'a),
    n: usize,
    chunk: usize,
    nchunks: usize,
    /// Next chunk index to hand out.
    next: AtomicUsize,
    /// First panic payload raised by `body`.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    /// Claims and runs chunks until none are left.
    fn run_chunks(&self) {
        loop {
            let c = self.next.fetch_add(1, Ordering::Relaxed);
            if c >= self.nchunks {
                return;
            }
            let start = c * self.chunk;
            let end = start + self.chunk.min(self.n - start); // no overflow near usize::MAX
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| (self.body)(start, end)))
            {
                let mut first = lock(&self.panic);
                if first.is_none() {
                    *first = Some(payload);
                } else {
                    drop(first);
                    // A payload whose destructor panics must not kill a worker.
                    let _ = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
                }
            }
        }
    }
}

/// State shared by the caller running the current job and the workers.
struct Shared {
    /// Control word, see the layout above.
    ctl: AtomicU64,
    /// The current `Job` (type- and lifetime-erased). Only a worker that has
    /// joined the current job may read it (see the SAFETY comments).
    job: AtomicPtr<()>,
    /// The caller is (about to be) parked on `done_cv`.
    caller_sleeping: AtomicBool,
    done_lock: Mutex<()>,
    done_cv: Condvar,
}

static SHARED: Shared = Shared {
    ctl: AtomicU64::new(CLOSED),
    job: AtomicPtr::new(std::ptr::null_mut()),
    caller_sleeping: AtomicBool::new(false),
    done_lock: Mutex::new(()),
    done_cv: Condvar::new(),
};

/// Per-worker parking spot.
struct Slot {
    sleeping: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

/// The workers; the mutex around it is also the lock that serialises jobs.
struct Pool {
    workers: Vec<Arc<Slot>>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    workers: Vec::new(),
});

/// Locks, ignoring poisoning (no invariant of ours can be broken by a panic
/// while one of these locks is held: `body` never runs under them).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A worker's stack: as large as a main thread's usual 8 MiB, so a kernel
/// that runs on the calling thread runs on a worker too (a large kernel's
/// spilled values take megabytes of frame; `symbolic::derive` bounds how
/// large a derivative may grow). Only touched pages are committed.
const WORKER_STACK: usize = 8 << 20;

/// Makes sure at least `want` workers exist; returns how many can be used
/// (fewer only if the OS refuses to spawn threads).
fn ensure_workers(pool: &mut Pool, want: usize) -> usize {
    while pool.workers.len() < want {
        let index = pool.workers.len();
        let slot = Arc::new(Slot {
            sleeping: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        });
        // We hold the pool lock, so no job is open: the new worker starts at
        // the current epoch and waits for the next one.
        let seen = epoch_of(SHARED.ctl.load(Ordering::SeqCst));
        let worker_slot = Arc::clone(&slot);
        let spawned = thread::Builder::new()
            .name(format!("tenjin-pool-{index}"))
            .stack_size(WORKER_STACK)
            .spawn(move || worker_main(index, &worker_slot, seen));
        if spawned.is_err() {
            break;
        }
        pool.workers.push(slot);
    }
    want.min(pool.workers.len())
}

/// One step of the spin phase shared by idle workers and the waiting caller;
/// returns false once [`SPIN`] has elapsed and it is time to park.
///
/// This is a pure busy-wait: no `yield_now`. Measured here (Linux 6.18, EEVDF
/// scheduler, 2 cores oversubscribed by other processes), yielding in the spin
/// loop pushes the spinning worker's scheduling deadline back on every call, so
/// when a job does arrive the worker is starved: it ran 15 % of the chunks of a
/// 2-thread job instead of about 50 % without yields.
fn backoff(spins: u32, start: Instant) -> bool {
    std::hint::spin_loop();
    !(spins.is_multiple_of(64) && start.elapsed() > SPIN)
}

/// Waits until the epoch differs from `seen`; returns the new control word.
fn wait_for_job(slot: &Slot, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let ctl = SHARED.ctl.load(Ordering::Relaxed);
        if epoch_of(ctl) != seen {
            return ctl;
        }
        spins = spins.wrapping_add(1);
        if !backoff(spins, start) {
            break;
        }
    }
    // Park. Dekker-style handshake with `parallel_for` (all SeqCst): we store
    // `sleeping` then load `ctl`; the caller stores `ctl` then loads
    // `sleeping`. At least one side sees the other's store, so either we see
    // the new epoch or the caller notifies us (under `slot.lock`, which we hold
    // until `wait` releases it, so the notification cannot be lost).
    let mut guard = lock(&slot.lock);
    slot.sleeping.store(true, Ordering::SeqCst);
    loop {
        let ctl = SHARED.ctl.load(Ordering::SeqCst);
        if epoch_of(ctl) != seen {
            slot.sleeping.store(false, Ordering::SeqCst);
            return ctl;
        }
        guard = slot.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
}

fn worker_main(index: usize, slot: &Slot, mut seen: u64) {
    IN_POOL.with(|f| f.set(true));
    let mut ctl = SHARED.ctl.load(Ordering::Relaxed);
    loop {
        if epoch_of(ctl) == seen {
            ctl = wait_for_job(slot, seen);
        }
        seen = epoch_of(ctl);
        // Join the job of epoch `seen` unless it is closed or not for us.
        let joined = loop {
            if epoch_of(ctl) != seen || ctl & CLOSED != 0 || index >= participants_of(ctl) {
                break false;
            }
            match SHARED.ctl.compare_exchange_weak(
                ctl,
                ctl + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break true,
                Err(now) => ctl = now,
            }
        };
        if !joined {
            // Missed it (or a newer epoch is already up: handled next round).
            // The job pointer may be dangling: never read it here.
            continue;
        }
        // SAFETY: our CAS incremented the joined count of the job that is
        // current right now (open, so its caller is still inside
        // `parallel_for`). That caller does not return (so the `Job` on its
        // stack, and everything `body` borrows, stays alive) until the joined
        // count is back to 0, i.e. until after our `fetch_sub` below; and no
        // other job can be published before it returns. The caller stored
        // `job` before its Release store of `ctl`, and our successful CAS is an
        // Acquire read of that store's value, so the pointer and the `Job`
        // contents are visible.
        let job = unsafe { &*(SHARED.job.load(Ordering::Relaxed) as *const Job<'static>) };
        job.run_chunks();
        // Leave the job. `job` must not be touched after this point. (Release
        // half: publishes our chunks' writes to the caller.)
        let prev = SHARED.ctl.fetch_sub(1, Ordering::SeqCst);
        if prev & JOINED_MASK == 1 && prev & CLOSED != 0 {
            wake_caller();
        }
        ctl = prev - 1;
    }
}

/// Called by the last worker to leave a closed job. Touches only `SHARED`.
/// (A stale wake-up reaching a later caller is harmless: it re-checks `ctl`.)
fn wake_caller() {
    if SHARED.caller_sleeping.load(Ordering::SeqCst) {
        let _g = lock(&SHARED.done_lock);
        SHARED.done_cv.notify_one();
    }
}

/// Caller side, after its own chunks: closes the job to further joins and waits
/// until every worker that joined has left.
fn close_and_wait() {
    let prev = SHARED.ctl.fetch_or(CLOSED, Ordering::AcqRel);
    if prev & JOINED_MASK == 0 {
        return;
    }
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if SHARED.ctl.load(Ordering::Acquire) & JOINED_MASK == 0 {
            return;
        }
        spins = spins.wrapping_add(1);
        if !backoff(spins, start) {
            break;
        }
    }
    // Same handshake as in `wait_for_job`, with the joined count.
    let mut guard = lock(&SHARED.done_lock);
    SHARED.caller_sleeping.store(true, Ordering::SeqCst);
    while SHARED.ctl.load(Ordering::SeqCst) & JOINED_MASK != 0 {
        guard = SHARED
            .done_cv
            .wait(guard)
            .unwrap_or_else(|e| e.into_inner());
    }
    SHARED.caller_sleeping.store(false, Ordering::SeqCst);
}

/// Aborts the process if dropped, i.e. if `parallel_for` unwinds while workers
/// may still hold a pointer to its job (never expected to fire).
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

/// Marks the current thread as inside the pool while it lives.
struct InPoolGuard(bool);

impl InPoolGuard {
    fn enter() -> Self {
        InPoolGuard(IN_POOL.with(|f| f.replace(true)))
    }
}

impl Drop for InPoolGuard {
    fn drop(&mut self) {
        let prev = self.0;
        IN_POOL.with(|f| f.set(prev));
    }
}

/// Runs body(start, end) over disjoint chunks that cover 0..n exactly once, each at least `min_chunk` long except possibly the last,
/// on the persistent pool with the calling thread participating; returns when every chunk is done.
/// Runs inline (one call body(0, n)) when n ≤ min_chunk, when num_threads() == 1, or when called from inside a pool worker (nesting).
/// A panic in body is propagated to the caller after all chunks finished (the pool stays usable).
///
/// Details: `min_chunk == 0` counts as 1; `n == 0` therefore means one call
/// `body(0, 0)`. Chunks all have the same length except the last (shorter) one;
/// there are at most `4 · num_threads()` of them. Which thread runs which chunk
/// is unspecified (the caller may run all of them if the workers are slow to
/// wake). Concurrent calls from different threads are serialised (see the
/// module documentation), and a call from inside a running `body` (on a worker
/// or on the participating caller) runs inline.
pub fn parallel_for(n: usize, min_chunk: usize, body: &(dyn Fn(usize, usize) + Sync)) {
    let min_chunk = min_chunk.max(1);
    let threads = num_threads();
    if n <= min_chunk || threads == 1 || IN_POOL.with(|f| f.get()) {
        body(0, n);
        return;
    }
    // n > min_chunk ≥ 1, so n / min_chunk ≥ 1. With `want ≤ n / min_chunk`,
    // `chunk = ⌈n / want⌉ ≥ min_chunk`.
    let want = threads.saturating_mul(CHUNKS_PER_THREAD).min(n / min_chunk);
    let chunk = n.div_ceil(want);
    let nchunks = n.div_ceil(chunk);
    if nchunks <= 1 {
        body(0, n);
        return;
    }

    let mut pool = lock(&POOL);
    let participants = ensure_workers(&mut pool, (threads - 1).min(nchunks - 1));
    let _in_pool = InPoolGuard::enter();
    if participants == 0 {
        // Could not spawn any worker: run everything here.
        drop(pool);
        body(0, n);
        return;
    }

    let job = Job {
        body,
        n,
        chunk,
        nchunks,
        next: AtomicUsize::new(0),
        panic: Mutex::new(None),
    };

    // Publish the job. SAFETY (lifetime extension): workers see `job` as a
    // `Job<'static>`, but only a worker that joined this (open) job reads the
    // pointer, and only until it leaves. `close_and_wait` returns only when all
    // joined workers have left and no new one can join, and we cannot leave
    // this function before it: `body` panics are caught in `run_chunks`, and
    // should anything else unwind in between, `abort_on_unwind` aborts the
    // process instead of freeing `job` under the workers' feet. So `job` and
    // everything `body` borrows outlive every use. The previous job is closed
    // with no one joined (we hold the pool lock and the previous caller
    // waited), so a plain store is fine.
    let abort_on_unwind = AbortOnUnwind;
    SHARED.job.store(
        (&job as *const Job<'_>).cast::<()>().cast_mut(),
        Ordering::Relaxed,
    );
    let epoch = (epoch_of(SHARED.ctl.load(Ordering::Relaxed)) + 1) & (u64::MAX >> EPOCH_SHIFT);
    SHARED.ctl.store(
        (epoch << EPOCH_SHIFT) | ((participants as u64) << PARTICIPANTS_SHIFT),
        Ordering::SeqCst,
    );
    for slot in &pool.workers[..participants] {
        // Handshake with `wait_for_job` (see there).
        if slot.sleeping.load(Ordering::SeqCst) {
            let _g = lock(&slot.lock);
            slot.cv.notify_one();
        }
    }

    job.run_chunks();
    close_and_wait();
    std::mem::forget(abort_on_unwind);
    SHARED.job.store(std::ptr::null_mut(), Ordering::Relaxed);
    drop(pool);
    drop(_in_pool);

    let payload = job.panic.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(payload) = payload {
        panic::resume_unwind(payload);
    }
}

/// Serialises unit tests that change the global thread count (these in
/// particular assert how many threads participate). Other unit tests in this
/// crate that call [`set_num_threads`] should hold it too.
#[cfg(test)]
pub(crate) fn test_serial() -> MutexGuard<'static, ()> {
    static TEST_LOCK: Mutex<()> = Mutex::new(());
    lock(&TEST_LOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicU32;

    /// Tests change the global thread count: run them one at a time.
    fn serial() -> MutexGuard<'static, ()> {
        test_serial()
    }

    /// Runs `parallel_for` and returns the chunks it produced, checking that
    /// every index was visited exactly once.
    fn run_and_check(n: usize, min_chunk: usize) -> Vec<(usize, usize)> {
        let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        let chunks = Mutex::new(Vec::new());
        parallel_for(n, min_chunk, &|s, e| {
            assert!(s <= e && e <= n, "bad chunk {s}..{e} for n = {n}");
            for c in &counts[s..e] {
                c.fetch_add(1, Ordering::Relaxed);
            }
            lock(&chunks).push((s, e));
        });
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(
                c.load(Ordering::Relaxed),
                1,
                "index {i}, n = {n}, min_chunk = {min_chunk}"
            );
        }
        let mut chunks = chunks.into_inner().unwrap();
        chunks.sort();
        chunks
    }

    #[test]
    fn coverage_and_chunk_sizes() {
        let _s = serial();
        for threads in 1..=4 {
            set_num_threads(threads);
            for &n in &[0usize, 1, 2, 7, 1000, 100_003] {
                for &min_chunk in &[1usize, 16, 4096] {
                    let chunks = run_and_check(n, min_chunk);
                    if n <= min_chunk || threads == 1 {
                        assert_eq!(chunks, vec![(0, n)], "inline expected");
                    }
                    assert!(chunks.len() <= (4 * threads).max(1));
                    // Disjoint, contiguous, covering.
                    let mut at = 0;
                    for &(s, e) in &chunks {
                        assert_eq!(s, at);
                        at = e;
                        if e != n {
                            assert!(e - s >= min_chunk, "chunk {s}..{e} < {min_chunk}");
                        }
                    }
                    assert_eq!(at, n);
                }
            }
        }
    }

    #[test]
    fn zero_thread_count_means_one() {
        let _s = serial();
        set_num_threads(0);
        assert_eq!(num_threads(), 1);
        assert_eq!(run_and_check(1000, 1), vec![(0, 1000)]);
        set_num_threads(3);
        assert_eq!(num_threads(), 3);
    }

    #[test]
    fn huge_ranges_do_not_overflow() {
        let _s = serial();
        set_num_threads(3);
        for &(n, min_chunk) in &[
            (usize::MAX, 1),
            (usize::MAX, usize::MAX / 5),
            (usize::MAX - 1, 7),
        ] {
            let chunks = Mutex::new(Vec::new());
            parallel_for(n, min_chunk, &|s, e| lock(&chunks).push((s, e)));
            let mut chunks = chunks.into_inner().unwrap();
            chunks.sort();
            assert!(chunks.len() > 1 && chunks.len() <= 12);
            let mut at = 0;
            for &(s, e) in &chunks {
                assert_eq!(s, at);
                assert!(e > s && (e == n || e - s >= min_chunk));
                at = e;
            }
            assert_eq!(at, n);
        }
    }

    #[test]
    fn env_var_default() {
        let _s = serial();
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        let saved = std::env::var_os("TENJIN_NUM_THREADS");
        for (value, expected) in [("3", 3), (" 2 ", 2), ("0", 1), ("many", cores)] {
            std::env::set_var("TENJIN_NUM_THREADS", value);
            assert_eq!(default_threads(), expected, "TENJIN_NUM_THREADS={value:?}");
        }
        std::env::remove_var("TENJIN_NUM_THREADS");
        assert_eq!(default_threads(), cores);
        if let Some(v) = saved {
            std::env::set_var("TENJIN_NUM_THREADS", v);
        }
    }

    #[test]
    fn nesting_runs_inline() {
        let _s = serial();
        set_num_threads(4);
        let outer_calls = AtomicUsize::new(0);
        let inner_ok = AtomicUsize::new(0);
        parallel_for(64, 1, &|s, e| {
            outer_calls.fetch_add(1, Ordering::Relaxed);
            let me = thread::current().id();
            for _ in s..e {
                let calls = Mutex::new(Vec::new());
                parallel_for(1000, 1, &|a, b| {
                    assert_eq!(thread::current().id(), me, "nested call left the thread");
                    lock(&calls).push((a, b));
                });
                assert_eq!(calls.into_inner().unwrap(), vec![(0, 1000)]);
                inner_ok.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(
            outer_calls.load(Ordering::Relaxed) > 1,
            "outer loop was not split"
        );
        assert_eq!(inner_ok.load(Ordering::Relaxed), 64);
        // The caller's "inside the pool" flag was reset.
        assert!(run_and_check(1000, 1).len() > 1);
    }

    #[test]
    fn panics_propagate_and_pool_survives() {
        let _s = serial();
        for threads in 1..=4 {
            set_num_threads(threads);
            let n = 10_000;
            let visited = AtomicUsize::new(0);
            let panicked_len = AtomicUsize::new(0);
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                parallel_for(n, 1, &|s, e| {
                    if (s..e).contains(&5000) {
                        panicked_len.store(e - s, Ordering::Relaxed);
                        panic!("boom at {s}..{e}");
                    }
                    thread::sleep(Duration::from_micros(200));
                    visited.fetch_add(e - s, Ordering::Relaxed);
                });
            }));
            let payload = r.expect_err("panic was swallowed");
            let msg = payload.downcast_ref::<String>().expect("String payload");
            assert!(msg.starts_with("boom at"), "{msg}");
            // Every other chunk had finished when the panic reached us.
            assert_eq!(
                visited.load(Ordering::Relaxed) + panicked_len.load(Ordering::Relaxed),
                n
            );
            // The pool still works.
            for _ in 0..20 {
                run_and_check(100_003, 16);
            }
        }
    }

    #[test]
    fn concurrent_callers() {
        let _s = serial();
        set_num_threads(3);
        thread::scope(|scope| {
            for t in 0..4 {
                scope.spawn(move || {
                    for i in 0..300 {
                        let n = 1 + (t * 7919 + i * 104_729) % 20_000;
                        run_and_check(n, 1 + i % 50);
                    }
                });
            }
        });
        set_num_threads(4);
        thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..200 {
                        run_and_check(4096, 1);
                    }
                });
            }
        });
    }

    /// Distinct threads that run chunks of one call. Each chunk waits (up to
    /// 10 s) until `expected` threads have shown up, so every woken worker gets
    /// to claim a chunk even on a loaded machine, and no thread can take more
    /// than its share before the others have joined.
    fn participating_threads(expected: usize) -> usize {
        let ids = Mutex::new(HashSet::new());
        parallel_for(1 << 16, 1, &|_, _| {
            lock(&ids).insert(thread::current().id());
            let t0 = Instant::now();
            while lock(&ids).len() < expected && t0.elapsed() < Duration::from_secs(10) {
                thread::sleep(Duration::from_micros(100));
            }
        });
        let ids = ids.into_inner().unwrap();
        ids.len()
    }

    #[test]
    fn thread_count_controls_participants() {
        let _s = serial();
        for &t in &[1usize, 4, 2, 3, 1, 4] {
            set_num_threads(t);
            assert_eq!(participating_threads(t), t, "set_num_threads({t})");
            // After running with 4 threads, a 2-thread call uses at most 2:
            // the extra workers idle.
            if t == 2 {
                let ids = Mutex::new(HashSet::new());
                parallel_for(1 << 16, 1, &|_, _| {
                    lock(&ids).insert(thread::current().id());
                    thread::sleep(Duration::from_millis(2));
                });
                assert!(ids.into_inner().unwrap().len() <= 2);
            }
        }
        // Workers are reused, never more than max(threads) - 1 of them.
        assert_eq!(lock(&POOL).workers.len(), 3);
    }

    /// Overhead of an empty `parallel_for` with 2 threads.
    /// `cargo test --release -- --ignored --nocapture overhead`
    #[test]
    #[ignore]
    fn overhead() {
        let _s = serial();
        set_num_threads(2);
        let body = |_: usize, _: usize| {};
        let measure = |n: usize, calls: usize| {
            for _ in 0..1000 {
                parallel_for(n, 1, &body);
            }
            let mut t: Vec<f64> = (0..calls)
                .map(|_| {
                    let t0 = Instant::now();
                    parallel_for(n, 1, &body);
                    t0.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            t.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let q = |p: f64| t[((calls - 1) as f64 * p) as usize];
            println!(
                "parallel_for(n = {n}, 2 threads, empty body): median {:.3} µs, p10 {:.3}, p90 {:.3}, p99 {:.3} µs",
                q(0.5),
                q(0.1),
                q(0.9),
                q(0.99)
            );
        };
        measure(2, 10_000);
        measure(1 << 20, 10_000);
        // With an empty body the caller usually finishes both chunks before the
        // worker has joined, so the numbers above are the bookkeeping cost. To
        // measure a real hand-off, make each chunk wait (up to 1 ms) until both
        // chunks have started: the call then cannot finish before the worker
        // has joined, run its chunk and left.
        let started = AtomicUsize::new(0);
        let handoff = |_: usize, _: usize| {
            started.fetch_add(1, Ordering::AcqRel);
            let t0 = Instant::now();
            while started.load(Ordering::Acquire) < 2 && t0.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
        };
        let mut t: Vec<f64> = (0..10_000)
            .map(|_| {
                started.store(0, Ordering::Relaxed);
                let t0 = Instant::now();
                parallel_for(2, 1, &handoff);
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "forced hand-off to the worker (2 threads, 2 chunks): median {:.3} µs, p10 {:.3}, p90 {:.3}, p99 {:.3} µs",
            t[5_000], t[1_000], t[9_000], t[9_900]
        );
        // After the workers parked: wake-up latency.
        let mut t: Vec<f64> = (0..200)
            .map(|_| {
                thread::sleep(Duration::from_millis(1));
                let t0 = Instant::now();
                parallel_for(2, 1, &body);
                t0.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("after 1 ms idle (workers parked): median {:.3} µs", t[100]);
    }
}
