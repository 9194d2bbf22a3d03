//! The emitted PTX of every kernel the op/gradcheck, tape and nn/optim
//! suites run — forward kernels, derivatives and optimizer updates — run
//! in the test-only PTX interpreter and compared with the CPU backend
//! (`common/ptx_check.rs`). The suites are included here unchanged; the
//! check is installed before any test starts.
//!
//! Run it with `--test-threads=1`: the included suites assert on
//! process-wide statistics, which tests of another suite running at the
//! same time would change.
//!
//! With `TENJIN_PTX_DUMP=dir`, every module is also written to `dir` for
//! every architecture: `.ci/run` assembles them all with `ptxas`.
#![cfg(feature = "cuda")]

#[path = "common/ptx_check.rs"]
mod ptx_check;

#[path = "ops_gradcheck.rs"]
mod ops_gradcheck;

#[path = "nn_optim.rs"]
mod nn_optim;

#[path = "tape.rs"]
mod tape;

#[ctor::ctor]
fn install_check() {
    ptx_check::install();
}

#[test]
fn the_check_runs_on_every_kernel() {
    let before = ptx_check::OBSERVED.load(std::sync::atomic::Ordering::Relaxed);
    let x = tenjin::Tensor::from_vec_f64(vec![1.0, -2.0, 3.0], &[3]).unwrap();
    let y = x.exp().unwrap().sum().unwrap();
    assert!((y.item().unwrap() - (1f64.exp() + (-2f64).exp() + 3f64.exp())).abs() < 1e-12);
    assert!(ptx_check::OBSERVED.load(std::sync::atomic::Ordering::Relaxed) >= before + 1);
}

/// Runs last (alphabetically, with one test thread): how much was checked.
#[test]
fn zz_summary() {
    use std::sync::atomic::Ordering::Relaxed;
    eprintln!(
        "PTX check: {} distinct kernels, {} runs compared, {} of them bit for bit; {} also on the GPU",
        ptx_check::KERNELS.load(Relaxed),
        ptx_check::CHECKED.load(Relaxed),
        ptx_check::BITWISE.load(Relaxed),
        ptx_check::GPU_CHECKED.load(Relaxed)
    );
}

/// The GPU backend's own kernels (fill, add into, every conversion, the
/// indexing ops' gather and scatter-add for both id types), for
/// every element type (the half types included: they run against the CPU
/// in `gpu_half.rs` and the simulator's own tests) and architecture, so `TENJIN_PTX_DUMP` hands them to
/// `ptxas` with the rest.
#[test]
fn every_builtin_module_is_emitted() {
    use tenjin::gpu::ptx::builtin::{module, Builtin};
    use tenjin::gpu::ptx::Arch;
    use tenjin::DType;
    let dtypes = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
    ];
    let mut n = 0;
    for arch in Arch::ALL {
        for dtype in dtypes {
            let mut all = vec![Builtin::Fill, Builtin::AddAssign];
            all.extend((0..=6).map(|rank| Builtin::AddStrided { rank }));
            all.extend(dtypes.map(|from| Builtin::Cast { from }));
            if dtype == DType::F32 {
                all.extend([DType::BF16, DType::F16].map(|half| Builtin::RoundToHalf { half }));
            }
            for ids in [DType::I32, DType::I64] {
                for along in [false, true] {
                    all.push(Builtin::Gather { ids, along });
                    // (Half gradients are summed in f32: no half scatter-add.)
                    if dtype.kernels_compute_in() {
                        all.push(Builtin::ScatterAdd { ids, along });
                    }
                }
            }
            for b in all {
                let text = module(b, dtype, arch);
                assert!(text.contains(".entry") && text.contains("ret;"), "{text}");
                n += 1;
            }
        }
    }
    // Per architecture: fill, add, 7 strided adds (ranks 0 to 6), 6 casts + 4 gathers per dtype, 4
    // scatter-adds per type kernels compute in, 2 roundings of f32 to
    // half values.
    assert_eq!(n, 3 * (6 * 19 + 2 * 4 + 2));
}
