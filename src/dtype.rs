//! Element types of tensors and kernels.
//!
//! Owns [`DType`] and [`Element`], the one trait of the Rust types behind
//! it, shared by every layer (the allocator's typed views, the backends,
//! storage, the tensor API); it must not know about any of them.

/// Element types of compiled kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The Rust types of tensor elements: `f32` and `f64`. Sealed: every bit
/// pattern is a valid value and the alignment divides 64, so an allocator
/// block can be viewed as a slice of them.
pub trait Element: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// The dtype of this type.
    const DTYPE: DType;
    const ZERO: Self;
    const ONE: Self;
    /// The nearest value (`as` conversion).
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn add(self, other: Self) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn add(self, other: f32) -> f32 {
        self + other
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn add(self, other: f64) -> f64 {
        self + other
    }
}
