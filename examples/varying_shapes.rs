//! An MLP forward+backward at 1,200 different batch sizes in
//! memory-efficient mode: resident memory and the caches every 200 shapes.
//! The op-plan and kernel caches are bounded, so resident memory levels
//! off once they are full (issue 13: it grew 19 MB per 100 new shapes).
//!
//! `cargo run --release --example varying_shapes [capacity]`

use tenjin::nn::{Linear, Module, ReLU, Sequential};
use tenjin::{DType, Tensor};
fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: f64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096.0 / 1e6
}
fn main() -> Result<(), tenjin::Error> {
    // Optional: one capacity for both caches (defaults: 4,096 plans,
    // 4,096 kernels).
    if let Some(cap) = std::env::args().nth(1) {
        let cap: usize = cap.parse().expect("a capacity");
        tenjin::set_plan_cache_capacity(cap);
        tenjin::jit::set_cache_capacity(cap);
    }
    tenjin::alloc::set_mode(tenjin::alloc::AllocMode::MemoryEfficient);
    let model = Sequential::new()
        .add(Linear::new(32, 64, 1)?)
        .add(ReLU)
        .add(Linear::new(64, 4, 2)?);
    let t = std::time::Instant::now();
    for b in 1..=1200usize {
        let x = Tensor::randn(&[b, 32], DType::F32, b as u64)?;
        model.forward(&x)?.sum()?.backward()?;
        if b % 200 == 0 {
            let s = tenjin::stats();
            println!("{b:5} shapes: RSS {:7.1} MB, {} plans cached, {} evicted, {} kernels compiled, {:?}", rss_mb(), s.op_plans_cached, s.op_plan_evictions, s.kernels_compiled, t.elapsed());
        }
    }
    Ok(())
}
