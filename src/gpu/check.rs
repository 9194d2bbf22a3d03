//! Development entry points for checking the GPU backend against the CPU:
//! run one planned GPU loop kernel on host data through a device's
//! backend (a real GPU, or the simulated device). Hidden from the
//! documentation.

use crate::alloc::{allocate_on, Buffer, Device};
use crate::kernel::backend::{Operand, OperandMut, Values};
use crate::kernel::{Kernel, Route};
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// Runs `kernel`, the GPU loop kernel of `f` (planned for the GPU target:
/// `crate::planner::passes::loop_kernel`), on CUDA device `ordinal` with
/// `inputs` (in argument order) and returns the output. Device buffers
/// come from the device's pooled allocator.
pub fn run_loop_kernel(
    ordinal: usize,
    f: &IndexFn,
    kernel: &Kernel,
    dtype: DType,
    inputs: &[Values<'_>],
) -> Result<Vec<f64>, Error> {
    let backend = super::backend(ordinal)?;
    let device = Device::Cuda(ordinal);
    let code = backend.compile(&Route::Loop(kernel.clone()), dtype)?;
    let upload = |x: Operand<'_>| -> Result<Buffer, Error> {
        let mut b = allocate_on(device, (x.len() * x.dtype().size()).max(1))?;
        backend.copy(x, OperandMut::of_buffer(&mut b, x.dtype(), x.len())?)?;
        Ok(b)
    };
    let bufs = inputs
        .iter()
        .map(|v| match v {
            Values::F32(x) => upload(Operand::host(x)),
            Values::F64(x) => upload(Operand::host(x)),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let lens: Vec<usize> = f.args().iter().map(|a| a.shape.iter().product()).collect();
    let operands = bufs
        .iter()
        .zip(&lens)
        .map(|(b, &n)| Operand::of_buffer(b, dtype, n))
        .collect::<Result<Vec<_>, Error>>()?;
    let n: usize = f.output_shape().iter().product();
    let mut out = allocate_on(device, (n * dtype.size()).max(1))?;
    code.run(&operands, OperandMut::of_buffer(&mut out, dtype, n)?)?;
    let read = |dst: OperandMut<'_>| backend.copy(Operand::of_buffer(&out, dtype, n)?, dst);
    Ok(match dtype {
        DType::F32 => {
            let mut v = vec![0f32; n];
            read(OperandMut::host(&mut v))?;
            v.into_iter().map(f64::from).collect()
        }
        DType::F64 => {
            let mut v = vec![0f64; n];
            read(OperandMut::host(&mut v))?;
            v
        }
        d => return Err(crate::dtype::not_computable(f.name(), d)),
    })
}
