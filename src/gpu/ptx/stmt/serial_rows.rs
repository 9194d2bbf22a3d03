//! A short leading output dimension run in turn by each thread: an
//! output `[3, N]` (AdamW's parameter, first and second moments, stacked)
//! is launched over its `N` columns, and each thread computes the
//! column's three elements one after the other.
//!
//! Launched over all `3N` elements, a thread per element, the three rows
//! are computed by different warps, and every input a row reads is read
//! from memory again by the others: AdamW's gradient three times, its
//! moments twice (44 bytes per parameter where 28 are needed). Run in
//! turn by one thread, the later rows find those lines in the cache. Each
//! element is computed by the same statements as before, so the results
//! are the same bits. Owns [`Emitter::serial_leading`] (which kernels)
//! and the unrolled loop over the leading dimension; must not change
//! what a statement computes.

use super::{Emitter, Res};
use crate::kernel::{Kernel, Loop, Stmt};

/// The longest leading dimension run in turn.
const MOST: usize = 4;

/// The fewest elements behind the leading dimension: fewer leave the GPU
/// idle with a thread per column.
const LEAST_COLUMNS: usize = 1 << 16;

/// The extent of the leading output dimension each thread of `k` runs in
/// turn, when `k` is such a kernel: a thread per output element (no team;
/// the emitter also requires no vector group), one leading output loop of
/// 2 to [`MOST`] rows of at least [`LEAST_COLUMNS`] elements each. The
/// launch then needs a thread per column (`crate::gpu::ptx::elements_per_thread`).
pub(crate) fn leading_rows(k: &Kernel) -> Option<usize> {
    let shape = &k.out_shape;
    let rows = *shape.first()?;
    let columns: usize = shape[1..].iter().product();
    let one_loop = k.body.iter().filter(|s| matches!(s, Stmt::For(_))).count() == 1;
    (k.threads_per_output <= 1
        && one_loop
        && shape.len() >= 2
        && (2..=MOST).contains(&rows)
        && columns >= LEAST_COLUMNS)
        .then_some(rows)
}

impl Emitter<'_> {
    /// The leading output loop `l` run in turn (`Emitter::serial` rows):
    /// its body once per row, the loop's variable set to the row (the
    /// columns' coordinates are the thread's).
    pub(super) fn serial_rows(&mut self, l: &Loop) -> Res<()> {
        self.check_output_loop(l, 0)?;
        let v = self.ivar(l.var);
        let bits = self.int_bits();
        for row in 0..self.serial.unwrap_or(1) {
            self.a.op(format!("mov.{bits} {v}, {row}"));
            self.output_level(&l.body, 1, None)?;
        }
        Ok(())
    }

    /// The product of `dims` (the columns' count).
    pub(super) fn product(&mut self, dims: &[super::Size]) -> super::Size {
        use super::Size;
        let mut total = Size::Known(1);
        for &d in dims {
            // (A register first: PTX takes a literal as the second operand.)
            total = match (total, d) {
                (Size::Known(a), Size::Known(b)) => Size::Known(a * b),
                (Size::Known(1), read) => read,
                (Size::Known(a), Size::Read(r)) | (Size::Read(r), Size::Known(a)) => {
                    Size::Read(self.a.bin("mul.lo.u64", super::Ty::B64, r, a))
                }
                (Size::Read(a), Size::Read(b)) => {
                    Size::Read(self.a.bin("mul.lo.u64", super::Ty::B64, a, b))
                }
            };
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::{emit_with, Access, Arch, IndexBits};
    use super::super::team::IN_FLIGHT;
    use crate::kernel::lower;
    use crate::symbolic::IndexFn;
    use crate::DType;

    /// The PTX of `f[r; i] = x[r; i] * y[i]` over `rows` rows of
    /// `columns`, in scalar accesses (a kernel of vector accesses keeps
    /// its thread per group of elements).
    fn ptx(rows: usize, columns: usize) -> String {
        let f = IndexFn::parse(
            "f[r; i] = x[r; i] * y[i]",
            &[("x", &[rows, columns][..]), ("y", &[columns][..])],
        )
        .unwrap();
        let k = lower(&f).unwrap();
        let arch = Arch::for_capability(9, 0).unwrap();
        emit_with(
            &k,
            DType::F32,
            arch,
            "k",
            IndexBits::Fitting,
            Access::Scalar,
        )
        .unwrap()
    }

    #[test]
    fn a_short_leading_dimension_is_run_in_turn_by_each_thread() {
        // Three rows: each thread stores its column's three elements, and
        // its coordinates need no division by the columns' count.
        let text = ptx(3, 1 << 16);
        assert_eq!(text.matches("st.global").count(), 3, "{text}");
        assert!(!text.contains("div.") && !text.contains("rem."), "{text}");
        // The launch needs a thread per column: AdamW's update branches
        // on the row (no vector group), so its threads run its rows.
        let adam_like = IndexFn::parse(
            "f[r; i] = (if {r >= 1} then (y[i]) else (x[r; i] * y[i]))",
            &[("x", &[3, 1 << 16][..]), ("y", &[1 << 16][..])],
        )
        .unwrap();
        let k = lower(&adam_like).unwrap();
        assert_eq!(super::super::super::elements_per_thread(&k, DType::F32), 3);
        // More rows, or short ones: a thread per element (four elements
        // of the grid at a time, then one: `in_flight`), its index
        // divided into coordinates.
        for (rows, columns) in [(5, 1 << 16), (3, 1 << 10)] {
            let text = ptx(rows, columns);
            let stores = text.matches("st.global").count();
            assert_eq!(stores, IN_FLIGHT as usize + 1, "{rows}×{columns}: {text}");
            assert!(text.contains("div."), "{rows}×{columns}: {text}");
        }
    }
}
