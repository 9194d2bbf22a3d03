//! The lowering rule of `Expr::Random`: the counter-based uniform stream
//! (`crate::symbolic::random`) as PTX integer instructions, bit for bit the
//! reference's (key words truncated and saturated by `cvt.rzi.s64`, which
//! maps NaN to 0 as Rust's `as` does; SplitMix64's output function in
//! 64-bit registers; the top 24 bits converted exactly).
//!
//! Owns only that sequence; loops, loads and stores are `super`'s.

use super::super::asm::{f32_lit, f64_lit, Ty, R};
use super::Emitter;
use crate::symbolic::random::{FINAL_SHIFT, GAMMA, MIX, OUT_SHIFT, ULP, WORD_BITS};

impl Emitter<'_> {
    /// The uniform value (an element-type register) at the integer
    /// `counter` of the stream keyed by the element-type registers `key`.
    pub(super) fn random(&mut self, key: [R; 3], counter: R) -> R {
        let (w, sfx) = (self.w, self.sfx);
        let a = &mut self.a;
        let mut k = a.un("mov.b64", Ty::B64, 0);
        let mut shift = 0;
        for (i, v) in key.into_iter().enumerate() {
            let word = a.un(&format!("cvt.rzi.s64.{sfx}"), Ty::B64, v);
            let word = a.bin("and.b64", Ty::B64, word, (1u64 << WORD_BITS[i]) - 1);
            let word = if shift > 0 {
                a.bin("shl.b64", Ty::B64, word, shift)
            } else {
                word
            };
            k = a.bin("or.b64", Ty::B64, k, word);
            shift += WORD_BITS[i];
        }
        let n = if counter.ty == Ty::B32 {
            a.un("cvt.s64.s32", Ty::B64, counter)
        } else {
            counter
        };
        let step = a.bin("mul.lo.u64", Ty::B64, n, format!("{GAMMA:#x}"));
        let mut z = a.bin("add.u64", Ty::B64, k, step);
        for (s, m) in MIX {
            let t = a.bin("shr.u64", Ty::B64, z, s);
            let x = a.bin("xor.b64", Ty::B64, z, t);
            z = a.bin("mul.lo.u64", Ty::B64, x, format!("{m:#x}"));
        }
        let t = a.bin("shr.u64", Ty::B64, z, FINAL_SHIFT);
        let z = a.bin("xor.b64", Ty::B64, z, t);
        let top = a.bin("shr.u64", Ty::B64, z, OUT_SHIFT);
        let x = a.un(&format!("cvt.rn.{sfx}.s64"), w, top);
        let ulp = if w == Ty::F32 {
            f32_lit(ULP as f32)
        } else {
            f64_lit(ULP)
        };
        a.bin(&format!("mul.rn.{sfx}"), w, x, ulp)
    }
}
