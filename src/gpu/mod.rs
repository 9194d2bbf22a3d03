//! The NVIDIA GPU backend (cargo feature `cuda`).
//!
//! The CPU and GPU backends are siblings: both consume the planner's
//! stages and the backend-neutral kernel IR, and neither imports the
//! other. Here:
//!
//! - [`plan`]: how a stage runs on a GPU (a GEMM, a GEMM then an
//!   element-wise kernel over its output, or a loop kernel), the planner's
//!   own decision with the GPU's loop kernels (the GEMM routes are not run
//!   yet: cuBLAS is not wired in);
//! - [`ptx`]: PTX text emitted directly from the kernel IR — no NVRTC and
//!   no CUDA toolkit, so a user's machine needs only the driver;
//!   `TENJIN_PTX_DUMP=dir` writes every module to `dir` ([`dump`]).
//!
//! Nothing here panics without a driver or a GPU: the driver library is
//! opened on first use and its absence is an error.

#[doc(hidden)]
pub mod check;
pub mod driver;
pub mod dump;
mod memory;
pub mod plan;
pub mod ptx;
