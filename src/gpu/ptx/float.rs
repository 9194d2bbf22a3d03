//! [`Fp`]: floating-point instructions of one width (f32 or f64), so that a
//! sequence written once emits either (`.rn` rounding everywhere, fused
//! multiply-adds only where asked for).
//!
//! Owns the width-generic helpers the math sequences use: rounded
//! arithmetic, literals in the width's exact hex form, comparisons,
//! selects, Horner's rule with and without fused multiply-adds, and the
//! bit views of a value. Knows nothing about kernels or functions.

use super::asm::{f32_lit, f64_lit, Asm, Ty, R};
use std::fmt::Display;

/// Emits floating-point code of width `w` (`Ty::F32` or `Ty::F64`).
pub(crate) struct Fp<'a> {
    pub(crate) a: &'a mut Asm,
    pub(crate) w: Ty,
}

impl Fp<'_> {
    /// The PTX type suffix (`f32`/`f64`).
    pub(crate) fn sfx(&self) -> &'static str {
        if self.w == Ty::F32 {
            "f32"
        } else {
            "f64"
        }
    }

    /// The register type of the value's bits (`b32`/`b64`).
    fn bits_ty(&self) -> Ty {
        if self.w == Ty::F32 {
            Ty::B32
        } else {
            Ty::B64
        }
    }

    /// `c` as a literal of this width (rounded to f32 for f32).
    pub(crate) fn lit(&self, c: f64) -> String {
        if self.w == Ty::F32 {
            f32_lit(c as f32)
        } else {
            f64_lit(c)
        }
    }

    /// `c` in a fresh register.
    pub(crate) fn c(&mut self, c: f64) -> R {
        let l = self.lit(c);
        let op = format!("mov.{}", self.sfx());
        self.a.un(&op, self.w, l)
    }

    fn op2(&mut self, name: &str, x: impl Display, y: impl Display) -> R {
        let op = format!("{name}.rn.{}", self.sfx());
        self.a.bin(&op, self.w, x, y)
    }

    pub(crate) fn add(&mut self, x: impl Display, y: impl Display) -> R {
        self.op2("add", x, y)
    }

    pub(crate) fn sub(&mut self, x: impl Display, y: impl Display) -> R {
        self.op2("sub", x, y)
    }

    pub(crate) fn mul(&mut self, x: impl Display, y: impl Display) -> R {
        self.op2("mul", x, y)
    }

    pub(crate) fn div(&mut self, x: impl Display, y: impl Display) -> R {
        self.op2("div", x, y)
    }

    /// `x·y + z` rounded once.
    pub(crate) fn fma(&mut self, x: impl Display, y: impl Display, z: impl Display) -> R {
        let d = self.a.reg(self.w);
        let sfx = self.sfx();
        self.a.op(format!("fma.rn.{sfx} {d}, {x}, {y}, {z}"));
        d
    }

    pub(crate) fn abs(&mut self, x: R) -> R {
        let op = format!("abs.{}", self.sfx());
        self.a.un(&op, self.w, x)
    }

    pub(crate) fn neg(&mut self, x: R) -> R {
        let op = format!("neg.{}", self.sfx());
        self.a.un(&op, self.w, x)
    }

    /// The magnitude of `magnitude` with the sign of `sign`.
    pub(crate) fn copysign(&mut self, sign: R, magnitude: R) -> R {
        let op = format!("copysign.{}", self.sfx());
        self.a.bin(&op, self.w, sign, magnitude)
    }

    /// The predicate `x cmp y` (`cmp` as in `setp`: `lt`, `gt`, `eq`, `nan`).
    pub(crate) fn setp(&mut self, cmp: &str, x: impl Display, y: impl Display) -> R {
        let sfx = self.sfx();
        self.a.setp(cmp, sfx, x, y)
    }

    /// `x < c` (false for NaN).
    pub(crate) fn below(&mut self, x: R, c: f64) -> R {
        let l = self.lit(c);
        self.setp("lt", x, l)
    }

    /// `p ? x : y`.
    pub(crate) fn pick(&mut self, p: R, x: impl Display, y: impl Display) -> R {
        self.a.select(self.w, x, y, p)
    }

    /// `x` where `x` is NaN, else `y`.
    pub(crate) fn keep_nan(&mut self, x: R, y: R) -> R {
        let nan = self.setp("nan", x, x);
        self.pick(nan, x, y)
    }

    /// `c[0] + x·(c[1] + x·(…))` with separate, rounded multiplies and adds
    /// (as musl writes its polynomials).
    pub(crate) fn horner_rn(&mut self, x: R, coeffs: &[f64]) -> R {
        let last = *coeffs.last().expect("coefficients");
        let mut acc = self.c(last);
        for &c in coeffs.iter().rev().skip(1) {
            let p = self.mul(x, acc);
            let l = self.lit(c);
            acc = self.add(l, p);
        }
        acc
    }

    /// `c[0] + x·(c[1] + x·(…))` with a fused multiply-add per step.
    pub(crate) fn horner_fma(&mut self, x: R, coeffs: &[f64]) -> R {
        let last = *coeffs.last().expect("coefficients");
        let mut acc = self.c(last);
        for &c in coeffs.iter().rev().skip(1) {
            let l = self.lit(c);
            acc = self.fma(acc, x, l);
        }
        acc
    }

    /// The bits of `x` as an integer register.
    pub(crate) fn bits(&mut self, x: R) -> R {
        let ty = self.bits_ty();
        let op = if ty == Ty::B32 { "mov.b32" } else { "mov.b64" };
        self.a.un(op, ty, x)
    }

    /// The value whose bits are `b`.
    pub(crate) fn with_bits(&mut self, b: R) -> R {
        let op = if self.w == Ty::F32 {
            "mov.b32"
        } else {
            "mov.b64"
        };
        self.a.un(op, self.w, b)
    }
}
