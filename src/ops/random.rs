//! Random ops drawn in the kernel from the counter-based stream
//! (`crate::symbolic::random`): [`Tensor::dropout`] and
//! [`Tensor::rand_stream`], and the [`Generator`] whose calls key them.
//!
//! A call takes the next key of a generator (seed, call number) and passes
//! it to the kernel as a three-element argument, filled on the tensor's
//! device (no copy from the host); the kernel draws element `e`'s value at
//! counter `e`. Nothing random is stored: a dropout's derivative is again
//! an index function that draws its mask from the same key, so backward
//! recomputes the mask in either memory mode, and every backend and thread
//! count draws the same one. Owns no backend code.

use super::formula::{access, define, guard, indices};
use super::{apply, lit};
use crate::runtime::Storage;
use crate::symbolic::random::{self, ULP};
use crate::tensor::Tensor;
use crate::trace::Origin;
use crate::{DType, Device, Error};
use std::cell::RefCell;

/// A stream of keys for random ops: a seed and the number of calls drawn
/// so far (PyTorch's `torch.Generator`, counter-based like its CUDA
/// Philox generator: call `n`'s key depends only on the seed and `n`).
///
/// ```
/// use tenjin::{Generator, Tensor};
/// let x = Tensor::ones(&[1000], tenjin::DType::F32)?;
/// let a = x.dropout_with(0.5, &mut Generator::new(7))?.to_vec()?;
/// let b = x.dropout_with(0.5, &mut Generator::new(7))?.to_vec()?;
/// assert_eq!(a, b);
/// assert!(a.iter().all(|&v| v == 0.0 || v == 2.0));
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generator {
    seed: u64,
    calls: u64,
}

impl Generator {
    /// A generator at its first call.
    pub fn new(seed: u64) -> Generator {
        Generator { seed, calls: 0 }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Calls drawn so far (save it with the seed to resume the stream).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Resumes the stream after `calls` calls.
    pub fn set_calls(&mut self, calls: u64) {
        self.calls = calls;
    }

    /// The key of the next call.
    pub fn next_key(&mut self) -> u64 {
        let k = random::call_key(self.seed, self.calls);
        self.calls = self.calls.wrapping_add(1);
        k
    }
}

thread_local! {
    static DEFAULT: RefCell<Generator> = RefCell::new(Generator::new(DEFAULT_SEED));
}

/// The default generator's seed until [`manual_seed`] is called.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// Reseeds this thread's default generator (PyTorch's `torch.manual_seed`),
/// which [`Tensor::dropout`] and `nn::Dropout` draw from.
pub fn manual_seed(seed: u64) {
    DEFAULT.with(|g| *g.borrow_mut() = Generator::new(seed));
}

/// A copy of this thread's default generator (to save its state).
pub fn default_generator() -> Generator {
    DEFAULT.with(|g| g.borrow().clone())
}

/// Replaces this thread's default generator (to restore a saved state).
pub fn set_default_generator(g: Generator) {
    DEFAULT.with(|d| *d.borrow_mut() = g);
}

fn next_default_key() -> u64 {
    DEFAULT.with(|g| g.borrow_mut().next_key())
}

/// The three-element key argument of `key`, on `device`.
fn key_tensor(key: u64, dtype: DType, device: Device) -> Result<Tensor, Error> {
    let storage = Storage::uninit_on(device, dtype, 3)?;
    for (i, w) in random::words(key).into_iter().enumerate() {
        storage.fill_span(i, 1, w)?;
    }
    Ok(Tensor::dense(vec![3], storage, Origin::Constant))
}

/// `random(k[0], k[1], k[2]; linear index)` for an output of `shape`
/// indexed by `ix` (a tensor's element count fits an `i64`).
fn draw(ix: &[String], shape: &[usize]) -> String {
    let strides = crate::symbolic::index_fn::row_major_strides(shape).unwrap_or_default();
    let counter: Vec<String> = ix
        .iter()
        .zip(&strides)
        .map(|(i, s)| format!("{i}*{s}"))
        .collect();
    let counter = if counter.is_empty() {
        "0".to_string()
    } else {
        counter.join(" + ")
    };
    format!("random(k[0], k[1], k[2]; {counter})")
}

impl Tensor {
    /// Zeroes each element with probability `p` and scales the others by
    /// `1/(1-p)` when `training` (PyTorch's `F.dropout`); the input itself
    /// otherwise. Draws from this thread's default generator
    /// ([`manual_seed`](crate::manual_seed)).
    ///
    /// The mask is drawn in the kernel and drawn again by the derivative,
    /// never stored. A kept element is multiplied, so NaN and ∞ propagate
    /// as in PyTorch (a dropped NaN stays NaN). `p` is rounded up to a
    /// multiple of 2⁻²⁴ (the stream's resolution) so that f32 and f64
    /// draw the same mask.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// tenjin::manual_seed(1);
    /// let x = Tensor::ones(&[10_000], tenjin::DType::F64)?;
    /// let y = x.dropout(0.25, true)?.to_vec_f64()?;
    /// let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / 1e4;
    /// assert!((kept - 0.75).abs() < 0.02);
    /// assert_eq!(x.dropout(0.25, false)?.to_vec_f64()?, vec![1.0; 10_000]);
    /// assert!(x.dropout(1.5, true).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn dropout(&self, p: f64, training: bool) -> Result<Tensor, Error> {
        check_probability(p)?;
        if !training {
            return Ok(self.clone());
        }
        self.dropout_keyed(p, next_default_key())
    }

    /// [`Tensor::dropout`] in training mode, drawing from `generator`.
    pub fn dropout_with(&self, p: f64, generator: &mut Generator) -> Result<Tensor, Error> {
        check_probability(p)?;
        self.dropout_keyed(p, generator.next_key())
    }

    fn dropout_keyed(&self, p: f64, key: u64) -> Result<Tensor, Error> {
        if !self.dtype().is_float() {
            return Err(crate::dtype::not_computable("dropout", self.dtype()));
        }
        let threshold = (p / ULP).ceil() * ULP;
        // At p = 1 no draw reaches the threshold: every element is
        // multiplied by 0 (NaN and ∞ become NaN, as in PyTorch).
        let keep = if threshold >= 1.0 {
            "1".to_string()
        } else {
            lit("dropout", 1.0 / (1.0 - p))?
        };
        let k = key_tensor(key, self.dtype(), self.device())?;
        let ix = indices("i", self.rank());
        let factor = guard(
            format!(
                "{} >= {}",
                draw(&ix, self.shape()),
                lit("dropout", threshold)?
            ),
            keep,
            0,
        );
        let body = format!("{} * ({factor})", access("x", &ix));
        let sizes = super::formula::sizes("i", self.shape());
        apply(
            "dropout",
            &define("f", &ix, body),
            &[("x", self), ("k", &k)],
            &super::formula::size_refs(&sizes),
        )
    }

    /// Uniform values in `[0, 1)` of `shape`, drawn in the kernel on
    /// `device` from `generator` (24 random bits each, the same values at
    /// f32 and f64 and on every backend). [`Tensor::rand`] instead draws
    /// on the host from a seed.
    ///
    /// ```
    /// use tenjin::{DType, Device, Generator, Tensor};
    /// let mut g = Generator::new(3);
    /// let a = Tensor::rand_stream(&[4, 5], DType::F32, Device::Cpu, &mut g)?;
    /// let b = Tensor::rand_stream(&[4, 5], DType::F64, Device::Cpu, &mut Generator::new(3))?;
    /// assert_eq!(a.to_vec_f64()?, b.to_vec_f64()?);
    /// assert!(a.to_vec()?.iter().all(|v| (0.0..1.0).contains(v)));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn rand_stream(
        shape: &[usize],
        dtype: DType,
        device: Device,
        generator: &mut Generator,
    ) -> Result<Tensor, Error> {
        if !dtype.is_float() {
            return Err(crate::dtype::not_computable("rand_stream", dtype));
        }
        let k = key_tensor(generator.next_key(), dtype, device)?;
        let ix = indices("i", shape.len());
        let sizes = super::formula::sizes("i", shape);
        apply(
            "rand_stream",
            &define("f", &ix, draw(&ix, shape)),
            &[("k", &k)],
            &super::formula::size_refs(&sizes),
        )
    }
}

fn check_probability(p: f64) -> Result<(), Error> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::Invalid {
            function: "dropout".into(),
            message: format!(
                "the probability of an element to be zeroed must be in [0, 1], not {p}"
            ),
        });
    }
    Ok(())
}
