//! `tril` and `triu`: the lower or upper triangle of the last two
//! dimensions, the rest zero. One guard on the two indices; the gradient
//! is the same mask, derived.

use super::apply;
use super::formula::{access, cmp, define, guard, indices, size_refs, sizes};
use crate::tensor::Tensor;
use crate::Error;

impl Tensor {
    /// Elements on and below the `k`-th diagonal of the last two
    /// dimensions (`j − i ≤ k`), zeros elsewhere (PyTorch's `tril`).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
    /// assert_eq!(x.tril(0)?.to_vec()?, vec![1., 0., 3., 4.]);
    /// assert_eq!(x.triu(1)?.to_vec()?, vec![0., 2., 0., 0.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn tril(&self, k: i64) -> Result<Tensor, Error> {
        self.triangle("tril", "<=", k)
    }

    /// Elements on and above the `k`-th diagonal (`j − i ≥ k`), zeros
    /// elsewhere (PyTorch's `triu`).
    pub fn triu(&self, k: i64) -> Result<Tensor, Error> {
        self.triangle("triu", ">=", k)
    }

    fn triangle(&self, op: &str, keep: &str, k: i64) -> Result<Tensor, Error> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::shape(
                op,
                format!("input of shape {:?}: {op} needs rank ≥ 2", self.shape()),
            ));
        }
        let ix = indices("i", r);
        let cond = cmp(format!("{} - {}", ix[r - 1], ix[r - 2]), keep, k);
        let body = guard(cond, access("x", &ix), 0);
        let sizes = sizes("i", self.shape());
        apply(
            op,
            &define("f", &ix, body),
            &[("x", self)],
            &size_refs(&sizes),
        )
    }
}
