//! A real GPU through cudarc: the driver interface over one context and
//! stream per device (feature `cuda`).
//!
//! Owns [`CudaDriver`] and [`device_count`]. The driver
//! library is opened with `dlopen` on first use; without it, or without a
//! device, every entry point returns an [`Error::Device`] — cudarc panics
//! when the library is missing, so its presence is checked first. Must
//! not plan or emit kernels nor decide what to run.

use super::driver::{Arg, Driver, GemmCall};
use super::math_mode::MathMode;
use super::ptx::{self, Arch};
use crate::alloc::Device;
use crate::Error;
use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaStream};
use std::sync::{Arc, OnceLock};

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

fn device_error(ordinal: usize, message: impl std::fmt::Display) -> Error {
    Error::Device {
        device: Device::Cuda(ordinal).to_string(),
        message: message.to_string(),
    }
}

/// An open device.
pub(crate) struct CudaDriver {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: Arch,
    sms: u32,
    /// cuBLAS on the device's stream, opened on the first GEMM (its
    /// library may be missing: then every GEMM is an error).
    blas: OnceLock<Result<CudaBlas, String>>,
    /// The math mode the cuBLAS handle is in.
    blas_math: std::sync::Mutex<MathMode>,
}

impl CudaDriver {
    /// Opens device `ordinal` (its context and stream) and registers its
    /// memory with the allocator.
    pub(crate) fn open(ordinal: usize) -> Result<CudaDriver, Error> {
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
        let stream_ordered = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
            .is_ok_and(|v| v != 0);
        let memory: &'static super::memory::DeviceMemory =
            Box::leak(Box::new(super::memory::DeviceMemory {
                ctx: ctx.clone(),
                stream: stream.clone(),
                stream_ordered,
            }));
        crate::alloc::register_device_memory(ordinal, memory);
        Ok(CudaDriver {
            ordinal,
            ctx,
            stream,
            arch,
            sms,
            blas: OnceLock::new(),
            blas_math: std::sync::Mutex::new(MathMode::Full),
        })
    }

    fn err(&self, message: impl std::fmt::Display) -> Error {
        device_error(self.ordinal, message)
    }

    /// cuBLAS in `math` mode: opened once in full f32 precision
    /// (`CUBLAS_DEFAULT_MATH`: no TF32 tensor-core rounding), switched
    /// when a GEMM asks for another mode.
    fn blas_in(&self, math: MathMode) -> Result<&CudaBlas, Error> {
        let blas = self.blas()?;
        let mut current = self.blas_math.lock().unwrap_or_else(|e| e.into_inner());
        if *current != math {
            let mode = match math {
                MathMode::Full => cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
                MathMode::Tf32 => cublas::sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            };
            // SAFETY: a live handle.
            unsafe { cublas::sys::cublasSetMathMode(*blas.handle(), mode) }
                .result()
                .map_err(|e| self.err(format!("cuBLAS: setting {math:?} math: {e}")))?;
            *current = math;
        }
        Ok(blas)
    }

    fn blas(&self) -> Result<&CudaBlas, Error> {
        let opened = self.blas.get_or_init(|| {
            // SAFETY: only probes whether the library can be opened.
            if !unsafe { cublas::sys::is_culib_present() } {
                return Err("the cuBLAS library (libcublas) is not installed".into());
            }
            let blas = CudaBlas::new(self.stream.clone()).map_err(|e| e.to_string())?;
            // SAFETY: a live handle.
            unsafe {
                cublas::sys::cublasSetMathMode(
                    *blas.handle(),
                    cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
                )
            }
            .result()
            .map_err(|e| e.to_string())?;
            Ok(blas)
        });
        opened.as_ref().map_err(|e| self.err(e))
    }
}

impl Driver for CudaDriver {
    type Function = CudaFunction;
    type Mark = Event;

    fn arch(&self) -> Arch {
        self.arch
    }

    fn multiprocessors(&self) -> u32 {
        self.sms
    }

    fn load(&self, text: &str) -> Result<CudaFunction, Error> {
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(text))
            .map_err(|e| self.err(format!("loading a PTX module: {e}")))?;
        module.load_function(ptx::ENTRY).map_err(|e| self.err(e))
    }

    fn launch(
        &self,
        function: &CudaFunction,
        grid: u32,
        block: u32,
        args: &[Arg],
    ) -> Result<(), Error> {
        // The parameter values and the pointers to them, in storage each
        // thread reuses: a launch allocates nothing.
        thread_local! {
            static PARAMS: std::cell::RefCell<(Vec<u64>, Vec<*mut std::ffi::c_void>)> =
                const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
        }
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        PARAMS.with_borrow_mut(|(values, pointers)| {
            values.clear();
            values.extend(args.iter().map(Arg::value));
            pointers.clear();
            pointers.extend(
                values
                    .iter_mut()
                    .map(|v| v as *mut u64 as *mut std::ffi::c_void),
            );
            // SAFETY: every tenjin kernel takes exactly these u64
            // parameters (addresses of live device buffers of the lengths
            // it was made for, checked by the runtime, or counts and
            // values), and reads and writes nothing else; `values` outlives
            // the call, which copies the parameters.
            unsafe {
                result::launch_kernel(
                    function.cu_function(),
                    (grid.max(1), 1, 1),
                    (block, 1, 1),
                    0,
                    self.stream.cu_stream(),
                    pointers,
                )
            }
            .map_err(|e| self.err(e))
        })
    }

    fn gemm(&self, call: &GemmCall) -> Result<(), Error> {
        use cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let blas = self.blas_in(call.math)?;
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let int = |x: usize| i32::try_from(x).map_err(|_| self.err("a GEMM size beyond 32 bits"));
        let (m, n, k) = (int(call.m)?, int(call.n)?, int(call.k)?);
        let (lda, ldb, ldc) = (int(call.a.ld)?, int(call.b.ld)?, int(call.c.ld)?);
        let batch = int(call.batch)?;
        let (sa, sb, sc) = (
            call.a.stride as i64,
            call.b.stride as i64,
            call.c.stride as i64,
        );
        let d = call.dtype;
        let (a, b, c) = (
            call.a.address(call.operands),
            call.b.address(call.operands),
            call.c.address(d),
        );
        // SAFETY: the runtime checked every operand's device, length and
        // dtype; the plan keeps every element a call touches inside its
        // operand (`Contraction::blas`), and C is a fresh output.
        let status = unsafe {
            match (d, call.half_operands) {
                // Buffers of half values: their products on the tensor
                // cores (exact conversions), summed in f32; half buffers
                // as they are, f32 ones converted by cuBLAS.
                (crate::DType::F32, Some(half)) => {
                    use cublas::sys::cublasComputeType_t as Compute;
                    use cublas::sys::cudaDataType::{CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
                    let (compute, operands) = match (half, call.operands) {
                        (crate::DType::BF16, crate::DType::F32) => {
                            (Compute::CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_32F)
                        }
                        (crate::DType::F16, crate::DType::F32) => {
                            (Compute::CUBLAS_COMPUTE_32F_FAST_16F, CUDA_R_32F)
                        }
                        (crate::DType::BF16, crate::DType::BF16) => {
                            (Compute::CUBLAS_COMPUTE_32F, CUDA_R_16BF)
                        }
                        (crate::DType::F16, crate::DType::F16) => {
                            (Compute::CUBLAS_COMPUTE_32F, CUDA_R_16F)
                        }
                        (half, operands) => {
                            return Err(self.err(format!(
                                "{half:?} products over {operands:?} buffers: not a half type's"
                            )))
                        }
                    };
                    let (alpha, beta) = (call.alpha as f32, call.beta as f32);
                    cublas::result::gemm_strided_batched_ex(
                        *blas.handle(),
                        op(call.trans_a),
                        op(call.trans_b),
                        m,
                        n,
                        k,
                        (&alpha as *const f32).cast(),
                        a as *const std::ffi::c_void,
                        operands,
                        lda,
                        sa,
                        b as *const std::ffi::c_void,
                        operands,
                        ldb,
                        sb,
                        (&beta as *const f32).cast(),
                        c as *mut std::ffi::c_void,
                        CUDA_R_32F,
                        ldc,
                        sc,
                        batch,
                        compute,
                        cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                (crate::DType::F32, None) => {
                    let (alpha, beta) = (call.alpha as f32, call.beta as f32);
                    cublas::result::sgemm_strided_batched(
                        *blas.handle(),
                        op(call.trans_a),
                        op(call.trans_b),
                        m,
                        n,
                        k,
                        &alpha,
                        a as *const f32,
                        lda,
                        sa,
                        b as *const f32,
                        ldb,
                        sb,
                        &beta,
                        c as *mut f32,
                        ldc,
                        sc,
                        batch,
                    )
                }
                (crate::DType::F64, _) => cublas::result::dgemm_strided_batched(
                    *blas.handle(),
                    op(call.trans_a),
                    op(call.trans_b),
                    m,
                    n,
                    k,
                    &call.alpha,
                    a as *const f64,
                    lda,
                    sa,
                    b as *const f64,
                    ldb,
                    sb,
                    &call.beta,
                    c as *mut f64,
                    ldc,
                    sc,
                    batch,
                ),
                (other, _) => return Err(crate::dtype::not_computable("gemm", other)),
            }
        };
        status.map_err(|e| self.err(format!("cuBLAS: {e}")))
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        // SAFETY: `dst` is a live device block of at least `src.len()` bytes.
        unsafe { result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))?;
        // The host slice may be freed when this returns.
        self.synchronize()
    }

    fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), Error> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        // SAFETY: `src` is a live device block of at least `dst.len()` bytes.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))?;
        self.synchronize()
    }

    fn copy_on_device(&self, dst: u64, src: u64, bytes: usize) -> Result<(), Error> {
        self.ctx.bind_to_thread().map_err(|e| self.err(e))?;
        // SAFETY: both are live device blocks of at least `bytes` bytes.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .map_err(|e| self.err(e))
    }

    fn synchronize(&self) -> Result<(), Error> {
        self.stream.synchronize().map_err(|e| self.err(e))
    }

    fn mark(&self) -> Result<Event, Error> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let event = self.stream.record_event(timed).map_err(|e| self.err(e))?;
        Ok(Event {
            event,
            ordinal: self.ordinal,
        })
    }
}

/// A timed event recorded on a device's stream ([`Driver::mark`]).
pub(crate) struct Event {
    event: cudarc::driver::CudaEvent,
    ordinal: usize,
}

// SAFETY: a CUDA event may be queried and destroyed from any thread of
// its context, which `CudaEvent` binds first.
unsafe impl Send for Event {}

impl super::driver::Mark for Event {
    fn seconds_since(&self, start: &Self) -> Result<f64, Error> {
        let ms = start
            .event
            .elapsed_ms(&self.event)
            .map_err(|e| device_error(self.ordinal, e))?;
        Ok(f64::from(ms) / 1e3)
    }
}
