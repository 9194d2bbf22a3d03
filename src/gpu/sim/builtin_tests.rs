//! The backend's own kernels (`crate::gpu::ptx::builtin`: fills, adds,
//! strided adds, casts, roundings to half values) run in the simulator
//! against the CPU's results, bit for bit, on every architecture.

use super::super::driver::{Arg, Driver};
use super::tests::{buf, buffer, device};
use crate::DType;

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
