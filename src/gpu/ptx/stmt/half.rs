//! Half-precision buffers of an f32 kernel (`Kernel::buffers`): a load
//! reads 16 bits and widens them exactly, a store rounds to nearest even.
//!
//! Owns the two conversions as the emitter writes them, with the values
//! of the backend's builtin conversions (`super::super::builtin`) and of
//! the CPU's: f16 by `cvt` (every architecture), bf16 by a shift and by
//! integer rounding (`cvt` from and to bf16 needs sm_80 or sm_90), a NaN
//! kept a quiet NaN. Must not decide which buffers are half.

use super::super::asm::{Ty, R};
use super::{Emitter, Res};
use crate::DType;

impl Emitter<'_> {
    /// `d` (f32) = the `half` value at `addr`, widened exactly.
    pub(super) fn load_half(&mut self, d: R, half: DType, addr: R) -> Res<()> {
        let h = self.a.reg(Ty::B16);
        self.a.op(format!("ld.global.b16 {h}, [{addr}]"));
        match half {
            DType::F16 => self.a.op(format!("cvt.f32.f16 {d}, {h}")),
            DType::BF16 => {
                // A bf16 is an f32's upper 16 bits.
                let w = self.a.un("cvt.u32.u16", Ty::B32, h);
                let s = self.a.bin("shl.b32", Ty::B32, w, 16);
                self.a.op(format!("mov.b32 {d}, {s}"));
            }
            other => return Err(format!("{other:?} is not a half type")),
        }
        Ok(())
    }

    /// Stores the f32 `v` rounded to `half` at `addr`.
    pub(super) fn store_half(&mut self, v: R, half: DType, addr: R) -> Res<String> {
        let h = self.a.reg(Ty::B16);
        match half {
            DType::F16 => self.a.op(format!("cvt.rn.f16.f32 {h}, {v}")),
            DType::BF16 => {
                // bits + 0x7fff + (bit 16), upper half; a NaN's upper
                // half with the quiet bit set.
                let bits = self.a.un("mov.b32", Ty::B32, v);
                let high = self.a.bin("shr.u32", Ty::B32, bits, 16);
                let lsb = self.a.bin("and.b32", Ty::B32, high, 1);
                let bias = self.a.bin("add.u32", Ty::B32, lsb, 32767);
                let sum = self.a.bin("add.u32", Ty::B32, bits, bias);
                let rounded = self.a.bin("shr.u32", Ty::B32, sum, 16);
                let quiet = self.a.bin("or.b32", Ty::B32, high, 64);
                let nan = self.a.setp("nan", "f32", v, v);
                let pick = self.a.reg(Ty::B32);
                self.a
                    .op(format!("selp.b32 {pick}, {quiet}, {rounded}, {nan}"));
                self.a.op(format!("cvt.u16.u32 {h}, {pick}"));
            }
            other => return Err(format!("{other:?} is not a half type")),
        }
        Ok(format!("st.global.b16 [{addr}], {h}"))
    }
}
