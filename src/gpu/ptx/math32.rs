//! f32 transcendental functions as f32 PTX instruction sequences.
//!
//! The same algorithms, coefficients and order of operations as the CPU
//! backend's vectorised f32 code (`crate::cpu`'s `vmath`: Cephes' `expf`,
//! `logf` and `tanhf`, and the mirrored `sigmoid`), with `fma.rn.f32`
//! where it fuses, so a GPU lane computes what a CPU lane with FMA
//! computes. No f64 instruction is
//! involved: consumer GPUs run f64 at 1/64 of their f32 rate. Accuracy is
//! in `super::math`'s table; `tests/ptx.rs` enforces it.
//!
//! Owns nothing but instruction sequences; must not know about kernels.

// Cephes' coefficients as published (they round to the intended f32s).
#![allow(clippy::excessive_precision)]

use super::asm::{Ty, R};
use super::float::Fp;

/// 1.5·2²³: adding it rounds an f32 in [-2²², 2²²] to an integer held in
/// the low mantissa bits.
const SHIFTER: f64 = 12_582_912.0;
/// ln 2 in two parts; `n·LN2_HI` is exact for the `n` that occur.
const LN2_HI: f64 = 0.693_359_375;
const LN2_LO: f64 = -2.121_944_4e-4;

/// Integer `op` on 32-bit registers: `d = x op y`.
fn int(f: &mut Fp, op: &str, x: R, y: impl std::fmt::Display) -> R {
    f.a.bin(op, Ty::B32, x, y)
}

/// `eˣ` (Cephes' `expf`: `n = round(x·log₂e)` by the shifter, a
/// Cody–Waite reduction by ln 2, `1 + r + r²·P(r)`, then `·2ⁿ` in two
/// factors so that only the last product rounds, into the subnormals too).
pub(crate) fn exp(f: &mut Fp, x: R) -> R {
    debug_assert_eq!(f.w, Ty::F32);
    // Clamp with compares, so NaN passes through (`min`/`max` would drop
    // it): above 88.8 the result overflows to ∞, below −104 it is 0.
    let (hi, lo) = (f.lit(88.8), f.lit(-104.0));
    let over = f.setp("gt", x, &hi);
    let x = f.pick(over, &hi, x);
    let under = f.setp("lt", x, &lo);
    let x = f.pick(under, &lo, x);
    let (log2e, shifter) = (f.lit(std::f64::consts::LOG2_E), f.lit(SHIFTER));
    let t = f.fma(x, log2e, &shifter);
    let n = f.sub(t, &shifter);
    let t_bits = f.bits(t);
    let ni = int(f, "sub.s32", t_bits, 0x4B40_0000);
    let (c1, c2) = (f.lit(-LN2_HI), f.lit(-LN2_LO));
    let r = f.fma(n, c1, x);
    let r = f.fma(n, c2, r);
    let p = f.horner_fma(
        r,
        &[
            0.5,
            1.666_666_5e-1,
            4.166_579_6e-2,
            8.333_452e-3,
            1.398_199_9e-3,
            1.987_569_1e-4,
        ],
    );
    let z = f.mul(r, r);
    let y = f.fma(p, z, r);
    let one = f.lit(1.0);
    let mut y = f.add(y, one);
    let n1 = int(f, "shr.s32", ni, 1);
    let n2 = int(f, "sub.s32", ni, n1);
    for n in [n1, n2] {
        let e = int(f, "add.s32", n, 127);
        let e = int(f, "shl.b32", e, 23);
        let s = f.with_bits(e);
        y = f.mul(y, s);
    }
    y
}

/// `tanh x` on `|x|` with the sign of `x`: `|x| + |x|·z·P(z)` (`z = x²`)
/// below 0.625, else `1 − 2/(e^{2|x|} + 1)`.
pub(crate) fn tanh(f: &mut Fp, x: R) -> R {
    let a = f.abs(x);
    let z = f.mul(x, x);
    let p = f.horner_fma(
        z,
        &[
            -3.333_328e-1,
            1.333_144_2e-1,
            -5.373_971_6e-2,
            2.063_909e-2,
            -5.704_988_7e-3,
        ],
    );
    let pz = f.mul(p, z);
    let small = f.fma(pz, a, a);
    let two_a = f.add(a, a);
    let e = exp(f, two_a);
    let (one, two) = (f.lit(1.0), f.lit(2.0));
    let d = f.add(e, &one);
    let q = f.div(two, d);
    let large = f.sub(&one, q);
    let is_small = f.below(a, 0.625);
    let t = f.pick(is_small, small, large);
    f.copysign(x, t)
}

/// `1/(1 + e^{−x})` as `1/(1 + e)` for `x ≥ 0` and `e/(1 + e)` below,
/// with `e = e^{−|x|}`: no overflow, and subnormal results where they are
/// due.
pub(crate) fn sigmoid(f: &mut Fp, x: R) -> R {
    let a = f.abs(x);
    let na = f.neg(a);
    let e = exp(f, na);
    let one = f.lit(1.0);
    let d = f.add(&one, e);
    let negative = f.below(x, 0.0);
    let num = f.pick(negative, e, &one);
    f.div(num, d)
}

/// `erf x`, Norbert Juffa's faithfully rounded `erff` (also MLX's and
/// PyTorch's Metal `erf`): `x + x·P(x²)` up to |x| = 0.927734375, above it
/// `1 − e^{Q(|x|)}` with the sign of `x`. Both sides are computed and one
/// picked: 7 + 8 `fma`s and one `exp`, where musl's four-range `erff`
/// (`super::special::erf`, kept for f64) costs four divisions and two
/// `exp`s. NaN passes through, ±∞ gives ±1.
pub(crate) fn erf(f: &mut Fp, x: R) -> R {
    let a = f.abs(x);
    let s = f.mul(x, x);
    let p = f.horner_fma(
        s,
        &[
            1.283_791_66e-1,
            -3.761_253_36e-1,
            1.128_199_25e-1,
            -2.676_813_49e-2,
            4.991_194_23e-3,
            -5.967_617_03e-4,
        ],
    );
    let small = f.fma(p, x, x);
    let (c0, c1) = (f.lit(-1.728_534_70e-5), f.lit(3.831_971_26e-4));
    let r = f.fma(c0, a, c1);
    let (c2, c3) = (f.lit(-3.883_964_38e-3), f.lit(2.425_462_19e-2));
    let u = f.fma(c2, a, c3);
    let mut r = f.fma(r, s, u);
    for c in [-1.067_778_77e-1, -6.348_466_87e-1, -1.287_175_12e-1] {
        let c = f.lit(c);
        r = f.fma(r, a, c);
    }
    let na = f.neg(a);
    let r = f.fma(r, a, na);
    let e = exp(f, r);
    let one = f.lit(1.0);
    let large = f.sub(one, e);
    let large = f.copysign(x, large);
    let limit = f.lit(0.927_734_375);
    let is_small = f.setp("le", a, limit);
    f.pick(is_small, small, large)
}

/// `ln x` (Cephes' `logf`: subnormals scaled by 2²³, `x = m·2ᵉ` with
/// `m ∈ [√½, √2)`, `f = m − 1`, `ln(1 + f) = f − f²/2 + f³·P(f)`, plus
/// `e·ln 2` in two parts).
pub(crate) fn log(f: &mut Fp, x: R) -> R {
    debug_assert_eq!(f.w, Ty::F32);
    let sub = f.below(x, f32::MIN_POSITIVE as f64);
    let big = f.lit(8_388_608.0);
    let scaled = f.mul(x, big);
    let xs = f.pick(sub, scaled, x);
    let (m23, zero) = (f.lit(-23.0), f.lit(0.0));
    let adj = f.pick(sub, m23, &zero);
    let xi = f.bits(xs);
    let biased = int(f, "shr.u32", xi, 23);
    let ei = int(f, "sub.s32", biased, 126);
    let e = f.a.un("cvt.rn.f32.s32", Ty::F32, ei);
    let e = f.add(e, adj);
    let mi = int(f, "and.b32", xi, 0x007F_FFFF);
    let mi = int(f, "or.b32", mi, 0x3F00_0000);
    let m = f.with_bits(mi);
    let lower = f.below(m, std::f64::consts::FRAC_1_SQRT_2);
    let m2 = f.add(m, m);
    let m = f.pick(lower, m2, m);
    let one = f.lit(1.0);
    let fr = f.sub(m, &one);
    let e1 = f.sub(e, &one);
    let e = f.pick(lower, e1, e);
    let z = f.mul(fr, fr);
    let p = f.horner_fma(
        fr,
        &[
            3.333_333e-1,
            -2.499_999_4e-1,
            2.000_071_5e-1,
            -1.666_805_8e-1,
            1.424_932_3e-1,
            -1.242_014_1e-1,
            1.167_699_9e-1,
            -1.151_461e-1,
            7.037_683_6e-2,
        ],
    );
    let pf = f.mul(p, fr);
    let y = f.mul(pf, z);
    let c2 = f.lit(LN2_LO);
    let y = f.fma(e, c2, y);
    let mhalf = f.lit(-0.5);
    let y = f.fma(z, mhalf, y);
    let r = f.add(fr, y);
    let c1 = f.lit(LN2_HI);
    let r = f.fma(e, c1, r);
    // 0 → −∞, negative → NaN, ∞ and NaN → x.
    let inf = f.lit(f64::INFINITY);
    let ok_lo = f.setp("gt", x, &zero);
    let ok_hi = f.setp("lt", x, &inf);
    let neg = f.below(x, 0.0);
    let nan = f.lit(f64::NAN);
    let special = f.pick(neg, nan, x);
    let is_zero = f.setp("eq", x, &zero);
    let ninf = f.lit(f64::NEG_INFINITY);
    let special = f.pick(is_zero, ninf, special);
    let r = f.pick(ok_hi, r, special);
    f.pick(ok_lo, r, special)
}

/// `log₁₀ x` as `ln x · log₁₀ e`.
pub(crate) fn log10(f: &mut Fp, x: R) -> R {
    let l = log(f, x);
    let k = f.lit(std::f64::consts::LOG10_E);
    f.mul(l, k)
}

/// Above this `|x|` the three-part reduction by π/2 below stops being
/// accurate in f32 (CUDA's `sinf` draws its fast path at the same
/// place): such arguments, ±∞ and NaN take the f64 sequence.
pub(crate) const SIN_COS_FAST_LIMIT: f64 = 105_615.0;

/// `sin x` in f32 (see [`sin_cos`]).
pub(crate) fn sin(f: &mut Fp, x: R) -> R {
    sin_cos(f, x, false)
}

/// `cos x` in f32 (see [`sin_cos`]).
pub(crate) fn cos(f: &mut Fp, x: R) -> R {
    sin_cos(f, x, true)
}

/// `sin x` or `cos x` (Cephes' `sinf`/`cosf` polynomials on
/// `|r| ≤ π/4`): `j = round(x·2/π)` by the shifter, `r = x − j·π/2` in
/// three fused steps (π/2 split into three f32s), the quadrant
/// `j (+1 for cos) mod 4` picks the sine or cosine polynomial and the
/// sign. Beyond [`SIN_COS_FAST_LIMIT`] (and for ±∞, NaN) a branch widens
/// to f64 and runs `super::math::sin_cos`: rare arguments pay for f64,
/// ordinary ones run only f32 instructions.
pub(crate) fn sin_cos(f: &mut Fp, x: R, cosine: bool) -> R {
    debug_assert_eq!(f.w, Ty::F32);
    const PIO2_1: f64 = 1.570_796_370_506_286_6;
    const PIO2_2: f64 = -4.371_138_828_673_793e-8;
    const PIO2_3: f64 = -1.715_124_510_005_881_9e-15;
    let res = f.a.reg(Ty::F32);
    let (slow, done) = (f.a.label(), f.a.label());
    let ax = f.abs(x);
    let limit = f.lit(SIN_COS_FAST_LIMIT);
    // `|x| <= limit` is false for NaN as well.
    let near = f.setp("le", ax, limit);
    f.a.op(format!("@!{near} bra {slow}"));
    let (two_over_pi, shifter) = (f.lit(std::f64::consts::FRAC_2_PI), f.lit(SHIFTER));
    let t = f.fma(x, two_over_pi, &shifter);
    let n = f.sub(t, &shifter);
    let t_bits = f.bits(t);
    let j = int(f, "sub.s32", t_bits, 0x4B40_0000);
    let nn = f.neg(n);
    let r = f.fma(nn, f.lit(PIO2_1), x);
    let r = f.fma(nn, f.lit(PIO2_2), r);
    let r = f.fma(nn, f.lit(PIO2_3), r);
    let z = f.mul(r, r);
    // sin r = r + r·z·S(z)
    let s = f.horner_fma(
        z,
        &[-1.666_665_461_1e-1, 8.332_160_873_6e-3, -1.951_529_589_1e-4],
    );
    let rz = f.mul(r, z);
    let sin = f.fma(rz, s, r);
    // cos r = 1 − z/2 + z²·C(z)
    let c = f.horner_fma(
        z,
        &[
            4.166_664_568_298_827e-2,
            -1.388_731_625_493_765e-3,
            2.443_315_711_809_948e-5,
        ],
    );
    let zz = f.mul(z, z);
    let half = f.lit(-0.5);
    let c = f.mul(zz, c);
    let c = f.fma(z, half, c);
    let one = f.lit(1.0);
    let cos = f.add(c, one);
    let q = if cosine { int(f, "add.s32", j, 1) } else { j };
    let odd = int(f, "and.b32", q, 1);
    let use_cos = f.a.setp("ne", "s32", odd, 0);
    let v = f.pick(use_cos, cos, sin);
    let half_turn = int(f, "and.b32", q, 2);
    let negate = f.a.setp("ne", "s32", half_turn, 0);
    let nv = f.neg(v);
    let y = f.pick(negate, nv, v);
    f.a.op(format!("mov.f32 {res}, {y}"));
    f.a.op(format!("bra.uni {done}"));
    f.a.place(&slow);
    let xw = f.a.un("cvt.f64.f32", Ty::F64, x);
    let yw = super::math::sin_cos(f.a, xw, cosine);
    f.a.op(format!("cvt.rn.f32.f64 {res}, {yw}"));
    f.a.place(&done);
    res
}
