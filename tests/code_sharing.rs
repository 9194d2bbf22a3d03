//! Machine code shared between kernels whose loop nests differ only in
//! what the code does not read (issue 28): a new batch size of an
//! element-wise or row-wise function gets the code compiled for the last
//! size, with no Cranelift run, and computes what the interpreter does.
//! One test in its own binary: it reads the process-wide counter.

use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 250.0 - 2.0)
        .collect()
}

#[test]
fn a_new_batch_size_reuses_the_code_and_computes_the_same() -> Result<(), tenjin::Error> {
    // A row-wise softmax: the parallel loop runs over the batch, the rows
    // are summed inside.
    let text = "y[b; j] = exp (x[b; j]) / sum{k}_0^63 (exp (x[b; k]))";
    let kernel = |batch: usize| {
        let f = IndexFn::parse(text, &[("x", &[batch, 64][..])])?;
        Ok::<_, tenjin::Error>((jit::compile(&f, DType::F32)?, f))
    };
    let shared = || tenjin::stats().cpu_code_shared;
    let (first, _) = kernel(100)?;
    let before = shared();
    let mut later = Vec::new();
    for batch in [101, 37, 256] {
        later.push((batch, kernel(batch)?));
    }
    assert_eq!(
        shared() - before,
        3,
        "every later batch size reuses the code"
    );
    // The first kernel, whose code the others share, is dropped and the
    // cache cleared: the code lives on with the kernels using it.
    drop(first);
    jit::clear();
    for (batch, (k, f)) in &later {
        let x = values(batch * 64, *batch as u64);
        let got = k.run_f32(&[("x", &x)])?;
        let want = f.eval_f64(&[("x", &x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>())])?;
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1.0),
                "batch {batch}: {g} against {w}"
            );
        }
    }
    // A nest whose inner vector loop crosses the unrolling threshold is
    // another nest: no sharing across that difference.
    let narrow = |n: usize| IndexFn::parse("y[b; j] = tanh x[b; j]", &[("x", &[4, n][..])]);
    jit::compile(&narrow(8)?, DType::F32)?;
    let before = shared();
    jit::compile(&narrow(4096)?, DType::F32)?;
    assert_eq!(shared(), before, "a vector loop's trip bound is in the key");
    Ok(())
}
