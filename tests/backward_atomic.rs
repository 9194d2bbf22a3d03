//! Out of memory midway through backward changes no leaf's gradient
//! (issue 13): gradients are summed aside and committed all at once, so a
//! following optimizer step never updates some parameters and not others.
//! A retry with memory to spare then gives exactly the gradients of a run
//! that never failed. (One test in its own binary: the memory limit is
//! global.)

use tenjin::{alloc, DType, Error, Tensor};

fn grads(params: &[&Tensor]) -> Vec<Option<Vec<f32>>> {
    params
        .iter()
        .map(|p| p.grad().map(|g| g.to_vec().unwrap()))
        .collect()
}

#[test]
fn out_of_memory_midway_through_backward_changes_no_gradient() -> Result<(), Error> {
    let x = Tensor::randn(&[32, 48], DType::F32, 1)?;
    let w1 = Tensor::randn(&[48, 64], DType::F32, 2)?.requires_grad();
    let b1 = Tensor::randn(&[64], DType::F32, 3)?.requires_grad();
    let w2 = Tensor::randn(&[64, 16], DType::F32, 4)?.requires_grad();
    let b2 = Tensor::randn(&[16], DType::F32, 5)?.requires_grad();
    let params = [&w1, &b1, &w2, &b2];
    let loss = || -> Result<Tensor, Error> {
        x.matmul(&w1)?
            .add(&b1)?
            .relu()?
            .matmul(&w2)?
            .add(&b2)?
            .tanh()?
            .sum()
    };
    let zero = || params.iter().for_each(|p| p.zero_grad());
    zero();
    loss()?.backward()?;
    let once = grads(&params);
    zero();
    loss()?.backward()?;
    loss()?.backward()?;
    let twice = grads(&params);

    let (mut failed_clean, mut failed_accumulating, mut succeeded) = (0, 0, 0);
    for accumulating in [false, true] {
        for extra in (0..48 << 10).step_by(512) {
            zero();
            if accumulating {
                loss()?.backward()?;
            }
            let before = grads(&params);
            let l = loss()?;
            alloc::empty_cache();
            alloc::set_memory_limit(Some(alloc::stats().bytes_reserved + extra));
            let attempt = l.backward_retaining_graph(None);
            alloc::set_memory_limit(None);
            match attempt {
                Err(Error::OutOfMemory { .. }) => {
                    assert_eq!(
                        grads(&params),
                        before,
                        "a failed backward changed gradients ({extra} B spare)"
                    );
                    if accumulating {
                        failed_accumulating += 1;
                    } else {
                        failed_clean += 1;
                    }
                    // Nothing was lost: the retry completes the step.
                    l.backward()?;
                    let after = grads(&params);
                    assert_eq!(
                        after,
                        if accumulating {
                            twice.clone()
                        } else {
                            once.clone()
                        }
                    );
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    succeeded += 1;
                    assert_eq!(
                        grads(&params),
                        if accumulating {
                            twice.clone()
                        } else {
                            once.clone()
                        }
                    );
                }
            }
        }
    }
    eprintln!(
        "failed {failed_clean} + {failed_accumulating} (accumulating), succeeded {succeeded}"
    );
    assert!(failed_clean > 3 && failed_accumulating > 3 && succeeded > 0);
    Ok(())
}
