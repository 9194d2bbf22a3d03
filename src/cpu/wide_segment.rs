//! A run of cheap steps of a wide program, compiled as f32x4 code that
//! keeps their values in registers.
//!
//! The wide executor (`super::wide`) writes every step's result to a tile
//! in L1: right for a transcendental function, whose work per element
//! dwarfs a store and a load, but two or three times the cost of an
//! addition in a register. So the code generator compiles each maximal run
//! of cheap steps ([`is_cheap`]) into a function of its own in the
//! kernel's module, which walks the tile four lanes at a time (sixteen per
//! iteration, then four), loads each operand once, computes the run with
//! the lane sequences of `super::vmath` (the same bits as the executor's
//! and the f32x4 loop's) and stores only the values read after the run.
//! Owns that function; must not decide which loops go wide nor run
//! anything.

use super::clif_lanes::ClifLanes;
use super::vmath::{Lanes, VMath};
use super::wide::{is_cheap, Dst, Op, Program, Src, Step, TILE};
use crate::symbolic::{BinaryOp, UnaryOp};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, BlockArg, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};
use std::collections::HashMap;
use std::ops::Range;

const V: types::Type = types::F32X4;

/// Compiles steps `run` of `p` (all cheap) into a function of `module`
/// with the signature of `Step::Jit`.
pub(super) fn compile_segment(
    module: &mut JITModule,
    fma: bool,
    p: &Program,
    run: Range<usize>,
) -> Result<FuncId, String> {
    let config = module.target_config();
    let ptr = config.pointer_type();
    let mut ctx = module.make_context();
    for t in [ptr, ptr, ptr, types::I64] {
        ctx.func.signature.params.push(AbiParam::new(t));
    }
    let sig = ctx.func.signature.clone();
    let mut fctx = FunctionBuilderContext::new();
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let params = b.block_params(entry).to_vec();
        let (base, streams, out, len) = (params[0], params[1], params[2], params[3]);
        let mut s = Segment {
            b,
            fma,
            p,
            run: run.clone(),
            base,
            out,
            streams: HashMap::new(),
            scalars: HashMap::new(),
        };
        // Operands fixed for the call: stream pointers, scalar values.
        for k in run.clone() {
            if let Some(Step::Lanes { op, .. }) = p.steps.get(k) {
                for src in op.sources() {
                    s.operand_base(src, streams)?;
                }
            }
        }
        let zero = s.b.ins().iconst(types::I64, 0);
        let j = s.strip(zero, len, 4)?;
        s.strip(j, len, 1)?;
        s.b.ins().return_(&[]);
        s.b.seal_all_blocks();
        s.b.finalize(config);
    }
    let id = module
        .declare_anonymous_function(&sig)
        .map_err(|e| e.to_string())?;
    module
        .define_function(id, &mut ctx)
        .map_err(|e| format!("{e:?}"))?;
    Ok(id)
}

struct Segment<'a, 'p> {
    b: FunctionBuilder<'a>,
    fma: bool,
    p: &'p Program,
    run: Range<usize>,
    base: Value,
    out: Value,
    /// Each stream's pointer at the tile's start.
    streams: HashMap<u16, Value>,
    /// Each scalar, splatted.
    scalars: HashMap<u16, Value>,
}

impl<'a> Segment<'a, '_> {
    /// Loads the per-call part of an operand: a stream's pointer, a
    /// scalar's value (lane 0 of its tile).
    fn operand_base(&mut self, src: Src, streams: Value) -> Result<(), String> {
        let ptr = types::I64;
        match src {
            Src::Stream(s) if !self.streams.contains_key(&s) => {
                let flags = MemFlagsData::trusted().with_readonly();
                let v = self.b.ins().load(ptr, flags, streams, 8 * s as i32);
                self.streams.insert(s, v);
            }
            Src::Scalar(c) if !self.scalars.contains_key(&c) => {
                let at = ((self.p.slots + c as usize) * TILE * 4) as i32;
                let flags = MemFlagsData::trusted().with_readonly();
                let x = self.b.ins().load(types::F32, flags, self.base, at);
                let v = self.b.ins().splat(V, x);
                self.scalars.insert(c, v);
            }
            _ => {}
        }
        Ok(())
    }

    /// A rotated loop from element `j0` while `copies` groups of four fit
    /// before `len`; returns the first element not done.
    fn strip(&mut self, j0: Value, len: Value, copies: i64) -> Result<Value, String> {
        let step = 4 * copies;
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let j = self.b.append_block_param(body, types::I64);
        let done = self.b.append_block_param(exit, types::I64);
        let last = self.b.ins().iadd_imm_s(len, -step);
        let enter = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, j0, last);
        let a0 = [BlockArg::Value(j0)];
        self.b.ins().brif(enter, body, &a0, exit, &a0);
        self.b.switch_to_block(body);
        for u in 0..copies {
            let ju = self.b.ins().iadd_imm_s(j, 4 * u);
            let bytes = self.b.ins().imul_imm_s(ju, 4);
            self.iteration(bytes)?;
        }
        let j1 = self.b.ins().iadd_imm_s(j, step);
        let again = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, j1, last);
        let a1 = [BlockArg::Value(j1)];
        self.b.ins().brif(again, body, &a1, exit, &a1);
        self.b.switch_to_block(exit);
        Ok(done)
    }

    fn slot_addr(&mut self, slot: u16, bytes: Value) -> Value {
        let a = self.b.ins().iadd(self.base, bytes);
        self.b
            .ins()
            .iadd_imm_s(a, (slot as usize * TILE * 4) as i64)
    }

    /// The run's steps on the four lanes at byte offset `bytes`.
    fn iteration(&mut self, bytes: Value) -> Result<(), String> {
        let flags = MemFlagsData::new().with_notrap();
        let mut vals: HashMap<Src, Value> = HashMap::new();
        for k in self.run.clone() {
            let Some(&Step::Lanes { op, dst }) = self.p.steps.get(k) else {
                return Err("a segment over a step that is not a lane step".into());
            };
            if !is_cheap(&op) {
                return Err("a segment over a step the executor computes".into());
            }
            let mut get = |s: &mut Self, src: Src| -> Value {
                if let Some(&v) = vals.get(&src) {
                    return v;
                }
                let v = match src {
                    Src::Slot(slot) => {
                        let a = s.slot_addr(slot, bytes);
                        s.b.ins().load(V, flags, a, 0)
                    }
                    Src::Stream(st) => {
                        let a = s.b.ins().iadd(s.streams[&st], bytes);
                        s.b.ins().load(V, flags, a, 0)
                    }
                    Src::Scalar(c) => s.scalars[&c],
                };
                vals.insert(src, v);
                v
            };
            let v = match op {
                Op::Unary(u, a) => {
                    let x = get(self, a);
                    self.unary(u, x)?
                }
                Op::Binary(o, a, b) => {
                    let (x, y) = (get(self, a), get(self, b));
                    self.binary(o, x, y)?
                }
                Op::PowI(a, n) => {
                    let x = get(self, a);
                    self.lanes().powi(x, n)
                }
                Op::Select {
                    cc,
                    a,
                    b,
                    then,
                    otherwise,
                } => {
                    let (x, y) = (get(self, a), get(self, b));
                    let (t, o) = (get(self, then), get(self, otherwise));
                    let mut l = self.lanes();
                    let m = l.cmp(cc, x, y);
                    l.sel(m, t, o)
                }
            };
            match dst {
                Dst::Slot(slot) => {
                    vals.insert(Src::Slot(slot), v);
                    if self.p.escapes(k, self.run.end) {
                        let a = self.slot_addr(slot, bytes);
                        self.b.ins().store(flags, v, a, 0);
                    }
                }
                Dst::Out => {
                    let a = self.b.ins().iadd(self.out, bytes);
                    self.b.ins().store(flags, v, a, 0);
                }
            }
        }
        Ok(())
    }

    fn lanes(&mut self) -> ClifLanes<'_, 'a> {
        ClifLanes {
            b: &mut self.b,
            fma: self.fma,
            ty: V,
        }
    }

    fn unary(&mut self, op: UnaryOp, x: Value) -> Result<Value, String> {
        Ok(match op {
            UnaryOp::Neg => self.lanes().neg(x),
            UnaryOp::Abs => self.lanes().abs(x),
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Sgn => self.lanes().sgn(x),
            UnaryOp::Detach => x,
            other => return Err(format!("{other:?} in a compiled segment")),
        })
    }

    fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Result<Value, String> {
        let mut l = self.lanes();
        Ok(match op {
            BinaryOp::Add => l.add(x, y),
            BinaryOp::Sub => l.sub(x, y),
            BinaryOp::Mul => l.mul(x, y),
            BinaryOp::Div => l.div(x, y),
            BinaryOp::Max => l.max_first(x, y),
            BinaryOp::Min => l.min_first(x, y),
            BinaryOp::Pow => return Err("pow in a compiled segment".into()),
        })
    }
}
