//! What one instruction computes for one thread: comparisons,
//! conversions, unary and binary operations on raw register bits.
//!
//! Owns the semantics of the decoded ops (`super::interp`'s [`Cmp`],
//! [`Conv`], [`Un`], [`Bin`]); `super::warp` applies them lane by lane.
//! Must not decode or touch memory.

use super::isa::{Bin, Cmp, Conv, FCmp, ICmp, IntTy, Round, Un};

impl Round {
    fn apply(self, x: f64) -> f64 {
        match self {
            Round::Zero => x.trunc(),
            Round::Nearest => x.round_ties_even(),
            Round::Down => x.floor(),
        }
    }
}

fn f32b(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn f32u(x: f32) -> u64 {
    x.to_bits() as u64
}
fn f64b(x: u64) -> f64 {
    f64::from_bits(x)
}

/// The f32 with exponent `e` (a power of two in the normal range).
fn pow2_f32(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// The value of the IEEE binary16 `h`, exactly (every f16 is an f32). A
/// NaN stays a NaN with its sign and payload, made quiet (as x86's F16C
/// does; PTX leaves a NaN's payload unspecified).
pub(super) fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let (e, m) = (i32::from((h >> 10) & 0x1F), u32::from(h & 0x3FF));
    match e {
        0 => sign * m as f32 * pow2_f32(-24),
        0x1F if m == 0 => sign * f32::INFINITY,
        0x1F => f32::from_bits((u32::from(h & 0x8000) << 16) | 0x7FC0_0000 | (m << 13)),
        _ => sign * (1024 + m) as f32 * pow2_f32(e - 25),
    }
}

/// `x` rounded to the nearest IEEE binary16 (ties to even), as
/// `cvt.rn.f16.f32`: below 2⁻¹⁴ to a multiple of 2⁻²⁴ (subnormals, or
/// zero with `x`'s sign), from 65520 (half-way between the largest finite,
/// 65504, and 2¹⁶) on to ±inf. A NaN stays a quiet NaN with its sign and
/// upper payload.
pub(super) fn f32_to_f16_rn(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if x.is_nan() {
        return sign | 0x7E00 | ((bits >> 13) & 0x3FF) as u16;
    }
    let v = f64::from(x.abs());
    if v >= 65520.0 {
        return sign | 0x7C00;
    }
    // The binade of `v` (that of the smallest normal for subnormals and
    // zero), and its spacing 2^(e − 10): `v / spacing` is exact, and
    // rounding it to an integer `q` (1024 ≤ q ≤ 2048 for a normal: 2048
    // carries into the next binade) is the rounding to binary16.
    let e = ((((bits >> 23) & 0xFF) as i32) - 127).max(-14);
    let spacing = f64::from_bits(((e - 10 + 1023) as u64) << 52);
    let q = (v / spacing).round_ties_even() as u16;
    sign | ((((e + 15) as u16) << 10) + q - 1024)
}

#[inline(always)]
pub(super) fn compare(cmp: Cmp, a: u64, b: u64) -> bool {
    let float = |c: FCmp, x: f64, y: f64| match c {
        FCmp::Eq => x == y,
        FCmp::Neu => x != y,
        FCmp::Ge => x >= y,
        FCmp::Gt => x > y,
        FCmp::Le => x <= y,
        FCmp::Lt => x < y,
        FCmp::Nan => x.is_nan() || y.is_nan(),
        FCmp::Num => !x.is_nan() && !y.is_nan(),
    };
    match cmp {
        Cmp::F32(c) => float(c, f32b(a) as f64, f32b(b) as f64),
        Cmp::F64(c) => float(c, f64b(a), f64b(b)),
        Cmp::Int(c, ty) => {
            let (x, y): (i128, i128) = match ty {
                IntTy::S64 => (a as i64 as i128, b as i64 as i128),
                IntTy::U64 => (a as i128, b as i128),
                IntTy::S32 => (a as u32 as i32 as i128, b as u32 as i32 as i128),
                IntTy::U32 => (a as u32 as i128, b as u32 as i128),
            };
            match c {
                ICmp::Eq => x == y,
                ICmp::Ne => x != y,
                ICmp::Ge => x >= y,
                ICmp::Gt => x > y,
                ICmp::Le => x <= y,
                ICmp::Lt => x < y,
            }
        }
    }
}

#[inline(always)]
pub(super) fn convert(conv: Conv, a: u64) -> u64 {
    let float = |from_f32: bool| if from_f32 { f32b(a) as f64 } else { f64b(a) };
    match conv {
        Conv::U32ToU64 | Conv::U64ToU32 => a as u32 as u64,
        Conv::F32ToF64 => f64::from(f32b(a)).to_bits(),
        Conv::F64ToF32Rn => f32u(f64b(a) as f32),
        Conv::S64ToF32Rn => f32u(a as i64 as f32),
        Conv::S64ToF64Rn => (a as i64 as f64).to_bits(),
        Conv::S32ToF32Rn => f32u(a as u32 as i32 as f32),
        Conv::S32ToF64Rn => (a as u32 as i32 as f64).to_bits(),
        Conv::S32ToS64 => a as u32 as i32 as i64 as u64,
        Conv::Low16 => a as u16 as u64,
        Conv::F16ToF32 => f32u(f16_to_f32(a as u16)),
        Conv::F32ToF16Rn => f32_to_f16_rn(f32b(a)) as u64,
        Conv::RoundF64(r) => r.apply(f64b(a)).to_bits(),
        Conv::RoundF32(r) => f32u(r.apply(f32b(a) as f64) as f32),
        Conv::ToS64(r, from_f32) => r.apply(float(from_f32)) as i64 as u64,
        Conv::ToS32(r, from_f32) => r.apply(float(from_f32)) as i32 as u32 as u64,
    }
}

#[inline(always)]
pub(super) fn apply_unary(op: Un, a: u64) -> u64 {
    match op {
        Un::NegF32 => f32u(-f32b(a)),
        Un::NegF64 => (-f64b(a)).to_bits(),
        Un::AbsF32 => f32u(f32b(a).abs()),
        Un::AbsF64 => f64b(a).abs().to_bits(),
        Un::AbsS32 => (a as u32 as i32).wrapping_abs() as u32 as u64,
        Un::SqrtF32 => f32u(f32b(a).sqrt()),
        Un::SqrtF64 => f64b(a).sqrt().to_bits(),
    }
}

#[inline(always)]
pub(super) fn apply_binary(op: Bin, a: u64, b: u64) -> Option<u64> {
    let (sa, sb) = (a as i64, b as i64);
    let (fa, fb) = (f32b(a), f32b(b));
    let (da, db) = (f64b(a), f64b(b));
    Some(match op {
        Bin::AddF32 => f32u(fa + fb),
        Bin::SubF32 => f32u(fa - fb),
        Bin::MulF32 => f32u(fa * fb),
        Bin::DivF32 => f32u(fa / fb),
        Bin::AddF64 => (da + db).to_bits(),
        Bin::SubF64 => (da - db).to_bits(),
        Bin::MulF64 => (da * db).to_bits(),
        Bin::DivF64 => (da / db).to_bits(),
        Bin::MinF64 => da.min(db).to_bits(),
        Bin::MaxF64 => da.max(db).to_bits(),
        Bin::CopysignF64 => db.copysign(da).to_bits(),
        Bin::CopysignF32 => f32u(fb.copysign(fa)),
        Bin::Add => a.wrapping_add(b),
        Bin::Sub => a.wrapping_sub(b),
        Bin::Add32 => (a as u32).wrapping_add(b as u32) as u64,
        Bin::Sub32 => (a as u32).wrapping_sub(b as u32) as u64,
        Bin::MulLo => a.wrapping_mul(b),
        Bin::MulWideU32 => (a as u32 as u64) * (b as u32 as u64),
        Bin::DivS64 => sa.checked_div(sb)? as u64,
        Bin::RemS64 => sa.checked_rem(sb)? as u64,
        Bin::DivU64 => a.checked_div(b)?,
        Bin::RemU64 => a.checked_rem(b)?,
        Bin::DivU32 => (a as u32).checked_div(b as u32)? as u64,
        Bin::RemU32 => (a as u32).checked_rem(b as u32)? as u64,
        Bin::MaxS64 => sa.max(sb) as u64,
        Bin::MinS64 => sa.min(sb) as u64,
        Bin::MulLo32 => (a as u32).wrapping_mul(b as u32) as u64,
        Bin::DivS32 => (a as u32 as i32).checked_div(b as u32 as i32)? as u32 as u64,
        Bin::RemS32 => (a as u32 as i32).checked_rem(b as u32 as i32)? as u32 as u64,
        Bin::MaxS32 => (a as u32 as i32).max(b as u32 as i32) as u32 as u64,
        Bin::MinS32 => (a as u32 as i32).min(b as u32 as i32) as u32 as u64,
        Bin::Shl64 => a.checked_shl(b as u32)?,
        Bin::ShrU64 => a.checked_shr(b as u32)?,
        Bin::ShrU32 => ((a as u32).checked_shr(b as u32)?) as u64,
        Bin::And64 => a & b,
        Bin::Or64 => a | b,
        Bin::Xor64 => a ^ b,
        Bin::And32 => (a as u32 & b as u32) as u64,
        Bin::Or32 => (a as u32 | b as u32) as u64,
        // PTX clamps shift amounts above 32 (to 0 bits, or the sign).
        Bin::Shl32 => (a as u32).checked_shl(b as u32).unwrap_or(0) as u64,
        Bin::ShrS32 => ((a as u32 as i32) >> (b as u32).min(31)) as u32 as u64,
        Bin::AndPred => ((a != 0) && (b != 0)) as u64,
        Bin::OrPred => ((a != 0) || (b != 0)) as u64,
    })
}
