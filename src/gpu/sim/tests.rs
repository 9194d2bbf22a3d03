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

pub(super) fn device() -> (SimDriver, &'static SimMemory) {
    let memory: &'static SimMemory = Box::leak(Box::new(SimMemory::new()));
    (SimDriver::new(Device::Cuda(99), memory), memory)
}

pub(super) fn buffer(memory: &SimMemory, bytes: usize) -> u64 {
    memory.alloc(bytes).map(|p| p.as_ptr() as u64).unwrap()
}

pub(super) fn buf(addr: u64, bytes: usize, writable: bool) -> Arg {
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
