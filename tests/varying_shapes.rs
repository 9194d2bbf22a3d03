//! Training with a different batch size every step (issue 13): the pool
//! reuses larger cached blocks for smaller requests (best fit and split,
//! as PyTorch's caching allocator) and returns cached bytes far above the
//! peak in use, so reserved memory stays within 2× the peak in use; the
//! op-plan and kernel caches are bounded and count their evictions. The
//! allocator and the caches are global: the tests take a lock.

use std::sync::{Mutex, MutexGuard};
use tenjin::alloc::{self, AllocMode};
use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Error, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial(mode: AllocMode) -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    alloc::set_mode(mode);
    alloc::set_memory_limit(None);
    alloc::empty_cache();
    alloc::reset_peak();
    g
}

/// One MLP step at every batch size in `batches`; the largest reserved
/// bytes seen after a step.
fn train(batches: impl Iterator<Item = usize>) -> Result<usize, Error> {
    let model = Sequential::new()
        .add(Linear::new(256, 512, 1)?)
        .add(ReLU)
        .add(Linear::new(512, 10, 2)?);
    let mut opt = SGD::new(
        model.parameters(),
        SgdConfig {
            lr: 0.01,
            ..Default::default()
        },
    )?;
    let mut max_reserved = 0;
    for b in batches {
        let x = Tensor::randn(&[b, 256], DType::F32, b as u64)?;
        let targets: Vec<usize> = (0..b).map(|i| i % 10).collect();
        opt.zero_grad();
        model.forward(&x)?.cross_entropy(&targets)?.backward()?;
        opt.step()?;
        max_reserved = max_reserved.max(alloc::stats().bytes_reserved);
    }
    Ok(max_reserved)
}

#[test]
fn batch_sizes_one_to_five_hundred_keep_reserved_within_twice_the_peak() -> Result<(), Error> {
    for mode in [AllocMode::RuntimeEfficient, AllocMode::MemoryEfficient] {
        let _g = serial(mode);
        let base = alloc::stats().bytes_reserved;
        let max_reserved = train(1..=500)? - base;
        let peak = alloc::stats().peak_in_use - base;
        eprintln!("{mode:?}: max reserved {max_reserved} B, peak in use {peak} B");
        assert!(
            max_reserved <= 2 * peak,
            "{mode:?}: reserved {max_reserved} B for a peak in use of {peak} B"
        );
    }
    Ok(())
}

#[test]
fn a_smaller_large_request_reuses_a_larger_cached_block() -> Result<(), Error> {
    let _g = serial(AllocMode::RuntimeEfficient);
    drop(alloc::allocate(6 << 20)?);
    let before = alloc::stats();
    let a = alloc::allocate(4 << 20)?;
    let b = alloc::allocate(3 << 19)?; // 1.5 MiB, from the split-off rest
    let after = alloc::stats();
    assert_eq!(
        after.allocations, before.allocations,
        "no system allocation"
    );
    assert_eq!(after.pool_hits, before.pool_hits + 2);
    assert_eq!(after.bytes_reserved, before.bytes_reserved);
    drop((a, b));
    // The pieces merge back: the whole block serves a 6 MiB request again.
    let c = alloc::allocate(6 << 20)?;
    assert_eq!(alloc::stats().allocations, before.allocations);
    drop(c);
    Ok(())
}

#[test]
fn the_op_plan_cache_is_bounded_and_counts_evictions() -> Result<(), Error> {
    let _g = serial(AllocMode::RuntimeEfficient);
    let capacity = tenjin::plan_cache_capacity();
    tenjin::set_plan_cache_capacity(64);
    let before = tenjin::stats();
    for n in 1..=200 {
        Tensor::ones(&[n], DType::F32)?.exp()?.sum()?;
    }
    let after = tenjin::stats();
    tenjin::set_plan_cache_capacity(capacity);
    assert!(after.op_plans_cached <= 64, "{after:?}");
    assert!(
        after.op_plan_evictions >= before.op_plan_evictions + 300,
        "{after:?}"
    );
    Ok(())
}
