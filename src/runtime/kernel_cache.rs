//! The process-wide kernel cache, its statistics, and the two ways a stage
//! gets compiled through it.
//!
//! Owns the map from structural keys (`crate::kernel::key`) plus dtype and
//! device to compiled kernels (of every backend), the bookkeeping that
//! tells *why* a look-up missed, LRU-ish eviction, the counters behind
//! [`JitStats`], and [`compile_stage`] (a stage whose route the planner
//! chose) and [`compile_function`] (one function, its route planned for a
//! backend's target). Must not run kernels.

use super::compiled::CompiledKernel;
use crate::alloc::Device;
use crate::kernel::backend::Backend;
use crate::kernel::key::StructuralKey;
use crate::kernel::Route;
use crate::symbolic::IndexFn;
use crate::DType;
use crate::Error;
use dashmap::DashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// Why a [`crate::jit::compile`] call had to compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MissReason {
    /// No kernel for this expression was compiled before (for any shapes).
    /// Sum bounds are part of the expression, so a reduction over a new
    /// extent counts here.
    NewExpression,
    /// The expression was compiled before, but not for these shapes.
    NewShapes,
    /// The expression and shapes were compiled before, for another dtype.
    NewDtype,
}

/// Counters of the kernel cache since the process started (see
/// [`crate::jit::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    pub hits: u64,
    pub misses: u64,
    /// Kernels compiled (a miss raced by another thread may compile a
    /// kernel that is then dropped in favour of the other one).
    pub kernels_compiled: u64,
    /// Total time spent compiling (lowering and code generation).
    pub compile_time: Duration,
    pub misses_new_expression: u64,
    pub misses_new_shapes: u64,
    pub misses_new_dtype: u64,
    /// Kernels dropped from the cache to respect its capacity.
    pub evictions: u64,
    /// Kernels in the cache now.
    pub cached: usize,
    /// The capacity (kernels).
    pub capacity: usize,
}

impl JitStats {
    /// Misses for one reason.
    pub fn misses_by(&self, reason: MissReason) -> u64 {
        match reason {
            MissReason::NewExpression => self.misses_new_expression,
            MissReason::NewShapes => self.misses_new_shapes,
            MissReason::NewDtype => self.misses_new_dtype,
        }
    }
}

/// The hash is computed once by `structural_key`; the map uses it as is.
#[derive(Default)]
struct PassHasher(u64);

impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

type Pass = BuildHasherDefault<PassHasher>;

#[derive(Clone, PartialEq, Eq)]
struct Key {
    hash: u64,
    dtype: DType,
    device: Device,
    bytes: Vec<u8>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

struct Entry {
    kernel: Arc<CompiledKernel>,
    last_used: AtomicU64,
}

struct Cache {
    map: DashMap<Key, Entry, Pass>,
    /// Expression hashes (without shapes) and full hashes (without dtype)
    /// compiled so far, to tell miss reasons apart.
    exprs: DashMap<u64, (), Pass>,
    shaped: DashMap<u64, (), Pass>,
    capacity: AtomicUsize,
    tick: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    compiled: AtomicU64,
    compile_nanos: AtomicU64,
    reasons: [AtomicU64; 3],
    evictions: AtomicU64,
}

/// Default capacity in kernels (each holds at least a page of code).
pub(crate) const DEFAULT_CAPACITY: usize = 4096;

static CACHE: LazyLock<Cache> = LazyLock::new(|| Cache {
    map: DashMap::with_hasher(Pass::default()),
    exprs: DashMap::with_hasher(Pass::default()),
    shaped: DashMap::with_hasher(Pass::default()),
    capacity: AtomicUsize::new(DEFAULT_CAPACITY),
    tick: AtomicU64::new(0),
    hits: AtomicU64::new(0),
    misses: AtomicU64::new(0),
    compiled: AtomicU64::new(0),
    compile_nanos: AtomicU64::new(0),
    reasons: Default::default(),
    evictions: AtomicU64::new(0),
});

fn dtype_salt(d: DType) -> u64 {
    match d {
        DType::F32 => 0x5151_7A7A_0F0F_3232,
        DType::F64 => 0x0606_4444_A5A5_6464,
        DType::I32 => 0x1313_2626_3939_4C4C,
        DType::I64 => 0x2B2B_5656_8181_ACAC,
        DType::BF16 => 0x3C3C_7878_B4B4_F0F0,
        DType::F16 => 0x4D4D_9A9A_E7E7_3434,
    }
}

fn device_salt(d: Device) -> u64 {
    match d {
        Device::Cpu => 0,
        Device::Cuda(n) => 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(n as u64 + 1),
    }
}

/// Compiles the stage `f` whose route the planner chose, for `backend`,
/// through the kernel cache (keyed by the structure of `f` up to
/// index-variable names, its shapes, `dtype` and the device). Host stages
/// are compiled every time: a host stage's function only describes its
/// shapes, so equal descriptions may be different kernels.
pub(crate) fn compile_stage(
    f: &IndexFn,
    route: &Route,
    dtype: DType,
    backend: &'static dyn Backend,
) -> Result<Arc<CompiledKernel>, Error> {
    if let Route::Host(_) = route {
        return Ok(Arc::new(CompiledKernel::build(f, route, dtype, backend)?));
    }
    // A kernel with half buffers computes in the type halves compute in,
    // whatever the plan's (a conversion to a half type is planned in it).
    let dtype = match route {
        Route::Loop(k) if !k.buffers.is_uniform() => dtype.compute(),
        _ => dtype,
    };
    let mut key = crate::kernel::key::structural_key(f);
    // A product of half operands runs another kernel than the same
    // function's f32 product (`Contraction::set_half_operands`).
    if let Route::Gemm(c) | Route::GemmThenLoop { contraction: c, .. } = route {
        if let Some(half) = c.half_operands {
            key.bytes
                .extend_from_slice(format!("\0{half:?} products").as_bytes());
            key.hash ^= 0xBF16_BF16_0000_0001 ^ half as u64;
        }
    }
    // Winograd's convolution is another kernel than the same function's
    // GEMM (`crate::planner::winograd`).
    if let Route::Winograd(_) | Route::WinogradThenLoop { .. } = route {
        mark_winograd(&mut key);
    }
    // Half buffers are another kernel than the same function's
    // (`Kernel::buffers`).
    if let Route::Loop(k)
    | Route::GemmThenLoop { kernel: k, .. }
    | Route::WinogradThenLoop { kernel: k, .. } = route
    {
        if !k.buffers.is_uniform() {
            key.bytes
                .extend_from_slice(format!("\0buffers {:?}", k.buffers).as_bytes());
            key.hash = key.hash.rotate_left(7)
                ^ crate::kernel::key::hash_bytes(format!("{:?}", k.buffers).as_bytes());
        }
    }
    get_or_compile(key, dtype, backend.device(), || {
        // Generated code does no bounds checks, so this is re-established
        // here, where it is cheap next to code generation.
        f.check_bounds()?;
        CompiledKernel::build(f, route, dtype, backend)
    })
}

/// `key` made the key of a function's Winograd kernel.
fn mark_winograd(key: &mut crate::kernel::key::StructuralKey) {
    key.bytes.extend_from_slice(b"\0winograd");
    key.hash ^= 0x3A3A_5757_0000_0003;
}

/// Plans the route of the one function `f` for `backend`'s target and
/// compiles it, through the kernel cache (the same key as
/// [`compile_stage`]: a stage equal to a function compiled before is a
/// hit).
pub(crate) fn compile_function(
    f: &IndexFn,
    dtype: DType,
    backend: &'static dyn Backend,
) -> Result<Arc<CompiledKernel>, Error> {
    let mut key = crate::kernel::key::structural_key(f);
    let winograd = crate::planner::winograd::enabled()
        && backend.target() == crate::kernel::backend::Target::Cpu
        && crate::planner::winograd::applies(f);
    if winograd {
        mark_winograd(&mut key);
    }
    get_or_compile(key, dtype, backend.device(), || {
        f.check_bounds()?;
        let route = crate::planner::route_for(f, dtype, backend.target())?;
        CompiledKernel::build(f, &route, dtype, backend)
    })
}

/// The cached kernel for `key`, `dtype` and `device`, compiled by `build`
/// on a miss.
fn get_or_compile(
    key: StructuralKey,
    dtype: DType,
    device: Device,
    build: impl FnOnce() -> Result<CompiledKernel, Error>,
) -> Result<Arc<CompiledKernel>, Error> {
    let c = &*CACHE;
    let k = Key {
        hash: key.hash ^ dtype_salt(dtype) ^ device_salt(device),
        dtype,
        device,
        bytes: key.bytes,
    };
    let now = c.tick.fetch_add(1, Relaxed);
    if let Some(e) = c.map.get(&k) {
        e.last_used.store(now, Relaxed);
        c.hits.fetch_add(1, Relaxed);
        return Ok(e.kernel.clone());
    }
    c.misses.fetch_add(1, Relaxed);
    let reason = if !c.exprs.contains_key(&key.expr_hash) {
        MissReason::NewExpression
    } else if !c.shaped.contains_key(&key.hash) {
        MissReason::NewShapes
    } else {
        MissReason::NewDtype
    };
    c.reasons[reason as usize].fetch_add(1, Relaxed);
    let started = Instant::now();
    let built = build()?;
    c.compile_nanos
        .fetch_add(started.elapsed().as_nanos() as u64, Relaxed);
    c.compiled.fetch_add(1, Relaxed);
    c.exprs.insert(key.expr_hash, ());
    c.shaped.insert(key.hash, ());
    let kernel = c
        .map
        .entry(k)
        .or_insert_with(|| Entry {
            kernel: Arc::new(built),
            last_used: AtomicU64::new(now),
        })
        .kernel
        .clone();
    evict_to_capacity(c);
    Ok(kernel)
}

/// Drops the least recently used kernels when the cache holds more than
/// its capacity: down to seven eighths of it, in one pass over the map
/// (as the op-plan cache does), so that a loop meeting new shapes at
/// capacity does not scan the whole map for every kernel it compiles.
fn evict_to_capacity(c: &Cache) {
    let capacity = c.capacity.load(Relaxed);
    if c.map.len() <= capacity {
        return;
    }
    let keep = capacity - capacity / 8;
    let mut ticks: Vec<(u64, Key)> = c
        .map
        .iter()
        .map(|e| (e.value().last_used.load(Relaxed), e.key().clone()))
        .collect();
    ticks.sort_unstable_by_key(|t| t.0);
    let excess = ticks.len().saturating_sub(keep);
    for (_, key) in ticks.into_iter().take(excess) {
        if c.map.remove(&key).is_some() {
            c.evictions.fetch_add(1, Relaxed);
        }
    }
}

pub(crate) fn stats() -> JitStats {
    let c = &*CACHE;
    JitStats {
        hits: c.hits.load(Relaxed),
        misses: c.misses.load(Relaxed),
        kernels_compiled: c.compiled.load(Relaxed),
        compile_time: Duration::from_nanos(c.compile_nanos.load(Relaxed)),
        misses_new_expression: c.reasons[0].load(Relaxed),
        misses_new_shapes: c.reasons[1].load(Relaxed),
        misses_new_dtype: c.reasons[2].load(Relaxed),
        evictions: c.evictions.load(Relaxed),
        cached: c.map.len(),
        capacity: c.capacity.load(Relaxed),
    }
}

pub(crate) fn clear() {
    let c = &*CACHE;
    c.map.clear();
    c.exprs.clear();
    c.shaped.clear();
}

pub(crate) fn set_capacity(n: usize) {
    let c = &*CACHE;
    c.capacity.store(n, Relaxed);
    evict_to_capacity(c);
}
