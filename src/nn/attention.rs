//! [`MultiheadAttention`] (PyTorch's `nn.MultiheadAttention`): the input
//! projections, [`Tensor::scaled_dot_product_attention`] over the heads,
//! and the output projection, with PyTorch's parameter names, shapes,
//! initialisation and mask conventions. No backward code: every piece is
//! an op whose derivative is derived.

use super::{config_error, init, Mode, Module};
use crate::{AttentionOptions, DType, Error, Tensor};

/// The options of [`MultiheadAttention::with_config`], with PyTorch's
/// names and defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiheadAttentionConfig {
    /// Dropout of the attention weights while training (default 0).
    pub dropout: f64,
    /// Biases on the input and output projections (default `true`).
    pub bias: bool,
    /// Inputs and outputs are `[N, L, E]` (default `false`: `[L, N, E]`).
    pub batch_first: bool,
    pub dtype: DType,
}

impl Default for MultiheadAttentionConfig {
    fn default() -> Self {
        MultiheadAttentionConfig {
            dropout: 0.0,
            bias: true,
            batch_first: false,
            dtype: DType::F32,
        }
    }
}

/// What a call of [`MultiheadAttention::attend`] masks and returns, as
/// PyTorch's `forward` arguments. Masks follow `nn.MultiheadAttention`'s
/// convention (the opposite of `scaled_dot_product_attention`'s boolean
/// one): an integer mask is non-zero where attention is *not* allowed, a
/// float mask is added to the scores.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttendOptions<'a> {
    /// `[N, S]`: keys to ignore per batch element (padding).
    pub key_padding_mask: Option<&'a Tensor>,
    /// `[L, S]` or `[N·heads, L, S]`.
    pub attn_mask: Option<&'a Tensor>,
    /// Query `l` attends to keys `s ≤ l` (with no `attn_mask` needed).
    pub is_causal: bool,
    /// Return the attention weights, `[N, L, S]` averaged over the heads
    /// (or `[N, heads, L, S]` with `average_attn_weights: false`).
    pub need_weights: bool,
    pub average_attn_weights: bool,
}

/// Multi-head attention with `heads` heads over `embed_dim` features.
///
/// ```
/// use tenjin::nn::{AttendOptions, Module, MultiheadAttention, MultiheadAttentionConfig};
/// use tenjin::{DType, Tensor};
/// let config = MultiheadAttentionConfig { batch_first: true, ..Default::default() };
/// let mha = MultiheadAttention::with_config(16, 4, config, 0)?;
/// let x = Tensor::randn(&[2, 5, 16], DType::F32, 1)?; // [N, L, E]
/// assert_eq!(mha.forward(&x)?.shape(), &[2, 5, 16]); // self-attention
/// let opts = AttendOptions { is_causal: true, need_weights: true, average_attn_weights: true, ..Default::default() };
/// let (y, w) = mha.attend(&x, &x, &x, &opts)?;
/// let w = w.unwrap().to_vec()?; // [2, 5, 5]: zero above the diagonal
/// assert_eq!((y.shape(), w[1]), (&[2, 5, 16][..], 0.0));
/// let names: Vec<String> = mha.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Debug)]
pub struct MultiheadAttention {
    heads: usize,
    config: MultiheadAttentionConfig,
    in_proj_weight: Tensor,
    in_proj_bias: Option<Tensor>,
    out_weight: Tensor,
    out_bias: Option<Tensor>,
    mode: Mode,
}

impl MultiheadAttention {
    /// f32, sequence-first, with biases and no dropout (PyTorch's
    /// defaults), initialised from `seed`.
    pub fn new(embed_dim: usize, heads: usize, seed: u64) -> Result<MultiheadAttention, Error> {
        MultiheadAttention::with_config(embed_dim, heads, MultiheadAttentionConfig::default(), seed)
    }

    /// As PyTorch initialises it: `in_proj_weight` Xavier-uniform,
    /// `out_proj.weight` as a `Linear`'s, the biases zero.
    pub fn with_config(
        embed_dim: usize,
        heads: usize,
        config: MultiheadAttentionConfig,
        seed: u64,
    ) -> Result<MultiheadAttention, Error> {
        if heads == 0 || embed_dim == 0 || !embed_dim.is_multiple_of(heads) {
            return Err(config_error(
                "MultiheadAttention",
                format!("embed_dim {embed_dim} must be a positive multiple of num_heads {heads}"),
            ));
        }
        if !(0.0..=1.0).contains(&config.dropout) {
            return Err(config_error(
                "MultiheadAttention",
                format!("dropout must be in [0, 1], got {}", config.dropout),
            ));
        }
        let (e, dtype) = (embed_dim, config.dtype);
        let zeros = |n: usize| Tensor::zeros(&[n], dtype);
        MultiheadAttention::from_parameters(
            heads,
            init::xavier_uniform(&[3 * e, e], dtype, seed)?,
            config.bias.then(|| zeros(3 * e)).transpose()?,
            init::fan_in_uniform(&[e, e], e, dtype, init::sub_seed(seed))?,
            config.bias.then(|| zeros(e)).transpose()?,
            config,
        )
    }

    /// A layer with the given `in_proj_weight` `[3E, E]`, `in_proj_bias`
    /// `[3E]`, `out_proj.weight` `[E, E]` and `out_proj.bias` `[E]` (made
    /// leaves that require a gradient; biases present as `config.bias`
    /// says).
    pub fn from_parameters(
        heads: usize,
        in_proj_weight: Tensor,
        in_proj_bias: Option<Tensor>,
        out_weight: Tensor,
        out_bias: Option<Tensor>,
        config: MultiheadAttentionConfig,
    ) -> Result<MultiheadAttention, Error> {
        let e = out_weight.shape().first().copied().unwrap_or(0);
        let shapes_ok = in_proj_weight.shape() == [3 * e, e]
            && out_weight.shape() == [e, e]
            && in_proj_bias.is_some() == config.bias
            && out_bias.is_some() == config.bias;
        if !shapes_ok || heads == 0 || !e.is_multiple_of(heads) {
            return Err(config_error(
                "MultiheadAttention",
                format!(
                    "in_proj_weight {:?} must be [3E, E] and out_proj.weight {:?} [E, E], E a multiple of num_heads {heads}, biases as config.bias ({})",
                    in_proj_weight.shape(),
                    out_weight.shape(),
                    config.bias
                ),
            ));
        }
        super::check_bias("MultiheadAttention", &in_proj_weight, in_proj_bias.as_ref())?;
        super::check_bias("MultiheadAttention", &out_weight, out_bias.as_ref())?;
        Ok(MultiheadAttention {
            heads,
            config,
            in_proj_weight: in_proj_weight.requires_grad(),
            in_proj_bias: in_proj_bias.map(Tensor::requires_grad),
            out_weight: out_weight.requires_grad(),
            out_bias: out_bias.map(Tensor::requires_grad),
            mode: Mode::default(),
        })
    }

    /// `(output, weights)` of queries `query` `[L, N, E]` (`[N, L, E]` with
    /// `batch_first`) over keys and values `[S, N, E]`.
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        options: &AttendOptions,
    ) -> Result<(Tensor, Option<Tensor>), Error> {
        let e = self.in_proj_weight.shape()[1];
        let batch_first = |t: &Tensor| -> Result<Tensor, Error> {
            if t.rank() != 3 || t.shape()[2] != e {
                return Err(config_error(
                    "MultiheadAttention",
                    format!(
                        "inputs must be 3-dimensional with {e} features, got {:?}",
                        t.shape()
                    ),
                ));
            }
            if self.config.batch_first {
                Ok(t.clone())
            } else {
                t.transpose(0, 1)
            }
        };
        let (q, k, v) = (batch_first(query)?, batch_first(key)?, batch_first(value)?);
        let (n, l, s) = (q.shape()[0], q.shape()[1], k.shape()[1]);
        if k.shape()[0] != n || v.shape()[..2] != k.shape()[..2] {
            return Err(config_error(
                "MultiheadAttention",
                format!(
                    "query {:?}, key {:?}, value {:?}: batch and key lengths must agree",
                    query.shape(),
                    key.shape(),
                    value.shape()
                ),
            ));
        }
        let (h, d) = (self.heads, e / self.heads);
        // [N, L, E] → [N, heads, L, E/heads], the projection `part` of three.
        let project = |x: &Tensor, part: usize, len: usize| -> Result<Tensor, Error> {
            let w = self.in_proj_weight.narrow(0, part * e, e)?;
            let mut y = x.matmul(&w.transpose(0, 1)?)?;
            if let Some(b) = &self.in_proj_bias {
                y = y.add(&b.narrow(0, part * e, e)?)?;
            }
            y.reshape(&[n, len, h, d])?.permute(&[0, 2, 1, 3])
        };
        let (q, k, v) = (project(&q, 0, l)?, project(&k, 1, s)?, project(&v, 2, s)?);
        let mask = self.additive_mask(options, n, l, s)?;
        let causal = options.is_causal && mask.is_none();
        let sdpa = AttentionOptions {
            attn_mask: mask.as_ref(),
            is_causal: causal,
            ..Default::default()
        };
        let weights = q.attention_weights(&k, &sdpa)?;
        let dropped = if self.is_training() && self.config.dropout > 0.0 {
            weights.dropout(self.config.dropout, true)?
        } else {
            weights.clone()
        };
        let heads = dropped.matmul(&v)?; // [N, heads, L, d]
        let merged = heads.permute(&[0, 2, 1, 3])?.reshape(&[n, l, e])?;
        let mut out = merged.matmul(&self.out_weight.transpose(0, 1)?)?;
        if let Some(b) = &self.out_bias {
            out = out.add(b)?;
        }
        if !self.config.batch_first {
            out = out.transpose(0, 1)?;
        }
        let weights = match (options.need_weights, options.average_attn_weights) {
            (false, _) => None,
            (true, true) => Some(weights.mean_dims(&[1], false)?),
            (true, false) => Some(weights),
        };
        Ok((out, weights))
    }

    /// The masks of `options` (and the causal one when combined with
    /// them) as one additive mask broadcasting to `[N, heads, L, S]`.
    fn additive_mask(
        &self,
        o: &AttendOptions,
        n: usize,
        l: usize,
        s: usize,
    ) -> Result<Option<Tensor>, Error> {
        let dtype = self.in_proj_weight.dtype();
        let device = self.in_proj_weight.device();
        // Float masks are added; integer ones are −∞ where non-zero.
        let additive = |m: &Tensor| -> Result<Tensor, Error> {
            if m.dtype().is_float() {
                m.detach().to_dtype(dtype)
            } else {
                let m = m.to_dtype(dtype)?;
                Tensor::zeros_on(m.shape(), dtype, device)?.masked_fill(&m, f64::NEG_INFINITY)
            }
        };
        let mut parts = Vec::new();
        if let Some(m) = o.attn_mask {
            let shaped = match m.shape() {
                [a, b] if (*a, *b) == (l, s) => additive(m)?,
                [nh, a, b] if (*nh, *a, *b) == (n * self.heads, l, s) => {
                    additive(m)?.reshape(&[n, self.heads, l, s])?
                }
                other => {
                    return Err(config_error(
                        "MultiheadAttention",
                        format!(
                            "attn_mask {other:?} must be [{l}, {s}] or [{}, {l}, {s}]",
                            n * self.heads
                        ),
                    ))
                }
            };
            parts.push(shaped);
        }
        if let Some(m) = o.key_padding_mask {
            if m.shape() != [n, s] {
                return Err(config_error(
                    "MultiheadAttention",
                    format!("key_padding_mask {:?} must be [{n}, {s}]", m.shape()),
                ));
            }
            parts.push(additive(m)?.reshape(&[n, 1, 1, s])?);
        }
        if parts.is_empty() {
            return Ok(None);
        }
        if o.is_causal && o.attn_mask.is_none() {
            let above = Tensor::ones_on(&[l, s], dtype, device)?.triu(1)?;
            parts.push(
                Tensor::zeros_on(&[l, s], dtype, device)?.masked_fill(&above, f64::NEG_INFINITY)?,
            );
        }
        let mut total = parts[0].clone();
        for p in &parts[1..] {
            total = total.add(p)?;
        }
        Ok(Some(total))
    }
}

impl Module for MultiheadAttention {
    /// Self-attention of `x`, the output only.
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        Ok(self.attend(x, x, x, &AttendOptions::default())?.0)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![("in_proj_weight".to_string(), self.in_proj_weight.clone())];
        if let Some(b) = &self.in_proj_bias {
            out.push(("in_proj_bias".into(), b.clone()));
        }
        out.push(("out_proj.weight".into(), self.out_weight.clone()));
        if let Some(b) = &self.out_bias {
            out.push(("out_proj.bias".into(), b.clone()));
        }
        out
    }

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }
}
