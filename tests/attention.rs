//! Attention beyond the PyTorch values of `everyday_ops_vs_torch.rs`: the
//! causal softmax's exact zeros (and zero gradients) above the diagonal,
//! the same as an additive −∞ mask below it; the simulated GPU against the
//! CPU; `MultiheadAttention`'s layouts, dropout in train and eval mode,
//! and its errors.

use tenjin::nn::{AttendOptions, Module, MultiheadAttention, MultiheadAttentionConfig};
use tenjin::{AttentionOptions, DType, Device, Error, Tensor};

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{k}]: {g} against {w}"
        );
    }
}

/// `(output, dq, dk, dv)` of causal attention on `device`.
fn causal_run(device: Device, dtype: DType, via_mask: bool) -> Result<[Vec<f64>; 4], Error> {
    let leaf = |shape: &[usize], seed| -> Result<Tensor, Error> {
        Ok(Tensor::randn(shape, dtype, seed)?
            .to_device(device)?
            .requires_grad())
    };
    let (q, k, v) = (
        leaf(&[3, 7, 8], 1)?,
        leaf(&[3, 7, 8], 2)?,
        leaf(&[3, 7, 5], 3)?,
    );
    let above = Tensor::ones(&[7, 7], dtype)?.triu(1)?;
    let minus_inf = Tensor::zeros(&[7, 7], dtype)?
        .masked_fill(&above, f64::NEG_INFINITY)?
        .to_device(device)?;
    let o = if via_mask {
        AttentionOptions {
            attn_mask: Some(&minus_inf),
            ..Default::default()
        }
    } else {
        AttentionOptions {
            is_causal: true,
            ..Default::default()
        }
    };
    let y = q.scaled_dot_product_attention(&k, &v, &o)?;
    let w = Tensor::randn(&[3, 7, 5], dtype, 4)?.to_device(device)?;
    y.mul(&w)?.sum()?.backward()?;
    Ok([
        y.to_vec_f64()?,
        q.grad().unwrap().to_vec_f64()?,
        k.grad().unwrap().to_vec_f64()?,
        v.grad().unwrap().to_vec_f64()?,
    ])
}

#[test]
fn causal_attention_is_a_masked_one_with_exact_zeros() -> Result<(), Error> {
    let by_range = causal_run(Device::Cpu, DType::F64, false)?;
    let by_mask = causal_run(Device::Cpu, DType::F64, true)?;
    for (k, what) in ["output", "dq", "dk", "dv"].iter().enumerate() {
        close(&by_range[k], &by_mask[k], 1e-13, what);
    }
    // The weights above the diagonal are exact zeros with zero gradients.
    let q = Tensor::randn(&[6, 4], DType::F64, 5)?.requires_grad();
    let k = Tensor::randn(&[6, 4], DType::F64, 6)?.requires_grad();
    let o = AttentionOptions {
        is_causal: true,
        ..Default::default()
    };
    let p = q.attention_weights(&k, &o)?;
    let pv = p.to_vec_f64()?;
    for l in 0..6 {
        for s in 0..6 {
            assert_eq!(pv[l * 6 + s] == 0.0, s > l, "weight ({l}, {s})");
        }
        let row: f64 = pv[l * 6..l * 6 + 6].iter().sum();
        assert!((row - 1.0).abs() < 1e-15);
    }
    // Key 5 is seen by query 5 only: through the other rows it gets nothing.
    let only_last_row = Tensor::from_vec_f64(
        (0..36)
            .map(|e| if e / 6 == 5 { 0.0 } else { 1.0 })
            .collect(),
        &[6, 6],
    )?;
    p.mul(&only_last_row)?.sum()?.backward()?;
    let dk = k.grad().unwrap().to_vec_f64()?;
    assert!(dk[20..24].iter().all(|&g| g == 0.0), "{dk:?}");
    Ok(())
}

#[test]
fn causal_attention_on_the_simulated_gpu_is_the_cpus() -> Result<(), Error> {
    tenjin::cuda::simulate()?;
    let cpu = causal_run(Device::Cpu, DType::F32, false)?;
    let gpu = causal_run(Device::Cuda(0), DType::F32, false)?;
    for (k, what) in ["output", "dq", "dk", "dv"].iter().enumerate() {
        close(&gpu[k], &cpu[k], 1e-5, what);
    }
    Ok(())
}

fn layer(batch_first: bool, dropout: f64) -> Result<MultiheadAttention, Error> {
    let config = MultiheadAttentionConfig {
        batch_first,
        dropout,
        dtype: DType::F64,
        ..Default::default()
    };
    MultiheadAttention::with_config(12, 3, config, 7)
}

#[test]
fn multihead_attention_layouts_weights_and_dropout() -> Result<(), Error> {
    let x = Tensor::randn(&[4, 6, 12], DType::F64, 1)?; // [N, L, E]
    let first = layer(true, 0.0)?;
    let seq = layer(false, 0.0)?;
    let a = first.forward(&x)?;
    let b = seq.forward(&x.transpose(0, 1)?)?.transpose(0, 1)?;
    close(
        &a.to_vec_f64()?,
        &b.to_vec_f64()?,
        1e-14,
        "batch-first and sequence-first",
    );
    // Averaged weights are [N, L, S], each row a distribution.
    let o = AttendOptions {
        need_weights: true,
        average_attn_weights: true,
        ..Default::default()
    };
    let w = first.attend(&x, &x, &x, &o)?.1.unwrap();
    assert_eq!(w.shape(), &[4, 6, 6]);
    let rows = w.sum_dims(&[2], false)?.to_vec_f64()?;
    assert!(rows.iter().all(|r| (r - 1.0).abs() < 1e-14));
    let per_head = AttendOptions {
        average_attn_weights: false,
        ..o
    };
    assert_eq!(
        first.attend(&x, &x, &x, &per_head)?.1.unwrap().shape(),
        &[4, 3, 6, 6]
    );

    // Dropout: active in training (reproducible from the seed), off in eval.
    let dropped = layer(true, 0.5)?;
    tenjin::manual_seed(3);
    let t1 = dropped.forward(&x)?.to_vec_f64()?;
    let t2 = dropped.forward(&x)?.to_vec_f64()?;
    tenjin::manual_seed(3);
    assert_eq!(dropped.forward(&x)?.to_vec_f64()?, t1);
    assert_ne!(t1, t2);
    dropped.eval();
    assert!(!dropped.is_training());
    close(
        &dropped.forward(&x)?.to_vec_f64()?,
        &a.to_vec_f64()?,
        1e-14,
        "eval",
    );
    Ok(())
}

#[test]
fn attention_errors_name_the_problem() -> Result<(), Error> {
    let e = MultiheadAttention::new(10, 3, 0).err().unwrap().to_string();
    assert!(e.contains("multiple of num_heads 3"), "{e}");
    let m = layer(true, 0.0)?;
    let x = Tensor::randn(&[2, 5, 12], DType::F64, 1)?;
    let bad = Tensor::zeros(&[2, 4], DType::I64)?;
    let o = AttendOptions {
        key_padding_mask: Some(&bad),
        ..Default::default()
    };
    let e = m.attend(&x, &x, &x, &o).err().unwrap().to_string();
    assert!(e.contains("key_padding_mask [2, 4] must be [2, 5]"), "{e}");
    let e = m
        .forward(&Tensor::randn(&[2, 5, 8], DType::F64, 1)?)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("12 features"), "{e}");
    let q = Tensor::randn(&[5, 4], DType::F64, 0)?;
    let mask = Tensor::zeros(&[5, 5], DType::F64)?;
    let both = AttentionOptions {
        attn_mask: Some(&mask),
        is_causal: true,
        ..Default::default()
    };
    let e = q
        .scaled_dot_product_attention(&q, &q, &both)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("either attn_mask or is_causal"), "{e}");
    let wrong = Tensor::randn(&[5, 3], DType::F64, 0)?;
    let e = q
        .scaled_dot_product_attention(&wrong, &q, &AttentionOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("same E"), "{e}");
    Ok(())
}

#[test]
fn grouped_query_heads_must_divide_evenly() -> Result<(), Error> {
    let q = Tensor::randn(&[1, 3, 4, 8], DType::F32, 0)?;
    let k = Tensor::randn(&[1, 2, 4, 8], DType::F32, 1)?;
    let o = AttentionOptions {
        enable_gqa: true,
        ..Default::default()
    };
    let e = q
        .scaled_dot_product_attention(&k, &k, &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 query heads are not a multiple of 2"), "{e}");
    // Without enable_gqa the head counts must broadcast, as in PyTorch.
    assert!(q
        .scaled_dot_product_attention(&k, &k, &AttentionOptions::default())
        .is_err());
    Ok(())
}
