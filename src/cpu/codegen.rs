//! Cranelift code generation from the kernel IR.
//!
//! Owns the translation of a [`Kernel`] into machine code: one
//! `JITModule` per kernel (so that dropping a kernel frees its code), the
//! host ISA (built once), and the calls to the registered math functions
//! (`super::math`). Must not lower index functions (that is
//! `crate::kernel`) nor run kernels (that is `super::compiled`).
//!
//! The generated function has the signature
//! `extern "C" fn(args: *const *const T, out: *mut T, start: i64, end: i64)`
//! and computes the output rows `start..end` of the parallel loop; a kernel
//! with run-time constants (`Kernel::params`) finds a pointer to them, an
//! array of `i64` in the parameters' order, after the arguments' in
//! `args` (`super::run_time`). Loops are
//! rotated (`if lo <= hi { do { .. } while k <= hi }`) with accumulators as
//! block parameters; guards become branches, so a load only executes on the
//! path where the IR has it. In f32 kernels, loops the planner marked
//! [`Loop::vector`] (`crate::planner::vectorize`) are emitted as f32x4 code
//! by `super::simd` instead, or handed to the wide executor
//! (`super::wide_loop`); nothing here decides which.

use super::clif_lanes::ClifLanes;
use super::math::MathFn;
use super::vmath::VMath;
use super::wide::{Program, Width};
use crate::kernel::{
    Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Reg, RunTimeStride, Stmt, END, START,
};
use crate::symbolic::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::DType;
use crate::Error;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, BlockArg, FuncRef, InstBuilder, MemFlagsData, Signature, Type, Value,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The entry point of a compiled kernel (byte pointers; the element type is
/// the kernel's).
pub(crate) type KernelFn = unsafe extern "C" fn(*const *const u8, *mut u8, i64, i64);

/// Machine code for one kernel; the module owns the code's memory.
pub(crate) struct Code {
    pub(crate) entry: KernelFn,
    pub(crate) module: JITModule,
    /// Whether some loop runs as f32x4 code (`super::simd`).
    pub(crate) vectorized: bool,
    /// How many sums run as f32x4 code (`super::simd`).
    pub(crate) vectorized_reductions: u32,
    /// The programs the code runs on the wide executor: they live as long
    /// as the code, which holds their addresses (boxed, so that they do not
    /// move when the vector grows).
    #[allow(clippy::vec_box)]
    pub(crate) programs: Vec<Box<Program>>,
    /// How many loops run on the wide executor (`super::wide`).
    pub(crate) wide_loops: u32,
}

/// Kernels with more registers than this compile with Cranelift's
/// single-pass register allocator: the backtracking one grows faster than
/// linearly with the number of values live in one block (a 2,000-term sum
/// took 2 s with it, 27 s at 4,000), while ordinary kernels have a few
/// hundred registers at most and keep the better code.
const LARGE_KERNEL_REGS: u32 = 1000;

fn host_isa(large: bool) -> Result<OwnedTargetIsa, String> {
    static ISA: [OnceLock<Result<OwnedTargetIsa, String>>; 2] = [OnceLock::new(), OnceLock::new()];
    ISA[large as usize]
        .get_or_init(|| {
            let mut flags = settings::builder();
            for (k, v) in [
                ("opt_level", "speed"),
                (
                    "regalloc_algorithm",
                    if large { "single_pass" } else { "backtracking" },
                ),
                ("is_pic", "false"),
                ("use_colocated_libcalls", "false"),
                // The IR is verified by construction; debug builds still check.
                (
                    "enable_verifier",
                    if cfg!(debug_assertions) {
                        "true"
                    } else {
                        "false"
                    },
                ),
            ] {
                flags.set(k, v).map_err(|e| e.to_string())?;
            }
            let builder = cranelift_native::builder().map_err(|e| e.to_string())?;
            builder
                .finish(settings::Flags::new(flags))
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// Compiles `k` for f32 or f64 elements, its vector loops at the host's
/// width ([`Width::host`]).
pub(crate) fn compile(k: &Kernel, width: DType) -> Result<Code, Error> {
    compile_at(k, width, Width::host())
}

/// Compiles `k` for f32 or f64 elements, its vector loops at `simd` (at
/// most [`Width::supported`]).
pub(crate) fn compile_at(k: &Kernel, width: DType, simd: Width) -> Result<Code, Error> {
    let simd = simd.min(Width::supported());
    let fail = |what: &str, detail: String| Error::Invalid {
        function: k.name.clone(),
        message: format!("Cranelift could not {what}: {detail}"),
    };
    if !width.kernels_compute_in() {
        return Err(crate::dtype::not_computable(&k.name, width));
    }
    let isa = host_isa(k.num_regs > LARGE_KERNEL_REGS).map_err(|e| fail("target this host", e))?;
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for f in MathFn::ALL {
        let (name, ptr) = f.symbol(width);
        builder.symbol(name, ptr);
    }
    if let Some(e) = simd.entries() {
        for (name, ptr) in [e.store, e.sum] {
            builder.symbol(name, ptr);
        }
    }
    let mut module = JITModule::new(builder);
    let fma = module
        .isa()
        .isa_flags()
        .iter()
        .any(|f| f.name == "has_fma" && f.as_bool() == Some(true));
    let config = module.target_config();
    let ptr = config.pointer_type();
    let mut ctx = module.make_context();
    for t in [ptr, ptr, types::I64, types::I64] {
        ctx.func.signature.params.push(AbiParam::new(t));
    }
    let sig = ctx.func.signature.clone();
    let mut fctx = FunctionBuilderContext::new();
    let (vectorized, vectorized_reductions, mut programs, wide_loops, segments);
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let ty = match width {
            DType::F32 => types::F32,
            // Integer widths were refused above.
            _ => types::F64,
        };
        let mut e = Emitter {
            b,
            module: &mut module,
            width,
            ty,
            elem: ty.bytes() as i64,
            regs: vec![None; k.num_regs as usize],
            vregs: vec![None; k.num_regs as usize],
            fma,
            vectorized: false,
            vectorized_reductions: 0,
            vbranch: false,
            simd,
            programs: Vec::new(),
            wide_loops: 0,
            segments: Vec::new(),
            ivars: vec![None; k.num_ivars as usize],
            strides: k.strides.clone(),
            params: k.params.iter().map(|p| p.0).collect(),
            bases: Vec::new(),
            out: None,
            funcs: HashMap::new(),
        };
        e.function(k)
            .map_err(|m| fail("translate the kernel", format!("{m}\n{k}")))?;
        vectorized = e.vectorized;
        vectorized_reductions = e.vectorized_reductions;
        wide_loops = e.wide_loops;
        programs = std::mem::take(&mut e.programs);
        segments = std::mem::take(&mut e.segments);
        e.b.finalize(config);
    }
    let id = module
        .declare_function("kernel", Linkage::Export, &sig)
        .map_err(|e| fail("declare the kernel", e.to_string()))?;
    if let Err(e) = module.define_function(id, &mut ctx) {
        return Err(fail(
            "compile the kernel",
            format!("{e:?}\n{}\n{k}", ctx.func.display()),
        ));
    }
    module
        .finalize_definitions()
        .map_err(|e| fail("finalize the kernel", e.to_string()))?;
    super::wide_loop::place_segments(&module, &mut programs, segments)
        .map_err(|e| fail("place a compiled segment", e))?;
    let code = module.get_finalized_function(id);
    // SAFETY: `code` is the entry of the function just defined with
    // exactly this signature (two pointers, two i64, no result).
    let entry = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
    Ok(Code {
        entry,
        module,
        vectorized,
        vectorized_reductions,
        programs,
        wide_loops,
    })
}

pub(super) struct Emitter<'a> {
    pub(super) b: FunctionBuilder<'a>,
    pub(super) module: &'a mut JITModule,
    pub(super) width: DType,
    ty: Type,
    pub(super) elem: i64,
    regs: Vec<Option<Value>>,
    /// f32x4 values of the registers defined in the vector loop being
    /// emitted (`super::simd`).
    pub(super) vregs: Vec<Option<Value>>,
    pub(super) ivars: Vec<Option<Value>>,
    /// The kernel's run-time strides (`Kernel::strides`): variables that
    /// are a loop variable times a run-time constant (`super::run_time`).
    pub(super) strides: Vec<RunTimeStride>,
    /// The kernel's run-time constants (`Kernel::params`).
    pub(super) params: Vec<IVar>,
    /// Base pointer of each argument buffer, loaded in the entry block.
    pub(super) bases: Vec<Value>,
    pub(super) out: Option<Value>,
    funcs: HashMap<MathFn, FuncRef>,
    /// The host has fused multiply-add (used by `super::vmath`).
    pub(super) fma: bool,
    /// Some output loop was vectorised.
    pub(super) vectorized: bool,
    /// Number of sums vectorised.
    pub(super) vectorized_reductions: u32,
    /// Vector code is being emitted for a sum: index guards become
    /// branches rather than selects (`super::simd`).
    pub(super) vbranch: bool,
    /// The width vector loops run at (`super::wide`).
    pub(super) simd: Width,
    /// The programs of the loops handed to the wide executor
    /// (`super::wide_loop`), owned by the compiled kernel (boxed: the code
    /// holds their addresses).
    #[allow(clippy::vec_box)]
    pub(super) programs: Vec<Box<Program>>,
    /// Loops handed to the wide executor.
    pub(super) wide_loops: u32,
    /// Compiled segments of those programs: (program, step, function),
    /// whose addresses go into the steps once the module is finalized.
    pub(super) segments: Vec<(usize, usize, FuncId)>,
}

pub(super) type R<T> = Result<T, String>;

fn int_cc(op: CmpOp) -> IntCC {
    match op {
        CmpOp::Eq => IntCC::Equal,
        CmpOp::Ne => IntCC::NotEqual,
        CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
        CmpOp::Gt => IntCC::SignedGreaterThan,
        CmpOp::Le => IntCC::SignedLessThanOrEqual,
        CmpOp::Lt => IntCC::SignedLessThan,
    }
}

/// IEEE comparisons as Rust's `PartialOrd` operators: only `!=` holds for
/// NaN operands.
pub(super) fn float_cc(op: CmpOp) -> FloatCC {
    match op {
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Lt => FloatCC::LessThan,
    }
}

pub(super) fn args(vals: &[Value]) -> Vec<BlockArg> {
    vals.iter().map(|&v| BlockArg::Value(v)).collect()
}

impl<'a> Emitter<'a> {
    fn function(&mut self, k: &Kernel) -> R<()> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let (args_ptr, out, start, end) = (params[0], params[1], params[2], params[3]);
        let ptr = self.module.target_config().pointer_type();
        for a in 0..k.args.len() {
            let base = self.b.ins().load(
                ptr,
                MemFlagsData::trusted().with_readonly(),
                args_ptr,
                (a * ptr.bytes() as usize) as i32,
            );
            self.bases.push(base);
        }
        self.load_run_time_constants(k, args_ptr)?;
        self.out = Some(out);
        self.ivars[START.0 as usize] = Some(start);
        self.ivars[END.0 as usize] = Some(end);
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let nonempty = self.b.ins().icmp(IntCC::SignedLessThan, start, end);
        self.b.ins().brif(nonempty, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        self.stmts(&k.body)?;
        self.b.ins().jump(exit, &[]);
        self.b.switch_to_block(exit);
        self.b.ins().return_(&[]);
        self.b.seal_all_blocks();
        Ok(())
    }

    pub(super) fn reg(&self, r: Reg) -> R<Value> {
        self.regs
            .get(r.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("register {r} used before its definition"))
    }

    fn set(&mut self, r: Reg, v: Value) -> R<()> {
        match self.regs.get_mut(r.0 as usize) {
            Some(slot) => {
                *slot = Some(v);
                Ok(())
            }
            None => Err(format!("register {r} out of range")),
        }
    }

    pub(super) fn ivar(&self, v: IVar) -> R<Value> {
        self.ivars
            .get(v.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("integer {v} used outside its loop"))
    }

    /// `lin · scale` (scale: 1 for indices, the element size for byte
    /// offsets). Outer variables are added first, so the part invariant in
    /// an inner loop is one value that Cranelift can hoist.
    pub(super) fn lin(&mut self, l: &Lin, scale: i64) -> R<Value> {
        let mut acc: Option<Value> = None;
        for &(v, c) in &l.terms {
            let x = self.term(v)?;
            let c = c.wrapping_mul(scale);
            let t = if c == 1 {
                x
            } else {
                self.b.ins().imul_imm_s(x, c)
            };
            acc = Some(match acc {
                None => t,
                Some(a) => self.b.ins().iadd(a, t),
            });
        }
        let k = l.constant.wrapping_mul(scale);
        Ok(match acc {
            None => self.b.ins().iconst(types::I64, k),
            Some(a) if k == 0 => a,
            Some(a) => self.b.ins().iadd_imm_s(a, k),
        })
    }

    /// `⌈num/den⌉` or `⌊num/den⌋` for `den > 0`.
    fn bound(&mut self, b: &Bound, ceil: bool) -> R<Value> {
        let n = self.lin(&b.num, 1)?;
        if b.den == 1 {
            return Ok(n);
        }
        let d = self.b.ins().iconst(types::I64, b.den);
        let q = self.b.ins().sdiv(n, d);
        let r = self.b.ins().srem(n, d);
        let zero = self.b.ins().iconst(types::I64, 0);
        // Truncating division: fix up towards +∞ (ceil) or −∞ (floor).
        let (cc, step) = if ceil {
            (IntCC::SignedGreaterThan, 1)
        } else {
            (IntCC::SignedLessThan, -1)
        };
        let adjust = self.b.ins().icmp(cc, r, zero);
        let adjust = self.b.ins().uextend(types::I64, adjust);
        let adjust = if step == 1 {
            adjust
        } else {
            self.b.ins().ineg(adjust)
        };
        Ok(self.b.ins().iadd(q, adjust))
    }

    /// The address of element `offset` of argument `arg`.
    pub(super) fn arg_address(&mut self, arg: usize, offset: &Lin) -> R<Value> {
        let off = self.lin(offset, self.elem)?;
        let base = *self.bases.get(arg).ok_or("load of an unknown argument")?;
        Ok(self.b.ins().iadd(base, off))
    }

    /// The address of element `offset` of the output.
    pub(super) fn out_address(&mut self, offset: &Lin) -> R<Value> {
        let off = self.lin(offset, self.elem)?;
        let out = self.out.ok_or("store before the entry block")?;
        Ok(self.b.ins().iadd(out, off))
    }

    pub(super) fn pointer_type(&self) -> Type {
        self.module.target_config().pointer_type()
    }

    pub(super) fn range(&mut self, l: &Loop) -> R<(Value, Value)> {
        let mut lo: Option<Value> = None;
        for b in &l.lower {
            let v = self.bound(b, true)?;
            lo = Some(match lo {
                None => v,
                Some(x) => self.b.ins().smax(x, v),
            });
        }
        let mut hi: Option<Value> = None;
        for b in &l.upper {
            let v = self.bound(b, false)?;
            hi = Some(match hi {
                None => v,
                Some(x) => self.b.ins().smin(x, v),
            });
        }
        match (lo, hi) {
            (Some(lo), Some(hi)) => Ok((lo, hi)),
            _ => Err("a loop without bounds".into()),
        }
    }

    fn fconst(&mut self, c: f64) -> Value {
        match self.width {
            DType::F32 => self.b.ins().f32const(c as f32),
            // Integer widths are refused by `compile`.
            _ => self.b.ins().f64const(c),
        }
    }

    pub(super) fn call(&mut self, f: MathFn, xs: &[Value]) -> R<Value> {
        let fref = match self.funcs.get(&f) {
            Some(&r) => r,
            None => {
                let mut sig = Signature::new(self.module.isa().default_call_conv());
                for _ in 0..f.arity() {
                    sig.params.push(AbiParam::new(self.ty));
                }
                sig.returns.push(AbiParam::new(self.ty));
                let name = f.symbol(self.width).0;
                let id = self
                    .module
                    .declare_function(name, Linkage::Import, &sig)
                    .map_err(|e| format!("declaring {name}: {e}"))?;
                let r = self.module.declare_func_in_func(id, self.b.func);
                self.funcs.insert(f, r);
                r
            }
        };
        let inst = self.b.ins().call(fref, xs);
        Ok(self.b.inst_results(inst)[0])
    }

    /// The scalar lanes of the element type, for the sequences shared with
    /// the vector code (`super::vmath`: `sgn`, max/min with the first
    /// operand winning ties and a NaN operand winning, integer powers in
    /// the order of compiler-rt's `__powidf2`), so f64 results equal the
    /// interpreter's bit for bit.
    fn lanes(&mut self) -> ClifLanes<'_, 'a> {
        ClifLanes {
            b: &mut self.b,
            fma: self.fma,
            ty: self.ty,
        }
    }

    fn unary(&mut self, op: UnaryOp, x: Value) -> R<Value> {
        match op {
            UnaryOp::Neg => return Ok(self.b.ins().fneg(x)),
            UnaryOp::Abs => return Ok(self.b.ins().fabs(x)),
            UnaryOp::Sqrt => return Ok(self.b.ins().sqrt(x)),
            UnaryOp::Floor => return Ok(self.b.ins().floor(x)),
            UnaryOp::Detach => return Ok(x),
            UnaryOp::Sgn => return Ok(self.lanes().sgn(x)),
            UnaryOp::Sigmoid => {
                let nx = self.b.ins().fneg(x);
                let e = self.call(MathFn::Exp, &[nx])?;
                let one = self.fconst(1.0);
                let d = self.b.ins().fadd(one, e);
                return Ok(self.b.ins().fdiv(one, d));
            }
            _ => {}
        }
        let f = MathFn::of(op).ok_or_else(|| format!("{op:?} has no function to call"))?;
        self.call(f, &[x])
    }

    fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> R<Value> {
        Ok(match op {
            BinaryOp::Add => self.b.ins().fadd(a, b),
            BinaryOp::Sub => self.b.ins().fsub(a, b),
            BinaryOp::Mul => self.b.ins().fmul(a, b),
            BinaryOp::Div => self.b.ins().fdiv(a, b),
            BinaryOp::Pow => self.call(MathFn::Pow, &[a, b])?,
            BinaryOp::Max => self.lanes().max_first(a, b),
            BinaryOp::Min => self.lanes().min_first(a, b),
        })
    }

    fn expr(&mut self, e: &Expr) -> R<Value> {
        Ok(match e {
            Expr::Const(c) => self.fconst(*c),
            Expr::ConstParam(v) => self.const_param(*v)?,
            Expr::Load { arg, offset } => {
                let addr = self.arg_address(*arg, offset)?;
                let flags = MemFlagsData::trusted().with_readonly();
                self.b.ins().load(self.ty, flags, addr, 0)
            }
            Expr::Index(l) => {
                let v = self.lin(l, 1)?;
                self.b.ins().fcvt_from_sint(self.ty, v)
            }
            Expr::Random { key, counter } => {
                let key = [self.reg(key[0])?, self.reg(key[1])?, self.reg(key[2])?];
                let n = self.lin(counter, 1)?;
                self.random(key, n, self.ty)
            }
            Expr::Unary(op, a) => {
                let a = self.reg(*a)?;
                self.unary(*op, a)?
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.reg(*a)?, self.reg(*b)?);
                self.binary(*op, a, b)?
            }
            Expr::PowI(a, n) => {
                let a = self.reg(*a)?;
                self.lanes().powi(a, *n)
            }
        })
    }

    pub(super) fn cond(&mut self, c: &Cond) -> R<Value> {
        Ok(match c {
            Cond::Index(l, op) => {
                let v = self.lin(l, 1)?;
                self.b.ins().icmp_imm_s(int_cc(*op), v, 0)
            }
            Cond::Divisible(l, d) => {
                let v = self.lin(l, 1)?;
                let d = self.b.ins().iconst(types::I64, *d);
                let r = self.b.ins().srem(v, d);
                self.b.ins().icmp_imm_s(IntCC::Equal, r, 0)
            }
            Cond::Value(a, op, b) => {
                let (a, b) = (self.reg(*a)?, self.reg(*b)?);
                self.b.ins().fcmp(float_cc(*op), a, b)
            }
        })
    }

    fn stmts(&mut self, list: &[Stmt]) -> R<()> {
        for s in list {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Let(r, e) => {
                let v = self.expr(e)?;
                self.set(*r, v)
            }
            Stmt::Store { offset, value } => {
                let v = self.reg(*value)?;
                let addr = self.out_address(offset)?;
                self.b.ins().store(MemFlagsData::trusted(), v, addr, 0);
                Ok(())
            }
            Stmt::If {
                cond,
                then,
                then_value,
                otherwise,
                otherwise_value,
                result,
            } => {
                let c = self.cond(cond)?;
                let (tb, eb, merge) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                let res = self.b.append_block_param(merge, self.ty);
                self.b.ins().brif(c, tb, &[], eb, &[]);
                for (block, list, value) in
                    [(tb, then, then_value), (eb, otherwise, otherwise_value)]
                {
                    self.b.switch_to_block(block);
                    self.stmts(list)?;
                    let v = self.reg(*value)?;
                    self.b.ins().jump(merge, &args(&[v]));
                }
                self.b.switch_to_block(merge);
                self.set(*result, res)
            }
            // Vector loops are the planner's decision
            // (`crate::planner::vectorize`), for f32 kernels only.
            Stmt::For(l) if l.vector && self.width == DType::F32 => self.vector_loop(l),
            Stmt::For(l) => self.looped(l, &[], |_, _, _, _| Ok(vec![])).map(|_| ()),
            Stmt::Reduce {
                op,
                value,
                result,
                body,
                wide: false,
            } if body.vector && *op == ReduceOp::Sum && self.width == DType::F32 => {
                let s = self.vector_sum(body, *value)?;
                self.set(*result, s)
            }
            Stmt::Reduce {
                op: ReduceOp::Sum,
                value,
                result,
                body,
                wide: true,
            } if self.width == DType::F32 => {
                // Accumulated in f64: each value widened, the sum rounded
                // once at the end.
                let zero = self.b.ins().f64const(0.0);
                let value = *value;
                let out = self.counted_loop(body, &[zero], types::F64, |e, _, _, acc| {
                    e.stmts(&body.body)?;
                    let x = e.reg(value)?;
                    let wide = e.b.ins().fpromote(types::F64, x);
                    Ok(vec![e.b.ins().fadd(acc[0], wide)])
                })?;
                let s = self.b.ins().fdemote(types::F32, out[0]);
                self.set(*result, s)
            }
            Stmt::Reduce {
                op,
                value,
                result,
                body,
                ..
            } => {
                let init = match op {
                    ReduceOp::Sum => vec![self.fconst(0.0)],
                    ReduceOp::Max => vec![self.fconst(f64::NEG_INFINITY)],
                    ReduceOp::Min => vec![self.fconst(f64::INFINITY)],
                    // (index as a number, best value so far)
                    ReduceOp::ArgMax | ReduceOp::ArgMin => {
                        vec![self.fconst(-1.0), self.fconst(0.0)]
                    }
                };
                let op = *op;
                let value = *value;
                let out = self.looped(body, &init, move |e, k, lo, acc| {
                    let x = e.reg(value)?;
                    Ok(match op {
                        ReduceOp::Sum => vec![e.b.ins().fadd(acc[0], x)],
                        ReduceOp::Max => {
                            vec![e.lanes().max_first(acc[0], x)]
                        }
                        ReduceOp::Min => {
                            vec![e.lanes().min_first(acc[0], x)]
                        }
                        ReduceOp::ArgMax | ReduceOp::ArgMin => {
                            // The first iteration always takes its value;
                            // later ones only a strictly better one.
                            let cc = if op == ReduceOp::ArgMax {
                                FloatCC::GreaterThan
                            } else {
                                FloatCC::LessThan
                            };
                            let first = e.b.ins().icmp(IntCC::Equal, k, lo);
                            let better = e.b.ins().fcmp(cc, x, acc[1]);
                            // A NaN is better than any number.
                            let x_nan = e.b.ins().fcmp(FloatCC::Unordered, x, x);
                            let best_num = e.b.ins().fcmp(FloatCC::Ordered, acc[1], acc[1]);
                            let nan = e.b.ins().band(x_nan, best_num);
                            let better = e.b.ins().bor(better, nan);
                            let take = e.b.ins().bor(first, better);
                            let kf = e.b.ins().fcvt_from_sint(e.ty, k);
                            let idx = e.b.ins().select(take, kf, acc[0]);
                            let best = e.b.ins().select(take, x, acc[1]);
                            vec![idx, best]
                        }
                    })
                })?;
                self.set(*result, out[0])
            }
        }
    }

    /// `for var in range(l)` running `l`'s statements then `update`, with
    /// values of the element type carried from `init` to the results.
    fn looped(
        &mut self,
        l: &Loop,
        init: &[Value],
        update: impl Fn(&mut Self, Value, Value, &[Value]) -> R<Vec<Value>>,
    ) -> R<Vec<Value>> {
        let ty = self.ty;
        self.counted_loop(l, init, ty, |e, k, lo, acc| {
            e.stmts(&l.body)?;
            update(e, k, lo, acc)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolic::IndexFn;

    #[test]
    fn malformed_kernels_are_errors_with_the_kernel_text() {
        let f = IndexFn::parse("f[i] = x[i]", &[("x", &[3][..])]).unwrap();
        let mut k = crate::kernel::lower(&f).unwrap();
        k.body = vec![Stmt::Store {
            offset: Lin::constant(0),
            value: Reg(7),
        }];
        let err = compile(&k, DType::F64)
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.contains("r7 used before its definition"), "{err}");
        assert!(err.contains("kernel f("), "{err}");
    }

    #[test]
    fn compiled_code_runs_a_row_range() {
        let f = IndexFn::parse("f[i] = x[i] * 2", &[("x", &[4][..])]).unwrap();
        let k = crate::kernel::lower(&f).unwrap();
        let code = compile(&k, DType::F64).unwrap();
        let x = [1.0f64, 2.0, 3.0, 4.0];
        let mut out = [0.0f64; 4];
        let args = [x.as_ptr() as *const u8];
        // SAFETY: buffers of the declared lengths; rows 1..3 are in range.
        unsafe { (code.entry)(args.as_ptr(), out.as_mut_ptr() as *mut u8, 1, 3) };
        assert_eq!(out, [0.0, 4.0, 6.0, 0.0]);
        // An empty range runs nothing.
        unsafe { (code.entry)(args.as_ptr(), out.as_mut_ptr() as *mut u8, 3, 3) };
        assert_eq!(out, [0.0, 4.0, 6.0, 0.0]);
        // SAFETY: the entry is not used afterwards.
        unsafe { code.module.free_memory() };
    }
}
