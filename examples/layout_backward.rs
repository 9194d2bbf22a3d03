//! What the gradient of a layout op costs, against a copy of the same
//! elements: `flatten` and `reshape` of dense data (their gradient is the
//! incoming buffer, reinterpreted), `reshape` of a transposed view (a
//! strided copy forward, so a strided copy back), and `permute` read by a
//! `contiguous` copy. One JSON line per case with the median time in ms of
//! forward + backward (`backward_with` an incoming gradient `G`, the
//! leaf's gradient cleared each time), and the two copies they are held
//! against: `memcpy` of the f32 elements, and tenjin's `contiguous` of a
//! transposed view without a gradient.
//!
//! ```sh
//! TENJIN_NUM_THREADS=1 cargo run --release --example layout_backward
//! cargo run --release --example layout_backward -- smoke   # small, one repetition
//! ```

mod bench_common;

use bench_common::{data, median_ms, report};
use tenjin::{no_grad, Error, Tensor};

/// A layout op applied to the leaf.
type LayoutOp = fn(&Tensor) -> Result<Tensor, Error>;

fn main() -> Result<(), Error> {
    let smoke = std::env::args().any(|a| a == "smoke");
    let (rows, cols) = if smoke { (64, 64) } else { (1024, 1024) };
    let reps = if smoke { 1 } else { 51 };
    let n = rows * cols;
    let size = format!("{rows}x{cols} f32");
    let values = data(n, 1, 1.0);
    let x = Tensor::from_vec(values.clone(), &[rows, cols])?.requires_grad();
    let g_flat = Tensor::from_vec(data(n, 2, 1.0), &[n])?;
    let g_square = g_flat.reshape(&[cols, rows])?;
    let g_wide = g_flat.reshape(&[rows / 2, cols * 2])?;

    let mut dst = vec![0f32; n];
    let memcpy = median_ms(reps, || {
        dst.copy_from_slice(std::hint::black_box(&values));
        std::hint::black_box(&dst);
        Ok(())
    })?;
    report("copy_memcpy", &size, "median_ms", memcpy);
    let xt = Tensor::from_vec(values.clone(), &[rows, cols])?.t()?;
    let copy = median_ms(reps, || no_grad(|| xt.contiguous().map(drop)))?;
    report("copy_contiguous_of_transpose", &size, "median_ms", copy);

    let cases: [(&str, &Tensor, LayoutOp); 4] = [
        ("flatten_fwd_bwd", &g_flat, |x| x.flatten()),
        ("reshape_fwd_bwd", &g_wide, |x| {
            let s = x.shape();
            x.reshape(&[s[0] / 2, s[1] * 2])
        }),
        ("reshape_of_transpose_fwd_bwd", &g_flat, |x| {
            x.t()?.flatten()
        }),
        ("permute_contiguous_fwd_bwd", &g_square, |x| {
            x.permute(&[1, 0])?.contiguous()
        }),
    ];
    for (name, g, op) in cases {
        let ms = median_ms(reps, || {
            x.zero_grad();
            op(&x)?.backward_with(g)
        })?;
        report(name, &size, "median_ms", ms);
    }
    Ok(())
}
