//! The simulated device's cuBLAS: `gemmStridedBatched` as reference loops
//! that first validate their arguments the way cuBLAS does.
//!
//! Owns [`gemm`]: leading dimensions at least the stored rows (else
//! cuBLAS's `CUBLAS_STATUS_INVALID_VALUE`), sizes that fit its 32-bit
//! integers, every element a call touches inside its operand's buffer,
//! and `C` overlapping neither `A` nor `B`. The product is computed in the
//! element type (f32 sums in f32, in index order; in `MathMode::Tf32`
//! each f32 input rounded to TF32 first, and with half operands to their
//! half type, as the tensor cores see them; A and B may then be buffers
//! of that half type, as `GemmEx` reads them), `C` is not read when
//! `beta` is 0 (as cuBLAS). Must not run anything but this reference.

use super::super::driver::{GemmCall, Matrix};
use super::super::math_mode::{round_to_tf32, MathMode};
use super::memory::Blocks;
use crate::DType;

/// The element range `[first, last]` a matrix of `rows × cols` (stored,
/// column-major) touches over `batch` products, checked against its
/// buffer; `None` when it touches nothing.
fn span(
    name: &str,
    m: &Matrix,
    rows: usize,
    cols: usize,
    batch: usize,
    dtype: DType,
) -> Result<Option<(u64, usize)>, String> {
    let size = dtype.size();
    if m.ld < rows.max(1) {
        return Err(format!(
            "ld{name} = {} is below max(1, {rows}) rows (CUBLAS_STATUS_INVALID_VALUE)",
            m.ld
        ));
    }
    if rows == 0 || cols == 0 || batch == 0 {
        return Ok(None);
    }
    let last = m.offset + (batch - 1) * m.stride + (cols - 1) * m.ld + (rows - 1);
    let super::super::driver::Arg::Buffer { bytes, .. } = m.buffer else {
        return Err(format!("{name} is not a buffer"));
    };
    if (last + 1) * size > bytes {
        return Err(format!(
            "{name} would be read at element {last}, beyond its buffer of {} elements",
            bytes / size
        ));
    }
    Ok(Some((m.address(dtype), (last + 1 - m.offset) * size)))
}

fn overlap(x: Option<(u64, usize)>, y: Option<(u64, usize)>) -> bool {
    match (x, y) {
        (Some((a, n)), Some((b, k))) => a < b + k as u64 && b < a + n as u64,
        _ => false,
    }
}

/// The values of `len` bytes at `start` as f64.
fn read(blocks: &mut Blocks, at: Option<(u64, usize)>, dtype: DType) -> Result<Vec<f64>, String> {
    let Some((start, len)) = at else {
        return Ok(Vec::new());
    };
    let mut bytes = vec![0u8; len];
    blocks.read(start, &mut bytes)?;
    Ok(match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    })
}

/// Runs `call` on `blocks` (see the module documentation).
pub(crate) fn gemm(blocks: &mut Blocks, call: &GemmCall) -> Result<(), String> {
    if !call.dtype.is_float() {
        return Err(format!(
            "no GEMM on {:?} (CUBLAS_STATUS_NOT_SUPPORTED)",
            call.dtype
        ));
    }
    let dims = [
        call.m, call.n, call.k, call.a.ld, call.b.ld, call.c.ld, call.batch,
    ];
    if dims.iter().any(|&d| d > i32::MAX as usize) {
        return Err(format!(
            "a size beyond 32 bits: {dims:?} (CUBLAS_STATUS_INVALID_VALUE)"
        ));
    }
    let (ar, ac) = if call.trans_a {
        (call.k, call.m)
    } else {
        (call.m, call.k)
    };
    let (br, bc) = if call.trans_b {
        (call.n, call.k)
    } else {
        (call.k, call.n)
    };
    // Half buffers only for half products summed in f32 (`GemmEx`).
    let operands = call.operands;
    if operands != call.dtype && !(call.dtype == DType::F32 && call.half_operands == Some(operands))
    {
        return Err(format!(
            "A and B of {operands:?} for a {:?} product of {:?} operands (CUBLAS_STATUS_NOT_SUPPORTED)",
            call.dtype, call.half_operands
        ));
    }
    let sa = span("a", &call.a, ar, ac, call.batch, operands)?;
    let sb = span("b", &call.b, br, bc, call.batch, operands)?;
    let sc = span("c", &call.c, call.m, call.n, call.batch, call.dtype)?;
    if let super::super::driver::Arg::Buffer {
        writable: false, ..
    } = call.c.buffer
    {
        return Err("C is not writable".into());
    }
    if overlap(sc, sa) || overlap(sc, sb) {
        return Err("C overlaps A or B (cuBLAS's results would be undefined)".into());
    }
    let Some((c_start, _)) = sc else {
        return Ok(());
    };
    let a = read(blocks, sa, operands)?;
    let b = read(blocks, sb, operands)?;
    // Read whole, so the elements between columns (`ldc > m`: other
    // calls' results) are written back as they were; their values enter
    // the product only when `beta` is not 0.
    let mut c = read(blocks, sc, call.dtype)?;
    let at = |m: &Matrix, trans: bool, p: usize, r: usize, col: usize| {
        let (r, col) = if trans { (col, r) } else { (r, col) };
        p * m.stride + col * m.ld + r
    };
    let f32 = call.dtype == DType::F32;
    // TF32, or half operands: the tensor cores see each f32 input rounded
    // (half operands' values round to themselves).
    let input = |v: f64| match (call.half_operands, call.math) {
        (Some(DType::BF16), _) if f32 => half::bf16::from_f32(v as f32).to_f32(),
        (Some(DType::F16), _) if f32 => half::f16::from_f32(v as f32).to_f32(),
        (_, MathMode::Tf32) if f32 => round_to_tf32(v as f32),
        _ => v as f32,
    };
    for p in 0..call.batch {
        for j in 0..call.n {
            for i in 0..call.m {
                let ci = p * call.c.stride + j * call.c.ld + i;
                let (mut acc32, mut acc64) = (0f32, 0f64);
                for l in 0..call.k {
                    let x = a[at(&call.a, call.trans_a, p, i, l)];
                    let y = b[at(&call.b, call.trans_b, p, l, j)];
                    if f32 {
                        acc32 += input(x) * input(y);
                    } else {
                        acc64 += x * y;
                    }
                }
                c[ci] = if f32 {
                    let mut v = call.alpha as f32 * acc32;
                    if call.beta != 0.0 {
                        v += call.beta as f32 * c[ci] as f32;
                    }
                    v as f64
                } else {
                    let mut v = call.alpha * acc64;
                    if call.beta != 0.0 {
                        v += call.beta * c[ci];
                    }
                    v
                };
            }
        }
    }
    let bytes: Vec<u8> = if f32 {
        c.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()
    } else {
        c.iter().flat_map(|&v| v.to_le_bytes()).collect()
    };
    blocks.write(c_start, &bytes)
}
