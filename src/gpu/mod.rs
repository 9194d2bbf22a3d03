//! The NVIDIA GPU backend (cargo feature `cuda`).
//!
//! The CPU and GPU backends are siblings: both run the kernel IR the
//! planner produced for their target (`crate::planner::passes` lists the
//! GPU's loop passes), and neither imports the other nor the planner.
//! Here:
//!
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
pub mod ptx;
