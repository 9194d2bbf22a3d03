//! Half-precision tensors (`BF16`, `F16`) on the simulated GPU against the
//! same tensors on the CPU, bit for bit (a NaN only as a NaN): conversions
//! to a half from f32, f64, i32, i64 and the other half (ties to even,
//! values beside ties, the largest finite values and overflow to ±inf,
//! f16 subnormals and underflow to ±0, ±inf, NaN; f64 and integers
//! rounded to f32 first, as PyTorch does), conversions of every one of the
//! 65536 values of each half to every other type, fills, and a gradient
//! accumulated into a half leaf (the device's `add_assign`).
//!
//! These run the GPU backend's builtin modules (`gpu::ptx::builtin`);
//! `src/gpu/sim/tests.rs` runs the same modules for every architecture.
//! `TENJIN_GPU_TESTS=cuda` runs this file on a real GPU (see `gpu`).

mod common;

use common::gpu;
use tenjin::{bf16, f16, DType, Device, Tensor};

const HALVES: [DType; 2] = [DType::BF16, DType::F16];

/// Held by every test of this file: two of them count the device's
/// kernels and GEMMs (`tenjin::stats()`, process-wide), which the others
/// would add to.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The elements' bits (an integer's value), with whether each is a NaN.
fn bits(t: &Tensor) -> Vec<(u64, bool)> {
    match t.dtype() {
        DType::BF16 => t
            .to_vec_bf16()
            .unwrap()
            .iter()
            .map(|x| (u64::from(x.to_bits()), x.is_nan()))
            .collect(),
        DType::F16 => t
            .to_vec_f16()
            .unwrap()
            .iter()
            .map(|x| (u64::from(x.to_bits()), x.is_nan()))
            .collect(),
        DType::F32 => t
            .to_vec()
            .unwrap()
            .iter()
            .map(|x| (u64::from(x.to_bits()), x.is_nan()))
            .collect(),
        DType::F64 => t
            .to_vec_f64()
            .unwrap()
            .iter()
            .map(|x| (x.to_bits(), x.is_nan()))
            .collect(),
        _ => t
            .to_vec_i64()
            .unwrap()
            .iter()
            .map(|&x| (x as u64, false))
            .collect(),
    }
}

/// `device` (on the GPU) holds `cpu`'s elements bit for bit, a NaN only
/// as a NaN; `input` names the failing element's input.
fn same(device: &Tensor, cpu: &Tensor, input: &[(u64, bool)], what: &str) {
    assert_eq!(device.device(), gpu(), "{what}");
    assert_eq!(cpu.device(), Device::Cpu, "{what}");
    assert_eq!(device.dtype(), cpu.dtype(), "{what}");
    let (d, c) = (bits(device), bits(cpu));
    assert_eq!(d.len(), c.len(), "{what}");
    for (k, (d, c)) in d.iter().zip(&c).enumerate() {
        assert!(
            d.0 == c.0 || (d.1 && c.1),
            "{what}: element {k} (input bits {:#x}): {:#x} on the device, {:#x} on the CPU",
            input.get(k).map_or(0, |x| x.0),
            d.0,
            c.0
        );
    }
}

/// f32 values at the edges of both halves' rounding: signed zeros; ties
/// (half an ulp: bit 15 of an f32 for bf16, bit 12 for f16) after an even
/// and an odd significand, and the f32 values beside them; the largest
/// finite values, the ties above them (to inf) and beyond; f16's
/// subnormals, their ties and values that underflow to ±0; an f32
/// subnormal (a bf16 subnormal); ±inf and NaNs.
fn f32_cases() -> Vec<f32> {
    let mut bits: Vec<u32> = vec![
        0x0000_0000, // +0
        0x3F80_0000, // 1
        0x3F80_8000, // 1 + 2^-8: a bf16 tie to even (1)
        0x3F81_8000, // 1 + 3·2^-8: a bf16 tie to even (1 + 2^-6)
        0x3F80_1000, // 1 + 2^-11: an f16 tie to even (1)
        0x3F80_3000, // 1 + 3·2^-11: an f16 tie to even (1 + 2^-9)
        0x477F_E000, // 65504, f16's largest finite
        0x477F_EFFF, // just below the tie above it: 65504
        0x477F_F000, // 65520, the tie: inf
        0x4780_0000, // 65536
        0x7F7F_0000, // bf16's largest finite
        0x7F7F_7FFF, // just below the tie above it
        0x7F7F_8000, // the tie: inf
        0x7F7F_FFFF, // f32::MAX
        0x3380_0000, // 2^-24, f16's least subnormal
        0x3300_0000, // 2^-25, a tie with 0: +0
        0x3300_0001, // just above it: 2^-24
        0x33C0_0000, // 3·2^-25, a tie to even: 2^-23
        0x387F_F000, // just below 2^-14: rounds up to f16's least normal
        0x3280_0000, // 2^-26: +0
        0x322B_CC77, // 1e-8: +0
        0x0000_0001, // an f32 subnormal
        0x0040_8000, // an f32 (and bf16) subnormal tie
        0x7F80_0000, // inf
        0x7FC0_0000, // NaN
        0x7F80_0001, // a signalling NaN
        0x4640_E400, // 12345
        0x501502F9,  // 1e10
    ];
    // Beside the ties.
    for tie in [0x3F80_8000u32, 0x3F81_8000, 0x3F80_1000, 0x3F80_3000] {
        bits.extend([tie - 1, tie + 1]);
    }
    let n = bits.len();
    for k in 0..n {
        bits.push(bits[k] ^ 0x8000_0000);
    }
    bits.into_iter().map(f32::from_bits).collect()
}

/// f64 values: the f32 cases, values an f32 rounds onto a half's tie
/// (then to even, where one rounding would go up), beyond f32's range,
/// and below its least subnormal.
fn f64_cases() -> Vec<f64> {
    let mut v: Vec<f64> = f32_cases().into_iter().map(f64::from).collect();
    let tiny = 2f64.powi(-40);
    for tie in [1.0 + 2f64.powi(-8), 1.0 + 2f64.powi(-11)] {
        v.extend([tie + tie * tiny, -(tie + tie * tiny), tie - tie * tiny]);
    }
    v.extend([65519.999999, 1e300, -1e300, 1e-300, 5e-324, f64::NAN]);
    v
}

/// Integers: ties of both halves (257, 2049), f16's overflow (65520),
/// values an f32 rounds onto a bf16 tie (2^24 + 2^16 + 1), extremes.
fn i64_cases() -> Vec<i64> {
    let mut v = vec![
        0i64,
        1,
        257,
        259,
        2049,
        2051,
        65504,
        65519,
        65520,
        70000,
        (1 << 24) + 1,
        (1 << 24) + (1 << 16) + 1,
        i32::MAX as i64,
        (1 << 40) + (1 << 32) + 1,
        i64::MAX,
    ];
    let n = v.len();
    for k in 0..n {
        v.push(-v[k]);
    }
    v.extend([i32::MIN as i64, i64::MIN]);
    v
}

/// Every value of `half`, as a tensor (on the CPU).
fn every(half: DType) -> Tensor {
    let n = 1 << 16;
    match half {
        DType::BF16 => Tensor::from_vec_bf16((0..=u16::MAX).map(bf16::from_bits).collect(), &[n]),
        _ => Tensor::from_vec_f16((0..=u16::MAX).map(f16::from_bits).collect(), &[n]),
    }
    .unwrap()
}

#[test]
fn conversions_to_halves_on_the_device_match_the_cpu() {
    let _serial = serial();
    let floats = f32_cases();
    let doubles = f64_cases();
    let ints = i64_cases();
    let sources = [
        Tensor::from_vec(floats.clone(), &[floats.len()]).unwrap(),
        Tensor::from_vec_f64(doubles.clone(), &[doubles.len()]).unwrap(),
        Tensor::from_vec_i32(ints.iter().map(|&x| x as i32).collect(), &[ints.len()]).unwrap(),
        Tensor::from_vec_i64(ints.clone(), &[ints.len()]).unwrap(),
        every(DType::BF16),
        every(DType::F16),
    ];
    for src in &sources {
        let input = bits(src);
        let on_device = src.to_device(gpu()).unwrap();
        for half in HALVES {
            let what = format!("{:?} -> {half:?}", src.dtype());
            let cpu = src.to_dtype(half).unwrap();
            let device = on_device.to_dtype(half).unwrap();
            same(&device, &cpu, &input, &what);
        }
    }
}

#[test]
fn conversions_from_halves_on_the_device_match_the_cpu() {
    let _serial = serial();
    for half in HALVES {
        let src = every(half);
        let input = bits(&src);
        let on_device = src.to_device(gpu()).unwrap();
        for to in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let what = format!("{half:?} -> {to:?}");
            same(
                &on_device.to_dtype(to).unwrap(),
                &src.to_dtype(to).unwrap(),
                &input,
                &what,
            );
        }
    }
}

#[test]
fn fills_on_the_device_match_the_cpu() {
    let _serial = serial();
    for half in HALVES {
        for value in f64_cases() {
            let what = format!("{half:?} full {value:e}");
            let device = Tensor::full_on(&[67], value, half, gpu()).unwrap();
            let cpu = Tensor::full_on(&[67], value, half, Device::Cpu).unwrap();
            same(&device, &cpu, &[], &what);
        }
        let zeros = Tensor::zeros_on(&[5], half, gpu()).unwrap();
        assert!(bits(&zeros).iter().all(|&(b, _)| b == 0), "{half:?} zeros");
    }
}

/// A half leaf's gradient, accumulated over two backward passes (the
/// second added into the first on the device), is the CPU's.
#[test]
fn gradients_accumulate_into_half_leaves_as_on_the_cpu() {
    let _serial = serial();
    for half in HALVES {
        let values: Vec<f32> = (0..40).map(|k| (k as f32 - 19.5) * 0.37).collect();
        let (a, b): (Vec<f32>, Vec<f32>) = (0..40)
            .map(|k| (1.0 + k as f32 / 256.0, 1e-3 * (k as f32 + 1.0) / 3.0))
            .unzip();
        let grad = |device: Device| -> Tensor {
            let on = |v: &[f32]| {
                Tensor::from_vec(v.to_vec(), &[v.len()])
                    .unwrap()
                    .to_dtype(half)
                    .unwrap()
                    .to_device(device)
                    .unwrap()
            };
            let x = on(&values).requires_grad();
            for c in [on(&a), on(&b)] {
                x.mul(&c).unwrap().sum().unwrap().backward().unwrap();
            }
            x.grad().unwrap()
        };
        let (device, cpu) = (grad(gpu()), grad(Device::Cpu));
        assert_eq!(device.dtype(), half);
        same(
            &device,
            &cpu,
            &[],
            &format!("{half:?} accumulated gradient"),
        );
    }
}

/// A product of half tensors, and the products of its gradients, run on
/// the tensor cores (cuBLAS's `CUBLAS_COMPUTE_32F_FAST_16BF`/`_16F` over
/// the f32 values, which the simulated cuBLAS rounds to the half type as
/// the cores do): the calls are counted, and each value is within the
/// half type's rounding of the f64 product of the same half values.
#[test]
fn half_products_run_on_the_tensor_cores() {
    let _serial = serial();
    let (m, k, n) = (37, 64, 29);
    let values = |len: usize, seed: u64| -> Vec<f64> {
        (0..len)
            .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 500.0 - 1.0) * 1.7)
            .collect()
    };
    for half in HALVES {
        let eps = if half == DType::BF16 {
            2f64.powi(-8)
        } else {
            2f64.powi(-11)
        };
        let on = |v: &[f64], shape: &[usize]| -> Tensor {
            Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), shape)
                .unwrap()
                .to_dtype(half)
                .unwrap()
                .to_device(gpu())
                .unwrap()
        };
        let (a, b, w) = (
            on(&values(m * k, 1), &[m, k]).requires_grad(),
            on(&values(k * n, 2), &[k, n]).requires_grad(),
            on(&values(m * n, 3), &[m, n]),
        );
        let host = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec_f64().unwrap();
        let before = tenjin::stats().cublas_half_calls;
        let y = a.matmul(&b).unwrap();
        y.mul(&w).unwrap().sum().unwrap().backward().unwrap();
        let calls = tenjin::stats().cublas_half_calls - before;
        assert!(
            calls >= 3,
            "{half:?}: {calls} half GEMMs, not the product and both gradients"
        );
        assert_eq!(y.dtype(), half);
        // y = a·b, dA = w·bᵀ, dB = aᵀ·w: each against its f64 product.
        let (av, bv, wv) = (host(&a), host(&b), host(&w));
        let check = |what: &str,
                     got: &[f64],
                     rows,
                     cols,
                     inner,
                     term: &dyn Fn(usize, usize, usize) -> f64| {
            assert_products(
                &format!("{half:?} {what}"),
                eps,
                got,
                [rows, cols, inner],
                term,
            )
        };
        check("a·b", &host(&y), m, n, k, &|i, j, l| {
            av[i * k + l] * bv[l * n + j]
        });
        check("dA", &host(&a.grad().unwrap()), m, k, n, &|i, j, l| {
            wv[i * n + l] * bv[j * n + l]
        });
        check("dB", &host(&b.grad().unwrap()), k, n, m, &|i, j, l| {
            av[l * k + i] * wv[l * n + j]
        });
    }
}

/// Each element `[i, j]` of `got` (`rows × cols`, row-major) is the sum
/// over `l < inner` of `term(i, j, l)`, within `eps` of its magnitude (the
/// rounding of the result to a half type) plus f32 sums' error.
fn assert_products(
    what: &str,
    eps: f64,
    got: &[f64],
    [rows, cols, inner]: [usize; 3],
    term: &dyn Fn(usize, usize, usize) -> f64,
) {
    for i in 0..rows {
        for j in 0..cols {
            let (exact, size): (f64, f64) = (0..inner)
                .map(|l| term(i, j, l))
                .fold((0.0, 0.0), |(s, z), t| (s + t, z + t.abs()));
            let g = got[i * cols + j];
            assert!(
                (g - exact).abs() <= eps * exact.abs() + 1e-5 * size,
                "{what}[{i}, {j}]: {g} against {exact}"
            );
        }
    }
}

/// Normal values of `shape` rounded to `half`, on the GPU.
fn random_half(shape: &[usize], seed: u64, half: DType) -> Tensor {
    Tensor::randn(shape, DType::F32, seed)
        .unwrap()
        .to_dtype(half)
        .unwrap()
        .to_device(gpu())
        .unwrap()
}

/// A product of half tensors reads their buffers: their widenings to
/// f32 are deferred and never run, cuBLAS multiplies the half values (one
/// loop kernel, the result's rounding, besides the GEMM), and a gradient
/// that is f32 meets a saved half operand by the smaller of the two being
/// converted; the values are those checked against f64 above.
#[test]
fn a_product_of_half_tensors_reads_their_half_buffers() {
    let _serial = serial();
    let (m, k, n) = (24, 40, 16);
    for half in HALVES {
        let (a, b) = (
            random_half(&[m, k], 31, half).requires_grad(),
            random_half(&[k, n], 32, half).requires_grad(),
        );
        // (The widenings are deferred under fusion, a GPU's default.)
        let fusion = tenjin::fusion(gpu());
        tenjin::set_fusion(gpu(), true);
        let before = tenjin::stats();
        let y = a.matmul(&b).unwrap();
        y.realize().unwrap();
        let after = tenjin::stats();
        tenjin::set_fusion(gpu(), fusion);
        assert_eq!(
            after.cublas_half_calls - before.cublas_half_calls,
            1,
            "{half:?}"
        );
        assert_eq!(
            after.ptx_launches - before.ptx_launches,
            1,
            "{half:?}: the product's operands widened before it"
        );
        // Both gradients: each a product of the f32 incoming gradient and
        // a saved half operand.
        y.to_dtype(DType::F32)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let (da, db) = (a.grad().unwrap(), b.grad().unwrap());
        let ones = vec![1.0f64; m * n];
        let host = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec_f64().unwrap();
        let (av, bv) = (host(&a), host(&b));
        let eps = if half == DType::BF16 {
            2f64.powi(-8)
        } else {
            2f64.powi(-11)
        };
        assert_products(
            &format!("{half:?} dA"),
            eps,
            &host(&da),
            [m, k, n],
            &|r, c, j| ones[r * n + j] * bv[c * n + j],
        );
        assert_products(
            &format!("{half:?} dB"),
            eps,
            &host(&db),
            [k, n, m],
            &|r, c, l| av[l * k + r] * ones[l * n + c],
        );
    }
}

/// A half product over f32 operands may read half copies of them (cuBLAS's
/// half GEMM over them, `tenjin::cuda::set_half_copies`): the same
/// products of the same values summed in f32, bit for bit on the
/// simulated device (within one rounding to the half type on a GPU),
/// forward and both gradients, with two rounding launches before each
/// product.
#[test]
fn half_products_over_half_copies_are_those_over_f32_operands() {
    use tenjin::cuda::{set_half_copies, HalfCopies};
    let _serial = serial();
    let (m, k, n) = (37, 64, 29);
    for half in HALVES {
        let on = |shape: &[usize], seed: u64| random_half(shape, seed, half).requires_grad();
        let (a, b, w) = (on(&[m, k], 11), on(&[k, n], 12), on(&[m, n], 13));
        // Without fusion every widening runs: the products' operands are
        // f32 buffers (with it they are the half tensors' own buffers, the
        // test above).
        let fusion = tenjin::fusion(gpu());
        let run = |when: HalfCopies| {
            tenjin::set_fusion(gpu(), false);
            set_half_copies(when);
            a.zero_grad();
            b.zero_grad();
            let before = tenjin::stats();
            let y = a.matmul(&b).unwrap();
            y.mul(&w).unwrap().sum().unwrap().backward().unwrap();
            let after = tenjin::stats();
            set_half_copies(HalfCopies::WherePaying);
            tenjin::set_fusion(gpu(), fusion);
            let values = [y, a.grad().unwrap(), b.grad().unwrap()];
            let launches = after.ptx_launches - before.ptx_launches;
            (
                values,
                launches,
                after.cublas_half_calls - before.cublas_half_calls,
            )
        };
        // (The first run leaves gradients for `zero_grad` to clear.)
        run(HalfCopies::Never);
        let (plain, plain_launches, calls) = run(HalfCopies::Never);
        let (copied, copied_launches, copied_calls) = run(HalfCopies::Always);
        for (p, c) in plain.iter().zip(&copied) {
            if tenjin::cuda::is_simulated() {
                assert_eq!(bits(p), bits(c), "{half:?}");
            } else {
                // Other kernels: the f32 sums in another order, each
                // result within one rounding to the half type.
                let eps = if half == DType::BF16 {
                    2f64.powi(-7)
                } else {
                    2f64.powi(-10)
                };
                let f = |t: &Tensor| t.to_dtype(DType::F64).unwrap().to_vec_f64().unwrap();
                for (x, y) in f(p).iter().zip(f(c)) {
                    assert!(
                        (x - y).abs() <= eps * x.abs().max(y.abs()) + 1e-6,
                        "{half:?}: {x} against {y}"
                    );
                }
            }
        }
        assert!(
            calls >= 3 && copied_calls == calls,
            "{half:?}: {calls} half GEMMs"
        );
        assert_eq!(
            copied_launches - plain_launches,
            2 * calls,
            "{half:?}: the operands' rounded copies"
        );
    }
}

/// On a GPU, an element-wise op on half tensors is one kernel: the
/// widening of its argument and the rounding of its result are loop
/// kernels with half buffers, which fusion takes into the op's kernel (it
/// loads the half values and stores the half result itself; three
/// kernels before). Two such ops are two kernels: the first one's result
/// is rounded to the half type, as it is unfused. Their values are the
/// CPU's, bit for bit, and so are their gradient's.
#[test]
fn an_elementwise_half_op_is_one_kernel_on_the_gpu() {
    let _serial = serial();
    for half in HALVES {
        let values: Vec<f32> = (0..1000).map(|k| (k as f32 - 500.0) * 0.0371).collect();
        let on = |device: Device| {
            Tensor::from_vec(values.clone(), &[1000])
                .unwrap()
                .to_dtype(half)
                .unwrap()
                .to_device(device)
                .unwrap()
        };
        let (x, cpu) = (on(gpu()), on(Device::Cpu));
        let before = tenjin::stats();
        let y = x.mul_scalar(3.0).unwrap().sigmoid().unwrap();
        y.realize().unwrap();
        let after = tenjin::stats();
        assert_eq!(y.dtype(), half);
        assert_eq!(
            after.gpu_kernels_run - before.gpu_kernels_run,
            2,
            "{half:?}: each op, its widening and its rounding are not one kernel"
        );
        let want = cpu.mul_scalar(3.0).unwrap().sigmoid().unwrap();
        same(&y, &want, &[], &format!("{half:?} sigmoid(3x)"));
        // The same op recorded: its gradient, a half tensor, as on the CPU.
        let grad = |x: &Tensor| {
            let x = x.detach().requires_grad();
            x.mul_scalar(3.0)
                .unwrap()
                .sigmoid()
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .sum()
                .unwrap()
                .backward()
                .unwrap();
            x.grad().unwrap()
        };
        same(
            &grad(&x),
            &grad(&cpu),
            &[],
            &format!("{half:?} d sigmoid(3x)"),
        );
    }
}
