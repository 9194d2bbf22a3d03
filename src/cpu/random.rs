//! Cranelift code for the counter-based uniform stream
//! (`crate::symbolic::random`): key words from numbers, SplitMix64's output
//! function in 64-bit integers, the top 24 bits as a number.
//!
//! Owns only that instruction sequence; the scalar and the f32x4 emitters
//! (`super::codegen`, `super::simd`) call it once per value or per lane.

use super::codegen::Emitter;
use crate::symbolic::random::{FINAL_SHIFT, GAMMA, MIX, OUT_SHIFT, ULP, WORD_BITS};
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};

impl Emitter<'_> {
    /// The uniform value of type `ty` at `counter` (an i64) of the stream
    /// keyed by the three numbers `key` (of type `ty`).
    pub(super) fn random(&mut self, key: [Value; 3], counter: Value, ty: Type) -> Value {
        let b = &mut self.b;
        let mut k = b.ins().iconst(types::I64, 0);
        let mut shift = 0;
        for (w, v) in key.into_iter().enumerate() {
            // `v as i64` saturates and maps NaN to 0, as the reference does.
            let word = b.ins().fcvt_to_sint_sat(types::I64, v);
            let word = b.ins().band_imm_s(word, (1i64 << WORD_BITS[w]) - 1);
            let word = b.ins().ishl_imm_s(word, shift as i64);
            k = b.ins().bor(k, word);
            shift += WORD_BITS[w];
        }
        let step = b.ins().imul_imm_s(counter, GAMMA as i64);
        let mut z = b.ins().iadd(k, step);
        for (s, m) in MIX {
            let t = b.ins().ushr_imm_s(z, s as i64);
            let x = b.ins().bxor(z, t);
            z = b.ins().imul_imm_s(x, m as i64);
        }
        let t = b.ins().ushr_imm_s(z, FINAL_SHIFT as i64);
        let z = b.ins().bxor(z, t);
        let top = b.ins().ushr_imm_s(z, OUT_SHIFT as i64);
        let x = b.ins().fcvt_from_uint(ty, top);
        let ulp = if ty == types::F32 {
            b.ins().f32const(ULP as f32)
        } else {
            b.ins().f64const(ULP)
        };
        b.ins().fmul(x, ulp)
    }
}
