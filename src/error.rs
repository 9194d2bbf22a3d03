//! Errors as data: every fallible public function of tenjin returns
//! [`Error`]. Variants name the operation, the shapes and the offending
//! dimension or index, so a user can act on them without reading our code.

use std::fmt;

/// Everything that can go wrong in tenjin.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The text of an index function does not parse.
    Syntax {
        line: usize,
        column: usize,
        expected: String,
        found: String,
    },
    /// The function is well-formed text but not a valid index function:
    /// unknown argument, rank mismatch, non-affine index, unsizable index, ...
    Invalid { function: String, message: String },
    /// An argument access can leave its argument's shape for some point of
    /// the domain.
    OutOfBounds {
        function: String,
        access: String,
        dimension: usize,
        size: usize,
        message: String,
    },
    /// A value supplied at evaluation time does not match the declaration.
    Shape { op: String, message: String },
    /// Exact integer arithmetic overflowed i64.
    Overflow { op: String },
    /// Tensors of different element types met in one operation.
    DType { op: String, message: String },
    /// Differentiation was asked for something it cannot do: `backward` on
    /// a non-scalar without a gradient, the gradient of a tensor that does
    /// not require one, a graph already released by an earlier `backward`.
    Autograd { op: String, message: String },
    /// An allocation was refused, by the configured memory limit or by the
    /// system, even after the allocator emptied its cache and retried.
    /// Byte counts are the allocator's at the moment of refusal.
    OutOfMemory {
        requested: usize,
        in_use: usize,
        reserved: usize,
        limit: Option<usize>,
    },
    /// A device could not be used: no driver, no such GPU, a failed launch
    /// or copy, or tensors on different devices meeting in one operation.
    Device { device: String, message: String },
}

impl Error {
    /// An [`Error::Shape`] of `op`.
    pub(crate) fn shape(op: &str, message: String) -> Error {
        Error::Shape {
            op: op.to_string(),
            message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Syntax {
                line,
                column,
                expected,
                found,
            } => write!(
                f,
                "syntax error at line {line}, column {column}: expected {expected}, found {found}"
            ),
            Error::Invalid { function, message } => write!(f, "{function}: {message}"),
            Error::OutOfBounds {
                function,
                access,
                dimension,
                size,
                message,
            } => write!(
                f,
                "{function}: access {access} leaves dimension {dimension} (size {size}): {message}"
            ),
            Error::Shape { op, message } => write!(f, "{op}: {message}"),
            Error::DType { op, message } | Error::Autograd { op, message } => {
                write!(f, "{op}: {message}")
            }
            Error::Overflow { op } => write!(f, "{op}: integer overflow in exact index arithmetic"),
            Error::OutOfMemory {
                requested,
                in_use,
                reserved,
                limit,
            } => {
                write!(f, "out of memory: requested {requested} bytes with {in_use} in use and {reserved} reserved")?;
                match limit {
                    Some(l) => write!(f, " (limit {l})"),
                    None => write!(f, " (no limit; the system refused)"),
                }
            }
            Error::Device { device, message } => write!(f, "{device}: {message}"),
        }
    }
}

impl std::error::Error for Error {}
