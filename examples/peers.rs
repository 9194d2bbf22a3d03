//! tenjin's side of the side-by-side comparisons in `bench/compare.sh`:
//! prints one JSON line per workload with the median time in ms.
//!
//! `TENJIN_NUM_THREADS=1 cargo run --release --example peers`

mod bench_common;

use bench_common::{data, median_ms, report};
use std::time::Instant;
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

const CHAIN: &str = "f[i] = tanh x[i] * sigmoid (2 * x[i]) + x[i] ** 2 / (1 + exp (-x[i]))";
const URBAN: &str =
    "f[i; j] = exp (-sum{k}_0^63 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";

fn chain(n: usize) -> Result<(), tenjin::Error> {
    let f = IndexFn::parse(CHAIN, &[("x", &[n][..])])?;
    // The peers differentiate `sum(chain(x))`: tenjin sums too, and its
    // gradient is that of the sum (seeded with the scalar 1, as the tape's
    // `backward` of a sum reads it).
    let total = IndexFn::parse(
        &format!("s[] = sum{{i}}_0^{} (y[i])", n - 1),
        &[("y", &[n][..])],
    )?;
    let body = CHAIN.trim_start_matches("f[i] = ");
    let summed = IndexFn::parse(
        &format!("s[] = sum{{i}}_0^{} ({body})", n - 1),
        &[("x", &[n][..])],
    )?;
    let (kf, ks, kd) = (
        jit::compile(&f, DType::F32)?,
        jit::compile(&total, DType::F32)?,
        jit::compile(&summed.derive("x")?, DType::F32)?,
    );
    let x = data(n, 1, 1.0);
    let seed = [1f32];
    let (mut y, mut g, mut s) = (vec![0f32; n], vec![0f32; n], vec![0f32; 1]);
    let size = format!("n={n}");
    report(
        "elementwise_forward",
        &size,
        "median_ms",
        median_ms(31, || kf.run_into_f32(&[&x], &mut y))?,
    );
    report(
        "elementwise_chain",
        &size,
        "median_ms",
        median_ms(31, || {
            kf.run_into_f32(&[&x], &mut y)?;
            ks.run_into_f32(&[&y], &mut s)?;
            std::hint::black_box(s[0]);
            kd.run_into_f32(&[&x, &seed], &mut g)
        })?,
    );
    Ok(())
}

fn urban(i: usize) -> Result<(), tenjin::Error> {
    let k = 64;
    let shapes = [
        ("a", vec![i, k]),
        ("b", vec![i, k]),
        ("c", vec![i, i]),
        ("d", vec![i + k - 1]),
    ];
    let args: Vec<(&str, &[usize])> = shapes.iter().map(|(n, s)| (*n, s.as_slice())).collect();
    let f = IndexFn::parse(URBAN, &args)?;
    let kf = jit::compile(&f, DType::F32)?;
    let grads = ["a", "b", "c", "d"]
        .iter()
        .map(|a| jit::compile(&f.derive_reusing_output(a)?, DType::F32))
        .collect::<Result<Vec<_>, _>>()?;
    let inputs: Vec<Vec<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(s, (_, shape))| data(shape.iter().product(), s as u64 + 2, 0.1))
        .collect();
    let g = data(i * i, 9, 1.0);
    let mut out = vec![0f32; i * i];
    let mut grad_out: Vec<Vec<f32>> = shapes
        .iter()
        .map(|(_, s)| vec![0f32; s.iter().product()])
        .collect();
    let refs: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
    let size = format!("I=J={i},K={k}");
    report(
        "urban_forward",
        &size,
        "median_ms",
        median_ms(7, || kf.run_into_f32(&refs, &mut out))?,
    );
    report(
        "urban_value_grad",
        &size,
        "median_ms",
        median_ms(5, || {
            kf.run_into_f32(&refs, &mut out)?;
            std::hint::black_box(out.iter().zip(&g).map(|(a, b)| a * b).sum::<f32>());
            // Derivative kernels read the incoming gradient and the saved output.
            let mut ins = refs.clone();
            ins.push(&g);
            ins.push(&out);
            for (kd, buf) in grads.iter().zip(grad_out.iter_mut()) {
                kd.run_into_f32(&ins, buf)?;
            }
            Ok(())
        })?,
    );
    Ok(())
}

fn matmul(m: usize, k: usize, n: usize) -> Result<(), tenjin::Error> {
    let f = IndexFn::parse(
        &format!("f[i; j] = sum{{k}}_0^{} (a[i; k] * b[k; j])", k - 1),
        &[("a", &[m, k][..]), ("b", &[k, n][..])],
    )?;
    let kf = jit::compile(&f, DType::F32)?;
    let (a, b) = (data(m * k, 3, 1.0), data(k * n, 4, 1.0));
    let mut c = vec![0f32; m * n];
    report(
        "matmul",
        &format!("{m}x{k}x{n}"),
        "median_ms",
        median_ms(21, || kf.run_into_f32(&[&a, &b], &mut c))?,
    );
    Ok(())
}

/// One SGD step of the MLP 784-512-512-10 (ReLU, softmax cross-entropy),
/// as `../shared/bench/workloads.py` writes it for PyTorch.
fn mlp(batch: usize) -> Result<(), tenjin::Error> {
    use tenjin::nn::Module;
    use tenjin::optim::Optimizer;
    use tenjin::Tensor;
    let x = Tensor::from_vec(data(batch * 784, 3, 1.0), &[batch, 784])?;
    let y: Vec<usize> = (0..batch).map(|i| (i * 7 + 3) % 10).collect();
    let model = bench_common::mlp()?;
    let mut opt = bench_common::sgd(model.parameters())?;
    let mut step = || -> Result<(), tenjin::Error> {
        opt.zero_grad();
        let loss = model.forward(&x)?.cross_entropy(&y)?;
        loss.backward()?;
        opt.step()
    };
    let size = format!("batch={batch}");
    let t = Instant::now();
    step()?;
    report(
        "mlp_first_step",
        &size,
        "median_ms",
        t.elapsed().as_secs_f64() * 1e3,
    );
    report("mlp_step", &size, "median_ms", median_ms(41, step)?);
    Ok(())
}

/// conv1d B=32, C=O=64, T=1024, K=5: value and gradients with respect to
/// the input and the weight of `Σ conv1d(x, w) · G` (as
/// `../shared/bench/workloads.py`'s `conv`).
fn conv1d() -> Result<(), tenjin::Error> {
    use tenjin::Tensor;
    let (b, c, o, t, k) = (32, 64, 64, 1024, 5);
    let x = Tensor::from_vec(data(b * c * t, 5, 1.0), &[b, c, t])?.requires_grad();
    let w = Tensor::from_vec(data(o * c * k, 6, 0.05), &[o, c, k])?.requires_grad();
    let g = Tensor::from_vec(data(b * o * (t - k + 1), 7, 1.0), &[b, o, t - k + 1])?;
    let ms = median_ms(11, || {
        x.zero_grad();
        w.zero_grad();
        let v = x.conv1d(&w, None, 1, 0, 1, 1)?.mul(&g)?.sum()?;
        v.backward()
    })?;
    report(
        "conv1d_value_grad",
        &format!("B={b},C=O={c},T={t},K={k}"),
        "median_ms",
        ms,
    );
    Ok(())
}

/// Dropout (p = 0.5, training) of `n` f32 values: the forward alone, and
/// value and gradient of `Σ dropout(x) · G` (the mask drawn in the kernel
/// and again by the derivative).
fn dropout(n: usize) -> Result<(), tenjin::Error> {
    use tenjin::{Generator, Tensor};
    let x = Tensor::from_vec(data(n, 8, 1.0), &[n])?.requires_grad();
    let g = Tensor::from_vec(data(n, 9, 1.0), &[n])?;
    let mut gen = Generator::new(1);
    let size = format!("n={n},p=0.5");
    let fwd = median_ms(7, || {
        tenjin::no_grad(|| x.dropout_with(0.5, &mut gen).map(drop))
    })?;
    report("dropout_forward", &size, "median_ms", fwd);
    let vg = median_ms(7, || {
        x.zero_grad();
        x.dropout_with(0.5, &mut gen)?.mul(&g)?.sum()?.backward()
    })?;
    report("dropout_value_grad", &size, "median_ms", vg);
    Ok(())
}

/// Single-head attention `softmax(q kᵀ) v` (no scaling, no mask) as a
/// user writes it with tensor ops: value and gradients with respect to
/// q, k and v of `Σ o · G` (as `../shared/bench/workloads.py`'s
/// `attention`).
fn attention(n: usize, e: usize) -> Result<(), tenjin::Error> {
    use tenjin::Tensor;
    let make = |seed| Tensor::from_vec(data(n * e, seed, 1.0), &[n, e]);
    let (q, k, v) = (make(11)?, make(12)?, make(13)?);
    let (q, k, v) = (q.requires_grad(), k.requires_grad(), v.requires_grad());
    let g = make(14)?;
    let ms = median_ms(11, || {
        for t in [&q, &k, &v] {
            t.zero_grad();
        }
        let o = q.matmul(&k.t()?)?.softmax(-1)?.matmul(&v)?;
        o.mul(&g)?.sum()?.backward()
    })?;
    report(
        "attention_value_grad",
        &format!("N={n},E={e}"),
        "median_ms",
        ms,
    );
    Ok(())
}

/// Embedding lookup of a 32×128 batch of ids (every fifth column the
/// same id, so the backward sums repeats) into a 5000×256 table: value
/// and the table's gradient of `Σ e · G`, the ids of
/// `../shared/bench/workloads.py`'s `embedding`.
fn embedding() -> Result<(), tenjin::Error> {
    use tenjin::Tensor;
    let (vocab, dim, batch, seq) = (5000usize, 256usize, 32usize, 128usize);
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| {
            if i % seq % 5 == 0 {
                42
            } else {
                (i * 7919 % vocab) as i64
            }
        })
        .collect();
    let ids = Tensor::from_vec_i64(ids, &[batch, seq])?;
    let w = Tensor::from_vec(data(vocab * dim, 15, 1.0), &[vocab, dim])?.requires_grad();
    let g = Tensor::from_vec(data(batch * seq * dim, 16, 1.0), &[batch, seq, dim])?;
    let ms = median_ms(41, || {
        w.zero_grad();
        w.embedding(&ids)?.mul(&g)?.sum()?.backward()
    })?;
    report(
        "embedding_value_grad",
        &format!("V={vocab},D={dim},ids={batch}x{seq}"),
        "median_ms",
        ms,
    );
    Ok(())
}

fn main() -> Result<(), tenjin::Error> {
    for n in [128, 512, 1024] {
        attention(n, 64)?;
    }
    embedding()?;
    dropout(1 << 24)?;
    conv1d()?;
    mlp(64)?;
    mlp(256)?;
    chain(1 << 20)?;
    chain(1 << 24)?;
    urban(256)?;
    matmul(512, 512, 512)?;
    matmul(256, 784, 512)?;
    Ok(())
}
