//! A vectorised output loop handed to the wide executor: the call that
//! generated code makes in place of the f32x4 loop.
//!
//! Owns the code that computes, at the loop's first iteration, each
//! stream's address, each scalar's value and the output's address, stores
//! them in stack slots and calls the executor's entry point for the
//! kernel's width (`super::wide`). The [`Program`] is kept alive by the
//! compiled kernel (`Code::programs`). Must not decide which loops are
//! vectorised, nor compute anything the executor computes.

use super::codegen::{Emitter, R};
use super::wide::{Program, Scalar, Step};
use super::wide_segment::compile_segment;
use crate::kernel::Loop;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind,
};
use cranelift_module::{Linkage, Module};

impl Emitter<'_> {
    /// Emits `l` as one call of the wide executor when the width is wider
    /// than f32x4 and the loop translates to a [`Program`] worth it
    /// ([`Program::prefers_wide`]); `Ok(false)` (nothing emitted) otherwise.
    pub(super) fn try_wide_loop(&mut self, l: &Loop) -> R<bool> {
        let Some((symbol, _)) = self.simd.entry() else {
            return Ok(false);
        };
        let Some(program) = Program::build(l).filter(Program::prefers_wide) else {
            return Ok(false);
        };
        let program = Box::new(self.with_segments(program)?);
        let slot = l.var.0 as usize;
        if slot >= self.ivars.len() {
            return Err(format!("loop variable {} out of range", l.var));
        }
        let (lo, hi) = self.range(l)?;
        let n = self.b.ins().isub(hi, lo);
        let n = self.b.ins().iadd_imm_s(n, 1);
        let (call, exit) = (self.b.create_block(), self.b.create_block());
        let nonempty = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, n, 0);
        self.b.ins().brif(nonempty, call, &[], exit, &[]);
        self.b.switch_to_block(call);
        let saved = self.ivars[slot].replace(lo);
        let ptr = self.pointer_type();
        let streams = self.slot_of(program.streams.len() * ptr.bytes() as usize);
        for (s, (arg, offset)) in program.streams.iter().enumerate() {
            let off = self.lin(offset, self.elem)?;
            let base = *self.bases.get(*arg).ok_or("load of an unknown argument")?;
            let addr = self.b.ins().iadd(base, off);
            let at = (s * ptr.bytes() as usize) as i32;
            self.b.ins().stack_store(ptr, addr, streams, at);
        }
        let scalars = self.slot_of(program.scalars.len() * 4);
        for (c, scalar) in program.scalars.iter().enumerate() {
            let v = match scalar {
                Scalar::Const(x) => self.b.ins().f32const(*x),
                Scalar::Reg(r) => self.reg(*r)?,
                Scalar::Load { arg, offset } => {
                    let off = self.lin(offset, self.elem)?;
                    let base = *self.bases.get(*arg).ok_or("load of an unknown argument")?;
                    let addr = self.b.ins().iadd(base, off);
                    let flags = MemFlagsData::trusted().with_readonly();
                    self.b.ins().load(types::F32, flags, addr, 0)
                }
            };
            self.b.ins().stack_store(ptr, v, scalars, (c * 4) as i32);
        }
        let off = self.lin(&program.out_offset, self.elem)?;
        let out = self.out.ok_or("store before the entry block")?;
        let out = self.b.ins().iadd(out, off);
        self.ivars[slot] = saved;
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        for t in [ptr, ptr, ptr, ptr, types::I64] {
            sig.params.push(AbiParam::new(t));
        }
        let id = self
            .module
            .declare_function(symbol, Linkage::Import, &sig)
            .map_err(|e| format!("declaring {symbol}: {e}"))?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        let p = self.b.ins().iconst(ptr, &*program as *const Program as i64);
        let streams = self.b.ins().stack_addr(ptr, streams, 0);
        let scalars = self.b.ins().stack_addr(ptr, scalars, 0);
        self.b.ins().call(f, &[p, streams, scalars, out, n]);
        self.b.ins().jump(exit, &[]);
        self.b.switch_to_block(exit);
        self.programs.push(program);
        self.vectorized = true;
        self.wide_loops += 1;
        Ok(true)
    }

    /// `p` with each run of cheap steps replaced by a call of its compiled
    /// segment (`super::wide_segment`), whose address is filled in when the
    /// module is finalized (`Emitter::segments`).
    fn with_segments(&mut self, mut p: Program) -> R<Program> {
        let runs = p.segments();
        let mut ids = Vec::with_capacity(runs.len());
        for run in &runs {
            ids.push(compile_segment(self.module, self.fma, &p, run.clone())?);
        }
        let mut steps = Vec::with_capacity(p.steps.len());
        let mut next = 0;
        for (run, id) in runs.into_iter().zip(ids) {
            steps.extend_from_slice(&p.steps[next..run.start]);
            self.segments.push((self.programs.len(), steps.len(), id));
            steps.push(Step::Jit { entry: 0 });
            next = run.end;
        }
        steps.extend_from_slice(&p.steps[next..]);
        p.steps = steps;
        Ok(p)
    }

    fn slot_of(&mut self, bytes: usize) -> cranelift_codegen::ir::StackSlot {
        self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes.max(8) as u32,
            3,
        ))
    }
}
