//! A PyTorch training script ported to tenjin line for line
//! (`tests/ports/transformer.py`): a small causal transformer
//! (embeddings, a learned position table, two blocks of layer norm,
//! `MultiheadAttention` and a GELU MLP), AdamW with two parameter groups
//! (weight decay on matrices only), `clip_grad_norm` at 0.75 and a cosine
//! schedule with linear warm-up, dropout off, in f64.
//!
//! From PyTorch's initial weights the twelve losses and the final
//! parameters match PyTorch's to 1e-9; from PyTorch's weights, AdamW state
//! and schedule state after six steps, the last six do too.

mod common;

use common::ports::{close, close_above, load, mid_run, value};
use std::f64::consts::PI;
use tenjin::nn::utils::clip_grad_norm;
use tenjin::nn::{
    AttendOptions, Embedding, LayerNorm, Linear, Module, ModuleList, MultiheadAttention,
    MultiheadAttentionConfig, Sequential, GELU,
};
use tenjin::optim::lr_scheduler::{LambdaLR, LrScheduler};
use tenjin::optim::{AdamConfig, AdamW, Optimizer, ParamGroup};
use tenjin::{CrossEntropyOptions, DType, Error, Tensor};

const V: usize = 20;
const E: usize = 16;
const H: usize = 2;
const L: usize = 8;
const B: usize = 4;
const WARMUP: f64 = 3.0;
const TOTAL: i64 = 12;
const STEPS: usize = 12;
const MID: usize = 6;

struct Block {
    ln1: LayerNorm,
    attn: MultiheadAttention,
    ln2: LayerNorm,
    mlp: Sequential,
}

impl Block {
    fn new() -> Result<Block, Error> {
        let attn = MultiheadAttentionConfig {
            batch_first: true,
            dtype: DType::F64,
            ..Default::default()
        };
        Ok(Block {
            ln1: LayerNorm::new(&[E], 1e-5, DType::F64)?,
            attn: MultiheadAttention::with_config(E, H, attn, 0)?,
            ln2: LayerNorm::new(&[E], 1e-5, DType::F64)?,
            mlp: Sequential::new()
                .add(Linear::with_options(E, 4 * E, true, DType::F64, 1)?)
                .add(GELU::default())
                .add(Linear::with_options(4 * E, E, true, DType::F64, 2)?),
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
        let (a, _) = self.attn.attend(&h, &h, &h, &causal)?;
        let x = x.add(&a)?;
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

struct Model {
    pos: Tensor,
    tok: Embedding,
    blocks: ModuleList,
    ln_f: LayerNorm,
    head: Linear,
}

impl Model {
    fn new() -> Result<Model, Error> {
        Ok(Model {
            pos: Tensor::zeros(&[L, E], DType::F64)?.requires_grad(),
            tok: Embedding::with_dtype(V, E, DType::F64, 0)?,
            blocks: ModuleList::from_modules([Block::new()?, Block::new()?]),
            ln_f: LayerNorm::new(&[E], 1e-5, DType::F64)?,
            head: Linear::with_options(E, V, false, DType::F64, 3)?,
        })
    }
}

impl Module for Model {
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

/// The script's deterministic batch of `step`: ids and next-id targets.
fn batch(step: usize) -> Result<(Tensor, Tensor), Error> {
    let (mut ids, mut targets) = (Vec::new(), Vec::new());
    for b in 0..B {
        for t in 0..=L {
            let k = (b * (L + 1) + t) as i64;
            let id = (k * 7 + step as i64 * 3 + k / 5) % V as i64;
            if t < L {
                ids.push(id);
            }
            if t > 0 {
                targets.push(id);
            }
        }
    }
    Ok((
        Tensor::from_vec_i64(ids, &[B, L])?,
        Tensor::from_vec_i64(targets, &[B * L])?,
    ))
}

/// The optimizer and the schedule of the script: AdamW with weight decay
/// on parameters of two or more dimensions only; warm-up, then cosine.
fn optimizer(model: &Model) -> Result<(AdamW, LambdaLR), Error> {
    let (decay, no_decay): (Vec<Tensor>, Vec<Tensor>) =
        model.parameters().into_iter().partition(|p| p.rank() >= 2);
    let base = AdamConfig {
        lr: 3e-3,
        betas: (0.9, 0.95),
        weight_decay: 0.1,
        ..AdamConfig::adamw()
    };
    let mut opt = AdamW::with_groups(vec![
        ParamGroup::new(decay, base),
        ParamGroup::new(
            no_decay,
            AdamConfig {
                weight_decay: 0.0,
                ..base
            },
        ),
    ])?;
    let schedule = LambdaLR::new(&mut opt, |s| {
        ((s + 1) as f64 / WARMUP).min(1.0)
            * 0.5
            * (1.0 + (PI * s.min(TOTAL) as f64 / TOTAL as f64).cos())
    })?;
    Ok((opt, schedule))
}

/// Steps `range` of the script's loop; the losses.
fn train(
    model: &Model,
    opt: &mut AdamW,
    schedule: &mut LambdaLR,
    range: std::ops::Range<usize>,
) -> Result<Vec<f64>, Error> {
    let params = model.parameters();
    let mut losses = Vec::new();
    for step in range {
        let (ids, targets) = batch(step)?;
        opt.zero_grad();
        let loss = model
            .forward(&ids)?
            .reshape(&[B * L, V])?
            .cross_entropy_with(&targets, CrossEntropyOptions::default())?;
        loss.backward()?;
        clip_grad_norm(&params, 0.75, 2.0)?;
        opt.step()?;
        schedule.step(opt)?;
        losses.push(loss.item()?);
    }
    Ok(losses)
}

fn check_final(model: &Model, out: &[(String, Tensor)]) -> Result<(), Error> {
    let state = model.state_dict();
    assert_eq!(state.len(), out.len() - 1, "every parameter compared");
    for (name, t) in &state {
        let (_, want) = out
            .iter()
            .find(|(n, _)| n == name)
            .expect("in PyTorch's state");
        // The key projection's bias has a zero gradient (a softmax over
        // the keys does not see a term constant across them), so its
        // entries are rounding noise that Adam scales by lr / eps: about
        // 1e-12 on both sides, each its own. An absolute 1e-11 is above
        // that noise; every other entry is compared to 1e-9 relative.
        close_above(name, &t.to_vec_f64()?, &want.to_vec_f64()?, 1e-2);
    }
    Ok(())
}

#[test]
fn from_pytorchs_initial_weights_the_run_is_pytorchs() -> Result<(), Error> {
    let model = Model::new()?;
    model.load_state_dict(&load("transformer_init.safetensors"))?;
    let (mut opt, mut schedule) = optimizer(&model)?;
    let losses = train(&model, &mut opt, &mut schedule, 0..STEPS)?;
    let out = load("transformer_out.safetensors");
    close("losses", &losses, &value(&out, "losses"));
    check_final(&model, &out)
}

#[test]
fn from_pytorchs_optimizer_and_schedule_state_it_resumes() -> Result<(), Error> {
    let mid = mid_run(&load("transformer_mid.safetensors"));
    let model = Model::new()?;
    model.load_state_dict(&mid.weights)?;
    let (mut opt, mut schedule) = optimizer(&model)?;
    opt.load_state_dict(&mid.optimizer)?;
    schedule.load_state_dict(&mid.schedule)?;
    let losses = train(&model, &mut opt, &mut schedule, MID..STEPS)?;
    let out = load("transformer_out.safetensors");
    close("losses", &losses, &value(&out, "losses")[MID..]);
    check_final(&model, &out)
}
