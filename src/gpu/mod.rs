//! The NVIDIA GPU backend: PTX emitted from the kernel IR, run through a
//! driver — cudarc on a real GPU (cargo feature `cuda`), or the simulated
//! device, built always, on which every GPU code path is tested where
//! there is no GPU.
//!
//! The CPU and GPU backends are siblings: both run the kernel IR the
//! planner produced for their target (`crate::planner::passes` lists the
//! GPU's loop passes), and neither imports the other nor the planner.
//! Here:
//!
//! - [`ptx`]: PTX text emitted directly from the kernel IR — no NVRTC and
//!   no CUDA toolkit, so a user's machine needs only the driver;
//!   `TENJIN_PTX_DUMP=dir` writes every module to `dir` ([`dump`]);
//! - `driver`: the interface a device is driven through, implemented by
//!   `cuda` (cudarc) and `sim` (the simulated device);
//! - `backend`: the runtime's `Backend` over any driver;
//! - `devices`: which driver a device opens with ([`simulate`]);
//! - [`math_mode`]: the precision of f32 GEMMs ([`MathMode`]);
//! - `half_operands`: half products over half copies of their operands
//!   ([`set_half_copies`]);
//! - `profile`: the device time of every kernel, on request
//!   ([`set_profiling`], [`profile_report`]).
//!
//! Nothing here panics without a driver or a GPU: the driver library is
//! opened on first use and its absence is an error.

mod backend;
#[doc(hidden)]
pub mod check;
mod counters;
#[cfg(feature = "cuda")]
mod cuda;
mod devices;
pub(crate) mod driver;
pub mod dump;
mod half_operands;
pub mod math_mode;
#[cfg(feature = "cuda")]
mod memory;
mod profile;
pub mod ptx;
pub(crate) mod sim;

pub(crate) use counters::snapshot as counters;
pub(crate) use devices::backend;
pub use devices::{device_count, is_available, is_simulated, simulate};
pub use half_operands::{half_copies, set_half_copies, HalfCopies};
pub use math_mode::{math_mode, set_math_mode, MathMode};
pub use profile::{is_profiling, profile_report, set_profiling};
