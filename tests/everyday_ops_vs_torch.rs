//! The everyday ops against PyTorch's own values: each op's forward value
//! and the gradient of `sum(f(x) · w)` for every input, in f64 (to 1e-12)
//! and in f32 (to the precision of f32 over the op's few steps), from
//! `tests/data/torch_everyday.txt` (made once by `bench/torch_everyday.py`
//! with the venv of `../shared/bench/setup.sh`; no Python needed here).

use tenjin::nn::{
    AttendOptions, AvgPool2d, BatchNorm, Conv2d, Conv2dConfig, Module, MultiheadAttention,
    MultiheadAttentionConfig,
};
use tenjin::{
    AttentionOptions, CrossEntropyOptions, DType, Error, LossReduction, Norm, PaddingMode, Pool2d,
    Tensor,
};

struct Case {
    name: String,
    inputs: Vec<(Vec<usize>, Vec<f64>)>,
    out: (Vec<usize>, Vec<f64>),
    grads: Vec<Vec<f64>>,
}

fn shape_and_values(rest: &str) -> (Vec<usize>, Vec<f64>) {
    let rest = rest.trim();
    let (shape, values) = rest.split_at(rest.find(']').expect("a shape") + 1);
    let shape = shape
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().expect("a dimension"))
        .collect();
    (shape, values_of(values))
}

fn values_of(s: &str) -> Vec<f64> {
    s.split_whitespace()
        .map(|v| match v {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            v => v.parse().expect("a number"),
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let text = include_str!("data/torch_everyday.txt");
    let mut out: Vec<Case> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(name) = line.strip_prefix("case ") {
            out.push(Case {
                name: name.to_string(),
                inputs: vec![],
                out: (vec![], vec![]),
                grads: vec![],
            });
            continue;
        }
        let c = out.last_mut().expect("a case first");
        if let Some(rest) = line.strip_prefix("in") {
            c.inputs.push(shape_and_values(&rest[1..]));
        } else if let Some(rest) = line.strip_prefix("out ") {
            let (shape, values) = if rest.trim_start().starts_with('[') {
                shape_and_values(rest)
            } else {
                (vec![], values_of(rest))
            };
            c.out = (shape, values);
        } else if let Some(rest) = line.strip_prefix("grad") {
            c.grads.push(values_of(&rest[1..]));
        }
    }
    out
}

fn ids(v: Vec<i64>, shape: &[usize]) -> Result<Tensor, Error> {
    Tensor::from_vec_i64(v, shape)
}

fn labels() -> Result<Tensor, Error> {
    ids(vec![3, 0, 1], &[3])
}

/// A batch norm over `[1, 2, 5, 5]` with weight `t[1]` and bias `t[2]`,
/// in training (running statistics from 0 and 1) or evaluation (running
/// statistics [0.1, −0.2] and [0.5, 2.0], as the reference).
fn batch_norm(t: &[Tensor], training: bool) -> Result<(Tensor, BatchNorm), Error> {
    let mut bn = BatchNorm::new(2, 1e-5, 0.1, t[0].dtype())?;
    bn.weight = t[1].clone();
    bn.bias = t[2].clone();
    if !training {
        bn.running_mean = like(vec![0.1, -0.2], &[2], &t[0])?;
        bn.running_var = like(vec![0.5, 2.0], &[2], &t[0])?;
        bn.eval();
    }
    Ok((bn.forward(&t[0])?, bn))
}

/// `values` of `shape` in `t`'s dtype.
fn like(values: Vec<f64>, shape: &[usize], t: &Tensor) -> Result<Tensor, Error> {
    Tensor::from_vec_f64(values, shape)?.to_dtype(t.dtype())
}

/// The tenjin op of a case.
fn op(name: &str, t: &[Tensor]) -> Result<Tensor, Error> {
    let dtype = t[0].dtype();
    let r = LossReduction::Mean;
    match name {
        "log1p" => t[0].log1p(),
        "expm1" => t[0].expm1(),
        "log2" => t[0].log2(),
        "rsqrt" => t[0].rsqrt(),
        "tan" => t[0].tan(),
        "atan" => t[0].atan(),
        "asin" => t[0].asin(),
        "sinh" => t[0].sinh(),
        "cosh" => t[0].cosh(),
        "erf" => t[0].erf(),
        "gelu" => t[0].gelu(),
        "gelu_tanh" => t[0].gelu_tanh(),
        "silu" => t[0].silu(),
        "softplus" => t[0].softplus(1.0, 20.0),
        "softplus_beta2_threshold1" => t[0].softplus(2.0, 1.0),
        "elu" => t[0].elu(0.7),
        "floor" => t[0].floor(),
        "atan2" => t[0].atan2(&t[1]),
        "prod_dim1" => t[0].prod(1, false),
        "var_dim1" => t[0].var(&[1], 1, false),
        "std_dim0_biased" => t[0].std(&[0], 0, false),
        "norm2_dim1" => t[0].norm(Norm::P(2.0), &[1], false),
        "norm1_dim1" => t[0].norm(Norm::P(1.0), &[1], false),
        "norm3_all" => t[0].norm(Norm::P(3.0), &[0, 1], false),
        "cumsum_dim1" => t[0].cumsum(1),
        "tril_0" => t[0].tril(0),
        "triu_1" => t[0].triu(1),
        "layer_norm" => t[0].layer_norm(1, Some(&t[1]), Some(&t[2]), 1e-5),
        "layer_norm_no_bias" => t[0].layer_norm(1, Some(&t[1]), None, 1e-5),
        "layer_norm_no_affine" => {
            tenjin::nn::LayerNorm::with_options(&[4], 1e-5, false, dtype)?.forward(&t[0])
        }
        "masked_fill" => t[0].masked_fill(&t[0].detach().gt(&Tensor::scalar(0.5, dtype)?)?, -1.25),
        "masked_fill_row_mask" => {
            t[0].masked_fill(&like(vec![1.0, 0.0, 1.0, 0.0], &[4], &t[0])?, 2.0)
        }
        "chunk3_dim1_weighted" => weighted_cat(t[0].chunk(3, 1)?, 1),
        "split3_dim1_weighted" => weighted_cat(t[0].split(3, -1)?, 1),
        "split_sizes_dim0_weighted" => weighted_cat(t[0].split_sizes(&[1, 2], 0)?, 0),
        "l1_loss" => t[0].l1_loss(&t[1], r),
        "mse_loss_sum" => t[0].mse_loss_with(&t[1], LossReduction::Sum),
        "smooth_l1_loss_beta0.5" => t[0].smooth_l1_loss(&t[1], 0.5, r),
        "bce_with_logits" => t[0].binary_cross_entropy_with_logits(&t[1], r),
        "bce_with_logits_sum" => t[0].binary_cross_entropy_with_logits(&t[1], LossReduction::Sum),
        "unfold_dim1_size2_step1" => t[0].unfold(1, 2, 1),
        "unfold_last_size2_step2" => t[0].unfold(-1, 2, 2),
        "argmax_dim1" => t[0].argmax(1, false),
        "max_pool2d_indices_dilated_ceil" => {
            let o = Pool2d {
                stride: [2, 2],
                padding: [1, 1],
                dilation: [2, 2],
                ceil_mode: true,
                ..Pool2d::new([2, 2])
            };
            let (y, at) = t[0].max_pool2d_with_indices(&o)?;
            assert_eq!(y.to_vec_f64()?, t[0].max_pool2d_with(&o)?.to_vec_f64()?);
            Ok(at)
        }
        "max_pool2d_indices_3x3_s1_p1" => {
            let o = Pool2d {
                stride: [1, 1],
                padding: [1, 1],
                ..Pool2d::new([3, 3])
            };
            Ok(t[0].max_pool2d_with_indices(&o)?.1)
        }
        "index_select_dim0" => t[0].index_select(0, &ids(vec![2, 0, 2, 1, 2], &[5])?),
        "index_select_dim1" => t[0].index_select(1, &ids(vec![3, 3, 1], &[3])?),
        "gather_dim1" => t[0].gather(1, &ids(vec![3, 3, 0, 1, 2, 1, 0, 0, 0], &[3, 3])?),
        "nll_loss" => t[0].log_softmax(1)?.nll_loss(&labels()?, None, r),
        "cross_entropy_smoothing" => t[0].cross_entropy_with(
            &labels()?,
            CrossEntropyOptions {
                label_smoothing: 0.1,
                ..Default::default()
            },
        ),
        "cross_entropy_ignore_sum" => t[0].cross_entropy_with(
            &labels()?,
            CrossEntropyOptions {
                ignore_index: Some(0),
                reduction: LossReduction::Sum,
                ..Default::default()
            },
        ),
        "cross_entropy_none" => t[0].cross_entropy_with(
            &labels()?,
            CrossEntropyOptions {
                reduction: LossReduction::None,
                ..Default::default()
            },
        ),
        "cross_entropy_weighted" => t[0].cross_entropy_with(
            &labels()?,
            CrossEntropyOptions {
                weight: Some(&class_weights(&t[0])?),
                ..Default::default()
            },
        ),
        "cross_entropy_weighted_smooth_ignore" => t[0].cross_entropy_with(
            &labels()?,
            CrossEntropyOptions {
                weight: Some(&class_weights(&t[0])?),
                label_smoothing: 0.2,
                ignore_index: Some(0),
                ..Default::default()
            },
        ),
        "nll_loss_weighted_none" => t[0].log_softmax(1)?.nll_loss_weighted(
            &labels()?,
            &class_weights(&t[0])?,
            None,
            LossReduction::None,
        ),
        "batch_norm_train" => batch_norm(t, true).map(|(y, _)| y),
        "batch_norm_eval" => batch_norm(t, false).map(|(y, _)| y),
        "batch_norm_running_stats" => {
            let (_, bn) = batch_norm(
                &[
                    t[0].clone(),
                    Tensor::ones(&[2], dtype)?,
                    Tensor::zeros(&[2], dtype)?,
                ],
                true,
            )?;
            // PyTorch's value plus 0·Σx: the gradient is zero.
            Tensor::cat(&[&bn.running_mean, &bn.running_var], 0)?.add(&t[0].sum()?.mul_scalar(0.0)?)
        }
        "conv_transpose2d" => {
            t[0].conv_transpose2d(&t[1], Some(&t[2]), [2, 1], [1, 0], [1, 0], [1, 2])
        }
        "max_pool2d_dilated_ceil" => t[0].max_pool2d_with(&Pool2d {
            stride: [2, 2],
            padding: [1, 1],
            dilation: [2, 2],
            ceil_mode: true,
            ..Pool2d::new([2, 2])
        }),
        "max_pool2d_ceil" => t[0].max_pool2d_with(&Pool2d {
            stride: [2, 2],
            ceil_mode: true,
            ..Pool2d::new([3, 2])
        }),
        "avg_pool2d_ceil_padded" => t[0].avg_pool2d_with(&Pool2d {
            stride: [2, 2],
            padding: [1, 1],
            ceil_mode: true,
            ..Pool2d::new([3, 3])
        }),
        "avg_pool2d_ceil_exclude_pad" => t[0].avg_pool2d_with(&Pool2d {
            stride: [2, 2],
            padding: [1, 1],
            ceil_mode: true,
            count_include_pad: false,
            ..Pool2d::new([2, 3])
        }),
        "avg_pool2d_divisor_override" => {
            let o = Pool2d {
                stride: [2, 2],
                padding: [1, 1],
                ceil_mode: true,
                divisor_override: Some(5),
                ..Pool2d::new([3, 3])
            };
            let via_module = AvgPool2d {
                stride: [2, 2],
                padding: [1, 1],
                ceil_mode: true,
                divisor_override: Some(5),
                ..AvgPool2d::new([3, 3])
            }
            .forward(&t[0].detach())?;
            let y = t[0].avg_pool2d_with(&o)?;
            assert_eq!(via_module.to_vec_f64()?, y.to_vec_f64()?);
            Ok(y)
        }
        "avg_pool2d_exclude_pad" => t[0].avg_pool2d_with(&Pool2d {
            stride: [2, 2],
            padding: [1, 1],
            count_include_pad: false,
            ..Pool2d::new([3, 3])
        }),
        // PyTorch's (left, right, top, bottom) = (2, 1, 1, 3).
        "pad_reflect" => t[0].pad_mode(&[(0, 0), (0, 0), (1, 3), (2, 1)], PaddingMode::Reflect),
        "pad_replicate" => t[0].pad_mode(&[(0, 0), (0, 0), (1, 3), (2, 1)], PaddingMode::Replicate),
        "pad_circular" => t[0].pad_mode(&[(0, 0), (0, 0), (1, 3), (2, 1)], PaddingMode::Circular),
        "conv2d_reflect" => {
            let conv = Conv2d::from_parameters(
                t[1].clone(),
                None,
                Conv2dConfig {
                    padding: [2, 1],
                    padding_mode: PaddingMode::Reflect,
                    ..Default::default()
                },
            )?;
            conv.forward(&t[0])
        }
        "sdpa" => t[0].scaled_dot_product_attention(&t[1], &t[2], &AttentionOptions::default()),
        "sdpa_gqa_causal" => {
            let o = AttentionOptions {
                is_causal: true,
                enable_gqa: true,
                ..Default::default()
            };
            t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
        }
        "sdpa_causal_l5_s6" => {
            let o = AttentionOptions {
                is_causal: true,
                ..Default::default()
            };
            t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
        }
        "sdpa_float_mask_scale" => {
            // sin(0.7 l + 1.3 s) / 2, as the script's FM.
            let m: Vec<f64> = (0..30)
                .map(|e| ((e / 6) as f64 * 0.7 + (e % 6) as f64 * 1.3).sin() * 0.5)
                .collect();
            let mask = like(m, &[5, 6], &t[0])?;
            let o = AttentionOptions {
                attn_mask: Some(&mask),
                scale: Some(0.3),
                ..Default::default()
            };
            t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
        }
        "sdpa_bool_mask" => {
            // (b + l + 2s) mod 3 ≠ 0 takes part, as the script's BM.
            let m: Vec<i64> = (0..60)
                .map(|e| ((e / 30 + (e / 6) % 5 + 2 * (e % 6)) % 3 != 0) as i64)
                .collect();
            let mask = ids(m, &[2, 1, 5, 6])?;
            let o = AttentionOptions {
                attn_mask: Some(&mask),
                ..Default::default()
            };
            t[0].scaled_dot_product_attention(&t[1], &t[2], &o)
        }
        "mha" => mha(t, &AttendOptions::default()),
        "mha_causal_key_padding" => {
            let padding = ids(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1], &[2, 5])?;
            let o = AttendOptions {
                key_padding_mask: Some(&padding),
                is_causal: true,
                ..Default::default()
            };
            mha(t, &o)
        }
        "avg_pool2d_padded" => t[0].avg_pool2d_padded([3, 3], [2, 2], [1, 1]),
        "max_pool2d_padded" => t[0].max_pool2d_padded([3, 3], [2, 2], [1, 1]),
        "adaptive_avg_pool2d" => t[0].adaptive_avg_pool2d([2, 3]),
        other => panic!("no tenjin op for the reference case {other}"),
    }
}

/// The script's class weights `CWT`, in `x`'s dtype.
fn class_weights(x: &Tensor) -> Result<Tensor, Error> {
    like(vec![0.5, 2.0, 1.0, 3.0], &[4], x)
}

/// `nn::MultiheadAttention` (2 heads, sequence first) over `t[0]` with the
/// weights `t[1..5]`.
fn mha(t: &[Tensor], o: &AttendOptions) -> Result<Tensor, Error> {
    let m = MultiheadAttention::from_parameters(
        2,
        t[1].clone(),
        Some(t[2].clone()),
        t[3].clone(),
        Some(t[4].clone()),
        MultiheadAttentionConfig {
            dtype: t[0].dtype(),
            ..Default::default()
        },
    )?;
    Ok(m.attend(&t[0], &t[0], &t[0], o)?.0)
}

/// `cat([part_k · (k + 1)], dim)`: each piece of a split scaled by its
/// position, so the reference checks where every piece went.
fn weighted_cat(parts: Vec<Tensor>, dim: usize) -> Result<Tensor, Error> {
    let scaled = parts
        .iter()
        .enumerate()
        .map(|(k, p)| p.mul_scalar((k + 1) as f64))
        .collect::<Result<Vec<_>, _>>()?;
    Tensor::cat(&scaled.iter().collect::<Vec<_>>(), dim)
}

/// `got` against PyTorch's f64 `want`: to 1e-12 relative in f64; in f32
/// to 1e-5 of the largest magnitude of the values compared (an f32 op of
/// a few steps, against the exact value).
fn close(what: &str, got: &[f64], want: &[f64], dtype: DType) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, PyTorch {}",
            got.len(),
            want.len()
        ));
    }
    let scale = want
        .iter()
        .filter(|w| w.is_finite())
        .fold(1.0f64, |m, w| m.max(w.abs()));
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = match dtype {
            DType::F64 => 1e-14 + 1e-12 * w.abs(),
            _ => 1e-5 * scale,
        };
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol;
        if !ok {
            return Err(format!("{what}[{k}]: {g:e}, PyTorch {w:e}"));
        }
    }
    Ok(())
}

#[test]
fn every_new_op_matches_pytorch_values_and_gradients_in_f64() -> Result<(), Error> {
    every_op_in(DType::F64)
}

#[test]
fn every_new_op_matches_pytorch_values_and_gradients_in_f32() -> Result<(), Error> {
    every_op_in(DType::F32)
}

fn every_op_in(dtype: DType) -> Result<(), Error> {
    let cases = cases();
    assert!(cases.len() >= 30, "{} reference cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let inputs: Vec<Tensor> = c
            .inputs
            .iter()
            .map(|(s, v)| {
                Ok(Tensor::from_vec_f64(v.clone(), s)?
                    .to_dtype(dtype)?
                    .requires_grad())
            })
            .collect::<Result<_, Error>>()?;
        let y = op(&c.name, &inputs)?;
        assert!(!y.dtype().is_float() || y.dtype() == dtype, "{}", c.name);
        if let Err(e) = close(&c.name, &y.to_vec_f64()?, &c.out.1, dtype) {
            failures.push(e);
            continue;
        }
        assert_eq!(y.shape(), &c.out.0[..], "{}", c.name);
        if c.grads.is_empty() {
            continue;
        }
        // PyTorch's cotangent (see bench/torch_everyday.py).
        let n: Vec<f64> = (0..12).map(|k| (k as f64).cos() * 0.5 + 1.0).collect();
        let w = if y.rank() == 4 {
            let v = (0..y.numel()).map(|k| (k as f64 * 0.29).cos()).collect();
            like(v, y.shape(), &y)?
        } else if y.shape() == [3, 4] {
            like(n, &[3, 4], &y)?
        } else {
            Tensor::full(y.shape(), 0.75, dtype)?
        };
        y.mul(&w)?.sum()?.backward()?;
        for (k, (x, want)) in inputs.iter().zip(&c.grads).enumerate() {
            let g = x.grad().expect("a gradient").to_vec_f64()?;
            if let Err(e) = close(&format!("{} grad{k}", c.name), &g, want, dtype) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Ok(())
}

#[test]
fn pool_options_out_of_their_domain_are_errors() -> Result<(), Error> {
    let x = Tensor::ones(&[1, 1, 4, 4], DType::F32)?;
    let zero = Pool2d {
        divisor_override: Some(0),
        ..Pool2d::new([2, 2])
    };
    let e = x.avg_pool2d_with(&zero).unwrap_err().to_string();
    assert!(
        e.contains("avg_pool2d") && e.contains("divisor_override must not be zero"),
        "{e}"
    );
    let max = Pool2d {
        divisor_override: Some(3),
        ..Pool2d::new([2, 2])
    };
    let e = x.max_pool2d_with(&max).unwrap_err().to_string();
    assert!(
        e.contains("max_pool2d") && e.contains("[1, 1, 4, 4]"),
        "{e}"
    );
    Ok(())
}
