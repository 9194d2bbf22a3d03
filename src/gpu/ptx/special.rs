//! `log1p`, `expm1`, `atan` and `erf` as PTX instruction sequences, each
//! written once for both widths (f32 with musl's f32 tables and this
//! backend's f32 `exp`/`log`, f64 with its f64 ones).
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

use super::asm::{Ty, R};
use super::float::Fp;
use super::{math, math32};

/// `eˣ` of the width being emitted.
fn exp(f: &mut Fp, x: R) -> R {
    if f.w == Ty::F32 {
        math32::exp(f, x)
    } else {
        math::exp(f.a, x)
    }
}

/// `ln x` of the width being emitted.
fn log(f: &mut Fp, x: R) -> R {
    if f.w == Ty::F32 {
        math32::log(f, x)
    } else {
        math::log(f.a, x)
    }
}

/// `log(1 + x)`.
pub(crate) fn log1p(f: &mut Fp, x: R) -> R {
    let one = f.lit(1.0);
    let u = f.add(x, &one);
    let d = f.sub(u, &one);
    let l = log(f, u);
    let q = f.div(x, d);
    let r = f.mul(l, q);
    // u = 1: log1p x = x (to within rounding); u = ∞: ∞.
    let is_one = f.setp("eq", u, &one);
    let r = f.pick(is_one, x, r);
    let inf = f.lit(f64::INFINITY);
    let is_inf = f.setp("eq", u, &inf);
    f.pick(is_inf, u, r)
}

/// `eˣ − 1`.
pub(crate) fn expm1(f: &mut Fp, x: R) -> R {
    let one = f.lit(1.0);
    let u = exp(f, x);
    let um1 = f.sub(u, &one);
    let l = log(f, u);
    let q = f.div(x, l);
    let r = f.mul(um1, q);
    // u = 1: x; u − 1 = −1 (x very negative): −1; u = ∞: ∞.
    let is_one = f.setp("eq", u, &one);
    let r = f.pick(is_one, x, r);
    let m1 = f.lit(-1.0);
    let minus_one = f.setp("eq", um1, &m1);
    let r = f.pick(minus_one, &m1, r);
    let inf = f.lit(f64::INFINITY);
    let is_inf = f.setp("eq", u, &inf);
    f.pick(is_inf, u, r)
}

/// musl's `atan` constants of one width.
struct AtanTable {
    /// atan(½), atan(1), atan(3/2), atan(∞) in a high and a low part.
    hi: [f64; 4],
    lo: [f64; 4],
    /// The polynomial's even and odd coefficients (in `w = t⁴`).
    even: &'static [f64],
    odd: &'static [f64],
    /// From here on, atan x = ±π/2.
    huge: f64,
}

/// `s_atan.c`.
const ATAN64: AtanTable = AtanTable {
    hi: [
        4.63647609000806093515e-01,
        7.85398163397448278999e-01,
        9.82793723247329054082e-01,
        1.57079632679489655800e+00,
    ],
    lo: [
        2.26987774529616870924e-17,
        3.06161699786838301793e-17,
        1.39033110312309984516e-17,
        6.12323399573676603587e-17,
    ],
    even: &[
        3.33333333333329318027e-01,
        1.42857142725034663711e-01,
        9.09088713343650656196e-02,
        6.66107313738753120669e-02,
        4.97687799461593236017e-02,
        1.62858201153657823623e-02,
    ],
    odd: &[
        -1.99999999998764832476e-01,
        -1.11111104054623557880e-01,
        -7.69187620504482999495e-02,
        -5.83357013379057348645e-02,
        -3.65315727442169155270e-02,
    ],
    huge: 7.378_697_629_483_820_646_4e19, // 2⁶⁶
};

/// `s_atanf.c`.
const ATAN32: AtanTable = AtanTable {
    hi: [
        4.6364760399e-01_f32 as f64,
        7.8539812565e-01_f32 as f64,
        9.8279368877e-01_f32 as f64,
        1.5707962513e+00_f32 as f64,
    ],
    lo: [
        5.0121582440e-09_f32 as f64,
        3.7748947079e-08_f32 as f64,
        3.4473217170e-08_f32 as f64,
        7.5497894159e-08_f32 as f64,
    ],
    even: &[
        3.3333328366e-01_f32 as f64,
        1.4253635705e-01_f32 as f64,
        6.1687607318e-02_f32 as f64,
    ],
    odd: &[-1.9999158382e-01_f32 as f64, -1.0648017377e-01_f32 as f64],
    huge: 67_108_864.0, // 2²⁶
};

/// `atan x` (musl's `s_atan.c` / `s_atanf.c`): `|x|` reduced to
/// `|t| < 7/16` against atan(½), atan(1), atan(3/2) or atan(∞), an odd
/// polynomial, the sign restored.
pub(crate) fn atan(f: &mut Fp, x: R) -> R {
    let tab = if f.w == Ty::F32 { &ATAN32 } else { &ATAN64 };
    let (one, two, three_halves) = (f.lit(1.0), f.lit(2.0), f.lit(1.5));
    let ax = f.abs(x);
    // t = num / den and the offset (hi, lo) per range; |x| < 7/16 keeps
    // t = |x| with a zero offset (musl's `x − x·(s1+s2)` bit for bit).
    let two_ax = f.add(ax, ax);
    let ranges: [(f64, R, R); 4] = [
        // below, numerator, denominator (from the widest range in)
        (0.6875, f.sub(two_ax, &one), f.add(&two, ax)),
        (1.1875, f.sub(ax, &one), f.add(ax, &one)),
        {
            let s = f.mul(&three_halves, ax);
            (2.4375, f.sub(ax, &three_halves), f.add(&one, s))
        },
        (f64::INFINITY, f.c(-1.0), ax),
    ];
    let (mut num, mut den) = (ax, f.c(1.0));
    let (mut hi, mut lo) = (f.c(0.0), f.c(0.0));
    // Innermost range last, so the selects nest from the widest.
    for (i, &(limit, n, d)) in ranges.iter().enumerate().rev() {
        let p = f.below(ax, limit);
        num = f.pick(p, n, num);
        den = f.pick(p, d, den);
        let (h, l) = (f.lit(tab.hi[i]), f.lit(tab.lo[i]));
        hi = f.pick(p, h, hi);
        lo = f.pick(p, l, lo);
    }
    let zero = f.lit(0.0);
    let small = f.below(ax, 0.4375);
    let num = f.pick(small, ax, num);
    let den = f.pick(small, &one, den);
    let hi = f.pick(small, &zero, hi);
    let lo = f.pick(small, &zero, lo);
    let t = f.div(num, den);
    let z = f.mul(t, t);
    let w = f.mul(z, z);
    let p1 = f.horner_rn(w, tab.even);
    let s1 = f.mul(z, p1);
    let p2 = f.horner_rn(w, tab.odd);
    let s2 = f.mul(w, p2);
    let s = f.add(s1, s2);
    let ts = f.mul(t, s);
    let v = f.sub(ts, lo);
    let v = f.sub(v, t);
    let r = f.sub(hi, v);
    let huge = f.below(ax, tab.huge);
    let half_pi = f.lit(tab.hi[3]);
    let r = f.pick(huge, r, half_pi);
    let r = f.copysign(x, r);
    f.keep_nan(x, r)
}

/// musl's `erf` constants of one width (`s_erf.c` / `s_erff.c`).
struct ErfTable {
    erx: f64,
    efx8: f64,
    pp: &'static [f64],
    qq: &'static [f64],
    pa: &'static [f64],
    qa: &'static [f64],
    ra: &'static [f64],
    sa: &'static [f64],
    rb: &'static [f64],
    sb: &'static [f64],
    /// 1/0.35 as the width's code compares it.
    ab_limit: f64,
    /// The mask keeping the high bits of `|x|` (musl's `z`).
    high_mask: &'static str,
}

const ERF64: ErfTable = ErfTable {
    erx: 8.45062911510467529297e-01,
    efx8: 1.02703333676410069053e+00,
    pp: &[
        1.28379167095512558561e-01,
        -3.25042107247001499370e-01,
        -2.84817495755985104766e-02,
        -5.77027029648944159157e-03,
        -2.37630166566501626084e-05,
    ],
    qq: &[
        1.0,
        3.97917223959155352819e-01,
        6.50222499887672944485e-02,
        5.08130628187576562776e-03,
        1.32494738004321644526e-04,
        -3.96022827877536812320e-06,
    ],
    pa: &[
        -2.36211856075265944077e-03,
        4.14856118683748331666e-01,
        -3.72207876035701323847e-01,
        3.18346619901161753674e-01,
        -1.10894694282396677476e-01,
        3.54783043256182359371e-02,
        -2.16637559486879084300e-03,
    ],
    qa: &[
        1.0,
        1.06420880400844228286e-01,
        5.40397917702171048937e-01,
        7.18286544141962662868e-02,
        1.26171219808761642112e-01,
        1.36370839120290507362e-02,
        1.19844998467991074170e-02,
    ],
    ra: &[
        -9.86494403484714822705e-03,
        -6.93858572707181764372e-01,
        -1.05586262253232909814e+01,
        -6.23753324503260060396e+01,
        -1.62396669462573470355e+02,
        -1.84605092906711035994e+02,
        -8.12874355063065934246e+01,
        -9.81432934416914548592e+00,
    ],
    sa: &[
        1.0,
        1.96512716674392571292e+01,
        1.37657754143519042600e+02,
        4.34565877475229228821e+02,
        6.45387271733267880336e+02,
        4.29008140027567833386e+02,
        1.08635005541779435134e+02,
        6.57024977031928170135e+00,
        -6.04244152148580987438e-02,
    ],
    rb: &[
        -9.86494292470009928597e-03,
        -7.99283237680523006574e-01,
        -1.77579549177547519889e+01,
        -1.60636384855821916062e+02,
        -6.37566443368389627722e+02,
        -1.02509513161107724954e+03,
        -4.83519191608651397019e+02,
    ],
    sb: &[
        1.0,
        3.03380607434824582924e+01,
        3.25792512996573918826e+02,
        1.53672958608443695994e+03,
        3.19985821950859553908e+03,
        2.55305040643316442583e+03,
        4.74528541206955367215e+02,
        -2.24409524465858183362e+01,
    ],
    ab_limit: 2.857_142_857_142_857,
    high_mask: "0xFFFFFFFF00000000",
};

const ERF32: ErfTable = ErfTable {
    erx: 8.4506291151e-01_f32 as f64,
    efx8: 1.0270333290e+00_f32 as f64,
    pp: &[
        1.2837916613e-01_f32 as f64,
        -3.2504209876e-01_f32 as f64,
        -2.8481749818e-02_f32 as f64,
        -5.7702702470e-03_f32 as f64,
        -2.3763017452e-05_f32 as f64,
    ],
    qq: &[
        1.0,
        3.9791721106e-01_f32 as f64,
        6.5022252500e-02_f32 as f64,
        5.0813062117e-03_f32 as f64,
        1.3249473704e-04_f32 as f64,
        -3.9602282413e-06_f32 as f64,
    ],
    pa: &[
        -2.3621185683e-03_f32 as f64,
        4.1485610604e-01_f32 as f64,
        -3.7220788002e-01_f32 as f64,
        3.1834661961e-01_f32 as f64,
        -1.1089469492e-01_f32 as f64,
        3.5478305072e-02_f32 as f64,
        -2.1663755178e-03_f32 as f64,
    ],
    qa: &[
        1.0,
        1.0642088205e-01_f32 as f64,
        5.4039794207e-01_f32 as f64,
        7.1828655899e-02_f32 as f64,
        1.2617121637e-01_f32 as f64,
        1.3637083583e-02_f32 as f64,
        1.1984500103e-02_f32 as f64,
    ],
    ra: &[
        -9.8649440333e-03_f32 as f64,
        -6.9385856390e-01_f32 as f64,
        -1.0558626175e+01_f32 as f64,
        -6.2375331879e+01_f32 as f64,
        -1.6239666748e+02_f32 as f64,
        -1.8460508728e+02_f32 as f64,
        -8.1287437439e+01_f32 as f64,
        -9.8143291473e+00_f32 as f64,
    ],
    sa: &[
        1.0,
        1.9651271820e+01_f32 as f64,
        1.3765776062e+02_f32 as f64,
        4.3456588745e+02_f32 as f64,
        6.4538726807e+02_f32 as f64,
        4.2900814819e+02_f32 as f64,
        1.0863500214e+02_f32 as f64,
        6.5702495575e+00_f32 as f64,
        -6.0424413532e-02_f32 as f64,
    ],
    rb: &[
        -9.8649431020e-03_f32 as f64,
        -7.9928326607e-01_f32 as f64,
        -1.7757955551e+01_f32 as f64,
        -1.6063638306e+02_f32 as f64,
        -6.3756646729e+02_f32 as f64,
        -1.0250950928e+03_f32 as f64,
        -4.8351919556e+02_f32 as f64,
    ],
    sb: &[
        1.0,
        3.0338060379e+01_f32 as f64,
        3.2579251099e+02_f32 as f64,
        1.5367296143e+03_f32 as f64,
        3.1998581543e+03_f32 as f64,
        2.5530502930e+03_f32 as f64,
        4.7452853394e+02_f32 as f64,
        -2.2440952301e+01_f32 as f64,
    ],
    ab_limit: 2.857_142_686_843_872, // 0x4036db6d
    high_mask: "0xFFFFE000",
};

/// `erf x` (musl's `s_erf.c` / `s_erff.c`): a rational approximation of
/// `erf` below 0.84375, of `erf − erx` below 1.25, of `log(x·erfc x) + x²`
/// below 6 (two ranges), 1 beyond; the sign restored.
pub(crate) fn erf(f: &mut Fp, x: R) -> R {
    let tab = if f.w == Ty::F32 { &ERF32 } else { &ERF64 };
    let one = f.lit(1.0);
    let ax = f.abs(x);
    // |x| < 0.84375: x + x·P(x²)/Q(x²); below 2⁻²⁸ musl's 0.125·(8x + efx8·x).
    let z = f.mul(ax, ax);
    let r = f.horner_rn(z, tab.pp);
    let s = f.horner_rn(z, tab.qq);
    let y = f.div(r, s);
    let xy = f.mul(ax, y);
    let near0 = f.add(ax, xy);
    let (efx8, eight, eighth) = (f.lit(tab.efx8), f.lit(8.0), f.lit(0.125));
    let e8 = f.mul(efx8, ax);
    let x8 = f.mul(eight, ax);
    let t = f.add(x8, e8);
    let tiny = f.mul(eighth, t);
    let is_tiny = f.below(ax, 3.725_290_298_461_914e-9);
    let near0 = f.pick(is_tiny, tiny, near0);
    // |x| < 1.25: 1 − (1 − erx − P(s)/Q(s)), s = |x| − 1.
    let s = f.sub(ax, &one);
    let p = f.horner_rn(s, tab.pa);
    let q = f.horner_rn(s, tab.qa);
    let pq = f.div(p, q);
    let erx = f.lit(tab.erx);
    let c = f.sub(&one, erx);
    let erfc1 = f.sub(c, pq);
    let mid = f.sub(&one, erfc1);
    // |x| < 6: 1 − exp(−z² − 0.5625)·exp((z − x)(z + x) + R/S)/x with z
    // the high bits of |x|, R/S in s = 1/x² from one of two ranges.
    let x2 = f.mul(ax, ax);
    let s = f.div(&one, x2);
    let ra = f.horner_rn(s, tab.ra);
    let sa = f.horner_rn(s, tab.sa);
    let rb = f.horner_rn(s, tab.rb);
    let sb = f.horner_rn(s, tab.sb);
    let low = f.below(ax, tab.ab_limit);
    let rr = f.pick(low, ra, rb);
    let ss = f.pick(low, sa, sb);
    let bits = f.bits(ax);
    let and = if f.w == Ty::F32 { "and.b32" } else { "and.b64" };
    let high = f.a.bin(and, bits.ty, bits, tab.high_mask);
    let zh = f.with_bits(high);
    let nz = f.neg(zh);
    let zz = f.mul(nz, zh);
    let c9 = f.lit(0.5625);
    let e1_arg = f.sub(zz, c9);
    let e1 = exp(f, e1_arg);
    let d1 = f.sub(zh, ax);
    let d2 = f.add(zh, ax);
    let dd = f.mul(d1, d2);
    let rs = f.div(rr, ss);
    let e2_arg = f.add(dd, rs);
    let e2 = exp(f, e2_arg);
    let ee = f.mul(e1, e2);
    let erfc2 = f.div(ee, ax);
    let tail = f.sub(&one, erfc2);
    // Assemble from the widest range in.
    let below6 = f.below(ax, 6.0);
    let r = f.pick(below6, tail, &one);
    let below125 = f.below(ax, 1.25);
    let r = f.pick(below125, mid, r);
    let below084 = f.below(ax, 0.84375);
    let r = f.pick(below084, near0, r);
    let r = f.copysign(x, r);
    f.keep_nan(x, r)
}
