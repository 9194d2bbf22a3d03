//! The simulated device's checks, each made to fire: out of bounds,
//! misaligned, a store into an input, two threads storing one element, a
//! use after free, an unknown instruction, cuBLAS's argument checks; and
//! a cooperative kernel (shared memory, barriers) with the races and the
//! divergent barrier a mistake in it leaves.

use super::super::driver::{Arg, Driver, GemmCall, Matrix};
use super::memory::SimMemory;
use super::SimDriver;
use crate::alloc::{Device, RawMemory};
use crate::DType;
use std::ptr::NonNull;

/// A kernel `out[i] = in[i + shift]` over `n` threads (one element each),
/// f32, storing at element `i * stride_out`.
fn kernel(shift: i64, stride_out: i64, align: i64) -> String {
    format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry tenjin_kernel(\n\t.param .u64 out,\n\t.param .u64 a0\n)\n{{\n\t.reg .pred %p<1>;\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<8>;\n\t.reg .f32 %f<1>;\n\tld.param.u64 %rd0, [out];\n\tld.param.u64 %rd1, [a0];\n\tmov.u32 %r0, %ctaid.x;\n\tmov.u32 %r1, %ntid.x;\n\tmov.u32 %r2, %tid.x;\n\tmul.wide.u32 %rd2, %r0, %r1;\n\tcvt.u64.u32 %rd3, %r2;\n\tadd.s64 %rd4, %rd2, %rd3;\n\tadd.s64 %rd5, %rd4, {shift};\n\tmad.lo.s64 %rd6, %rd5, 4, %rd1;\n\tadd.s64 %rd6, %rd6, {align};\n\tld.global.f32 %f0, [%rd6];\n\tmul.lo.s64 %rd7, %rd4, {stride_out};\n\tmad.lo.s64 %rd7, %rd7, 4, %rd0;\n\tst.global.f32 [%rd7], %f0;\n\tret;\n}}\n"
    )
}

fn device() -> (SimDriver, &'static SimMemory) {
    let memory: &'static SimMemory = Box::leak(Box::new(SimMemory::new()));
    (SimDriver::new(Device::Cuda(99), memory), memory)
}

fn buffer(memory: &SimMemory, bytes: usize) -> u64 {
    memory.alloc(bytes).map(|p| p.as_ptr() as u64).unwrap()
}

fn buf(addr: u64, bytes: usize, writable: bool) -> Arg {
    Arg::Buffer {
        addr,
        bytes,
        writable,
    }
}

/// Runs `kernel(shift, stride, align)` on 8 threads over 8-element
/// buffers, the input filled with 0..8; the error, if any.
fn run(shift: i64, stride: i64, align: i64, input_writable: bool) -> Result<Vec<f32>, String> {
    let (d, memory) = device();
    let (out, inp) = (buffer(memory, 32), buffer(memory, 32));
    let values: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    d.copy_to_device(inp, &values).unwrap();
    let f = d.load(&kernel(shift, stride, align)).unwrap();
    d.launch(
        &f,
        2,
        4,
        &[buf(out, 32, true), buf(inp, 32, input_writable)],
    )
    .map_err(|e| e.to_string())?;
    Ok(read_f32(&d, out, 8))
}

/// `n` f32 values at device address `at`.
fn read_f32(d: &SimDriver, at: u64, n: usize) -> Vec<f32> {
    let mut back = vec![0u8; 4 * n];
    d.copy_to_host(&mut back, at).unwrap();
    back.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_correct_kernel_runs() {
    assert_eq!(
        run(0, 1, 0, false).unwrap(),
        (0..8).map(|i| i as f32).collect::<Vec<_>>()
    );
}

#[test]
fn every_check_fires() {
    let e = run(1, 1, 0, false).unwrap_err();
    assert!(e.contains("out of bounds"), "{e}");
    let e = run(0, 1, 2, false).unwrap_err();
    assert!(e.contains("misaligned"), "{e}");
    let e = run(0, 0, 0, false).unwrap_err();
    assert!(e.contains("both store"), "{e}");
    // Storing into the input: the output argument aliased by an input.
    let (d, memory) = device();
    let x = buffer(memory, 32);
    let f = d.load(&kernel(0, 1, 0)).unwrap();
    let e = d
        .launch(&f, 1, 8, &[buf(x, 32, false), buf(x, 32, false)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("a store into an input"), "{e}");
    // Use after free.
    let y = buffer(memory, 32);
    unsafe { memory.dealloc(NonNull::new(y as *mut u8).unwrap(), 32) };
    let e = d
        .launch(&f, 1, 8, &[buf(x, 32, true), buf(y, 32, false)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("use after free"), "{e}");
    let mut host = [0u8; 4];
    assert!(d.copy_to_host(&mut host, y).is_err());
    // Unknown instructions fail when the module loads.
    let e = d
        .load(&kernel(0, 1, 0).replace("ret;", "bar.arrive 0;\n\tret;"))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(e.contains("only `bar.sync N`"), "{e}");
    let e = d
        .load(&kernel(0, 1, 0).replace("ret;", "popc.b32 %r0, %r1;\n\tret;"))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown instruction"), "{e}");
}

#[test]
fn device_addresses_cannot_be_dereferenced_by_the_host() {
    let (_, memory) = device();
    let a = buffer(memory, 64);
    // Non-canonical on x86-64: bits 48–63 are not copies of bit 47.
    let top = a >> 47;
    assert!(top != 0 && top != 0x1_ffff, "{a:#x}");
}

fn matrix(addr: u64, bytes: usize, ld: usize, writable: bool) -> Matrix {
    Matrix {
        buffer: buf(addr, bytes, writable),
        offset: 0,
        ld,
        stride: 0,
    }
}

/// `C = A·B` with A 2×3 and B 3×2, column-major, at the addresses
/// `[a, b, c]`, C of `dtype`, A and B of `half` where given (a half
/// product summed in f32), else of `dtype`.
fn product_2x3x2([a, b, c]: [u64; 3], dtype: DType, half: Option<DType>) -> GemmCall {
    let operands = half.unwrap_or(dtype);
    GemmCall {
        dtype,
        trans_a: false,
        trans_b: false,
        m: 2,
        n: 2,
        k: 3,
        alpha: 1.0,
        a: matrix(a, 6 * operands.size(), 2, false),
        b: matrix(b, 6 * operands.size(), 3, false),
        beta: 0.0,
        c: matrix(c, 4 * dtype.size(), 2, true),
        batch: 1,
        math: crate::gpu::MathMode::Full,
        half_operands: half,
        operands,
    }
}

#[test]
fn cublas_reference_and_its_argument_checks() {
    let (d, memory) = device();
    // A 2×3, B 3×2, column-major, f64.
    let (a, b, c) = (buffer(memory, 48), buffer(memory, 48), buffer(memory, 32));
    let put = |addr: u64, v: &[f64]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        d.copy_to_device(addr, &bytes).unwrap()
    };
    put(a, &[1., 4., 2., 5., 3., 6.]); // [[1 2 3] [4 5 6]]
    put(b, &[1., 0., 1., 0., 1., 1.]); // [[1 0] [0 1] [1 1]]
    let call = product_2x3x2([a, b, c], DType::F64, None);
    d.gemm(&call).unwrap();
    let mut back = [0u8; 32];
    d.copy_to_host(&mut back, c).unwrap();
    let got: Vec<f64> = back
        .chunks_exact(8)
        .map(|x| f64::from_le_bytes(x.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![4., 10., 5., 11.]);
    let bad = |f: &dyn Fn(&mut GemmCall)| {
        let mut c = call;
        f(&mut c);
        d.gemm(&c).unwrap_err().to_string()
    };
    assert!(bad(&|c| c.a.ld = 1).contains("CUBLAS_STATUS_INVALID_VALUE"));
    assert!(bad(&|c| c.k = 4).contains("beyond its buffer"));
    assert!(bad(&|c| c.c = matrix(a, 48, 2, true)).contains("overlaps"));
    assert!(bad(&|c| c.dtype = DType::I64).contains("NOT_SUPPORTED"));
    // Half buffers only for half products summed in f32.
    assert!(bad(&|c| c.operands = DType::BF16).contains("NOT_SUPPORTED"));
}

/// `GemmEx` over half buffers: bf16 A and B (as the backend's rounded
/// copies hold them), f32 sums into an f32 C.
#[test]
fn cublas_reads_half_buffers_for_half_products() {
    let (d, memory) = device();
    let (a, b, c) = (buffer(memory, 12), buffer(memory, 12), buffer(memory, 16));
    let put = |addr: u64, v: &[f32]| {
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        d.copy_to_device(addr, &bytes).unwrap()
    };
    put(a, &[1., 4., 2., 5., 3., 6.5]); // [[1 2 3] [4 5 6.5]]
    put(b, &[1., 0., 1., 0., 1., 0.25]); // [[1 0] [0 1] [1 0.25]]
    let call = product_2x3x2([a, b, c], DType::F32, Some(DType::BF16));
    d.gemm(&call).unwrap();
    let mut back = [0u8; 16];
    d.copy_to_host(&mut back, c).unwrap();
    let got: Vec<f32> = back
        .chunks_exact(4)
        .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![4., 10.5, 2.75, 6.625]);
    // A bf16 buffer read as f32 would overrun it.
    let mut wide = call;
    wide.operands = DType::F32;
    assert!(d
        .gemm(&wide)
        .unwrap_err()
        .to_string()
        .contains("beyond its buffer"));
}

/// A block-wide tree sum of `a0` in shared memory (`ntid` a power of
/// two): `out[block] = Σ a0[block·ntid..][..ntid]`, a barrier after each
/// level. `mistake` breaks it: `"no barrier"` drops the barrier inside
/// the loop, `"early exit"` has every thread but 0 return before the
/// first barrier.
fn block_sum(threads: u32, mistake: &str) -> String {
    let level_barrier = if mistake == "no barrier" {
        ""
    } else {
        "bar.sync 0;"
    };
    let exit = if mistake == "early exit" {
        "setp.ne.u32 %p0, %r2, 0;\n\t@%p0 bra L4;"
    } else {
        ""
    };
    format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry tenjin_kernel(\n\t.param .u64 out,\n\t.param .u64 a0\n)\n{{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<11>;\n\t.reg .f32 %f<3>;\n\t.shared .align 4 .f32 partial[{threads}];\n\tld.param.u64 %rd0, [out];\n\tld.param.u64 %rd1, [a0];\n\tmov.u32 %r0, %ctaid.x;\n\tmov.u32 %r1, %ntid.x;\n\tmov.u32 %r2, %tid.x;\n\tmul.wide.u32 %rd2, %r0, %r1;\n\tcvt.u64.u32 %rd3, %r2;\n\tadd.s64 %rd4, %rd2, %rd3;\n\tmad.lo.s64 %rd5, %rd4, 4, %rd1;\n\tld.global.f32 %f0, [%rd5];\n\tmov.u64 %rd6, partial;\n\tmad.lo.s64 %rd7, %rd3, 4, %rd6;\n\tst.shared.f32 [%rd7], %f0;\n\t{exit}\n\tbar.sync 0;\n\tshr.u32 %r3, %r1, 1;\nL1:\n\tsetp.eq.u32 %p0, %r3, 0;\n\t@%p0 bra L3;\n\tsetp.ge.u32 %p1, %r2, %r3;\n\t@%p1 bra L2;\n\tmul.wide.u32 %rd8, %r3, 4;\n\tadd.s64 %rd9, %rd7, %rd8;\n\tld.shared.f32 %f1, [%rd9];\n\tld.shared.f32 %f2, [%rd7];\n\tadd.rn.f32 %f2, %f2, %f1;\n\tst.shared.f32 [%rd7], %f2;\nL2:\n\t{level_barrier}\n\tshr.u32 %r3, %r3, 1;\n\tbra.uni L1;\nL3:\n\tsetp.ne.u32 %p0, %r2, 0;\n\t@%p0 bra L4;\n\tld.shared.f32 %f0, [%rd6];\n\tmul.wide.u32 %rd10, %r0, 4;\n\tadd.s64 %rd10, %rd10, %rd0;\n\tst.global.f32 [%rd10], %f0;\nL4:\n\tret;\n}}\n"
    )
}

/// The module `text` (a [`block_sum`]) over 3 blocks of 64 threads, the
/// input `0, 1, 2, …`.
fn run_block_sum(text: &str) -> Result<Vec<f32>, String> {
    let (blocks, threads) = (3u32, 64u32);
    let n = (blocks * threads) as usize;
    let (d, memory) = device();
    let (out, inp) = (buffer(memory, 4 * blocks as usize), buffer(memory, 4 * n));
    let values: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    d.copy_to_device(inp, &values).unwrap();
    let f = d.load(text).map_err(|e| e.to_string())?;
    d.launch(
        &f,
        blocks,
        threads,
        &[buf(out, 4 * blocks as usize, true), buf(inp, 4 * n, false)],
    )
    .map_err(|e| e.to_string())?;
    Ok(read_f32(&d, out, blocks as usize))
}

#[test]
fn a_cooperative_kernel_runs_in_phases_between_barriers() {
    let want: Vec<f32> = (0..3)
        .map(|b| (b * 64..(b + 1) * 64).sum::<u32>() as f32)
        .collect();
    assert_eq!(run_block_sum(&block_sum(64, "")).unwrap(), want);
}

#[test]
fn races_and_divergent_barriers_in_shared_memory_are_errors() {
    let e = run_block_sum(&block_sum(64, "no barrier")).unwrap_err();
    assert!(
        e.contains("a race") && e.contains("no barrier between"),
        "{e}"
    );
    let e = run_block_sum(&block_sum(64, "early exit")).unwrap_err();
    assert!(e.contains("wait at a barrier that 63 exited"), "{e}");
    let short = block_sum(64, "").replace("partial[64]", "partial[32]");
    let e = run_block_sum(&short).unwrap_err();
    assert!(e.contains("outside the 128 bytes of shared memory"), "{e}");
}

/// An element-wise kernel emitted with vector accesses (4 f32 a thread)
/// computes the same values whether its buffers are aligned (the vector
/// loop; the simulator refuses a misaligned vector access) or not (the
/// scalar loop the kernel falls back to).
#[test]
fn vectorised_kernels_fall_back_to_scalar_accesses_on_misaligned_buffers() {
    use crate::gpu::ptx::{self, Arch};
    let shapes: [(&str, &[usize]); 2] = [("x", &[3, 8]), ("y", &[8])];
    let f = crate::symbolic::IndexFn::parse("f[i; j] = x[i; j] * 2 + y[j] + x[i; 7 - j]", &shapes)
        .unwrap();
    let k = crate::kernel::lower(&f).unwrap();
    assert_eq!(ptx::elements_per_thread(&k, DType::F32), 4);
    let text = ptx::emit(&k, DType::F32, Arch::Sm80, "k").unwrap();
    for op in ["ld.global.v4.f32", "st.global.v4.f32", "ld.global.f32"] {
        assert!(text.contains(op), "no {op} in\n{text}");
    }
    let x: Vec<f32> = (0..24).map(|v| v as f32 * 0.5).collect();
    let y: Vec<f32> = (0..8).map(|v| 10.0 - v as f32).collect();
    let want: Vec<f32> = (0..24)
        .map(|e| {
            let (i, j) = (e / 8, e % 8);
            x[e] * 2.0 + y[j] + x[i * 8 + 7 - j]
        })
        .collect();
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|v| v.to_le_bytes()).collect() };
    for shift in [0u64, 4, 8] {
        let (d, memory) = device();
        let (out, xa, ya) = (
            buffer(memory, 96 + 16),
            buffer(memory, 96 + 16),
            buffer(memory, 32 + 16),
        );
        // Only x moves off the 16-byte grid.
        d.copy_to_device(xa + shift, &bytes(&x)).unwrap();
        d.copy_to_device(ya, &bytes(&y)).unwrap();
        let function = d.load(&text).unwrap();
        d.launch(
            &function,
            2,
            32,
            &[
                buf(out, 96, true),
                buf(xa + shift, 96, false),
                buf(ya, 32, false),
            ],
        )
        .unwrap_or_else(|e| panic!("x shifted by {shift} bytes: {e}"));
        assert_eq!(read_f32(&d, out, 24), want, "x shifted by {shift} bytes");
    }
}

/// `shfl.sync` exchanges registers within a converged warp (butterfly
/// and index), and a warp with lanes missing is an error.
#[test]
fn shuffles_exchange_lanes_of_a_whole_warp() {
    let (d, memory) = device();
    let (out, inp) = (buffer(memory, 4 * 64), buffer(memory, 4 * 64));
    let values: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    d.copy_to_device(inp, &values).unwrap();
    let with = |shfl: &str| {
        kernel(0, 1, 0).replace(
            "st.global.f32 [%rd7], %f0;",
            &format!("{shfl}\n\tst.global.f32 [%rd7], %f0;"),
        )
    };
    let cases = [
        (
            "shfl.sync.bfly.b32 %f0, %f0, 5, 31, 0xffffffff;",
            5usize,
            true,
        ),
        ("shfl.sync.idx.b32 %f0, %f0, 3, 31, 0xffffffff;", 3, false),
    ];
    for (shfl, b, butterfly) in cases {
        let f = d.load(&with(shfl)).unwrap();
        d.launch(&f, 1, 64, &[buf(out, 256, true), buf(inp, 256, false)])
            .unwrap();
        let got = read_f32(&d, out, 64);
        for (t, g) in got.iter().enumerate() {
            let lane = t % 32;
            let from = if butterfly { lane ^ b } else { b };
            assert_eq!(*g, (t - lane + from) as f32, "{shfl} thread {t}");
        }
    }
    // Half a warp: the other lanes are not there to exchange with.
    let f = d.load(&with(cases[0].0)).unwrap();
    let e = d
        .launch(&f, 1, 16, &[buf(out, 256, true), buf(inp, 256, false)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("lanes of the warp elsewhere"), "{e}");
    let e = d
        .load(&kernel(0, 1, 0).replace(
            "ret;",
            "shfl.sync.down.b32 %f0, %f0, 1, 31, 0xffffffff;\n\tret;",
        ))
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown instruction"), "{e}");
}

/// The simulator's f16 conversions (`cvt.f32.f16`, `cvt.rn.f16.f32`)
/// against the `half` crate (x86's F16C where the CPU has it): every f16
/// widened, and f32 values at every f16 rounding boundary narrowed
/// (every pattern of the upper 19 bits with the 13 bits an f16 drops
/// at, just below, just above and half-way; f16 subnormals, overflow,
/// ±inf and NaN among them).
#[test]
fn f16_conversions_round_to_nearest_even() {
    use super::semantics::{f16_to_f32, f32_to_f16_rn};
    use half::f16;
    for h in 0..=u16::MAX {
        let (got, want) = (f16_to_f32(h), f16::from_bits(h).to_f32());
        if want.is_nan() {
            assert!(got.is_nan(), "{h:#06x}: {got}");
            assert_eq!(f32_to_f16_rn(got) & 0x7E00, 0x7E00, "{h:#06x}");
        } else {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{h:#06x}: {got} against {want}"
            );
            assert_eq!(f32_to_f16_rn(got), h, "{h:#06x} round trip");
        }
    }
    for hi in 0..1u32 << 19 {
        for lo in [0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF] {
            let x = f32::from_bits(hi << 13 | lo);
            let (got, want) = (f32_to_f16_rn(x), f16::from_f32(x).to_bits());
            if x.is_nan() {
                assert!(
                    f16::from_bits(got).is_nan(),
                    "{x:e} ({:#010x})",
                    x.to_bits()
                );
            } else {
                assert_eq!(got, want, "{x:e} ({:#010x})", x.to_bits());
            }
        }
    }
}

/// Elements as their bytes (the simulated device is little-endian, as
/// the host).
fn element_bytes<T: crate::dtype::Element>(v: &[T]) -> Vec<u8> {
    // SAFETY: element types are plain data with no padding (sealed).
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        .to_vec()
}

fn elements<T: crate::dtype::Element>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(std::mem::size_of::<T>())
        // SAFETY: every bit pattern is a valid element (sealed).
        .map(|c| unsafe { c.as_ptr().cast::<T>().read_unaligned() })
        .collect()
}

/// The CPU backend's conversion of `src` (elements of `from`) to `to`.
fn cpu_cast(from: DType, to: DType, src: &[u8]) -> Vec<u8> {
    use crate::dtype::{cast, with_element};
    with_element!(from, S => {
        let x: Vec<S> = elements(src);
        with_element!(to, D => element_bytes(&x.iter().map(|&v| cast::<S, D>(v)).collect::<Vec<D>>()))
    })
}

/// Runs the builtin module `b` writing `dtype` for `arch` on the
/// simulated device: `out` (its initial bytes) written, `src` read, `n`
/// elements, with `(out, src, n)` or, for a fill, `(out, n, value)`
/// as its parameters; `out`'s bytes after it.
fn run_builtin(
    b: crate::gpu::ptx::builtin::Builtin,
    dtype: DType,
    arch: crate::gpu::ptx::Arch,
    out: &[u8],
    src: &[u8],
    value: u64,
) -> Result<Vec<u8>, String> {
    use crate::gpu::ptx::builtin::{module, Builtin};
    let n = out.len() / dtype.size();
    let (d, memory) = device();
    let o = buffer(memory, out.len());
    d.copy_to_device(o, out).unwrap();
    let f = d.load(&module(b, dtype, arch)).map_err(|e| e.to_string())?;
    let args = if b == Builtin::Fill {
        vec![
            buf(o, out.len(), true),
            Arg::Scalar(n as u64),
            Arg::Scalar(value),
        ]
    } else {
        let s = buffer(memory, src.len());
        d.copy_to_device(s, src).unwrap();
        vec![
            buf(o, out.len(), true),
            buf(s, src.len(), false),
            Arg::Scalar(n as u64),
        ]
    };
    d.launch(&f, 4, 128, &args).map_err(|e| e.to_string())?;
    let mut back = vec![0u8; out.len()];
    d.copy_to_host(&mut back, o).unwrap();
    Ok(back)
}

/// `got` and `want` (elements of `dtype`) agree bit for bit, a NaN only
/// as a NaN; `src` (elements of `from`) names the failing input.
fn same_elements(dtype: DType, got: &[u8], want: &[u8], from: DType, src: &[u8], what: &str) {
    use crate::dtype::{with_element, Element};
    assert_eq!(got.len(), want.len(), "{what}");
    let (s, fs) = (dtype.size(), from.size());
    let nan = |b: &[u8]| with_element!(dtype, T => dtype.is_float() && elements::<T>(b)[0].to_f64().is_nan());
    for (k, (g, w)) in got.chunks_exact(s).zip(want.chunks_exact(s)).enumerate() {
        if g != w && !(nan(w) && nan(g)) {
            let input = &src[k * fs..(k + 1) * fs];
            let show = |b: &[u8]| -> String {
                let mut le = [0u8; 8];
                le[..b.len()].copy_from_slice(b);
                format!("{:#x}", u64::from_le_bytes(le))
            };
            panic!(
                "{what}: element {k}, input bits {}: {} on the device, {} on the CPU",
                show(input),
                show(g),
                show(w)
            );
        }
    }
}

/// f32 inputs for a conversion to a half: signed zeros, the ties of bf16
/// (half an ulp is f32 bit 15) and f16 (bit 12) with an even and an odd
/// significand before them, and their neighbours, across binades; f16
/// subnormals, their ties and values that underflow to ±0 or round up to
/// the smallest normal; the largest finite values, the ties above them
/// (to inf) and overflow; f32 subnormals (bf16 subnormals), ±inf, NaNs;
/// and random bit patterns.
fn f32_cases() -> Vec<f32> {
    let mut bits: Vec<u32> = vec![
        0x0000_0000, // +0
        0x8000_0000, // -0
        0x3F80_0000, // 1
        0x3FC0_0000, // 1.5
        0x477F_E000, // 65504, f16's largest finite
        0x477F_EFFF, // just below the tie above it: 65504
        0x477F_F000, // 65520, the tie: inf
        0x477F_F001,
        0x4780_0000, // 65536: inf in f16
        0x7F7F_0000, // bf16's largest finite
        0x7F7F_7FFF, // just below the tie above it
        0x7F7F_8000, // the tie: inf
        0x7F7F_FFFF, // f32::MAX
        0x0000_0001, // the smallest f32 subnormal
        0x0040_8000, // an f32 (and bf16) subnormal tie
        0x0041_8000,
        0x007F_FFFF,
        0x0080_0000, // f32::MIN_POSITIVE
        0x387F_F000, // just below f16's smallest normal 2^-14: rounds to it
        0x3880_0000, // 2^-14
        0x7F80_0000, // inf
        0x7FC0_0000, // NaN
        0x7F80_0001, // a signalling NaN (bf16's rounding would carry it to inf)
        0x7FFF_FFFF, // a NaN whose rounding would overflow the sign
        0xFFC1_2345, // a negative NaN with a payload
    ];
    for base in [
        0x3F80_0000u32,
        0x4000_0000,
        0x4300_0000,
        0x4680_0000,
        0x0100_0000,
        0x3880_0000,
        0x5F00_0000,
    ] {
        for odd in [0, 0x1_0000, 0x2000] {
            for low in [0x8000, 0x1000] {
                for delta in [-1i32, 0, 1] {
                    bits.push((base + odd + low).wrapping_add_signed(delta));
                }
            }
        }
    }
    // f16 subnormals (multiples of 2^-24), their ties (odd multiples of
    // 2^-25) and the f32 values beside them, and smaller ones.
    for k in [1u32, 2, 3, 5, 6, 7, 2047] {
        let x = k as f32 * f32::from_bits(0x3300_0000); // k·2^-25
        bits.extend([x.to_bits() - 1, x.to_bits(), x.to_bits() + 1]);
    }
    bits.extend([0x3280_0000, 0x3000_0000, 0x3200_0001]); // 2^-26, 2^-31, just above 2^-27
    let n = bits.len();
    for k in 0..n {
        bits.push(bits[k] ^ 0x8000_0000);
    }
    let mut r = 0x9E37_79B9u32;
    for _ in 0..512 {
        r = r.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        bits.push(r);
    }
    bits.into_iter().map(f32::from_bits).collect()
}

/// f64 inputs: the f32 cases, and values whose rounding to f32 lands on a
/// half's tie (so the second rounding goes to even where one rounding
/// would go up, as PyTorch's two do), beyond f32's range, and tiny.
fn f64_cases() -> Vec<f64> {
    let mut v: Vec<f64> = f32_cases().into_iter().map(f64::from).collect();
    let tiny = 2f64.powi(-40);
    for tie in [
        1.0 + 2f64.powi(-8),
        1.0 + 2f64.powi(-11),
        1.0 + 3.0 * 2f64.powi(-11),
    ] {
        v.extend([tie + tie * tiny, tie - tie * tiny, -(tie + tie * tiny)]);
    }
    v.extend([
        65519.999999,
        65520.0000001,
        1e300,
        -1e300,
        1e-300,
        -1e-300,
        5e-324,
        f64::MAX,
        f64::NAN,
        -f64::NAN,
    ]);
    v
}

/// Integer inputs: bf16 and f16 ties (257 is between 256 and 258), the
/// overflow of f16 (65520), and values an f32 rounds onto a bf16 tie
/// (2^24 + 2^16 + 1, 2^40 + 2^32 + 1), extremes.
fn i64_cases() -> Vec<i64> {
    let mut v = vec![
        0i64,
        1,
        7,
        255,
        256,
        257,
        258,
        259,
        2049,
        2051,
        65504,
        65519,
        65520,
        65535,
        70000,
        1 << 24,
        (1 << 24) + 1,
        (1 << 24) + (1 << 16) + 1,
        123_456_789,
        i32::MAX as i64,
        (1 << 40) + (1 << 32) + 1,
        1 << 62,
        i64::MAX,
    ];
    let n = v.len();
    for k in 0..n {
        v.push(-v[k]);
    }
    v.extend([i32::MIN as i64, i64::MIN]);
    v
}

/// Every conversion to and from `BF16` and `F16` (from f32, f64, i32,
/// i64 and the other half; to f32, f64, i32, i64 and the other half, from
/// every one of the 65536 bit patterns), f32 values rounded to a half's
/// values (there and back in one kernel), and a half's fill and addition,
/// for every architecture's module on the simulated device, against the
/// CPU backend bit for bit (a NaN as a NaN).
#[test]
fn half_builtins_match_the_cpu_on_every_arch() {
    use crate::gpu::ptx::builtin::Builtin;
    use crate::gpu::ptx::Arch;
    let every: Vec<u16> = (0..=u16::MAX).collect();
    let ints = i64_cases();
    let inputs = |from: DType| -> Vec<u8> {
        match from {
            DType::F32 => element_bytes(&f32_cases()),
            DType::F64 => element_bytes(&f64_cases()),
            DType::I32 => element_bytes(&ints.iter().map(|&x| x as i32).collect::<Vec<_>>()),
            DType::I64 => element_bytes(&ints),
            _ => every.iter().flat_map(|h| h.to_le_bytes()).collect(),
        }
    };
    let all = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
    ];
    for arch in Arch::ALL {
        for half in [DType::BF16, DType::F16] {
            for other in all {
                for (from, to) in [(other, half), (half, other)] {
                    let src = inputs(from);
                    let n = src.len() / from.size();
                    let want = cpu_cast(from, to, &src);
                    let what = format!("{arch:?}: {from:?} -> {to:?}");
                    let got = run_builtin(
                        Builtin::Cast { from },
                        to,
                        arch,
                        &vec![0; n * to.size()],
                        &src,
                        0,
                    )
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                    same_elements(to, &got, &want, from, &src, &what);
                }
            }
            // f32 values rounded to the half's values, in f32: the
            // conversion there and back.
            let src = inputs(DType::F32);
            let there = cpu_cast(DType::F32, half, &src);
            let want = cpu_cast(half, DType::F32, &there);
            let what = format!("{arch:?}: F32 rounded to {half:?} values");
            let got = run_builtin(
                Builtin::RoundToHalf { half },
                DType::F32,
                arch,
                &vec![0; src.len()],
                &src,
                0,
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            same_elements(DType::F32, &got, &want, DType::F32, &src, &what);
            // Addition: every pattern plus a random one, plus its
            // neighbour (cancellation, ties), plus its negation (+0).
            let mut r = 0x2545_F491u32;
            let partners: [Vec<u16>; 3] = [
                every
                    .iter()
                    .map(|_| {
                        r = r.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        (r >> 16) as u16
                    })
                    .collect(),
                every.iter().map(|&h| h.wrapping_add(1)).collect(),
                every.iter().map(|&h| h ^ 0x8000).collect(),
            ];
            for partner in &partners {
                let bytes =
                    |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|h| h.to_le_bytes()).collect() };
                let (dst, src) = (bytes(&every), bytes(partner));
                let want = crate::dtype::with_element!(half, T => {
                    let (a, b): (Vec<T>, Vec<T>) = (elements(&dst), elements(&src));
                    element_bytes(&a.iter().zip(&b).map(|(&x, &y)| crate::dtype::Element::add(x, y)).collect::<Vec<T>>())
                });
                let what = format!("{arch:?}: {half:?} add_assign");
                let got = run_builtin(Builtin::AddAssign, half, arch, &dst, &src, 0)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                same_elements(half, &got, &want, half, &src, &what);
            }
            // Fill: the value's 16 bits in every element.
            for value in f64_cases() {
                let want = crate::dtype::with_element!(half, T => {
                    element_bytes(&[<T as crate::dtype::Element>::from_f64(value); 37])
                });
                let bits = u64::from(u16::from_le_bytes([want[0], want[1]]));
                let what = format!("{arch:?}: {half:?} fill {value:e}");
                let got = run_builtin(Builtin::Fill, half, arch, &[0xAB; 74], &[], bits)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got, want, "{what}");
            }
        }
    }
}

/// 2-byte stores are checked per element: two threads storing one half
/// is an error (the two halves of one word are two elements), and a
/// misaligned one too.
#[test]
fn two_byte_stores_are_checked_per_element() {
    use crate::gpu::ptx::builtin::{module, Builtin};
    use crate::gpu::ptx::Arch;
    let text = module(Builtin::Fill, DType::BF16, Arch::Sm80);
    let store = "mad.lo.s64 %rd7, %rd5, 2, %rd0;";
    assert!(text.contains(store), "{text}");
    let (d, memory) = device();
    let out = buffer(memory, 64);
    let run = |text: &str| {
        let f = d.load(text).map_err(|e| e.to_string())?;
        d.launch(
            &f,
            1,
            32,
            &[buf(out, 64, true), Arg::Scalar(32), Arg::Scalar(0x3F80)],
        )
        .map_err(|e| e.to_string())
    };
    run(&text).unwrap();
    let mut back = [0u8; 64];
    d.copy_to_host(&mut back, out).unwrap();
    assert!(back.chunks_exact(2).all(|c| c == [0x80, 0x3F]), "{back:?}");
    let e = run(&text.replace(store, "mad.lo.s64 %rd7, %rd5, 0, %rd0;")).unwrap_err();
    assert!(e.contains("both store"), "{e}");
    let e = run(&text.replace(
        store,
        "mad.lo.s64 %rd7, %rd5, 2, %rd0;\n\tadd.s64 %rd7, %rd7, 1;",
    ))
    .unwrap_err();
    assert!(e.contains("misaligned 2-byte access"), "{e}");
}

/// The strided add, in every element type: each placement (merged, as
/// the backend launches it) adds exactly what the CPU's run-by-run add
/// does (`Element::add` over the placement's runs), flipped and
/// interleaved dimensions included.
#[test]
fn the_strided_add_places_like_the_cpu() {
    use crate::dtype::with_element;
    use crate::gpu::ptx::builtin::{module, Builtin};
    use crate::kernel::strided::Strided;
    let places = [
        // `x[:, 2]` of `[3, 5, 4]`; a chunk of the last dimension of
        // `[2, 3, 8]`; a flipped, strided slice; one element.
        (8usize, vec![3usize, 4], vec![20i64, 1]),
        (4, vec![2, 3, 4], vec![24, 8, 1]),
        (45, vec![3, 2, 2], vec![-20, 5, -2]),
        (7, vec![1], vec![1]),
    ];
    for dtype in [DType::F32, DType::F64, DType::I64, DType::BF16, DType::F16] {
        for (start, shape, coeffs) in &places {
            let place = Strided {
                shape: shape.clone(),
                coeffs: coeffs.clone(),
            };
            let merged = place.merged();
            let (len, n) = (60usize, place.len());
            with_element!(dtype, T => {
                let value = |i: usize| <T as crate::dtype::Element>::from_f64((i % 13) as f64 * 0.75 - 2.0);
                let base: Vec<T> = (0..len).map(|i| value(i + 5)).collect();
                let src: Vec<T> = (0..n).map(value).collect();
                // The CPU's order: run by run, in place.
                let mut want = base.clone();
                let (at, run) = place.runs(*start, len).unwrap();
                for (r, &p) in at.iter().enumerate() {
                    for i in 0..run {
                        want[p + i] = crate::dtype::Element::add(want[p + i], src[r * run + i]);
                    }
                }
                assert_ne!(want, base);
                let (d, memory) = device();
                let bytes = |v: &[T]| element_bytes(v);
                let (o, s) = (buffer(memory, len * dtype.size()), buffer(memory, n * dtype.size()));
                d.copy_to_device(o, &bytes(&base)).unwrap();
                d.copy_to_device(s, &bytes(&src)).unwrap();
                let rank = merged.shape.len() as u8;
                let f = d.load(&module(Builtin::AddStrided { rank }, dtype, crate::gpu::ptx::Arch::Sm80)).unwrap();
                let mut args = vec![
                    buf(o, len * dtype.size(), true),
                    buf(s, n * dtype.size(), false),
                    Arg::Scalar(n as u64),
                    Arg::Scalar(*start as u64),
                ];
                for (&size, &c) in merged.shape.iter().zip(&merged.coeffs) {
                    args.extend([Arg::Scalar(size as u64), Arg::Scalar(c as u64)]);
                }
                d.launch(&f, 2, 8, &args).unwrap();
                let mut back = vec![0u8; len * dtype.size()];
                d.copy_to_host(&mut back, o).unwrap();
                assert_eq!(back, bytes(&want), "{dtype:?} {place:?} from {start}");
            });
        }
    }
}
