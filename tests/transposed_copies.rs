//! Transposed copies walk their output in blocks (`planner::tile`): the
//! values stay exact (each element is a copy) for shapes that are not
//! multiples of the block, in f32 and f64, at 1, 2 and 3 threads (the
//! parallel chunks are tiled within themselves), for 2-D transposes and
//! 4-D permutes, forward and backward; and only kernels reading across
//! cache lines are tiled.
//!
//! The thread count is process-wide: every test holds `SERIAL`.

use std::sync::{Mutex, MutexGuard};
use tenjin::planner::passes::{loop_kernel, LoopRole};
use tenjin::planner::route::Target;
use tenjin::symbolic::IndexFn;
use tenjin::{DType, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn values(n: usize) -> Vec<f64> {
    (0..n).map(|i| i as f64 * 0.5 - 7.25).collect()
}

/// `x` permuted by `dims`, element by element on the host.
fn permuted(x: &[f64], shape: &[usize], dims: &[usize]) -> Vec<f64> {
    let out_shape: Vec<usize> = dims.iter().map(|&d| shape[d]).collect();
    let strides: Vec<usize> = (0..shape.len())
        .map(|d| shape[d + 1..].iter().product())
        .collect();
    let n: usize = shape.iter().product();
    (0..n)
        .map(|flat| {
            let mut rest = flat;
            let mut src = 0;
            for (k, &d) in dims.iter().enumerate().rev() {
                let i = rest % out_shape[k];
                rest /= out_shape[k];
                src += i * strides[d];
            }
            x[src]
        })
        .collect()
}

#[test]
fn permuted_copies_are_exact_at_every_thread_count() {
    let _s = serial();
    let cases: [(&[usize], &[usize]); 6] = [
        (&[37, 53], &[1, 0]),
        (&[1, 17], &[1, 0]),
        (&[16, 8], &[1, 0]),
        (&[100, 3], &[1, 0]),
        (&[2, 5, 7, 19], &[0, 2, 3, 1]),
        (&[3, 33, 4, 18], &[0, 3, 1, 2]),
    ];
    for threads in 1..=3 {
        tenjin::jit::set_num_threads(threads);
        for (shape, dims) in cases {
            let n: usize = shape.iter().product();
            let want = permuted(&values(n), shape, dims);
            for dtype in [DType::F32, DType::F64] {
                let x = Tensor::from_vec_f64(values(n), shape)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let y = x.permute(dims).unwrap().contiguous().unwrap();
                assert_eq!(
                    y.to_vec_f64().unwrap(),
                    want,
                    "{shape:?} {dims:?} {dtype:?} {threads}"
                );
            }
        }
    }
    tenjin::jit::set_num_threads(2);
}

/// The gradient of a permuted copy is the inverse permutation of the
/// incoming gradient: a transposed copy too.
#[test]
fn the_gradient_of_a_permuted_copy_is_exact() {
    let _s = serial();
    let shape = [3usize, 33, 4, 18];
    let dims = [0usize, 3, 1, 2];
    let n: usize = shape.iter().product();
    let x = Tensor::from_vec_f64(values(n), &shape)
        .unwrap()
        .requires_grad();
    let y = x.permute(&dims).unwrap().contiguous().unwrap();
    let g_values: Vec<f64> = (0..n).map(|i| (i * 7 % 23) as f64).collect();
    let g = Tensor::from_vec_f64(g_values.clone(), y.shape()).unwrap();
    y.backward_with(&g).unwrap();
    // Inverse permutation: dimension dims[k] of x is dimension k of y.
    let mut inverse = [0usize; 4];
    for (k, &d) in dims.iter().enumerate() {
        inverse[d] = k;
    }
    let want = permuted(&g_values, y.shape(), &inverse);
    assert_eq!(x.grad().unwrap().to_vec_f64().unwrap(), want);
}

#[test]
fn only_reads_across_cache_lines_are_tiled() {
    let kernel = |src: &str, shape: &[usize]| {
        let f = IndexFn::parse(src, &[("x", shape)]).unwrap();
        loop_kernel(&f, DType::F32, Target::Cpu, LoopRole::Whole)
            .unwrap()
            .to_string()
    };
    let tiled = |k: &str| k.contains("/16)") && k.contains("/8)");
    assert!(tiled(&kernel("y[i; j] = x[j; i]", &[64, 48])));
    assert!(tiled(&kernel("y[n; i; j] = x[n; j; i] * 2", &[2, 64, 48])));
    // Contiguous reads, broadcasts and short strides keep the plain nest.
    assert!(!tiled(&kernel("y[i; j] = x[i; j]", &[64, 48])));
    assert!(!tiled(&kernel("y[i; j] = x[i; 0] + x[0; j]", &[64, 48])));
    assert!(!tiled(&kernel("y[i; j] = x[j; i]", &[4, 48])));
    // A sum inside stays as it is (its loop order is `reorder`'s).
    assert!(!tiled(&kernel(
        "y[i; j] = x[j; i] * sum{k}_0^3 (x[j; k])",
        &[64, 64]
    )));
}
