//! Guards of a sum's terms folded into its bounds (`planner::guard_bounds`):
//! zero-padded windows read as loop nests (depthwise convolutions, any
//! padded window a user writes) run over the taps inside, with a vector
//! interior, and compute the reference interpreter's bits in f64 (the
//! terms left out are zeros) and the same bits at 1, 2 and 3 threads in
//! f32, in forward and backward.
//!
//! The thread count is process-wide: every test holds `SERIAL`.

use std::sync::{Mutex, MutexGuard};
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 37 + seed * 11) % 101) as f64 - 50.0) / 17.0)
        .collect()
}

/// A zero-padded 3×3 window over one channel per output channel, with
/// padding `p` and dilation `d`, as its guards (each around the sum over
/// the variable it constrains, where the planner's normalisation puts it).
fn depthwise(p: i64, d: i64, (h, w): (usize, usize)) -> IndexFn {
    let (ho, wo) = (
        (h as i64 + 2 * p - 2 * d) as usize,
        (w as i64 + 2 * p - 2 * d) as usize,
    );
    let src = format!(
        "y[n; c; i; j] = sum{{a}}_0^2 (\
         if {{i + {d}*a - {p} >= 0}} then (if {{i + {d}*a - {p} <= {hl}}} then (sum{{b}}_0^2 (\
         if {{j + {d}*b - {p} >= 0}} then (if {{j + {d}*b - {p} <= {wl}}} then (\
         x[n; c; i + {d}*a - {p}; j + {d}*b - {p}] * k[c; a; b]) else (0)) else (0))) \
         else (0)) else (0))",
        hl = h - 1,
        wl = w - 1
    );
    IndexFn::parse_with_sizes(
        &src,
        &[("x", &[2, 3, h, w][..]), ("k", &[3, 3, 3][..])],
        &[("n", 2), ("c", 3), ("i", ho), ("j", wo)],
    )
    .unwrap()
}

#[test]
fn padded_windows_equal_the_interpreter_bit_for_bit_in_f64() {
    let _s = serial();
    for (p, d, hw) in [
        (1, 1, (9, 13)),
        (2, 1, (5, 17)),
        (2, 2, (11, 7)),
        (1, 1, (1, 1)),
    ] {
        let f = depthwise(p, d, hw);
        let x = values(2 * 3 * hw.0 * hw.1, 1);
        let k = values(27, 2);
        let inputs = [("x", &x[..]), ("k", &k[..])];
        let want = f.eval_f64(&inputs).unwrap();
        let kernel = jit::compile(&f, DType::F64).unwrap();
        let got = kernel.run_f64(&inputs).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "p {p} d {d} {hw:?}");
        assert!(
            !kernel.kernel().to_string().contains(" if "),
            "{}",
            kernel.kernel()
        );
    }
}

/// Every term inside the window is −0: the sum is +0 with or without the
/// guarded zeros, as the interpreter's.
#[test]
fn signed_zeros_sum_as_in_the_interpreter() {
    let _s = serial();
    let f = depthwise(1, 1, (4, 4));
    let x = vec![-0.0; 2 * 3 * 16];
    let k = vec![1.0; 27];
    let inputs = [("x", &x[..]), ("k", &k[..])];
    let want = f.eval_f64(&inputs).unwrap();
    let got = jit::compile(&f, DType::F64)
        .unwrap()
        .run_f64(&inputs)
        .unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn the_interior_runs_as_vector_code_and_threads_do_not_change_a_bit() {
    let _s = serial();
    let f = depthwise(1, 1, (12, 40));
    let kernel = jit::compile(&f, DType::F32).unwrap();
    assert!(kernel.is_vectorized(), "{}", kernel.kernel());
    let x = Tensor::from_vec_f64(values(2 * 3 * 12 * 40, 3), &[2, 3, 12, 40])
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .requires_grad();
    let w = Tensor::from_vec_f64(values(27, 4), &[3, 1, 3, 3])
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .requires_grad();
    let mut runs = Vec::new();
    for threads in 1..=3 {
        jit::set_num_threads(threads);
        x.zero_grad();
        w.zero_grad();
        let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 3).unwrap();
        let g = Tensor::from_vec_f64(values(y.numel(), 5), y.shape())
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        y.backward_with(&g).unwrap();
        let bits = |t: &Tensor| {
            t.to_vec()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        runs.push((bits(&y), bits(&x.grad().unwrap()), bits(&w.grad().unwrap())));
    }
    jit::set_num_threads(2);
    assert!(runs.iter().all(|r| *r == runs[0]));
}
