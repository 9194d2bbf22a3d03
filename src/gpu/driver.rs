//! The driver interface: what the GPU backend needs from a device, with
//! two implementations — cudarc over a real GPU (`super::cuda`, feature
//! `cuda`) and the simulated device (`super::sim`), on which every GPU code
//! path is tested where there is no GPU.
//!
//! Owns [`Driver`] (loading a PTX module, launching its entry function,
//! cuBLAS's strided batched GEMM, copies between the host and device
//! memory, waiting), the launch arguments [`Arg`] and a GEMM call's
//! arguments [`GemmCall`]. Device memory itself is the allocator's
//! `RawMemory` of the device, registered when it opens. Must not plan,
//! emit or decide what to run.

use super::math_mode::MathMode;
use super::ptx::Arch;
use crate::{DType, Error};

/// One argument of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// `bytes` bytes of device memory at `addr`, written by the kernel
    /// when `writable` (the simulator checks every access against these).
    Buffer {
        addr: u64,
        bytes: usize,
        writable: bool,
    },
    /// A value passed as is (a count, a value's bits).
    Scalar(u64),
}

impl Arg {
    /// The parameter value the kernel receives.
    pub(crate) fn value(&self) -> u64 {
        match *self {
            Arg::Buffer { addr, .. } => addr,
            Arg::Scalar(x) => x,
        }
    }
}

/// One matrix operand of a GEMM: the buffer it lies in, where its first
/// element is (in elements), its leading dimension and its batch stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Matrix {
    /// The whole buffer (`Arg::Buffer`): a call must stay inside it.
    pub buffer: Arg,
    pub offset: usize,
    pub ld: usize,
    pub stride: usize,
}

impl Matrix {
    /// The device address of the first element.
    pub(crate) fn address(&self, dtype: DType) -> u64 {
        self.buffer.value() + (self.offset * dtype.size()) as u64
    }
}

/// cuBLAS's `gemmStridedBatched` in column-major terms: for each of
/// `batch` products, `C = alpha·op(A)·op(B) + beta·C` with `op(A)` `m × k`,
/// `op(B)` `k × n`, `C` `m × n`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GemmCall {
    pub dtype: DType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f64,
    pub a: Matrix,
    pub b: Matrix,
    pub beta: f64,
    pub c: Matrix,
    pub batch: usize,
    /// The precision of an f32 product.
    pub math: MathMode,
    /// The half type A's and B's f32 values are all of, when they are
    /// (`Contraction::set_half_operands`): the products then run in that
    /// type on the tensor cores (exact for such values), summed in f32,
    /// whatever `math` says.
    pub half_operands: Option<DType>,
    /// The element type of A's and B's buffers: `dtype`, or the half
    /// type `half_operands` names (cuBLAS's `GemmEx` over half buffers,
    /// f32 sums into an f32 C; see `super::half_operands`).
    pub operands: DType,
}

/// A point in a device's stream of work, for timing it
/// (`super::profile`).
pub(crate) trait Mark: Send + 'static {
    /// Seconds from `start` to this mark on the device (waiting until the
    /// device has passed both).
    fn seconds_since(&self, start: &Self) -> Result<f64, Error>;
}

/// A device, as the GPU backend drives it. Work is ordered on one stream
/// per device; copies to the host wait for it.
pub(crate) trait Driver: Send + Sync + 'static {
    /// A loaded module's entry function (`super::ptx::ENTRY`).
    type Function: Send + Sync + 'static;

    /// A recorded point of the stream ([`Driver::mark`]).
    type Mark: Mark;

    /// The architecture modules are emitted for.
    fn arch(&self) -> Arch;

    /// Streaming multiprocessors (a launch's grid is capped by it; the
    /// grid-stride loops do the rest).
    fn multiprocessors(&self) -> u32;

    /// Loads a PTX module and finds its entry function.
    fn load(&self, ptx: &str) -> Result<Self::Function, Error>;

    /// Queues `function` on `grid` blocks of `block` threads with `args`.
    fn launch(
        &self,
        function: &Self::Function,
        grid: u32,
        block: u32,
        args: &[Arg],
    ) -> Result<(), Error>;

    /// Queues a GEMM (cuBLAS on a GPU, f32 in the call's `math` mode).
    fn gemm(&self, call: &GemmCall) -> Result<(), Error>;

    /// Copies host bytes to device address `dst` (room for them checked
    /// by the caller); returns once the host bytes may be reused.
    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), Error>;

    /// Copies `dst.len()` bytes from device address `src` to the host,
    /// after all queued work.
    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), Error>;

    /// Copies `bytes` bytes from device address `src` to `dst`.
    fn copy_on_device(&self, dst: u64, src: u64, bytes: usize) -> Result<(), Error>;

    /// Waits for all queued work.
    fn synchronize(&self) -> Result<(), Error>;

    /// Records the point the stream has reached, without waiting: the
    /// device notes the time it passes it.
    fn mark(&self) -> Result<Self::Mark, Error>;
}
