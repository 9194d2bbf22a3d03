//! The CPU backend behind the runtime's [`Backend`] interface.
//!
//! Owns [`Cpu`]: compiling a planned route (Cranelift code for its loop
//! nests, a GEMM contraction, Winograd's convolution, or a host kernel as
//! it is) and the
//! buffer operations on host memory (fill, copy, add). Must not plan: it
//! compiles exactly the route it is given.

use super::code_cache::shared_code;
use super::compiled::{CpuKernel, Exec};
use super::gemm;
use crate::alloc::Device;
use crate::dtype::{with_element, Element};
use crate::kernel::backend::{
    check_len, check_same, Backend, Executable, Operand, OperandMut, Target,
};
use crate::kernel::Route;
use crate::{DType, Error};

/// The host CPU: kernels compiled with Cranelift and run on the worker
/// pool, over host memory.
#[derive(Debug, Default)]
pub struct Cpu;

/// The one CPU backend.
pub static CPU: Cpu = Cpu;

impl Cpu {
    /// `route` compiled for the host (the concrete form of
    /// [`Backend::compile`]).
    pub fn compile_route(&self, route: &Route, dtype: DType) -> Result<CpuKernel, Error> {
        if let Route::Loop(k)
        | Route::GemmThenLoop { kernel: k, .. }
        | Route::WinogradThenLoop { kernel: k, .. } = route
        {
            if !k.buffers.is_uniform() {
                // (Half tensors on the CPU are converted over slices around
                // the f32 kernels: `crate::ops::half`.)
                return Err(Error::Invalid {
                    function: k.name.clone(),
                    message: "internal: the CPU backend's kernels load and store the type they compute in, not half buffers".into(),
                });
            }
        }
        let (exec, kernel) = match route {
            Route::Gemm(plan) => (Exec::Gemm(gemm::oriented(plan)), None),
            Route::GemmThenLoop {
                contraction,
                kernel,
                ..
            } => (
                Exec::GemmThenJit(gemm::oriented(contraction), shared_code(kernel, dtype)?),
                Some(kernel),
            ),
            Route::Loop(kernel) => (Exec::Jit(shared_code(kernel, dtype)?), Some(kernel)),
            Route::Winograd(w) => (Exec::Winograd(w.clone()), None),
            Route::WinogradThenLoop { conv, kernel, .. } => (
                Exec::WinogradThenJit(conv.clone(), shared_code(kernel, dtype)?),
                Some(kernel),
            ),
            Route::Host(h) => (Exec::Host(h.clone()), None),
        };
        Ok(CpuKernel {
            exec,
            extent: kernel.map_or(0, |k| k.extent),
            cost_per_iteration: kernel.map_or(0, |k| k.cost_per_iteration()),
        })
    }
}

impl Backend for Cpu {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn target(&self) -> Target {
        Target::Cpu
    }

    fn compile(&self, route: &Route, dtype: DType) -> Result<Box<dyn Executable>, Error> {
        Ok(Box::new(self.compile_route(route, dtype)?))
    }

    fn fill(&self, out: OperandMut<'_>, value: f64) -> Result<(), Error> {
        with_element!(out.dtype(), T => {
            out.host_slice_mut::<T>()?.fill(<T as Element>::from_f64(value));
        });
        Ok(())
    }

    fn copy(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
        check_same("copy", &src, &dst)?;
        with_element!(src.dtype(), T => {
            dst.host_slice_mut::<T>()?.copy_from_slice(src.host_slice::<T>()?);
        });
        Ok(())
    }

    fn add_assign(&self, dst: OperandMut<'_>, src: Operand<'_>) -> Result<(), Error> {
        check_same("add_assign", &src, &dst)?;
        with_element!(src.dtype(), T => {
            let b = src.host_slice::<T>()?;
            for (x, y) in dst.host_slice_mut::<T>()?.iter_mut().zip(b) {
                *x = x.add(*y);
            }
        });
        Ok(())
    }

    fn add_runs(
        &self,
        dst: OperandMut<'_>,
        src: Operand<'_>,
        at: &[usize],
        run: usize,
    ) -> Result<(), Error> {
        if src.dtype() != dst.dtype() || at.len().checked_mul(run) != Some(src.len()) {
            return Err(Error::Invalid {
                function: "add_runs".into(),
                message: format!(
                    "internal: {} runs of {run} from {} {:?} elements into {:?}",
                    at.len(),
                    src.len(),
                    src.dtype(),
                    dst.dtype()
                ),
            });
        }
        with_element!(src.dtype(), T => {
            let (d, s) = (dst.host_slice_mut::<T>()?, src.host_slice::<T>()?);
            let len = d.len();
            for (&p, from) in at.iter().zip(s.chunks_exact(run.max(1))) {
                let to = d.get_mut(p..p + run).ok_or_else(|| Error::Invalid {
                    function: "add_runs".into(),
                    message: format!("internal: a run at {p} past {len} elements"),
                })?;
                for (x, y) in to.iter_mut().zip(from) {
                    *x = x.add(*y);
                }
            }
        });
        Ok(())
    }

    fn cast(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
        check_len("cast", &src, &dst)?;
        src.host_in()?.cast_into(dst.host_out()?);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU's buffer operations with the interface's own `add_runs`
    /// (an `add_assign` per run), what a GPU backend runs.
    struct PerRun;

    impl Backend for PerRun {
        fn device(&self) -> Device {
            CPU.device()
        }
        fn target(&self) -> Target {
            CPU.target()
        }
        fn compile(&self, route: &Route, dtype: DType) -> Result<Box<dyn Executable>, Error> {
            CPU.compile(route, dtype)
        }
        fn fill(&self, out: OperandMut<'_>, value: f64) -> Result<(), Error> {
            CPU.fill(out, value)
        }
        fn copy(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
            CPU.copy(src, dst)
        }
        fn add_assign(&self, dst: OperandMut<'_>, src: Operand<'_>) -> Result<(), Error> {
            CPU.add_assign(dst, src)
        }
        fn cast(&self, src: Operand<'_>, dst: OperandMut<'_>) -> Result<(), Error> {
            CPU.cast(src, dst)
        }
        fn synchronize(&self) -> Result<(), Error> {
            Ok(())
        }
    }

    #[test]
    fn runs_are_added_at_their_positions_by_the_cpu_and_by_the_default() {
        let src: Vec<f32> = (1..=6).map(|v| v as f32).collect();
        let at = [7, 1, 4];
        for backend in [&CPU as &dyn Backend, &PerRun] {
            let mut dst = vec![0.5f32; 10];
            backend
                .add_runs(OperandMut::host(&mut dst), Operand::host(&src), &at, 2)
                .unwrap();
            assert_eq!(dst, [0.5, 3.5, 4.5, 0.5, 5.5, 6.5, 0.5, 1.5, 2.5, 0.5]);
            // A run past the end is an error, not a write out of bounds.
            let mut short = vec![0f32; 8];
            let past = backend.add_runs(OperandMut::host(&mut short), Operand::host(&src), &at, 2);
            assert!(past.is_err());
        }
    }
}
