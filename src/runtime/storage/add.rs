//! Gradient accumulation into a [`Storage`]: the whole (`add_assign`), a
//! range (`add_at`: a window's gradient into its base's) or a strided
//! placement's positions (`add_strided`: a strided window's), each through
//! the device's backend. Must not know where the positions come from (the trace's
//! placements compute them).

use super::Storage;
use crate::kernel::strided::Strided;
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

    /// `self[place(v)] += other[v]` for every element `v` of `place`
    /// (same dtype and device; the positions apart, element 0 at `start`):
    /// a strided window's gradient into its base's, in one backend call.
    pub(crate) fn add_strided(
        &self,
        start: usize,
        place: &Strided,
        other: &Storage,
    ) -> Result<(), Error> {
        let op = "add_strided";
        if std::ptr::eq(self, other) || place.len() != other.len {
            return Err(Error::Invalid {
                function: op.into(),
                message: format!(
                    "internal: {:?} placed from {} elements",
                    place.shape, other.len
                ),
            });
        }
        let backend = self.backend_with(op, other)?;
        let b = other.read()?;
        let mut a = self.write()?;
        let src = other.operand(&b, other.len)?;
        backend.add_strided(self.operand_mut(&mut a)?, src, start, place)
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
