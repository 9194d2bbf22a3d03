//! Products: `matmul` (vectors, matrices, batches with broadcasting) and
//! `linear` (`x·wᵀ + b`, one function so its GEMM carries the bias).
//!
//! Contractions are recognised by the JIT and run as GEMM; their
//! derivatives are contractions too, derived, not written.

use super::apply;
use super::elementwise::broadcast_shapes;
use super::formula::{access, define, indices, sum_to};
use crate::tensor::Tensor;
use crate::Error;

fn contraction_error(op: &str, a: &[usize], b: &[usize], da: usize, db: usize) -> Error {
    Error::shape(
        op,
        format!(
            "lhs {a:?} and rhs {b:?}: dimension {da} of lhs ({}) must equal dimension {db} of rhs ({})",
            a[da], b[db]
        ),
    )
}

impl Tensor {
    /// The matrix product, NumPy-style: vector·vector, matrix·vector,
    /// vector·matrix, matrix·matrix, and batches (leading dimensions
    /// broadcast).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let a = Tensor::from_vec(vec![1., 2., 3., 4., 5., 6.], &[2, 3])?;
    /// let b = Tensor::from_vec(vec![1., 0., 0., 1., 1., 1.], &[3, 2])?;
    /// assert_eq!(a.matmul(&b)?.to_vec()?, vec![4., 5., 10., 11.]);
    /// let e = a.matmul(&a).unwrap_err().to_string();
    /// assert_eq!(e, "matmul: lhs [2, 3] and rhs [2, 3]: dimension 1 of lhs (3) must equal dimension 0 of rhs (2)");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor, Error> {
        let (a, b) = (self.shape(), other.shape());
        if a.is_empty() || b.is_empty() {
            return Err(Error::shape(
                "matmul",
                format!(
                    "lhs {a:?} and rhs {b:?}: matmul needs at least one dimension on each side"
                ),
            ));
        }
        // Vectors become matrices and the added dimension is dropped after.
        let lhs = if a.len() == 1 {
            self.unsqueeze(0)?
        } else {
            self.clone()
        };
        let rhs = if b.len() == 1 {
            other.unsqueeze(1)?
        } else {
            other.clone()
        };
        let (la, lb) = (lhs.shape().to_vec(), rhs.shape().to_vec());
        let (ka, kb) = (la.len() - 1, lb.len() - 2);
        if la[ka] != lb[kb] {
            return Err(contraction_error(
                "matmul",
                a,
                b,
                a.len() - 1,
                b.len().saturating_sub(2),
            ));
        }
        let batch = broadcast_shapes("matmul", &la[..la.len() - 2], &lb[..lb.len() - 2])?;
        let (m, k, n) = (la[ka - 1], la[ka], lb[kb + 1]);
        let full = |s: &[usize]| [&batch[..], s].concat();
        let lhs = lhs.broadcast_to(&full(&[m, k]))?;
        let rhs = rhs.broadcast_to(&full(&[k, n]))?;
        // f[b…; i; j] = Σ_k a[b…; i; k] · b[b…; k; j]
        let bx = indices("b", batch.len());
        let with = |p: &str, q: &str| [&bx[..], &[p.to_string(), q.to_string()]].concat();
        let product = format!(
            "{} * {}",
            access("a", &with("i", "k")),
            access("b", &with("k", "j"))
        );
        let src = define("f", &with("i", "j"), sum_to("k", k, product));
        let sizes = [("i", m), ("j", n)];
        let out = apply("matmul", &src, &[("a", &lhs), ("b", &rhs)], &sizes)?;
        match (a.len(), b.len()) {
            (1, 1) => out.reshape(&[]),
            (1, _) => out.squeeze(out.rank() - 2)?.contiguous(),
            (_, 1) => out.squeeze(out.rank() - 1)?.contiguous(),
            _ => Ok(out),
        }
    }

    /// `x · wᵀ + b` for `x` of shape `[.., in]`, `w` of `[out, in]`, `b` of
    /// `[out]` (as `torch.nn.functional.linear`), one GEMM with the bias
    /// added in its epilogue.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec(vec![1., 2.], &[1, 2])?;
    /// let w = Tensor::from_vec(vec![1., 1., 0., 1.], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![0.5, -0.5], &[2])?;
    /// assert_eq!(x.linear(&w, Some(&b))?.to_vec()?, vec![3.5, 1.5]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn linear(&self, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor, Error> {
        let (xs, ws) = (self.shape(), w.shape());
        if xs.is_empty() || ws.len() != 2 {
            return Err(Error::shape("linear", format!("input {xs:?} and weight {ws:?}: the weight must be [out, in] and the input [.., in]")));
        }
        let inner = xs[xs.len() - 1];
        if inner != ws[1] {
            return Err(Error::shape(
                "linear",
                format!(
                    "input {xs:?} and weight {ws:?}: dimension {} of input ({inner}) must equal dimension 1 of weight ({})",
                    xs.len() - 1,
                    ws[1]
                ),
            ));
        }
        if let Some(b) = b {
            if b.shape() != [ws[0]] {
                return Err(Error::shape(
                    "linear",
                    format!(
                        "weight {ws:?} and bias {:?}: the bias must have shape [{}]",
                        b.shape(),
                        ws[0]
                    ),
                ));
            }
        }
        let rows: usize = xs[..xs.len() - 1].iter().product();
        let x2 = if xs.len() == 2 {
            self.clone()
        } else {
            self.reshape(&[rows, inner])?
        };
        let xw = sum_to("k", inner, "x[i; k] * w[j; k]");
        let y = match b {
            Some(b) => apply(
                "linear",
                &define("y", &["i", "j"], format!("{xw} + b[j]")),
                &[("x", &x2), ("w", w), ("b", b)],
                &[("i", rows)],
            )?,
            None => apply(
                "linear",
                &define("y", &["i", "j"], xw),
                &[("x", &x2), ("w", w)],
                &[("i", rows)],
            )?,
        };
        if xs.len() == 2 {
            Ok(y)
        } else {
            y.reshape(&[&xs[..xs.len() - 1], &[ws[0]][..]].concat())
        }
    }
}
