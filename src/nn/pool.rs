//! Pooling layers over `[N, C, H, W]` inputs, as PyTorch's `nn.MaxPool2d`,
//! `nn.AvgPool2d` and `nn.AdaptiveAvgPool2d`: each one tensor op (an
//! index function with its derived gradient), no parameters, with
//! PyTorch's options (padding, dilation, `ceil_mode`,
//! `count_include_pad`).

use super::Module;
use crate::{Error, Pool2d, Tensor};

/// Maximum over `kernel_size` windows moved by `stride` (PyTorch's default
/// stride is the kernel size: [`MaxPool2d::new`]) over an input padded by
/// `padding` with −∞.
///
/// ```
/// use tenjin::nn::{MaxPool2d, Module};
/// use tenjin::Tensor;
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4])?;
/// let y = MaxPool2d::new([2, 2]).forward(&x)?;
/// assert_eq!(y.to_vec()?, vec![5., 7., 13., 15.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    pub kernel_size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Output sizes rounded up (see [`Pool2d::ceil_mode`]).
    pub ceil_mode: bool,
}

/// Mean over `kernel_size` windows moved by `stride`, over an input padded
/// by `padding` with zeros (counted in the mean, as PyTorch's default
/// `count_include_pad=True`).
///
/// ```
/// use tenjin::nn::{AvgPool2d, Module};
/// use tenjin::Tensor;
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4])?;
/// let y = AvgPool2d::new([2, 2]).forward(&x)?;
/// assert_eq!(y.to_vec()?, vec![2.5, 4.5, 10.5, 12.5]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    pub kernel_size: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    /// Output sizes rounded up (see [`Pool2d::ceil_mode`]).
    pub ceil_mode: bool,
    /// Padded positions count in a window's divisor (default `true`).
    pub count_include_pad: bool,
    /// A divisor for every window instead of its count (default `None`).
    pub divisor_override: Option<usize>,
}

impl MaxPool2d {
    /// Windows of `kernel_size`, stride = kernel size, no padding, no
    /// dilation, floor mode.
    pub fn new(kernel_size: [usize; 2]) -> MaxPool2d {
        MaxPool2d {
            kernel_size,
            stride: kernel_size,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }

    /// The pooled values and where each maximum is (PyTorch's
    /// `MaxPool2d(return_indices=True)`): see
    /// [`Tensor::max_pool2d_with_indices`].
    pub fn forward_with_indices(&self, x: &Tensor) -> Result<(Tensor, Tensor), Error> {
        x.max_pool2d_with_indices(&self.options())
    }

    fn options(&self) -> Pool2d {
        Pool2d {
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            ceil_mode: self.ceil_mode,
            ..Pool2d::new(self.kernel_size)
        }
    }
}

impl AvgPool2d {
    /// Windows of `kernel_size`, stride = kernel size, no padding, floor
    /// mode, padding counted.
    pub fn new(kernel_size: [usize; 2]) -> AvgPool2d {
        AvgPool2d {
            kernel_size,
            stride: kernel_size,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.max_pool2d_with(&self.options())
    }
}

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.avg_pool2d_with(&Pool2d {
            kernel_size: self.kernel_size,
            stride: self.stride,
            padding: self.padding,
            dilation: [1, 1],
            ceil_mode: self.ceil_mode,
            count_include_pad: self.count_include_pad,
            divisor_override: self.divisor_override,
        })
    }
}

/// The mean over PyTorch's adaptive windows, to an `output_size` grid
/// whatever the input's height and width.
///
/// ```
/// use tenjin::nn::{AdaptiveAvgPool2d, Module};
/// use tenjin::{DType, Tensor};
/// let y = AdaptiveAvgPool2d { output_size: [1, 1] }.forward(&Tensor::ones(&[2, 3, 5, 7], DType::F32)?)?;
/// assert_eq!(y.shape(), &[2, 3, 1, 1]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool2d {
    pub output_size: [usize; 2],
}

impl Module for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.adaptive_avg_pool2d(self.output_size)
    }
}
