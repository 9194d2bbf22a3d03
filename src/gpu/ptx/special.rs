//! `log1p`, `expm1`, `atan` and `erf` as PTX instruction sequences, in f64.
//!
//! The CPU backend calls musl's functions (the `libm` crate) for these.
//! `atan` and `erf` here are musl's algorithms written out branch-free:
//! every range's reduction is computed and the right one selected, with
//! musl's coefficients and its order of operations (`mul.rn`/`add.rn`,
//! never fused), so `atan` equals the CPU bit for bit and `erf` differs
//! only through `exp` (1 ulp, see `super::math`). `log1p` and `expm1` use
//! Kahan's corrections over this backend's `log` and `exp`:
//! `log1p x = log(u)·x/(u−1)` with `u = 1 + x`, and
//! `expm1 x = (u−1)·x/log u` with `u = eˣ`. Their accuracy is measured in
//! `tests/ptx.rs` (the table in `super::math`).
//!
//! Owns nothing but instruction sequences; must not know about kernels.

// musl's coefficients as published (they round to the intended f64s;
// atan(1) and atan(∞) are π/4 and π/2 in musl's table).
#![allow(clippy::excessive_precision, clippy::approx_constant)]

use super::asm::{f64_lit, Asm, Ty, R};
use super::math::{exp, log};

fn mul(a: &mut Asm, x: impl std::fmt::Display, y: impl std::fmt::Display) -> R {
    a.bin("mul.rn.f64", Ty::F64, x, y)
}

fn add(a: &mut Asm, x: impl std::fmt::Display, y: impl std::fmt::Display) -> R {
    a.bin("add.rn.f64", Ty::F64, x, y)
}

fn sub(a: &mut Asm, x: impl std::fmt::Display, y: impl std::fmt::Display) -> R {
    a.bin("sub.rn.f64", Ty::F64, x, y)
}

fn div(a: &mut Asm, x: impl std::fmt::Display, y: impl std::fmt::Display) -> R {
    a.bin("div.rn.f64", Ty::F64, x, y)
}

/// `x < c` as a predicate.
fn below(a: &mut Asm, x: R, c: f64) -> R {
    a.setp("lt", "f64", x, f64_lit(c))
}

/// `p ? x : y` in f64.
fn pick(a: &mut Asm, p: R, x: impl std::fmt::Display, y: impl std::fmt::Display) -> R {
    a.select(Ty::F64, x, y, p)
}

/// `c[0] + x·(c[1] + x·(…))` as musl writes it: separate, rounded
/// multiplies and adds.
fn horner_rn(a: &mut Asm, x: R, coeffs: &[f64]) -> R {
    let mut acc = a.f64_const(*coeffs.last().expect("coefficients"));
    for &c in coeffs.iter().rev().skip(1) {
        let p = mul(a, x, acc);
        acc = add(a, f64_lit(c), p);
    }
    acc
}

/// `x` where `x` is NaN, else `y`.
fn keep_nan(a: &mut Asm, x: R, y: R) -> R {
    let nan = a.setp("nan", "f64", x, x);
    pick(a, nan, x, y)
}

/// `log(1 + x)`.
pub(crate) fn log1p(a: &mut Asm, x: R) -> R {
    let u = add(a, x, f64_lit(1.0));
    let d = sub(a, u, f64_lit(1.0));
    let l = log(a, u);
    let q = div(a, x, d);
    let r = mul(a, l, q);
    // u = 1: log1p x = x (to within rounding); u = ∞: ∞.
    let one = a.setp("eq", "f64", u, f64_lit(1.0));
    let r = pick(a, one, x, r);
    let inf = a.setp("eq", "f64", u, f64_lit(f64::INFINITY));
    pick(a, inf, u, r)
}

/// `eˣ − 1`.
pub(crate) fn expm1(a: &mut Asm, x: R) -> R {
    let u = exp(a, x);
    let um1 = sub(a, u, f64_lit(1.0));
    let l = log(a, u);
    let q = div(a, x, l);
    let r = mul(a, um1, q);
    // u = 1: x; u − 1 = −1 (x very negative): −1; u = ∞: ∞.
    let one = a.setp("eq", "f64", u, f64_lit(1.0));
    let r = pick(a, one, x, r);
    let minus_one = a.setp("eq", "f64", um1, f64_lit(-1.0));
    let r = pick(a, minus_one, f64_lit(-1.0), r);
    let inf = a.setp("eq", "f64", u, f64_lit(f64::INFINITY));
    pick(a, inf, u, r)
}

const ATAN_HI: [f64; 4] = [
    4.63647609000806093515e-01,
    7.85398163397448278999e-01,
    9.82793723247329054082e-01,
    1.57079632679489655800e+00,
];
const ATAN_LO: [f64; 4] = [
    2.26987774529616870924e-17,
    3.06161699786838301793e-17,
    1.39033110312309984516e-17,
    6.12323399573676603587e-17,
];
const AT_EVEN: [f64; 6] = [
    3.33333333333329318027e-01,
    1.42857142725034663711e-01,
    9.09088713343650656196e-02,
    6.66107313738753120669e-02,
    4.97687799461593236017e-02,
    1.62858201153657823623e-02,
];
const AT_ODD: [f64; 5] = [
    -1.99999999998764832476e-01,
    -1.11111104054623557880e-01,
    -7.69187620504482999495e-02,
    -5.83357013379057348645e-02,
    -3.65315727442169155270e-02,
];

/// `atan x` (musl's `s_atan.c`): `|x|` reduced to `|t| < 7/16` against
/// atan(½), atan(1), atan(3/2) or atan(∞), an odd polynomial, the sign
/// restored.
pub(crate) fn atan(a: &mut Asm, x: R) -> R {
    let ax = a.un("abs.f64", Ty::F64, x);
    // t = num / den and the offset (hi, lo) per range; |x| < 7/16 keeps
    // t = |x| with a zero offset (musl's `x − x·(s1+s2)` bit for bit).
    let two_ax = add(a, ax, ax);
    let ranges: [(f64, R, R, f64, f64); 4] = [
        // below, numerator, denominator, hi, lo (from the widest range in)
        (
            0.6875,
            sub(a, two_ax, f64_lit(1.0)),
            add(a, f64_lit(2.0), ax),
            ATAN_HI[0],
            ATAN_LO[0],
        ),
        (
            1.1875,
            sub(a, ax, f64_lit(1.0)),
            add(a, ax, f64_lit(1.0)),
            ATAN_HI[1],
            ATAN_LO[1],
        ),
        {
            let s = mul(a, f64_lit(1.5), ax);
            (
                2.4375,
                sub(a, ax, f64_lit(1.5)),
                add(a, f64_lit(1.0), s),
                ATAN_HI[2],
                ATAN_LO[2],
            )
        },
        (f64::INFINITY, a.f64_const(-1.0), ax, ATAN_HI[3], ATAN_LO[3]),
    ];
    let (mut num, mut den) = (ax, a.f64_const(1.0));
    let (mut hi, mut lo) = (a.f64_const(0.0), a.f64_const(0.0));
    // Innermost range last, so the selects nest from the widest.
    for &(limit, n, d, h, l) in ranges.iter().rev() {
        let p = below(a, ax, limit);
        num = pick(a, p, n, num);
        den = pick(a, p, d, den);
        hi = pick(a, p, f64_lit(h), hi);
        lo = pick(a, p, f64_lit(l), lo);
    }
    let small = below(a, ax, 0.4375);
    let num = pick(a, small, ax, num);
    let den = pick(a, small, f64_lit(1.0), den);
    let hi = pick(a, small, f64_lit(0.0), hi);
    let lo = pick(a, small, f64_lit(0.0), lo);
    let t = div(a, num, den);
    let z = mul(a, t, t);
    let w = mul(a, z, z);
    let p1 = horner_rn(a, w, &AT_EVEN);
    let s1 = mul(a, z, p1);
    let p2 = horner_rn(a, w, &AT_ODD);
    let s2 = mul(a, w, p2);
    let s = add(a, s1, s2);
    let ts = mul(a, t, s);
    let v = sub(a, ts, lo);
    let v = sub(a, v, t);
    let r = sub(a, hi, v);
    // |x| ≥ 2⁶⁶: π/2.
    let huge = below(a, ax, 7.378_697_629_483_820_646_4e19);
    let r = pick(a, huge, r, f64_lit(ATAN_HI[3]));
    let r = a.bin("copysign.f64", Ty::F64, x, r);
    keep_nan(a, x, r)
}

const ERX: f64 = 8.45062911510467529297e-01;
const EFX8: f64 = 1.02703333676410069053e+00;
const PP: [f64; 5] = [
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
];
const QQ: [f64; 6] = [
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
];
const PA: [f64; 7] = [
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
];
const QA: [f64; 7] = [
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
];
const RA: [f64; 8] = [
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e+01,
    -6.23753324503260060396e+01,
    -1.62396669462573470355e+02,
    -1.84605092906711035994e+02,
    -8.12874355063065934246e+01,
    -9.81432934416914548592e+00,
];
const SA: [f64; 9] = [
    1.0,
    1.96512716674392571292e+01,
    1.37657754143519042600e+02,
    4.34565877475229228821e+02,
    6.45387271733267880336e+02,
    4.29008140027567833386e+02,
    1.08635005541779435134e+02,
    6.57024977031928170135e+00,
    -6.04244152148580987438e-02,
];
const RB: [f64; 7] = [
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e+01,
    -1.60636384855821916062e+02,
    -6.37566443368389627722e+02,
    -1.02509513161107724954e+03,
    -4.83519191608651397019e+02,
];
const SB: [f64; 8] = [
    1.0,
    3.03380607434824582924e+01,
    3.25792512996573918826e+02,
    1.53672958608443695994e+03,
    3.19985821950859553908e+03,
    2.55305040643316442583e+03,
    4.74528541206955367215e+02,
    -2.24409524465858183362e+01,
];

/// `erf x` (musl's `s_erf.c`): a rational approximation of `erf` below
/// 0.84375, of `erf − erx` below 1.25, of `log(x·erfc x) + x²` below 6
/// (two ranges), 1 beyond; the sign restored.
pub(crate) fn erf(a: &mut Asm, x: R) -> R {
    let ax = a.un("abs.f64", Ty::F64, x);
    // |x| < 0.84375: x + x·P(x²)/Q(x²); below 2⁻²⁸ musl's 0.125·(8x + efx8·x).
    let z = mul(a, ax, ax);
    let r = horner_rn(a, z, &PP);
    let s = horner_rn(a, z, &QQ);
    let y = div(a, r, s);
    let xy = mul(a, ax, y);
    let near0 = add(a, ax, xy);
    let e8 = mul(a, f64_lit(EFX8), ax);
    let x8 = mul(a, f64_lit(8.0), ax);
    let t = add(a, x8, e8);
    let tiny = mul(a, f64_lit(0.125), t);
    let is_tiny = below(a, ax, 3.725_290_298_461_914e-9);
    let near0 = pick(a, is_tiny, tiny, near0);
    // |x| < 1.25: 1 − (1 − erx − P(s)/Q(s)), s = |x| − 1.
    let s = sub(a, ax, f64_lit(1.0));
    let p = horner_rn(a, s, &PA);
    let q = horner_rn(a, s, &QA);
    let pq = div(a, p, q);
    let c = sub(a, f64_lit(1.0), f64_lit(ERX));
    let erfc1 = sub(a, c, pq);
    let mid = sub(a, f64_lit(1.0), erfc1);
    // |x| < 6: 1 − exp(−z² − 0.5625)·exp((z − x)(z + x) + R/S)/x with z
    // the high word of |x|, R/S in s = 1/x² from one of two ranges.
    let x2 = mul(a, ax, ax);
    let s = div(a, f64_lit(1.0), x2);
    let ra = horner_rn(a, s, &RA);
    let sa = horner_rn(a, s, &SA);
    let rb = horner_rn(a, s, &RB);
    let sb = horner_rn(a, s, &SB);
    let low = below(a, ax, 2.857_142_857_142_857);
    let rr = pick(a, low, ra, rb);
    let ss = pick(a, low, sa, sb);
    let bits = a.un("mov.b64", Ty::B64, ax);
    let hi_bits = a.bin("and.b64", Ty::B64, bits, "0xFFFFFFFF00000000");
    let zh = a.un("mov.b64", Ty::F64, hi_bits);
    let nz = a.un("neg.f64", Ty::F64, zh);
    let zz = mul(a, nz, zh);
    let e1_arg = sub(a, zz, f64_lit(0.5625));
    let e1 = exp(a, e1_arg);
    let d1 = sub(a, zh, ax);
    let d2 = add(a, zh, ax);
    let dd = mul(a, d1, d2);
    let rs = div(a, rr, ss);
    let e2_arg = add(a, dd, rs);
    let e2 = exp(a, e2_arg);
    let ee = mul(a, e1, e2);
    let erfc2 = div(a, ee, ax);
    let tail = sub(a, f64_lit(1.0), erfc2);
    // Assemble from the widest range in.
    let below6 = below(a, ax, 6.0);
    let r = pick(a, below6, tail, f64_lit(1.0));
    let below125 = below(a, ax, 1.25);
    let r = pick(a, below125, mid, r);
    let below084 = below(a, ax, 0.84375);
    let r = pick(a, below084, near0, r);
    let r = a.bin("copysign.f64", Ty::F64, x, r);
    keep_nan(a, x, r)
}
