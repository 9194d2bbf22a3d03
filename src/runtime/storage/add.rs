//! Gradient accumulation into a [`Storage`]: the whole (`add_assign`), a
//! range (`add_at`: a window's gradient into its base's) or runs at given
//! positions (`add_runs`: a strided window's), each through the device's
//! backend. Must not know where the positions come from (the trace's
//! placements compute them).

use super::Storage;
use crate::Error;

impl Storage {
    /// `self += other`, element-wise (gradient accumulation; same dtype,
    /// length and device).
    pub(crate) fn add_assign(&self, other: &Storage) -> Result<(), Error> {
        if other.len != self.len {
            return Err(Error::Shape {
                op: "add_assign".into(),
                message: format!("{} elements added to {}", other.len, self.len),
            });
        }
        self.add_over("add_assign", 0, other)
    }

    /// `self[start..] += other`, element-wise over `other`'s elements (a
    /// window's gradient into its base's; same dtype and device).
    pub(crate) fn add_at(&self, start: usize, other: &Storage) -> Result<(), Error> {
        self.add_over("add_at", start, other)
    }

    /// `self[at[r]..at[r] + run] += other[r·run..(r + 1)·run]` for every
    /// run `r` (same dtype and device; the runs do not overlap): a strided
    /// window's gradient into its base's, in one backend call.
    pub(crate) fn add_runs(&self, at: &[usize], run: usize, other: &Storage) -> Result<(), Error> {
        let op = "add_runs";
        if std::ptr::eq(self, other) || at.len().checked_mul(run) != Some(other.len) {
            return Err(Error::Invalid {
                function: op.into(),
                message: format!(
                    "internal: {} runs of {run} from {} elements",
                    at.len(),
                    other.len
                ),
            });
        }
        let backend = self.backend_with(op, other)?;
        let b = other.read()?;
        let mut a = self.write()?;
        let src = other.operand(&b, other.len)?;
        backend.add_runs(self.operand_mut(&mut a)?, src, at, run)
    }

    fn add_over(&self, op: &str, start: usize, other: &Storage) -> Result<(), Error> {
        if std::ptr::eq(self, other) {
            return Err(Error::Invalid {
                function: op.into(),
                message: "internal: a storage added to itself".into(),
            });
        }
        let backend = self.backend_with(op, other)?;
        let b = other.read()?;
        let mut a = self.write()?;
        let src = other.operand(&b, other.len)?;
        backend.add_assign(self.operand_mut(&mut a)?.range(start, other.len)?, src)
    }
}
