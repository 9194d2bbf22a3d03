//! Which driver a CUDA device opens with, and the one backend of each
//! open device.
//!
//! Owns [`backend`] (device `n`'s backend, opened on first use: its
//! driver, its memory registered with the allocator), [`simulate`] and
//! `TENJIN_SIMULATE_GPU=1` (every CUDA device opened from then on is the
//! simulated one), and the availability queries. Must not plan or run
//! kernels.

use super::backend::GpuBackend;
use super::sim::{memory::SimMemory, SimDriver};
use crate::alloc::{Device, MAX_CUDA_DEVICES};
use crate::kernel::backend::Backend;
use crate::Error;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

static SIMULATE: AtomicBool = AtomicBool::new(false);
static OPEN: Mutex<[Option<Opened>; MAX_CUDA_DEVICES]> = Mutex::new([None; MAX_CUDA_DEVICES]);

/// An open device: its backend and whether it is simulated.
#[derive(Clone, Copy)]
struct Opened {
    backend: &'static dyn Backend,
    simulated: bool,
}

/// Whether devices open as simulated ones ([`simulate`] or
/// `TENJIN_SIMULATE_GPU=1`).
pub fn is_simulated() -> bool {
    SIMULATE.load(Relaxed) || std::env::var("TENJIN_SIMULATE_GPU").is_ok_and(|v| v == "1")
}

/// Makes every CUDA device opened from now on the simulated device: device
/// memory at addresses the host cannot dereference, PTX run by an
/// interpreter that checks every access. An error when a device is open on
/// a real GPU already.
///
/// ```
/// tenjin::cuda::simulate()?;
/// let x = tenjin::Tensor::ones_on(&[3], tenjin::DType::F32, tenjin::Device::Cuda(0))?;
/// assert_eq!(x.exp()?.to_vec()?, vec![1f32.exp(); 3]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn simulate() -> Result<(), Error> {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = open.iter().position(|o| o.is_some_and(|o| !o.simulated)) {
        return Err(Error::Device {
            device: Device::Cuda(n).to_string(),
            message: "open on a real GPU already: simulate() must come before a device is used"
                .into(),
        });
    }
    SIMULATE.store(true, Relaxed);
    Ok(())
}

/// The number of CUDA devices a program can use (real ones; 0 without the
/// `cuda` feature, a driver or a GPU).
pub fn device_count() -> usize {
    #[cfg(feature = "cuda")]
    return super::cuda::device_count();
    #[cfg(not(feature = "cuda"))]
    0
}

/// Whether a real CUDA device can be used.
///
/// ```
/// // On a machine without a GPU this is simply false; nothing panics.
/// let _ = tenjin::cuda::is_available();
/// ```
pub fn is_available() -> bool {
    device_count() > 0
}

/// The backend of CUDA device `n`, opened on first use.
pub(crate) fn backend(n: usize) -> Result<&'static dyn Backend, Error> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let slot = open.get_mut(n).ok_or_else(|| Error::Device {
        device: Device::Cuda(n).to_string(),
        message: format!("tenjin uses at most {MAX_CUDA_DEVICES} CUDA devices"),
    })?;
    if let Some(o) = slot {
        return Ok(o.backend);
    }
    let opened = if is_simulated() {
        let memory: &'static SimMemory = Box::leak(Box::new(SimMemory::new()));
        if !crate::alloc::register_device_memory(n, memory) {
            return Err(Error::Device {
                device: Device::Cuda(n).to_string(),
                message: "its memory is registered already".into(),
            });
        }
        let device = Device::Cuda(n);
        Opened {
            backend: Box::leak(Box::new(GpuBackend::new(
                device,
                SimDriver::new(device, memory),
            ))),
            simulated: true,
        }
    } else {
        Opened {
            backend: open_real(n)?,
            simulated: false,
        }
    };
    *slot = Some(opened);
    Ok(opened.backend)
}

#[cfg(feature = "cuda")]
fn open_real(n: usize) -> Result<&'static dyn Backend, Error> {
    let driver = super::cuda::CudaDriver::open(n)?;
    Ok(Box::leak(Box::new(GpuBackend::new(
        Device::Cuda(n),
        driver,
    ))))
}

#[cfg(not(feature = "cuda"))]
fn open_real(n: usize) -> Result<&'static dyn Backend, Error> {
    Err(Error::Device {
        device: Device::Cuda(n).to_string(),
        message: "tenjin was built without the `cuda` feature; build with `--features cuda` for a \
                  GPU, or call tenjin::cuda::simulate() (TENJIN_SIMULATE_GPU=1) for the simulated \
                  device"
            .into(),
    })
}
