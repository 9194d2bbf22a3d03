//! PTX text emitted directly from the kernel IR ([`crate::kernel::Kernel`]).
//!
//! Owns [`emit`] and [`Arch`]. One thread computes one output element: the
//! kernel's output loops (the parallel loop and the loops nested in it)
//! are replaced by a grid-stride loop over the flat output index, which
//! each thread decomposes into the output coordinates; everything inside
//! (reductions with their solved bounds, guards, loads at affine offsets)
//! is emitted as the IR says, in the IR's order. Derivatives are gathers,
//! so no two threads ever write one element and no atomics exist.
//!
//! Floating-point arithmetic is `.rn` throughout (`add.rn`, `mul.rn`, ...),
//! so `ptxas` never contracts a multiply and an add into an FMA we did not
//! choose, and f64 kernels made of `+ − × ÷ √` give the CPU backend's
//! results bit for bit. Comparisons are NaN-correct (`!=` is `setp.neu`,
//! the others ordered), and `max`/`min` keep the first operand on ties and
//! a NaN operand, like the interpreter. Transcendental functions are our
//! own sequences (`math`, with its accuracy table).
//!
//! A kernel with run-time constants ([`Kernel::with_run_time_constants`])
//! reads them from launch parameters, with the output's sizes
//! ([`launch_sizes`]): its bounds, guards, strides and float constants,
//! the grid-stride loop's count and the coordinates' divisors. Decisions
//! that depend on values (32-bit index arithmetic, vector accesses) are
//! taken at the kernel's own values ([`Kernel::resolve`]), so two kernels
//! whose modules come out as the same text may share one; one whose
//! values decide otherwise gets other text.
//!
//! Must not allocate device memory or launch anything (that is
//! `crate::gpu::driver`'s job); it only writes text.
//!
//! ```
//! use tenjin::gpu::ptx::{emit, Arch};
//! use tenjin::symbolic::IndexFn;
//! let f = IndexFn::parse("f[i; j] = exp(x[j; i]) * 2", &[("x", &[3, 2][..])])?;
//! let text = emit(&tenjin::kernel::lower(&f)?, tenjin::DType::F32, Arch::Sm80, "k")?;
//! assert!(text.starts_with(".version 7.0\n.target sm_80"));
//! assert!(text.contains("mul.rn.f32"));
//! # Ok::<(), tenjin::Error>(())
//! ```

mod asm;
pub mod builtin;
mod float;
pub(crate) mod math;
mod math32;
mod special;
mod stmt;

use crate::kernel::Kernel;
use crate::{DType, Error};

/// A GPU architecture the emitted module declares (`.target`) with the
/// oldest PTX version that allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Volta (`sm_70`, PTX 6.0).
    Sm70,
    /// Ampere (`sm_80`, PTX 7.0).
    Sm80,
    /// Hopper (`sm_90`, PTX 7.8).
    Sm90,
}

impl Arch {
    /// Every architecture, oldest first.
    pub const ALL: [Arch; 3] = [Arch::Sm70, Arch::Sm80, Arch::Sm90];

    /// The `.target` name (`sm_80`).
    pub fn target(self) -> &'static str {
        match self {
            Arch::Sm70 => "sm_70",
            Arch::Sm80 => "sm_80",
            Arch::Sm90 => "sm_90",
        }
    }

    /// The `.version` the module declares.
    pub fn ptx_version(self) -> &'static str {
        match self {
            Arch::Sm70 => "6.0",
            Arch::Sm80 => "7.0",
            Arch::Sm90 => "7.8",
        }
    }

    /// The newest of these a device of compute capability
    /// `major.minor` runs (`None` below 7.0).
    pub fn for_capability(major: i32, minor: i32) -> Option<Arch> {
        match (major, minor) {
            (m, _) if m >= 9 => Some(Arch::Sm90),
            (8, _) => Some(Arch::Sm80),
            (7, _) => Some(Arch::Sm70),
            _ => None,
        }
    }
}

/// The entry function's name in every module tenjin loads.
pub const ENTRY: &str = "tenjin_kernel";

/// The module of `k` (a kernel planned for the GPU target: the planner's
/// GPU loop passes) with entry [`ENTRY`], also written to
/// `$TENJIN_PTX_DUMP` named by `key_hash` (the structural key's hash of
/// the function it computes), beside the kernel it came from (`.kernel`).
pub fn module(key_hash: u64, k: &Kernel, dtype: DType, arch: Arch) -> Result<String, Error> {
    let text = emit(k, dtype, arch, ENTRY)?;
    let name = super::dump::file_name(key_hash, dtype, arch);
    super::dump::write(&name, &text);
    super::dump::write(&format!("{name}.kernel"), &k.to_string());
    Ok(text)
}

/// The PTX module computing `k` in `dtype` for `arch`, with one entry
/// function named `entry` whose parameters are the output's address, then
/// each argument's address in the kernel's order (all `.u64`, global
/// memory), then the sizes a kernel with run-time constants reads
/// ([`launch_sizes`]). Launch it with any grid: threads stride over the
/// output.
///
/// Errors when `k` is not a freshly lowered kernel (`crate::kernel::lower`
/// and `crate::planner::blocked_sums` produce these; vector loops and
/// peeled output loops are the CPU backend's and are refused).
pub fn emit(k: &Kernel, dtype: DType, arch: Arch, entry: &str) -> Result<String, Error> {
    emit_with(
        k,
        dtype,
        arch,
        entry,
        IndexBits::Fitting,
        Access::VectorWhereAligned,
    )
}

/// The width of a module's index arithmetic.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexBits {
    /// 32 bits where every value fits (what [`emit`] does), else 64.
    Fitting,
    /// 64 bits always (so tests run the 64-bit path on small kernels).
    Wide,
}

/// How an element-wise kernel's threads reach memory.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Groups of consecutive elements with 16-byte vector loads and
    /// stores when the kernel qualifies and its buffers are aligned (what
    /// [`emit`] does; `stmt::vector`), else one element per access.
    VectorWhereAligned,
    /// One element per access always (the plain form tests compare with).
    Scalar,
}

/// The output elements each thread of `k`'s module computes per step of
/// its grid-stride loop when its buffers are aligned (a vector group's
/// lanes, or the rows of a short leading dimension it runs in turn; a
/// launch needs `⌈outputs / this⌉` threads).
pub fn elements_per_thread(k: &Kernel, dtype: DType) -> usize {
    match stmt::Group::of(k, dtype) {
        Some(g) => g.lanes as usize,
        None => stmt::leading_rows(k).unwrap_or(1),
    }
}

/// [`emit`] with the index width chosen by `bits` and the memory access
/// by `access`.
#[doc(hidden)]
pub fn emit_with(
    k: &Kernel,
    dtype: DType,
    arch: Arch,
    entry: &str,
    bits: IndexBits,
    access: Access,
) -> Result<String, Error> {
    let body = stmt::Emitter::kernel(k, dtype, bits, access).map_err(|message| Error::Invalid {
        function: k.name.clone(),
        message: format!("PTX emission: {message}\n{k}"),
    })?;
    let mut params = vec!["\t.param .u64 out".to_string()];
    params.extend((0..k.args.len()).map(|i| format!("\t.param .u64 a{i}")));
    params.extend(
        launch_sizes(k)
            .iter()
            .map(|(name, _)| format!("\t.param .u64 {name}")),
    );
    Ok(format!(
        ".version {}\n.target {}\n.address_size 64\n\n// {}\n.visible .entry {entry}(\n{}\n)\n{{\n{}{}}}\n",
        arch.ptx_version(),
        arch.target(),
        k.name.replace('\n', " "),
        params.join(",\n"),
        body.declarations,
        body.code,
    ))
}

/// The values a kernel with run-time constants ([`Kernel::params`], made
/// by [`Kernel::with_run_time_constants`]) is launched with, after the
/// buffers' addresses: each constant (`p0`, `p1`, …; a float's bits), the
/// parallel loop's extent (`ext`) and each output dimension (`n0`, `n1`,
/// …). Such a module's code reads every size it depends on from these, so
/// kernels whose modules come out as the same text share one module; a
/// kernel with its constants compiled in takes none.
///
/// ```
/// use tenjin::gpu::ptx::{emit, launch_sizes, Arch};
/// use tenjin::symbolic::IndexFn;
/// let module = |rows: usize| -> Result<(String, Vec<u64>), tenjin::Error> {
///     let f = IndexFn::parse("f[i] = sum{j}_0^9 x[i; j]", &[("x", &[rows, 10][..])])?;
///     let k = tenjin::kernel::lower(&f)?.with_run_time_constants();
///     let values = launch_sizes(&k).into_iter().map(|(_, v)| v).collect();
///     Ok((emit(&k, tenjin::DType::F32, Arch::Sm80, "k")?, values))
/// };
/// let ((a, at_3), (b, at_5)) = (module(3)?, module(5)?);
/// assert_eq!(a, b);
/// assert_ne!(at_3, at_5);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn launch_sizes(k: &Kernel) -> Vec<(String, u64)> {
    if k.params.is_empty() {
        return Vec::new();
    }
    let mut sizes: Vec<(String, u64)> = k
        .params
        .iter()
        .enumerate()
        .map(|(j, &(_, value))| (format!("p{j}"), value as u64))
        .collect();
    sizes.push(("ext".to_string(), k.extent as u64));
    sizes.extend(
        k.out_shape
            .iter()
            .enumerate()
            .map(|(d, &n)| (format!("n{d}"), n as u64)),
    );
    sizes
}
