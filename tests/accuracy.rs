//! f32 sums stay accurate for long ranges (issue 13): a long sum is split
//! into blocks of f32 partial sums added in f64 (`planner::blocked_sums`),
//! and its result does not depend on the thread count.
//!
//! PyTorch's values (its cascade sum, torch 2.x on CPU), computed once with
//! the venv of `../shared/bench/setup.sh`:
//! `torch.full((10_000_000,), 0.1).sum()` = 999999.5625,
//! `torch.ones(300_000_000).mean()` = 1.0.

use tenjin::{DType, Tensor};

/// The f32 value nearest 0.1, as the tensors hold it.
const TENTH: f64 = 0.1f32 as f64;

#[test]
fn ten_million_tenths_sum_as_accurately_as_pytorch() {
    let n = 10_000_000;
    let exact = TENTH * n as f64;
    let pytorch_error = (999_999.562_5_f64 - exact).abs();
    let t = Tensor::full(&[n], 0.1, DType::F32).unwrap();
    let ours = t.sum().unwrap().item().unwrap();
    // It used to be 1005958.56 (an error of 5958).
    assert!(
        (ours - exact).abs() <= 2.0 * pytorch_error,
        "sum = {ours}, exact {exact}, PyTorch's error {pytorch_error}"
    );
}

#[test]
fn the_mean_of_many_ones_is_one() {
    // Beyond 2^24 a plain f32 accumulator stops growing (300M ones gave a
    // mean of 0.8948; 50M would give 0.34).
    let t = Tensor::ones(&[50_000_000], DType::F32).unwrap();
    assert_eq!(t.mean().unwrap().item().unwrap(), 1.0);
    assert_eq!(t.sum().unwrap().item().unwrap(), 5.0e7);
}

#[test]
fn long_row_and_column_sums_are_accurate() {
    let rows = 1_000_000;
    let t = Tensor::full(&[rows, 8], 0.1, DType::F32).unwrap();
    let exact = TENTH * rows as f64;
    for v in t.sum_dims(&[0], false).unwrap().to_vec().unwrap() {
        assert!(
            (v as f64 - exact).abs() < 1e-6 * exact,
            "column sum {v}, exact {exact}"
        );
    }
    let t = Tensor::full(&[8, rows], 0.1, DType::F32).unwrap();
    for v in t.sum_dims(&[1], false).unwrap().to_vec().unwrap() {
        assert!(
            (v as f64 - exact).abs() < 1e-6 * exact,
            "row sum {v}, exact {exact}"
        );
    }
}

#[test]
fn long_sums_are_bitwise_identical_at_one_two_and_three_threads() {
    let data: Vec<f32> = (0..3 * 200_000)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let t = Tensor::from_vec(data, &[3, 200_000]).unwrap();
    let mut results = Vec::new();
    for threads in 1..=3 {
        tenjin::jit::set_num_threads(threads);
        let rows = t.sum_dims(&[1], false).unwrap().to_vec().unwrap();
        let all = t.sum().unwrap().item().unwrap();
        results.push((
            rows.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            all.to_bits(),
        ));
    }
    tenjin::jit::set_num_threads(2);
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
}
