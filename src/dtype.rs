//! Element types of tensors and kernels.
//!
//! Owns [`DType`], shared by every layer (the planner, the backends, the
//! tensor API); it must not know about any of them.

/// Element types of compiled kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
}
