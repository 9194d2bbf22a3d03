//! Several elements in flight per thread: a kernel of a thread per
//! output element strides over the elements in steps of the grid (a
//! launch holds at most 32 blocks per multiprocessor), so a thread runs
//! many. Its elements go in groups of four (`team::IN_FLIGHT`) while a
//! whole group is left: each element's statements in turn, the group's
//! stores held back until after its last element (`Emitter::deferred`),
//! then the next group. A store in between would keep the next element's
//! loads behind it (`ptxas` cannot know they read other memory): one
//! load in flight per thread, which bounds a kernel of scalar accesses (a
//! cross-entropy's gradient over rows of 50,257, which no vector access
//! aligns) far below the memory's bandwidth. The elements of a thread are
//! independent (other threads compute the grid's other elements at the
//! same time), so no element reads what a held-back store writes: the
//! same bits.
//!
//! A kernel of vector groups (`vector`) runs its groups the same way, two
//! at a time.
//!
//! Owns [`Emitter::element_groups`] and the held-back stores
//! ([`Emitter::store_operand`], [`Emitter::put_store`]: `team`'s dealt
//! rows hold theirs back the same way). Must not decide the grid (the
//! backend does) nor how many elements go together (its callers do).

use super::super::asm::{Ty, R};
use super::{Emitter, Res, Size};

impl Emitter<'_> {
    /// Groups of `count` elements (or vector groups of elements) from
    /// `idx` in steps of `stride` while the group's last is before
    /// `total`, `element` emitting one's statements from its index,
    /// leaving `idx` at the first element no whole group holds: the
    /// single loop after it takes the rest.
    pub(super) fn element_groups(
        &mut self,
        count: u32,
        (idx, stride): (R, R),
        total: Size,
        mut element: impl FnMut(&mut Self, R) -> Res<()>,
    ) -> Res<()> {
        let span = self.a.bin("mul.lo.s64", Ty::B64, stride, count as u64 - 1);
        let (head, rest) = (self.a.label(), self.a.label());
        self.a.place(&head);
        let last = self.a.bin("add.s64", Ty::B64, idx, span);
        let p = self.a.setp("ge", "u64", last, total);
        self.a.op(format!("@{p} bra {rest}"));
        self.deferred = Some(Vec::new());
        for u in 0..count {
            if u > 0 {
                self.a.op(format!("add.s64 {idx}, {idx}, {stride}"));
            }
            element(self, idx)?;
        }
        for store in self.deferred.take().unwrap_or_default() {
            self.a.op(store);
        }
        self.a.op(format!("add.s64 {idx}, {idx}, {stride}"));
        self.a.op(format!("bra.uni {head}"));
        self.a.place(&rest);
        Ok(())
    }

    /// `v` as a store reads it: a copy while stores are held back (the
    /// group's next element writes `v`'s register again).
    pub(super) fn store_operand(&mut self, v: R) -> R {
        match self.deferred {
            Some(_) => self.a.un(&format!("mov.{}", self.sfx), v.ty, v),
            None => v,
        }
    }

    /// `store` emitted, or held back until the group's end.
    pub(super) fn put_store(&mut self, store: String) {
        match &mut self.deferred {
            Some(held) => held.push(store),
            None => self.a.op(store),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::super::{emit, Arch};
    use crate::kernel::lower;
    use crate::symbolic::IndexFn;
    use crate::DType;

    /// The order of `text`'s global loads and stores: `L`, `S` one
    /// element, `V`, `W` a vector of them.
    pub(in crate::gpu::ptx::stmt) fn memory_order(text: &str) -> String {
        text.lines()
            .filter_map(|l| match l.trim_start() {
                l if l.starts_with("ld.global.v") => Some('V'),
                l if l.starts_with("st.global.v") => Some('W'),
                l if l.starts_with("ld.global") => Some('L'),
                l if l.starts_with("st.global") => Some('S'),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn vector_groups_go_two_at_a_time() {
        // Two groups' vector loads, then their stores; the rest a group
        // at a time; then the scalar loop of misaligned buffers.
        let f = IndexFn::parse("f[i] = exp (x[i])", &[("x", &[4096][..])]).unwrap();
        let k = lower(&f).unwrap();
        let text = emit(&k, DType::F32, Arch::for_capability(9, 0).unwrap(), "k").unwrap();
        assert_eq!(memory_order(&text), "VVWWVWLS", "{text}");
    }

    #[test]
    fn a_threads_elements_load_in_groups_then_store() {
        // Rows of an odd length (no vector access aligns): three loads an
        // element (the element, its row's two statistics). A group's four
        // elements load twelve values, then store four; the rest, one
        // element at a time, loads three and stores one.
        let f = IndexFn::parse(
            "f[i; j] = exp (x[i; j] - m[i]) / s[i]",
            &[("x", &[64, 1001][..]), ("m", &[64][..]), ("s", &[64][..])],
        )
        .unwrap();
        let k = lower(&f).unwrap();
        let text = emit(&k, DType::F32, Arch::for_capability(9, 0).unwrap(), "k").unwrap();
        let order = memory_order(&text);
        assert_eq!(order, format!("{}SSSSLLLS", "L".repeat(12)), "{text}");
    }
}
