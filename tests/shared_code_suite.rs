//! Every loop kernel the op/gradcheck, tape, nn/optim and staged
//! (cheap-gradient functions) suites run — forward kernels, derivatives and optimizer updates —
//! compiled twice more and run on the same inputs: with its sizes
//! compiled in and with them read when called (the code every later size
//! of an op shares, issue 28), required equal bit for bit
//! (`common/shared_code_check.rs`). The suites are included unchanged;
//! the check is installed before any test starts.
//!
//! Run it with `--test-threads=1`: the included suites assert on
//! process-wide statistics, which tests of another suite running at the
//! same time would change. The kernel observer exists in builds with the
//! `cuda` feature (`cargo test --release --features cuda --test
//! shared_code_suite -- --test-threads=1`); no GPU is needed.
#![cfg(feature = "cuda")]

#[path = "common/shared_code_check.rs"]
mod shared_code_check;

#[path = "ops_gradcheck.rs"]
mod ops_gradcheck;

#[path = "nn_optim.rs"]
mod nn_optim;

#[path = "tape.rs"]
mod tape;

/// The cheap-gradient functions (`common/user_functions.rs`), staged.
#[path = "staged.rs"]
mod staged;

#[ctor::ctor]
fn install_check() {
    shared_code_check::install();
}

/// Runs last (alphabetically, with one test thread): how much was checked,
/// and that the check ran on kernels with constants to read.
#[test]
fn zz_summary() {
    use std::sync::atomic::Ordering::Relaxed;
    let (kernels, lifted) = (
        shared_code_check::KERNELS.load(Relaxed),
        shared_code_check::LIFTED.load(Relaxed),
    );
    eprintln!(
        "shared-code check: {kernels} distinct loop kernels, {} runs compared bit for bit ({lifted} with constants read when called)",
        shared_code_check::CHECKED.load(Relaxed),
    );
    assert!(lifted > 0, "no kernel with constants to read was checked");
}
