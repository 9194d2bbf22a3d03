//! The user's own operation: any index function in the notation of the
//! symbolic core, applied to tensors, with a derived gradient.

use super::apply;
use crate::tensor::Tensor;
use crate::Error;

/// Applies the index function `src` to tensors named as its arguments; the
/// output shape is inferred from them. Its derivative is derived (no
/// backward to write); views among the arguments are read in place.
///
/// ```
/// use tenjin::Tensor;
/// let x = Tensor::from_vec_f64(vec![1., 2., 3., 4., 5., 6., 7.], &[7])?.requires_grad();
/// let w = Tensor::from_vec_f64(vec![1., -1.], &[2])?.requires_grad();
/// // A dilated (2), strided (2) 1-D convolution in one line.
/// let y = tenjin::index_fn_with_sizes(
///     "y[t] = sum{k}_0^1 (x[2*t + 2*k] * w[k])", &[("x", &x), ("w", &w)], &[("t", 2)])?;
/// assert_eq!(y.to_vec_f64()?, vec![-2., -2.]);
/// y.sum()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec_f64()?, vec![4., 8.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn index_fn(src: &str, args: &[(&str, &Tensor)]) -> Result<Tensor, Error> {
    apply("index_fn", src, args, &[])
}

/// As [`index_fn`], with sizes for output indices that cannot be inferred
/// from the arguments (`f[i] = x[i + 2]`).
pub fn index_fn_with_sizes(
    src: &str,
    args: &[(&str, &Tensor)],
    sizes: &[(&str, usize)],
) -> Result<Tensor, Error> {
    apply("index_fn", src, args, sizes)
}
