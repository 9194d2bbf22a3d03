//! Development entry points for checking the GPU backend against the CPU:
//! run one function's GPU loop kernel on host data. Hidden from the
//! documentation.

use super::driver::gpu;
use crate::alloc::{allocate_on, Device};
use crate::kernel::backend::Values;
use crate::kernel::Kernel;
use crate::symbolic::IndexFn;
use crate::{DType, Error};

/// Runs `kernel`, the GPU loop kernel of `f` (planned for the GPU target:
/// `crate::planner::passes::loop_kernel`), on device `ordinal` with
/// `inputs` (in argument order) and returns the output. Device buffers
/// come from the device's pooled allocator.
pub fn run_loop_kernel(
    ordinal: usize,
    f: &IndexFn,
    kernel: &Kernel,
    dtype: DType,
    inputs: &[Values<'_>],
) -> Result<Vec<f64>, Error> {
    let g = gpu(ordinal)?;
    let function = g.loop_function(f, kernel, dtype)?;
    let device = Device::Cuda(ordinal);
    fn uploaded<T: cudarc::driver::DeviceRepr>(
        g: &super::driver::Gpu,
        device: Device,
        x: &[T],
    ) -> Result<crate::alloc::Buffer, Error> {
        let b = allocate_on(device, std::mem::size_of_val(x).max(1))?;
        g.upload(b.as_ptr() as u64, x)?;
        Ok(b)
    }
    let bufs = inputs
        .iter()
        .map(|v| match v {
            Values::F32(x) => uploaded(g, device, x),
            Values::F64(x) => uploaded(g, device, x),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let n = f.output_shape().iter().product::<usize>();
    let out = allocate_on(device, (n * dtype.size()).max(1))?;
    let args: Vec<u64> = bufs.iter().map(|b| b.as_ptr() as u64).collect();
    g.launch(&function, n, out.as_ptr() as u64, &args)?;
    g.synchronize()?;
    Ok(match dtype {
        DType::F32 => {
            let mut v = vec![0f32; n];
            g.download(&mut v, out.as_ptr() as u64)?;
            v.into_iter().map(f64::from).collect()
        }
        DType::F64 => {
            let mut v = vec![0f64; n];
            g.download(&mut v, out.as_ptr() as u64)?;
            v
        }
        d => return Err(crate::dtype::not_computable(f.name(), d)),
    })
}
