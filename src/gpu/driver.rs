//! The CUDA driver through cudarc: one context and stream per device, the
//! module cache, launches and copies.
//!
//! Owns [`Gpu`] (an open device), [`is_available`] and [`device_count`].
//! The driver library is opened with `dlopen` on first use; without it, or
//! without a device, every entry point returns an [`Error::Device`] —
//! cudarc panics when the library is missing, so its presence is checked
//! first. Must not plan (the planner does) or emit kernels (`ptx` does)
//! nor decide what to run (the runtime does).

use super::ptx::{self, Arch};
use crate::alloc::Device;
use crate::kernel::Kernel;
use crate::symbolic::IndexFn;
use crate::{DType, Error};
use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};

/// Threads per block of every launch.
const BLOCK: u32 = 256;
/// Blocks per multiprocessor at most (the grid-stride loop does the rest).
const BLOCKS_PER_SM: u32 = 32;

fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only probes whether the library can be opened.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// The number of CUDA devices (0 without a driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// Whether a CUDA device can be used: the driver library loads and sees
/// at least one device.
///
/// ```
/// // On a machine without a GPU this is simply false; nothing panics.
/// let _ = tenjin::cuda::is_available();
/// ```
pub fn is_available() -> bool {
    device_count() > 0
}

fn device_error(ordinal: usize, message: impl std::fmt::Display) -> Error {
    Error::Device {
        device: Device::Cuda(ordinal).to_string(),
        message: message.to_string(),
    }
}

/// An open device.
pub struct Gpu {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) arch: Arch,
    sms: u32,
    /// Loaded loop kernels by structural key and dtype.
    kernels: Mutex<HashMap<(Vec<u8>, DType), CudaFunction>>,
}

static OPEN: Mutex<Vec<Option<&'static Gpu>>> = Mutex::new(Vec::new());

/// Device `ordinal`, opened on first use (its context, stream and
/// allocator).
pub fn gpu(ordinal: usize) -> Result<&'static Gpu, Error> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(Some(g)) = open.get(ordinal) {
        return Ok(g);
    }
    if !driver_present() {
        return Err(device_error(
            ordinal,
            "the CUDA driver library (libcuda) is not installed",
        ));
    }
    let count = device_count();
    if ordinal >= count || ordinal >= crate::alloc::MAX_CUDA_DEVICES {
        return Err(device_error(
            ordinal,
            format!("no such device ({count} CUDA devices present)"),
        ));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| device_error(ordinal, e))?;
    // tenjin orders its work on one stream per device: no event tracking.
    // SAFETY: every buffer of this context is used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.default_stream();
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| device_error(ordinal, e))?;
    let arch = Arch::for_capability(major, minor).ok_or_else(|| {
        device_error(
            ordinal,
            format!("compute capability {major}.{minor} is below 7.0"),
        )
    })?;
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| device_error(ordinal, e))?
        .max(1) as u32;
    let g: &'static Gpu = Box::leak(Box::new(Gpu {
        ordinal,
        ctx: ctx.clone(),
        stream,
        arch,
        sms,
        kernels: Mutex::new(HashMap::new()),
    }));
    let memory: &'static super::memory::DeviceMemory =
        Box::leak(Box::new(super::memory::DeviceMemory { ctx }));
    crate::alloc::register_device_memory(ordinal, memory);
    if open.len() <= ordinal {
        open.resize(ordinal + 1, None);
    }
    open[ordinal] = Some(g);
    Ok(g)
}

impl Gpu {
    pub(crate) fn err(&self, message: impl std::fmt::Display) -> Error {
        device_error(self.ordinal, message)
    }

    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub fn name(&self) -> Result<String, Error> {
        self.ctx.name().map_err(|e| self.err(e))
    }

    /// The loop kernel `kernel` (planned for the GPU) of `f` in `dtype` on
    /// this device: emitted and loaded on first use, then from the module
    /// cache (keyed by the structural key of `f` and the dtype).
    pub(crate) fn loop_function(
        &self,
        f: &IndexFn,
        kernel: &Kernel,
        dtype: DType,
    ) -> Result<CudaFunction, Error> {
        let key = crate::kernel::key::structural_key(f);
        let mut cache = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = cache.get(&(key.bytes.clone(), dtype)) {
            return Ok(k.clone());
        }
        let text = ptx::module(key.hash, kernel, dtype, self.arch)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(text))
            .map_err(|e| self.err(format!("loading the PTX of `{}`: {e}", f.name())))?;
        let function = module.load_function(ptx::ENTRY).map_err(|e| self.err(e))?;
        cache.insert((key.bytes, dtype), function.clone());
        Ok(function)
    }

    /// Launches `function` over `total` output elements with the output's
    /// and the arguments' device addresses.
    pub(crate) fn launch(
        &self,
        function: &CudaFunction,
        total: usize,
        out: u64,
        args: &[u64],
    ) -> Result<(), Error> {
        if total == 0 {
            return Ok(());
        }
        let blocks = total
            .div_ceil(BLOCK as usize)
            .min((self.sms * BLOCKS_PER_SM) as usize) as u32;
        let mut b = self.stream.launch_builder(function);
        b.arg(&out);
        for a in args {
            b.arg(a);
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks.max(1), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the kernel takes exactly these u64 addresses (output
        // first, then the arguments in order), each a live device buffer
        // of the length the kernel was specialised for (checked by the
        // caller); it reads and writes nothing else.
        unsafe { b.launch(cfg) }.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Waits for all work queued on the device.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.stream.synchronize().map_err(|e| self.err(e))
    }

    /// Copies `src` to device address `dst` (which has room for it).
    pub(crate) fn upload<T: cudarc::driver::DeviceRepr>(
        &self,
        dst: u64,
        src: &[T],
    ) -> Result<(), Error> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        // SAFETY: `dst` is a live device block of at least `size_of_val(src)` bytes.
        unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))?;
        self.synchronize()
    }

    /// Copies device address `src` into `dst`.
    pub(crate) fn download<T: cudarc::driver::DeviceRepr>(
        &self,
        dst: &mut [T],
        src: u64,
    ) -> Result<(), Error> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        // SAFETY: `src` is a live device block of at least `size_of_val(dst)` bytes.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))?;
        self.synchronize()
    }
}
