//! Machine code shared between kernels whose loop nests differ only in
//! what the code does not read (issue 28): a new batch size of an
//! element-wise or row-wise function gets the code compiled for the last
//! size, with no Cranelift run, and computes what the interpreter does.
//! Tests in their own binary, one at a time (`SERIAL`): they read the
//! process-wide counter and set the process-wide switch.

mod common;

use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType};

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 250.0 - 2.0)
        .collect()
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_new_batch_size_reuses_the_code_and_computes_the_same() -> Result<(), tenjin::Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A row-wise softmax: the parallel loop runs over the batch, the rows
    // are summed inside. Rows of 48, a length no other test here uses: a
    // nest met in another test would not be this one's first.
    let text = "y[b; j] = exp (x[b; j]) / sum{k}_0^47 (exp (x[b; k]))";
    let kernel = |batch: usize| {
        let f = IndexFn::parse(text, &[("x", &[batch, 48][..])])?;
        Ok::<_, tenjin::Error>((jit::compile(&f, DType::F32)?, f))
    };
    let shared = || tenjin::stats().cpu_code_shared;
    let (first, _) = kernel(100)?;
    let before = shared();
    let mut later = Vec::new();
    for batch in [101, 37, 256] {
        later.push((batch, kernel(batch)?));
    }
    // The first size got code of its own (its sizes compiled in), the
    // second compiled the nest's shared code, and every later size runs it.
    assert_eq!(shared() - before, 2, "later batch sizes reuse the code");
    // The first kernel, whose code the others share, is dropped and the
    // cache cleared: the code lives on with the kernels using it.
    drop(first);
    jit::clear();
    for (batch, (k, f)) in &later {
        let x = values(batch * 48, *batch as u64);
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

/// Functions whose planned kernels carry sizes in their bounds, guards and
/// offsets: a sum over the batch (a bias gradient), a whole sum (a loss,
/// blocked when long), rows of length B with their statistics (B is also
/// a stride there, read at run time), a padded window (guards), a concatenation (a guard
/// and an offset at the seam), a mean and its gradient (a float constant
/// from the size), rows' maxima (lanes B apart when rows are short).
type Case = (
    String,
    Vec<(&'static str, Vec<usize>)>,
    Vec<(&'static str, usize)>,
);

fn sized(b: usize) -> Vec<Case> {
    let last = b as i64 - 1;
    let mean = 1.0 / (10 * b) as f64;
    // A function of `x: [B, 10]` alone.
    let over_rows = |text: String| (text, vec![("x", vec![b, 10])], vec![]);
    vec![
        over_rows(format!("f[j] = sum{{b}}_0^{last} x[b; j]")),
        over_rows(format!("f[] = sum{{b}}_0^{last} (sum{{j}}_0^9 x[b; j])")),
        (
            format!("f[r; j] = exp (x[r; j]) / sum{{k}}_0^{last} (exp (x[r; k]))"),
            vec![("x", vec![3, b])],
            vec![],
        ),
        (
            format!("f[t] = sum{{k}}_0^2 (if {{t + k >= 1}} then (if {{t + k <= {b}}} then (x[t + k - 1]) else (0)) else (0))"),
            vec![("x", vec![b])],
            vec![("t", b)],
        ),
        (
            format!("f[t] = if {{t <= {last}}} then (x[t]) else (y[t - {b}] * 2)"),
            vec![("x", vec![b]), ("y", vec![5])],
            vec![("t", b + 5)],
        ),
        // A mean over the batch and its gradient: `1/(10·B)`, a float
        // constant of the function, is read at run time too.
        over_rows(format!("f[] = {mean:?} * sum{{b}}_0^{last} (sum{{j}}_0^9 x[b; j])")),
        over_rows(format!("f[b; j] = {mean:?} * x[b; j]")),
        // The maximum of each of 40 rows of length B: short rows are
        // vectorised across rows, whose lanes are B apart (a run-time
        // stride of the vector loop).
        (
            format!("f[r] = max{{k}}_0^{last} (x[r; k])"),
            vec![("x", vec![40, b])],
            vec![],
        ),
    ]
}

#[test]
fn sums_over_the_batch_share_one_code_and_compute_what_specialised_code_does_bit_for_bit(
) -> Result<(), tenjin::Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sizes = [1usize, 2, 3, 7, 8, 9, 63, 64, 65, 100, 257, 1000];
    let mut shared_from_100 = 0;
    let mut alive = Vec::new();
    for &b in &sizes {
        for (text, shapes, outs) in sized(b) {
            let decls: Vec<(&str, &[usize])> = shapes.iter().map(|(a, s)| (*a, &s[..])).collect();
            let f = IndexFn::parse_with_sizes(&text, &decls, &outs)?;
            let data: Vec<Vec<f32>> = shapes
                .iter()
                .enumerate()
                .map(|(a, (_, s))| values(s.iter().product(), a as u64 + b as u64))
                .collect();
            let inputs: Vec<(&str, &[f32])> = shapes
                .iter()
                .zip(&data)
                .map(|((a, _), d)| (*a, &d[..]))
                .collect();
            let run = |constants: bool| {
                jit::set_run_time_constants(constants);
                jit::clear();
                let before = tenjin::stats().cpu_code_shared;
                let k = jit::compile(&f, DType::F32)?;
                let shared = tenjin::stats().cpu_code_shared - before;
                Ok::<_, tenjin::Error>((k.run_f32(&inputs)?, shared, k))
            };
            let (want, _, _) = run(false)?;
            let (got, shared, kernel) = run(true)?;
            alive.push(kernel); // code lives as long as a kernel uses it
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{text}");
            if b > 100 {
                shared_from_100 += shared;
            }
        }
    }
    // From 65 rows on, a function's every size runs the code of its first
    // (below that, short loops the code unrolls and vector loops' trip
    // classes make their own codes), the softmax over rows of length B
    // too (the stride of `x[r·B + k]`, read at run time); but for the
    // concatenation, whose offset holds the size, compiled in (`y[t − B]`).
    assert_eq!(shared_from_100, 2 * (sized(2).len() as u64 - 1));
    Ok(())
}

#[test]
fn a_kernel_run_often_gets_code_of_its_own_and_computes_the_same() -> Result<(), tenjin::Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    jit::set_run_time_constants(true);
    let f = |b: usize| {
        IndexFn::parse(
            &format!("f[j] = sum{{b}}_0^{} (x[b; j] * x[b; j])", b - 1),
            &[("x", &[b, 7][..])],
        )
    };
    // The first size gets code of its own, the second makes the nest's
    // shared code (long sums, blocked, from 65 rows), the third runs it.
    let _first = jit::compile(&f(200)?, DType::F32)?;
    let _second = jit::compile(&f(201)?, DType::F32)?;
    let before = tenjin::stats();
    let k = jit::compile(&f(300)?, DType::F32)?;
    assert_eq!(tenjin::stats().cpu_code_shared, before.cpu_code_shared + 1);
    let x = values(300 * 7, 3);
    let first = k.run_f32(&[("x", &x)])?;
    for run in 2..=jit::SPECIALISE_AFTER + 3 {
        let again = k.run_f32(&[("x", &x)])?;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&again), bits(&first), "run {run}");
    }
    assert_eq!(
        tenjin::stats().cpu_code_specialised,
        before.cpu_code_specialised + 1,
        "after {} runs the kernel has code of its own",
        jit::SPECIALISE_AFTER
    );
    Ok(())
}

#[test]
fn a_sequence_length_that_varies_compiles_nothing_after_its_first_lengths(
) -> Result<(), tenjin::Error> {
    use tenjin::Tensor;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    jit::set_run_time_constants(true);
    // Causal self-attention over `[2, T, 16]` with a residual, layer
    // norm and a mean loss: `T` is a stride of nearly every kernel.
    let (d, most) = (16, 40);
    let param = |seed| -> Result<Tensor, tenjin::Error> {
        Ok(Tensor::from_vec(values(d * d, seed), &[d, d])?
            .mul_scalar(0.1)?
            .requires_grad())
    };
    let (wq, wk, wv) = (param(1)?, param(2)?, param(3)?);
    let mask: Vec<f32> = (0..most * most)
        .map(|k| if k % most > k / most { -1e9 } else { 0.0 })
        .collect();
    let mask = Tensor::from_vec(mask, &[most, most])?;
    let step = |t: usize| -> Result<(), tenjin::Error> {
        let x = Tensor::from_vec(values(2 * t * d, t as u64), &[2, t, d])?;
        let (q, k, v) = (x.matmul(&wq)?, x.matmul(&wk)?, x.matmul(&wv)?);
        let scores = q
            .matmul(&k.transpose(1, 2)?)?
            .mul_scalar(0.25)?
            .add(&mask.narrow(0, 0, t)?.narrow(1, 0, t)?)?;
        let y = x.add(&scores.softmax(2)?.matmul(&v)?)?;
        let norm = y.layer_norm(1, None, None, 1e-5)?;
        norm.mul(&norm)?.mean()?.backward()
    };
    // Rows of up to 16 elements are vectorised across rows (a size class
    // of the planner's): the lengths from 18 on are one class. The first
    // gets code of its own, the second compiles the shared code.
    step(18)?;
    step(19)?;
    let before = tenjin::stats();
    for t in 20..=most {
        step(t)?;
    }
    let after = tenjin::stats();
    assert_eq!(after.cpu_code_compiled, before.cpu_code_compiled);
    assert!(after.cpu_code_shared > before.cpu_code_shared);
    Ok(())
}

/// One training step of a small MLP with a batch of `b` on `device`:
/// the loss and the gradients, as bits.
fn mlp_step(device: tenjin::Device, b: usize) -> Result<Vec<u64>, tenjin::Error> {
    use tenjin::Tensor;
    let param = |rows: usize, cols: usize, seed: u64| -> Result<Tensor, tenjin::Error> {
        let v = values(rows * cols, seed)
            .iter()
            .map(|&x| 0.3 * x as f64)
            .collect();
        Ok(Tensor::from_vec_f64_on(v, &[rows, cols], device)?
            .to_dtype(DType::F32)?
            .requires_grad())
    };
    let (w1, c1, w2) = (param(12, 16, 1)?, param(1, 16, 2)?, param(16, 3, 3)?);
    let x = values(b * 12, b as u64).iter().map(|&v| v as f64).collect();
    let x = Tensor::from_vec_f64_on(x, &[b, 12], device)?.to_dtype(DType::F32)?;
    let h = x.matmul(&w1)?.add(&c1)?.relu()?;
    let targets: Vec<usize> = (0..b).map(|i| i % 3).collect();
    let loss = h.matmul(&w2)?.cross_entropy(&targets)?;
    loss.backward()?;
    let mut bits = vec![loss.item()?.to_bits()];
    for p in [&w1, &c1, &w2] {
        let g = p.grad().expect("a gradient").to_vec_f64()?;
        bits.extend(g.iter().map(|v| v.to_bits()));
    }
    Ok(bits)
}

/// On a GPU (the simulated one in CI), a new batch size loads no PTX
/// module after the first two sizes: its loop kernels run the module
/// loaded for the second, which reads the sizes at launch; and every
/// step computes, bit for bit, what modules with the sizes compiled in
/// compute.
#[test]
fn on_a_gpu_a_new_batch_size_loads_no_module_and_computes_what_specialised_modules_do(
) -> Result<(), tenjin::Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = common::gpu();
    jit::set_run_time_constants(true);
    // Sizes from 2, as for torch.compile: at a batch of 1 loops and sums
    // fold away, and its kernels are other ops.
    let sizes: Vec<usize> = (2..=24).collect();
    let mut shared = Vec::new();
    let mut after_two = None;
    for &b in &sizes {
        if b == 4 {
            after_two = Some(tenjin::stats());
        }
        shared.push(mlp_step(device, b)?);
    }
    let (before, after) = (after_two.expect("three sizes or more"), tenjin::stats());
    assert_eq!(
        after.ptx_modules_loaded, before.ptx_modules_loaded,
        "batch sizes 4..=24 load no module"
    );
    assert!(after.ptx_modules_shared > before.ptx_modules_shared);
    // A size met often is a steady one: its kernels get modules of their
    // own after `SPECIALISE_AFTER` launches, and compute the same.
    let steady = 7;
    for _ in 0..=jit::SPECIALISE_AFTER {
        assert_eq!(mlp_step(device, steady)?, shared[steady - 2]);
    }
    assert!(tenjin::stats().ptx_modules_specialised > after.ptx_modules_specialised);
    let after = tenjin::stats();
    // Again with every kernel's sizes compiled in: modules of their own.
    jit::set_run_time_constants(false);
    jit::clear();
    let capacity = tenjin::plan_cache_capacity();
    tenjin::set_plan_cache_capacity(1);
    let specialised: Result<Vec<_>, _> = sizes.iter().map(|&b| mlp_step(device, b)).collect();
    tenjin::set_plan_cache_capacity(capacity);
    jit::set_run_time_constants(true);
    let specialised = specialised?;
    assert!(tenjin::stats().ptx_modules_loaded > after.ptx_modules_loaded);
    for ((b, s), o) in sizes.iter().zip(&shared).zip(&specialised) {
        assert_eq!(
            s, o,
            "batch {b}: shared modules and modules of their own differ"
        );
    }
    Ok(())
}

/// In a `jit::dynamic_sizes` scope (tenjin's `mark_dynamic`) sizes are
/// dynamic from their first value: an op's first size compiles the code
/// that reads its sizes, later sizes compile nothing, a size run often
/// keeps that code, and every step computes what code with its sizes
/// compiled in computes, bit for bit.
#[test]
fn in_a_dynamic_sizes_scope_an_op_compiles_once_and_keeps_its_shared_code(
) -> Result<(), tenjin::Error> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cpu = tenjin::Device::Cpu;
    jit::set_run_time_constants(true);
    let sizes: Vec<usize> = (30..=40).collect();
    let (shared, after_first, after_sizes) = {
        let _dynamic = jit::dynamic_sizes();
        let mut shared = vec![mlp_step(cpu, sizes[0])?];
        let after_first = tenjin::stats();
        for &b in &sizes[1..] {
            shared.push(mlp_step(cpu, b)?);
        }
        let after_sizes = tenjin::stats();
        for _ in 0..=jit::SPECIALISE_AFTER {
            assert_eq!(mlp_step(cpu, 35)?, shared[35 - sizes[0]]);
        }
        (shared, after_first, after_sizes)
    };
    let after = tenjin::stats();
    assert_eq!(
        after_sizes.cpu_code_compiled, after_first.cpu_code_compiled,
        "batch sizes 31..=40 compile nothing"
    );
    assert!(after_sizes.cpu_code_shared > after_first.cpu_code_shared);
    assert_eq!(
        after.cpu_code_specialised, after_first.cpu_code_specialised,
        "a size run often keeps its shared code in the scope"
    );
    // The same steps with every kernel's sizes compiled in.
    jit::set_run_time_constants(false);
    jit::clear();
    let capacity = tenjin::plan_cache_capacity();
    tenjin::set_plan_cache_capacity(1);
    let specialised: Result<Vec<_>, _> = sizes.iter().map(|&b| mlp_step(cpu, b)).collect();
    tenjin::set_plan_cache_capacity(capacity);
    jit::set_run_time_constants(true);
    for ((b, s), o) in sizes.iter().zip(&shared).zip(&specialised?) {
        assert_eq!(s, o, "batch {b}: shared code and code of its own differ");
    }
    Ok(())
}
