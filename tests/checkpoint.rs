//! Activation checkpointing: gradients bitwise identical to the run
//! without it (inputs that require a gradient, inputs that do not, weights
//! the blocks capture), and a lower measured peak of memory in use.
//! `cargo run --release --example checkpoint_memory` prints the numbers
//! BENCHMARKS.md quotes.

use std::sync::Mutex;
use tenjin::alloc;
use tenjin::{checkpoint, DType, Error, Tensor};

/// The tests of this file run one at a time: one measures the process's
/// peak of memory in use.
static SERIAL: Mutex<()> = Mutex::new(());

struct Net {
    w: Vec<Tensor>,
    b: Vec<Tensor>,
}

fn net(width: usize, blocks: usize) -> Result<Net, Error> {
    let mut w = Vec::new();
    let mut b = Vec::new();
    for k in 0..blocks {
        w.push(
            Tensor::randn(&[width, width], DType::F32, 10 + k as u64)?
                .mul_scalar(0.05)?
                .requires_grad(),
        );
        b.push(Tensor::randn(&[width], DType::F32, 50 + k as u64)?.requires_grad());
    }
    Ok(Net { w, b })
}

/// One residual block: `h + tanh(tanh(h·W + b)·W)`.
fn block(
    w: Tensor,
    b: Tensor,
) -> impl Fn(&[Tensor]) -> Result<Tensor, Error> + Clone + Send + Sync + 'static {
    move |t: &[Tensor]| {
        let a = t[0].matmul(&w)?.add(&b)?.tanh()?;
        t[0].add(&a.matmul(&w)?.tanh()?)
    }
}

fn loss(net: &Net, x: &Tensor, checkpointed: bool) -> Result<Tensor, Error> {
    let mut h = x.clone();
    for (w, b) in net.w.iter().zip(&net.b) {
        let f = block(w.clone(), b.clone());
        h = if checkpointed {
            checkpoint(f, &[h])?
        } else {
            f(&[h])?
        };
    }
    h.square()?.mean()
}

fn grads(net: &Net, x: &Tensor) -> Result<Vec<Vec<f32>>, Error> {
    let mut out = Vec::new();
    for t in net.w.iter().chain(&net.b).chain([x]) {
        out.push(
            t.grad()
                .map(|g| g.to_vec())
                .transpose()?
                .unwrap_or_default(),
        );
        t.zero_grad();
    }
    Ok(out)
}

#[test]
fn gradients_are_bitwise_those_without_checkpointing() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = net(32, 4)?;
    for x_needs_grad in [true, false] {
        let mut x = Tensor::randn(&[8, 32], DType::F32, 1)?;
        if x_needs_grad {
            x = x.requires_grad();
        }
        let l0 = loss(&n, &x, false)?;
        l0.backward()?;
        let plain = grads(&n, &x)?;
        let l1 = loss(&n, &x, true)?;
        assert_eq!(l0.item()?, l1.item()?);
        l1.backward()?;
        let ckpt = grads(&n, &x)?;
        assert!(plain.iter().all(|g| !g.is_empty() || !x_needs_grad));
        assert_eq!(plain, ckpt, "x requires grad: {x_needs_grad}");
    }
    Ok(())
}

#[test]
fn checkpointing_lowers_the_peak_in_use() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (n, x) = (
        net(256, 6)?,
        Tensor::randn(&[256, 256], DType::F32, 3)?.requires_grad(),
    );
    let peak = |checkpointed: bool| -> Result<usize, Error> {
        loss(&n, &x, checkpointed)?.backward()?; // warm: plans and pools
        grads(&n, &x)?;
        // The pool of the device the tensors live on (`sim_suite` runs
        // this suite on the simulated GPU).
        let device = x.device();
        alloc::empty_cache_for(device);
        alloc::reset_peak_for(device);
        let before = alloc::stats_for(device).bytes_in_use;
        loss(&n, &x, checkpointed)?.backward()?;
        let p = alloc::stats_for(device).peak_in_use - before;
        grads(&n, &x)?;
        Ok(p)
    };
    let (plain, ckpt) = (peak(false)?, peak(true)?);
    eprintln!("peak in use above the baseline: plain {plain} B, checkpointed {ckpt} B");
    assert!(
        ckpt < plain,
        "checkpointed {ckpt} B is not below plain {plain} B"
    );
    Ok(())
}

#[test]
fn a_checkpointed_block_takes_integer_inputs_and_refuses_create_graph() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let table = Tensor::randn(&[10, 4], DType::F64, 1)?.requires_grad();
    let ids = Tensor::from_vec_i64(vec![3, 3, 9], &[3])?;
    let t2 = table.clone();
    let y = checkpoint(
        move |t: &[Tensor]| t2.embedding(&t[0])?.tanh(),
        std::slice::from_ref(&ids),
    )?;
    y.sum()?.backward()?;
    let g = table.grad().unwrap().to_vec_f64()?;
    table.zero_grad();
    table.embedding(&ids)?.tanh()?.sum()?.backward()?;
    assert_eq!(g, table.grad().unwrap().to_vec_f64()?);
    let x = Tensor::randn(&[3], DType::F64, 2)?.requires_grad();
    let y = tenjin::autograd::keep_inputs(|| {
        checkpoint(|t: &[Tensor]| t[0].exp(), std::slice::from_ref(&x))?.sum()
    })?;
    assert!(tenjin::autograd::grad(&[&y], &[&x], None, true).is_err());
    Ok(())
}

/// A block on bf16 tensors, and an f32 block run under bf16 autocast
/// (whose recomputation, during a backward outside any autocast scope,
/// runs in the scope the block first ran in): gradients bitwise those
/// without checkpointing.
#[test]
fn half_blocks_and_blocks_under_autocast_give_the_same_gradients() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = net(32, 3)?;
    let to_half = |t: &Tensor| -> Result<Tensor, Error> {
        Ok(t.detach().to_dtype(DType::BF16)?.requires_grad())
    };
    let half = Net {
        w: n.w.iter().map(to_half).collect::<Result<_, _>>()?,
        b: n.b.iter().map(to_half).collect::<Result<_, _>>()?,
    };
    let xh = Tensor::randn(&[8, 32], DType::F32, 3)?
        .to_dtype(DType::BF16)?
        .requires_grad();
    let x = Tensor::randn(&[8, 32], DType::F32, 4)?.requires_grad();
    let mut runs = Vec::new();
    for checkpointed in [false, true] {
        let l = loss(&half, &xh, checkpointed)?;
        assert_eq!(l.dtype(), DType::BF16);
        l.backward()?;
        let g_half = grads(&half, &xh)?;
        let l = tenjin::autocast(DType::BF16, || loss(&n, &x, checkpointed))?;
        l.backward()?;
        runs.push((g_half, grads(&n, &x)?));
    }
    assert!(runs[0].0.iter().all(|g| !g.is_empty()));
    assert!(runs[0].1.iter().all(|g| !g.is_empty()));
    assert_eq!(runs[0].0, runs[1].0, "bf16 block");
    assert_eq!(runs[0].1, runs[1].1, "block under autocast");
    Ok(())
}
