//! The runtime: the one seam between the tape and the backends.
//!
//! Every stage of every caller reaches a kernel through here: ops
//! (`crate::ops::apply`), backward (`crate::trace`), the functional API
//! (which applies derivatives as ops), optimizers (`crate::optim`) and
//! host ops. It owns
//!
//! | module | owns |
//! | --- | --- |
//! | `save_policy` | [`SavePolicy`]: which forward values a recorded op keeps for backward, the scope choosing it ([`save_policy`]) |
//! | `op_plan` | one op's programs per shapes, views, dtype and device, the runtime's statistics ([`stats`]) |
//! | `plan_cache` | the op-plan cache: one plan per op key, least recently used ones evicted ([`set_plan_cache_capacity`]), dropped when a setting changes |
//! | `compiled` | [`CompiledKernel`]: a stage compiled by a backend, the checks before it runs |
//! | `kernel_cache` | the kernel cache of every backend (structural key, dtype, device), its statistics, compiling a stage or a function through it |
//! | `fusion` | the switch fusion obeys, forward and backward ([`set_fusion`], [`fusion`]) |
//! | `winograd` | the switch for Winograd's convolution ([`set_winograd`]), which drops the plans made under the other setting |
//! | `exec` | running kernels and programs on storages, the device check of every run |
//! | `storage` | `Storage`: the memory behind tensors, on any device, every method by device |
//! | `observe` | the kernel observer (hidden, feature `cuda`) |
//! | [`jit`] | `tenjin::jit`: compiling one function for the CPU, the thread count, the cache's counters |
//!
//! and [`backend_for`], which picks the [`Backend`] of a device. It sits
//! below the tape and above the planner and the backends: it asks the
//! planner for programs planned for a backend's [`Target`] and hands each
//! stage to that backend, which compiles exactly that. It must not know
//! Cranelift or PTX: it sees backends only through the kernel IR's
//! `Backend` interface.
//!
//! [`Target`]: crate::kernel::backend::Target

pub(crate) mod compiled;
pub(crate) mod exec;
mod fusion;
pub mod jit;
mod kernel_cache;
#[cfg(feature = "cuda")]
pub mod observe;
pub(crate) mod op_plan;
mod plan_cache;
mod save_policy;
pub(crate) mod storage;
mod winograd;

pub use compiled::CompiledKernel;
pub use fusion::{fusion, set_fusion};
pub use op_plan::{stats, Stats};
pub use plan_cache::{plan_cache_capacity, set_plan_cache_capacity, DEFAULT_PLAN_CAPACITY};
pub(crate) use save_policy::policy_for;
pub use save_policy::{save_policy, SavePolicy};
pub(crate) use storage::Storage;
pub use winograd::{set_winograd, winograd};

use crate::alloc::Device;
use crate::kernel::backend::Backend;
use crate::Error;

/// The kernel computing the one function `f` in `dtype` on `device` (its
/// route planned for the device's backend), through the kernel cache: how
/// optimizers compile their updates.
pub(crate) fn compile_for(
    f: &crate::symbolic::IndexFn,
    dtype: crate::DType,
    device: Device,
) -> Result<std::sync::Arc<CompiledKernel>, Error> {
    kernel_cache::compile_function(f, dtype, backend_for(device)?)
}

/// Waits until the work queued on `device` has run (PyTorch's
/// `torch.cuda.synchronize`; nothing to wait for on the CPU). For timing:
/// results read back wait by themselves.
///
/// ```
/// tenjin::cuda::simulate()?;
/// let x = tenjin::Tensor::ones_on(&[4], tenjin::DType::F32, tenjin::Device::Cuda(0))?;
/// let y = x.exp()?;
/// tenjin::cuda::synchronize(y.device())?;
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn synchronize(device: Device) -> Result<(), Error> {
    backend_for(device)?.synchronize()
}

/// The number of real CUDA devices (what the layers above the runtime
/// may ask of the GPU backend without reaching it).
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
pub(crate) fn cuda_device_count() -> usize {
    crate::gpu::device_count()
}

/// The backend that runs kernels on `device`, or an error naming the
/// device when none does.
pub(crate) fn backend_for(device: Device) -> Result<&'static dyn Backend, Error> {
    match device {
        Device::Cpu => Ok(&crate::cpu::CPU),
        Device::Cuda(n) => crate::gpu::backend(n),
    }
}
