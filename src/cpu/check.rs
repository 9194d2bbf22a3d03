//! One loop kernel run on the CPU with its constants compiled in, or read
//! when called (`Kernel::with_run_time_constants`: the code a new size of
//! an op shares), for the suites that hold the two bit for bit
//! (`tests/shared_code_suite.rs`). Not part of the API.
//!
//! Owns [`run_loop_kernel`]. Must not cache or share code: each call
//! compiles what it runs.

use super::codegen;
use super::compiled::JitCode;
use crate::kernel::Kernel;
use crate::{DType, Error};

/// Runs `k` (a loop kernel planned for the CPU) on `inputs` (values of
/// `dtype`, given as f64) into an output of `out_len` elements filled
/// with NaN first, on the calling thread over the whole parallel loop;
/// `read_at_run_time` compiles the kernel lifted, its constants passed
/// when called. Returns the output as f64.
#[doc(hidden)]
pub fn run_loop_kernel(
    k: &Kernel,
    dtype: DType,
    inputs: &[Vec<f64>],
    out_len: usize,
    read_at_run_time: bool,
) -> Result<Vec<f64>, Error> {
    let kernel = if read_at_run_time {
        k.with_run_time_constants()
    } else {
        k.clone()
    };
    if inputs.len() != kernel.args.len() {
        return Err(Error::Invalid {
            function: kernel.name.clone(),
            message: format!(
                "{} inputs for {} arguments",
                inputs.len(),
                kernel.args.len()
            ),
        });
    }
    let constants: Vec<i64> = kernel.params.iter().map(|p| p.1).collect();
    let code = JitCode::new(codegen::compile(&kernel, dtype)?);
    match dtype {
        DType::F32 => {
            let typed: Vec<Vec<f32>> = inputs
                .iter()
                .map(|v| v.iter().map(|&x| x as f32).collect())
                .collect();
            let mut out = vec![f32::NAN; out_len];
            // SAFETY: the buffers have the lengths the kernel declares.
            unsafe {
                call(
                    &code,
                    &kernel,
                    &typed,
                    &constants,
                    out.as_mut_ptr() as *mut u8,
                )
            };
            Ok(out.into_iter().map(f64::from).collect())
        }
        DType::F64 => {
            let mut out = vec![f64::NAN; out_len];
            // SAFETY: as above.
            unsafe {
                call(
                    &code,
                    &kernel,
                    inputs,
                    &constants,
                    out.as_mut_ptr() as *mut u8,
                )
            };
            Ok(out)
        }
        d => Err(crate::dtype::not_computable(&kernel.name, d)),
    }
}

/// # Safety
/// `inputs` and `out` have the lengths `kernel` declares.
unsafe fn call<T>(
    code: &JitCode,
    kernel: &Kernel,
    inputs: &[Vec<T>],
    constants: &[i64],
    out: *mut u8,
) {
    let mut args: Vec<*const u8> = inputs.iter().map(|v| v.as_ptr() as *const u8).collect();
    if !constants.is_empty() {
        args.push(constants.as_ptr() as *const u8);
    }
    if kernel.extent > 0 {
        // SAFETY: see the function's contract; one call covers every row.
        unsafe { (code.entry)(args.as_ptr(), out, 0, kernel.extent as i64) };
    }
}
