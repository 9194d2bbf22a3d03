//! f32 transcendental functions as lane-wise sequences, written once for
//! every vector width.
//!
//! Owns the polynomial approximations that vectorised f32 loops use instead
//! of calls (`exp`, `tanh`, `sigmoid`, `log`, `log10`, `erf`), and the other
//! lane-wise operations whose bits must match across widths (`sgn`,
//! max/min with the first operand winning, integer powers). They are
//! written against [`Lanes`], the arithmetic of one vector of f32 lanes,
//! which two places implement: the Cranelift emitter of f32x4 code
//! (`super::clif_lanes`, used by `super::simd`) and the AVX2 and AVX-512
//! registers of the wide executor (`super::wide`). Both run this same
//! sequence of IEEE operations, so an element gets the same bits at every
//! width, and whether its neighbours hold data or padding. With the host's
//! FMA (`Lanes::mad`) the polynomials use fused multiply-adds; otherwise a
//! multiply and an add (slightly different bits, same accuracy class; the
//! wide executor requires FMA). Must not emit code or choose a width.
//!
//! **Accuracy** (max relative error against the f64 `std` functions at the
//! same f32 inputs, measured by `tests::accuracy_against_f64_std`, which
//! enforces 3e-7 ≈ 2.5 ulp; `cargo test --release vmath -- --nocapture`
//! prints the figures; with FMA, x86-64):
//!
//! | function | sweep (points) | max relative error |
//! | --- | --- | --- |
//! | exp | [-87, 88] (400,001) | 8.2e-8 |
//! | tanh | [-20, 20] (400,001) | 1.3e-7 |
//! | tanh | [-1e-3, 1e-3] (100,001) | 4.6e-8 |
//! | sigmoid | [-20, 20] (400,001) | 1.8e-7 |
//! | log | [1e-30, 1e30] geometric (400,001) | 7.9e-8 |
//! | log | [0.5, 2] (400,001) | 7.8e-8 |
//! | log10 | [1e-30, 1e30] geometric (400,001) | 1.4e-7 |
//! | erf | [-7, 7] (400,001) | 6.8e-8 |
//! | erf | [-1e-3, 1e-3] (100,001) | 7.0e-8 |
//! | erf | [1e-38, 1e-6] geometric (100,001) | 8.7e-8 |
//!
//! Special values follow `std`: `exp` overflows to `inf` above ≈ 88.72 and
//! underflows through the subnormals to `0`; `log(0) = -inf`,
//! `log(x < 0) = NaN`, `log(inf) = inf`; NaN propagates everywhere.
//! `exp` is based on Cephes' `expf` (Cody–Waite reduction by ln 2, degree-5
//! polynomial), `log` on Cephes' `logf` (frexp, degree-8 polynomial),
//! `tanh` on Cephes' `tanhf` (an odd polynomial below 0.625, else
//! `1 − 2/(e^{2|x|} + 1)`), `sigmoid` is `1/(1 + e^{−|x|})` mirrored
//! for negative inputs (stable: no overflow to `inf/inf`), and `erf`
//! follows musl's `erff` (four ranges, all computed and selected).

/// A lane comparison, with IEEE semantics: only `Ne` and `Unordered` hold
/// for a NaN operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cc {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Either operand is NaN.
    Unordered,
}

impl Cc {
    /// The comparison of an IR condition.
    pub(crate) fn of(op: crate::symbolic::CmpOp) -> Cc {
        use crate::symbolic::CmpOp;
        match op {
            CmpOp::Eq => Cc::Eq,
            CmpOp::Ne => Cc::Ne,
            CmpOp::Lt => Cc::Lt,
            CmpOp::Le => Cc::Le,
            CmpOp::Gt => Cc::Gt,
            CmpOp::Ge => Cc::Ge,
        }
    }
}

/// The arithmetic of one vector of f32 lanes (and of the i32 lanes with
/// the same bits), each operation exactly the IEEE one.
pub(crate) trait Lanes {
    /// f32 lanes.
    type F: Copy;
    /// i32 lanes.
    type I: Copy;
    /// A lane mask.
    type M: Copy;
    fn c(&mut self, x: f32) -> Self::F;
    fn ci(&mut self, x: i32) -> Self::I;
    fn add(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn sub(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn mul(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn div(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// `a·b + c`, fused when the host has FMA.
    fn mad(&mut self, a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    fn abs(&mut self, a: Self::F) -> Self::F;
    fn neg(&mut self, a: Self::F) -> Self::F;
    /// The lanes where `a cc b`.
    fn cmp(&mut self, cc: Cc, a: Self::F, b: Self::F) -> Self::M;
    fn or_m(&mut self, a: Self::M, b: Self::M) -> Self::M;
    fn and_m(&mut self, a: Self::M, b: Self::M) -> Self::M;
    /// Lanes of `x` where `m`, of `y` elsewhere.
    fn sel(&mut self, m: Self::M, x: Self::F, y: Self::F) -> Self::F;
    /// Bitwise and / or of f32 lanes.
    fn fand(&mut self, a: Self::F, b: Self::F) -> Self::F;
    fn f_or(&mut self, a: Self::F, b: Self::F) -> Self::F;
    /// The same bits as i32 lanes, and back.
    fn as_int(&mut self, x: Self::F) -> Self::I;
    fn as_float(&mut self, x: Self::I) -> Self::F;
    fn iadd(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn isub(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn iand(&mut self, a: Self::I, b: Self::I) -> Self::I;
    fn ior(&mut self, a: Self::I, b: Self::I) -> Self::I;
    /// Arithmetic shift right by 1.
    fn sshr1(&mut self, a: Self::I) -> Self::I;
    /// Logical shift right by 23 (the exponent field).
    fn ushr23(&mut self, a: Self::I) -> Self::I;
    /// Shift left by 23.
    fn shl23(&mut self, a: Self::I) -> Self::I;
    /// Each i32 lane converted to f32.
    fn itof(&mut self, a: Self::I) -> Self::F;

    /// `x` clamped to `[lo, hi]`, a NaN passed through: `hi` where
    /// `x > hi`, then `lo` where `x < lo`. x86's `minps`/`maxps` with `x`
    /// second return exactly that (the second operand on a NaN or a tie).
    fn clamp(&mut self, x: Self::F, lo: Self::F, hi: Self::F) -> Self::F {
        let m = self.cmp(Cc::Gt, x, hi);
        let x = self.sel(m, hi, x);
        let m = self.cmp(Cc::Lt, x, lo);
        self.sel(m, lo, x)
    }

    /// `y·2^n`, correctly rounded, for `y` in [0.5, 2], the integer `n` in
    /// [-150, 129] given as a float (`n`) and as an integer (`ni`). The
    /// default computes `y·2^(n>>1)·2^(n − n>>1)`: both factors are normal,
    /// so only the last product rounds (subnormal results). AVX-512's
    /// `vscalefps` computes the same correctly rounded product in one
    /// instruction.
    fn scale(&mut self, y: Self::F, n: Self::F, ni: Self::I) -> Self::F {
        let _ = n;
        let n1 = self.sshr1(ni);
        let n2 = self.isub(ni, n1);
        let bias = self.ci(127);
        let mut y = y;
        for n in [n1, n2] {
            let e = self.iadd(n, bias);
            let e = self.shl23(e);
            let s = self.as_float(e);
            y = self.mul(y, s);
        }
        y
    }
}

/// Coefficients of `e^r ≈ 1 + r + r²·P(r)` (Cephes' `expf`), highest first.
const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// `tanh x ≈ x + x·z·P(z)`, `z = x²`, below 0.625 (Cephes' `tanhf`).
const TANH_P: [f32; 5] = [
    -5.704_988_7e-3,
    2.063_909e-2,
    -5.373_971_6e-2,
    1.333_144_2e-1,
    -3.333_328e-1,
];
/// `ln(1 + f) ≈ f − f²/2 + f³·P(f)` (Cephes' `logf`).
const LOG_P: [f32; 9] = [
    7.037_683_6e-2,
    -1.151_461e-1,
    1.167_699_9e-1,
    -1.242_014_1e-1,
    1.424_932_3e-1,
    -1.666_805_8e-1,
    2.000_071_5e-1,
    -2.499_999_4e-1,
    3.333_333e-1,
];
/// ln 2 in two parts: `LN2_HI` is exact in few bits, so `n·LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `erf` after musl's `erff` (Sun's `s_erff.c`): coefficients of its
/// rational approximations, highest degree first (`ERF_*` below 0.84375,
/// `ERFC1_*` on [0.84375, 1.25), `ERFC2A_*` on [1.25, 1/0.35),
/// `ERFC2B_*` above), and `erf(1)`'s leading part.
const ERF_P: [f32; 5] = [
    -2.376_301_7e-5,
    -5.770_270_2e-3,
    -2.848_175e-2,
    -3.250_421e-1,
    1.283_791_7e-1,
];
const ERF_Q: [f32; 6] = [
    -3.960_228_2e-6,
    1.324_947_4e-4,
    5.081_306e-3,
    6.502_225e-2,
    3.979_172e-1,
    1.0,
];
const ERFC1_P: [f32; 7] = [
    -2.166_375_5e-3,
    3.547_830_5e-2,
    -1.108_947e-1,
    3.183_466_2e-1,
    -3.722_079e-1,
    4.148_561e-1,
    -2.362_118_6e-3,
];
const ERFC1_Q: [f32; 7] = [
    1.198_450_1e-2,
    1.363_708_4e-2,
    1.261_712_2e-1,
    7.182_865_6e-2,
    5.403_979_4e-1,
    1.064_208_8e-1,
    1.0,
];
const ERFC2A_R: [f32; 8] = [
    -9.814_329,
    -81.287_44,
    -184.605_09,
    -162.396_67,
    -62.375_33,
    -10.558_626,
    -6.938_585_6e-1,
    -9.864_944e-3,
];
const ERFC2A_S: [f32; 9] = [
    -6.042_441_4e-2,
    6.570_249_6,
    108.635,
    429.008_15,
    645.387_27,
    434.565_9,
    137.657_76,
    19.651_272,
    1.0,
];
const ERFC2B_R: [f32; 7] = [
    -483.519_2,
    -1_025.095_1,
    -637.566_47,
    -160.636_38,
    -17.757_956,
    -7.992_832_7e-1,
    -9.864_943e-3,
];
const ERFC2B_S: [f32; 8] = [
    -22.440_952,
    474.528_53,
    2_553.050_3,
    3_199.858_2,
    1_536.729_6,
    325.792_5,
    30.338_06,
    1.0,
];
const ERX: f32 = 8.450_629e-1;
const EFX8: f32 = 1.027_033_3;

/// The sequences, for every [`Lanes`].
pub(crate) trait VMath: Lanes {
    /// Horner's scheme: `((c0·x + c1)·x + …)·x + cn`.
    #[inline(always)]
    fn poly(&mut self, x: Self::F, coeffs: &[f32]) -> Self::F {
        let mut acc = self.c(coeffs[0]);
        for &k in &coeffs[1..] {
            let k = self.c(k);
            acc = self.mad(acc, x, k);
        }
        acc
    }

    /// The lanes where `a cc b` or `a` is NaN: where max/min keep their
    /// first operand (the interpreter's `BinaryOp::apply`).
    #[inline(always)]
    fn mask_first(&mut self, cc: Cc, a: Self::F, b: Self::F) -> Self::M {
        let m = self.cmp(cc, a, b);
        let nan = self.cmp(Cc::Unordered, a, a);
        self.or_m(m, nan)
    }

    /// `max(a, b)`: the first operand wins ties, a NaN operand wins.
    #[inline(always)]
    fn max_first(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let m = self.mask_first(Cc::Ge, a, b);
        self.sel(m, a, b)
    }

    /// `min(a, b)`: the first operand wins ties, a NaN operand wins.
    #[inline(always)]
    fn min_first(&mut self, a: Self::F, b: Self::F) -> Self::F {
        let m = self.mask_first(Cc::Le, a, b);
        self.sel(m, a, b)
    }

    /// `y`, whose sign bit is clear, with the sign bit of `x` or-ed in.
    #[inline(always)]
    fn with_sign_of(&mut self, y: Self::F, x: Self::F) -> Self::F {
        let sign = self.c(-0.0);
        let sx = self.fand(x, sign);
        self.f_or(y, sx)
    }

    /// As the scalar code: x > 0 → 1, x < 0 → −1, else 0·x (keeps NaN and
    /// ±0).
    #[inline(always)]
    fn sgn(&mut self, x: Self::F) -> Self::F {
        let zero = self.c(0.0);
        let one = self.c(1.0);
        let minus = self.c(-1.0);
        let zx = self.mul(zero, x);
        let lt = self.cmp(Cc::Lt, x, zero);
        let neg = self.sel(lt, minus, zx);
        let gt = self.cmp(Cc::Gt, x, zero);
        self.sel(gt, one, neg)
    }

    /// `x ** n` with the multiplications of the scalar `powi`: repeated
    /// squaring in the order of compiler-rt's `__powidf2`, then `1/r` for
    /// a negative `n`.
    #[inline(always)]
    fn powi(&mut self, x: Self::F, n: i32) -> Self::F {
        let mut p = n.unsigned_abs();
        let mut base = x;
        let mut acc: Option<Self::F> = None;
        while p != 0 {
            if p & 1 == 1 {
                acc = Some(match acc {
                    None => base,
                    Some(a) => self.mul(a, base),
                });
            }
            p >>= 1;
            if p != 0 {
                base = self.mul(base, base);
            }
        }
        let r = match acc {
            Some(r) => r,
            None => self.c(1.0),
        };
        if n < 0 {
            let one = self.c(1.0);
            self.div(one, r)
        } else {
            r
        }
    }

    /// `e^x`.
    #[inline(always)]
    fn exp(&mut self, x: Self::F) -> Self::F {
        // Clamp (NaN passes through: its comparisons are false). Above the
        // upper clamp the result overflows to inf in the final scaling;
        // below the lower one it rounds to 0.
        let hi = self.c(88.8);
        let lo = self.c(-104.0);
        let x = self.clamp(x, lo, hi);
        // n = round(x·log2 e) with the 1.5·2^23 trick: the integer sits in
        // the low mantissa bits of t.
        let log2e = self.c(std::f32::consts::LOG2_E);
        let shifter = self.c(12_582_912.0);
        let t = self.mad(x, log2e, shifter);
        let n = self.sub(t, shifter);
        let ti = self.as_int(t);
        let si = self.ci(0x4B40_0000);
        let ni = self.isub(ti, si);
        // r = x − n·ln 2 in two steps (n·C1 is exact).
        let c1 = self.c(-LN2_HI);
        let c2 = self.c(-LN2_LO);
        let r = self.mad(n, c1, x);
        let r = self.mad(n, c2, r);
        // e^r ≈ 1 + r + r²·P(r) on |r| ≤ ln2/2.
        let p = self.poly(r, &EXP_P);
        let z = self.mul(r, r);
        let y = self.mad(p, z, r);
        let one = self.c(1.0);
        let y = self.add(y, one);
        // n ∈ [-150, 129]: y·2^n rounds once, for subnormal results.
        self.scale(y, n, ni)
    }

    /// `tanh x`, computed on `|x|` and given the sign of `x` (so
    /// `tanh(-0) = -0`).
    #[inline(always)]
    fn tanh(&mut self, x: Self::F) -> Self::F {
        let a = self.abs(x);
        // |x| < 0.625: a + a·z·P(z), z = x².
        let z = self.mul(x, x);
        let p = self.poly(z, &TANH_P);
        let pz = self.mul(p, z);
        let small = self.mad(pz, a, a);
        // Otherwise 1 − 2/(e^{2|x|} + 1).
        let two_a = self.add(a, a);
        let e = self.exp(two_a);
        let one = self.c(1.0);
        let two = self.c(2.0);
        let d = self.add(e, one);
        let q = self.div(two, d);
        let large = self.sub(one, q);
        let lim = self.c(0.625);
        let m = self.cmp(Cc::Lt, a, lim);
        let t = self.sel(m, small, large);
        // Both candidates have a clear sign bit.
        self.with_sign_of(t, x)
    }

    /// `1 / (1 + e^{-x})`, computed as `1/(1+e)` for `x ≥ 0` and `e/(1+e)`
    /// for `x < 0`, with `e = e^{-|x|}`.
    #[inline(always)]
    fn sigmoid(&mut self, x: Self::F) -> Self::F {
        let a = self.abs(x);
        let na = self.neg(a);
        let e = self.exp(na);
        let one = self.c(1.0);
        let d = self.add(one, e);
        let zero = self.c(0.0);
        let m = self.cmp(Cc::Lt, x, zero);
        let num = self.sel(m, e, one);
        self.div(num, d)
    }

    /// `ln x`.
    #[inline(always)]
    fn log(&mut self, x: Self::F) -> Self::F {
        // Subnormals: scale by 2^23 first.
        let tiny = self.c(f32::MIN_POSITIVE);
        let sub = self.cmp(Cc::Lt, x, tiny);
        let big = self.c(8_388_608.0);
        let scaled = self.mul(x, big);
        let xs = self.sel(sub, scaled, x);
        let zero = self.c(0.0);
        let m23 = self.c(-23.0);
        let adj = self.sel(sub, m23, zero);
        // frexp: xs = m·2^e with m ∈ [0.5, 1).
        let xi = self.as_int(xs);
        let biased = self.ushr23(xi);
        let b126 = self.ci(126);
        let ei = self.isub(biased, b126);
        let e = self.itof(ei);
        let e = self.add(e, adj);
        let mant = self.ci(0x007F_FFFF);
        let half = self.ci(0x3F00_0000);
        let mi = self.iand(xi, mant);
        let mi = self.ior(mi, half);
        let m = self.as_float(mi);
        // m < √½: use 2m − 1 and e − 1, else m − 1.
        let sqrth = self.c(std::f32::consts::FRAC_1_SQRT_2);
        let lower = self.cmp(Cc::Lt, m, sqrth);
        let m2 = self.add(m, m);
        let m = self.sel(lower, m2, m);
        let one = self.c(1.0);
        let f = self.sub(m, one);
        let e1 = self.sub(e, one);
        let e = self.sel(lower, e1, e);
        // ln(1 + f) = f − f²/2 + f³·P(f), plus e·ln 2 in two parts.
        let z = self.mul(f, f);
        let p = self.poly(f, &LOG_P);
        let pf = self.mul(p, f);
        let c2 = self.c(LN2_LO);
        let y = self.mul(pf, z);
        let y = self.mad(e, c2, y);
        let mhalf = self.c(-0.5);
        let y = self.mad(z, mhalf, y);
        let r = self.add(f, y);
        let c1 = self.c(LN2_HI);
        let r = self.mad(e, c1, r);
        // Special values: 0 → -inf, negative → NaN, inf and NaN → x.
        let inf = self.c(f32::INFINITY);
        let ok_lo = self.cmp(Cc::Gt, x, zero);
        let ok_hi = self.cmp(Cc::Lt, x, inf);
        let ok = self.and_m(ok_lo, ok_hi);
        let nan = self.c(f32::NAN);
        let neg = self.cmp(Cc::Lt, x, zero);
        let special = self.sel(neg, nan, x);
        let ninf = self.c(f32::NEG_INFINITY);
        let is_zero = self.cmp(Cc::Eq, x, zero);
        let special = self.sel(is_zero, ninf, special);
        self.sel(ok, r, special)
    }

    /// `erf x` after musl's `erff`: its four ranges computed on every lane
    /// and selected (below 2^-28 a scaled product that does not underflow,
    /// below 0.84375 `x + x·P(x²)/Q(x²)`, then `1 − erfc |x|` with the
    /// sign of `x`, `erfc` a rational function of `|x| − 1` below 1.25 and
    /// `e^{−z²−0.5625}·e^{(z−|x|)(z+|x|) + R/S}/|x|` above, `s = 1/x²`, `z`
    /// `|x|` with its low 13 bits cleared); `±1` from 6 on.
    #[inline(always)]
    fn erf(&mut self, x: Self::F) -> Self::F {
        let a = self.abs(x);
        let one = self.c(1.0);
        // Tiny: 0.125·(8x + efx8·x).
        let eight = self.c(8.0);
        let x8 = self.mul(x, eight);
        let efx8 = self.c(EFX8);
        let t = self.mad(efx8, x, x8);
        let eighth = self.c(0.125);
        let tiny = self.mul(t, eighth);
        // Small: x + x·P(z)/Q(z), z = x².
        let z = self.mul(x, x);
        let p = self.poly(z, &ERF_P);
        let q = self.poly(z, &ERF_Q);
        let y = self.div(p, q);
        let small = self.mad(x, y, x);
        // erfc on [0.84375, 1.25): 1 − erx − P(s)/Q(s), s = |x| − 1.
        let s1 = self.sub(a, one);
        let p1 = self.poly(s1, &ERFC1_P);
        let q1 = self.poly(s1, &ERFC1_Q);
        let pq = self.div(p1, q1);
        let erx = self.c(1.0 - ERX);
        let erfc1 = self.sub(erx, pq);
        // erfc from 1.25: the coefficients of the lane's range.
        let a2 = self.mul(a, a);
        let s2 = self.div(one, a2);
        let lim = self.c(1.0 / 0.35);
        let near = self.cmp(Cc::Lt, a, lim);
        let ra = self.poly(s2, &ERFC2A_R);
        let rb = self.poly(s2, &ERFC2B_R);
        let r = self.sel(near, ra, rb);
        let sa = self.poly(s2, &ERFC2A_S);
        let sb = self.poly(s2, &ERFC2B_S);
        let big_s = self.sel(near, sa, sb);
        let ai = self.as_int(a);
        let mask = self.ci(0xFFFF_E000_u32 as i32);
        let zi = self.iand(ai, mask);
        let zt = self.as_float(zi);
        let nz = self.neg(zt);
        let c = self.c(-0.5625);
        let e1 = self.mad(nz, zt, c);
        let e1 = self.exp(e1);
        let d = self.sub(zt, a);
        let u = self.add(zt, a);
        let rs = self.div(r, big_s);
        let e2 = self.mad(d, u, rs);
        let e2 = self.exp(e2);
        let e = self.mul(e1, e2);
        let erfc2 = self.div(e, a);
        let mid = self.c(1.25);
        let in1 = self.cmp(Cc::Lt, a, mid);
        let erfc = self.sel(in1, erfc1, erfc2);
        let y = self.sub(one, erfc);
        let six = self.c(6.0);
        let far = self.cmp(Cc::Ge, a, six);
        let y = self.sel(far, one, y);
        // y ≥ 0 (or NaN).
        let large = self.with_sign_of(y, x);
        let lim_small = self.c(0.843_75);
        let is_small = self.cmp(Cc::Lt, a, lim_small);
        let lim_tiny = self.c(f32::from_bits(0x3180_0000));
        let is_tiny = self.cmp(Cc::Lt, a, lim_tiny);
        let below = self.sel(is_tiny, tiny, small);
        self.sel(is_small, below, large)
    }

    /// `log10 x` as `ln x · log10 e`.
    #[inline(always)]
    fn log10(&mut self, x: Self::F) -> Self::F {
        let l = self.log(x);
        let k = self.c(std::f32::consts::LOG10_E);
        self.mul(l, k)
    }
}

impl<L: Lanes> VMath for L {}

#[cfg(test)]
mod tests {
    use super::super::test_kernels::{kernel, run_at};
    use super::super::wide::Width;

    /// Runs the vectorised f32 kernel `f[i] = <body>` on `xs`, at the
    /// host's width, over `[start, end)` ranges cut at `cuts`.
    fn run(body: &str, xs: &[f32], cuts: &[usize]) -> Vec<f32> {
        let src = format!("f[i] = {body}");
        let k = kernel(&src, &[("x", &[xs.len()][..])]);
        let ran = run_at(&k, &[xs], Width::host(), cuts);
        assert!(ran.vectorized, "{src} is not vectorised");
        ran.out
    }

    fn linspace(lo: f64, hi: f64, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|k| (lo + (hi - lo) * k as f64 / n as f64) as f32)
            .collect()
    }

    fn geomspace(lo: f64, hi: f64, n: usize) -> Vec<f32> {
        let (a, b) = (lo.ln(), hi.ln());
        (0..=n)
            .map(|k| (a + (b - a) * k as f64 / n as f64).exp() as f32)
            .collect()
    }

    /// Max relative error of the kernel against `exact` (in f64 at the same
    /// f32 inputs).
    fn max_rel(body: &str, xs: &[f32], exact: impl Fn(f64) -> f64) -> f64 {
        let got = run(body, xs, &[]);
        xs.iter()
            .zip(&got)
            .map(|(&x, &y)| {
                let e = exact(x as f64);
                if e == y as f64 {
                    0.0
                } else {
                    ((y as f64) - e).abs() / e.abs()
                }
            })
            .fold(0.0, f64::max)
    }

    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// The accuracy table of the module documentation.
    #[test]
    fn accuracy_against_f64_std() {
        const TOL: f64 = 3e-7;
        let cases: Vec<(&str, f64)> = vec![
            (
                "exp",
                max_rel("exp x[i]", &linspace(-87.0, 88.0, 400_000), f64::exp),
            ),
            (
                "tanh",
                max_rel("tanh x[i]", &linspace(-20.0, 20.0, 400_000), f64::tanh),
            ),
            (
                "tanh (small)",
                max_rel("tanh x[i]", &linspace(-1e-3, 1e-3, 100_000), f64::tanh),
            ),
            (
                "sigmoid",
                max_rel("sigmoid x[i]", &linspace(-20.0, 20.0, 400_000), sigmoid),
            ),
            (
                "log",
                max_rel("log x[i]", &geomspace(1e-30, 1e30, 400_000), f64::ln),
            ),
            (
                "log [0.5, 2]",
                max_rel("log x[i]", &linspace(0.5, 2.0, 400_000), f64::ln),
            ),
            (
                "log10",
                max_rel("log10 x[i]", &geomspace(1e-30, 1e30, 400_000), f64::log10),
            ),
            (
                "erf",
                max_rel("erf x[i]", &linspace(-7.0, 7.0, 400_000), libm::erf),
            ),
            (
                "erf (small)",
                max_rel("erf x[i]", &linspace(-1e-3, 1e-3, 100_000), libm::erf),
            ),
            (
                "erf (tiny)",
                max_rel("erf x[i]", &geomspace(1e-38, 1e-6, 100_000), libm::erf),
            ),
        ];
        for (name, err) in cases {
            eprintln!("{name}: max relative error {err:.2e}");
            assert!(err <= TOL, "{name}: max relative error {err:e} > {TOL:e}");
        }
    }

    #[test]
    fn special_values() {
        let inf = f32::INFINITY;
        let xs = [
            0.0,
            -0.0,
            inf,
            -inf,
            f32::NAN,
            100.0,
            -100.0,
            -120.0,
            88.72,
            88.73,
            -87.5,
            -103.0,
            1e-40,
            -1.0,
            f32::MIN_POSITIVE,
            f32::MAX,
        ];
        let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || a == b;
        let close = |a: f32, b: f32| same(a, b) || ((a - b) / b).abs() < 1e-6;
        let exp = run("exp x[i]", &xs, &[]);
        let tanh = run("tanh x[i]", &xs, &[]);
        let sig = run("sigmoid x[i]", &xs, &[]);
        let log = run("log x[i]", &xs, &[]);
        let erf = run("erf x[i]", &xs, &[]);
        for (k, &x) in xs.iter().enumerate() {
            assert!(close(erf[k], libm::erff(x)), "erf {x}: {}", erf[k]);
            // Subnormal results: within one subnormal step.
            let e = x.exp();
            assert!(
                close(exp[k], e) || (e.abs() < 1e-37 && (exp[k] - e).abs() <= 2e-45),
                "exp {x}: {} vs {e}",
                exp[k]
            );
            assert!(close(tanh[k], x.tanh()), "tanh {x}: {}", tanh[k]);
            let s = 1.0 / (1.0 + (-x as f64).exp());
            let s32 = s as f32;
            assert!(
                close(sig[k], s32) || (s32.abs() < 1e-37 && (sig[k] - s32).abs() <= 2e-45),
                "sigmoid {x}: {} vs {s32}",
                sig[k]
            );
            assert!(close(log[k], x.ln()), "log {x}: {} vs {}", log[k], x.ln());
        }
        assert_eq!(tanh[1].to_bits(), (-0.0f32).to_bits(), "tanh keeps -0");
        assert_eq!(erf[1].to_bits(), (-0.0f32).to_bits(), "erf keeps -0");
    }

    /// Every element gets the same bits whether it falls in the 16-wide,
    /// 4-wide or 1-wide strip.
    #[test]
    fn strips_compute_the_same_bits() {
        let xs = linspace(-30.0, 30.0, 1000);
        let body =
            "tanh x[i] * sigmoid (2 * x[i]) + log (x[i] ** 2 + 1) / (1 + exp (-x[i])) + sin x[i]";
        let whole = run(body, &xs, &[]);
        let cuts: Vec<usize> = (1..xs.len()).collect();
        let single = run(body, &xs, &cuts);
        let odd: Vec<usize> = (0..xs.len()).step_by(7).collect();
        let chunks = run(body, &xs, &odd);
        for k in 0..xs.len() {
            assert_eq!(whole[k].to_bits(), single[k].to_bits(), "element {k}");
            assert_eq!(whole[k].to_bits(), chunks[k].to_bits(), "element {k}");
        }
    }
}
