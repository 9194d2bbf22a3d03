//! Kernels for the CPU backend's unit tests: lowered from a line of
//! index-function text, their element-wise loops marked as the planner
//! would mark them, compiled at a chosen width and run over cuts of the
//! parallel loop as the thread pool would cut it.

use super::codegen::compile_at;
use super::wide::Width;
use crate::kernel::{Kernel, Stmt};
use crate::symbolic::IndexFn;
use crate::DType;

/// Marks the innermost output loops vector loops, as the planner marks an
/// element-wise body.
pub(crate) fn mark_innermost(stmts: &mut [Stmt]) {
    for s in stmts {
        if let Stmt::For(l) = s {
            if l.body.iter().any(|b| matches!(b, Stmt::For(_))) {
                mark_innermost(&mut l.body);
            } else {
                l.vector = true;
            }
        }
    }
}

pub(crate) fn kernel(src: &str, shapes: &[(&str, &[usize])]) -> Kernel {
    let f = IndexFn::parse(src, shapes).unwrap();
    let mut k = crate::kernel::lower(&f).unwrap();
    mark_innermost(&mut k.body);
    k
}

/// What a run of [`run_at`] gives.
pub(crate) struct Ran {
    pub(crate) out: Vec<f32>,
    /// Loops on the wide executor.
    pub(crate) wide_loops: u32,
    /// Some output loop ran as vector code.
    pub(crate) vectorized: bool,
}

/// Runs `k` compiled at `width` on `args`, the parallel loop cut at
/// `cuts`.
pub(crate) fn run_at(k: &Kernel, args: &[&[f32]], width: Width, cuts: &[usize]) -> Ran {
    let code = compile_at(k, DType::F32, width).unwrap();
    let mut out = vec![f32::NAN; k.out_len()];
    let ptrs: Vec<*const u8> = args.iter().map(|a| a.as_ptr() as *const u8).collect();
    let mut bounds = vec![0];
    bounds.extend(cuts.iter().copied().filter(|&c| c > 0 && c < k.extent));
    bounds.push(k.extent);
    for w in bounds.windows(2) {
        // SAFETY: buffers of the kernel's declared lengths, rows in range.
        unsafe {
            (code.entry)(
                ptrs.as_ptr(),
                out.as_mut_ptr() as *mut u8,
                w[0] as i64,
                w[1] as i64,
            )
        };
    }
    let (wide_loops, vectorized) = (code.wide_loops, code.vectorized);
    // SAFETY: the entry is not used afterwards.
    unsafe { code.module.free_memory() };
    Ran {
        out,
        wide_loops,
        vectorized,
    }
}
