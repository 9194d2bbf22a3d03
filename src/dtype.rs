//! Element types of tensors and kernels.
//!
//! Owns [`DType`] and [`Element`], the one trait of the Rust types behind
//! it, shared by every layer (the allocator's typed views, the backends,
//! storage, the tensor API); it must not know about any of them.

/// Element types of tensors. Kernels compute in `F32` and `F64`. The
/// half-precision types `BF16` and `F16` are stored in 16 bits and
/// computed in f32 ([`DType::compute`]): every op loads them widened
/// (exactly), computes in f32 and rounds its result to nearest even once.
/// The integer types hold index data (labels, token ids) and support
/// creation, conversion, comparison and indexing, not arithmetic kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
    /// bfloat16: f32's exponent range with 8 significant bits.
    BF16,
    /// IEEE binary16: 11 significant bits, largest finite 65504.
    F16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::BF16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// Whether this is a floating-point type (`F32`, `F64`, `BF16`,
    /// `F16`): values that are computed on and differentiated.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
    }

    /// Whether kernels compute in this type (`F32`, `F64`): the types of
    /// kernels, plans and optimizer states.
    pub const fn kernels_compute_in(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// Whether this is a half-precision type (`BF16`, `F16`).
    pub const fn is_half(self) -> bool {
        matches!(self, DType::BF16 | DType::F16)
    }

    /// The type kernels compute this type's values in: `F32` for the
    /// half-precision types, the type itself otherwise.
    ///
    /// ```
    /// use tenjin::DType;
    /// assert_eq!(DType::BF16.compute(), DType::F32);
    /// assert_eq!(DType::F64.compute(), DType::F64);
    /// ```
    pub const fn compute(self) -> DType {
        match self {
            DType::BF16 | DType::F16 => DType::F32,
            other => other,
        }
    }

    /// The name PyTorch and safetensors use (`"F32"`, `"I64"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F64 => "F64",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::BF16 => "BF16",
            DType::F16 => "F16",
        }
    }
}

/// The half-precision element types (the `half` crate's, as candle and
/// burn use them).
pub use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// The Rust types of tensor elements: `f32`, `f64`, `i32`, `i64`,
/// [`bf16`](crate::bf16) and [`f16`](crate::f16). Sealed: every bit
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
    /// Rounds toward zero, saturating (`as`; NaN gives 0).
    fn to_i64(self) -> i64;
    /// The nearest value (`as` conversion: one rounding to a float,
    /// wrapping to a narrower integer).
    fn from_i64(x: i64) -> Self;
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
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(x: i64) -> f32 {
        x as f32
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
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(x: i64) -> f64 {
        x as f64
    }
    fn add(self, other: f64) -> f64 {
        self + other
    }
}

/// Evaluates `$body` with `$T` the Rust type of `$dtype`'s elements: the
/// one dispatch from a run-time [`DType`] to code generic over
/// [`Element`], so a new element type is added here and nowhere else.
/// `$T` is a concrete type in `$body`, so its inherent methods win over
/// the trait's: write `<T as Element>::from_f64` (`half`'s own
/// `bf16::from_f64` rounds from f64 directly, not through f32 as
/// PyTorch and [`Element`] do).
macro_rules! with_element {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
        }
    };
}
pub(crate) use with_element;

/// `x` as a `D`, as Rust's `as` converts between the two types: floats to
/// integers round toward zero and saturate (NaN gives 0), integers to
/// floats round once, integers to narrower integers wrap.
pub(crate) fn cast<S: Element, D: Element>(x: S) -> D {
    if S::DTYPE.is_float() {
        D::from_f64(x.to_f64())
    } else {
        D::from_i64(x.to_i64())
    }
}

/// The half-precision element types, converted as PyTorch converts them:
/// to f32 exactly, and from anything through f32 (a double or an integer
/// is rounded to f32, then to nearest even), so a value converted here
/// equals PyTorch's bit for bit.
macro_rules! half_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            const ZERO: $t = <$t>::ZERO;
            const ONE: $t = <$t>::ONE;
            fn from_f64(x: f64) -> $t {
                <$t>::from_f32(x as f32)
            }
            fn to_f64(self) -> f64 {
                f64::from(self.to_f32())
            }
            fn to_i64(self) -> i64 {
                self.to_f32() as i64
            }
            fn from_i64(x: i64) -> $t {
                <$t>::from_f32(x as f32)
            }
            /// In f32, rounded once (as a kernel adds two half values).
            fn add(self, other: $t) -> $t {
                <$t>::from_f32(self.to_f32() + other.to_f32())
            }
        }
    };
}

half_element!(half::bf16, DType::BF16);
half_element!(half::f16, DType::F16);

/// The element types kernels compute in: `f32` and `f64` (sealed).
pub trait Float: Element {}
impl Float for f32 {}
impl Float for f64 {}

/// The error for a tensor whose type no kernel computes in reaching an
/// op that computes.
pub(crate) fn not_computable(op: &str, dtype: DType) -> crate::Error {
    let message = if dtype.is_half() {
        format!("{op} has no {dtype:?} form yet; convert with to_dtype(DType::F32)")
    } else {
        format!(
            "kernels compute in F32 or F64, not {dtype:?}: integer tensors hold indices (creation, conversion, comparison, indexing); convert with to_dtype"
        )
    };
    crate::Error::DType {
        op: op.to_string(),
        message,
    }
}

/// The integer element types with their conversions.
macro_rules! integer_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            const ZERO: $t = 0;
            const ONE: $t = 1;
            /// Rounds toward zero, saturating (Rust's `as`; NaN gives 0).
            fn from_f64(x: f64) -> $t {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(x: i64) -> $t {
                x as $t
            }
            fn add(self, other: $t) -> $t {
                self.wrapping_add(other)
            }
        }
    };
}

integer_element!(i32, DType::I32);
integer_element!(i64, DType::I64);
