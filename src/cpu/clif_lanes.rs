//! [`Lanes`] for Cranelift: each lane operation emitted as f32x4 IR.
//!
//! Owns the translation of the width-independent sequences of
//! `super::vmath` into instructions of the function under construction
//! (used by `super::simd`). Masks are F32X4 values with all bits set in
//! the chosen lanes, for `bitselect`. Must not decide what to compute.

use super::vmath::{Cc, Lanes};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

/// Emits f32x4 lane operations into a function under construction.
pub(crate) struct ClifLanes<'a, 'b> {
    pub(crate) b: &'a mut FunctionBuilder<'b>,
    /// Use fused multiply-adds (the host has FMA).
    pub(crate) fma: bool,
}

const V: types::Type = types::F32X4;
const VI: types::Type = types::I32X4;

/// The Cranelift condition of a lane comparison.
pub(crate) fn float_cc(cc: Cc) -> FloatCC {
    match cc {
        Cc::Eq => FloatCC::Equal,
        Cc::Ne => FloatCC::NotEqual,
        Cc::Lt => FloatCC::LessThan,
        Cc::Le => FloatCC::LessThanOrEqual,
        Cc::Gt => FloatCC::GreaterThan,
        Cc::Ge => FloatCC::GreaterThanOrEqual,
        Cc::Unordered => FloatCC::Unordered,
    }
}

impl ClifLanes<'_, '_> {
    fn shift(&mut self, amount: i64) -> Value {
        self.b.ins().iconst(types::I32, amount)
    }
}

impl Lanes for ClifLanes<'_, '_> {
    type F = Value;
    type I = Value;
    type M = Value;

    fn c(&mut self, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        self.b.ins().splat(V, s)
    }
    fn ci(&mut self, x: i32) -> Value {
        let s = self.b.ins().iconst(types::I32, x as i64);
        self.b.ins().splat(VI, s)
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fadd(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fsub(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fmul(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().fdiv(a, b)
    }
    fn mad(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, b, c)
        } else {
            let p = self.b.ins().fmul(a, b);
            self.b.ins().fadd(p, c)
        }
    }
    fn abs(&mut self, a: Value) -> Value {
        self.b.ins().fabs(a)
    }
    fn neg(&mut self, a: Value) -> Value {
        self.b.ins().fneg(a)
    }
    fn cmp(&mut self, cc: Cc, a: Value, b: Value) -> Value {
        let m = self.b.ins().fcmp(float_cc(cc), a, b);
        self.b.ins().bitcast(V, MemFlagsData::new(), m)
    }
    fn or_m(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn and_m(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn sel(&mut self, m: Value, x: Value, y: Value) -> Value {
        self.b.ins().bitselect(m, x, y)
    }
    fn fand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn f_or(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn as_int(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(VI, MemFlagsData::new(), x)
    }
    fn as_float(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(V, MemFlagsData::new(), x)
    }
    fn iadd(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().iadd(a, b)
    }
    fn isub(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().isub(a, b)
    }
    fn iand(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn ior(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn sshr1(&mut self, a: Value) -> Value {
        let s = self.shift(1);
        self.b.ins().sshr(a, s)
    }
    fn ushr23(&mut self, a: Value) -> Value {
        let s = self.shift(23);
        self.b.ins().ushr(a, s)
    }
    fn shl23(&mut self, a: Value) -> Value {
        let s = self.shift(23);
        self.b.ins().ishl(a, s)
    }
    fn itof(&mut self, a: Value) -> Value {
        self.b.ins().fcvt_from_sint(V, a)
    }
}
