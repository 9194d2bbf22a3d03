//! Data-dependent indexing (`index_select`, `gather`, `nn::Embedding`,
//! the label losses): gradients against finite differences in f64, the
//! embedding gradient against the dense one-hot formulation exactly,
//! bitwise identical gradients at 1, 2 and 3 threads, the tape's other
//! walks (explain, memory plan, memory-efficient mode, the cached second
//! step), and the errors.
//!
//! The thread count, the allocator's mode and the plan and kernel counters
//! are process-wide: every test holds `SERIAL`, so no other test compiles
//! between the counters one test compares.

use std::sync::{Mutex, MutexGuard};
use tenjin::nn::{Embedding, Module};
use tenjin::{
    alloc, autograd, gradcheck, CrossEntropyOptions, DType, Error, LossReduction, Tensor,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn ids(v: Vec<i64>) -> Tensor {
    let n = v.len();
    Tensor::from_vec_i64(v, &[n]).expect("ids")
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, seed).expect("randn")
}

#[test]
fn gradients_match_finite_differences() -> Result<(), Error> {
    let _s = serial();
    let repeated = ids(vec![1, 3, 1, 0, 1]);
    for dim in 0..3 {
        let shape = [4, 4, 4];
        let ids = repeated.clone();
        gradcheck(
            move |t| t[0].index_select(dim, &ids)?.square(),
            &[randn(&shape, dim as u64)],
        )?;
    }
    // A view as the data (the transpose is composed into a copy).
    let ids2 = repeated.clone();
    gradcheck(
        move |t| t[0].t()?.index_select(0, &ids2),
        &[randn(&[3, 4], 7)],
    )?;
    for dim in 0..2 {
        let idx = Tensor::from_vec_i64(vec![2, 0, 2, 1, 1, 1], &[2, 3])?;
        gradcheck(move |t| t[0].gather(dim, &idx)?.exp(), &[randn(&[3, 3], 9)])?;
    }
    let labels = ids(vec![2, 0, 2, 4]);
    for options in [
        CrossEntropyOptions::default(),
        CrossEntropyOptions {
            label_smoothing: 0.2,
            ..Default::default()
        },
        CrossEntropyOptions {
            ignore_index: Some(0),
            reduction: LossReduction::Sum,
            ..Default::default()
        },
        CrossEntropyOptions {
            reduction: LossReduction::None,
            ..Default::default()
        },
    ] {
        let l = labels.clone();
        gradcheck(
            move |t| t[0].cross_entropy_with(&l, options),
            &[randn(&[4, 5], 3)],
        )?;
    }
    let l = labels.clone();
    gradcheck(
        move |t| {
            t[0].log_softmax(1)?
                .nll_loss(&l, Some(2), LossReduction::Mean)
        },
        &[randn(&[4, 5], 4)],
    )?;
    Ok(())
}

/// The segmented sum equals `onehotᵀ · dy` exactly (integer-valued data, so
/// every summation order is exact).
#[test]
fn embedding_gradient_equals_the_dense_one_hot_formulation() -> Result<(), Error> {
    let _s = serial();
    let (v, d) = (7, 5);
    let id_list: Vec<i64> = vec![3, 1, 3, 3, 6, 0, 1, 3, 2, 6, 6, 3];
    let emb = Embedding::with_dtype(v, d, DType::F64, 1)?;
    let dy: Vec<f64> = (0..id_list.len() * d)
        .map(|k| ((k * 7) % 11) as f64 - 5.0)
        .collect();
    let dy = Tensor::from_vec_f64(dy, &[3, 4, d])?;
    let h = emb.forward(&Tensor::from_vec_i64(id_list.clone(), &[3, 4])?)?;
    h.backward_with(&dy)?;
    let got = emb.weight.grad().expect("a gradient").to_vec_f64()?;
    // Dense: onehot [12, 7]; gradient onehotᵀ · dy.
    let mut one_hot = vec![0.0; id_list.len() * v];
    for (t, &i) in id_list.iter().enumerate() {
        one_hot[t * v + i as usize] = 1.0;
    }
    let oh = Tensor::from_vec_f64(one_hot, &[id_list.len(), v])?;
    let w = emb.weight.detach().requires_grad();
    oh.matmul(&w)?.reshape(&[3, 4, d])?.backward_with(&dy)?;
    assert_eq!(got, w.grad().unwrap().to_vec_f64()?);
    // Rows no id selects get exactly zero.
    assert!(got[5 * d..6 * d].iter().all(|&g| g == 0.0));
    Ok(())
}

/// Large enough to be split across threads; repeated, skewed ids.
#[test]
fn gradients_are_bitwise_identical_at_1_2_and_3_threads() -> Result<(), Error> {
    let _s = serial();
    let (v, d, t) = (500, 64, 4096);
    let id_list: Vec<i64> = (0..t as i64)
        .map(|k| (k * k * 31 + 7) % 97 + (k % 5) * 80)
        .collect();
    let run = |threads: usize| -> Result<(Vec<f32>, Vec<f32>), Error> {
        tenjin::jit::set_num_threads(threads);
        let emb = Embedding::new(v, d, 3)?;
        let x = Tensor::randn(&[t / 64, 64, 32], DType::F32, 4)?.requires_grad();
        let idx = Tensor::from_vec_i64(
            (0..(t / 64 * 32 * 32) as i64)
                .map(|k| (k * 13) % 64)
                .collect(),
            &[t / 64, 32, 32],
        )?;
        let h = emb.forward(&Tensor::from_vec_i64(id_list.clone(), &[t])?)?;
        let loss = h.tanh()?.sum()?.add(&x.gather(1, &idx)?.sin()?.sum()?)?;
        loss.backward()?;
        Ok((
            emb.weight.grad().unwrap().to_vec()?,
            x.grad().unwrap().to_vec()?,
        ))
    };
    let one = run(1)?;
    for threads in [2, 3] {
        let other = run(threads)?;
        assert!(
            one.0 == other.0,
            "embedding gradient differs at {threads} threads"
        );
        assert!(
            one.1 == other.1,
            "gather gradient differs at {threads} threads"
        );
    }
    tenjin::jit::set_num_threads(0);
    Ok(())
}

#[test]
fn the_tape_walks_host_ops_like_any_other() -> Result<(), Error> {
    let _s = serial();
    let emb = Embedding::with_dtype(20, 8, DType::F64, 5)?;
    let w2 = randn(&[8, 3], 6).requires_grad();
    let step = |emb: &Embedding| -> Result<(Tensor, Vec<f64>), Error> {
        emb.weight.zero_grad();
        let h = emb.forward(&ids(vec![4, 4, 19, 0, 7]))?;
        let loss = h
            .matmul(&w2)?
            .cross_entropy_with(&ids(vec![0, 2, 1, 1, 0]), Default::default())?;
        loss.backward_retaining_graph(None)?;
        Ok((loss, emb.weight.grad().unwrap().to_vec_f64()?))
    };
    let (loss, g_runtime) = step(&emb)?;
    let plan = loss.memory_plan()?;
    assert!(plan.peak_bytes > 0);
    let ex = tenjin::explain(&emb.weight.index_select(0, &ids(vec![1, 2]))?)?;
    assert_eq!(ex.op, "index_select");
    assert!(ex.backward.iter().any(|s| s.route == "host"), "{ex:?}");
    // The memory-efficient mode gives the same gradient.
    alloc::set_mode(alloc::AllocMode::MemoryEfficient);
    let (_, g_memory) = step(&emb)?;
    alloc::set_mode(alloc::AllocMode::RuntimeEfficient);
    assert_eq!(g_runtime, g_memory);
    // A second step with new ids of the same count compiles nothing.
    let before = tenjin::stats();
    step(&emb)?;
    let after = tenjin::stats();
    assert_eq!(after.kernels_compiled, before.kernels_compiled);
    assert_eq!(after.op_plans_built, before.op_plans_built);
    Ok(())
}

#[test]
fn bad_indices_are_errors_naming_the_op_and_the_index() -> Result<(), Error> {
    let _s = serial();
    let w = randn(&[5, 3], 1).requires_grad();
    let e = w.index_select(0, &ids(vec![0, 5])).unwrap_err().to_string();
    assert!(
        e.contains("index_select") && e.contains("index 5") && e.contains("size 5"),
        "{e}"
    );
    let e = w.index_select(0, &ids(vec![-1])).unwrap_err().to_string();
    assert!(e.contains("index -1"), "{e}");
    let e = w.index_select(2, &ids(vec![0])).unwrap_err().to_string();
    assert!(e.contains("dimension 2"), "{e}");
    let e = w
        .index_select(0, &Tensor::from_vec(vec![0.0], &[1])?)
        .unwrap_err()
        .to_string();
    assert!(e.contains("integer"), "{e}");
    let e = w
        .gather(1, &Tensor::from_vec_i64(vec![0, 3], &[1, 2])?)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gather") && e.contains("index 3"), "{e}");
    let e = w.gather(1, &ids(vec![0])).unwrap_err().to_string();
    assert!(e.contains("rank"), "{e}");
    let emb = Embedding::new(4, 2, 0)?;
    assert!(emb
        .forward(&ids(vec![4]))
        .unwrap_err()
        .to_string()
        .contains("index 4"));
    let e = w
        .cross_entropy_with(&ids(vec![0, 1, 2, 3, 3]), Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("label 3") && e.contains("3 classes"), "{e}");
    let all_ignored = CrossEntropyOptions {
        ignore_index: Some(1),
        ..Default::default()
    };
    assert!(w
        .cross_entropy_with(&ids(vec![1, 1, 1, 1, 1]), all_ignored)
        .is_err());
    // Integer tensors do no arithmetic.
    assert!(ids(vec![1])
        .add(&ids(vec![2]))
        .unwrap_err()
        .to_string()
        .contains("I64"));
    // Not supported yet, said so.
    let y = autograd::keep_inputs(|| w.index_select(0, &ids(vec![1, 1]))?.square()?.sum())?;
    let e = autograd::grad(&[&y], &[&w], None, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not supported yet"), "{e}");
    Ok(())
}

#[test]
fn integer_tensors_compare_convert_and_read_back_through_views() -> Result<(), Error> {
    let _s = serial();
    let a = Tensor::from_vec_i64(vec![1, 5, 3, 7], &[2, 2])?;
    let b = Tensor::from_vec_i32(vec![3, 3], &[2])?;
    assert_eq!(a.gt(&b)?.to_vec_i64()?, vec![0, 1, 0, 1]);
    assert_eq!(a.eq(&b)?.to_vec_i64()?, vec![0, 0, 1, 0]);
    assert_eq!(a.t()?.to_vec_i64()?, vec![1, 3, 5, 7]);
    assert_eq!(a.narrow(1, 1, 1)?.to_vec_i64()?, vec![5, 7]);
    assert_eq!(a.to_dtype(DType::F64)?.to_vec_f64()?, vec![1., 5., 3., 7.]);
    let f = Tensor::from_vec_f64(vec![-1.7, 2.9, f64::NAN], &[3])?;
    assert_eq!(f.to_dtype(DType::I64)?.to_vec_i64()?, vec![-1, 2, 0]);
    assert_eq!(f.to_dtype(DType::I32)?.dtype(), DType::I32);
    let x = Tensor::from_vec(vec![0.1, 0.9, 0.5, 0.3], &[2, 2])?;
    let acc = x
        .argmax(1, false)?
        .eq(&Tensor::from_vec_i64(vec![1, 1], &[2])?)?;
    assert_eq!(acc.to_dtype(DType::F32)?.mean()?.item()?, 0.5);
    assert!(a.gt(&x).is_err()); // integer against float
    Ok(())
}

/// `to_dtype` between floats is recorded: the gradient comes back in the
/// input's type, equal to the gradient computed without the conversion.
#[test]
fn conversions_carry_gradients_back_in_the_input_type() -> Result<(), Error> {
    let _s = serial();
    let x32 = Tensor::randn(&[3, 4], DType::F32, 1)?.requires_grad();
    let w64 = randn(&[4, 2], 2).requires_grad();
    let loss = x32.to_dtype(DType::F64)?.matmul(&w64)?.tanh()?.sum()?;
    loss.backward()?;
    let g = x32.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    // The same in f64 throughout, rounded to f32 at the end.
    let x64 = x32.detach().to_dtype(DType::F64)?.requires_grad();
    x64.matmul(&w64.detach())?.tanh()?.sum()?.backward()?;
    let want: Vec<f32> = x64.grad().unwrap().to_vec()?;
    assert_eq!(g.to_vec()?, want);
    // f64 → f32 → loss: the gradient converted back to f64.
    let y = randn(&[5], 3).requires_grad();
    y.to_dtype(DType::F32)?.square()?.sum()?.backward()?;
    let gy = y.grad().unwrap();
    assert_eq!(gy.dtype(), DType::F64);
    for (g, v) in gy.to_vec_f64()?.iter().zip(y.to_vec_f64()?) {
        assert_eq!(*g, f64::from(2.0 * (v as f32)));
    }
    // Under no_grad, or into integers, nothing is recorded.
    assert!(!tenjin::no_grad(|| y.to_dtype(DType::F32))?.is_requires_grad());
    assert!(!y.to_dtype(DType::I64)?.is_requires_grad());
    Ok(())
}
