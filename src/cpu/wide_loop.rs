//! A vectorised output loop or sum handed to the wide executor: the call
//! that generated code makes in place of the f32x4 code.
//!
//! Owns the code that computes, at the loop's first iteration, each
//! stream's address, each scalar's value and the output's address, stores
//! them in stack slots and calls the executor's entry point for the
//! kernel's width (`super::wide`); the compilation of the program's cheap
//! runs (`super::wide_segment`) and the placing of their addresses once
//! the module is finalized. The [`Program`] is kept alive by the compiled
//! kernel (`Code::programs`). Must not decide which loops are vectorised,
//! nor compute anything the executor computes.

use super::codegen::{Emitter, R};
use super::trips::Reach;
use super::wide::{Entries, Output, Program, Scalar, Step};
use super::wide_segment::compile_segment;
use crate::kernel::{visit_stmts, Expr, Loop, Reg, Stmt};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, AbiParam, Block, BlockArg, InstBuilder, MemFlagsData, Signature, StackSlotData,
    StackSlotKind, Value,
};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};

/// Loops that may run fewer times than this keep the f32x4 code: a call of
/// the executor costs about 60 ns (its scratch, the scalar tiles, the
/// partial tile's staging), which rows of 8 or 16 elements do not repay.
/// Measured on rows of `exp` (sums) and `tanh` (maps), 1 thread, Zen 4:
/// the executor ties the f32x4 code at 32–64 elements and wins from 64
/// (`BENCHMARKS.md`, "Element-wise code at full width").
pub(crate) const MIN_TRIPS: u64 = 64;

impl Emitter<'_> {
    /// Emits the vector output loop `l` as one call of the wide executor
    /// when the width is wider than f32x4, the loop runs [`MIN_TRIPS`]
    /// times (`super::trips`; when its bounds are read at run time, the
    /// code compares then and runs the f32x4 loop below) and translates
    /// to a [`Program`] worth it ([`Program::prefers_wide`]); `Ok(false)`
    /// (nothing emitted) otherwise.
    pub(super) fn try_wide_loop(&mut self, l: &Loop) -> R<bool> {
        let Some((program, entries, reach)) = self.wide_program(l, Program::build(l)) else {
            return Ok(false);
        };
        let narrow = self.wide_unless_short(l, reach, &[])?;
        self.wide_call(l, program, entries)?;
        if let Some((narrow, join)) = narrow {
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(narrow);
            self.narrow_loop(l)?;
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(join);
        }
        self.vectorized = true;
        Ok(true)
    }

    /// The vectorised sum over `l` of `value` as one call of the wide
    /// executor, under the same conditions as [`Emitter::try_wide_loop`];
    /// `Ok(None)` (nothing emitted) otherwise.
    pub(super) fn try_wide_sum(&mut self, l: &Loop, value: Reg) -> R<Option<Value>> {
        let built = Program::build_sum(l, value);
        let Some((program, entries, reach)) = self.wide_program(l, built) else {
            return Ok(None);
        };
        let narrow = self.wide_unless_short(l, reach, &[types::F32])?;
        let sum = self.wide_call(l, program, entries)?;
        let Some((narrow, join)) = narrow else {
            return Ok(sum);
        };
        let wide = sum.ok_or("a wide sum without a result")?;
        self.b.ins().jump(join, &[BlockArg::Value(wide)]);
        self.b.switch_to_block(narrow);
        let s = self.narrow_sum(l, value)?;
        self.b.ins().jump(join, &[BlockArg::Value(s)]);
        self.b.switch_to_block(join);
        Ok(Some(self.b.block_params(join)[0]))
    }

    /// `program` for `l` with the executor's entries and whether `l`
    /// reaches [`MIN_TRIPS`], when the executor may run it.
    fn wide_program(
        &self,
        l: &Loop,
        program: Option<Program>,
    ) -> Option<(Program, Entries, Reach)> {
        let reach = self.reach(l, MIN_TRIPS);
        let entries = self.simd.entries().filter(|_| reach != Reach::No)?;
        // The executor reads elements at a distance along `l` known when it
        // is built (a stride read at run time would look like 0 to it).
        let mut run_time = false;
        visit_stmts(&l.body, &mut |s| {
            if let Stmt::Let(_, Expr::Load { offset, .. }) | Stmt::Store { offset, .. } = s {
                run_time |= self.run_time_stride(offset, l.var).is_some();
            }
        });
        if run_time {
            return None;
        }
        Some((program.filter(Program::prefers_wide)?, entries, reach))
    }

    /// For a loop whose trip count is known when the code runs: a branch
    /// to the f32x4 form (the first block returned) when it is below
    /// [`MIN_TRIPS`], continuing in the block for the executor; the join
    /// block after both takes parameters of `join_types`.
    fn wide_unless_short(
        &mut self,
        l: &Loop,
        reach: Reach,
        join_types: &[types::Type],
    ) -> R<Option<(Block, Block)>> {
        if reach != Reach::AtRunTime {
            return Ok(None);
        }
        let (lo, hi) = self.range(l)?;
        let n = self.b.ins().isub(hi, lo);
        let long =
            self.b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, n, MIN_TRIPS as i64 - 1);
        let (wide, narrow, join) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        for &t in join_types {
            self.b.append_block_param(join, t);
        }
        self.b.ins().brif(long, wide, &[], narrow, &[]);
        self.b.switch_to_block(wide);
        Ok(Some((narrow, join)))
    }

    /// Calls the executor on `program` over `l`'s range when it is not
    /// empty: the entry of a stored loop (no result) or of a sum (the
    /// result, `0` for an empty range).
    fn wide_call(&mut self, l: &Loop, program: Program, entries: Entries) -> R<Option<Value>> {
        let program = Box::new(self.with_segments(program)?);
        let slot = l.var.0 as usize;
        if slot >= self.ivars.len() {
            return Err(format!("loop variable {} out of range", l.var));
        }
        let sum = program.output == Output::Sum;
        let symbol = if sum { entries.sum.0 } else { entries.store.0 };
        let (lo, hi) = self.range(l)?;
        let n = self.b.ins().isub(hi, lo);
        let n = self.b.ins().iadd_imm_s(n, 1);
        let (call, exit) = (self.b.create_block(), self.b.create_block());
        let result = sum.then(|| self.b.append_block_param(exit, types::F32));
        let empty: Vec<BlockArg> = if sum {
            vec![BlockArg::Value(self.b.ins().f32const(0.0))]
        } else {
            Vec::new()
        };
        let nonempty = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, n, 0);
        self.b.ins().brif(nonempty, call, &[], exit, &empty);
        self.b.switch_to_block(call);
        let saved = self.ivars[slot].replace(lo);
        let ptr = self.pointer_type();
        let streams = self.slot_of(program.streams.len() * ptr.bytes() as usize);
        for (s, (arg, offset)) in program.streams.iter().enumerate() {
            let addr = self.arg_address(*arg, offset)?;
            let at = (s * ptr.bytes() as usize) as i32;
            self.b.ins().stack_store(ptr, addr, streams, at);
        }
        let scalars = self.slot_of(program.scalars.len() * 4);
        for (c, scalar) in program.scalars.iter().enumerate() {
            let v = match scalar {
                Scalar::Const(x) => self.b.ins().f32const(*x),
                Scalar::Reg(r) => self.reg(*r)?,
                Scalar::Load { arg, offset } => {
                    let addr = self.arg_address(*arg, offset)?;
                    let flags = MemFlagsData::trusted().with_readonly();
                    self.b.ins().load(types::F32, flags, addr, 0)
                }
            };
            self.b.ins().stack_store(ptr, v, scalars, (c * 4) as i32);
        }
        let out = match &program.output {
            Output::Store(offset) => Some(self.out_address(offset)?),
            Output::Sum => None,
        };
        self.ivars[slot] = saved;
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        let params: &[types::Type] = if sum {
            &[ptr, ptr, ptr, types::I64]
        } else {
            &[ptr, ptr, ptr, ptr, types::I64]
        };
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        if sum {
            sig.returns.push(AbiParam::new(types::F32));
        }
        let id = self
            .module
            .declare_function(symbol, Linkage::Import, &sig)
            .map_err(|e| format!("declaring {symbol}: {e}"))?;
        let f = self.module.declare_func_in_func(id, self.b.func);
        let p = self.b.ins().iconst(ptr, &*program as *const Program as i64);
        let streams = self.b.ins().stack_addr(ptr, streams, 0);
        let scalars = self.b.ins().stack_addr(ptr, scalars, 0);
        let mut args = vec![p, streams, scalars];
        args.extend(out);
        args.push(n);
        let inst = self.b.ins().call(f, &args);
        let back: Vec<BlockArg> = self
            .b
            .inst_results(inst)
            .iter()
            .map(|&v| BlockArg::Value(v))
            .collect();
        self.b.ins().jump(exit, &back);
        self.b.switch_to_block(exit);
        self.programs.push(program);
        self.wide_loops += 1;
        Ok(result)
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

/// Writes each compiled segment's address into its program step, once the
/// kernel's module is finalized: `segments` holds (program, step,
/// function), as `Emitter::with_segments` recorded them.
pub(super) fn place_segments(
    module: &JITModule,
    programs: &mut [Box<Program>],
    segments: Vec<(usize, usize, FuncId)>,
) -> Result<(), String> {
    for (program, step, f) in segments {
        let entry = module.get_finalized_function(f) as usize;
        match programs
            .get_mut(program)
            .and_then(|p| p.steps.get_mut(step))
        {
            Some(s) => *s = Step::Jit { entry },
            None => return Err(format!("no step {step} in program {program}")),
        }
    }
    Ok(())
}
