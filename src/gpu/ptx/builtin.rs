//! The GPU backend's own kernels, for the buffer operations of the
//! `Backend` interface: filling a buffer with a value and adding one
//! buffer into another, over any element type.
//!
//! Owns [`Builtin`] and [`module`]: PTX written here once per element type
//! (not emitted from an index function: the element count and the value
//! are launch parameters, so one module serves every size), a grid-stride
//! loop like every emitted kernel. Must not decide when they run.

use super::Arch;
use crate::DType;

/// A buffer operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `out[i] = value` for `i < n`; parameters `(out, n, value bits)`.
    Fill,
    /// `dst[i] += src[i]` for `i < n`; parameters `(dst, src, n)`.
    AddAssign,
}

/// The register class, load/store type and add instruction of a dtype.
fn parts(dtype: DType) -> (&'static str, &'static str, &'static str, usize) {
    match dtype {
        DType::F32 => ("%f", "f32", "add.rn.f32", 4),
        DType::F64 => ("%fd", "f64", "add.rn.f64", 8),
        DType::I32 => ("%r", "s32", "add.s32", 4),
        DType::I64 => ("%rd", "s64", "add.s64", 8),
    }
}

/// The module of `builtin` on `dtype` elements for `arch`, entry
/// `super::ENTRY` (also written to `$TENJIN_PTX_DUMP`).
pub fn module(builtin: Builtin, dtype: DType, arch: Arch) -> String {
    let (class, ty, add, size) = parts(dtype);
    // The value registers: %v0..%v2 of the dtype's class.
    let decl = match class {
        "%f" => ".reg .f32 %v<3>;",
        "%fd" => ".reg .f64 %v<3>;",
        "%r" => ".reg .b32 %v<3>;",
        _ => ".reg .b64 %v<3>;",
    };
    let (params, setup, body) = match builtin {
        Builtin::Fill => (
            "\t.param .u64 out,\n\t.param .u64 n,\n\t.param .u64 value",
            format!(
                "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd1, [n];\n\tld.param.u64 %rd2, [value];\n{}",
                if size == 4 {
                    "\tcvt.u32.u64 %w0, %rd2;\n\tmov.b32 %v0, %w0;\n"
                } else {
                    "\tmov.b64 %v0, %rd2;\n"
                }
            ),
            format!("\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tst.global.{ty} [%rd7], %v0;\n"),
        ),
        Builtin::AddAssign => (
            "\t.param .u64 dst,\n\t.param .u64 src,\n\t.param .u64 n",
            "\tld.param.u64 %rd0, [dst];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n".to_string(),
            format!(
                "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {size}, %rd2;\n\tld.global.{ty} %v0, [%rd7];\n\tld.global.{ty} %v1, [%rd8];\n\t{add} %v2, %v0, %v1;\n\tst.global.{ty} [%rd7], %v2;\n"
            ),
        ),
    };
    let text = format!(
        ".version {}\n.target {}\n.address_size 64\n\n// {builtin:?} {dtype:?}\n.visible .entry {}(\n{params}\n)\n{{\n\t.reg .pred %p<1>;\n\t.reg .b32 %w<5>;\n\t.reg .b64 %rd<9>;\n\t{decl}\n{setup}\tmov.u32 %w1, %ctaid.x;\n\tmov.u32 %w2, %ntid.x;\n\tmov.u32 %w3, %tid.x;\n\tmov.u32 %w4, %nctaid.x;\n\tmul.wide.u32 %rd3, %w1, %w2;\n\tcvt.u64.u32 %rd4, %w3;\n\tadd.s64 %rd5, %rd3, %rd4;\n\tmul.wide.u32 %rd6, %w2, %w4;\nL1:\n\tsetp.ge.u64 %p0, %rd5, %rd1;\n\t@%p0 bra L2;\n{body}\tadd.s64 %rd5, %rd5, %rd6;\n\tbra.uni L1;\nL2:\n\tret;\n}}\n",
        arch.ptx_version(),
        arch.target(),
        super::ENTRY,
    );
    let tag = match builtin {
        Builtin::Fill => 0xF111_0000_0000_0000u64,
        Builtin::AddAssign => 0xADD0_0000_0000_0000u64,
    };
    super::super::dump::write(&super::super::dump::file_name(tag, dtype, arch), &text);
    text
}
