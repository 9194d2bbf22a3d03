//! Trace nodes are owned by the tensors that depend on them: a graph nobody
//! holds frees itself. Its own test binary, because the live-node counter is
//! process-wide and other tests would move it concurrently.

use std::sync::Mutex;
use tenjin::{DType, Error, Tensor};

/// The tests of this file count nodes: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, seed).unwrap()
}

#[test]
fn dropping_an_unused_graph_frees_every_node() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = randn(&[8, 4], 7).requires_grad();
    let x = randn(&[16, 4], 8);
    let before = tenjin::trace::live_nodes();
    let h = x.matmul(&w.t()?)?.tanh()?;
    let loss = h.square()?.mean()?;
    assert!(tenjin::trace::live_nodes() >= before + 4);
    drop(h);
    drop(loss); // never differentiated
    assert_eq!(tenjin::trace::live_nodes(), before);
    // A very long chain frees without recursing once per node.
    let mut y = w.clone();
    for _ in 0..20_000 {
        y = y.mul_scalar(1.0)?;
    }
    assert!(tenjin::trace::live_nodes() >= before + 20_000);
    drop(y);
    assert_eq!(tenjin::trace::live_nodes(), before);
    Ok(())
}

#[test]
fn backward_releases_saved_values_but_held_outputs_keep_their_nodes() -> Result<(), Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = randn(&[3], 1).requires_grad();
    let before = tenjin::trace::live_nodes();
    let loss = w.exp()?.sum()?;
    loss.backward()?;
    // The loss still holds its graph (so a second backward can say why it
    // fails), and frees it when dropped.
    assert!(tenjin::trace::live_nodes() > before);
    drop(loss);
    assert_eq!(tenjin::trace::live_nodes(), before);
    Ok(())
}
