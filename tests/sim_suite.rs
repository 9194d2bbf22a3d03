//! The op/gradcheck, tape, higher-order, nn/optim, memory, indexing,
//! checkpoint, data-parallel and view-offset suites with every tensor on the simulated GPU:
//! `tenjin::cuda::simulate()` and `set_default_device(Device::Cuda(0))` before any test starts, so every
//! constructor creates on the device, every op and derivative runs its
//! PTX in the simulator (every access checked), and the suites' own
//! assertions (finite differences, reference values) hold there.
//!
//! Run it with `--test-threads=1`: the included suites assert on
//! process-wide statistics. `TENJIN_GPU_TESTS=cuda` (a build with the
//! `cuda` feature, on a machine with a GPU) runs the same suites on the
//! real device 0.

#[path = "ops_gradcheck.rs"]
mod ops_gradcheck;

#[path = "tape.rs"]
mod tape;

#[path = "higher_order.rs"]
mod higher_order;

#[path = "nn_optim.rs"]
mod nn_optim;

#[path = "memory.rs"]
mod memory;

#[path = "indexing.rs"]
mod indexing;

#[path = "checkpoint.rs"]
mod checkpoint;

#[path = "distributed.rs"]
mod distributed;

#[path = "view_offsets.rs"]
mod view_offsets;

/// Whether `TENJIN_GPU_TESTS=cuda` asks for the real GPU and there is one.
fn on_a_real_gpu() -> bool {
    std::env::var("TENJIN_GPU_TESTS").is_ok_and(|v| v == "cuda") && tenjin::cuda::is_available()
}

#[ctor::ctor]
fn on_the_simulated_device() {
    if !on_a_real_gpu() {
        tenjin::cuda::simulate().expect("the simulated device");
    }
    tenjin::set_default_device(tenjin::Device::Cuda(0));
    // Open the device now, so its allocator's mode and limit can be set
    // before the first tensor.
    tenjin::Tensor::zeros(&[1], tenjin::DType::F32).expect("a tensor on the device");
}

#[test]
fn tensors_are_on_the_simulated_device() {
    let x = tenjin::Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
    assert_eq!(x.device(), tenjin::Device::Cuda(0));
    assert_eq!(tenjin::cuda::is_simulated(), !on_a_real_gpu());
}
