//! Transcendental functions called by generated code.
//!
//! Owns the `extern "C"` functions that kernels call through symbols
//! registered with `JITBuilder::symbol`, and their names. `sqrt`, `abs`,
//! `neg`, `sgn`, `max`/`min` and integer powers are inlined by the code
//! generator instead; `sigmoid` is inlined as `1 / (1 + exp(-x))` with a
//! call to `exp`, exactly as the interpreter computes it. Vectorised f32
//! loops (`super::simd`, `super::wide`) call only `sin`, `cos`, `log1p`,
//! `expm1`, `atan` and `pow` from here, lane by lane; their other functions
//! are lane sequences (`super::vmath`).
//!
//! **Accuracy.** The f64 functions are Rust's `std` functions and `libm`'s
//! (the ones the reference interpreter uses), so f64 kernels agree with the interpreter
//! exactly (0 ulp). The f32 functions compute in f32 with `std`'s f32
//! functions. Their maximum relative error against the f64 functions at the
//! same inputs, measured by this module's tests (sweeps of 20,001 points;
//! the bound the tests enforce is 2⁻²² ≈ 2.4e-7, about 2 ulp):
//!
//! | function | sweep | max relative error |
//! | --- | --- | --- |
//! | exp | [-80, 80] | 5.9e-8 |
//! | tanh | [-80, 80] | 1.3e-7 |
//! | log | [1e-6, 1e4], away from 1 | 5.9e-8 |
//! | log10 | [1e-6, 1e4], away from 1 | 6.3e-8 |
//! | sin, cos | [-100, 100], where \|value\| ≥ 1e-3 | 6.2e-8 |
//! | pow (x^0.37) | [1e-6, 1e4] | 9.4e-8 |
//! | log1p | [-0.9, 1e4] | 6.1e-8 |
//! | expm1 | [-80, 80] | 7.4e-8 |
//! | atan | [-100, 100] | 6.9e-8 |
//! | erf | [-6, 6] | 6.3e-8 |
//!
//! `log1p`, `expm1`, `atan` and `erf` (both widths) are the `libm` crate's
//! (musl's), which the interpreter also calls.
//!
//! `sigmoid` inherits exp's accuracy. `pow` follows
//! `crate::symbolic::expr::pow`: an
//! integral exponent with `|b| ≤ 64` uses repeated squaring (`powi`), any
//! other one `powf`.

/// A function the generated code calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum MathFn {
    Exp,
    Log,
    Log10,
    Tanh,
    Sin,
    Cos,
    Log1p,
    Expm1,
    Atan,
    Erf,
    /// Two arguments.
    Pow,
}

impl MathFn {
    pub(crate) const ALL: [MathFn; 11] = [
        MathFn::Exp,
        MathFn::Log,
        MathFn::Log10,
        MathFn::Tanh,
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Log1p,
        MathFn::Expm1,
        MathFn::Atan,
        MathFn::Erf,
        MathFn::Pow,
    ];

    pub(crate) fn arity(self) -> usize {
        if self == MathFn::Pow {
            2
        } else {
            1
        }
    }

    /// The function generated code calls for `op`: `None` for the ones
    /// it computes inline (`neg`, `abs`, `sqrt`, `floor`, `sgn`, `detach`,
    /// and `sigmoid`, from `exp`).
    pub(crate) fn of(op: crate::symbolic::UnaryOp) -> Option<MathFn> {
        use crate::symbolic::UnaryOp::*;
        Some(match op {
            Exp => MathFn::Exp,
            Log => MathFn::Log,
            Log10 => MathFn::Log10,
            Tanh => MathFn::Tanh,
            Sin => MathFn::Sin,
            Cos => MathFn::Cos,
            Log1p => MathFn::Log1p,
            Expm1 => MathFn::Expm1,
            Atan => MathFn::Atan,
            Erf => MathFn::Erf,
            Neg | Abs | Sqrt | Floor | Sgn | Detach | Sigmoid => return None,
        })
    }

    /// The f32 implementation of a one-argument function (the one f32
    /// kernels call), for callers in Rust (`super::wide`'s lane-by-lane
    /// steps); `None` for `pow`, which has two ([`MathFn::pow_f32`]).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn f32_unary(self) -> Option<extern "C" fn(f32) -> f32> {
        Some(match self {
            MathFn::Exp => exp_f32,
            MathFn::Log => log_f32,
            MathFn::Log10 => log10_f32,
            MathFn::Tanh => tanh_f32,
            MathFn::Sin => sin_f32,
            MathFn::Cos => cos_f32,
            MathFn::Log1p => libm_f32::log1p,
            MathFn::Expm1 => libm_f32::expm1,
            MathFn::Atan => libm_f32::atan,
            MathFn::Erf => libm_f32::erf,
            MathFn::Pow => return None,
        })
    }

    /// The f32 `pow` kernels call.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn pow_f32() -> extern "C" fn(f32, f32) -> f32 {
        pow_f32
    }

    /// The symbol name and address of the implementation for `width`.
    pub(crate) fn symbol(self, width: crate::DType) -> (&'static str, *const u8) {
        use crate::DType::*;
        use MathFn::*;
        // Kernels compute in f32 or f64 (`codegen::compile` refuses others).
        let width = if width == F32 { F32 } else { F64 };
        match (self, width) {
            (Exp, F64) => ("tenjin_exp_f64", exp_f64 as *const u8),
            (Log, F64) => ("tenjin_log_f64", log_f64 as *const u8),
            (Log10, F64) => ("tenjin_log10_f64", log10_f64 as *const u8),
            (Tanh, F64) => ("tenjin_tanh_f64", tanh_f64 as *const u8),
            (Sin, F64) => ("tenjin_sin_f64", sin_f64 as *const u8),
            (Cos, F64) => ("tenjin_cos_f64", cos_f64 as *const u8),
            (Pow, F64) => ("tenjin_pow_f64", pow_f64 as *const u8),
            (Log1p, F64) => ("tenjin_log1p_f64", libm_f64::log1p as *const u8),
            (Expm1, F64) => ("tenjin_expm1_f64", libm_f64::expm1 as *const u8),
            (Atan, F64) => ("tenjin_atan_f64", libm_f64::atan as *const u8),
            (Erf, F64) => ("tenjin_erf_f64", libm_f64::erf as *const u8),
            (Log1p, F32) => ("tenjin_log1p_f32", libm_f32::log1p as *const u8),
            (Expm1, F32) => ("tenjin_expm1_f32", libm_f32::expm1 as *const u8),
            (Atan, F32) => ("tenjin_atan_f32", libm_f32::atan as *const u8),
            (Erf, F32) => ("tenjin_erf_f32", libm_f32::erf as *const u8),
            (Exp, F32) => ("tenjin_exp_f32", exp_f32 as *const u8),
            (Log, F32) => ("tenjin_log_f32", log_f32 as *const u8),
            (Log10, F32) => ("tenjin_log10_f32", log10_f32 as *const u8),
            (Tanh, F32) => ("tenjin_tanh_f32", tanh_f32 as *const u8),
            (Sin, F32) => ("tenjin_sin_f32", sin_f32 as *const u8),
            (Cos, F32) => ("tenjin_cos_f32", cos_f32 as *const u8),
            (Pow, F32) => ("tenjin_pow_f32", pow_f32 as *const u8),
            (_, _) => unreachable!("the width was made a float above"),
        }
    }
}

/// `extern "C"` wrappers of the `libm` crate's functions (musl's), the
/// ones the reference interpreter calls.
macro_rules! libm_wrappers {
    ($module:ident, $t:ty, $($name:ident => $f:path),*) => {
        mod $module {
            $(
                pub(super) extern "C" fn $name(x: $t) -> $t {
                    $f(x)
                }
            )*
        }
    };
}

libm_wrappers!(libm_f64, f64, log1p => libm::log1p, expm1 => libm::expm1, atan => libm::atan, erf => libm::erf);
libm_wrappers!(libm_f32, f32, log1p => libm::log1pf, expm1 => libm::expm1f, atan => libm::atanf, erf => libm::erff);

extern "C" fn exp_f64(x: f64) -> f64 {
    x.exp()
}
extern "C" fn log_f64(x: f64) -> f64 {
    x.ln()
}
extern "C" fn log10_f64(x: f64) -> f64 {
    x.log10()
}
extern "C" fn tanh_f64(x: f64) -> f64 {
    x.tanh()
}
extern "C" fn sin_f64(x: f64) -> f64 {
    x.sin()
}
extern "C" fn cos_f64(x: f64) -> f64 {
    x.cos()
}
extern "C" fn pow_f64(a: f64, b: f64) -> f64 {
    crate::symbolic::expr::pow(a, b)
}
extern "C" fn exp_f32(x: f32) -> f32 {
    x.exp()
}
extern "C" fn log_f32(x: f32) -> f32 {
    x.ln()
}
extern "C" fn log10_f32(x: f32) -> f32 {
    x.log10()
}
extern "C" fn tanh_f32(x: f32) -> f32 {
    x.tanh()
}
extern "C" fn sin_f32(x: f32) -> f32 {
    x.sin()
}
extern "C" fn cos_f32(x: f32) -> f32 {
    x.cos()
}
extern "C" fn pow_f32(a: f32, b: f32) -> f32 {
    if b == b.trunc() && b.abs() <= 64.0 {
        a.powi(b as i32)
    } else {
        a.powf(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Max relative error of the f32 function against the f64 one at the
    /// same (f32) inputs, over the points where |exact| ≥ `floor` (relative
    /// error means nothing at a zero of the function).
    fn max_rel(xs: &[f64], floor: f64, f: impl Fn(f32) -> f32, g: impl Fn(f64) -> f64) -> f64 {
        xs.iter()
            .filter_map(|&x| {
                let x32 = x as f32;
                let exact = g(x32 as f64);
                (exact.abs() >= floor).then(|| ((f(x32) as f64) - exact).abs() / exact.abs())
            })
            .fold(0.0, f64::max)
    }

    fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f64> {
        (0..=n)
            .map(|k| lo + (hi - lo) * k as f64 / n as f64)
            .collect()
    }

    #[test]
    fn f64_functions_are_std() {
        for x in sweep(-20.0, 20.0, 4001) {
            assert_eq!(exp_f64(x).to_bits(), x.exp().to_bits());
            assert_eq!(tanh_f64(x).to_bits(), x.tanh().to_bits());
            assert_eq!(sin_f64(x).to_bits(), x.sin().to_bits());
            assert_eq!(cos_f64(x).to_bits(), x.cos().to_bits());
            let y = x.abs() + 1e-3;
            assert_eq!(log_f64(y).to_bits(), y.ln().to_bits());
            assert_eq!(log10_f64(y).to_bits(), y.log10().to_bits());
            assert_eq!(
                pow_f64(y, 0.37).to_bits(),
                crate::symbolic::expr::pow(y, 0.37).to_bits()
            );
            assert_eq!(pow_f64(x, 3.0).to_bits(), x.powi(3).to_bits());
        }
    }

    #[test]
    fn f32_functions_are_within_one_ulp_of_f64() {
        const TOL: f64 = 2.4e-7; // 2^-22: about 2 ulp
        let wide = sweep(-80.0, 80.0, 20001);
        let trig = sweep(-100.0, 100.0, 20001);
        let positive = sweep(1e-6, 1e4, 20001);
        let near_zero = sweep(-0.9, 1e4, 20001);
        let small = sweep(-6.0, 6.0, 20001);
        let cases: [(&str, f64); 11] = [
            ("exp", max_rel(&wide, 0.0, |x| exp_f32(x), f64::exp)),
            ("tanh", max_rel(&wide, 1e-30, |x| tanh_f32(x), f64::tanh)),
            ("log", max_rel(&positive, 1e-3, |x| log_f32(x), f64::ln)),
            (
                "log10",
                max_rel(&positive, 1e-3, |x| log10_f32(x), f64::log10),
            ),
            ("sin", max_rel(&trig, 1e-3, |x| sin_f32(x), f64::sin)),
            ("cos", max_rel(&trig, 1e-3, |x| cos_f32(x), f64::cos)),
            (
                "pow",
                max_rel(&positive, 0.0, |x| pow_f32(x, 0.37), |x| x.powf(0.37)),
            ),
            (
                "log1p",
                max_rel(&near_zero, 1e-30, |x| libm_f32::log1p(x), libm::log1p),
            ),
            (
                "expm1",
                max_rel(&wide, 1e-30, |x| libm_f32::expm1(x), libm::expm1),
            ),
            (
                "atan",
                max_rel(&trig, 1e-30, |x| libm_f32::atan(x), libm::atan),
            ),
            (
                "erf",
                max_rel(&small, 1e-30, |x| libm_f32::erf(x), libm::erf),
            ),
        ];
        for (name, err) in cases {
            eprintln!("{name}: max relative error {err:e}");
            assert!(err <= TOL, "{name}: max relative error {err:e} > {TOL:e}");
        }
    }

    #[test]
    fn symbols_are_distinct() {
        let mut names: Vec<&str> = MathFn::ALL
            .iter()
            .flat_map(|f| [f.symbol(crate::DType::F32).0, f.symbol(crate::DType::F64).0])
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 2 * MathFn::ALL.len());
    }
}
