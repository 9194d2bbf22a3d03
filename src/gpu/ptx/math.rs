//! Transcendental functions as PTX instruction sequences: the f64 ones,
//! and the table of both widths.
//!
//! PTX has no f64 `exp`, `log`, `tanh`, `sin` or `cos`, and only `.approx`
//! f32 versions (about 2 ulp, flushing subnormals). Every function is
//! therefore written out with range reduction and a polynomial: in f64
//! here (fdlibm's coefficients where fdlibm has them), in f32 in
//! `super::math32` (`exp`, `log`, `log10`, `tanh`, `sigmoid`: the CPU's
//! vectorised f32 sequences) and `super::special` (`log1p`, `expm1`,
//! `atan`, `erf` written once for both widths, with musl's f32 tables for
//! f32; `sin`, `cos` in f32 up to `|x| ≤ 105,615`, beyond which a branch
//! widens to the f64 sequence here). An f32 kernel runs no f64
//! instruction for those (save that rare branch); `pow` with a
//! non-integral exponent still widens to f64, calls the sequence here and
//! rounds once (an f32 one needs a double-f32 `log`). The
//! sequences use `fma.rn` where we choose a fused multiply-add, and `.rn`
//! everywhere else.
//!
//! **Accuracy** against Rust's `std` and `libm` (the functions the CPU
//! backend calls), measured by `tests/ptx.rs` in the test interpreter, in
//! units in the last place of the result type (f32: distance from the
//! correctly rounded value); the tests enforce the bound in parentheses.
//! f64 (`transcendentals_match_std_within_the_table`, 20,001-point
//! sweeps):
//!
//! | function | sweep | f64: max ulp |
//! | --- | --- | --- |
//! | exp | [-745, 709] | 1 (1) |
//! | log | [1e-300, 1e300] log-spaced, subnormal, 0, ±1, ∞, NaN | 1 (1) |
//! | log10 | the same | 1 (2) |
//! | tanh | [-30, 30] | 2 (2) |
//! | sin, cos | [-1e5, 1e5] | 2 (2) |
//! | sin | [-10, 10] | 1 (1) |
//! | pow (x^0.375) | [1e-6, 1e6] log-spaced | 5 (8) |
//! | log1p (`super::special`) | [-0.9, 10], ±[1e-300, 1e-3], −1, ∞, NaN | 2 (2) |
//! | expm1 | [-40, 709], ±[1e-300, 1e-3], ±∞, NaN | 1 (2) |
//! | atan | [-5, 5], ±[1e-300, 1e300], ±∞, NaN | 0 (0) |
//! | erf | [-7, 7], ±[1e-300, 1], ±∞, NaN | 1 (2) |
//!
//! f32 (`f32_sequences_hold_their_ulp_bounds`, 100,001-point sweeps where
//! the results are finite, plus ±[1e-38, 1e-3] log-spaced, ±0, ±∞, NaN;
//! `pow` in the f64 test's sweep, computed in f64):
//!
//! | function | sweep | f32: max ulp |
//! | --- | --- | --- |
//! | exp | [-104, 89] | 1 (1) |
//! | log | [1e-45, 3e38] log-spaced, 0, ±1, ∞, NaN | 1 (1) |
//! | log10 | the same | 2 (2) |
//! | tanh | [-10, 10] | 1 (1) |
//! | sigmoid | [-104, 20] | 2 (2) |
//! | log1p | [-0.999, 100] | 2 (2) |
//! | expm1 | [-20, 88] | 2 (2) |
//! | atan | [-50, 50] | 1 (1) |
//! | erf | [-4, 4] | 1 (1) |
//! | sin, cos | [-1e5, 1e5], [-4, 4], [105,000, 106,200] (across the f32 limit) | 1 (1) |
//! | sin, cos beyond 105,615 (via f64) | ±[105,616, 1e8] log-spaced | 0 (1) |
//! | pow (via f64) | as f64 | 0 (1) |
//!
//! The f32 `exp`, `log`, `tanh` and `sigmoid` are bit for bit the CPU's
//! vectorised f32 results on a host with FMA (`tests/gpu_sim.rs`).
//! `sigmoid` of f64 is `1 / (1 + exp(−x))`, as on the CPU.
//! `pow` with a non-integral exponent is `exp(b·log|a|)` in f64: its f64
//! error grows with `|b·log a|`. Beyond `|x| ≈ 1e9` the reduction of
//! `sin`/`cos` loses accuracy (no Payne–Hanek reduction); NaN and ±∞
//! follow IEEE everywhere.
//!
//! Owns nothing but instruction sequences; must not know about kernels.

// fdlibm's coefficients as published (they round to the intended f64s).
#![allow(clippy::excessive_precision)]

use super::asm::{f64_lit, Asm, Ty, R};

const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// `p(x) = c[0] + x·(c[1] + x·(…))` by Horner's rule with fused
/// multiply-adds.
fn horner(a: &mut Asm, x: R, coeffs: &[f64]) -> R {
    let mut acc = a.f64_const(*coeffs.last().expect("coefficients"));
    for &c in coeffs.iter().rev().skip(1) {
        acc = a.fma(acc, x, f64_lit(c));
    }
    acc
}

/// `2^k` for an integral f64 `k` in [-1022, 1023], built from its bits.
fn pow2(a: &mut Asm, k: R) -> R {
    let ki = a.un("cvt.rzi.s64.f64", Ty::B64, k);
    let biased = a.bin("add.s64", Ty::B64, ki, 1023);
    let bits = a.bin("shl.b64", Ty::B64, biased, 52);
    a.un("mov.b64", Ty::F64, bits)
}

/// `(k, r)` with `x = k·ln 2 + r`, `|r| ≤ ln 2 / 2`, `k` integral (f64).
fn reduce_ln2(a: &mut Asm, x: R) -> (R, R) {
    let t = a.bin("mul.rn.f64", Ty::F64, x, f64_lit(LOG2_E));
    let k = a.un("cvt.rni.f64.f64", Ty::F64, t);
    let nk = a.un("neg.f64", Ty::F64, k);
    let r = a.fma(nk, f64_lit(LN2_HI), x);
    let r = a.fma(nk, f64_lit(LN2_LO), r);
    (k, r)
}

/// Taylor coefficients of `e^r` (degree 13 suffices for `|r| ≤ 0.347`).
fn exp_coeffs() -> Vec<f64> {
    let mut c = vec![1.0];
    let mut fact = 1.0;
    for n in 1..=13 {
        fact *= n as f64;
        c.push(1.0 / fact);
    }
    c
}

/// `e^x` in f64.
pub(crate) fn exp(a: &mut Asm, x: R) -> R {
    // Clamp so that the scaling below stays in range; the result is fixed
    // up to ∞ / 0 afterwards (a NaN passes through the arithmetic).
    let xc = a.bin("min.f64", Ty::F64, x, f64_lit(710.0));
    let xc = a.bin("max.f64", Ty::F64, xc, f64_lit(-746.0));
    let (k, r) = reduce_ln2(a, xc);
    let p = horner(a, r, &exp_coeffs());
    // 2^k in two factors: p·2^k1 is exact, the second product rounds once
    // (also into the subnormal range).
    let half = a.bin("mul.rn.f64", Ty::F64, k, f64_lit(0.5));
    let k1 = a.un("cvt.rzi.f64.f64", Ty::F64, half);
    let k2 = a.bin("sub.rn.f64", Ty::F64, k, k1);
    let s1 = pow2(a, k1);
    let s2 = pow2(a, k2);
    let y = a.bin("mul.rn.f64", Ty::F64, p, s1);
    let y = a.bin("mul.rn.f64", Ty::F64, y, s2);
    let over = a.setp("gt", "f64", x, f64_lit(709.782_712_893_384));
    let y = a.select(Ty::F64, f64_lit(f64::INFINITY), y, over);
    let under = a.setp("lt", "f64", x, f64_lit(-745.133_219_101_941_2));
    let y = a.select(Ty::F64, f64_lit(0.0), y, under);
    // NaN in, NaN out (min/max above would have replaced it).
    let nan = a.setp("nan", "f64", x, x);
    a.select(Ty::F64, x, y, nan)
}

/// `e^x − 1` in f64 for `x ≥ 0` (as `tanh` needs it): accurate near 0.
fn expm1_nonneg(a: &mut Asm, x: R) -> R {
    let xc = a.bin("min.f64", Ty::F64, x, f64_lit(60.0));
    let (k, r) = reduce_ln2(a, xc);
    // expm1(r) = r·(1 + r/2 + r²/6 + …)
    let coeffs: Vec<f64> = exp_coeffs()[1..].to_vec();
    let q = horner(a, r, &coeffs);
    let em1 = a.bin("mul.rn.f64", Ty::F64, r, q);
    // expm1(x) = 2^k·expm1(r) + (2^k − 1)
    let s = pow2(a, k);
    let sm1 = a.bin("sub.rn.f64", Ty::F64, s, f64_lit(1.0));
    a.fma(s, em1, sm1)
}

/// `tanh x` in f64: `t / (t + 2)` with `t = expm1(2|x|)`, the sign of `x`.
pub(crate) fn tanh(a: &mut Asm, x: R) -> R {
    let ax = a.un("abs.f64", Ty::F64, x);
    let two_ax = a.bin("add.rn.f64", Ty::F64, ax, ax);
    let t = expm1_nonneg(a, two_ax);
    let d = a.bin("add.rn.f64", Ty::F64, t, f64_lit(2.0));
    let q = a.bin("div.rn.f64", Ty::F64, t, d);
    let big = a.setp("gt", "f64", ax, f64_lit(22.0));
    let q = a.select(Ty::F64, f64_lit(1.0), q, big);
    // copysign d, a, b: the sign of a, the magnitude of b.
    let y = a.reg(Ty::F64);
    a.op(format!("copysign.f64 {y}, {x}, {q}"));
    let nan = a.setp("nan", "f64", x, x);
    a.select(Ty::F64, x, y, nan)
}

const LG: [f64; 7] = [
    6.666_666_666_666_735_130e-1,
    3.999_999_999_940_941_908e-1,
    2.857_142_874_366_239_149e-1,
    2.222_219_843_214_978_396e-1,
    1.818_357_216_161_805_012e-1,
    1.531_383_769_920_937_332e-1,
    1.479_819_860_511_658_591e-1,
];

/// `ln x` in f64 (fdlibm's `e_log.c` reduction and polynomial).
pub(crate) fn log(a: &mut Asm, x: R) -> R {
    // Subnormals are scaled into the normal range first.
    let tiny = a.setp("lt", "f64", x, f64_lit(f64::MIN_POSITIVE));
    let scaled = a.bin("mul.rn.f64", Ty::F64, x, f64_lit(2f64.powi(54)));
    let xs = a.select(Ty::F64, scaled, x, tiny);
    let e_adj = a.select(Ty::F64, f64_lit(-54.0), f64_lit(0.0), tiny);
    let bits = a.un("mov.b64", Ty::B64, xs);
    let ebits = a.bin("shr.u64", Ty::B64, bits, 52);
    let ebits = a.bin("and.b64", Ty::B64, ebits, 0x7ff);
    let e = a.bin("sub.s64", Ty::B64, ebits, 1023);
    let mbits = a.bin("and.b64", Ty::B64, bits, "0x000FFFFFFFFFFFFF");
    let mbits = a.bin("or.b64", Ty::B64, mbits, "0x3FF0000000000000");
    let m = a.un("mov.b64", Ty::F64, mbits);
    // m in [1, 2) → [√½, √2)
    let hi = a.setp("gt", "f64", m, f64_lit(std::f64::consts::SQRT_2));
    let m_half = a.bin("mul.rn.f64", Ty::F64, m, f64_lit(0.5));
    let m = a.select(Ty::F64, m_half, m, hi);
    let ef = a.un("cvt.rn.f64.s64", Ty::F64, e);
    let ef = a.bin("add.rn.f64", Ty::F64, ef, e_adj);
    let ef_up = a.bin("add.rn.f64", Ty::F64, ef, f64_lit(1.0));
    let k = a.select(Ty::F64, ef_up, ef, hi);
    let f = a.bin("sub.rn.f64", Ty::F64, m, f64_lit(1.0));
    let two_f = a.bin("add.rn.f64", Ty::F64, f, f64_lit(2.0));
    let s = a.bin("div.rn.f64", Ty::F64, f, two_f);
    let z = a.bin("mul.rn.f64", Ty::F64, s, s);
    // R = z·(Lg1 + z·(Lg2 + …))
    let poly = horner(a, z, &LG);
    let rr = a.bin("mul.rn.f64", Ty::F64, z, poly);
    let ff = a.bin("mul.rn.f64", Ty::F64, f, f);
    let hfsq = a.bin("mul.rn.f64", Ty::F64, ff, f64_lit(0.5));
    // k·ln2_hi − ((hfsq − (s·(hfsq + R) + k·ln2_lo)) − f)
    let h_r = a.bin("add.rn.f64", Ty::F64, hfsq, rr);
    let s_hr = a.bin("mul.rn.f64", Ty::F64, s, h_r);
    let klo = a.bin("mul.rn.f64", Ty::F64, k, f64_lit(LN2_LO));
    let inner = a.bin("add.rn.f64", Ty::F64, s_hr, klo);
    let t = a.bin("sub.rn.f64", Ty::F64, hfsq, inner);
    let t = a.bin("sub.rn.f64", Ty::F64, t, f);
    let khi = a.bin("mul.rn.f64", Ty::F64, k, f64_lit(LN2_HI));
    let y = a.bin("sub.rn.f64", Ty::F64, khi, t);
    // ln 0 = −∞, ln(+∞) = +∞, ln(x < 0) = NaN, ln NaN = NaN.
    let zero = a.setp("eq", "f64", x, f64_lit(0.0));
    let y = a.select(Ty::F64, f64_lit(f64::NEG_INFINITY), y, zero);
    let inf = a.setp("eq", "f64", x, f64_lit(f64::INFINITY));
    let y = a.select(Ty::F64, x, y, inf);
    let neg = a.setp("lt", "f64", x, f64_lit(0.0));
    let y = a.select(Ty::F64, f64_lit(f64::NAN), y, neg);
    let nan = a.setp("nan", "f64", x, x);
    a.select(Ty::F64, x, y, nan)
}

/// `log10 x` in f64: `ln x · log10(e)` with the product split in two.
pub(crate) fn log10(a: &mut Asm, x: R) -> R {
    const HI: f64 = std::f64::consts::LOG10_E; // rounded
    const LO: f64 = 1.098_319_650_216_765e-17; // log10(e) − HI
    let l = log(a, x);
    let lo = a.bin("mul.rn.f64", Ty::F64, l, f64_lit(LO));
    a.fma(l, f64_lit(HI), lo)
}

const SIN: [f64; 6] = [
    -1.666_666_666_666_663_243_48e-1,
    8.333_333_333_322_489_461_24e-3,
    -1.984_126_982_985_794_931_34e-4,
    2.755_731_370_707_006_767_89e-6,
    -2.505_076_025_340_686_341_95e-8,
    1.589_690_995_211_550_102_21e-10,
];

const COS: [f64; 6] = [
    4.166_666_666_666_660_190_37e-2,
    -1.388_888_888_887_410_957_49e-3,
    2.480_158_728_947_672_941_78e-5,
    -2.755_731_435_139_066_330_35e-7,
    2.087_572_321_298_174_827_90e-9,
    -1.135_964_755_778_819_482_65e-11,
];

/// `(sin r, cos r)` for `|r| ≤ π/4` (fdlibm's kernels without a tail).
fn sincos_kernel(a: &mut Asm, r: R) -> (R, R) {
    let z = a.bin("mul.rn.f64", Ty::F64, r, r);
    let v = a.bin("mul.rn.f64", Ty::F64, z, r);
    let ps = horner(a, z, &SIN[1..]);
    let zs = a.bin("mul.rn.f64", Ty::F64, z, ps);
    let s1 = a.bin("add.rn.f64", Ty::F64, zs, f64_lit(SIN[0]));
    let sin = a.fma(v, s1, r);
    let pc = horner(a, z, &COS);
    let zr = a.bin("mul.rn.f64", Ty::F64, z, pc);
    let zr = a.bin("mul.rn.f64", Ty::F64, z, zr);
    let hz = a.bin("mul.rn.f64", Ty::F64, z, f64_lit(0.5));
    let w = a.bin("sub.rn.f64", Ty::F64, f64_lit(1.0), hz);
    let one_w = a.bin("sub.rn.f64", Ty::F64, f64_lit(1.0), w);
    let t = a.bin("sub.rn.f64", Ty::F64, one_w, hz);
    let t = a.bin("add.rn.f64", Ty::F64, t, zr);
    let cos = a.bin("add.rn.f64", Ty::F64, w, t);
    (sin, cos)
}

/// `sin x` (`cosine = false`) or `cos x` in f64: `x = k·π/2 + r` with
/// π/2 in three parts (fdlibm's `pio2_1`, `pio2_2`, `pio2_3`: the products
/// with `k` are exact for `|k| < 2²⁰`), then the quadrant picks the kernel.
/// `sin x` in f64.
pub(crate) fn sin(a: &mut Asm, x: R) -> R {
    sin_cos(a, x, false)
}

/// `cos x` in f64.
pub(crate) fn cos(a: &mut Asm, x: R) -> R {
    sin_cos(a, x, true)
}

pub(crate) fn sin_cos(a: &mut Asm, x: R, cosine: bool) -> R {
    const PIO2_1: f64 = 1.570_796_326_734_125_614_17;
    const PIO2_2: f64 = 6.077_100_506_303_965_976_60e-11;
    const PIO2_3: f64 = 2.022_266_248_711_166_455_80e-21;
    const PIO2_3T: f64 = 8.478_427_660_368_899_569_97e-32;
    let t = a.bin(
        "mul.rn.f64",
        Ty::F64,
        x,
        f64_lit(std::f64::consts::FRAC_2_PI),
    );
    let k = a.un("cvt.rni.f64.f64", Ty::F64, t);
    let nk = a.un("neg.f64", Ty::F64, k);
    let r = a.fma(nk, f64_lit(PIO2_1), x);
    let r = a.fma(nk, f64_lit(PIO2_2), r);
    let r = a.fma(nk, f64_lit(PIO2_3), r);
    let r = a.fma(nk, f64_lit(PIO2_3T), r);
    let (s, c) = sincos_kernel(a, r);
    // quadrant q = k mod 4; cos x = sin(x + π/2) shifts it by one.
    let ki = a.un("cvt.rzi.s64.f64", Ty::B64, k);
    let ki = if cosine {
        a.bin("add.s64", Ty::B64, ki, 1)
    } else {
        ki
    };
    let q = a.bin("and.b64", Ty::B64, ki, 3);
    let odd = a.bin("and.b64", Ty::B64, q, 1);
    let use_cos = a.setp("ne", "s64", odd, 0);
    let v = a.select(Ty::F64, c, s, use_cos);
    let neg_half = a.bin("and.b64", Ty::B64, q, 2);
    let negate = a.setp("ne", "s64", neg_half, 0);
    let nv = a.un("neg.f64", Ty::F64, v);
    let y = a.select(Ty::F64, nv, v, negate);
    // sin(±0) = ±0 (k = 0 there, so r = x: already exact); ±∞ and NaN give
    // NaN through the arithmetic.
    let ax = a.un("abs.f64", Ty::F64, x);
    let inf = a.setp("eq", "f64", ax, f64_lit(f64::INFINITY));
    a.select(Ty::F64, f64_lit(f64::NAN), y, inf)
}

/// `a ** b` for a non-integral or large exponent (`powf`): `exp(b·ln|a|)`
/// with the sign of an odd integral power of a negative base, `1` for
/// `a = 1` or `b = 0`, NaN for a negative base and a non-integral `b`.
pub(crate) fn powf(a: &mut Asm, x: R, y: R) -> R {
    let ax = a.un("abs.f64", Ty::F64, x);
    let l = log(a, ax);
    let p = a.bin("mul.rn.f64", Ty::F64, y, l);
    let e = exp(a, p);
    // Is y an odd integer, an integer at all?
    let yt = a.un("cvt.rzi.f64.f64", Ty::F64, y);
    let integral = a.setp("eq", "f64", yt, y);
    let yh = a.bin("mul.rn.f64", Ty::F64, y, f64_lit(0.5));
    let yht = a.un("cvt.rzi.f64.f64", Ty::F64, yh);
    let even = a.setp("eq", "f64", yht, yh);
    let neg = a.setp("lt", "f64", x, f64_lit(0.0));
    let ne = a.un("neg.f64", Ty::F64, e);
    // negative base: odd integral → −e, even integral → e, else NaN
    let odd_neg = a.reg(Ty::Pred);
    a.op(format!("and.pred {odd_neg}, {neg}, {integral}"));
    let not_even = a.reg(Ty::Pred);
    a.op(format!("not.pred {not_even}, {even}"));
    a.op(format!("and.pred {odd_neg}, {odd_neg}, {not_even}"));
    let r = a.select(Ty::F64, ne, e, odd_neg);
    let not_integral = a.reg(Ty::Pred);
    a.op(format!("not.pred {not_integral}, {integral}"));
    let bad = a.reg(Ty::Pred);
    a.op(format!("and.pred {bad}, {neg}, {not_integral}"));
    let r = a.select(Ty::F64, f64_lit(f64::NAN), r, bad);
    // pow(1, y) = 1 and pow(x, 0) = 1, even for NaN; pow(−1, ±∞) = 1.
    let one = a.setp("eq", "f64", x, f64_lit(1.0));
    let r = a.select(Ty::F64, f64_lit(1.0), r, one);
    let m1 = a.setp("eq", "f64", x, f64_lit(-1.0));
    let ay = a.un("abs.f64", Ty::F64, y);
    let yinf = a.setp("eq", "f64", ay, f64_lit(f64::INFINITY));
    let m1inf = a.reg(Ty::Pred);
    a.op(format!("and.pred {m1inf}, {m1}, {yinf}"));
    let r = a.select(Ty::F64, f64_lit(1.0), r, m1inf);
    let zero = a.setp("eq", "f64", y, f64_lit(0.0));
    a.select(Ty::F64, f64_lit(1.0), r, zero)
}
