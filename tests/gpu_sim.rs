//! Tensors on the simulated GPU against the same computation on the CPU:
//! contractions through the simulated cuBLAS (plain, batched, transposed
//! views, with an epilogue) and the views it cannot express (loop kernels,
//! shown by `explain`), their gradients, a few training steps, moving
//! data, the indexing ops, a checkpointed block, and the error for mixing
//! devices.
//!
//! `TENJIN_GPU_TESTS=cuda` runs the same tests on a real GPU (see `gpu`).
//!
//! Tolerances: f64 values within 1e-12 of the CPU's (relative to the
//! largest magnitude; the reference GEMM sums in another order than the
//! CPU's blocked kernels), f32 within 1e-5.

mod common;

use common::gpu;
use tenjin::optim::{Adam, AdamConfig, Optimizer, SgdConfig, SGD};
use tenjin::{DType, Device, Error, Tensor};

/// The tests of this file one at a time: one of them reads process-wide
/// counters.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    Tensor::randn(&[n], DType::F64, seed)
        .unwrap()
        .to_vec_f64()
        .unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {k}: {g} on the device, {w} on the CPU"
        );
    }
}

/// A leaf with `values` of `shape` on `device` in `dtype`.
fn leaf(values: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    Tensor::from_vec_f64_on(values.to_vec(), shape, device)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .requires_grad()
}

/// `f` of two leaves on the CPU and on the device: the values and both
/// gradients agree; returns the device output (for `explain`).
fn agree(
    name: &str,
    shapes: [&[usize]; 2],
    dtype: DType,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor, Error>,
) -> Tensor {
    let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
    agree_within(name, shapes, dtype, tol, f)
}

/// [`agree`] within `tol` (relative to the largest magnitude; 0: bitwise).
fn agree_within(
    name: &str,
    shapes: [&[usize]; 2],
    dtype: DType,
    tol: f64,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor, Error>,
) -> Tensor {
    let inputs: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| data(s.iter().product(), 7 + k as u64))
        .collect();
    let run = |device: Device| {
        let a = leaf(&inputs[0], shapes[0], dtype, device);
        let b = leaf(&inputs[1], shapes[1], dtype, device);
        let y = f(&a, &b).unwrap();
        let seed = Tensor::from_vec_f64_on(data(y.numel(), 99), y.shape(), device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        y.backward_with(&seed).unwrap();
        let grads = [a.grad().unwrap(), b.grad().unwrap()];
        (y, grads)
    };
    let (yc, gc) = run(Device::Cpu);
    let (yg, gg) = run(gpu());
    assert_eq!(yg.device(), gpu(), "{name}");
    let v = |t: &Tensor| t.to_vec_f64().unwrap();
    close(&v(&yg), &v(&yc), tol, &format!("{name} {dtype:?} value"));
    for k in 0..2 {
        assert_eq!(gg[k].device(), gpu());
        close(
            &v(&gg[k]),
            &v(&gc[k]),
            tol,
            &format!("{name} {dtype:?} grad {k}"),
        );
    }
    yg
}

#[test]
fn contractions_run_through_cublas_and_match_the_cpu() {
    let _s = serial();
    for dtype in [DType::F64, DType::F32] {
        let y = agree("matmul", [&[32, 48], &[48, 16]], dtype, |a, b| a.matmul(b));
        let e = tenjin::explain(&y).unwrap();
        assert!(e.forward.iter().any(|s| s.route == "gemm"), "{e}");
        agree("batched", [&[4, 8, 16], &[4, 16, 8]], dtype, |a, b| {
            a.matmul(b)
        });
        agree("transposed", [&[48, 32], &[48, 16]], dtype, |a, b| {
            a.t()?.matmul(b)
        });
        agree("both transposed", [&[48, 32], &[16, 48]], dtype, |a, b| {
            a.t()?.matmul(&b.t()?)
        });
        let y = agree("relu epilogue", [&[32, 48], &[48, 24]], dtype, |a, b| {
            tenjin::index_fn(
                "f[i; j] = max(sum{k}_0^47 (a[i; k] * b[k; j]), 0) * 2",
                &[("a", a), ("b", b)],
            )
        });
        let e = tenjin::explain(&y).unwrap();
        assert!(e.forward.iter().any(|s| s.route == "gemm"), "{e}");
        agree("attention", [&[32, 16], &[32, 16]], dtype, |q, k| {
            q.matmul(&k.t()?)?.softmax(1)?.matmul(k)
        });
        // Attention in one line: GEMMs with their epilogues fused.
        let y = agree("attention line", [&[32, 8], &[32, 8]], dtype, |q, k| {
            tenjin::index_fn(
                "o[i; d] = sum{j}_0^31 (exp (sum{e}_0^7 (q[i; e] * k[j; e])) / sum{m}_0^31 (exp (sum{e}_0^7 (q[i; e] * k[m; e]))) * k[j; d])",
                &[("q", q), ("k", k)],
            )
        });
        let e = tenjin::explain(&y).unwrap();
        assert!(e.forward.iter().any(|s| s.route == "gemm+loop"), "{e}");
    }
}

#[test]
fn a_view_cublas_cannot_express_is_a_loop_kernel_and_explain_says_so() {
    let _s = serial();
    // A reversed row order: a negative stride, which no BLAS layout has.
    let y = agree("flipped", [&[32, 48], &[48, 16]], DType::F64, |a, b| {
        a.flip(&[1])?.matmul(b)
    });
    let e = tenjin::explain(&y).unwrap();
    assert!(e.forward.iter().all(|s| s.route == "loop"), "{e}");
    // The same function on the CPU is a GEMM (strided views are fine there).
    let a = leaf(&data(32 * 48, 1), &[32, 48], DType::F64, Device::Cpu);
    let b = leaf(&data(48 * 16, 2), &[48, 16], DType::F64, Device::Cpu);
    let e = tenjin::explain(&a.flip(&[1]).unwrap().matmul(&b).unwrap()).unwrap();
    assert!(e.forward.iter().any(|s| s.route == "gemm"), "{e}");
}

#[test]
fn element_wise_and_reductions_match_bit_for_bit_in_f64() {
    let _s = serial();
    // Same operations in the same order: the loop kernels agree exactly.
    // (A reduction of 256 terms or more is folded by a team of threads in
    // another fixed order: the long-reduction tests hold it within
    // rounding.)
    let x = data(200, 3);
    let f =
        |t: &Tensor| -> Result<Tensor, Error> { t.mul_scalar(0.5)?.add_scalar(1.0)?.sqrt()?.sum() };
    let cpu =
        f(&Tensor::from_vec_f64(x.iter().map(|v| v.abs()).collect(), &[10, 20]).unwrap()).unwrap();
    let dev = f(
        &Tensor::from_vec_f64_on(x.iter().map(|v| v.abs()).collect(), &[10, 20], gpu()).unwrap(),
    )
    .unwrap();
    assert_eq!(dev.item().unwrap().to_bits(), cpu.item().unwrap().to_bits());
}

#[test]
fn sgd_steps_on_the_device_follow_the_cpu() {
    let _s = serial();
    let run = |device: Device| -> Vec<f64> {
        let x = Tensor::from_vec_f64_on(data(64 * 20, 5), &[64, 20], device).unwrap();
        let t = Tensor::from_vec_f64_on(data(64 * 4, 6), &[64, 4], device).unwrap();
        let w = leaf(&data(20 * 32, 7), &[20, 32], DType::F64, device);
        let v = leaf(&data(32 * 4, 8), &[32, 4], DType::F64, device);
        let mut opt = SGD::new(
            vec![w.clone(), v.clone()],
            SgdConfig {
                lr: 0.01,
                momentum: 0.9,
                ..Default::default()
            },
        )
        .unwrap();
        (0..5)
            .map(|_| {
                opt.zero_grad();
                let y = x.matmul(&w).unwrap().tanh().unwrap().matmul(&v).unwrap();
                let loss = y.mse_loss(&t).unwrap();
                loss.backward().unwrap();
                opt.step().unwrap();
                loss.item().unwrap()
            })
            .collect()
    };
    let (cpu, dev) = (run(Device::Cpu), run(gpu()));
    close(&dev, &cpu, 1e-12, "losses");
    assert!(cpu[4] < cpu[0], "{cpu:?}");
}

/// AdamW over a parameter of 2¹⁷ elements, whose update (the parameter
/// and both moments, stacked in three rows) runs a thread per parameter
/// computing its three rows in turn: the same values as the CPU's, f32,
/// step after step.
#[test]
fn adamw_steps_over_a_large_parameter_follow_the_cpu() {
    let _s = serial();
    let n = 1 << 17;
    let run = |device: Device| -> (Vec<f64>, Vec<f64>) {
        let w = leaf(&data(n, 21), &[n], DType::F32, device);
        let target = Tensor::from_vec_f64_on(data(n, 22), &[n], device)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let mut opt = Adam::new(vec![w.clone()], AdamConfig::adamw()).unwrap();
        let losses = (0..3)
            .map(|_| {
                opt.zero_grad();
                let d = w.sub(&target).unwrap();
                let loss = d.mul(&d).unwrap().sum().unwrap();
                loss.backward().unwrap();
                opt.step().unwrap();
                loss.item().unwrap()
            })
            .collect();
        (losses, w.to_vec_f64().unwrap())
    };
    let ((lc, wc), (lg, wg)) = (run(Device::Cpu), run(gpu()));
    close(&lg, &lc, 1e-6, "losses");
    close(&wg, &wc, 1e-6, "parameters");
    assert!(wg != data(n, 21), "the parameters moved");
}

#[test]
fn data_moves_between_devices_explicitly() {
    let _s = serial();
    let x = Tensor::from_vec(vec![1.0, -2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let d = x.to_device(gpu()).unwrap();
    assert_eq!(d.device(), gpu());
    assert_eq!(d.to_cpu().unwrap().to_vec().unwrap(), x.to_vec().unwrap());
    assert_eq!(d.t().unwrap().to_vec().unwrap(), vec![1.0, 3.0, -2.0, 4.0]);
    let ids = Tensor::from_vec_i64(vec![3, 1], &[2])
        .unwrap()
        .to_device(gpu())
        .unwrap();
    assert_eq!(ids.to_vec_i64().unwrap(), vec![3, 1]);
    let z = Tensor::zeros_on(&[3], DType::F32, gpu()).unwrap();
    assert_eq!(z.add_scalar(2.5).unwrap().to_vec().unwrap(), vec![2.5; 3]);
    // Moving a tensor that needs a gradient is not recorded yet: refused.
    assert!(matches!(
        x.clone().requires_grad().to_device(gpu()),
        Err(Error::Autograd { .. })
    ));
}

#[test]
fn mixing_devices_is_an_error_naming_both() {
    let _s = serial();
    let a = Tensor::ones_on(&[2], DType::F32, gpu()).unwrap();
    let b = Tensor::ones(&[2], DType::F32).unwrap();
    match a.add(&b) {
        Err(Error::Device { message, .. }) => {
            assert!(
                message.contains("cuda:0") && message.contains("cpu"),
                "{message}"
            )
        }
        other => panic!("expected a device error, got {other:?}"),
    }
}

/// A checkpointed block runs and is recomputed on the device: values and
/// gradients within the tolerance of the CPU's, and no CPU kernel runs.
#[test]
fn a_checkpointed_block_recomputes_on_the_device() {
    let _s = serial();
    let before = tenjin::stats();
    agree("checkpoint", [&[6, 8], &[8, 8]], DType::F64, |x, w| {
        let w = w.clone();
        tenjin::checkpoint(
            move |t: &[Tensor]| t[0].matmul(&w)?.tanh()?.matmul(&w)?.tanh(),
            std::slice::from_ref(x),
        )
    });
    let after = tenjin::stats();
    assert!(after.gpu_kernels_run > before.gpu_kernels_run);
}

/// `values` as ids of `dtype` on `device`.
fn ids(values: &[i64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let t = match dtype {
        DType::I32 => Tensor::from_vec_i32(values.iter().map(|&v| v as i32).collect(), shape),
        _ => Tensor::from_vec_i64(values.to_vec(), shape),
    };
    t.unwrap().to_device(device).unwrap()
}

/// index_select, embedding and gather and their gradients (segmented
/// sums in position order, repeated ids) are bitwise the CPU's, for both
/// float types and both id types.
#[test]
fn indexing_ops_and_their_gradients_are_bitwise_the_cpus() {
    let _s = serial();
    for dtype in [DType::F64, DType::F32] {
        for id_type in [DType::I64, DType::I32] {
            let what = format!("{dtype:?} ids {id_type:?}");
            agree_within(
                &format!("embedding {what}"),
                [&[7, 5], &[2, 3, 5]],
                dtype,
                0.0,
                |w, b| {
                    let ids = ids(&[6, 0, 2, 2, 6, 1], &[2, 3], id_type, w.device());
                    w.embedding(&ids)?.mul(b)
                },
            );
            // A long table read by many ids: each line's rows are split
            // into ranges of two or three rows, one thread each, every id
            // scanned by every range.
            agree_within(
                &format!("embedding, rows in ranges, {what}"),
                [&[1000, 1], &[2100, 1]],
                dtype,
                0.0,
                |w, b| {
                    let picks: Vec<i64> = (0..2100).map(|k| (k * 37 + k / 700) % 1000).collect();
                    w.embedding(&ids(&picks, &[2100], id_type, w.device()))?
                        .mul(b)
                },
            );
            agree_within(
                &format!("index_select dim 1 {what}"),
                [&[3, 6, 4], &[3, 5, 4]],
                dtype,
                0.0,
                |x, b| {
                    let ids = ids(&[5, 5, 0, 3, 5], &[5], id_type, x.device());
                    x.index_select(1, &ids)?.mul(b)
                },
            );
            agree_within(
                &format!("gather dim 1 {what}"),
                [&[3, 6, 4], &[3, 8, 4]],
                dtype,
                0.0,
                |x, b| {
                    let picks: Vec<i64> = (0..96).map(|k| (k * 7 % 11) % 6).collect();
                    let idx = ids(&picks, &[3, 8, 4], id_type, x.device());
                    x.gather(1, &idx)?.mul(b)
                },
            );
        }
    }
}

/// Ids out of range are refused on the device before anything runs, with
/// the CPU's error: those moved from the host by their recorded range (no
/// read back), those computed on the device by reading them back.
#[test]
fn ids_out_of_range_on_the_device_are_the_cpus_error() {
    let _s = serial();
    let device = gpu();
    let w = Tensor::ones_on(&[5, 3], DType::F32, device).unwrap();
    let good = ids(&[0, 4, 2], &[3], DType::I64, device);
    let before = tenjin::stats();
    w.embedding(&good).unwrap();
    assert_eq!(
        tenjin::stats().bytes_to_host,
        before.bytes_to_host,
        "ids moved from the host are checked by their recorded range"
    );
    for (values, bad) in [
        (vec![0, 7, 2], "index 7 at position 1"),
        (vec![-1], "index -1 at position 0"),
    ] {
        let on_cpu = Tensor::from_vec_i64(values.clone(), &[values.len()]).unwrap();
        let cpu_error = Tensor::ones(&[5, 3], DType::F32)
            .unwrap()
            .embedding(&on_cpu)
            .unwrap_err()
            .to_string();
        let e = w
            .embedding(&ids(&values, &[values.len()], DType::I64, device))
            .unwrap_err()
            .to_string();
        assert_eq!(e, cpu_error);
        assert!(e.contains(bad) && e.contains("size 5"), "{e}");
    }
    // Ids computed on the device (argmax over 8 columns) are read back.
    let scores = Tensor::from_vec_on(
        (0..16)
            .map(|k| if k < 8 { k } else { 15 - k } as f32)
            .collect(),
        &[2, 8],
        device,
    )
    .unwrap();
    let picked = scores.argmax(1, false).unwrap();
    assert_eq!(picked.device(), device);
    assert_eq!(picked.to_vec_i64().unwrap(), vec![7, 0]);
    let table = Tensor::ones_on(&[8, 2], DType::F32, device).unwrap();
    assert_eq!(table.embedding(&picked).unwrap().shape(), &[2, 2]);
    let e = w.embedding(&picked).unwrap_err().to_string();
    assert!(e.contains("index 7 at position 0"), "{e}");
    // Labels of a cross-entropy: the same, and the CPU's error out of range.
    let logits = Tensor::ones_on(&[3, 5], DType::F32, device).unwrap();
    let before = tenjin::stats();
    logits
        .cross_entropy_with(&good, Default::default())
        .unwrap();
    assert_eq!(tenjin::stats().bytes_to_host, before.bytes_to_host);
    let labels = [0, 7, 2];
    let cpu_error = Tensor::ones(&[3, 5], DType::F32)
        .unwrap()
        .cross_entropy_with(
            &Tensor::from_vec_i64(labels.to_vec(), &[3]).unwrap(),
            Default::default(),
        )
        .unwrap_err()
        .to_string();
    let e = logits
        .cross_entropy_with(&ids(&labels, &[3], DType::I64, device), Default::default())
        .unwrap_err()
        .to_string();
    assert_eq!(e, cpu_error);
    assert!(e.contains("label 7 at row 1"), "{e}");
}

/// A cached training step on the device, with SGD and with Adam (whose
/// bias corrections change every step: a fill kernel each, no upload),
/// runs no CPU kernel, copies to the host only the loss it reads (and
/// waits only then), and allocates nothing new from the device in
/// runtime-efficient mode.
#[test]
fn a_cached_step_runs_on_the_device_alone() {
    let _s = serial();
    let sgd = |params| -> Box<dyn Optimizer> {
        let config = SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        };
        Box::new(SGD::new(params, config).unwrap())
    };
    let adam = |params| -> Box<dyn Optimizer> {
        let config = AdamConfig {
            lr: 1e-2,
            ..Default::default()
        };
        Box::new(Adam::new(params, config).unwrap())
    };
    cached_step_on_the_device(&sgd, None);
    cached_step_on_the_device(&adam, None);
    // Clipping by the total norm keeps it there: the norm and the
    // coefficient stay on the device.
    cached_step_on_the_device(&adam, Some(0.5));
}

fn cached_step_on_the_device(
    optimizer: &dyn Fn(Vec<Tensor>) -> Box<dyn Optimizer>,
    clip: Option<f64>,
) {
    let device = gpu();
    let x = Tensor::from_vec_on(
        data(32 * 20, 5).iter().map(|&v| v as f32).collect(),
        &[32, 20],
        device,
    )
    .unwrap();
    let mut onehot = vec![0f32; 32 * 4];
    (0..32).for_each(|i| onehot[i * 4 + i % 4] = 1.0);
    let onehot = Tensor::from_vec_on(onehot, &[32, 4], device).unwrap();
    let w = leaf(&data(20 * 64, 7), &[20, 64], DType::F32, device);
    let v = leaf(&data(64 * 4, 8), &[64, 4], DType::F32, device);
    let mut opt = optimizer(vec![w.clone(), v.clone()]);
    let step = || {
        opt.zero_grad();
        let logits = x.matmul(&w).unwrap().relu().unwrap().matmul(&v).unwrap();
        let loss = logits
            .log_softmax(1)
            .unwrap()
            .mul(&onehot)
            .unwrap()
            .sum()
            .unwrap()
            .mul_scalar(-1.0 / 32.0)
            .unwrap();
        loss.backward().unwrap();
        if let Some(max_norm) = clip {
            let total =
                tenjin::nn::utils::clip_grad_norm(&[w.clone(), v.clone()], max_norm, 2.0).unwrap();
            assert_eq!(total.device(), device);
        }
        opt.step().unwrap();
        loss.item().unwrap()
    };
    assert_cached_steps_stay_on_the_device(device, step);
}

/// Runs `step` (one training step returning its f32 loss, as f64) three times and
/// holds the third to what a cached step on the device may do: no
/// compilation, no CPU kernel, a launch or GEMM per kernel run, 4 bytes
/// back (the loss) and none up, one wait, no device allocation.
fn assert_cached_steps_stay_on_the_device(device: Device, mut step: impl FnMut() -> f64) {
    let first = step();
    step();
    let (s, a) = (tenjin::stats(), tenjin::alloc::stats_for(device));
    let last = step();
    let (s2, a2) = (tenjin::stats(), tenjin::alloc::stats_for(device));
    assert!(last < first, "{first} → {last}");
    assert_eq!(s2.kernels_compiled, s.kernels_compiled);
    assert_eq!(
        s2.cpu_kernels_run, s.cpu_kernels_run,
        "a kernel ran on the CPU"
    );
    let run = s2.gpu_kernels_run - s.gpu_kernels_run;
    let launched = (s2.ptx_launches - s.ptx_launches) + (s2.cublas_calls - s.cublas_calls);
    assert!(
        run > 10 && launched >= run,
        "{run} kernels, {launched} launches and GEMMs"
    );
    assert!(
        s2.cublas_calls > s.cublas_calls,
        "no GEMM ran through cuBLAS"
    );
    assert_eq!(
        s2.bytes_to_host - s.bytes_to_host,
        4,
        "only the f32 loss comes back"
    );
    assert_eq!(s2.bytes_to_device, s.bytes_to_device, "nothing uploaded");
    assert_eq!(
        s2.device_synchronizations - s.device_synchronizations,
        1,
        "one wait: reading the loss"
    );
    assert_eq!(
        a2.allocations, a.allocations,
        "a device allocation in a cached step"
    );
}

/// A GPT-style step at a tiny size — token and position embeddings, a
/// causal attention block with layer norms and a GELU MLP, cross-entropy,
/// AdamW — makes, once cached, no synchronisation but reading its loss
/// and no device allocation.
#[test]
fn a_cached_gpt_style_step_waits_only_for_its_loss() {
    let _s = serial();
    let device = gpu();
    let (vocab, t, d, batch) = (13, 8, 16, 2);
    let on = |shape: &[usize], scale: f64, seed: u64| {
        let n = shape.iter().product();
        let v: Vec<f64> = data(n, seed).iter().map(|x| x * scale).collect();
        leaf(&v, shape, DType::F32, device)
    };
    let s = 1.0 / (d as f64).sqrt();
    let tokens = on(&[vocab, d], 0.1, 1);
    let positions = on(&[t, d], 0.1, 2);
    let (wq, wk, wv, wo) = (
        on(&[d, d], s, 3),
        on(&[d, d], s, 4),
        on(&[d, d], s, 5),
        on(&[d, d], s, 6),
    );
    let (w1, w2, head) = (
        on(&[d, 4 * d], s, 7),
        on(&[4 * d, d], s / 2.0, 8),
        on(&[d, vocab], s, 9),
    );
    let ln1 = tenjin::nn::LayerNorm::new(&[d], 1e-5, DType::F32).unwrap();
    let ln2 = tenjin::nn::LayerNorm::new(&[d], 1e-5, DType::F32).unwrap();
    use tenjin::nn::Module;
    ln1.to_device(device).unwrap();
    ln2.to_device(device).unwrap();
    let mut mask = vec![0.0f32; t * t];
    (0..t).for_each(|i| (i + 1..t).for_each(|j| mask[i * t + j] = -1e9));
    let mask = Tensor::from_vec_on(mask, &[t, t], device).unwrap();
    let ids: Vec<i64> = (0..batch * (t + 1))
        .map(|k| (k * 5 % vocab) as i64)
        .collect();
    let (x, y): (Vec<i64>, Vec<i64>) = (0..batch)
        .flat_map(|b| (0..t).map(move |i| b * (t + 1) + i))
        .map(|k| (ids[k], ids[k + 1]))
        .unzip();
    let x = Tensor::from_vec_i64(x, &[batch, t])
        .unwrap()
        .to_device(device)
        .unwrap();
    let y = Tensor::from_vec_i64(y, &[batch * t])
        .unwrap()
        .to_device(device)
        .unwrap();
    let mut params = vec![
        tokens.clone(),
        positions.clone(),
        wq.clone(),
        wk.clone(),
        wv.clone(),
        wo.clone(),
        w1.clone(),
        w2.clone(),
        head.clone(),
    ];
    params.extend(ln1.parameters());
    params.extend(ln2.parameters());
    let mut opt = tenjin::optim::AdamW::new(params, AdamConfig::adamw()).unwrap();
    let mut step = || -> Result<f64, Error> {
        opt.zero_grad();
        let h0 = tokens.embedding(&x)?.add(&positions)?;
        let h = ln1.forward(&h0)?;
        let (q, k, v) = (h.matmul(&wq)?, h.matmul(&wk)?, h.matmul(&wv)?);
        let scores = q.matmul(&k.transpose(1, 2)?)?.mul_scalar(s)?.add(&mask)?;
        let h1 = h0.add(&scores.softmax(2)?.matmul(&v)?.matmul(&wo)?)?;
        let m = ln2.forward(&h1)?.matmul(&w1)?.gelu()?.matmul(&w2)?;
        let logits = h1.add(&m)?.matmul(&head)?.reshape(&[batch * t, vocab])?;
        let loss = logits.cross_entropy_with(&y, Default::default())?;
        loss.backward()?;
        opt.step()?;
        loss.item()
    };
    assert_cached_steps_stay_on_the_device(device, || step().unwrap());
}

/// `Module::to_device` moves parameters in place: the tensors held before
/// the move see it, and a model trains there.
#[test]
fn a_module_moves_to_the_device_keeping_its_parameters() {
    use tenjin::nn::{Linear, Module, ReLU, Sequential};
    let _s = serial();
    let model = Sequential::new()
        .add(Linear::new(6, 8, 1).unwrap())
        .add(ReLU)
        .add(Linear::new(8, 3, 2).unwrap());
    let held = model.parameters();
    let before: Vec<Vec<f64>> = held.iter().map(|p| p.to_vec_f64().unwrap()).collect();
    model.to_device(gpu()).unwrap();
    for (p, b) in held.iter().zip(&before) {
        assert_eq!(p.device(), gpu());
        assert_eq!(&p.to_vec_f64().unwrap(), b);
    }
    let x = Tensor::ones_on(&[4, 6], DType::F32, gpu()).unwrap();
    let mut opt = SGD::new(
        model.parameters(),
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let loss = || {
        model
            .forward(&x)
            .unwrap()
            .mul(&model.forward(&x).unwrap())
            .unwrap()
            .sum()
            .unwrap()
    };
    let first = loss().item().unwrap();
    for _ in 0..3 {
        opt.zero_grad();
        loss().backward().unwrap();
        opt.step().unwrap();
    }
    assert!(loss().item().unwrap() < first);
    // And back.
    model.to_device(Device::Cpu).unwrap();
    assert!(held.iter().all(|p| p.device() == Device::Cpu));
}

/// Conversions between every pair of element types on the device give
/// the CPU's values (Rust's `as`: toward zero, saturating, NaN to 0;
/// wrapping between integers), and a recorded conversion carries its
/// gradient back on the device.
#[test]
fn conversions_on_the_device_match_the_cpu() {
    let _s = serial();
    let floats = vec![
        0.0,
        -0.0,
        1.5,
        -2.5,
        1e10,
        -1e10,
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        3e38,
        123456789.123,
    ];
    let ints = vec![
        0i64,
        1,
        -1,
        i64::MAX,
        i64::MIN,
        1 << 40,
        -(1 << 33) - 7,
        1 << 24 | 1,
    ];
    let sources = [
        Tensor::from_vec_f64(floats.clone(), &[floats.len()]).unwrap(),
        Tensor::from_vec(floats.iter().map(|&x| x as f32).collect(), &[floats.len()]).unwrap(),
        Tensor::from_vec_i64(ints.clone(), &[ints.len()]).unwrap(),
        Tensor::from_vec_i32(ints.iter().map(|&x| x as i32).collect(), &[ints.len()]).unwrap(),
    ];
    for src in &sources {
        let on_device = src.to_device(gpu()).unwrap();
        for to in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let (c, d) = (src.to_dtype(to).unwrap(), on_device.to_dtype(to).unwrap());
            assert_eq!(d.device(), gpu());
            let what = format!("{:?} -> {to:?}", src.dtype());
            if to.is_float() {
                let (c, d) = (c.to_vec_f64().unwrap(), d.to_vec_f64().unwrap());
                for (x, y) in c.iter().zip(&d) {
                    assert!(x.to_bits() == y.to_bits(), "{what}: {c:?} against {d:?}");
                }
            } else {
                assert_eq!(c.to_vec_i64().unwrap(), d.to_vec_i64().unwrap(), "{what}");
            }
        }
    }
    // Recorded between float types: the gradient flows back converted.
    let x = Tensor::from_vec_on(vec![0.5, -1.5, 2.0], &[3], gpu())
        .unwrap()
        .requires_grad();
    let y = x.to_dtype(DType::F64).unwrap();
    y.mul(&y).unwrap().sum().unwrap().backward().unwrap();
    let g = x.grad().unwrap();
    assert_eq!((g.device(), g.dtype()), (gpu(), DType::F32));
    assert_eq!(g.to_vec().unwrap(), vec![1.0, -3.0, 4.0]);
}

/// Named tensors as `safetensors::save` takes them.
fn pairs(v: &[(String, Tensor)]) -> Vec<(&str, &Tensor)> {
    v.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// Weights on disk to and from a model on the device: saved from there,
/// loaded onto the host and into another model on the device (moved
/// where each parameter lives), with an optimizer's state.
#[test]
fn safetensors_round_trip_through_a_model_on_the_device() {
    use tenjin::nn::{Linear, Module};
    use tenjin::optim::{Adam, AdamConfig};
    let _s = serial();
    let a = Linear::new(5, 3, 1).unwrap();
    let b = Linear::new(5, 3, 2).unwrap();
    a.to_device(gpu()).unwrap();
    b.to_device(gpu()).unwrap();
    let x = Tensor::randn_on(&[4, 5], DType::F32, 3, gpu()).unwrap();
    let mut opt = Adam::new(a.parameters(), AdamConfig::default()).unwrap();
    for _ in 0..2 {
        opt.zero_grad();
        a.forward(&x).unwrap().sum().unwrap().backward().unwrap();
        opt.step().unwrap();
    }
    let dir = std::env::temp_dir().join(format!("tenjin-gpu-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (weights, state) = (dir.join("model.safetensors"), dir.join("adam.safetensors"));
    let (w, s) = (a.state_dict(), opt.state_dict().unwrap());
    tenjin::safetensors::save(&weights, &pairs(&w)).unwrap();
    tenjin::safetensors::save(&state, &pairs(&s)).unwrap();
    let loaded = tenjin::safetensors::load(&weights).unwrap();
    b.load_state_dict(&loaded).unwrap();
    assert!(b.parameters().iter().all(|p| p.device() == gpu()));
    assert_eq!(
        b.forward(&x).unwrap().to_vec().unwrap(),
        a.forward(&x).unwrap().to_vec().unwrap()
    );
    let mut opt_b = Adam::new(b.parameters(), AdamConfig::default()).unwrap();
    opt_b
        .load_state_dict(&tenjin::safetensors::load(&state).unwrap())
        .unwrap();
    for (o, p) in [(&mut opt, &a), (&mut opt_b, &b)] {
        o.zero_grad();
        p.forward(&x).unwrap().sum().unwrap().backward().unwrap();
        o.step().unwrap();
    }
    assert_eq!(
        b.forward(&x).unwrap().to_vec().unwrap(),
        a.forward(&x).unwrap().to_vec().unwrap(),
        "the resumed optimizer continues bit for bit"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `x` rounded to TF32 as the tensor cores do (10 mantissa bits, to
/// nearest, ties away from zero).
fn tf32(x: f32) -> f32 {
    f32::from_bits((x.to_bits() + 0x1000) & !0x1FFF)
}

/// f32 GEMMs are full precision unless TF32 is asked for; then they are
/// the product of TF32-rounded inputs (about 1e-3 away), and f64 GEMMs
/// are unaffected.
#[test]
fn f32_gemms_are_full_precision_unless_tf32_is_asked_for() {
    use tenjin::cuda::{math_mode, set_math_mode, MathMode};
    let _s = serial();
    assert_eq!(math_mode(), MathMode::Full, "the default");
    let device = gpu();
    let (a, b) = (data(32 * 64, 3), data(64 * 16, 4));
    let product = |a: &[f64], b: &[f64], dtype: DType, device: Device| {
        let t = |v: &[f64], shape: &[usize]| {
            Tensor::from_vec_f64_on(v.to_vec(), shape, device)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        t(a, &[32, 64]).matmul(&t(b, &[64, 16])).unwrap()
    };
    let values = |t: Tensor| t.to_vec_f64().unwrap();
    let cpu = values(product(&a, &b, DType::F32, Device::Cpu));
    let full = values(product(&a, &b, DType::F32, device));
    close(&full, &cpu, 1e-5, "full f32");
    let f64_full = values(product(&a, &b, DType::F64, device));
    set_math_mode(MathMode::Tf32);
    let tf = values(product(&a, &b, DType::F32, device));
    let f64_tf = values(product(&a, &b, DType::F64, device));
    set_math_mode(MathMode::Full);
    let rounded = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| tf32(x as f32) as f64).collect() };
    let want = values(product(&rounded(&a), &rounded(&b), DType::F32, Device::Cpu));
    close(&tf, &want, 1e-5, "tf32 = the product of rounded inputs");
    let scale = full.iter().fold(0f64, |m, x| m.max(x.abs()));
    let off = tf
        .iter()
        .zip(&full)
        .fold(0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale;
    assert!(off > 1e-5 && off < 1e-2, "tf32 is {off:e} from full f32");
    assert_eq!(f64_tf, f64_full, "f64 GEMMs ignore the math mode");
}

/// The largest relative difference between `got` and `want`, per element
/// (relative to the larger magnitude, at least 1e-30).
fn rel_error(got: &[f64], want: &[f64]) -> f64 {
    got.iter().zip(want).fold(0f64, |m, (g, w)| {
        m.max((g - w).abs() / g.abs().max(w.abs()).max(1e-30))
    })
}

/// The f32 tolerance per op class, measured (printed with `--nocapture`)
/// and held: arithmetic element-wise ops bit for bit, transcendental ones
/// within 2 ulp per element (2.4e-7 relative: the GPU's own sequences),
/// reductions within 1e-6 and GEMMs within 1e-5 of the result's largest
/// magnitude (summation orders differ; per element, a sum that cancels
/// has no relative accuracy on either device).
#[test]
fn f32_results_are_within_the_tolerance_of_their_op_class() {
    let _s = serial();
    let device = gpu();
    let x = data(4096, 11);
    let on = |d: Device, shape: &[usize]| {
        Tensor::from_vec_f64_on(x[..shape.iter().product()].to_vec(), shape, d)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    type Op = fn(&Tensor) -> Result<Tensor, Error>;
    /// A class's name, its tolerance and its ops.
    type Class<'a> = (&'a str, f64, &'a [(&'a str, Op)]);
    let classes: [Class; 4] = [
        (
            "arithmetic",
            0.0,
            &[
                ("x·0.5 + 1", |t| t.mul_scalar(0.5)?.add_scalar(1.0)),
                ("x / (1 + x²)", |t| t.div(&t.mul(t)?.add_scalar(1.0)?)),
                ("sqrt |x|", |t| t.abs()?.sqrt()),
                ("relu", |t| t.relu()),
            ],
        ),
        (
            "transcendental",
            4.0 * f32::EPSILON as f64 / 2.0,
            &[
                ("exp", |t| t.exp()),
                ("log |x|", |t| t.abs()?.add_scalar(1e-3)?.log()),
                ("tanh", |t| t.tanh()),
                ("sigmoid", |t| t.sigmoid()),
            ],
        ),
        (
            "reduction",
            1e-6,
            &[
                ("sum of rows", |t| {
                    t.reshape(&[64, 64])?.sum_dims(&[1], false)
                }),
                ("softmax", |t| t.reshape(&[64, 64])?.softmax(1)),
                ("mean", |t| t.mean()),
                ("sum of |x|", |t| t.abs()?.sum()),
            ],
        ),
        (
            "gemm",
            1e-5,
            &[("64×64 · 64×64", |t| {
                let m = t.reshape(&[64, 64])?;
                m.matmul(&m.t()?)
            })],
        ),
    ];
    for (class, tol, ops) in classes {
        for (name, f) in ops {
            let want = f(&on(Device::Cpu, &[4096])).unwrap().to_vec_f64().unwrap();
            let got = f(&on(device, &[4096])).unwrap().to_vec_f64().unwrap();
            let e = if matches!(class, "reduction" | "gemm") {
                let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
                let diff = got
                    .iter()
                    .zip(&want)
                    .fold(0f64, |m, (g, w)| m.max((g - w).abs()));
                diff / scale
            } else {
                rel_error(&got, &want)
            };
            println!("f32 {class:<15} {name:<15} largest relative difference {e:.2e}");
            assert!(e <= tol, "{class} {name}: {e:e} > {tol:e}");
        }
    }
}

/// A long sum with few outputs runs as two stages: block partial sums in
/// parallel (a "block loop": a block of threads per partial, their shares
/// combined in a fixed tree), then their sum in index order. A long max
/// is one block loop. Bitwise the same on every run, as accurate as the
/// CPU's blocked sums in f32, the CPU's value within rounding in f64, NaN
/// propagated.
#[test]
fn long_reductions_run_as_block_loops_and_repeat_bit_for_bit() {
    let _s = serial();
    let device = gpu();
    let n = 1_000_000;
    let values: Vec<f32> = (0..n).map(|k| 0.1 + (k % 7) as f32 * 0.01).collect();
    let exact: f64 = values.iter().map(|&v| v as f64).sum();
    let x = Tensor::from_vec_on(values.clone(), &[n], device)
        .unwrap()
        .requires_grad();
    let before = tenjin::stats();
    let s = x.sum().unwrap();
    let launched = tenjin::stats().ptx_launches - before.ptx_launches;
    let e = tenjin::explain(&s).unwrap();
    assert_eq!(e.forward.len(), 2, "{e}");
    assert_eq!(e.forward[0].route, "block loop", "{e}");
    assert_eq!(e.forward[0].domain, [n.div_ceil(8192)], "{e}");
    assert!(e.forward[1].domain.is_empty(), "{e}");
    assert_eq!(launched, 2, "two launches for the sum");
    let first = s.item().unwrap();
    for _ in 0..3 {
        assert_eq!(x.sum().unwrap().item().unwrap().to_bits(), first.to_bits());
    }
    let rel = (first - exact).abs() / exact;
    assert!(rel <= 1e-7, "f32 sum {first}, exact {exact}: {rel:e}");
    let cpu = Tensor::from_vec(values, &[n]).unwrap().sum().unwrap();
    let cpu_rel = (cpu.item().unwrap() - exact).abs() / exact;
    assert!(
        rel <= cpu_rel.max(6e-8),
        "{rel:e} against the CPU's {cpu_rel:e}"
    );

    // f64: the CPU's sum within rounding; the max exact; a NaN propagates.
    let v64 = data(n, 3);
    let x64 = Tensor::from_vec_f64_on(v64.clone(), &[n], device)
        .unwrap()
        .requires_grad();
    let c64 = Tensor::from_vec_f64(v64.clone(), &[n]).unwrap();
    let (g, c) = (
        x64.sum().unwrap().item().unwrap(),
        c64.sum().unwrap().item().unwrap(),
    );
    assert!(
        (g - c).abs() <= 1e-12 * n as f64,
        "{g} on the device, {c} on the CPU"
    );
    let m = x64.max().unwrap();
    assert_eq!(tenjin::explain(&m).unwrap().forward[0].route, "block loop");
    assert_eq!(m.item().unwrap(), c64.max().unwrap().item().unwrap());
    let mut with_nan = v64;
    with_nan[n / 2 + 3] = f64::NAN;
    let x_nan = Tensor::from_vec_f64_on(with_nan, &[n], device).unwrap();
    assert!(x_nan.sum().unwrap().item().unwrap().is_nan());
    assert!(x_nan.max().unwrap().item().unwrap().is_nan());
}

/// Sums over several dimensions split into parallel stages too: the sum
/// of a whole matrix (a perfect nest, folded by each team as one flattened
/// range), a bias gradient (a column sum over batch and time, in blocks of
/// rows) and a batch of dot products (a loop kernel, not cuBLAS). Each
/// agrees with the CPU and repeats bit for bit.
#[test]
fn sums_over_several_dimensions_run_as_parallel_stages() {
    let _s = serial();
    let device = gpu();
    let x = leaf(&data(600 * 700, 11), &[600, 700], DType::F32, device);
    let total = x.sum().unwrap();
    let e = tenjin::explain(&total).unwrap();
    assert_eq!(e.forward.len(), 2, "{e}");
    assert_eq!(e.forward[0].route, "block loop", "{e}");
    assert!(e.forward[0].domain.iter().product::<usize>() > 1, "{e}");
    let first = total.item().unwrap();
    for _ in 0..2 {
        assert_eq!(x.sum().unwrap().item().unwrap().to_bits(), first.to_bits());
    }
    agree_within(
        "the sum of a matrix",
        [&[600, 700], &[1]],
        DType::F32,
        1e-6,
        |a, b| a.sum()?.mul(&b.sum()?),
    );
    // A nest whose innermost level is shorter than a team's stride (each
    // step carries through several levels), in f64 and in f32.
    for dtype in [DType::F64, DType::F32] {
        agree(
            "the sum of a [3, 5, 7, 11] tensor",
            [&[3, 5, 7, 11], &[1]],
            dtype,
            |a, b| a.sum()?.mul(&b.sum()?),
        );
    }
    // A bias gradient: Σ over batch and time of a [8, 256, 96] gradient.
    let dy = leaf(&data(8 * 256 * 96, 12), &[8, 256, 96], DType::F32, device);
    let db = dy.sum_dims(&[0, 1], false).unwrap();
    let e = tenjin::explain(&db).unwrap();
    assert_eq!(e.forward.len(), 2, "{e}");
    assert_eq!(e.forward[0].domain[1..], [96], "{e}");
    assert!(e.forward[0].domain[0] > 1, "{e}");
    agree_within(
        "a bias gradient",
        [&[8, 256, 96], &[96]],
        DType::F32,
        1e-6,
        |a, b| a.sum_dims(&[0, 1], false)?.mul(b),
    );
    agree(
        "a bias gradient in f64",
        [&[8, 256, 96], &[96]],
        DType::F64,
        |a, b| a.sum_dims(&[0, 1], false)?.mul(b),
    );
    // Dot products of columns (a layer norm's weight gradient).
    let a = leaf(&data(4096 * 64, 13), &[4096, 64], DType::F32, device);
    let dots = a.mul(&a).unwrap().sum_dims(&[0], false).unwrap();
    let e = tenjin::explain(&dots).unwrap();
    assert!(
        e.forward.iter().all(|s| !s.route.starts_with("gemm")),
        "{e}"
    );
    agree_within(
        "column dot products",
        [&[4096, 64], &[4096, 64]],
        DType::F32,
        1e-6,
        |a, b| a.mul(b)?.sum_dims(&[0], false),
    );
}

/// A contraction whose operands cuBLAS cannot take in one call reads them
/// from copies in a layout it can: a convolution's input gradient (the
/// weight's `K = (o, kh, kw)` has `c` in the middle) and attention scores
/// with the heads interleaved (`q[b; t; h; e]`: the batch `(b, h)` is no
/// uniform stride). Both are then GEMMs, and agree with the CPU.
#[test]
fn contraction_operands_are_copied_into_a_layout_cublas_takes() {
    let _s = serial();
    let y = agree(
        "conv2d",
        [&[2, 32, 8, 8], &[32, 32, 3, 3]],
        DType::F32,
        |x, w| x.conv2d(w, None, [1, 1], [1, 1], [1, 1], 1),
    );
    let e = tenjin::explain(&y).unwrap();
    let gemm_for = |role: &str| {
        e.backward
            .iter()
            .any(|s| s.role == role && s.route.starts_with("gemm"))
    };
    assert!(
        gemm_for("gradient of x") && gemm_for("gradient of w"),
        "{e}"
    );
    let scores = |q: &Tensor, k: &Tensor| {
        q.transpose(1, 2)?
            .matmul(&k.transpose(1, 2)?.transpose(2, 3)?)
    };
    let s = agree(
        "interleaved heads",
        [&[2, 16, 4, 16], &[2, 16, 4, 16]],
        DType::F32,
        scores,
    );
    let e = tenjin::explain(&s).unwrap();
    assert!(e.forward.iter().any(|s| s.route == "gemm"), "{e}");
    assert_eq!(e.forward.len(), 3, "two copies and one GEMM: {e}");
}

/// Row statistics over long rows (softmax, a row mean, their gradients)
/// spread over blocks agree with the CPU.
#[test]
fn long_rows_are_reduced_by_blocks_and_agree_with_the_cpu() {
    let _s = serial();
    agree_within(
        "long softmax",
        [&[4, 3000], &[4, 3000]],
        DType::F32,
        1e-6,
        |a, b| a.softmax(1)?.mul(b),
    );
    let x = leaf(&data(4 * 3000, 5), &[4, 3000], DType::F32, gpu());
    let e = tenjin::explain(&x.softmax(1).unwrap()).unwrap();
    let spread = |lines: &[tenjin::trace::StageLine]| lines.iter().any(|s| s.route == "block loop");
    assert!(spread(&e.forward) && spread(&e.backward), "{e}");
    // A GPU thread is one output element: a row statistic is its own
    // stage, never recomputed by every element of the row (the CPU hoists
    // it out of the column loop instead).
    for y in [
        x.softmax(1).unwrap(),
        x.layer_norm(1, None, None, 1e-5).unwrap(),
    ] {
        let e = tenjin::explain(&y).unwrap();
        for s in e.forward.iter().chain(&e.backward) {
            let reduces = ["sum{", "max{", "min{"]
                .iter()
                .any(|r| s.function.contains(r));
            assert!(!(s.domain == [4, 3000] && reduces), "{e}");
        }
    }
    agree(
        "long row means",
        [&[3, 5000], &[3, 1]],
        DType::F64,
        |a, b| a.mean_dims(&[1], true)?.mul(b),
    );
    // argmax and argmin over long rows keep the first of equal values and
    // of NaNs, as in order: rows with the extreme value twice, a row with
    // two NaNs, and a ±0 row.
    let (rows, n) = (4, 1000);
    let mut v: Vec<f64> = (0..rows * n).map(|k| ((k * 37) % 101) as f64).collect();
    v[700] = 500.0;
    v[900] = 500.0;
    v[n + 100] = -7.0;
    v[n + 650] = -7.0;
    v[2 * n + 800] = f64::NAN;
    v[2 * n + 300] = f64::NAN;
    v[3 * n..]
        .iter_mut()
        .enumerate()
        .for_each(|(k, x)| *x = if k % 3 == 0 { -0.0 } else { 0.0 });
    for dtype in [DType::F32, DType::F64] {
        let on = |device: Device| {
            Tensor::from_vec_f64_on(v.clone(), &[rows, n], device)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let (x, c) = (on(gpu()), on(Device::Cpu));
        for arg in [Tensor::argmax, Tensor::argmin] {
            let (g, want) = (arg(&x, 1, false).unwrap(), arg(&c, 1, false).unwrap());
            assert_eq!(
                g.to_vec_i64().unwrap(),
                want.to_vec_i64().unwrap(),
                "{dtype:?}"
            );
        }
        let (max, min) = (
            x.argmax(1, false).unwrap().to_vec_i64().unwrap(),
            x.argmin(1, false).unwrap().to_vec_i64().unwrap(),
        );
        assert_eq!([max[0], max[2], max[3]], [700, 300, 0]);
        assert_eq!([min[1], min[2], min[3]], [100, 300, 0]);
    }
}

/// A cross-entropy over rows of thousands of classes (a language model's
/// vocabulary): its gradient agrees with the CPU, bitwise from run to
/// run.
#[test]
fn a_cross_entropys_gradient_over_long_rows_agrees_with_the_cpu() {
    let _s = serial();
    let (rows, classes) = (1024, 4096);
    let values = data(rows * classes, 11);
    let targets: Vec<i64> = (0..rows as i64)
        .map(|r| (r * 7919) % classes as i64)
        .collect();
    let run = |device: Device| {
        let x = leaf(&values, &[rows, classes], DType::F32, device);
        let y = ids(&targets, &[rows], DType::I64, device);
        let loss = x.cross_entropy_with(&y, Default::default()).unwrap();
        loss.backward().unwrap();
        let grad = x.grad().unwrap().to_vec_f64().unwrap();
        (loss.to_vec_f64().unwrap(), grad)
    };
    let (lc, gc) = run(Device::Cpu);
    let (lg, gg) = run(gpu());
    close(&lg, &lc, 1e-6, "cross-entropy value");
    close(&gg, &gc, 1e-6, "cross-entropy gradient");
    assert!(run(gpu()).1 == gg, "the same bits from run to run");
}

/// Many rows of a few hundred elements (attention's, a transformer's layer
/// norms): a stage computes its rows' statistics and values together, a
/// team of threads per row, in one pass over memory (the statistics are
/// never stages of their own), and agrees with the CPU, bitwise from run
/// to run.
#[test]
fn many_rows_run_a_team_per_row_in_one_stage() {
    let _s = serial();
    let shape: &[usize] = &[2, 256, 300];
    for dtype in [DType::F32, DType::F64] {
        let tol = if dtype == DType::F64 { 1e-12 } else { 2e-6 };
        agree_within("softmax rows", [shape, shape], dtype, tol, |a, b| {
            a.softmax(2)?.mul(b)
        });
        agree_within("log_softmax rows", [shape, shape], dtype, tol, |a, b| {
            a.log_softmax(2)?.mul(b)
        });
        agree_within("layer norm rows", [shape, &[300]], dtype, tol, |a, w| {
            a.layer_norm(1, Some(w), Some(w), 1e-5)
        });
    }
    let x = leaf(&data(2 * 256 * 300, 5), shape, DType::F32, gpu());
    for (name, y) in [
        ("softmax", x.softmax(2).unwrap()),
        ("layer norm", x.layer_norm(1, None, None, 1e-5).unwrap()),
    ] {
        let e = tenjin::explain(&y).unwrap();
        assert_eq!(e.forward.len(), 1, "{name}: {e}");
        assert_eq!(e.forward[0].route, "block loop", "{name}: {e}");
        assert!(
            e.backward.iter().all(|s| s.domain == shape),
            "{name}: no statistic is a stage of its own: {e}"
        );
    }
    let seed = leaf(&data(2 * 256 * 300, 6), shape, DType::F32, gpu());
    let run = || {
        x.zero_grad();
        let y = x.softmax(2).unwrap().mul(&seed).unwrap().sum().unwrap();
        y.backward().unwrap();
        (
            y.to_vec_f64().unwrap(),
            x.grad().unwrap().to_vec_f64().unwrap(),
        )
    };
    let first = run();
    assert!(run() == first, "the same bits from run to run");
}

/// Attention's softmax over rows of a scaled score plus a mask: the
/// planner fuses the scale and the mask into the softmax's row kernel,
/// whose passes all start from `0.125 · s + mask`, computed once per
/// element into shared memory (`value_row`); values and gradients agree
/// with the CPU.
#[test]
fn a_scaled_masked_softmax_agrees_with_the_cpu() {
    let _s = serial();
    let shape: &[usize] = &[2, 256, 512];
    for dtype in [DType::F32, DType::F64] {
        let tol = if dtype == DType::F64 { 1e-12 } else { 2e-6 };
        agree_within(
            "scaled masked softmax",
            [shape, &[256, 512]],
            dtype,
            tol,
            |s, m| s.mul_scalar(0.125)?.add(m)?.softmax(2),
        );
    }
}

/// The gradient an addition passes on is the incoming one, shared, as in
/// PyTorch: its backward runs no kernel (`da = df` is no copy), and the
/// gradients are still each leaf's own (changing one in place, as
/// clipping does, leaves the other as it was).
#[test]
fn an_addition_passes_its_gradient_on_without_a_kernel() {
    let _s = serial();
    let device = gpu();
    let leaf = |seed| {
        Tensor::from_vec_on(
            data(4096, seed).iter().map(|&v| v as f32).collect(),
            &[64, 64],
            device,
        )
        .unwrap()
        .requires_grad()
    };
    let (x, y) = (leaf(1), leaf(2));
    let w = Tensor::from_vec_on(
        data(4096, 3).iter().map(|&v| v as f32).collect(),
        &[64, 64],
        device,
    )
    .unwrap();
    let loss = x.add(&y).unwrap().mul(&w).unwrap().sum().unwrap();
    let before = tenjin::stats();
    loss.backward().unwrap();
    let launched = tenjin::stats().ptx_launches - before.ptx_launches;
    // The seed, and the sum's broadcast with the product's gradient folded
    // into it (it reads the `w` the product saved): two launches, none for
    // the addition.
    assert_eq!(launched, 2, "{launched} launches");
    let want = w.to_vec_f64().unwrap();
    assert_eq!(x.grad().unwrap().to_vec_f64().unwrap(), want);
    assert_eq!(y.grad().unwrap().to_vec_f64().unwrap(), want);
    tenjin::nn::utils::clip_grad_value(std::slice::from_ref(&x), 0.5).unwrap();
    let clipped = x.grad().unwrap().to_vec_f64().unwrap();
    assert!(clipped.iter().all(|v| v.abs() <= 0.5));
    assert_eq!(y.grad().unwrap().to_vec_f64().unwrap(), want);
}

/// A convolution on the GPU: its columns (im2col) are laid out
/// `[c; kh; kw; n; y; x]`, so the forward and the weight gradient read the
/// forward's columns as they are, each in one cuBLAS call: the backward's
/// only stages as large as the columns are the input gradient's own
/// columns and the forward's (from the tape).
#[test]
fn a_convolutions_products_read_the_columns_where_they_are() {
    let _s = serial();
    let device = gpu();
    let t = |shape: &[usize], seed| {
        Tensor::randn(shape, DType::F32, seed)
            .unwrap()
            .to_device(device)
            .unwrap()
            .requires_grad()
    };
    let (x, w) = (t(&[2, 8, 6, 6], 1), t(&[8, 8, 3, 3], 2));
    let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1).unwrap();
    let e = tenjin::explain(&y).unwrap();
    let columns = 2 * 8 * 9 * 36;
    let large = |lines: &[tenjin::trace::StageLine]| -> Vec<tenjin::trace::StageLine> {
        lines
            .iter()
            .filter(|s| s.domain.iter().product::<usize>() >= columns)
            .cloned()
            .collect()
    };
    assert_eq!(large(&e.forward).len(), 1, "{e}");
    assert_eq!(e.forward[0].domain, [8, 3, 3, 2, 6, 6], "{e}");
    // No copy of the columns in another order: each large backward stage
    // is the forward's (from the tape) or a padded window of `dy`.
    for s in large(&e.backward) {
        assert!(
            s.role.contains("forward stage") || s.function.contains("if {"),
            "{e}"
        );
    }
    let dw = e
        .backward
        .iter()
        .find(|s| s.role == "gradient of w")
        .unwrap();
    assert_eq!(dw.route, "gemm", "{e}");
}

/// A reshape's output is its input's storage reinterpreted, so its
/// gradient is the incoming one, reinterpreted: the backward of a
/// reshape launches nothing (it used to run a kernel decomposing every
/// flat index), and the gradient is the same as without it.
#[test]
fn a_reshape_passes_its_gradient_on_without_a_kernel() {
    let _s = serial();
    let device = gpu();
    // The reshape's backward alone: with fusion, `mul_scalar` would be
    // computed inside `mul` without the reshape and not with it.
    tenjin::set_fusion(device, false);
    let on = |v: Vec<f64>, shape: &[usize]| {
        Tensor::from_vec_on(v.iter().map(|&v| v as f32).collect(), shape, device).unwrap()
    };
    let x = on(data(96, 4), &[8, 12]).requires_grad();
    let w = on(data(96, 5), &[8, 12]);
    let run = |reshape: bool| {
        x.zero_grad();
        let y = x.mul_scalar(2.0).unwrap();
        let loss = if reshape {
            let w = w.reshape(&[4, 24]).unwrap();
            y.reshape(&[4, 24]).unwrap().mul(&w).unwrap().sum().unwrap()
        } else {
            y.mul(&w).unwrap().sum().unwrap()
        };
        let before = tenjin::stats();
        loss.backward().unwrap();
        let launched = tenjin::stats().ptx_launches - before.ptx_launches;
        (launched, x.grad().unwrap().to_vec_f64().unwrap())
    };
    let (plain, want) = run(false);
    let (reshaped, got) = run(true);
    tenjin::set_fusion(device, true);
    assert_eq!(
        reshaped, plain,
        "{reshaped} launches with the reshape, {plain} without"
    );
    assert_eq!(got, want);
    let twice: Vec<f64> = w.to_vec_f64().unwrap().iter().map(|v| 2.0 * v).collect();
    assert_eq!(got, twice);
}

/// With profiling on, every kernel and GEMM the device runs is timed
/// between two marks of its stream (events on a GPU, nothing waiting for
/// it) and reported per kernel once asked: a product and an element-wise
/// op over it, run three times, are rows of three calls each with a
/// positive time.
#[test]
fn the_profile_times_each_kernel_between_marks_of_the_stream() {
    let _s = serial();
    let device = gpu();
    let a = Tensor::randn(&[48, 32], DType::F32, 5)
        .unwrap()
        .to_device(device)
        .unwrap();
    let b = Tensor::randn(&[32, 40], DType::F32, 6)
        .unwrap()
        .to_device(device)
        .unwrap();
    tenjin::cuda::set_profiling(true);
    let _ = tenjin::cuda::profile_report(true);
    for _ in 0..3 {
        a.matmul(&b).unwrap().exp().unwrap().realize().unwrap();
    }
    let report = tenjin::cuda::profile_report(true);
    tenjin::cuda::set_profiling(false);
    let row = |kind: &str| -> (u64, f64) {
        let line = report
            .lines()
            .find(|l| l.contains(kind))
            .unwrap_or_else(|| panic!("no {kind} row in\n{report}"));
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        (cells[2].parse().unwrap(), cells[1].parse().unwrap())
    };
    for kind in ["gemm nn", "loop [48, 40]"] {
        let (calls, ms) = row(kind);
        assert!(
            calls == 3 && ms > 0.0,
            "{kind}: {calls} calls, {ms} ms\n{report}"
        );
    }
    assert!(
        !tenjin::cuda::profile_report(true).contains("gemm"),
        "reset"
    );
}

/// `emb[:, t]` of a table that takes a gradient, on the device: a step at
/// a new `t` compiles nothing, its gradient is added into the table's in
/// one launch (not one per row), and the gradient is the CPU's.
#[test]
fn a_time_step_of_a_table_places_its_gradient_in_one_launch() {
    let _s = serial();
    let device = gpu();
    let values = data(64 * 12 * 8, 21);
    let on = |d| leaf(&values, &[64, 12, 8], DType::F64, d);
    let (emb, emb_cpu) = (on(device), on(Device::Cpu));
    let step = |emb: &Tensor, t: usize| {
        let x = emb.narrow(1, t, 1).unwrap().squeeze(1).unwrap();
        x.mul(&x).unwrap().sum().unwrap().backward().unwrap();
    };
    for t in 0..3 {
        step(&emb, t);
        step(&emb_cpu, t);
    }
    let before = tenjin::stats();
    step(&emb, 5);
    let after = tenjin::stats();
    step(&emb_cpu, 5);
    assert_eq!(after.kernels_compiled, before.kernels_compiled);
    assert_eq!(after.derivations, before.derivations);
    let launched = after.ptx_launches - before.ptx_launches;
    assert!(
        launched < 16,
        "{launched} launches for a step over 64 rows: placed row by row?"
    );
    let (g, want) = (emb.grad().unwrap(), emb_cpu.grad().unwrap());
    close(
        &g.to_device(Device::Cpu).unwrap().to_vec_f64().unwrap(),
        &want.to_vec_f64().unwrap(),
        1e-12,
        "the table's gradient",
    );
}
