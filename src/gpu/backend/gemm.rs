//! A contraction through cuBLAS on the GPU backend: [`GemmKernel`], the
//! cuBLAS calls of a compiled GEMM route (one per point of the plan's
//! outer dimensions and of the summed ones beyond K), its operands as
//! buffers of one type (`super::super::half_operands` for half
//! products), and a GEMM-then-loop route's epilogue over the output in
//! place. Must not plan: it runs the `BlasPlan` it is given.

use super::super::counters::{count, COUNTERS};
use super::super::driver::{Arg, Driver, GemmCall, Matrix};
use super::super::half_operands::{self, Operands};
use super::super::{math_mode, profile};
use super::{buffer, input, output, Builtins, LoopKernel};
use crate::alloc::Device;
use crate::kernel::backend::{Executable, Operand, OperandMut};
use crate::kernel::contraction::{offsets, BlasPlan, Contraction};
use crate::{DType, Error};
use std::sync::Arc;

/// A contraction through cuBLAS, then, for a GEMM-then-loop route, the
/// epilogue's loop kernel over the output in place (it reads the product
/// as its last argument, at the output index only).
pub(super) struct GemmKernel<D: Driver> {
    pub(super) driver: Arc<D>,
    pub(super) device: Device,
    /// The backend's loaded builtins (the operands' copies).
    pub(super) builtins: Arc<Builtins<D::Function>>,
    pub(super) contraction: Contraction,
    pub(super) plan: BlasPlan,
    pub(super) epilogue: Option<LoopKernel<D>>,
}

impl<D: Driver> GemmKernel<D> {
    fn err(&self, message: String) -> Error {
        Error::Invalid {
            function: "gemm".into(),
            message,
        }
    }
}

impl<D: Driver> Executable for GemmKernel<D> {
    fn run(&self, inputs: &[Operand<'_>], out: OperandMut<'_>) -> Result<(), Error> {
        count(&COUNTERS.kernels_run, 1);
        let total = out.len();
        if total == 0 {
            return Ok(());
        }
        let target = output(&out);
        if let Some(k) = self.contraction.accumulate {
            // The product is added to argument `k`: a copy of it first.
            let addend = inputs
                .get(k)
                .ok_or_else(|| self.err(format!("no addend {k}")))?;
            let bytes = total * out.dtype().size();
            self.driver
                .copy_on_device(out.address(), addend.address(), bytes)?;
        }
        profile::timed(
            &*self.driver,
            || self.label(),
            || self.gemms(inputs, target, out.dtype()),
        )?;
        if let Some(e) = &self.epilogue {
            e.launch(target, total, inputs, Some(&out.as_operand()))?;
        }
        Ok(())
    }

    /// In place over the addend of a product added to an argument
    /// (`Contraction::accumulate`): cuBLAS's `beta = 1` over it.
    unsafe fn run_in_place(&self, inputs: &[Operand<'_>], aliased: usize) -> Result<bool, Error> {
        let Some(over) = inputs
            .get(aliased)
            .filter(|_| self.contraction.accumulate == Some(aliased) && self.epilogue.is_none())
        else {
            return Ok(false);
        };
        count(&COUNTERS.kernels_run, 1);
        let target = buffer(over.address(), over.len(), over.dtype(), true);
        profile::timed(
            &*self.driver,
            || self.label(),
            || self.gemms(inputs, target, over.dtype()),
        )?;
        Ok(true)
    }
}

impl<D: Driver> GemmKernel<D> {
    /// What the profile calls it (`super::profile`).
    fn label(&self) -> String {
        let p = &self.plan;
        let calls: usize = p
            .outer
            .iter()
            .chain(self.contraction.k_outer())
            .map(|d| d.len)
            .product();
        let op = |t: bool| if t { 't' } else { 'n' };
        format!(
            "gemm {}{} m={} n={} k={} batch={} calls={calls}{}",
            op(p.trans_a),
            op(p.trans_b),
            p.m,
            p.n,
            p.k,
            p.batch,
            if self.epilogue.is_some() {
                " +epilogue"
            } else if self.contraction.accumulate.is_some() {
                " +addend"
            } else {
                ""
            }
        )
    }

    /// The cuBLAS calls of one run.
    fn gemms(&self, inputs: &[Operand<'_>], target: Arg, dtype: DType) -> Result<(), Error> {
        // A product added to an argument accumulates over its copy.
        let added = self.contraction.accumulate.is_some();
        let p = &self.plan;
        let [first, second] = self.contraction.operands();
        let (a, b) = if p.swapped {
            (second, first)
        } else {
            (first, second)
        };
        let at = |base: usize, off: isize| {
            usize::try_from(base as isize + off)
                .map_err(|_| self.err("a negative operand offset".into()))
        };
        let math = math_mode::math_mode();
        let half_operands = self
            .contraction
            .half_operands
            .filter(|_| dtype == DType::F32);
        let k_outer = self.contraction.k_outer();
        let n_outer: usize = p.outer.iter().map(|d| d.len).product();
        let n_k: usize = k_outer.iter().map(|d| d.len).product();
        // The operands as buffers of one type (`half_operands`): the
        // copies' memory lives until the calls are queued.
        let given = [a, b].map(|(arg, _)| inputs.get(arg));
        let [Some(in_a), Some(in_b)] = given else {
            return Err(self.err(format!("no operands {} and {}", a.0, b.0)));
        };
        let ops = match half_operands {
            Some(half) => half_operands::operands(
                (&*self.driver, &self.builtins, self.device),
                half,
                [(input(in_a), in_a.dtype()), (input(in_b), in_b.dtype())],
                |buffers| half_operands::pays(p, k_outer, [a.1, b.1], buffers),
            )?,
            None if in_a.dtype() == dtype && in_b.dtype() == dtype => Operands {
                a: input(in_a),
                b: input(in_b),
                dtype,
                held: Vec::new(),
            },
            None => {
                return Err(self.err(format!(
                    "operands of {:?} and {:?} for a {dtype:?} product",
                    in_a.dtype(),
                    in_b.dtype()
                )))
            }
        };
        for oi in 0..n_outer {
            let (oa, ob, oo) = offsets(&p.outer, oi);
            for ki in 0..n_k {
                let (ka, kb, _) = offsets(k_outer, ki);
                let (off_a, off_b) = if p.swapped {
                    (ob + kb, oa + ka)
                } else {
                    (oa + ka, ob + kb)
                };
                let call = GemmCall {
                    dtype,
                    trans_a: p.trans_a,
                    trans_b: p.trans_b,
                    m: p.m,
                    n: p.n,
                    k: p.k,
                    alpha: p.alpha,
                    a: Matrix {
                        buffer: ops.a,
                        offset: at(a.1, off_a)?,
                        ld: p.lda,
                        stride: p.stride_a,
                    },
                    b: Matrix {
                        buffer: ops.b,
                        offset: at(b.1, off_b)?,
                        ld: p.ldb,
                        stride: p.stride_b,
                    },
                    // The extra summed dimensions accumulate.
                    beta: if ki > 0 || added { 1.0 } else { 0.0 },
                    c: Matrix {
                        buffer: target,
                        offset: at(0, oo)?,
                        ld: p.ldc,
                        stride: p.stride_c,
                    },
                    batch: p.batch,
                    math,
                    half_operands,
                    operands: ops.dtype,
                };
                count(&COUNTERS.blas_calls, 1);
                if half_operands.is_some() {
                    count(&COUNTERS.half_blas_calls, 1);
                }
                self.driver.gemm(&call)?;
            }
        }
        Ok(())
    }
}
