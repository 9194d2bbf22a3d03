//! The op-plan cache: one [`OpPlan`] per op key (op structure, shapes,
//! views, dtype, device), least recently used plans evicted above a
//! capacity, and its counters.
//!
//! Owns [`cached`] (the hit path of every op of a training step: one map
//! lookup and a tick), the capacity ([`set_plan_cache_capacity`],
//! [`plan_cache_capacity`]), [`clear_plans`] (a setting the plans depend
//! on changed) and [`counters`]. Must not build plans (`super::op_plan`
//! does) nor know what a key means.

use super::op_plan::OpPlan;
use crate::Error;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};

/// Plans with the tick of their last use.
static PLANS: LazyLock<DashMap<String, (Arc<OpPlan>, AtomicU64)>> = LazyLock::new(DashMap::new);
static PLAN_TICK: AtomicU64 = AtomicU64::new(0);
static PLAN_EVICTIONS: AtomicU64 = AtomicU64::new(0);
static PLAN_CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_PLAN_CAPACITY);
static PLAN_HITS: AtomicU64 = AtomicU64::new(0);
static PLANS_BUILT: AtomicU64 = AtomicU64::new(0);

/// Default capacity of the op-plan cache (plans; each holds its compiled
/// kernels, so this also bounds the code a process keeps).
pub const DEFAULT_PLAN_CAPACITY: usize = 4096;

/// The cache's counters since the process started.
pub(crate) struct Counters {
    pub built: u64,
    pub hits: u64,
    pub cached: usize,
    pub evictions: u64,
}

/// The cache's counters (for `super::stats`).
pub(crate) fn counters() -> Counters {
    Counters {
        built: PLANS_BUILT.load(Relaxed),
        hits: PLAN_HITS.load(Relaxed),
        cached: PLANS.len(),
        evictions: PLAN_EVICTIONS.load(Relaxed),
    }
}

/// Sets how many op plans the cache keeps (at least 1), evicting the
/// least recently used ones above it. A loop over ever new shapes then
/// keeps a bounded set of plans and kernels.
pub fn set_plan_cache_capacity(plans: usize) {
    PLAN_CAPACITY.store(plans.max(1), Relaxed);
    evict_plans();
}

/// Drops every op plan (a setting the plans depend on changed).
pub(crate) fn clear_plans() {
    PLANS.clear();
}

/// The op-plan cache's capacity.
pub fn plan_cache_capacity() -> usize {
    PLAN_CAPACITY.load(Relaxed)
}

/// Drops least recently used plans down to 7/8 of the capacity once the
/// cache exceeds it (a scan per eviction round, not per insert).
fn evict_plans() {
    let capacity = PLAN_CAPACITY.load(Relaxed);
    if PLANS.len() <= capacity {
        return;
    }
    let keep = capacity - capacity / 8;
    let mut ticks: Vec<(u64, String)> = PLANS
        .iter()
        .map(|e| (e.value().1.load(Relaxed), e.key().clone()))
        .collect();
    ticks.sort_unstable();
    let excess = ticks.len().saturating_sub(keep);
    for (_, key) in ticks.into_iter().take(excess) {
        if PLANS.remove(&key).is_some() {
            PLAN_EVICTIONS.fetch_add(1, Relaxed);
        }
    }
}

/// The plan cached under `key`, built by `build` on a miss.
pub(crate) fn cached(
    key: &str,
    build: impl FnOnce() -> Result<OpPlan, Error>,
) -> Result<Arc<OpPlan>, Error> {
    let now = PLAN_TICK.fetch_add(1, Relaxed);
    if let Some(p) = PLANS.get(key) {
        PLAN_HITS.fetch_add(1, Relaxed);
        p.1.store(now, Relaxed);
        return Ok(p.0.clone());
    }
    let plan = Arc::new(build()?);
    PLANS_BUILT.fetch_add(1, Relaxed);
    PLANS.insert(key.to_string(), (plan.clone(), AtomicU64::new(now)));
    evict_plans();
    Ok(plan)
}
