//! Creating tensors and reading their data back.
//!
//! Owns constructors (`zeros ones full from_vec arange eye rand randn`),
//! the seeded random generator behind `rand`/`randn`, and `to_vec`,
//! `item`, `to_dtype`. Created tensors are constants (no trace) until
//! `requires_grad()`.

use super::{Origin, Tensor};
use crate::alloc::Device;
use crate::dtype::{with_element, Element};
use crate::runtime::Storage;
use crate::DType;
use crate::Error;

/// The element count of `shape`, or an error when it overflows (kernels
/// index elements with `i64`, so the count must fit one).
pub(crate) fn numel_of(op: &str, shape: &[usize]) -> Result<usize, Error> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| {
            Error::shape(
                op,
                format!("the shape {shape:?} has more elements than fit in memory"),
            )
        })
}

impl Tensor {
    /// A tensor whose element `i` is `value(i)`, called in index order
    /// (random draws fill it directly: a shape too large for memory is an
    /// `OutOfMemory` error before anything is drawn).
    fn from_f64_fn(
        op: &str,
        shape: &[usize],
        dtype: DType,
        mut value: impl FnMut(usize) -> f64,
    ) -> Result<Tensor, Error> {
        let n = numel_of(op, shape)?;
        let device = super::default_device();
        let host = Storage::uninit(dtype, n)?;
        {
            // Drawn straight into a host block.
            let mut b = host.write()?;
            let out = host.operand_mut(&mut b)?;
            with_element!(dtype, T => fill(out.host_slice_mut::<T>()?, &mut value));
        }
        let storage = match device {
            Device::Cpu => host,
            d => host.to_device(d)?,
        };
        Ok(Tensor::dense(shape.to_vec(), storage, Origin::Constant))
    }

    /// An f32 tensor holding `data` (row-major) with `shape`.
    ///
    /// ```
    /// let t = tenjin::Tensor::from_vec(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert!(tenjin::Tensor::from_vec(vec![1., 2.], &[3]).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_vec(data: Vec<f32>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec", &data, shape)
    }

    /// An f64 tensor holding `data` (row-major) with `shape`.
    pub fn from_vec_f64(data: Vec<f64>, shape: &[usize]) -> Result<Tensor, Error> {
        Tensor::from_host("from_vec_f64", &data, shape)
    }

    /// A scalar (shape `[]`) tensor.
    ///
    /// ```
    /// let s = tenjin::Tensor::scalar(2.5, tenjin::DType::F64)?;
    /// assert_eq!(s.item()?, 2.5);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn scalar(value: f64, dtype: DType) -> Result<Tensor, Error> {
        Tensor::full(&[], value, dtype)
    }

    /// Zeros of `shape`.
    ///
    /// ```
    /// let z = tenjin::Tensor::zeros(&[2, 2], tenjin::DType::F32)?;
    /// assert_eq!(z.to_vec()?, vec![0.; 4]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor, Error> {
        Tensor::zeros_on(shape, dtype, super::default_device())
    }

    /// Ones of `shape`.
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor, Error> {
        Tensor::full(shape, 1.0, dtype)
    }

    /// `value` everywhere in `shape`.
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor, Error> {
        Tensor::full_on(shape, value, dtype, super::default_device())
    }

    /// `[0, 1, ..., n - 1]`.
    ///
    /// ```
    /// let r = tenjin::Tensor::arange(4, tenjin::DType::F64)?;
    /// assert_eq!(r.to_vec_f64()?, vec![0., 1., 2., 3.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn arange(n: usize, dtype: DType) -> Result<Tensor, Error> {
        Tensor::from_f64_fn("arange", &[n], dtype, |i| i as f64)
    }

    /// The `n × n` identity matrix.
    ///
    /// ```
    /// let e = tenjin::Tensor::eye(2, tenjin::DType::F32)?;
    /// assert_eq!(e.to_vec()?, vec![1., 0., 0., 1.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn eye(n: usize, dtype: DType) -> Result<Tensor, Error> {
        Tensor::from_f64_fn("eye", &[n, n], dtype, |k| {
            f64::from(u8::from(k / n.max(1) == k % n.max(1)))
        })
    }

    /// Uniform values in `[0, 1)`, reproducible from `seed`.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let a = Tensor::rand(&[100], DType::F32, 7)?.to_vec()?;
    /// assert_eq!(a, Tensor::rand(&[100], DType::F32, 7)?.to_vec()?);
    /// assert!(a.iter().all(|&x| (0.0..1.0).contains(&x)));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn rand(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor, Error> {
        let mut rng = SplitMix64::new(seed);
        // f32 gets 24 random bits, so no value rounds up to 1.
        if !dtype.is_float() {
            return Err(crate::dtype::not_computable("rand", dtype));
        }
        let draw = |r: &mut SplitMix64| match dtype {
            DType::F32 => (r.next_u64() >> 40) as f64 / (1u64 << 24) as f64,
            _ => r.uniform(),
        };
        Tensor::from_f64_fn("rand", shape, dtype, |_| draw(&mut rng))
    }

    /// Standard normal values, reproducible from `seed`.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::randn(&[10000], DType::F64, 1)?.to_vec_f64()?;
    /// let mean = x.iter().sum::<f64>() / 1e4;
    /// let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 1e4;
    /// assert!(mean.abs() < 0.05 && (var - 1.0).abs() < 0.05);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor, Error> {
        let mut rng = SplitMix64::new(seed);
        Tensor::from_f64_fn("randn", shape, dtype, |_| rng.normal())
    }

    /// The elements in row-major order, as f32 (f64 tensors are rounded).
    pub fn to_vec(&self) -> Result<Vec<f32>, Error> {
        if self.dtype() == DType::F32 {
            // Straight from the storage: no round trip through f64.
            let mut out = vec![0f32; self.numel()];
            self.read_into(&mut out)?;
            return Ok(out);
        }
        Ok(self.to_vec_f64()?.into_iter().map(|x| x as f32).collect())
    }

    /// Copies the elements (row-major) into `out`, which has this tensor's
    /// element type and length; an error naming both otherwise.
    pub(crate) fn read_into<T: crate::dtype::Element>(&self, out: &mut [T]) -> Result<(), Error> {
        let storage = self.contiguous_detached()?.dense_storage()?;
        if !storage.read_into(out)? {
            return Err(Error::shape(
                "read_into",
                format!(
                    "{} {:?} values cannot take a tensor of shape {:?} ({:?})",
                    out.len(),
                    T::DTYPE,
                    self.shape(),
                    self.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// The elements in row-major order, as f64.
    pub fn to_vec_f64(&self) -> Result<Vec<f64>, Error> {
        if !self.dtype().is_float() {
            return Ok(self.to_vec_i64()?.into_iter().map(|x| x as f64).collect());
        }
        self.contiguous_detached()?.dense_storage()?.to_f64_vec()
    }

    /// The value of a one-element tensor.
    ///
    /// ```
    /// let t = tenjin::Tensor::from_vec(vec![3.0], &[1, 1])?;
    /// assert_eq!(t.item()?, 3.0);
    /// assert!(tenjin::Tensor::from_vec(vec![1., 2.], &[2])?.item().is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn item(&self) -> Result<f64, Error> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!(
                    "item needs a one-element tensor, this one has shape {:?}",
                    self.shape()
                ),
            ));
        }
        Ok(self.to_vec_f64()?[0])
    }
}

fn fill<T: Element>(out: &mut [T], mut value: impl FnMut(usize) -> f64) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = <T as Element>::from_f64(value(i));
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, reproducible across
/// platforms; good enough for initialisation and shuffling.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(crate::symbolic::random::GAMMA);
        crate::symbolic::random::mix(self.0)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller, one value per call).
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: log is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
