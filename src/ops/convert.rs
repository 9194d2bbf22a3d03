//! `to_dtype`: conversion between element types, recorded on the trace
//! between float types (half precision included) so gradients flow
//! through it (the gradient is converted back), a constant copy otherwise
//! (integers carry no gradient). A conversion is a host stage (`crate::planner::host`): a
//! kernel reads one element type and writes another, which index-function
//! kernels (one type per kernel) do not.

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

struct Convert {
    shape: Vec<usize>,
    from: DType,
    to: DType,
}

impl Convert {
    fn program(&self) -> Result<Program, Error> {
        let args: [(&str, &[usize]); 1] = [("x", &self.shape)];
        let stage = host_stage(
            "to_dtype",
            &args,
            vec![Source::Input(0)],
            &self.shape,
            Arc::new(Cast { to: self.to }),
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
        let inputs: [(&str, &[usize]); 3] = [
            ("x", &self.shape),
            ("dto_dtype", &self.shape),
            ("to_dtype", &self.shape),
        ];
        let stage = host_stage(
            "to_dtype_backward",
            &[("dto_dtype", &self.shape)],
            vec![Source::Input(1)],
            &self.shape,
            Arc::new(Cast { to: self.from }),
        )?;
        Ok(NodePlan {
            forward: self.program()?,
            backward: single_stage_program(&inputs, stage),
            wrt: wrt.to_vec(),
            derivatives: Vec::new(),
        })
    }
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
        if !recorded {
            return self.convert(dtype);
        }
        let x = self.contiguous()?;
        let host = || -> Arc<dyn HostOp> {
            Arc::new(Convert {
                shape: x.shape().to_vec(),
                from,
                to: dtype,
            })
        };
        apply_host_as_typed("to_dtype", &format!("{from:?}"), host, &[("x", &x)], dtype)
    }
}
