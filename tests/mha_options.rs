//! `nn::MultiheadAttention`'s options against PyTorch's
//! (`bench/torch_mha_options.py` → `tests/data/torch_mha_options.txt`):
//! `kdim`/`vdim` (separate projection weights by PyTorch's names),
//! `add_bias_kv`, `add_zero_attn` with a key padding mask, and all of them
//! batch-first. PyTorch's parameters load by name; the output and the
//! gradient of every parameter and input match to 1e-12 in f64 and to f32
//! rounding in f32.

use tenjin::nn::{AttendOptions, Module, MultiheadAttention, MultiheadAttentionConfig};
use tenjin::{DType, Error, Tensor};

struct Case {
    name: String,
    options: Vec<usize>,
    params: Vec<(String, Vec<usize>, Vec<f64>)>,
    inputs: Vec<(Vec<usize>, Vec<f64>)>,
    out: Vec<f64>,
    grads: Vec<(String, Vec<f64>)>,
}

/// `TAG NAME [shape] values` → (name, shape, values).
fn tagged(rest: &str) -> (String, Vec<usize>, Vec<f64>) {
    let (name, rest) = rest.split_once(' ').unwrap();
    let (shape, values) = rest.split_at(rest.find(']').unwrap() + 1);
    let shape = shape
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let values = values
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    (name.to_string(), shape, values)
}

fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    for line in include_str!("data/torch_mha_options.txt").lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        if tag == "case" {
            out.push(Case {
                name: rest.into(),
                options: vec![],
                params: vec![],
                inputs: vec![],
                out: vec![],
                grads: vec![],
            });
            continue;
        }
        let Some(c) = out.last_mut() else { continue };
        match tag {
            "options" => c.options = rest.split(' ').map(|v| v.parse().unwrap()).collect(),
            "param" => c.params.push(tagged(rest)),
            "input" => {
                let (_, shape, values) = tagged(rest);
                c.inputs.push((shape, values));
            }
            "out" => c.out = tagged(&format!("out {rest}")).2,
            "grad" => {
                let (name, _, values) = tagged(rest);
                c.grads.push((name, values));
            }
            _ => {}
        }
    }
    out
}

fn close(what: &str, got: &[f64], want: &[f64], dtype: DType) {
    let tol = if dtype == DType::F64 { 1e-12 } else { 2e-5 };
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{k}]: {g} against PyTorch's {w}"
        );
    }
}

fn run(dtype: DType) -> Result<(), Error> {
    let cases = cases();
    assert_eq!(cases.len(), 4);
    for c in &cases {
        let [kdim, vdim, bias_kv, zero_attn, batch_first, padding] = c.options[..] else {
            panic!("{}: options", c.name)
        };
        let config = MultiheadAttentionConfig {
            kdim: Some(kdim),
            vdim: Some(vdim),
            add_bias_kv: bias_kv == 1,
            add_zero_attn: zero_attn == 1,
            batch_first: batch_first == 1,
            dtype,
            ..Default::default()
        };
        let m = MultiheadAttention::with_config(4, 2, config, 7)?;
        let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
        let want: Vec<String> = c.params.iter().map(|(n, _, _)| n.clone()).collect();
        assert_eq!(names, want, "{}: PyTorch's names, in its order", c.name);
        let state: Vec<(String, Tensor)> = c
            .params
            .iter()
            .map(|(n, s, v)| Ok((n.clone(), Tensor::from_vec_f64(v.clone(), s)?)))
            .collect::<Result<_, Error>>()?;
        m.load_state_dict(&state)?;
        let x: Vec<Tensor> = c
            .inputs
            .iter()
            .map(|(s, v)| {
                Ok(Tensor::from_vec_f64(v.clone(), s)?
                    .to_dtype(dtype)?
                    .requires_grad())
            })
            .collect::<Result<_, Error>>()?;
        let mask = Tensor::from_vec_i64(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1], &[2, 5])?;
        let options = AttendOptions {
            key_padding_mask: (padding == 1).then_some(&mask),
            ..Default::default()
        };
        let (y, _) = m.attend(&x[0], &x[1], &x[2], &options)?;
        close(&format!("{} out", c.name), &y.to_vec_f64()?, &c.out, dtype);
        let w: Vec<f64> = (0..y.numel()).map(|k| (k as f64 * 0.29).cos()).collect();
        let w = Tensor::from_vec_f64(w, y.shape())?.to_dtype(dtype)?;
        y.mul(&w)?.sum()?.backward()?;
        let mut got: Vec<(String, Tensor)> = m.named_parameters();
        got.extend(
            ["q", "k", "v"]
                .iter()
                .zip(&x)
                .map(|(n, t)| (n.to_string(), t.clone())),
        );
        for (name, want) in &c.grads {
            let (_, t) = got
                .iter()
                .find(|(n, _)| n == name)
                .expect("a gradient by name");
            let g = t.grad().expect("a gradient").to_vec_f64()?;
            close(&format!("{} grad {name}", c.name), &g, want, dtype);
        }
    }
    Ok(())
}

#[test]
fn multihead_attention_options_follow_pytorch_in_f64() -> Result<(), Error> {
    run(DType::F64)
}

#[test]
fn multihead_attention_options_follow_pytorch_in_f32() -> Result<(), Error> {
    run(DType::F32)
}

#[test]
fn packed_weights_cannot_take_the_separate_options() -> Result<(), Error> {
    let w = Tensor::zeros(&[12, 4], DType::F32)?;
    let o = Tensor::zeros(&[4, 4], DType::F32)?;
    let config = MultiheadAttentionConfig {
        add_bias_kv: true,
        bias: false,
        ..Default::default()
    };
    let e = MultiheadAttention::from_parameters(2, w, None, o, None, config)
        .unwrap_err()
        .to_string();
    assert!(e.contains("with_config"), "{e}");
    let m = MultiheadAttention::with_config(
        4,
        2,
        MultiheadAttentionConfig {
            kdim: Some(3),
            ..Default::default()
        },
        0,
    )?;
    let q = Tensor::zeros(&[2, 1, 4], DType::F32)?;
    let e = m
        .attend(&q, &q, &q, &AttendOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the key must be 3-dimensional with 3 features"),
        "{e}"
    );
    Ok(())
}
