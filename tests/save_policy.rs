//! Save policies (issue "Element-wise code as wide as the vector unit,
//! views that cost nothing, and a saving policy"): which forward values a
//! recorded op keeps for its backward pass. Under `Reductions` (memory-
//! efficient mode's default) a layer keeps its GEMM and recomputes only
//! element-wise values; `Nothing` recomputes the GEMM; `Everything` keeps
//! all. The bytes held between forward and backward follow the policy,
//! gradients are the same bits under every policy, and a scope chooses the
//! policy for one model and is restored after it, also on a panic.
//!
//! The allocator's mode and statistics are process-wide: every test holds
//! `SERIAL`.

use std::sync::{Mutex, MutexGuard};
use tenjin::alloc::{self, AllocMode};
use tenjin::{index_fn, save_policy, DType, SavePolicy, Tensor};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const B: usize = 64;
const I: usize = 48;
const O: usize = 32;
/// Bytes of the layer's output (and of its GEMM's value).
const OUT_BYTES: usize = B * O * 4;

/// A dense layer as one op, `h = relu(x·wᵀ + c)`: a GEMM stage and its
/// epilogue, whose backward reads the GEMM's value (the ReLU's mask).
fn layer(x: &Tensor, w: &Tensor, c: &Tensor) -> Result<Tensor, tenjin::Error> {
    let dense = format!(
        "h[b; o] = max(sum{{k}}_0^{} (x[b; k] * w[o; k]) + c[o], 0)",
        I - 1
    );
    index_fn(&dense, &[("x", x), ("w", w), ("c", c)])
}

fn params() -> (Tensor, Tensor, Tensor) {
    let x = Tensor::randn(&[B, I], DType::F32, 1).unwrap();
    let w = Tensor::randn(&[O, I], DType::F32, 2)
        .unwrap()
        .mul_scalar(0.2)
        .unwrap()
        .requires_grad();
    let c = Tensor::randn(&[O], DType::F32, 3).unwrap().requires_grad();
    (x, w, c)
}

/// Bytes held by the tape between forward and backward, and the bits of
/// the gradients, for the layer recorded under `policy` in `mode`.
fn held_and_grads(mode: AllocMode, policy: Option<SavePolicy>) -> (usize, Vec<Vec<u32>>) {
    alloc::set_mode(mode);
    alloc::empty_cache();
    let (x, w, c) = params();
    let before = alloc::stats().bytes_in_use;
    let h = match policy {
        Some(p) => save_policy(p, || layer(&x, &w, &c)),
        None => layer(&x, &w, &c),
    }
    .unwrap();
    // The output is the caller's: only what the tape holds beyond it
    // counts. Its 8 KiB are one block in both modes.
    let held = alloc::stats().bytes_in_use - before - OUT_BYTES;
    h.sum().unwrap().backward().unwrap();
    let bits = [&w, &c]
        .iter()
        .map(|t| {
            t.grad()
                .unwrap()
                .to_vec()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        })
        .collect();
    alloc::set_mode(AllocMode::RuntimeEfficient);
    (held, bits)
}

#[test]
fn the_policy_decides_what_a_layer_holds_and_never_the_gradient() {
    let _s = serial();
    let gemm_bytes = OUT_BYTES;
    assert_eq!(alloc::size_class(OUT_BYTES), Some(OUT_BYTES));
    let cases = [
        (AllocMode::RuntimeEfficient, None, gemm_bytes),
        (AllocMode::MemoryEfficient, None, gemm_bytes),
        (AllocMode::MemoryEfficient, Some(SavePolicy::Nothing), 0),
        (AllocMode::RuntimeEfficient, Some(SavePolicy::Nothing), 0),
        (
            AllocMode::MemoryEfficient,
            Some(SavePolicy::Everything),
            gemm_bytes,
        ),
    ];
    let mut first: Option<Vec<Vec<u32>>> = None;
    for (mode, policy, want) in cases {
        let (held, bits) = held_and_grads(mode, policy);
        assert_eq!(held, want, "{mode:?} {policy:?}");
        match &first {
            None => first = Some(bits),
            Some(f) => assert!(*f == bits, "{mode:?} {policy:?}: other gradient bits"),
        }
    }
}

#[test]
fn each_mode_defaults_to_its_policy() {
    assert_eq!(
        SavePolicy::of_mode(AllocMode::RuntimeEfficient),
        SavePolicy::Everything
    );
    assert_eq!(
        SavePolicy::of_mode(AllocMode::MemoryEfficient),
        SavePolicy::Reductions
    );
    assert_eq!(SavePolicy::default(), SavePolicy::Everything);
}

/// An element-wise value feeding a GEMM, `Σ_k tanh(2x[i; k] + 1)·w[k; j]`:
/// the backward reads `tanh(…)` (for `w`'s gradient). `Everything` keeps
/// it; `Reductions` and `Nothing` recompute it in one pass.
#[test]
fn element_wise_values_are_recomputed_under_reductions() {
    let _s = serial();
    let x = Tensor::randn(&[B, I], DType::F32, 4)
        .unwrap()
        .requires_grad();
    let w = Tensor::randn(&[I, O], DType::F32, 6)
        .unwrap()
        .requires_grad();
    let f = format!(
        "y[i; j] = sum{{k}}_0^{} (tanh (x[i; k] * 2 + 1) * w[k; j])",
        I - 1
    );
    let mut grads = Vec::new();
    for (policy, saved) in [
        (SavePolicy::Everything, true),
        (SavePolicy::Reductions, false),
        (SavePolicy::Nothing, false),
    ] {
        let y = save_policy(policy, || index_fn(&f, &[("x", &x), ("w", &w)])).unwrap();
        let e = tenjin::explain(&y).unwrap();
        let tanh_stage = e
            .forward
            .iter()
            .find(|l| l.route == "loop" && l.function.contains("tanh"))
            .unwrap_or_else(|| panic!("no element-wise stage:\n{e}"));
        let role = &tanh_stage.role;
        match saved {
            true => assert_eq!(role, "saved for backward", "{policy:?}\n{e}"),
            false => assert!(role.starts_with("recomputed"), "{policy:?}\n{e}"),
        }
        x.zero_grad();
        w.zero_grad();
        y.sum().unwrap().backward().unwrap();
        grads.push(w.grad().unwrap().to_vec().unwrap());
    }
    assert!(grads.iter().all(|g| *g == grads[0]));
}

#[test]
fn a_scope_nests_and_is_restored_after_a_panic() {
    let _s = serial();
    let x = Tensor::randn(&[B, I], DType::F32, 5).unwrap();
    let (_, w, c) = params();
    let role = |h: &Tensor| tenjin::explain(h).unwrap().forward[0].role.clone();
    alloc::set_mode(AllocMode::RuntimeEfficient);
    let (outer, inner, after_inner) = save_policy(SavePolicy::Nothing, || {
        let a = layer(&x, &w, &c).unwrap();
        let b = save_policy(SavePolicy::Everything, || layer(&x, &w, &c)).unwrap();
        let c2 = layer(&x, &w, &c).unwrap();
        (role(&a), role(&b), role(&c2))
    });
    assert!(outer.starts_with("recomputed"), "{outer}");
    assert_eq!(inner, "saved for backward");
    assert!(after_inner.starts_with("recomputed"), "{after_inner}");
    let caught = std::panic::catch_unwind(|| {
        save_policy(SavePolicy::Nothing, || panic!("inside the scope"));
    });
    assert!(caught.is_err());
    // Back to runtime-efficient mode's default.
    assert_eq!(role(&layer(&x, &w, &c).unwrap()), "saved for backward");
}
