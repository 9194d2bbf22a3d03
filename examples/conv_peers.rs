//! tenjin's side of `bench/conv.sh` (issue "Convolutions at GEMM speed"):
//! one JSON line per workload with the median time in ms of the value and
//! the gradients with respect to the input and the weight of
//! `Σ conv(x, w) · G` (as `../shared/bench/workloads.py`'s `conv` and
//! `conv2d`).
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example conv_peers
//! cargo run --release --example conv_peers -- smoke   # one repetition each
//! cargo run --release --example conv_peers -- conv2d_line   # one workload
//! cargo run --release --example conv_peers -- conv2d_s1 conv2d_s2   # some
//! ```
//!
//! - `conv1d`: B=32, C=O=64, T=1024, K=5, no padding;
//! - `conv2d_s1`, `conv2d_s2`, `conv2d_depthwise`: B=32, 64→64 channels,
//!   32×32, 3×3, padding 1, stride 1 / stride 2 / groups = 64;
//! - `conv2d_line`: the stride-1 `conv2d` written by hand as one
//!   `index_fn` line, zero padding as a guard;
//! - `conv2d_s1_winograd`: `conv2d_s1` with Winograd's F(2×2, 3×3) on
//!   (`tenjin::set_winograd`, opt in): its forward and input gradient;
//! - `max_pool2d`: 3×3 windows, stride 2, padding 1 (a ResNet stem's
//!   pool), and `avg_pool2d`: 2×2, stride 2, both over B=32, 64 channels,
//!   32×32: value and gradient of `Σ pool(x) · G`.

mod bench_common;

use bench_common::{data, median_ms, report};
use tenjin::{index_fn_with_sizes, Error, Tensor};

/// Repetitions per workload (1 with `smoke`).
fn reps() -> usize {
    if std::env::args().any(|a| a == "smoke") {
        1
    } else {
        11
    }
}

/// Times value and gradients of `Σ conv(x, w) · G` for `conv` over
/// `x_shape` and `w_shape` (`G` takes the output's shape).
fn value_grad(
    workload: &str,
    size: &str,
    x_shape: &[usize],
    w_shape: &[usize],
    conv: impl Fn(&Tensor, &Tensor) -> Result<Tensor, Error>,
) -> Result<(), Error> {
    let numel = |s: &[usize]| s.iter().product::<usize>();
    let fan_in = numel(&w_shape[1..]) as f32;
    let x = Tensor::from_vec(data(numel(x_shape), 5, 1.0), x_shape)?.requires_grad();
    let w =
        Tensor::from_vec(data(numel(w_shape), 6, fan_in.sqrt().recip()), w_shape)?.requires_grad();
    let y_shape = conv(&x, &w)?.shape().to_vec();
    let g = Tensor::from_vec(data(numel(&y_shape), 7, 1.0), &y_shape)?;
    let ms = median_ms(reps(), || {
        x.zero_grad();
        w.zero_grad();
        conv(&x, &w)?.mul(&g)?.sum()?.backward()
    })?;
    report(workload, size, "median_ms", ms);
    Ok(())
}

/// Times value and gradient of `Σ pool(x) · G` over `[32, 64, 32, 32]`.
fn pool_value_grad(
    workload: &str,
    size: &str,
    pool: impl Fn(&Tensor) -> Result<Tensor, Error>,
) -> Result<(), Error> {
    let shape = [32, 64, 32, 32];
    let x = Tensor::from_vec(data(shape.iter().product(), 5, 1.0), &shape)?.requires_grad();
    let y_shape = pool(&x)?.shape().to_vec();
    let g = Tensor::from_vec(data(y_shape.iter().product(), 7, 1.0), &y_shape)?;
    let ms = median_ms(reps(), || {
        x.zero_grad();
        pool(&x)?.mul(&g)?.sum()?.backward()
    })?;
    report(workload, size, "median_ms", ms);
    Ok(())
}

/// The stride-1, padding-1 3×3 `conv2d` as one hand-written line.
const CONV2D_LINE: &str = "y[n; o; i; j] = sum{c}_0^63 (sum{p}_0^2 (sum{q}_0^2 (\
    if {i + p >= 1} then (if {i + p <= 32} then (if {j + q >= 1} then (if {j + q <= 32} \
    then (x[n; c; i + p - 1; j + q - 1] * w[o; c; p; q]) else (0)) else (0)) else (0)) else (0))))";

fn main() -> Result<(), Error> {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| a != "smoke").collect();
    let want = |w: &str| only.is_empty() || only.iter().any(|o| o == w);
    let size2d = |label: &str| format!("B=32,C=O=64,32x32,{label}");
    if want("conv1d") {
        value_grad(
            "conv1d",
            "B=32,C=O=64,T=1024,K=5",
            &[32, 64, 1024],
            &[64, 64, 5],
            |x, w| x.conv1d(w, None, 1, 0, 1, 1),
        )?;
    }
    let cases = [
        ("conv2d_s1", "3x3,p1", 1, 1),
        ("conv2d_s2", "3x3,p1,s2", 2, 1),
        ("conv2d_depthwise", "3x3,p1,depthwise", 1, 64),
    ];
    for (workload, label, stride, groups) in cases {
        if want(workload) {
            value_grad(
                workload,
                &size2d(label),
                &[32, 64, 32, 32],
                &[64, 64 / groups, 3, 3],
                |x, w| x.conv2d(w, None, [stride; 2], [1, 1], [1, 1], groups),
            )?;
        }
    }
    if want("conv2d_line") {
        value_grad(
            "conv2d_line",
            &size2d("3x3,p1"),
            &[32, 64, 32, 32],
            &[64, 64, 3, 3],
            |x, w| index_fn_with_sizes(CONV2D_LINE, &[("x", x), ("w", w)], &[("i", 32), ("j", 32)]),
        )?;
    }
    if want("conv2d_s1_winograd") {
        tenjin::set_winograd(true);
        let timed = value_grad(
            "conv2d_s1_winograd",
            &size2d("3x3,p1,winograd"),
            &[32, 64, 32, 32],
            &[64, 64, 3, 3],
            |x, w| x.conv2d(w, None, [1, 1], [1, 1], [1, 1], 1),
        );
        tenjin::set_winograd(false);
        timed?;
    }
    if want("max_pool2d") {
        pool_value_grad("max_pool2d", &size2d("3x3,s2,p1"), |x| {
            x.max_pool2d_padded([3, 3], [2, 2], [1, 1])
        })?;
    }
    if want("avg_pool2d") {
        pool_value_grad("avg_pool2d", &size2d("2x2,s2"), |x| {
            x.avg_pool2d([2, 2], [2, 2])
        })?;
    }
    Ok(())
}
