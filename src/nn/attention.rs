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
    /// A learned key and value (`bias_k`, `bias_v`, `[1, 1, E]`) appended
    /// to every sequence of keys and values (default `false`).
    pub add_bias_kv: bool,
    /// A zero key and value appended after the projections (default
    /// `false`).
    pub add_zero_attn: bool,
    /// The keys' and values' features when not `E` (PyTorch's `kdim`,
    /// `vdim`): the projections are then three weights `q_proj_weight`
    /// `[E, E]`, `k_proj_weight` `[E, kdim]`, `v_proj_weight` `[E, vdim]`
    /// instead of one `in_proj_weight`.
    pub kdim: Option<usize>,
    pub vdim: Option<usize>,
    pub dtype: DType,
}

impl Default for MultiheadAttentionConfig {
    fn default() -> Self {
        MultiheadAttentionConfig {
            dropout: 0.0,
            bias: true,
            batch_first: false,
            add_bias_kv: false,
            add_zero_attn: false,
            kdim: None,
            vdim: None,
            dtype: DType::F32,
        }
    }
}

/// The input projections: one packed `[3E, E]` weight, or one weight per
/// query, key and value when their features differ (`kdim`, `vdim`).
#[derive(Debug)]
enum InProjection {
    Packed(Tensor),
    Separate([Tensor; 3]),
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
    in_proj: InProjection,
    in_proj_bias: Option<Tensor>,
    /// `bias_k` and `bias_v` with `add_bias_kv`.
    bias_kv: Option<[Tensor; 2]>,
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
        let (kdim, vdim) = (config.kdim.unwrap_or(e), config.vdim.unwrap_or(e));
        if kdim == 0 || vdim == 0 {
            return Err(config_error(
                "MultiheadAttention",
                format!("kdim {kdim} and vdim {vdim} must be positive"),
            ));
        }
        let packed = MultiheadAttentionConfig {
            kdim: None,
            vdim: None,
            add_bias_kv: false,
            ..config
        };
        let mut layer = MultiheadAttention::from_parameters(
            heads,
            init::xavier_uniform(&[3 * e, e], dtype, seed)?,
            config.bias.then(|| zeros(3 * e)).transpose()?,
            init::fan_in_uniform(&[e, e], e, dtype, init::sub_seed(seed))?,
            config.bias.then(|| zeros(e)).transpose()?,
            packed,
        )?;
        layer.config = config;
        if (kdim, vdim) != (e, e) {
            // As PyTorch: each of the three Xavier-uniform on its own shape.
            let mut s = init::sub_seed(init::sub_seed(seed));
            let mut next = |shape: [usize; 2]| {
                s = init::sub_seed(s);
                init::xavier_uniform(&shape, dtype, s).map(Tensor::requires_grad)
            };
            layer.in_proj =
                InProjection::Separate([next([e, e])?, next([e, kdim])?, next([e, vdim])?]);
        }
        if config.add_bias_kv {
            // PyTorch's xavier_normal_ on [1, 1, E]: std √(2 / (E + E)).
            let std = (1.0 / e as f64).sqrt();
            let b = |k: u64| {
                init::normal(&[1, 1, e], 0.0, std, dtype, seed ^ (0xb1a5 + k))
                    .map(Tensor::requires_grad)
            };
            layer.bias_kv = Some([b(0)?, b(1)?]);
        }
        Ok(layer)
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
        if config.kdim.is_some_and(|k| k != e)
            || config.vdim.is_some_and(|v| v != e)
            || config.add_bias_kv
        {
            return Err(config_error(
                "MultiheadAttention",
                "from_parameters takes a packed in_proj_weight: build a layer with kdim, vdim or add_bias_kv by with_config and load its state".into(),
            ));
        }
        Ok(MultiheadAttention {
            heads,
            config,
            in_proj: InProjection::Packed(in_proj_weight.requires_grad()),
            in_proj_bias: in_proj_bias.map(Tensor::requires_grad),
            bias_kv: None,
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
        let e = self.out_weight.shape()[0];
        let (kdim, vdim) = (self.config.kdim.unwrap_or(e), self.config.vdim.unwrap_or(e));
        let batch_first = |t: &Tensor, what: &str, features: usize| -> Result<Tensor, Error> {
            if t.rank() != 3 || t.shape()[2] != features {
                return Err(config_error(
                    "MultiheadAttention",
                    format!(
                        "the {what} must be 3-dimensional with {features} features, got {:?}",
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
        let (q, k, v) = (
            batch_first(query, "query", e)?,
            batch_first(key, "key", kdim)?,
            batch_first(value, "value", vdim)?,
        );
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
        // [N, len, features] → [N, len, E], the projection `part` of three.
        let project = |x: &Tensor, part: usize| -> Result<Tensor, Error> {
            let w = match &self.in_proj {
                InProjection::Packed(w) => w.narrow(0, part * e, e)?,
                InProjection::Separate(ws) => ws[part].clone(),
            };
            let mut y = x.matmul(&w.transpose(0, 1)?)?;
            if let Some(b) = &self.in_proj_bias {
                y = y.add(&b.narrow(0, part * e, e)?)?;
            }
            Ok(y)
        };
        let (q, mut k, mut v) = (project(&q, 0)?, project(&k, 1)?, project(&v, 2)?);
        // Keys and values appended to every sequence: the learned bias,
        // then the zero one, as PyTorch appends them.
        let mut extra = 0;
        if let Some([bk, bv]) = &self.bias_kv {
            k = Tensor::cat(&[&k, &bk.broadcast_to(&[n, 1, e])?], 1)?;
            v = Tensor::cat(&[&v, &bv.broadcast_to(&[n, 1, e])?], 1)?;
            extra += 1;
        }
        if self.config.add_zero_attn {
            let zero = Tensor::zeros_on(&[n, 1, e], k.dtype(), k.device())?;
            k = Tensor::cat(&[&k, &zero], 1)?;
            v = Tensor::cat(&[&v, &zero], 1)?;
            extra += 1;
        }
        let heads_of = |x: &Tensor, len: usize| x.reshape(&[n, len, h, d])?.permute(&[0, 2, 1, 3]);
        let (q, k, v) = (
            heads_of(&q, l)?,
            heads_of(&k, s + extra)?,
            heads_of(&v, s + extra)?,
        );
        let mask = self
            .additive_mask(options, n, l, s, extra > 0)?
            .map(|m| {
                // The appended keys are never masked.
                let mut pads = vec![(0, 0); m.rank() - 1];
                pads.push((0, extra));
                m.pad(&pads, 0.0)
            })
            .transpose()?;
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
    /// them, or when `explicit_causal` says keys are appended) as one
    /// additive mask broadcasting to `[N, heads, L, S]`.
    fn additive_mask(
        &self,
        o: &AttendOptions,
        n: usize,
        l: usize,
        s: usize,
        explicit_causal: bool,
    ) -> Result<Option<Tensor>, Error> {
        let dtype = self.out_weight.dtype();
        let device = self.out_weight.device();
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
        if parts.is_empty() && !(explicit_causal && o.is_causal) {
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

    /// PyTorch's names and order: `in_proj_weight` (or `q_proj_weight`,
    /// `k_proj_weight`, `v_proj_weight`), `in_proj_bias`, `bias_k`,
    /// `bias_v`, `out_proj.weight`, `out_proj.bias`.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = match &self.in_proj {
            InProjection::Packed(w) => vec![("in_proj_weight".to_string(), w.clone())],
            InProjection::Separate([q, k, v]) => vec![
                ("q_proj_weight".to_string(), q.clone()),
                ("k_proj_weight".into(), k.clone()),
                ("v_proj_weight".into(), v.clone()),
            ],
        };
        if let Some(b) = &self.in_proj_bias {
            out.push(("in_proj_bias".into(), b.clone()));
        }
        if let Some([bk, bv]) = &self.bias_kv {
            out.push(("bias_k".into(), bk.clone()));
            out.push(("bias_v".into(), bv.clone()));
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
