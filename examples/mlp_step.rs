//! Scratch timing of an MLP step (lead's perf work).
use std::time::Instant;
use tenjin::{DType, Tensor};

fn main() -> Result<(), tenjin::Error> {
    let dims = [784usize, 512, 512, 10];
    for &b in &[64usize, 256] {
        let x = Tensor::randn(&[b, 784], DType::F32, 1)?;
        let mut onehot = vec![0f32; b * 10];
        for i in 0..b {
            onehot[i * 10 + (i * 7) % 10] = 1.0;
        }
        let y = Tensor::from_vec(onehot, &[b, 10])?;
        let mut params = vec![];
        for (l, w) in dims.windows(2).enumerate() {
            let wt = Tensor::randn(&[w[1], w[0]], DType::F32, 10 + l as u64)?
                .mul_scalar(1.0 / (w[0] as f64).sqrt())?
                .requires_grad();
            let bt = Tensor::zeros(&[w[1]], DType::F32)?.requires_grad();
            params.push((wt, bt));
        }
        let mut times = vec![];
        for step in 0..30 {
            let t0 = Instant::now();
            let mut h = x.clone();
            let mut tf = vec![];
            for (l, (w, bb)) in params.iter().enumerate() {
                h = h.linear(w, Some(bb))?;
                if l < 2 {
                    h = h.relu()?;
                }
                tf.push(t0.elapsed());
            }
            let lse = h.logsumexp(&[1], true)?;
            let loss = tenjin::index_fn(
                &format!(
                    "l[] = sum{{i}}_0^{} (sum{{c}}_0^9 (y[i; c] * (lse[i; 0] - z[i; c]))) / {}",
                    b - 1,
                    b
                ),
                &[("y", &y), ("lse", &lse), ("z", &h)],
            )?;
            let tfwd = t0.elapsed();
            loss.backward()?;
            let tb = t0.elapsed();
            let _ = tenjin::no_grad(|| -> Result<(), tenjin::Error> {
                for (w, bb) in &params {
                    let _ = w.detach().sub(&w.grad().unwrap().mul_scalar(1e-3)?)?;
                    let _ = bb.detach().sub(&bb.grad().unwrap().mul_scalar(1e-3)?)?;
                    w.zero_grad();
                    bb.zero_grad();
                }
                Ok(())
            });
            let t = t0.elapsed();
            if step == 0 || step == 29 {
                println!(
                    "b={b} step {step}: fwd {:?} (layers {:?}) bwd {:?} total {:?}",
                    tfwd,
                    tf,
                    tb - tfwd,
                    t
                );
            }
            times.push(t.as_secs_f64() * 1e3);
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("b={b}: median {:.3} ms", times[times.len() / 2]);
    }
    println!("{}", tenjin::stats());
    Ok(())
}
