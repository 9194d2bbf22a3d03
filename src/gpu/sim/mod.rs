//! The simulated device: the driver interface over host memory, with
//! every check a real GPU does not make.
//!
//! Owns [`SimDriver`]: device memory from `memory` (host blocks at
//! addresses the host cannot dereference), modules decoded once by the
//! interpreter (`interp`), launches run thread after thread over a
//! [`LaunchMemory`](memory::LaunchMemory) that fails on an out-of-bounds or
//! misaligned access, a use after free, a store into an input, and two
//! threads storing one element. It reports one multiprocessor, so a
//! launch's grid is small and the kernels' grid-stride loops really loop.
//! Work runs when it is queued (the stream is trivially in order).

mod blas;
#[cfg(test)]
mod builtin_tests;
pub(crate) mod interp;
mod isa;
pub(crate) mod memory;
mod semantics;
mod shared;
#[cfg(test)]
mod tests;
mod warp;

use super::driver::{Arg, Driver, GemmCall};
use super::ptx::Arch;
use crate::alloc::Device;
use crate::Error;
use interp::Program;
use memory::{LaunchMemory, SimMemory};

/// A simulated device.
pub(crate) struct SimDriver {
    device: Device,
    memory: &'static SimMemory,
}

impl SimDriver {
    /// The simulated `device`, its memory in `memory` (registered with the
    /// allocator by the caller).
    pub(crate) fn new(device: Device, memory: &'static SimMemory) -> SimDriver {
        SimDriver { device, memory }
    }

    fn err(&self, message: impl std::fmt::Display) -> Error {
        Error::Device {
            device: self.device.to_string(),
            message: format!("simulated device: {message}"),
        }
    }
}

/// The simulated device runs each kernel when it is queued: the host's
/// clock brackets it.
impl super::driver::Mark for std::time::Instant {
    fn seconds_since(&self, start: &Self) -> Result<f64, Error> {
        Ok(self.duration_since(*start).as_secs_f64())
    }
}

impl Driver for SimDriver {
    type Function = Program;
    type Mark = std::time::Instant;

    fn arch(&self) -> Arch {
        Arch::Sm80
    }

    fn multiprocessors(&self) -> u32 {
        1
    }

    fn load(&self, ptx: &str) -> Result<Program, Error> {
        Program::decode(ptx).map_err(|e| self.err(format!("loading a module: {e}")))
    }

    fn launch(&self, function: &Program, grid: u32, block: u32, args: &[Arg]) -> Result<(), Error> {
        let params: Vec<u64> = args.iter().map(Arg::value).collect();
        let mut blocks = self.memory.lock();
        let mut memory = LaunchMemory::new(&mut blocks, args).map_err(|e| self.err(e))?;
        function
            .run(&params, grid, block, &mut memory)
            .map_err(|e| self.err(e))
    }

    fn gemm(&self, call: &GemmCall) -> Result<(), Error> {
        blas::gemm(&mut self.memory.lock(), call).map_err(|e| self.err(format!("cuBLAS: {e}")))
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        self.memory.lock().write(dst, src).map_err(|e| self.err(e))
    }

    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), Error> {
        self.memory.lock().read(src, dst).map_err(|e| self.err(e))
    }

    fn copy_on_device(&self, dst: u64, src: u64, bytes: usize) -> Result<(), Error> {
        let mut blocks = self.memory.lock();
        let mut tmp = vec![0u8; bytes];
        blocks.read(src, &mut tmp).map_err(|e| self.err(e))?;
        blocks.write(dst, &tmp).map_err(|e| self.err(e))
    }

    fn synchronize(&self) -> Result<(), Error> {
        Ok(())
    }

    fn mark(&self) -> Result<std::time::Instant, Error> {
        Ok(std::time::Instant::now())
    }
}
