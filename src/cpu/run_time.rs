//! How generated code reads what a shared kernel takes at run time
//! (`Kernel::with_run_time_constants`, issue 28): the table of run-time
//! constants behind the arguments' pointers, float constants held as bits,
//! strides read at run time, and whether a vector loop reaches a
//! trip-count threshold (`super::trips`).
//!
//! Owns these parts of the [`Emitter`]; the translation of statements
//! stays in `super::codegen`. Must not decide what is lifted
//! (`crate::kernel::params`) nor which code a kernel shares
//! (`super::code_cache`).

use super::codegen::{Emitter, R};
use super::trips::{self, Reach};
use crate::kernel::{IVar, Kernel, Lin, Loop};
use crate::DType;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_module::Module;

impl Emitter<'_> {
    /// The run-time constants of `k` (`Kernel::params`), loaded in the
    /// entry block into their variables from the array of `i64` behind the
    /// pointer after the arguments' in `args_ptr`.
    pub(super) fn load_run_time_constants(&mut self, k: &Kernel, args_ptr: Value) -> R<()> {
        if k.params.is_empty() {
            return Ok(());
        }
        let ptr = self.module.target_config().pointer_type();
        let flags = MemFlagsData::trusted().with_readonly();
        let at = (k.args.len() * ptr.bytes() as usize) as i32;
        let table = self.b.ins().load(ptr, flags, args_ptr, at);
        for (i, &(v, _)) in k.params.iter().enumerate() {
            let x = self.b.ins().load(types::I64, flags, table, (8 * i) as i32);
            *self
                .ivars
                .get_mut(v.0 as usize)
                .ok_or("a run-time constant out of range")? = Some(x);
        }
        Ok(())
    }

    /// The value of variable `v` in an affine form: a loop variable or
    /// run-time constant, or a run-time stride's product (the loop variable
    /// times the constant read at the call, a multiplication Cranelift
    /// hoists to the variable's loop).
    pub(super) fn term(&mut self, v: IVar) -> R<Value> {
        match self.strides.iter().find(|s| s.var == v).copied() {
            Some(s) => {
                let (index, stride) = (self.ivar(s.index)?, self.ivar(s.stride)?);
                Ok(self.b.ins().imul(index, stride))
            }
            None => self.ivar(v),
        }
    }

    /// The run-time constant holding the coefficient of loop variable
    /// `var` in `offset`, when that coefficient is read at run time
    /// (`Kernel::strides`).
    pub(super) fn run_time_stride(&self, offset: &Lin, var: IVar) -> Option<IVar> {
        offset.terms.iter().find_map(|&(v, _)| {
            let s = self.strides.iter().find(|s| s.var == v)?;
            (s.index == var).then_some(s.stride)
        })
    }

    /// Whether vector loop `l` runs at least `threshold` times
    /// (`super::trips`).
    pub(super) fn reach(&self, l: &Loop, threshold: u64) -> Reach {
        trips::reach(l, threshold, &|v| self.params.contains(&v))
    }

    /// The constant whose `f64` bits parameter `v` holds, rounded to the
    /// element type as a compiled-in constant is.
    pub(super) fn const_param(&mut self, v: IVar) -> R<Value> {
        let bits = self.ivar(v)?;
        let x = self.b.ins().bitcast(types::F64, MemFlagsData::new(), bits);
        Ok(match self.width {
            DType::F32 => self.b.ins().fdemote(types::F32, x),
            _ => x,
        })
    }
}
