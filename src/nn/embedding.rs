//! [`Embedding`]: a table of vectors looked up by integer ids.

use super::{Mode, Module};
use crate::{DType, Error, Tensor};

/// A `[num, dim]` table looked up by integer ids (PyTorch's
/// `nn.Embedding`, weights drawn from N(0, 1) as PyTorch's): `forward(ids)`
/// with ids of any shape `S` gives `S + [dim]`. The look-up is
/// [`Tensor::embedding`]; its gradient a deterministic segmented sum.
///
/// ```
/// use tenjin::nn::{Embedding, Module};
/// use tenjin::Tensor;
/// let emb = Embedding::new(10, 4, 0)?;
/// let ids = Tensor::from_vec_i64(vec![1, 7, 1, 0, 9, 9], &[2, 3])?;
/// let h = emb.forward(&ids)?;
/// assert_eq!(h.shape(), &[2, 3, 4]);
/// h.sum()?.backward()?;
/// let g = emb.weight.grad().unwrap().to_vec()?;
/// assert_eq!(&g[4..8], &[2.0; 4]); // id 1 appears twice
/// assert_eq!(&g[8..12], &[0.0; 4]); // id 2 never
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Embedding {
    pub weight: Tensor,
    mode: Mode,
}

impl Embedding {
    /// `num` vectors of `dim` f32 values from N(0, 1), reproducible from
    /// `seed`.
    pub fn new(num: usize, dim: usize, seed: u64) -> Result<Embedding, Error> {
        Embedding::with_dtype(num, dim, DType::F32, seed)
    }

    pub fn with_dtype(num: usize, dim: usize, dtype: DType, seed: u64) -> Result<Embedding, Error> {
        Ok(Embedding::from_weight(
            Tensor::randn(&[num, dim], dtype, seed)?.requires_grad(),
        ))
    }

    /// A table with the given `[num, dim]` weight, trained when it
    /// requires a gradient and frozen when not (PyTorch's
    /// `Embedding.from_pretrained(weight, freeze)` is
    /// `from_weight(weight.requires_grad())` or `from_weight(weight)`).
    ///
    /// ```
    /// use tenjin::nn::{Embedding, Module};
    /// use tenjin::{DType, Tensor};
    /// let emb = Embedding::from_weight(Tensor::eye(3, DType::F32)?);
    /// assert!(emb.named_parameters().is_empty()); // frozen
    /// let h = emb.forward(&Tensor::from_vec_i64(vec![2], &[1])?)?;
    /// assert_eq!(h.to_vec()?, vec![0.0, 0.0, 1.0]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn from_weight(weight: Tensor) -> Embedding {
        Embedding {
            weight,
            mode: Mode::default(),
        }
    }
}

impl Module for Embedding {
    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn forward(&self, ids: &Tensor) -> Result<Tensor, Error> {
        self.weight.embedding(ids)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        if !self.weight.is_requires_grad() {
            return Vec::new();
        }
        vec![("weight".into(), self.weight.clone())]
    }

    /// A frozen table is saved with the model, as PyTorch's is (a frozen
    /// `nn.Embedding`'s weight is still a parameter there, in its state
    /// dict).
    fn own_buffers(&self) -> Vec<(String, Tensor)> {
        if self.weight.is_requires_grad() {
            return Vec::new();
        }
        vec![("weight".into(), self.weight.clone())]
    }
}
