//! [`Lanes`] for Cranelift: each lane operation emitted as IR, on f32x4
//! vectors or on one f32 or f64 scalar.
//!
//! Owns the translation of the width-independent sequences of
//! `super::vmath` into instructions of the function under construction:
//! f32x4 for `super::simd` and `super::wide_segment`, where masks are F32X4
//! values with all bits set in the chosen lanes (for `bitselect`); scalars
//! for `super::codegen`'s scalar code, where masks are comparison results
//! (for `select`). Scalar lanes serve the sequences with exact constants
//! and no integer lanes (`sgn`, max/min, integer powers); f64 kernels so
//! compute what the interpreter does. Must not decide what to compute.

use super::vmath::{Cc, Lanes};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

/// Emits lane operations into a function under construction.
pub(crate) struct ClifLanes<'a, 'b> {
    pub(crate) b: &'a mut FunctionBuilder<'b>,
    /// Use fused multiply-adds (the host has FMA).
    pub(crate) fma: bool,
    /// F32X4, or the scalar type (F32 or F64) of one lane.
    pub(crate) ty: types::Type,
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
        match self.ty {
            types::F64 => self.b.ins().f64const(x as f64),
            types::F32 => self.b.ins().f32const(x),
            _ => {
                let s = self.b.ins().f32const(x);
                self.b.ins().splat(V, s)
            }
        }
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
        if self.ty == V {
            self.b.ins().bitcast(V, MemFlagsData::new(), m)
        } else {
            m
        }
    }
    fn or_m(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().bor(a, b)
    }
    fn and_m(&mut self, a: Value, b: Value) -> Value {
        self.b.ins().band(a, b)
    }
    fn sel(&mut self, m: Value, x: Value, y: Value) -> Value {
        if self.ty == V {
            self.b.ins().bitselect(m, x, y)
        } else {
            self.b.ins().select(m, x, y)
        }
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
