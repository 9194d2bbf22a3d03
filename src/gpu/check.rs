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

/// Runs the module `ptx` on a private simulated device: `inputs` uploaded
/// in order, an output of `out_len` elements of `dtype` filled with NaN
/// first (an element no thread writes stays NaN), `grid × block` threads,
/// and after the buffers the `sizes` a module with run-time constants reads
/// (`ptx::launch_sizes`; none for any other); returns the output. For checking emitted kernels against the CPU
/// (`tests/ptx_suite.rs`) and timing the simulator (`tests/sim_speed.rs`).
pub fn simulate_module(
    ptx: &str,
    dtype: DType,
    inputs: &[Values<'_>],
    out_len: usize,
    (grid, block): (u32, u32),
    sizes: &[u64],
) -> Result<Vec<f64>, Error> {
    use super::driver::{Arg, Driver};
    use super::sim::{memory::SimMemory, SimDriver};
    use crate::alloc::RawMemory;
    let memory: &'static SimMemory = Box::leak(Box::new(SimMemory::new()));
    let sim = SimDriver::new(Device::Cuda(crate::alloc::MAX_CUDA_DEVICES), memory);
    let function = sim.load(ptx)?;
    let block_of = |bytes: usize| -> Result<u64, Error> {
        memory
            .alloc(bytes.max(1))
            .map(|p| p.as_ptr() as u64)
            .ok_or_else(|| Error::Invalid {
                function: "simulate_module".into(),
                message: "out of memory".into(),
            })
    };
    let out_bytes = out_len * dtype.size();
    let out = block_of(out_bytes)?;
    let nan: Vec<u8> = match dtype {
        DType::F32 => [f32::NAN.to_le_bytes()].repeat(out_len).concat(),
        _ => [f64::NAN.to_le_bytes()].repeat(out_len).concat(),
    };
    sim.copy_to_device(out, &nan)?;
    let mut args = vec![Arg::Buffer {
        addr: out,
        bytes: out_bytes,
        writable: true,
    }];
    for v in inputs {
        let bytes: Vec<u8> = match v {
            Values::F32(x) => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            Values::F64(x) => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        };
        let addr = block_of(bytes.len())?;
        sim.copy_to_device(addr, &bytes)?;
        args.push(Arg::Buffer {
            addr,
            bytes: bytes.len(),
            writable: false,
        });
    }
    args.extend(sizes.iter().map(|&v| Arg::Scalar(v)));
    sim.launch(&function, grid, block, &args)?;
    let mut back = vec![0u8; out_bytes];
    sim.copy_to_host(&mut back, out)?;
    Ok(match dtype {
        DType::F32 => back
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        _ => back
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    })
}
