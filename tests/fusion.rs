//! Fusion across ops (`tenjin::set_fusion`): element-wise results are
//! deferred and computed inside the kernel of the op that reads them.
//!
//! On the simulated GPU (where fusion is on by default): the attention
//! scores' scale and mask run inside the softmax's kernels after the
//! GEMM; values and gradients agree with the unfused
//! ops on the CPU; a deferred result keeps the values its inputs had when
//! it was made, even when one is written in place before it is read; one
//! dropped unread never runs; gradients of fused intermediates and second
//! derivatives are the unfused ones. Backward, a pointwise gradient step
//! (a scale's, a negation's) folds into the step producing its input (a
//! softmax's backward kernel, a GEMM's scale), and only where no other
//! gradient is summed into that input. On the CPU with fusion turned on, the
//! same functions give the same values and gradients in f64.
//!
//! `TENJIN_GPU_TESTS=cuda` runs the device tests on a real GPU.

mod common;

use common::{assert_close, gpu};
use tenjin::optim::{Optimizer, SgdConfig, SGD};
use tenjin::{DType, Device, Error, Tensor};

/// The tests one at a time: they count launches and switch fusion.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// PTX launches and cuBLAS calls so far.
fn launches() -> u64 {
    let s = tenjin::stats();
    s.ptx_launches + s.cublas_calls
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    Tensor::randn(&[n], DType::F64, seed)
        .unwrap()
        .to_vec_f64()
        .unwrap()
}

fn leaf(v: &[f64], shape: &[usize], device: Device) -> Tensor {
    Tensor::from_vec_f64_on(v.to_vec(), shape, device)
        .unwrap()
        .requires_grad()
}

/// Attention scores as a user writes them: a GEMM, a scale, a mask, a
/// softmax.
fn scores(q: &Tensor, k: &Tensor, mask: &Tensor) -> Result<Tensor, Error> {
    q.matmul(&k.transpose(1, 2)?)?
        .mul_scalar(0.25)?
        .add(mask)?
        .softmax(2)
}

/// The value, the gradients of `q` and `k` (seeded with `seed`), and the
/// kernels launched by the forward and the backward pass.
type Run = (Vec<f64>, Vec<f64>, Vec<f64>, u64, u64);

fn attention_scores(device: Device) -> Run {
    let (b, t, e) = (2, 8, 4);
    let q = leaf(&values(b * t * e, 1), &[b, t, e], device);
    let k = leaf(&values(b * t * e, 2), &[b, t, e], device);
    let mut m = vec![0.0; t * t];
    (0..t).for_each(|i| (i + 1..t).for_each(|j| m[i * t + j] = -1e9));
    let mask = Tensor::from_vec_f64_on(m, &[t, t], device).unwrap();
    let seed = Tensor::from_vec_f64_on(values(b * t * t, 3), &[b, t, t], device).unwrap();
    let before = launches();
    let p = scores(&q, &k, &mask).unwrap();
    let value = p.to_vec_f64().unwrap();
    let forward = launches() - before;
    let loss = p.mul(&seed).unwrap().sum().unwrap();
    loss.item().unwrap();
    let before = launches();
    loss.backward().unwrap();
    let dq = q.grad().unwrap().to_vec_f64().unwrap();
    let dk = k.grad().unwrap().to_vec_f64().unwrap();
    (value, dq, dk, forward, launches() - before)
}

#[test]
fn scale_mask_and_softmax_run_as_one_kernel_after_the_gemm() {
    let _s = serial();
    let device = gpu();
    assert!(tenjin::fusion(device), "fusion is on by default on GPUs");
    let cpu = attention_scores(Device::Cpu);
    attention_scores(device); // compiles
    let fused = attention_scores(device);
    tenjin::set_fusion(device, false);
    attention_scores(device);
    let unfused = attention_scores(device);
    tenjin::set_fusion(device, true);
    assert_close("softmax", &fused.0, &cpu.0, 1e-12);
    assert_close("dq", &fused.1, &cpu.1, 1e-12);
    assert_close("dk", &fused.2, &cpu.2, 1e-12);
    assert_close("softmax, unfused", &unfused.0, &cpu.0, 1e-12);
    // Forward: the GEMM and the softmax's kernels; the scale and the mask
    // no longer run as kernels of their own.
    assert_eq!(
        fused.3 + 2,
        unfused.3,
        "forward launches: {} fused, {} unfused",
        fused.3,
        unfused.3
    );
    // Backward: each op's derivative, nothing recomputed (the softmax's
    // reads its output, the mask's passes the gradient on), the scale's
    // folded into the softmax's kernel, and the loss's product with the
    // seed (reading the seed it saved) into the sum's broadcast.
    assert_eq!(
        fused.4 + 2,
        unfused.4,
        "backward launches: {} fused, {} unfused",
        fused.4,
        unfused.4
    );
}

#[test]
fn a_deferred_result_keeps_the_values_its_inputs_had() {
    let _s = serial();
    let device = gpu();
    let w = leaf(&[1.0, -2.0, 3.0], &[3], device);
    let doubled = w.mul_scalar(2.0).unwrap();
    // An SGD step writes `w` in place before `doubled` is read.
    let mut opt = SGD::new(
        vec![w.clone()],
        SgdConfig {
            lr: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    w.mul(&w).unwrap().sum().unwrap().backward().unwrap();
    opt.step().unwrap();
    assert_eq!(w.to_vec_f64().unwrap(), vec![0.0, 0.0, 0.0]);
    assert_eq!(doubled.to_vec_f64().unwrap(), vec![2.0, -4.0, 6.0]);
}

#[test]
fn a_deferred_result_dropped_unread_never_runs() {
    let _s = serial();
    let device = gpu();
    let x = Tensor::from_vec_f64_on(values(64, 4), &[64], device).unwrap();
    x.exp().unwrap().to_vec_f64().unwrap(); // compiles
    let before = launches();
    let deferred = tenjin::stats().ops_deferred;
    let y = x.exp().unwrap();
    assert_eq!(launches(), before, "deferred: nothing launched yet");
    assert_eq!(tenjin::stats().ops_deferred, deferred + 1);
    drop(y);
    assert_eq!(launches(), before, "dropped unread: never launched");
    let y = x.exp().unwrap().tanh().unwrap();
    let v = y.to_vec_f64().unwrap();
    assert_eq!(launches(), before + 1, "exp and tanh in one kernel");
    let want: Vec<f64> = values(64, 4).iter().map(|a| a.exp().tanh()).collect();
    assert_close("tanh(exp(x))", &v, &want, 1e-15);
    y.to_vec_f64().unwrap();
    assert_eq!(launches(), before + 1, "a settled result runs no more");
}

/// The trace is the ops' as written: the gradient of an intermediate that
/// was computed inside its reader's kernel, and second derivatives through
/// fused ops, are the unfused ones.
#[test]
fn intermediates_keep_their_gradients_and_second_derivatives() {
    let _s = serial();
    let device = gpu();
    let run = |fuse: bool| {
        tenjin::set_fusion(device, fuse);
        let x = leaf(&values(48, 5), &[4, 12], device);
        let c = leaf(&values(12, 6), &[12], device);
        let fused_before = tenjin::stats().ops_fused;
        let h = x.mul_scalar(1.5).unwrap().add(&c).unwrap();
        let y = h.log_softmax(1).unwrap().tanh().unwrap().sum().unwrap();
        // `add` takes in `mul_scalar`, `log_softmax` both.
        let fused_ops = tenjin::stats().ops_fused - fused_before;
        assert_eq!(fused_ops >= 2, fuse, "{fused_ops} ops fused");
        let dh = tenjin::autograd::grad(&[&y], &[&h], None, false).unwrap();
        let g = tenjin::autograd::grad(&[&y], &[&x], None, true).unwrap();
        let ggx = tenjin::autograd::grad(&[&g[0].sum().unwrap()], &[&x], None, false).unwrap();
        [&dh[0], &g[0], &ggx[0]].map(|t| t.to_vec_f64().unwrap())
    };
    let fused = run(true);
    let unfused = run(false);
    tenjin::set_fusion(device, true);
    for (k, what) in ["dy/dh", "dy/dx", "d(sum dy/dx)/dx"].iter().enumerate() {
        assert_close(what, &fused[k], &unfused[k], 1e-12);
    }
}

/// On the CPU, with fusion turned on: f64 values and gradients of fused
/// chains equal the unfused ones (the same operations in the same order).
#[test]
fn fused_chains_on_the_cpu_match_the_unfused_ones() {
    let _s = serial();
    let run = |fuse: bool| {
        tenjin::set_fusion(Device::Cpu, fuse);
        let x = leaf(&values(60, 7), &[6, 10], Device::Cpu);
        let c = leaf(&values(10, 8), &[10], Device::Cpu);
        let y = x
            .mul_scalar(0.5)
            .unwrap()
            .add(&c)
            .unwrap()
            .tanh()
            .unwrap()
            .log_softmax(1)
            .unwrap();
        let g = Tensor::from_vec_f64(values(60, 9), &[6, 10]).unwrap();
        y.mul(&g).unwrap().sum().unwrap().backward().unwrap();
        [
            y.to_vec_f64().unwrap(),
            x.grad().unwrap().to_vec_f64().unwrap(),
            c.grad().unwrap().to_vec_f64().unwrap(),
        ]
    };
    let fused = run(true);
    let unfused = run(false);
    for (k, what) in ["y", "dx", "dc"].iter().enumerate() {
        assert_close(what, &fused[k], &unfused[k], 1e-14);
    }
}

/// Backward launches and the gradients of `x` and `w` for
/// `Σ seed · φ(x, w)` on `device`.
fn backward_of(
    device: Device,
    phi: impl Fn(&Tensor, &Tensor) -> Result<Tensor, Error>,
) -> (u64, Vec<f64>, Vec<f64>) {
    let x = leaf(&values(24, 11), &[4, 6], device);
    let w = leaf(&values(36, 12), &[6, 6], device);
    let y = phi(&x, &w).unwrap();
    let seed = Tensor::from_vec_f64_on(values(24, 13), &[4, 6], device).unwrap();
    let loss = y.mul(&seed).unwrap().sum().unwrap();
    loss.item().unwrap();
    let before = launches();
    loss.backward().unwrap();
    let dx = x.grad().unwrap().to_vec_f64().unwrap();
    (
        launches() - before,
        dx,
        w.grad().unwrap().to_vec_f64().unwrap(),
    )
}

/// Backward launches with fusion on and off (after a run of each that
/// compiles), checking both runs' gradients against the CPU's unfused
/// ones.
fn folded_launches(
    what: &str,
    phi: impl Fn(&Tensor, &Tensor) -> Result<Tensor, Error> + Copy,
) -> (u64, u64) {
    let device = gpu();
    tenjin::set_fusion(Device::Cpu, false);
    let (_, cx, cw) = backward_of(Device::Cpu, phi);
    let mut counts = [0; 2];
    for (k, on) in [true, false].into_iter().enumerate() {
        tenjin::set_fusion(device, on);
        backward_of(device, phi);
        let (n, dx, dw) = backward_of(device, phi);
        assert_close(&format!("{what}: dx, fusion {on}"), &dx, &cx, 1e-12);
        assert_close(&format!("{what}: dw, fusion {on}"), &dw, &cw, 1e-12);
        counts[k] = n;
    }
    tenjin::set_fusion(device, true);
    (counts[0], counts[1])
}

#[test]
fn pointwise_gradients_fold_into_the_step_producing_their_input() {
    let _s = serial();
    // A GEMM's gradient scaled: `3 · (dy · wᵀ)` is one GEMM call with
    // scale 3.
    // (Every loss here is `Σ seed · φ`: the product with the seed, which
    // reads the seed it saved, folds into the sum's broadcast, one launch
    // less in each count below.)
    let (on, off) = folded_launches("scale before a GEMM", |x, w| x.mul_scalar(3.0)?.matmul(w));
    assert_eq!(on + 2, off, "GEMM scale: {on} launches folded, {off} not");
    // Two pointwise steps after a softmax's backward: both fold into it,
    // through the reshape's pass between them.
    let (on, off) = folded_launches("negate, reshape, scale", |x, w| {
        x.matmul(w)?
            .reshape(&[24])?
            .neg()?
            .mul_scalar(0.5)?
            .reshape(&[4, 6])?
            .softmax(1)
    });
    assert_eq!(on + 3, off, "two folds: {on} launches folded, {off} not");
    // A scaled value read twice: its gradient is a sum of two, which the
    // scale's step reads whole, so the scale does not fold (the second
    // term adds itself to the first: one launch less, and no more).
    let (on, off) = folded_launches("scale read twice", |x, w| {
        let z = x.matmul(w)?.mul_scalar(2.0)?;
        z.exp()?.add(&z.sin()?)
    });
    assert_eq!(
        on + 2,
        off,
        "a summed gradient: {on} launches folded, {off} not"
    );
}

/// Gradient steps that read saved values as well as the incoming
/// gradient, element for element (`tanh`'s `(1 − y²)·df`, a product's
/// `seed·df`), fold into the step computing that gradient: the whole
/// chain's backward before the GEMMs is one kernel.
#[test]
fn element_wise_gradient_steps_reading_saved_values_fold_into_their_producer() {
    let _s = serial();
    let (on, off) = folded_launches("a chain after a GEMM", |x, w| {
        x.matmul(w)?.tanh()?.sigmoid()?.mul_scalar(0.5)?.exp()
    });
    // The seed's product, exp, the scale, sigmoid and tanh all fold into
    // the sum's broadcast; the GEMMs stay.
    assert_eq!(on + 5, off, "a chain: {on} launches folded, {off} not");
    // A step whose producer delivers to two nodes (an addition passes one
    // gradient to both of its inputs) does not fold: it would be computed
    // twice. The seed's product folds, and the second term of `y`'s
    // gradient adds itself to the first.
    let (on, off) = folded_launches("two readers", |x, w| {
        let y = x.matmul(w)?;
        y.tanh()?.add(&y.sigmoid()?)
    });
    assert_eq!(on + 2, off, "two readers: {on} launches folded, {off} not");
}

/// A leaf read by several element-wise ops: every term of its gradient
/// after the first is added by the kernel computing it, also when the
/// term reaches the leaf through a folded step that passes it on.
#[test]
fn a_leafs_gradient_terms_are_added_by_the_kernels_computing_them() {
    let _s = serial();
    let device = gpu();
    let phi = |x: &Tensor| -> Result<Tensor, Error> {
        let y = x.tanh()?.mul(&x.mul_scalar(2.0)?.sigmoid()?)?;
        y.add(&x.mul(x)?.div(&x.neg()?.exp()?.add_scalar(1.0)?)?)
    };
    let run = |device: Device| {
        let x = leaf(&values(64, 21), &[8, 8], device);
        let seed = Tensor::from_vec_f64_on(values(64, 22), &[8, 8], device).unwrap();
        let loss = phi(&x).unwrap().mul(&seed).unwrap().sum().unwrap();
        loss.item().unwrap();
        let before = launches();
        loss.backward().unwrap();
        let dx = x.grad().unwrap().to_vec_f64().unwrap();
        (launches() - before, dx)
    };
    tenjin::set_fusion(Device::Cpu, false);
    let (_, want) = run(Device::Cpu);
    let mut counts = [0; 2];
    for (k, on) in [true, false].into_iter().enumerate() {
        tenjin::set_fusion(device, on);
        run(device);
        let (n, dx) = run(device);
        assert_close(&format!("dx, fusion {on}"), &dx, &want, 1e-12);
        counts[k] = n;
    }
    tenjin::set_fusion(device, true);
    // Five terms reach `x` (tanh's, sigmoid's through the scale, the two
    // of `x * x`, exp's through the negation). Unfused: a kernel per
    // gradient step and four additions into `x`'s gradient, 18 launches.
    // Folded: the chains' steps run inside their producers, and each term
    // after the first is added by its kernel, 8.
    let [on, off] = counts;
    assert_eq!((on, off), (8, 18), "launches folded, unfused");
    assert_eq!(off, 18, "{off} launches unfused");
}

/// A gradient summed from several terms: each term after the first is
/// added by the kernel computing it (over the sum so far, in place), not
/// by an addition of its own.
#[test]
fn a_gradient_term_is_added_by_the_kernel_computing_it() {
    let _s = serial();
    let (on, off) = folded_launches("two terms", |x, w| {
        let y = x.matmul(w)?;
        y.tanh()?.add(&y.exp()?)
    });
    assert_eq!(on + 2, off, "one sum: {on} launches folded, {off} not");
    // A residual stream: the layer norm's input gradient is added to the
    // gradient the residual passes on.
    let (on, off) = folded_launches("residual", |x, w| {
        let z = x.matmul(w)?;
        z.add(&z.layer_norm(1, None, None, 1e-5)?.mul_scalar(2.0)?)
    });
    assert!(on < off, "residual: {on} launches folded, {off} not");
}

/// On the GPU a term of a sum that a GEMM computes is added by the GEMM
/// itself (`beta = 1` over the sum so far): the input that three
/// projections share gets its gradient with no addition of its own.
#[test]
fn a_gemm_adds_its_term_of_a_sum_with_beta() {
    let _s = serial();
    let (on, off) = folded_launches("three projections", |x, w| {
        let h = x.tanh()?;
        let (a, b, c) = (h.matmul(w)?, h.matmul(&w.cos()?)?, h.matmul(&w.exp()?)?);
        a.mul(&b)?.add(&c)
    });
    assert!(on + 2 <= off, "GEMM terms: {on} launches folded, {off} not");
    // A product plus an argument written by hand: one cuBLAS call over a
    // copy of the argument, the CPU's values.
    let run = |device: Device| {
        let t = |n: usize, shape: &[usize], seed: u64| leaf(&values(n, seed), shape, device);
        let (a, b, c) = (t(24, &[4, 6], 21), t(30, &[6, 5], 22), t(20, &[4, 5], 23));
        let before = launches();
        let y = tenjin::index_fn(
            "f[i; j] = sum{k}_0^5 (a[i; k] * b[k; j]) + c[i; j]",
            &[("a", &a), ("b", &b), ("c", &c)],
        )
        .unwrap();
        (y.to_vec_f64().unwrap(), launches() - before)
    };
    let (gpu_values, calls) = run(gpu());
    assert_close("Σ a·b + c", &gpu_values, &run(Device::Cpu).0, 1e-12);
    assert_eq!(calls, 1, "one cuBLAS call, no epilogue kernel");
}
