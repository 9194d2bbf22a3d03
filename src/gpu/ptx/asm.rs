//! [`Asm`]: PTX text under construction — numbered virtual registers of
//! each type, labels and instruction lines.
//!
//! Owns the register naming (`%p` predicates, `%h` 16-bit values, `%r`
//! 32-bit integers, `%rd` 64-bit integers, `%f` f32, `%fd` f64) and the declarations, written once
//! the body is known. Knows nothing about kernels or math.

use std::fmt::Write;

/// A register type of the emitted code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Pred,
    B16,
    B32,
    B64,
    F32,
    F64,
}

impl Ty {
    fn prefix(self) -> &'static str {
        match self {
            Ty::Pred => "%p",
            Ty::B16 => "%h",
            Ty::B32 => "%r",
            Ty::B64 => "%rd",
            Ty::F32 => "%f",
            Ty::F64 => "%fd",
        }
    }

    fn decl(self) -> &'static str {
        match self {
            Ty::Pred => ".pred",
            Ty::B16 => ".b16",
            Ty::B32 => ".b32",
            Ty::B64 => ".b64",
            Ty::F32 => ".f32",
            Ty::F64 => ".f64",
        }
    }

    const ALL: [Ty; 6] = [Ty::Pred, Ty::B16, Ty::B32, Ty::B64, Ty::F32, Ty::F64];

    fn index(self) -> usize {
        self as usize
    }
}

/// A virtual register (its name is `prefix` + number).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct R {
    pub(crate) ty: Ty,
    pub(crate) n: u32,
}

impl std::fmt::Display for R {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.ty.prefix(), self.n)
    }
}

/// The body of one `.entry` function being written.
pub(crate) struct Asm {
    next: [u32; 6],
    labels: u32,
    pub(crate) body: String,
}

impl Asm {
    /// Register numbers below `reserved[ty]` are named by the caller (the
    /// kernel's own integer values and scalar registers).
    pub(crate) fn new(reserved_int: (Ty, u32), reserved_float: (Ty, u32)) -> Asm {
        let mut next = [0; 6];
        next[reserved_int.0.index()] = reserved_int.1;
        next[reserved_float.0.index()] = reserved_float.1;
        Asm {
            next,
            labels: 0,
            body: String::new(),
        }
    }

    /// A fresh register of type `ty`.
    pub(crate) fn reg(&mut self, ty: Ty) -> R {
        let n = self.next[ty.index()];
        self.next[ty.index()] += 1;
        R { ty, n }
    }

    /// A fresh label name.
    pub(crate) fn label(&mut self) -> String {
        self.labels += 1;
        format!("L{}", self.labels)
    }

    /// One instruction (without the trailing `;`).
    pub(crate) fn op(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.body, "\t{};", text.as_ref());
    }

    pub(crate) fn place(&mut self, label: &str) {
        let _ = writeln!(self.body, "{label}:");
    }

    /// The register declarations of everything used so far.
    pub(crate) fn declarations(&self) -> String {
        let mut s = String::new();
        for ty in Ty::ALL {
            let n = self.next[ty.index()];
            if n > 0 {
                let _ = writeln!(s, "\t.reg {} {}<{}>;", ty.decl(), ty.prefix(), n);
            }
        }
        s
    }

    /// `d = value` as an f64 constant.
    pub(crate) fn f64_const(&mut self, value: f64) -> R {
        let d = self.reg(Ty::F64);
        self.op(format!("mov.f64 {d}, {}", f64_lit(value)));
        d
    }

    /// `d = value` as an s64 constant.
    pub(crate) fn i64_const(&mut self, value: i64) -> R {
        let d = self.reg(Ty::B64);
        self.op(format!("mov.b64 {d}, {value}"));
        d
    }

    /// `d = op a, b` for a fresh `d` of `ty`.
    pub(crate) fn bin(
        &mut self,
        op: &str,
        ty: Ty,
        a: impl std::fmt::Display,
        b: impl std::fmt::Display,
    ) -> R {
        let d = self.reg(ty);
        self.op(format!("{op} {d}, {a}, {b}"));
        d
    }

    /// `d = op a` for a fresh `d` of `ty`.
    pub(crate) fn un(&mut self, op: &str, ty: Ty, a: impl std::fmt::Display) -> R {
        let d = self.reg(ty);
        self.op(format!("{op} {d}, {a}"));
        d
    }

    /// `d = fma(a, b, c)` in f64, rounded once.
    pub(crate) fn fma(&mut self, a: R, b: impl std::fmt::Display, c: impl std::fmt::Display) -> R {
        let d = self.reg(Ty::F64);
        self.op(format!("fma.rn.f64 {d}, {a}, {b}, {c}"));
        d
    }

    /// `d = p ? a : b` for a fresh `d` of `ty`.
    pub(crate) fn select(
        &mut self,
        ty: Ty,
        a: impl std::fmt::Display,
        b: impl std::fmt::Display,
        p: R,
    ) -> R {
        let d = self.reg(ty);
        let suffix = match ty {
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::B32 => "b32",
            _ => "b64",
        };
        self.op(format!("selp.{suffix} {d}, {a}, {b}, {p}"));
        d
    }

    /// A predicate `a cmp b` with the type suffix `ty` (`f64`, `s64`, ...).
    pub(crate) fn setp(
        &mut self,
        cmp: &str,
        ty: &str,
        a: impl std::fmt::Display,
        b: impl std::fmt::Display,
    ) -> R {
        let p = self.reg(Ty::Pred);
        self.op(format!("setp.{cmp}.{ty} {p}, {a}, {b}"));
        p
    }
}

/// An f64 literal as PTX writes it exactly: `0d` and the 16 hex digits.
pub(crate) fn f64_lit(x: f64) -> String {
    format!("0d{:016X}", x.to_bits())
}

/// An f32 literal: `0f` and the 8 hex digits.
pub(crate) fn f32_lit(x: f32) -> String {
    format!("0f{:08X}", x.to_bits())
}
