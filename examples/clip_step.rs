//! What clipping gradients by their total norm adds to a training step,
//! f32, AdamW, one step with and one without
//! `nn::utils::clip_grad_norm(max_norm 1.0)`, alternated so the machine's
//! drift hits both alike; prints the medians and the ratio for two models:
//!
//! - the MLP 784-512-512-10 at batch 64 (6 parameter tensors);
//! - a small causal transformer (4 blocks of layer norm,
//!   `MultiheadAttention` and a GELU MLP; width 128, 4 heads, 64
//!   positions, batch 8: 52 parameter tensors, most of them small, where a
//!   per-tensor cost would show).
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example clip_step
//! cargo run --release --example clip_step -- smoke   # a few steps, untimed
//! ```

#[allow(dead_code)] // only its MLP is used here
mod bench_common;

use std::time::Instant;
use tenjin::nn::utils::clip_grad_norm;
use tenjin::nn::{
    AttendOptions, Embedding, LayerNorm, Linear, Module, ModuleList, MultiheadAttention,
    MultiheadAttentionConfig, Sequential, GELU,
};
use tenjin::optim::{AdamConfig, AdamW, Optimizer};
use tenjin::{CrossEntropyOptions, DType, Error, Tensor};

/// A training step of `loss` over `params` with AdamW, clipped or not;
/// milliseconds.
fn timed_steps(
    name: &str,
    size: &str,
    params: Vec<Tensor>,
    rounds: usize,
    loss: &dyn Fn() -> Result<Tensor, Error>,
) -> Result<(), Error> {
    let mut opt = AdamW::new(params.clone(), AdamConfig::adamw())?;
    let mut step = |clip: bool| -> Result<f64, Error> {
        let t = Instant::now();
        opt.zero_grad();
        let l = loss()?;
        l.backward()?;
        if clip {
            clip_grad_norm(&params, 1.0, 2.0)?;
        }
        opt.step()?;
        l.item()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    step(false)?; // compiles
    step(true)?;
    let (mut plain, mut clipped) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(step(false)?);
        clipped.push(step(true)?);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, c) = (median(plain), median(clipped));
    println!(
        "{{\"workload\": \"{name}\", \"size\": \"{size}\", \"parameters\": {}, \"plain_ms\": {p:.3}, \"clipped_ms\": {c:.3}, \"ratio\": {:.3}}}",
        params.len(),
        c / p
    );
    Ok(())
}

/// Layer norm, causal self-attention and a GELU MLP, each residual.
struct Block {
    ln1: LayerNorm,
    attn: MultiheadAttention,
    ln2: LayerNorm,
    mlp: Sequential,
}

impl Block {
    fn new(width: usize, heads: usize, seed: u64) -> Result<Block, Error> {
        let config = MultiheadAttentionConfig {
            batch_first: true,
            ..Default::default()
        };
        Ok(Block {
            ln1: LayerNorm::new(&[width], 1e-5, DType::F32)?,
            attn: MultiheadAttention::with_config(width, heads, config, seed)?,
            ln2: LayerNorm::new(&[width], 1e-5, DType::F32)?,
            mlp: Sequential::new()
                .add(Linear::new(width, 4 * width, seed + 1)?)
                .add(GELU::default())
                .add(Linear::new(4 * width, width, seed + 2)?),
        })
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let h = self.ln1.forward(x)?;
        let causal = AttendOptions {
            is_causal: true,
            ..Default::default()
        };
        let x = x.add(&self.attn.attend(&h, &h, &h, &causal)?.0)?;
        x.add(&self.mlp.forward(&self.ln2.forward(&x)?)?)
    }

    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("ln1".into(), &self.ln1 as &dyn Module),
            ("attn".into(), &self.attn),
            ("ln2".into(), &self.ln2),
            ("mlp".into(), &self.mlp),
        ]
    }
}

/// Token and position embeddings, blocks, a final norm and a head.
struct Transformer {
    pos: Tensor,
    tok: Embedding,
    blocks: ModuleList,
    ln_f: LayerNorm,
    head: Linear,
}

impl Module for Transformer {
    fn forward(&self, ids: &Tensor) -> Result<Tensor, Error> {
        let mut x = self.tok.forward(ids)?.add(&self.pos)?;
        for b in self.blocks.iter() {
            x = b.forward(&x)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("pos".into(), self.pos.clone())]
    }

    fn named_children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("tok".into(), &self.tok as &dyn Module),
            ("blocks".into(), &self.blocks),
            ("ln_f".into(), &self.ln_f),
            ("head".into(), &self.head),
        ]
    }
}

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let rounds = if smoke { 3 } else { 101 };

    let mlp = bench_common::mlp()?;
    let x = Tensor::randn(&[64, 784], DType::F32, 4)?;
    let labels: Vec<usize> = (0..64).map(|i| (i * 7) % 10).collect();
    timed_steps(
        "mlp_adamw_step",
        "784-512-512-10,batch=64",
        mlp.parameters(),
        rounds,
        &|| mlp.forward(&x)?.cross_entropy(&labels),
    )?;

    let (vocab, width, heads, positions, batch) = (256, 128, 4, 64, 8);
    let model = Transformer {
        pos: Tensor::randn(&[positions, width], DType::F32, 5)?
            .mul_scalar(0.02)?
            .requires_grad(),
        tok: Embedding::new(vocab, width, 6)?,
        blocks: ModuleList::from_modules(
            (0..4)
                .map(|b| Block::new(width, heads, 10 * (b + 1)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        ln_f: LayerNorm::new(&[width], 1e-5, DType::F32)?,
        head: Linear::with_options(width, vocab, false, DType::F32, 7)?,
    };
    let ids: Vec<i64> = (0..batch * (positions + 1))
        .map(|k| ((k * 7 + k / 5) % vocab) as i64)
        .collect();
    let (inputs, targets): (Vec<i64>, Vec<i64>) = (0..batch)
        .flat_map(|b| (0..positions).map(move |t| (b, t)))
        .map(|(b, t)| {
            (
                ids[b * (positions + 1) + t],
                ids[b * (positions + 1) + t + 1],
            )
        })
        .unzip();
    let inputs = Tensor::from_vec_i64(inputs, &[batch, positions])?;
    let targets = Tensor::from_vec_i64(targets, &[batch * positions])?;
    timed_steps(
        "transformer_adamw_step",
        "4 blocks,width=128,heads=4,T=64,batch=8",
        model.parameters(),
        if smoke { 3 } else { 31 },
        &|| {
            model
                .forward(&inputs)?
                .reshape(&[batch * positions, vocab])?
                .cross_entropy_with(&targets, CrossEntropyOptions::default())
        },
    )
}
