//! Scaled dot-product attention (PyTorch's
//! `F.scaled_dot_product_attention`) as index functions: the scores, a
//! contraction with the scale and the mask fused in; their row softmax;
//! the weighted sum of the values (a batched `matmul`). Every derivative
//! is derived, so the planner's cheap gradient holds.
//!
//! A causal softmax sums over the keys `s ≤ l` only, an exactly solved
//! range: the masked half costs nothing and its weights are exact zeros
//! (with exact zero gradients), where an additive `−∞` mask would still
//! compute and exponentiate it.

use super::formula::{access, define, guard, indices, reduce, sum_to};
use super::{apply, lit};
use crate::tensor::Tensor;
use crate::Error;

/// Options of [`Tensor::scaled_dot_product_attention`], as PyTorch names
/// them (`attn_mask`, `is_causal`, `scale`, `dropout_p`).
///
/// ```
/// use tenjin::{AttentionOptions, DType, Tensor};
/// let q = Tensor::randn(&[2, 4, 5, 8], DType::F32, 0)?; // [batch, heads, L, E]
/// let k = Tensor::randn(&[2, 4, 5, 8], DType::F32, 1)?;
/// let v = Tensor::randn(&[2, 4, 5, 3], DType::F32, 2)?;
/// let causal = AttentionOptions { is_causal: true, ..Default::default() };
/// let o = q.scaled_dot_product_attention(&k, &v, &causal)?;
/// assert_eq!(o.shape(), &[2, 4, 5, 3]);
/// // The first query sees only the first key.
/// let first = o.narrow(2, 0, 1)?.to_vec()?;
/// assert_eq!(first, v.narrow(2, 0, 1)?.to_vec()?);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionOptions<'a> {
    /// A mask broadcast to the scores' shape `[…, L, S]`: a float mask is
    /// added to the scores; an integer one keeps the scores where it is
    /// non-zero and masks the rest (PyTorch's boolean mask, `True` taking
    /// part).
    pub attn_mask: Option<&'a Tensor>,
    /// Query `l` attends to the keys `s ≤ l` (PyTorch's `is_causal`,
    /// aligned to the top left when `L ≠ S`). Not together with `mask`.
    pub is_causal: bool,
    /// The scores' factor (default `1/√E`).
    pub scale: Option<f64>,
    /// Dropout of the attention weights, drawn from this thread's default
    /// generator (PyTorch applies it whenever it is given, too).
    pub dropout_p: f64,
    /// Grouped-query attention: keys and values with fewer heads (the
    /// third dimension from the back) than the queries, each serving
    /// `query heads / key heads` consecutive query heads (PyTorch's
    /// `enable_gqa`).
    pub enable_gqa: bool,
}

impl Tensor {
    /// `softmax(q·kᵀ·scale + mask)·v` for queries `[…, L, E]` (this
    /// tensor), keys `[…, S, E]` and values `[…, S, Ev]`, the leading
    /// dimensions broadcast; the result is `[…, L, Ev]`.
    pub fn scaled_dot_product_attention(
        &self,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionOptions,
    ) -> Result<Tensor, Error> {
        let (q, k) = (self.shape(), key.shape());
        let v = value.shape();
        if v.len() != k.len() || v.len() < 2 || v[v.len() - 2] != k[k.len() - 2] {
            return Err(Error::shape(
                "scaled_dot_product_attention",
                format!(
                    "query {q:?}, key {k:?}, value {v:?}: the values must be [..., S, Ev] with the keys' S"
                ),
            ));
        }
        let value = &grouped(self, value, options)?;
        let weights = self.attention_weights(key, options)?;
        let weights = if options.dropout_p > 0.0 {
            weights.dropout(options.dropout_p, true)?
        } else {
            weights
        };
        weights.matmul(value)
    }

    /// The attention weights `softmax(q·kᵀ·scale + mask)`, `[…, L, S]`,
    /// for queries `[…, L, E]` (this tensor) and keys `[…, S, E]`
    /// (without dropout; `options.dropout_p` is not applied here).
    pub fn attention_weights(
        &self,
        key: &Tensor,
        options: &AttentionOptions,
    ) -> Result<Tensor, Error> {
        let key = &grouped(self, key, options)?;
        let scores = scores(self, key, options)?;
        if options.is_causal {
            causal_softmax(&scores)
        } else {
            scores.softmax(-1)
        }
    }
}

/// Keys or values `t` with their heads repeated to the queries' count
/// under `enable_gqa` (each key head serving consecutive query heads, as
/// PyTorch's `repeat_interleave`); `t` itself otherwise.
fn grouped(q: &Tensor, t: &Tensor, o: &AttentionOptions) -> Result<Tensor, Error> {
    let (qs, ts) = (q.shape(), t.shape());
    if !o.enable_gqa || (qs.len() >= 3 && ts.len() >= 3 && qs[qs.len() - 3] == ts[ts.len() - 3]) {
        return Ok(t.clone());
    }
    if qs.len() < 3 || ts.len() < 3 {
        return Err(shape_error(
            qs,
            ts,
            "enable_gqa needs [..., heads, L, E] tensors",
        ));
    }
    let (hq, hk) = (qs[qs.len() - 3], ts[ts.len() - 3]);
    if hk == 0 || hq % hk != 0 {
        return Err(shape_error(
            qs,
            ts,
            &format!("enable_gqa: {hq} query heads are not a multiple of {hk} key/value heads"),
        ));
    }
    let r = ts.len();
    let mut wide = ts[..r - 2].to_vec();
    wide.insert(r - 2, hq / hk);
    wide.extend_from_slice(&ts[r - 2..]);
    let mut repeated = ts.to_vec();
    repeated[r - 3] = hq;
    t.unsqueeze(-3)?
        .broadcast_to(&wide)?
        .contiguous()?
        .reshape(&repeated)
}

fn shape_error(q: &[usize], k: &[usize], why: &str) -> Error {
    Error::shape(
        "scaled_dot_product_attention",
        format!("query {q:?} and key {k:?}: {why}"),
    )
}

/// `z[…; l; s] = Σₑ q[…; l; e]·k[…; s; e]·scale (+ mask)`, the leading
/// dimensions broadcast.
fn scores(q: &Tensor, k: &Tensor, o: &AttentionOptions) -> Result<Tensor, Error> {
    let (qs, ks) = (q.shape(), k.shape());
    if qs.len() < 2 || ks.len() < 2 || qs[qs.len() - 1] != ks[ks.len() - 1] {
        return Err(shape_error(
            qs,
            ks,
            "they must be [..., L, E] and [..., S, E] with the same E",
        ));
    }
    if !q.dtype().is_float() || q.dtype() != k.dtype() {
        return Err(shape_error(
            qs,
            ks,
            &format!(
                "{:?} and {:?}: both must be the same float type",
                q.dtype(),
                k.dtype()
            ),
        ));
    }
    let (l, e, s) = (qs[qs.len() - 2], qs[qs.len() - 1], ks[ks.len() - 2]);
    let lead = super::elementwise::broadcast_shapes(
        "scaled_dot_product_attention",
        &qs[..qs.len() - 2],
        &ks[..ks.len() - 2],
    )
    .map_err(|_| shape_error(qs, ks, "the leading dimensions do not broadcast"))?;
    let with = |last: [usize; 2]| -> Vec<usize> { lead.iter().copied().chain(last).collect() };
    let (q, k) = (
        q.broadcast_to(&with([l, e]))?,
        k.broadcast_to(&with([s, e]))?,
    );
    let scale = o.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let b = indices("b", lead.len());
    let at = |name: &str, last: [&str; 2]| {
        let ix: Vec<String> = b.iter().cloned().chain(last.map(String::from)).collect();
        access(name, &ix)
    };
    let dot = sum_to(
        "e",
        e,
        format!("{} * {}", at("q", ["l", "e"]), at("k", ["s", "e"])),
    );
    let score = format!("{dot} * {}", lit("scaled_dot_product_attention", scale)?);
    let out: Vec<String> = b.iter().cloned().chain(["l".into(), "s".into()]).collect();
    let Some(mask) = o.attn_mask else {
        let src = define("z", &out, score);
        return apply("attention_scores", &src, &[("q", &q), ("k", &k)], &[]);
    };
    if o.is_causal {
        return Err(shape_error(
            qs,
            ks,
            "give either attn_mask or is_causal, not both (as PyTorch)",
        ));
    }
    let mask = mask.detach().broadcast_to(&with([l, s])).map_err(|_| {
        shape_error(
            qs,
            ks,
            &format!(
                "the mask {:?} does not broadcast to {:?}",
                mask.shape(),
                with([l, s])
            ),
        )
    })?;
    let body = if mask.dtype().is_float() {
        format!("{score} + {}", at("m", ["l", "s"]))
    } else {
        guard(format!("{} != 0", at("m", ["l", "s"])), score, "(-inf)")
    };
    let mask = mask.to_dtype(q.dtype())?;
    let src = define("z", &out, body);
    apply(
        "attention_scores",
        &src,
        &[("q", &q), ("k", &k), ("m", &mask)],
        &[],
    )
}

/// The softmax of each row `l` of `z[…; l; s]` over the keys `s ≤ l`; zero
/// above the diagonal.
fn causal_softmax(z: &Tensor) -> Result<Tensor, Error> {
    let shape = z.shape();
    let (l, s) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    if z.numel() == 0 {
        return Tensor::zeros_on(shape, z.dtype(), z.device());
    }
    let b = indices("b", shape.len() - 2);
    let at = |key: &str| {
        let ix: Vec<String> = b.iter().cloned().chain(["l".into(), key.into()]).collect();
        access("z", &ix)
    };
    // The last key of row l: min(l, S − 1).
    let last = if l <= s {
        "l".to_string()
    } else {
        format!("(min[l; {}])", s - 1)
    };
    let max = format!("detach ({})", reduce("max", "m", 0, &last, at("m")));
    let total = reduce("sum", "k", 0, &last, format!("exp ({} - {max})", at("k")));
    let body = guard(
        "s - l <= 0",
        format!("exp ({} - {max}) / {total}", at("s")),
        0,
    );
    let out: Vec<String> = b.iter().cloned().chain(["l".into(), "s".into()]).collect();
    apply("causal_softmax", &define("p", &out, body), &[("z", z)], &[])
}
