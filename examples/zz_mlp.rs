#[allow(dead_code)]
#[path = "bench_common/mod.rs"]
mod bench_common;
use bench_common::{data, mlp, sgd};
use tenjin::nn::Module;
use tenjin::optim::Optimizer;
use tenjin::{autocast, DType, Tensor};
fn main() -> Result<(), tenjin::Error> {
    let batch = 256;
    let x = Tensor::from_vec(data(batch * 784, 3, 1.0), &[batch, 784])?;
    let labels: Vec<usize> = (0..batch).map(|i| (i * 7) % 10).collect();
    let model = mlp()?;
    let mut opt = sgd(model.parameters())?;
    let mut ts = Vec::new();
    for _ in 0..300 {
        let t = std::time::Instant::now();
        opt.zero_grad();
        let loss = autocast(DType::BF16, || model.forward(&x)?.cross_entropy(&labels))?;
        loss.backward()?;
        opt.step()?;
        loss.item()?;
        ts.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ts.sort_by(f64::total_cmp);
    println!("median {:.3} ms", ts[ts.len() / 2]);
    Ok(())
}
