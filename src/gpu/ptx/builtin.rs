//! The GPU backend's own kernels, for the buffer operations of the
//! `Backend` interface: filling a buffer with a value, adding one buffer
//! into another, and converting between element types.
//!
//! Owns [`Builtin`] and [`module`]: PTX written here once per element type
//! (not emitted from an index function: the element count and the value
//! are launch parameters, so one module serves every size), a grid-stride
//! loop like every emitted kernel. Must not decide when they run.

use super::Arch;
use crate::DType;

/// A buffer operation; the module's dtype is its output's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `out[i] = value` for `i < n`; parameters `(out, n, value bits)`.
    Fill,
    /// `dst[i] += src[i]` for `i < n`; parameters `(dst, src, n)`.
    AddAssign,
    /// `out[i] = src[i] as out's type` for `i < n`, from `from`;
    /// parameters `(out, src, n)`.
    Cast { from: DType },
}

/// A dtype's register declaration type, load/store type and size.
fn parts(dtype: DType) -> (&'static str, &'static str, usize) {
    match dtype {
        DType::F32 => (".f32", "f32", 4),
        DType::F64 => (".f64", "f64", 8),
        DType::I32 => (".b32", "s32", 4),
        DType::I64 => (".b64", "s64", 8),
    }
}

/// The instruction converting `%a0` (of `from`) into `%b0` (of `to`), as
/// Rust's `as` does: floats to integers round toward zero and saturate
/// (NaN gives 0), integers to floats round to nearest, integers to a
/// narrower integer wrap.
fn conversion(from: DType, to: DType) -> String {
    let (_, f, _) = parts(from);
    let (_, t, _) = parts(to);
    match (from.is_float(), to.is_float()) {
        _ if from == to => {
            let bits = match to {
                DType::F32 => "f32",
                DType::F64 => "f64",
                DType::I32 => "b32",
                DType::I64 => "b64",
            };
            format!("mov.{bits} %b0, %a0;")
        }
        (true, true) if to.size() > from.size() => format!("cvt.{t}.{f} %b0, %a0;"),
        (true, true) => format!("cvt.rn.{t}.{f} %b0, %a0;"),
        (true, false) => format!("cvt.rzi.{t}.{f} %b0, %a0;"),
        (false, true) => format!("cvt.rn.{t}.{f} %b0, %a0;"),
        (false, false) if to.size() > from.size() => format!("cvt.{t}.{f} %b0, %a0;"),
        (false, false) => "cvt.u32.u64 %b0, %a0;".to_string(),
    }
}

/// The module of `builtin` writing `dtype` elements for `arch`, entry
/// `super::ENTRY` (also written to `$TENJIN_PTX_DUMP`).
pub fn module(builtin: Builtin, dtype: DType, arch: Arch) -> String {
    let (decl, ty, size) = parts(dtype);
    // %a: the value read (or written) in the input's type, %b: the output's.
    let (params, decls, setup, body) = match builtin {
        Builtin::Fill => (
            "\t.param .u64 out,\n\t.param .u64 n,\n\t.param .u64 value",
            format!(".reg {decl} %b<1>;"),
            format!(
                "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd1, [n];\n\tld.param.u64 %rd2, [value];\n{}",
                if size == 4 {
                    "\tcvt.u32.u64 %w0, %rd2;\n\tmov.b32 %b0, %w0;\n"
                } else {
                    "\tmov.b64 %b0, %rd2;\n"
                }
            ),
            format!("\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tst.global.{ty} [%rd7], %b0;\n"),
        ),
        Builtin::AddAssign => {
            let add = if dtype.is_float() {
                format!("add.rn.{ty}")
            } else {
                format!("add.{ty}")
            };
            (
                "\t.param .u64 dst,\n\t.param .u64 src,\n\t.param .u64 n",
                format!(".reg {decl} %a<2>;\n\t.reg {decl} %b<1>;"),
                "\tld.param.u64 %rd0, [dst];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n".to_string(),
                format!(
                    "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {size}, %rd2;\n\tld.global.{ty} %a0, [%rd7];\n\tld.global.{ty} %a1, [%rd8];\n\t{add} %b0, %a0, %a1;\n\tst.global.{ty} [%rd7], %b0;\n"
                ),
            )
        }
        Builtin::Cast { from } => {
            let (from_decl, from_ty, from_size) = parts(from);
            (
                "\t.param .u64 out,\n\t.param .u64 src,\n\t.param .u64 n",
                format!(".reg {from_decl} %a<1>;\n\t.reg {decl} %b<1>;"),
                "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n".to_string(),
                format!(
                    "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {from_size}, %rd2;\n\tld.global.{from_ty} %a0, [%rd8];\n\t{}\n\tst.global.{ty} [%rd7], %b0;\n",
                    conversion(from, dtype)
                ),
            )
        }
    };
    let text = format!(
        ".version {}\n.target {}\n.address_size 64\n\n// {builtin:?} {dtype:?}\n.visible .entry {}(\n{params}\n)\n{{\n\t.reg .pred %p<1>;\n\t.reg .b32 %w<5>;\n\t.reg .b64 %rd<9>;\n\t{decls}\n{setup}\tmov.u32 %w1, %ctaid.x;\n\tmov.u32 %w2, %ntid.x;\n\tmov.u32 %w3, %tid.x;\n\tmov.u32 %w4, %nctaid.x;\n\tmul.wide.u32 %rd3, %w1, %w2;\n\tcvt.u64.u32 %rd4, %w3;\n\tadd.s64 %rd5, %rd3, %rd4;\n\tmul.wide.u32 %rd6, %w2, %w4;\nL1:\n\tsetp.ge.u64 %p0, %rd5, %rd1;\n\t@%p0 bra L2;\n{body}\tadd.s64 %rd5, %rd5, %rd6;\n\tbra.uni L1;\nL2:\n\tret;\n}}\n",
        arch.ptx_version(),
        arch.target(),
        super::ENTRY,
    );
    let tag = match builtin {
        Builtin::Fill => 0xF111_0000_0000_0000u64,
        Builtin::AddAssign => 0xADD0_0000_0000_0000u64,
        Builtin::Cast { from } => {
            0xCA57_0000_0000_0000u64 | from.size() as u64 | (u64::from(from.is_float()) << 8)
        }
    };
    super::super::dump::write(&super::super::dump::file_name(tag, dtype, arch), &text);
    text
}
