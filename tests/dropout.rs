//! Dropout and the in-kernel random stream: the same values as the
//! reference definition (`tenjin::symbolic::random`) on the interpreter,
//! the JIT (scalar and f32x4 code, 1–3 threads) and the simulated GPU;
//! dropout's statistics, its derivative (the mask drawn again, checked
//! against central differences in f64), eval mode, NaN, errors, and the
//! mask never stored in backward.

use tenjin::symbolic::random::{call_key, key, uniform, words};
use tenjin::symbolic::IndexFn;
use tenjin::{jit, DType, Device, Generator, Tensor};

/// The tests of this file one at a time: one changes the thread count.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Element `e` of the `call`-th draw of a generator seeded `seed`.
fn reference(seed: u64, call: u64, e: usize) -> f64 {
    uniform(call_key(seed, call), e as i64)
}

#[test]
fn an_index_function_draws_the_reference_values_on_interpreter_and_jit() {
    let _s = serial();
    // Rows of 37 (a vectorised loop with a scalar tail), a counter with a
    // stride and an offset, key words given as numbers.
    let f = IndexFn::parse(
        "f[i; j] = random(k[0], k[1], k[2]; 3*i*37 + j + 5) * x[i; j]",
        &[("k", &[3]), ("x", &[6, 37])],
    )
    .unwrap();
    let k = words(0xdead_beef_1234_5678);
    let x: Vec<f64> = (0..6 * 37).map(|e| 1.0 + e as f64 / 100.0).collect();
    let want: Vec<f64> = (0..6 * 37)
        .map(|e| {
            let (i, j) = (e / 37, e % 37);
            uniform(key(k), (3 * i * 37 + j + 5) as i64) * x[e]
        })
        .collect();
    let interp = f.eval_f64(&[("k", &k), ("x", &x)]).unwrap();
    assert_eq!(interp, want);
    let k64 = jit::compile(&f, DType::F64).unwrap();
    assert_eq!(k64.run_f64(&[("k", &k), ("x", &x)]).unwrap(), want);
    let k32 = jit::compile(&f, DType::F32).unwrap();
    let (kf, xf): (Vec<f32>, Vec<f32>) = (
        k.iter().map(|&v| v as f32).collect(),
        x.iter().map(|&v| v as f32).collect(),
    );
    let want32 = f.eval_f32(&[("k", &kf), ("x", &xf)]).unwrap();
    assert!(k32.is_vectorized(), "the f32x4 code draws lane by lane");
    for threads in 1..=3 {
        tenjin::jit::set_num_threads(threads);
        assert_eq!(k32.run_f32(&[("k", &kf), ("x", &xf)]).unwrap(), want32);
    }
    tenjin::jit::set_num_threads(1);
    // The f32 draws are the same numbers as the f64 ones.
    let u32s = f
        .eval_f32(&[("k", &kf), ("x", &vec![1.0f32; 6 * 37])])
        .unwrap();
    let u64s = f.eval_f64(&[("k", &k), ("x", &vec![1.0; 6 * 37])]).unwrap();
    assert!(u32s.iter().zip(&u64s).all(|(a, b)| *a as f64 == *b));
}

#[test]
fn rand_stream_is_the_reference_at_every_dtype_and_on_the_simulated_gpu() {
    let _s = serial();
    let want: Vec<f64> = (0..3 * 129).map(|e| reference(11, 0, e)).collect();
    for dtype in [DType::F32, DType::F64] {
        let got = Tensor::rand_stream(&[3, 129], dtype, Device::Cpu, &mut Generator::new(11))
            .unwrap()
            .to_vec_f64()
            .unwrap();
        assert_eq!(got, want, "{dtype:?}");
    }
    tenjin::cuda::simulate().unwrap();
    for dtype in [DType::F32, DType::F64] {
        let got = Tensor::rand_stream(&[3, 129], dtype, Device::Cuda(0), &mut Generator::new(11))
            .unwrap()
            .to_vec_f64()
            .unwrap();
        assert_eq!(got, want, "{dtype:?} on the simulated GPU");
    }
    // The second call of a generator is another stream.
    let mut g = Generator::new(11);
    let _ = Tensor::rand_stream(&[4], DType::F32, Device::Cpu, &mut g).unwrap();
    let second = Tensor::rand_stream(&[4], DType::F32, Device::Cpu, &mut g).unwrap();
    let want: Vec<f64> = (0..4).map(|e| reference(11, 1, e)).collect();
    assert_eq!(second.to_vec_f64().unwrap(), want);
    assert_eq!(g.calls(), 2);
}

#[test]
fn dropout_keeps_one_minus_p_scaled_and_is_reproducible() {
    let _s = serial();
    let n = 200_000;
    let x = Tensor::ones(&[n / 100, 100], DType::F32).unwrap();
    for p in [0.1, 0.5, 0.9] {
        let y = x
            .dropout_with(p, &mut Generator::new(5))
            .unwrap()
            .to_vec()
            .unwrap();
        let scale = (1.0 / (1.0 - p)) as f32;
        assert!(y.iter().all(|&v| v == 0.0 || v == scale), "p = {p}");
        let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
        // Five standard deviations of a binomial proportion.
        let sd = (p * (1.0 - p) / n as f64).sqrt();
        assert!((kept - (1.0 - p)).abs() < 5.0 * sd, "p = {p}: kept {kept}");
        // The mean is preserved.
        let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        assert!(
            (mean - 1.0).abs() < 5.0 * sd / (1.0 - p),
            "p = {p}: mean {mean}"
        );
        // Exactly the reference mask.
        let threshold = (p * (1u64 << 24) as f64).ceil() / (1u64 << 24) as f64;
        for (e, v) in y.iter().enumerate().step_by(997) {
            assert_eq!(*v != 0.0, reference(5, 0, e) >= threshold, "element {e}");
        }
    }
    // The default generator: reseeding replays, successive calls differ.
    tenjin::manual_seed(42);
    let a = x.dropout(0.5, true).unwrap().to_vec().unwrap();
    let b = x.dropout(0.5, true).unwrap().to_vec().unwrap();
    tenjin::manual_seed(42);
    assert_eq!(x.dropout(0.5, true).unwrap().to_vec().unwrap(), a);
    assert_ne!(a, b);
    assert_eq!(tenjin::default_generator().calls(), 1);
    // p = 0 keeps everything, p = 1 drops everything, eval mode is the input.
    assert_eq!(
        x.dropout(0.0, true).unwrap().to_vec().unwrap(),
        vec![1.0; n]
    );
    assert_eq!(
        x.dropout(1.0, true).unwrap().to_vec().unwrap(),
        vec![0.0; n]
    );
    assert_eq!(
        x.dropout(0.7, false).unwrap().to_vec().unwrap(),
        vec![1.0; n]
    );
}

#[test]
fn the_same_mask_on_every_backend_and_thread_count() {
    let _s = serial();
    let x = Tensor::randn(&[64, 257], DType::F32, 1).unwrap();
    let want = x
        .dropout_with(0.3, &mut Generator::new(9))
        .unwrap()
        .to_vec()
        .unwrap();
    for threads in 2..=3 {
        tenjin::jit::set_num_threads(threads);
        let got = x.dropout_with(0.3, &mut Generator::new(9)).unwrap();
        assert_eq!(got.to_vec().unwrap(), want, "{threads} threads");
    }
    tenjin::jit::set_num_threads(1);
    tenjin::cuda::simulate().unwrap();
    let xg = x.to_device(Device::Cuda(0)).unwrap();
    let got = xg.dropout_with(0.3, &mut Generator::new(9)).unwrap();
    assert_eq!(got.to_vec().unwrap(), want, "the simulated GPU");
    // Another shape: rows of 256.
    let wide = Tensor::randn(&[8, 256], DType::F32, 2).unwrap();
    let cpu = wide
        .dropout_with(0.3, &mut Generator::new(4))
        .unwrap()
        .to_vec()
        .unwrap();
    let gpu = wide
        .to_device(Device::Cuda(0))
        .unwrap()
        .dropout_with(0.3, &mut Generator::new(4))
        .unwrap();
    assert_eq!(
        gpu.to_vec().unwrap(),
        cpu,
        "rows of 256 on the simulated GPU"
    );
    // f64 draws the same mask.
    let x64 = x.to_dtype(DType::F64).unwrap();
    let m64: Vec<bool> = x64
        .dropout_with(0.3, &mut Generator::new(9))
        .unwrap()
        .to_vec_f64()
        .unwrap()
        .iter()
        .map(|&v| v != 0.0)
        .collect();
    let m32: Vec<bool> = want.iter().map(|&v| v != 0.0).collect();
    assert_eq!(m64, m32);
}

#[test]
fn the_derivative_draws_the_mask_again() {
    let _s = serial();
    let shape = [7, 33];
    let x0 = Tensor::randn(&shape, DType::F64, 3).unwrap();
    let w = Tensor::randn(&shape, DType::F64, 4).unwrap();
    // Against central differences: the closure draws the same key each
    // time.
    let f = |t: &[Tensor]| -> Result<Tensor, tenjin::Error> {
        t[0].tanh()?
            .dropout_with(0.4, &mut Generator::new(17))?
            .mul(&t[1])
    };
    let report = tenjin::gradcheck(f, &[x0.clone(), w.clone()]).unwrap();
    assert!(report.max_abs_error < 1e-8, "{report:?}");
    // Exactly mask · scale · upstream, on the CPU and the simulated GPU.
    let mask: Vec<f64> = Tensor::ones(&shape, DType::F64)
        .unwrap()
        .dropout_with(0.4, &mut Generator::new(17))
        .unwrap()
        .to_vec_f64()
        .unwrap();
    for device in [Device::Cpu, Device::Cuda(0)] {
        if device != Device::Cpu {
            tenjin::cuda::simulate().unwrap();
        }
        let x = x0.to_device(device).unwrap().requires_grad();
        let y = x.dropout_with(0.4, &mut Generator::new(17)).unwrap();
        y.mul(&w.to_device(device).unwrap())
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let g = x.grad().unwrap().to_vec_f64().unwrap();
        let wv = w.to_vec_f64().unwrap();
        for e in 0..g.len() {
            assert_eq!(g[e], mask[e] * wv[e], "{device:?} element {e}");
        }
    }
}

#[test]
fn nan_propagates_and_bad_probabilities_are_errors() {
    let _s = serial();
    let x = Tensor::from_vec(vec![f32::NAN; 64], &[64]).unwrap();
    let y = x
        .dropout_with(0.5, &mut Generator::new(1))
        .unwrap()
        .to_vec()
        .unwrap();
    assert!(
        y.iter().all(|v| v.is_nan()),
        "a dropped NaN stays NaN, as in PyTorch"
    );
    for p in [-0.1, 1.1, f64::NAN] {
        let err = x.dropout(p, true).unwrap_err().to_string();
        assert!(err.contains("dropout") && err.contains("[0, 1]"), "{err}");
    }
    let ints = Tensor::arange(4, DType::I64).unwrap();
    assert!(ints.dropout(0.5, true).is_err());
}

#[test]
fn backward_stores_no_mask_in_either_memory_mode() {
    use tenjin::alloc::{self, AllocMode};
    let _s = serial();
    let dev = tenjin::default_device();
    let x = Tensor::randn(&[256, 256], DType::F32, 2).unwrap();
    let w = Tensor::randn(&[256, 256], DType::F32, 3).unwrap();
    // Bytes held after the forward pass (what backward will read) and the
    // peak of the backward pass, through `layer`.
    let measure = |layer: &dyn Fn(&Tensor) -> Tensor| -> (usize, usize) {
        let xl = x.clone().requires_grad();
        let loss = || layer(&xl).mul(&w).unwrap().sum().unwrap();
        loss().backward().unwrap(); // compiles
        alloc::empty_cache_for(dev);
        let before = alloc::stats_for(dev).bytes_in_use;
        let l = loss();
        let held = alloc::stats_for(dev).bytes_in_use - before;
        alloc::reset_peak_for(dev);
        l.backward().unwrap();
        (held, alloc::stats_for(dev).peak_in_use - before)
    };
    for mode in [AllocMode::RuntimeEfficient, AllocMode::MemoryEfficient] {
        alloc::set_mode_for(dev, mode);
        let scaled = measure(&|t| t.mul_scalar(2.0).unwrap());
        let dropped = measure(&|t| t.dropout_with(0.5, &mut Generator::new(1)).unwrap());
        // A stored mask would be another 256 KiB; the key is 3 elements.
        assert!(
            dropped.0 <= scaled.0 + 4096 && dropped.1 <= scaled.1 + 4096,
            "{mode:?}: dropout holds {} B after forward and peaks at {} B in backward, \
             a scaling {} B and {} B",
            dropped.0,
            dropped.1,
            scaled.0,
            scaled.1
        );
    }
    alloc::set_mode_for(dev, AllocMode::RuntimeEfficient);
}
