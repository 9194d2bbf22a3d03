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
    /// A row that gets no gradient (PyTorch's `padding_idx`): see
    /// [`Embedding::with_padding_idx`].
    padding_idx: Option<usize>,
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
            padding_idx: None,
            mode: Mode::default(),
        }
    }

    /// This table with row `padding_idx` as PyTorch's `padding_idx`: the
    /// row is zeroed, and looking it up gives that row's value but passes
    /// no gradient to it (padding tokens leave the table untouched). A row
    /// past the table is an error.
    ///
    /// ```
    /// use tenjin::nn::{Embedding, Module};
    /// use tenjin::Tensor;
    /// let emb = Embedding::new(4, 2, 0)?.with_padding_idx(0)?;
    /// let ids = Tensor::from_vec_i64(vec![0, 3, 0], &[3])?;
    /// let h = emb.forward(&ids)?;
    /// assert_eq!(&h.to_vec()?[..2], &[0.0, 0.0]);
    /// h.sum()?.backward()?;
    /// let g = emb.weight.grad().unwrap().to_vec()?;
    /// assert_eq!((&g[..2], &g[6..]), (&[0.0, 0.0][..], &[1.0, 1.0][..]));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_padding_idx(mut self, padding_idx: usize) -> Result<Embedding, Error> {
        let rows = self.weight.shape().first().copied().unwrap_or(0);
        if padding_idx >= rows {
            return Err(super::config_error(
                "Embedding",
                format!("padding_idx {padding_idx} is not a row of a table of {rows}"),
            ));
        }
        let width: usize = self.weight.shape()[1..].iter().product();
        let mut values = self.weight.to_vec_f64()?;
        values[padding_idx * width..(padding_idx + 1) * width].fill(0.0);
        let zeroed = Tensor::from_vec_f64(values, self.weight.shape())?;
        super::load_into(
            &[("weight".into(), self.weight.clone())],
            &[("weight".into(), zeroed)],
        )?;
        self.padding_idx = Some(padding_idx);
        Ok(self)
    }
}

impl Module for Embedding {
    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn forward(&self, ids: &Tensor) -> Result<Tensor, Error> {
        let rows = self.weight.embedding(ids)?;
        let Some(pad) = self.padding_idx else {
            return Ok(rows);
        };
        // The padding rows' values, with no path back to the table.
        let pad = Tensor::full(&[], pad as f64, ids.dtype())?.to_device(ids.device())?;
        let learned = ids.ne(&pad)?.to_dtype(rows.dtype())?.unsqueeze(-1)?;
        Tensor::where_(&learned, &rows, &rows.detach())
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
