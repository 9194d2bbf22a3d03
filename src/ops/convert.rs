//! `to_dtype`: conversion between element types, recorded on the trace
//! between float types (half precision included) so gradients flow
//! through it (the gradient is converted back), a constant copy otherwise
//! (integers carry no gradient). A conversion is a host stage (`crate::planner::host`): a
//! kernel reads one element type and writes another, which index-function
//! kernels (one type per kernel) do not.
//!
//! Also owns `round_to_half`, the composition of a conversion to a half
//! type and back to f32 in one pass (autocast's operands, `super::half`),
//! whose gradient is rounded the same way, as the two conversions' is.

use super::apply_host_as_typed;
use crate::kernel::host::DeviceForm;
use crate::planner::host::{
    host_stage, single_stage_program, HostIn, HostKernel, HostOp, HostOut, Workers,
};
use crate::planner::{NodePlan, Program, Source};
use crate::tensor::Tensor;
use crate::{DType, Error};
use std::sync::Arc;

/// Element-wise `as` conversion into `to`.
#[derive(Debug)]
struct Cast {
    to: DType,
}

impl HostKernel for Cast {
    fn name(&self) -> &str {
        "to_dtype"
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error> {
        inputs[0].cast_into_on(out, workers);
        Ok(())
    }

    fn out_dtype(&self) -> Option<DType> {
        Some(self.to)
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::Cast)
    }
}

/// Element-wise rounding of f32 values to the nearest values of `half`,
/// in f32.
#[derive(Debug)]
struct RoundToHalf {
    half: DType,
}

impl HostKernel for RoundToHalf {
    fn name(&self) -> &str {
        "round_to_half"
    }

    fn run(&self, inputs: &[HostIn], out: HostOut, workers: &dyn Workers) -> Result<(), Error> {
        inputs[0].round_to_half_on(self.half, out, workers)
    }

    fn out_dtype(&self) -> Option<DType> {
        Some(DType::F32)
    }

    fn device_form(&self) -> Option<DeviceForm> {
        Some(DeviceForm::RoundToHalf(self.half))
    }
}

/// A conversion's programs: `forward` maps its input, `backward` its
/// output's gradient back (a conversion to the input's type, or the same
/// rounding).
struct Convert {
    shape: Vec<usize>,
    name: &'static str,
    forward: Arc<dyn HostKernel>,
    backward: Arc<dyn HostKernel>,
}

impl Convert {
    fn program(&self) -> Result<Program, Error> {
        let args: [(&str, &[usize]); 1] = [("x", &self.shape)];
        let stage = host_stage(
            self.name,
            &args,
            vec![Source::Input(0)],
            &self.shape,
            self.forward.clone(),
        )?;
        Ok(single_stage_program(&args, stage))
    }
}

impl HostOp for Convert {
    fn forward(&self) -> Result<Program, Error> {
        self.program()
    }

    fn node_plan(&self, wrt: &[usize]) -> Result<NodePlan, Error> {
        // Inputs: x, the output's gradient, the output.
        let gradient = format!("d{}", self.name);
        let inputs: [(&str, &[usize]); 3] = [
            ("x", &self.shape),
            (&gradient, &self.shape),
            (self.name, &self.shape),
        ];
        let stage = host_stage(
            &format!("{}_backward", self.name),
            &[(&gradient, &self.shape)],
            vec![Source::Input(1)],
            &self.shape,
            self.backward.clone(),
        )?;
        Ok(NodePlan {
            forward: self.program()?,
            backward: single_stage_program(&inputs, stage),
            wrt: wrt.to_vec(),
            derivatives: Vec::new(),
            forward_is_plain: false,
        })
    }
}

/// On a GPU, a conversion between f32 and a half type whose forward is a
/// loop kernel with a half buffer (`Kernel::buffers`), not the builtin
/// conversion: fusion can then take it into the kernel reading its result
/// (a widened argument loaded as half), or take the kernel producing its
/// input into it (a result stored as half), as it takes any element-wise
/// op (`super::fuse`). The same values; its gradient is converted back by
/// the builtin conversion, as `Convert`'s.
struct ConvertByLoop {
    convert: Convert,
    from: DType,
    to: DType,
}

impl HostOp for ConvertByLoop {
    fn forward(&self) -> Result<Program, Error> {
        let shape = &self.convert.shape;
        let ix = super::formula::indices("i", shape.len());
        let text = super::formula::define("to_dtype", &ix, super::formula::access("x", &ix));
        let f = crate::symbolic::IndexFn::parse(&text, &[("x", shape)])?;
        let mut program =
            crate::planner::plan_function_for(&f, DType::F32, crate::planner::Target::Gpu)?;
        program.type_buffers(&[self.from], self.to, DType::F32)?;
        Ok(program)
    }

    fn node_plan(&self, wrt: &[usize]) -> Result<NodePlan, Error> {
        self.convert.node_plan(wrt)
    }
}

/// Whether a conversion from `from` to `to` on `t`'s device runs as a loop
/// kernel ([`ConvertByLoop`]): on a GPU, between f32 and a half type.
fn by_loop(t: &Tensor, from: DType, to: DType) -> bool {
    matches!(t.device(), crate::Device::Cuda(_))
        && matches!((from, to), (DType::F32, h) | (h, DType::F32) if h.is_half())
}

impl Tensor {
    /// The data converted to `dtype`. Between `F32` and `F64` the
    /// conversion is recorded when the input requires a gradient, and the
    /// gradient flows back converted to the input's type. Floats become
    /// integers by rounding toward zero (PyTorch's `.long()`; NaN gives 0,
    /// values beyond the range saturate), as constants.
    ///
    /// ```
    /// use tenjin::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![0.5, -1.5], &[2])?.requires_grad();
    /// let y = x.to_dtype(DType::F64)?;
    /// assert_eq!(y.dtype(), DType::F64);
    /// y.mul(&y)?.sum()?.backward()?; // d/dx x² = 2x, back in f32
    /// assert_eq!(x.grad().unwrap().to_vec()?, vec![1.0, -3.0]);
    /// assert_eq!(y.to_dtype(DType::I64)?.to_vec_i64()?, vec![0, -1]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor, Error> {
        let from = self.dtype();
        let recorded = from.is_float()
            && dtype.is_float()
            && self.is_requires_grad()
            && crate::trace::is_grad_enabled();
        let by_loop = from != dtype && by_loop(self, from, dtype);
        if !recorded && !by_loop {
            return self.convert(dtype);
        }
        let x = self.contiguous()?;
        let host = || -> Arc<dyn HostOp> {
            let convert = Convert {
                shape: x.shape().to_vec(),
                name: "to_dtype",
                forward: Arc::new(Cast { to: dtype }),
                backward: Arc::new(Cast { to: from }),
            };
            match by_loop {
                true => Arc::new(ConvertByLoop {
                    convert,
                    from,
                    to: dtype,
                }),
                false => Arc::new(convert),
            }
        };
        let kind = format!("{from:?}{}", if by_loop { " by loop" } else { "" });
        apply_host_as_typed("to_dtype", &kind, host, &[("x", &x)], dtype)
    }

    /// An f32 tensor's values rounded to the nearest values of the half
    /// type `half`, in f32: `x.to_dtype(half)?.to_dtype(F32)` bit for bit,
    /// gradient included (rounded the same way), in one pass each way.
    pub(crate) fn round_to_half(&self, half: DType) -> Result<Tensor, Error> {
        if self.dtype() != DType::F32 || !half.is_half() {
            return Err(Error::DType {
                op: "round_to_half".into(),
                message: format!(
                    "rounds F32 values to BF16 or F16 values, not {:?} to {half:?}",
                    self.dtype()
                ),
            });
        }
        let x = self.contiguous()?;
        let host = || -> Arc<dyn HostOp> {
            let round: Arc<dyn HostKernel> = Arc::new(RoundToHalf { half });
            Arc::new(Convert {
                shape: x.shape().to_vec(),
                name: "round_to_half",
                forward: round.clone(),
                backward: round,
            })
        };
        apply_host_as_typed(
            "round_to_half",
            &format!("{half:?}"),
            host,
            &[("x", &x)],
            DType::F32,
        )
    }
}
