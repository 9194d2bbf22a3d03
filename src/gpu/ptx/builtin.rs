//! The GPU backend's own kernels, for the buffer operations of the
//! `Backend` interface: filling a buffer with a value, adding one buffer
//! into another, and converting between element types.
//!
//! Owns [`Builtin`] and [`module`]: PTX written here once per element type
//! (not emitted from an index function: the element count and the value
//! are launch parameters, so one module serves every size), a grid-stride
//! loop like every emitted kernel. Must not decide when they run.
//!
//! The half-precision types (`BF16`, `F16`) live in `.b16` registers and
//! are computed in f32, giving the CPU backend's bits on every [`Arch`]:
//! an addition widens both (exactly), adds in f32 and rounds once to
//! nearest even; a conversion goes through f32 (`cast`). f16 uses
//! `cvt.f32.f16` and `cvt.rn.f16.f32` (every arch); bf16, which has no
//! `cvt` before sm_80 (sm_90 to widen), uses integer operations on every
//! arch (`widen`, `narrow`). Gather moves them as 16-bit values;
//! scatter-add has no half form (the ops widen before indexing).

use super::Arch;
use crate::DType;

/// A buffer operation; the module's dtype is its output's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `out[i] = value` for `i < n`; parameters `(out, n, value bits)`
    /// (a half's 16 bits in the low bits).
    Fill,
    /// `dst[i] += src[i]` for `i < n` (halves: in f32, rounded once);
    /// parameters `(dst, src, n)`.
    AddAssign,
    /// `dst[start + Σ_j coeff_j·v_j] += src[p]` for `p < n`, `v` the
    /// point `p` of the sizes row-major (halves: in f32, rounded once;
    /// positions apart, so no atomics); parameters `(dst, src, n, start,
    /// size_0, coeff_0, …)`, `rank` pairs of them (at most
    /// [`MAX_STRIDED_RANK`]).
    AddStrided { rank: u8 },
    /// `out[i] = src[i] as out's type` for `i < n`, from `from`;
    /// parameters `(out, src, n)`.
    Cast { from: DType },
    /// `out[i] = src[i]` rounded to the nearest `half` value, both f32
    /// (a conversion to `half` and back, in one pass); parameters `(out,
    /// src, n)`.
    RoundToHalf { half: DType },
    /// `out[p] = src[(o·size + id)·inner + i]` for the output element
    /// `p = (o·count + t)·inner + i < n`, `id = ids[t]` (or `ids[p]` when
    /// `along`), ids of type `ids` in range; parameters `(out, src, ids,
    /// n, size, inner, count, ranges)`, `ranges` 1.
    Gather { ids: DType, along: bool },
    /// Its gradient, one thread per line `l = o·inner + i` and range `r`
    /// of the `size` rows, `p = r·lines + l < n` (`lines = n / ranges`):
    /// zeroes `out[o; v; i]` for the rows `v` of its range, then adds
    /// `src[(o·count + t)·inner + i]` into `out[o; id; i]` for `t` in
    /// increasing order where `id` is in its range (no atomics, every
    /// element summed by one thread in the CPU's order; the ranges give a
    /// short line, an embedding's column over a large vocabulary, threads
    /// enough to fill the GPU); same parameters.
    ScatterAdd { ids: DType, along: bool },
}

/// The instructions loading the id at element `at` (a register) of the ids
/// (`%rd9`) into `dst` as s64.
fn load_id(ids: DType, at: &str, dst: &str) -> String {
    match ids {
        DType::I32 => format!(
            "\tmad.lo.s64 %rd23, {at}, 4, %rd9;\n\tld.global.s32 %w5, [%rd23];\n\tcvt.s64.s32 {dst}, %w5;\n"
        ),
        _ => format!("\tmad.lo.s64 %rd23, {at}, 8, %rd9;\n\tld.global.s64 {dst}, [%rd23];\n"),
    }
}

/// Ids a scatter-add thread loads before it adds the first of them: the
/// loads overlap, where one at a time each waits for the one before.
const SCATTER_UNROLL: usize = 8;

/// The scan of a scatter-add thread over the positions `t` (`%rd16`, from
/// 0, `%rd15` = o·count): each id in its rows [`%rd28`, `%rd29`) adds the
/// source element `p = (o·count + t)·inner + i` into `out[o; id; i]`, in
/// increasing `t`; [`SCATTER_UNROLL`] ids loaded at a time (through a
/// pointer stepping over the ids, unless they are read per element), then
/// one at a time for the rest. A range check is one unsigned comparison
/// of `id − lo` with the range's width (`%rd36`).
fn scatter_scan(ids: DType, along: bool, ty: &str, size: usize) -> String {
    // Adds the source element at position `t + k` for the id in `id`.
    let add = |k: usize, id: &str, skip: &str| {
        format!(
            "\tsub.s64 %rd38, {id}, %rd28;\n\tsetp.ge.u64 %p1, %rd38, %rd36;\n\t@%p1 bra {skip};\n\tadd.s64 %rd17, %rd15, %rd16;\n\tadd.s64 %rd17, %rd17, {k};\n\tmad.lo.s64 %rd17, %rd17, %rd21, %rd10;\n\tadd.s64 %rd19, %rd12, {id};\n\tmad.lo.s64 %rd19, %rd19, %rd21, %rd10;\n\tmad.lo.s64 %rd19, %rd19, {size}, %rd0;\n\tmad.lo.s64 %rd14, %rd17, {size}, %rd2;\n\tld.global.{ty} %a0, [%rd19];\n\tld.global.{ty} %a1, [%rd14];\n\tadd.rn.{ty} %b0, %a0, %a1;\n\tst.global.{ty} [%rd19], %b0;\n{skip}:\n"
        )
    };
    // Loads the id of position `t + k` into `dst`.
    let load = |k: usize, dst: &str| {
        if along {
            let at = format!("\tadd.s64 %rd35, %rd15, %rd16;\n\tadd.s64 %rd35, %rd35, {k};\n\tmad.lo.s64 %rd35, %rd35, %rd21, %rd10;\n");
            at + &load_id(ids, "%rd35", dst)
        } else {
            // (`[%rd37+offset]` written as an addition: ptxas folds it.)
            let at = format!("\tadd.s64 %rd39, %rd37, {};\n", ids.size() * k);
            at + &match ids {
                DType::I32 => format!("\tld.global.s32 %w5, [%rd39];\n\tcvt.s64.s32 {dst}, %w5;\n"),
                _ => format!("\tld.global.s64 {dst}, [%rd39];\n"),
            }
        }
    };
    let step = SCATTER_UNROLL * ids.size();
    let mut out = format!(
        "\tsub.s64 %rd36, %rd29, %rd28;\n\tmov.u64 %rd16, 0;\n\tmov.u64 %rd37, %rd9;\n\tand.b64 %rd30, %rd22, {};\nB1:\n\tsetp.ge.u64 %p1, %rd16, %rd30;\n\t@%p1 bra A1;\n",
        -(SCATTER_UNROLL as i64)
    );
    for k in 0..SCATTER_UNROLL {
        out += &load(k, &format!("%rd{}", 40 + k));
    }
    for k in 0..SCATTER_UNROLL {
        out += &add(k, &format!("%rd{}", 40 + k), &format!("S{k}"));
    }
    out += &format!("\tadd.s64 %rd16, %rd16, {SCATTER_UNROLL};\n\tadd.s64 %rd37, %rd37, {step};\n\tbra.uni B1;\nA1:\n\tsetp.ge.u64 %p1, %rd16, %rd22;\n\t@%p1 bra A2;\n");
    out += &load(0, "%rd18");
    out += &add(0, "%rd18", "A3");
    out += &format!(
        "\tadd.s64 %rd16, %rd16, 1;\n\tadd.s64 %rd37, %rd37, {};\n\tbra.uni A1;\nA2:\n",
        ids.size()
    );
    out
}

/// The parameters and setup of the indexing kernels: `%rd0` out, `%rd2`
/// src, `%rd9` ids, `%rd1` n, `%rd20` size, `%rd21` inner, `%rd22` count,
/// `%rd24` ranges (1 for a gather).
const INDEXING_PARAMS: &str = "\t.param .u64 out,\n\t.param .u64 src,\n\t.param .u64 ids,\n\t.param .u64 n,\n\t.param .u64 size,\n\t.param .u64 inner,\n\t.param .u64 count,\n\t.param .u64 ranges";
const INDEXING_SETUP: &str = "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd9, [ids];\n\tcvta.to.global.u64 %rd9, %rd9;\n\tld.param.u64 %rd1, [n];\n\tld.param.u64 %rd20, [size];\n\tld.param.u64 %rd21, [inner];\n\tld.param.u64 %rd22, [count];\n\tld.param.u64 %rd24, [ranges];\n";

/// A dtype's register declaration type, load/store type and size.
fn parts(dtype: DType) -> (&'static str, &'static str, usize) {
    match dtype {
        DType::F32 => (".f32", "f32", 4),
        DType::F64 => (".f64", "f64", 8),
        DType::I32 => (".b32", "s32", 4),
        DType::I64 => (".b64", "s64", 8),
        DType::BF16 | DType::F16 => (".b16", "b16", 2),
    }
}

/// The instructions converting `src` (a register of `from`) into `dst`
/// (of `to`) as Rust's `as` does, neither type a half: floats to integers
/// round toward zero and saturate (NaN gives 0), integers to floats round
/// to nearest, integers to a narrower integer wrap. Uses `%p1`.
fn conversion(from: DType, to: DType, src: &str, dst: &str) -> String {
    let (_, f, _) = parts(from);
    let (_, t, _) = parts(to);
    match (from.is_float(), to.is_float()) {
        _ if from == to => {
            let bits = match to {
                DType::F32 => "f32",
                DType::F64 => "f64",
                DType::I32 => "b32",
                DType::I64 => "b64",
                DType::BF16 | DType::F16 => "b16",
            };
            format!("mov.{bits} {dst}, {src};")
        }
        (true, true) if to.size() > from.size() => format!("cvt.{t}.{f} {dst}, {src};"),
        (true, true) => format!("cvt.rn.{t}.{f} {dst}, {src};"),
        // `cvt.rzi` saturates, but an H100 turns a NaN f64 into i32::MIN:
        // NaN is set to 0 explicitly.
        (true, false) => format!(
            "cvt.rzi.{t}.{f} {dst}, {src};\n\tsetp.nan.{f} %p1, {src}, {src};\n\tselp.{t} {dst}, 0, {dst}, %p1;"
        ),
        (false, true) => format!("cvt.rn.{t}.{f} {dst}, {src};"),
        (false, false) if to.size() > from.size() => format!("cvt.{t}.{f} {dst}, {src};"),
        (false, false) => format!("cvt.u32.u64 {dst}, {src};"),
    }
}

/// The instructions widening the `half` value in `src` (a `.b16`
/// register) into the f32 register `dst`, exactly: `cvt.f32.f16` for f16;
/// for bf16 (no `cvt` from it before sm_90) its bits shifted into the
/// high half of an f32 (a bf16 is an f32's upper 16 bits), through `%x0`.
fn widen(half: DType, src: &str, dst: &str) -> String {
    match half {
        DType::BF16 => {
            format!("cvt.u32.u16 %x0, {src};\n\tshl.b32 %x0, %x0, 16;\n\tmov.b32 {dst}, %x0;")
        }
        _ => format!("cvt.f32.f16 {dst}, {src};"),
    }
}

/// The instructions rounding the f32 in `src` to the nearest `half` value
/// (ties to even; beyond the largest finite to ±inf) into `dst` (a `.b16`
/// register), as the `half` crate's `from_f32` does: `cvt.rn.f16.f32` for
/// f16 (subnormals included, on every arch); for bf16 (`cvt.rn.bf16.f32`
/// needs sm_80) the same on every arch with integer operations: `bits +
/// 0x7FFF + (bit 16)`, its upper 16 bits (a carry into the exponent rounds
/// up to the next binade or to inf), and a NaN kept a quiet NaN with its
/// sign and upper payload (`bits >> 16 | 0x40`), through `%x0..%x2` and
/// `%p1`.
fn narrow(half: DType, src: &str, dst: &str) -> String {
    match half {
        DType::BF16 => format!(
            "mov.b32 %x0, {src};\n\tshr.u32 %x1, %x0, 16;\n\tand.b32 %x2, %x1, 1;\n\tadd.u32 %x2, %x2, 32767;\n\tadd.u32 %x2, %x0, %x2;\n\tshr.u32 %x2, %x2, 16;\n\tor.b32 %x1, %x1, 64;\n\tsetp.nan.f32 %p1, {src}, {src};\n\tselp.b32 %x2, %x1, %x2, %p1;\n\tcvt.u16.u32 {dst}, %x2;"
        ),
        _ => format!("cvt.rn.f16.f32 {dst}, {src};"),
    }
}

/// The instructions converting `%a0` (of `from`) into `%b0` (of `to`) as
/// the CPU backend does (`crate::dtype::cast`). A half is converted
/// through f32 (`%f0`) as PyTorch does: widened exactly, then converted
/// as an f32 (to f64 exactly, to an integer toward zero); an f64 or an
/// integer rounded to f32 first, then to the half (twice rounded, as
/// PyTorch does).
fn cast(from: DType, to: DType) -> String {
    if from == to || !(from.is_half() || to.is_half()) {
        return conversion(from, to, "%a0", "%b0");
    }
    // The value as an f32: the source itself, or in `%f0`.
    let (mut code, wide) = match from {
        DType::F32 => (String::new(), "%a0"),
        _ if to == DType::F32 => return widen(from, "%a0", "%b0"),
        DType::BF16 | DType::F16 => (widen(from, "%a0", "%f0") + "\n\t", "%f0"),
        _ => (conversion(from, DType::F32, "%a0", "%f0") + "\n\t", "%f0"),
    };
    code += &if to.is_half() {
        narrow(to, wide, "%b0")
    } else {
        conversion(DType::F32, to, wide, "%b0")
    };
    code
}

/// The registers a module with half values on either side uses between
/// them: `%f` (f32) and `%x` (`narrow`'s and `widen`'s temporaries).
const HALF_REGISTERS: &str = "\n\t.reg .f32 %f<3>;\n\t.reg .b32 %x<3>;";

/// The parameters of a copying kernel: `(out, src, n)`.
const CAST_PARAMS: &str = "\t.param .u64 out,\n\t.param .u64 src,\n\t.param .u64 n";

/// The parameters and setup of the adding kernels: `%rd0` dst, `%rd2`
/// src, `%rd1` n.
const ADD_PARAMS: &str = "\t.param .u64 dst,\n\t.param .u64 src,\n\t.param .u64 n";
const ADD_SETUP: &str = "\tld.param.u64 %rd0, [dst];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n";

/// The most dimensions [`Builtin::AddStrided`] takes.
pub const MAX_STRIDED_RANK: usize = 6;

/// The registers an adding kernel of `dtype` elements uses.
fn add_registers(dtype: DType) -> String {
    let (decl, _, _) = parts(dtype);
    let extra = if dtype.is_half() { HALF_REGISTERS } else { "" };
    format!(".reg {decl} %a<2>;\n\t.reg {decl} %b<1>;{extra}")
}

/// The instructions adding the element at `%rd8` into the one at `%rd7`
/// (halves in f32, rounded once, as on the CPU).
fn add_at(dtype: DType) -> String {
    let (_, ty, _) = parts(dtype);
    let add = if dtype.is_half() {
        format!(
            "{}\n\t{}\n\tadd.rn.f32 %f2, %f0, %f1;\n\t{}",
            widen(dtype, "%a0", "%f0"),
            widen(dtype, "%a1", "%f1"),
            narrow(dtype, "%f2", "%b0")
        )
    } else if dtype.is_float() {
        format!("add.rn.{ty} %b0, %a0, %a1;")
    } else {
        format!("add.{ty} %b0, %a0, %a1;")
    };
    format!("\tld.global.{ty} %a0, [%rd7];\n\tld.global.{ty} %a1, [%rd8];\n\t{add}\n\tst.global.{ty} [%rd7], %b0;\n")
}

/// The module of `builtin` writing `dtype` elements for `arch`, entry
/// `super::ENTRY` (also written to `$TENJIN_PTX_DUMP`).
pub fn module(builtin: Builtin, dtype: DType, arch: Arch) -> String {
    let (decl, ty, size) = parts(dtype);
    // %a: the value read (or written) in the input's type, %b: the output's.
    let (params, decls, setup, body) = match builtin {
        Builtin::Fill => (
            "\t.param .u64 out,\n\t.param .u64 n,\n\t.param .u64 value".to_string(),
            format!(".reg {decl} %b<1>;"),
            format!(
                "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd1, [n];\n\tld.param.u64 %rd2, [value];\n{}",
                match size {
                    2 => "\tcvt.u16.u64 %b0, %rd2;\n",
                    4 => "\tcvt.u32.u64 %w0, %rd2;\n\tmov.b32 %b0, %w0;\n",
                    _ => "\tmov.b64 %b0, %rd2;\n",
                }
            ),
            format!("\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tst.global.{ty} [%rd7], %b0;\n"),
        ),
        Builtin::AddAssign => (
            ADD_PARAMS.to_string(),
            add_registers(dtype),
            ADD_SETUP.to_string(),
            format!(
                "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {size}, %rd2;\n{}",
                add_at(dtype)
            ),
        ),
        Builtin::AddStrided { rank } => {
            let rank = usize::from(rank);
            let (mut params, mut setup) = (ADD_PARAMS.to_string(), ADD_SETUP.to_string());
            params += ",\n\t.param .u64 start";
            setup += "\tld.param.u64 %rd9, [start];\n";
            // Size j in %rd(20 + 2j), its coefficient in %rd(21 + 2j).
            for j in 0..rank {
                params += &format!(",\n\t.param .u64 size{j},\n\t.param .u64 coeff{j}");
                setup += &format!(
                    "\tld.param.u64 %rd{}, [size{j}];\n\tld.param.u64 %rd{}, [coeff{j}];\n",
                    20 + 2 * j,
                    21 + 2 * j
                );
            }
            // q (%rd10) = p, then divided by each size from the innermost;
            // the position (%rd11) gathers coefficient × coordinate.
            let mut body = "\tmov.u64 %rd10, %rd5;\n\tmov.u64 %rd11, %rd9;\n".to_string();
            for j in (1..rank).rev() {
                let (n, c) = (20 + 2 * j, 21 + 2 * j);
                body += &format!("\trem.u64 %rd12, %rd10, %rd{n};\n\tdiv.u64 %rd10, %rd10, %rd{n};\n\tmad.lo.s64 %rd11, %rd12, %rd{c}, %rd11;\n");
            }
            if rank > 0 {
                body += "\tmad.lo.s64 %rd11, %rd10, %rd21, %rd11;\n";
            }
            body += &format!(
                "\tmad.lo.s64 %rd7, %rd11, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {size}, %rd2;\n{}",
                add_at(dtype)
            );
            (params, add_registers(dtype), setup, body)
        }
        Builtin::Cast { from } => {
            let (from_decl, from_ty, from_size) = parts(from);
            let extra = if from != dtype && (from.is_half() || dtype.is_half()) {
                HALF_REGISTERS
            } else {
                ""
            };
            (
                CAST_PARAMS.to_string(),
                format!(".reg {from_decl} %a<1>;\n\t.reg {decl} %b<1>;{extra}"),
                "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n".to_string(),
                format!(
                    "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {from_size}, %rd2;\n\tld.global.{from_ty} %a0, [%rd8];\n\t{}\n\tst.global.{ty} [%rd7], %b0;\n",
                    cast(from, dtype)
                ),
            )
        }
        Builtin::RoundToHalf { half } => (
            CAST_PARAMS.to_string(),
            format!(".reg {decl} %a<1>;\n\t.reg {decl} %b<1>;\n\t.reg .b16 %h<1>;{HALF_REGISTERS}"),
            "\tld.param.u64 %rd0, [out];\n\tcvta.to.global.u64 %rd0, %rd0;\n\tld.param.u64 %rd2, [src];\n\tcvta.to.global.u64 %rd2, %rd2;\n\tld.param.u64 %rd1, [n];\n".to_string(),
            format!(
                "\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tmad.lo.s64 %rd8, %rd5, {size}, %rd2;\n\tld.global.{ty} %a0, [%rd8];\n\t{}\n\t{}\n\tst.global.{ty} [%rd7], %b0;\n",
                narrow(half, "%a0", "%h0"),
                widen(half, "%h0", "%b0")
            ),
        ),
        Builtin::Gather { ids, along } => (
            INDEXING_PARAMS.to_string(),
            format!(".reg {decl} %b<1>;"),
            INDEXING_SETUP.to_string(),
            // i = p % inner, q = p / inner, t = q % count, o = q / count.
            format!(
                "\trem.u64 %rd10, %rd5, %rd21;\n\tdiv.u64 %rd11, %rd5, %rd21;\n\trem.u64 %rd12, %rd11, %rd22;\n\tdiv.u64 %rd13, %rd11, %rd22;\n{}\tmad.lo.s64 %rd14, %rd13, %rd20, %rd18;\n\tmad.lo.s64 %rd14, %rd14, %rd21, %rd10;\n\tmad.lo.s64 %rd14, %rd14, {size}, %rd2;\n\tld.global.{ty} %b0, [%rd14];\n\tmad.lo.s64 %rd7, %rd5, {size}, %rd0;\n\tst.global.{ty} [%rd7], %b0;\n",
                load_id(ids, if along { "%rd5" } else { "%rd12" }, "%rd18")
            ),
        ),
        Builtin::ScatterAdd { ids, along } => {
            let zero = if size == 4 { "0f00000000" } else { "0d0000000000000000" };
            (
                INDEXING_PARAMS.to_string(),
                format!(".reg {decl} %a<2>;\n\t.reg {decl} %b<1>;"),
                INDEXING_SETUP.to_string(),
                // lines (%rd25) = n / ranges, l (%rd26) = p % lines, r
                // (%rd27) = p / lines, its rows [lo, hi) = [%rd28, %rd29);
                // i = l % inner, o = l / inner; %rd12 = o·size, %rd15 =
                // o·count; v (%rd13) over the range's zeroes, t (%rd16)
                // over the positions, p (%rd17) = (o·count + t)·inner + i.
                format!(
                    "\tdiv.u64 %rd25, %rd1, %rd24;\n\trem.u64 %rd26, %rd5, %rd25;\n\tdiv.u64 %rd27, %rd5, %rd25;\n\tmul.lo.s64 %rd28, %rd27, %rd20;\n\tdiv.u64 %rd28, %rd28, %rd24;\n\tadd.s64 %rd29, %rd27, 1;\n\tmul.lo.s64 %rd29, %rd29, %rd20;\n\tdiv.u64 %rd29, %rd29, %rd24;\n\trem.u64 %rd10, %rd26, %rd21;\n\tdiv.u64 %rd11, %rd26, %rd21;\n\tmul.lo.s64 %rd12, %rd11, %rd20;\n\tmov.{ty} %b0, {zero};\n\tmov.u64 %rd13, %rd28;\nZ1:\n\tsetp.ge.u64 %p1, %rd13, %rd29;\n\t@%p1 bra Z2;\n\tadd.s64 %rd14, %rd12, %rd13;\n\tmad.lo.s64 %rd14, %rd14, %rd21, %rd10;\n\tmad.lo.s64 %rd14, %rd14, {size}, %rd0;\n\tst.global.{ty} [%rd14], %b0;\n\tadd.s64 %rd13, %rd13, 1;\n\tbra.uni Z1;\nZ2:\n\tmul.lo.s64 %rd15, %rd11, %rd22;\n{}",
                    scatter_scan(ids, along, ty, size)
                ),
            )
        }
    };
    let text = format!(
        ".version {}\n.target {}\n.address_size 64\n\n// {builtin:?} {dtype:?}\n.visible .entry {}(\n{params}\n)\n{{\n\t.reg .pred %p<2>;\n\t.reg .b32 %w<6>;\n\t.reg .b64 %rd<48>;\n\t{decls}\n{setup}\tmov.u32 %w1, %ctaid.x;\n\tmov.u32 %w2, %ntid.x;\n\tmov.u32 %w3, %tid.x;\n\tmov.u32 %w4, %nctaid.x;\n\tmul.wide.u32 %rd3, %w1, %w2;\n\tcvt.u64.u32 %rd4, %w3;\n\tadd.s64 %rd5, %rd3, %rd4;\n\tmul.wide.u32 %rd6, %w2, %w4;\nL1:\n\tsetp.ge.u64 %p0, %rd5, %rd1;\n\t@%p0 bra L2;\n{body}\tadd.s64 %rd5, %rd5, %rd6;\n\tbra.uni L1;\nL2:\n\tret;\n}}\n",
        arch.ptx_version(),
        arch.target(),
        super::ENTRY,
    );
    let tag = match builtin {
        Builtin::Fill => 0xF111_0000_0000_0000u64,
        Builtin::AddAssign => 0xADD0_0000_0000_0000u64,
        Builtin::AddStrided { rank } => 0xADD5_0000_0000_0000u64 | u64::from(rank),
        Builtin::Cast { from } => {
            0xCA57_0000_0000_0000u64
                | from.size() as u64
                | (u64::from(from.is_float()) << 8)
                | (u64::from(from == DType::F16) << 9)
        }
        Builtin::RoundToHalf { half } => {
            0x40B0_0000_0000_0000u64 | half.size() as u64 | (u64::from(half == DType::F16) << 9)
        }
        Builtin::Gather { ids, along } => {
            0x6A7E_0000_0000_0000u64 | ids.size() as u64 | (u64::from(along) << 8)
        }
        Builtin::ScatterAdd { ids, along } => {
            0x5CA7_0000_0000_0000u64 | ids.size() as u64 | (u64::from(along) << 8)
        }
    };
    super::super::dump::write(&super::super::dump::file_name(tag, dtype, arch), &text);
    text
}
