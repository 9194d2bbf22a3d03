//! tenjin: a JIT tensor runtime with a tracing autograd tape whose
//! derivatives are symbolic index expressions (Urban & van der Smagt 2017).
//!
//! User code runs eagerly on a [`Tensor`]; every op is an element-wise
//! defined index function, and [`Tensor::backward`] differentiates the
//! recorded trace symbolically, so every gradient element is again an
//! index expression with exactly solved sum ranges. Kernels are planned
//! per shape, compiled with Cranelift and cached: a training loop's first
//! iteration compiles, the later ones run from the cache.
//!
//! What a user reaches for:
//!
//! - [`Tensor`] and its ops, [`index_fn`] for your own op in index
//!   notation (differentiated like the built-in ones), [`no_grad`];
//! - [`autograd`]: gradients as tensors, `create_graph`, `vjp`, `jvp`,
//!   `hvp`, Jacobians and Hessians; [`gradcheck`] and [`gradgradcheck`];
//! - [`nn`] (layers, [`nn::Module`]) and [`optim`] (SGD, Adam, AdamW);
//! - [`trace`]: [`explain`] (a recorded op's stages and routes),
//!   memory plans, [`stats`] (plans built, cache hits, evictions);
//! - [`alloc`]: pooled memory in a runtime-efficient and a
//!   memory-efficient mode, statistics, limits; [`jit`]: thread count and
//!   kernel-cache statistics;
//! - [`symbolic`]: [`symbolic::IndexFn`] (parser, printer, derivation,
//!   the reference interpreter `eval_f64`/`eval_f32`).
//!
//! The layers, top to bottom. A module may import modules of its own row
//! or of rows below it; the modules of the row marked *apart* import none
//! of each other (the planner and the two backends are siblings), and only
//! the runtime imports a backend. `tests/layering.rs` checks every `use`
//! line of `src/` against this table (and that `ARCHITECTURE.md` draws the
//! same one):
//!
//! | layer | modules | what |
//! | --- | --- | --- |
//! | user API | `nn` `optim` `data` `distributed` `autograd` `gradcheck` `checkpoint` `safetensors` `amp` | layers, optimizers, data loading, data-parallel training, gradients as tensors, checks, recomputed blocks, weights on disk, mixed precision |
//! | ops | `ops` | every op: one index function, one path through the runtime |
//! | tensor | `tensor` | the `Tensor` type, creation, views as affine maps |
//! | tape | `trace` | nodes, leaves, the backward schedule and its interpreter |
//! | runtime | `runtime` | op-plan cache, exec, storage, kernel cache; `tenjin::jit` is its public face |
//! | planner and backends, apart | `planner` `cpu` `gpu` | stages and routes for a target; Cranelift code; PTX (feature `cuda`) |
//! | kernel IR | `kernel` | loop nests, routes, contractions, host kernels, the backend interface |
//! | symbolic core | `symbolic` | index functions, derivation, the reference interpreter |
//! | memory | `alloc` | buffers, pools, modes, statistics |
//! | foundations | `dtype` `error` | element types, errors as data |
//!
//! The compiler's internals (`planner`, `kernel`, the integer linear
//! algebra of `symbolic`, `jit::gemm`) are public for tests and
//! benchmarks only: they are hidden from the documentation and may change
//! without notice.
//!
//! # Environment
//!
//! - `TENJIN_NUM_THREADS`: the number of threads kernels use (read once;
//!   [`jit::set_num_threads`] overrides it; default: the available cores).
//!
//! ```
//! use tenjin::symbolic::IndexFn;
//! let f = IndexFn::parse_with_sizes("f[i] = x[2*i] ** 2", &[("x", &[6][..])], &[("i", 3)])?;
//! let dx = f.derive("x")?;
//! let g = dx.eval_f64(&[("x", &[1., 2., 3., 4., 5., 6.][..]), ("df", &[1., 1., 1.][..])])?;
//! assert_eq!(g, vec![2., 0., 6., 0., 10., 0.]); // odd elements are never read: exact zeros
//! # Ok::<(), tenjin::Error>(())
//! ```

pub mod alloc;
pub mod amp;
pub mod autograd;
mod checkpoint;
mod cpu;
pub mod data;
pub mod distributed;
pub mod dtype;
pub mod error;
pub mod gpu;
/// CUDA devices: availability and count (real GPUs need the `cuda`
/// feature), the simulated device that stands in for one, and the
/// precision of f32 GEMMs (full f32 unless set to TF32), when half
/// products read half copies of their operands, and waiting for a
/// device's queued work.
pub mod cuda {
    pub use crate::gpu::{
        device_count, half_copies, is_available, is_profiling, is_simulated, math_mode,
        profile_report, set_half_copies, set_math_mode, set_profiling, simulate, HalfCopies,
        MathMode,
    };
    pub use crate::runtime::synchronize;
}
mod gradcheck;
#[doc(hidden)]
pub mod kernel;
pub mod nn;
mod ops;
pub mod optim;
#[doc(hidden)]
pub mod planner;
mod runtime;
pub mod safetensors;
pub mod symbolic;
mod tensor;
pub mod trace;

pub use runtime::jit;
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use runtime::observe;

pub use alloc::Device;
pub use checkpoint::checkpoint;
pub use dtype::{bf16, f16, DType};
pub use error::Error;
pub use gradcheck::{
    gradcheck, gradcheck_with, gradgradcheck, gradgradcheck_with, GradcheckOptions, GradcheckReport,
};
pub use ops::{
    autocast, autocast_dtype, default_generator, fusion, index_fn, index_fn_with_sizes,
    manual_seed, set_default_generator, set_fusion, AttentionOptions, CrossEntropyOptions,
    Generator, LossReduction, Norm, PaddingMode, Pool2d,
};
pub use runtime::{
    plan_cache_capacity, save_policy, set_plan_cache_capacity, set_winograd, stats, winograd,
    SavePolicy, Stats, DEFAULT_PLAN_CAPACITY,
};
pub use tensor::{default_device, explain, set_default_device, Dim, Tensor};
pub use trace::{no_grad, Explanation, NoGradGuard};

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
