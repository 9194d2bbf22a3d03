//! The lowering rules of the element operations: every unary and binary
//! op of the kernel IR, and integer powers, as PTX instructions at the
//! kernel's element width (f32 sequences in f32, `gpu::ptx::math32`;
//! f64 ones in f64). Must not emit control flow of the kernel's loops.

use super::super::asm::{Asm, Ty, R};
use super::super::float::Fp;
use super::super::{math, math32, special};
use super::Emitter;
use crate::symbolic::{BinaryOp, UnaryOp};

impl Emitter<'_> {
    /// A sequence written for both widths, at the element type's.
    fn either(&mut self, x: R, f: impl FnOnce(&mut Fp, R) -> R) -> R {
        f(
            &mut Fp {
                a: &mut self.a,
                w: self.w,
            },
            x,
        )
    }

    /// `f32` for f32 elements (no f64 instruction), `f64` for f64 ones.
    fn native(&mut self, x: R, f32: fn(&mut Fp, R) -> R, f64: fn(&mut Asm, R) -> R) -> R {
        if self.w == Ty::F32 {
            self.either(x, f32)
        } else {
            f64(&mut self.a, x)
        }
    }

    pub(super) fn unary(&mut self, op: UnaryOp, x: R) -> R {
        let (w, sfx) = (self.w, self.sfx);
        match op {
            UnaryOp::Neg => self.a.un(&format!("neg.{sfx}"), w, x),
            UnaryOp::Abs => self.a.un(&format!("abs.{sfx}"), w, x),
            UnaryOp::Sqrt => self.a.un(&format!("sqrt.rn.{sfx}"), w, x),
            UnaryOp::Sgn => {
                // x > 0 → 1, x < 0 → −1, else 0·x (keeps NaN and ±0).
                let zero = self.constant(0.0);
                let one = self.constant(1.0);
                let minus = self.constant(-1.0);
                let zx = self.a.bin(&format!("mul.rn.{sfx}"), w, zero, x);
                let lt = self.a.setp("lt", sfx, x, zero);
                let neg = self.a.select(w, minus, zx, lt);
                let gt = self.a.setp("gt", sfx, x, zero);
                self.a.select(w, one, neg, gt)
            }
            UnaryOp::Sigmoid if w == Ty::F32 => self.either(x, math32::sigmoid),
            UnaryOp::Sigmoid => {
                // 1 / (1 + exp(−x)), as the CPU's f64 code.
                let nx = self.a.un(&format!("neg.{sfx}"), w, x);
                let e = math::exp(&mut self.a, nx);
                let one = self.constant(1.0);
                let d = self.a.bin(&format!("add.rn.{sfx}"), w, one, e);
                self.a.bin(&format!("div.rn.{sfx}"), w, one, d)
            }
            UnaryOp::Exp => self.native(x, math32::exp, math::exp),
            UnaryOp::Log => self.native(x, math32::log, math::log),
            UnaryOp::Log10 => self.native(x, math32::log10, math::log10),
            UnaryOp::Tanh => self.native(x, math32::tanh, math::tanh),
            UnaryOp::Sin => self.native(x, math32::sin, math::sin),
            UnaryOp::Cos => self.native(x, math32::cos, math::cos),
            UnaryOp::Log1p => self.either(x, special::log1p),
            UnaryOp::Expm1 => self.either(x, special::expm1),
            UnaryOp::Atan => self.either(x, special::atan),
            UnaryOp::Erf if w == Ty::F32 => self.either(x, math32::erf),
            UnaryOp::Erf => self.either(x, special::erf),
            UnaryOp::Floor => self.a.un(&format!("cvt.rmi.{sfx}.{sfx}"), w, x),
            // (Lowering drops `detach`: a kernel never holds one.)
            UnaryOp::Detach => x,
        }
    }

    pub(super) fn binary(&mut self, op: BinaryOp, x: R, y: R) -> R {
        let (w, sfx) = (self.w, self.sfx);
        match op {
            BinaryOp::Add => self.a.bin(&format!("add.rn.{sfx}"), w, x, y),
            BinaryOp::Sub => self.a.bin(&format!("sub.rn.{sfx}"), w, x, y),
            BinaryOp::Mul => self.a.bin(&format!("mul.rn.{sfx}"), w, x, y),
            BinaryOp::Div => self.a.bin(&format!("div.rn.{sfx}"), w, x, y),
            BinaryOp::Max => self.first_unless("ge", x, y),
            BinaryOp::Min => self.first_unless("le", x, y),
            BinaryOp::Pow => self.pow(x, y),
        }
    }

    /// `x ** n` for a constant `n` in the order of compiler-rt's
    /// `__powidf2` (square and multiply, `1/x**|n|` for negative `n`).
    pub(super) fn powi_const(&mut self, x: R, n: i32) -> R {
        let (w, sfx) = (self.w, self.sfx);
        let mul = format!("mul.rn.{sfx}");
        let mut p = n.unsigned_abs();
        let mut base = x;
        let mut acc: Option<R> = None;
        let r = loop {
            if p & 1 == 1 {
                acc = Some(match acc {
                    None => base,
                    Some(a) => self.a.bin(&mul, w, a, base),
                });
            }
            p >>= 1;
            if p == 0 {
                break acc;
            }
            base = self.a.bin(&mul, w, base, base);
        };
        let r = r.unwrap_or_else(|| self.constant(1.0));
        if n < 0 {
            let one = self.constant(1.0);
            self.a.bin(&format!("div.rn.{sfx}"), w, one, r)
        } else {
            r
        }
    }

    /// `x ** y` as `crate::symbolic::expr::pow`: an integral `|y| ≤ 64` by
    /// square and multiply at run time, anything else by `math::powf`.
    fn pow(&mut self, x: R, y: R) -> R {
        let (w, sfx) = (self.w, self.sfx);
        let res = self.a.reg(w);
        let yt = self.a.un(&format!("cvt.rzi.{sfx}.{sfx}"), w, y);
        let integral = self.a.setp("eq", sfx, yt, y);
        let ay = self.a.un(&format!("abs.{sfx}"), w, y);
        let small = self.a.setp("le", sfx, ay, self.lit(64.0));
        self.a
            .op(format!("and.pred {integral}, {integral}, {small}"));
        let (general, done) = (self.a.label(), self.a.label());
        self.a.op(format!("@!{integral} bra {general}"));
        // Square and multiply with the bits of |n|.
        let n = self.a.un(&format!("cvt.rzi.s32.{sfx}"), Ty::B32, y);
        let m = self.a.un("abs.s32", Ty::B32, n);
        let one = self.constant(1.0);
        let acc = self.a.reg(w);
        let base = self.a.reg(w);
        self.a.op(format!("mov.{sfx} {acc}, {one}"));
        self.a.op(format!("mov.{sfx} {base}, {x}"));
        let (head, out) = (self.a.label(), self.a.label());
        self.a.place(&head);
        let bit = self.a.bin("and.b32", Ty::B32, m, 1);
        let odd = self.a.setp("ne", "s32", bit, 0);
        let prod = self.a.bin(&format!("mul.rn.{sfx}"), w, acc, base);
        self.a.op(format!("selp.{sfx} {acc}, {prod}, {acc}, {odd}"));
        self.a.op(format!("shr.u32 {m}, {m}, 1"));
        let zero = self.a.setp("eq", "s32", m, 0);
        self.a.op(format!("@{zero} bra {out}"));
        self.a.op(format!("mul.rn.{sfx} {base}, {base}, {base}"));
        self.a.op(format!("bra.uni {head}"));
        self.a.place(&out);
        let negative = self.a.setp("lt", "s32", n, 0);
        let inv = self.a.bin(&format!("div.rn.{sfx}"), w, one, acc);
        self.a
            .op(format!("selp.{sfx} {res}, {inv}, {acc}, {negative}"));
        self.a.op(format!("bra.uni {done}"));
        self.a.place(&general);
        let v = if w == Ty::F64 {
            math::powf(&mut self.a, x, y)
        } else {
            let xw = self.a.un("cvt.f64.f32", Ty::F64, x);
            let yw = self.a.un("cvt.f64.f32", Ty::F64, y);
            let p = math::powf(&mut self.a, xw, yw);
            self.a.un("cvt.rn.f32.f64", Ty::F32, p)
        };
        self.a.op(format!("mov.{sfx} {res}, {v}"));
        self.a.place(&done);
        res
    }
}
