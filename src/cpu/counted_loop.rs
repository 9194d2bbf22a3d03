//! Counted loops in the code under construction: the one loop shape
//! every loop nest, reduction and vector strip of `super::codegen` and
//! `super::simd` is emitted as.
//!
//! Owns [`Emitter::counted_loop`] (a loop carrying values from iteration to
//! iteration, the loop variable bound while its body is emitted) and the
//! unrolling of short innermost loops of constant range. Must not decide
//! what a body computes.

use super::codegen::{args, Emitter, R};
use crate::kernel::{Loop, Stmt};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};

/// Innermost loops of constant range and fewer iterations than this are
/// unrolled (`Emitter::counted_loop`).
const UNROLL_TRIPS: i64 = 8;

/// The range of `l` when its code is unrolled: a short innermost loop of
/// constant range (a 3×3 window's taps), emitted as the same iterations in
/// the same order without a counter and a branch per term.
fn unrolled_range(l: &Loop) -> Option<(i64, i64)> {
    let innermost = !l
        .body
        .iter()
        .any(|s| matches!(s, Stmt::Reduce { .. } | Stmt::For(_)));
    l.constant_range()
        .filter(|&(first, last)| innermost && last - first < UNROLL_TRIPS)
}

impl Emitter<'_> {
    /// `for var in range(l)` with `l.var` bound to the counter while `body`
    /// emits an iteration (statements and the next carried values, of type
    /// `ty`, from the current ones); returns the carried values at the exit.
    pub(super) fn counted_loop(
        &mut self,
        l: &Loop,
        init: &[Value],
        ty: types::Type,
        mut body: impl FnMut(&mut Self, Value, Value, &[Value]) -> R<Vec<Value>>,
    ) -> R<Vec<Value>> {
        let slot = l.var.0 as usize;
        if slot >= self.ivars.len() {
            return Err(format!("loop variable {} out of range", l.var));
        }
        if let Some((first, last)) = unrolled_range(l) {
            let lo = self.b.ins().iconst(types::I64, first);
            let mut carried = init.to_vec();
            for kv in first..=last {
                let k = self.b.ins().iconst(types::I64, kv);
                let saved = self.ivars[slot].replace(k);
                carried = body(self, k, lo, &carried)?;
                self.ivars[slot] = saved;
            }
            return Ok(carried);
        }
        let (lo, hi) = self.range(l)?;
        let block = self.b.create_block();
        let exit = self.b.create_block();
        let k = self.b.append_block_param(block, types::I64);
        let carried: Vec<Value> = init
            .iter()
            .map(|_| self.b.append_block_param(block, ty))
            .collect();
        let results: Vec<Value> = init
            .iter()
            .map(|_| self.b.append_block_param(exit, ty))
            .collect();
        let enter = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, lo, hi);
        let mut first = vec![lo];
        first.extend_from_slice(init);
        self.b
            .ins()
            .brif(enter, block, &args(&first), exit, &args(init));
        self.b.switch_to_block(block);
        let saved = self.ivars[slot].replace(k);
        let next = body(self, k, lo, &carried)?;
        self.ivars[slot] = saved;
        let k1 = self.b.ins().iadd_imm_s(k, 1);
        let again = self.b.ins().icmp(IntCC::SignedLessThanOrEqual, k1, hi);
        let mut back = vec![k1];
        back.extend_from_slice(&next);
        self.b
            .ins()
            .brif(again, block, &args(&back), exit, &args(&next));
        self.b.switch_to_block(exit);
        Ok(results)
    }
}
