//! Where tensors live: the default device, creation on a given device, and
//! moving data between devices.
//!
//! Owns [`set_default_device`] and [`default_device`] (where the plain
//! constructors — `zeros`, `from_vec`, `randn`, … — create), the `_on`
//! constructors, and `to_device`/`to_cpu`. Every op then runs where its
//! inputs live (`crate::ops` checks they share one device); nothing moves
//! between devices silently. Moving a tensor that requires a gradient is
//! not recorded on the tape yet, so it is refused rather than silently
//! cut from the graph.

use super::{Origin, Tensor};
use crate::alloc::Device;
use crate::runtime::Storage;
use crate::{DType, Error};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The default device (`Device::code`).
static DEFAULT: AtomicU64 = AtomicU64::new(0);

/// Makes the plain constructors (`zeros`, `ones`, `full`, `from_vec`,
/// `arange`, `eye`, `rand`, `randn`, `scalar`, the integer ones) create on
/// `device`, for every thread of the process (PyTorch's
/// `torch.set_default_device`).
///
/// ```
/// use tenjin::{set_default_device, default_device, Device};
/// assert_eq!(default_device(), Device::Cpu);
/// set_default_device(Device::Cpu);
/// ```
pub fn set_default_device(device: Device) {
    DEFAULT.store(device.code(), Relaxed);
}

/// Where the plain constructors create (the CPU unless
/// [`set_default_device`] said otherwise).
pub fn default_device() -> Device {
    Device::from_code(DEFAULT.load(Relaxed))
}

/// Moves the dense `tensors` to `device` in place, all or nothing: every
/// copy is made before the first tensor changes. Their gradients are
/// cleared.
pub(crate) fn move_all(tensors: &[Tensor], device: Device) -> Result<(), Error> {
    let mut moves: Vec<(Arc<Storage>, Arc<Storage>)> = Vec::new();
    for t in tensors {
        let storage = t.dense_storage()?;
        if storage.device() != device && !moves.iter().any(|(s, _)| Arc::ptr_eq(s, &storage)) {
            let moved = storage.to_device(device)?;
            moves.push((storage, moved));
        }
    }
    for (storage, moved) in moves {
        storage.adopt(moved)?;
    }
    tensors.iter().for_each(Tensor::zero_grad);
    Ok(())
}

impl Tensor {
    /// Zeros of `shape` on `device`.
    ///
    /// ```
    /// use tenjin::{DType, Device, Tensor};
    /// let z = Tensor::zeros_on(&[2], DType::F64, Device::Cpu)?;
    /// assert_eq!((z.device(), z.to_vec_f64()?), (Device::Cpu, vec![0., 0.]));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn zeros_on(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor, Error> {
        let n = super::create::numel_of("zeros", shape)?;
        Ok(Tensor::dense(
            shape.to_vec(),
            Storage::zeros_on(device, dtype, n)?,
            Origin::Constant,
        ))
    }

    /// Ones of `shape` on `device`.
    pub fn ones_on(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor, Error> {
        Tensor::full_on(shape, 1.0, dtype, device)
    }

    /// `value` everywhere in `shape`, on `device`.
    pub fn full_on(
        shape: &[usize],
        value: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor, Error> {
        let storage = Storage::uninit_on(device, dtype, super::create::numel_of("full", shape)?)?;
        storage.fill(value)?;
        Ok(Tensor::dense(shape.to_vec(), storage, Origin::Constant))
    }

    /// An f32 tensor holding `data` (row-major) with `shape`, on `device`.
    pub fn from_vec_on(data: Vec<f32>, shape: &[usize], device: Device) -> Result<Tensor, Error> {
        Tensor::from_host_on("from_vec_on", &data, shape, device)
    }

    /// An f64 tensor holding `data` (row-major) with `shape`, on `device`.
    pub fn from_vec_f64_on(
        data: Vec<f64>,
        shape: &[usize],
        device: Device,
    ) -> Result<Tensor, Error> {
        Tensor::from_host_on("from_vec_f64_on", &data, shape, device)
    }

    /// Standard normal values on `device`, the same as [`Tensor::randn`]
    /// draws for `seed`.
    pub fn randn_on(
        shape: &[usize],
        dtype: DType,
        seed: u64,
        device: Device,
    ) -> Result<Tensor, Error> {
        Tensor::randn(shape, dtype, seed)?.to_device(device)
    }

    /// Uniform values in `[0, 1)` on `device`, the same as
    /// [`Tensor::rand`] draws for `seed`.
    pub fn rand_on(
        shape: &[usize],
        dtype: DType,
        seed: u64,
        device: Device,
    ) -> Result<Tensor, Error> {
        Tensor::rand(shape, dtype, seed)?.to_device(device)
    }

    /// A copy of the data on `device` (the tensor itself when it is there
    /// already). A view is made contiguous first. The copy is a constant:
    /// a tensor that requires a gradient is refused, since the move is
    /// not recorded on the tape yet (move parameters with
    /// `Module::to_device`, or `detach()` first).
    ///
    /// ```
    /// use tenjin::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1., 2.], &[2])?;
    /// assert_eq!(x.to_device(Device::Cpu)?.to_vec()?, vec![1., 2.]);
    /// assert!(x.requires_grad().to_device(Device::Cuda(0)).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn to_device(&self, device: Device) -> Result<Tensor, Error> {
        if device == self.device() {
            return Ok(self.clone());
        }
        if self.is_requires_grad() {
            return Err(Error::Autograd {
                op: "to_device".into(),
                message: format!(
                    "the tensor of shape {:?} requires a gradient, and moving it from {} to {device} is not recorded on the tape yet; detach() it, or move parameters with Module::to_device",
                    self.shape(),
                    self.device()
                ),
            });
        }
        let dense = self.contiguous_detached()?;
        let moved = dense.dense_storage()?.to_device(device)?;
        Ok(Tensor::dense(
            self.shape().to_vec(),
            moved,
            Origin::Constant,
        ))
    }

    /// A copy of the data in host memory ([`Tensor::to_device`] with
    /// `Device::Cpu`).
    pub fn to_cpu(&self) -> Result<Tensor, Error> {
        self.to_device(Device::Cpu)
    }
}
