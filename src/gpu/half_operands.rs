//! Half products over half buffers: the two operands of a product marked
//! as one of half values (`Contraction::set_half_operands`) as buffers of
//! one type, so that cuBLAS runs its half GEMM
//! (`cublasGemmStridedBatchedEx` over bf16 or f16 `A` and `B`, f32 sums
//! into an f32 `C`) where it can, instead of its f32 GEMM with
//! `CUBLAS_COMPUTE_32F_FAST_16BF` over f32 values. Half tensors' own
//! buffers (the runtime hands them over for their deferred widenings,
//! `crate::runtime`'s `exec`) are read as they are; f32 operands are
//! rounded into half copies where that pays; one of each type, the
//! smaller is converted to the other's.
//!
//! Both compute the same products of the same half values (the f32
//! values are half values, or are rounded to them by the tensor cores in
//! either case) summed in f32. Over half buffers cuBLAS reads half the
//! bytes and picks faster kernels: on an H200 (device times between
//! events, `TENJIN_GPU_PROFILE=1`) a 4096³ product took 0.330 ms over f32
//! operands and 0.183 over half ones, a GPT MLP's `[8192, 768]·[768,
//! 3072]` 0.150 and 0.075 ms. A copy costs a pass over its operand (0.017
//! ms for 6.3M elements), so copies are made only where the product's
//! arithmetic outweighs them ([`pays`]): the attention's second product
//! reads 10⁸ probabilities for 13 GFLOP, and took 0.119 ms without copies
//! and 0.310 ms with them. Copies are also refused where a row of either
//! operand would start off a 16-byte boundary, which the tensor cores'
//! fast kernels want (a vocabulary of 50,257 gives such rows).
//!
//! Owns that rule, its switch ([`set_half_copies`]: the rule, always,
//! never) and the copies (pooled buffers, held until the calls are
//! queued: the device's one stream orders their reuse after them). Must
//! not decide what is a half product.

use super::backend::Builtins;
use super::driver::{Arg, Driver};
use super::ptx::builtin::Builtin;
use crate::alloc::{allocate_on, Buffer, Device};
use crate::kernel::contraction::{BlasPlan, Dim};
use crate::{DType, Error};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// When a half product over f32 operands reads rounded copies of them
/// (see the module documentation), process-wide, read as each product is
/// queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HalfCopies {
    /// Where the product's arithmetic outweighs the copies and every row
    /// is aligned. The default.
    #[default]
    WherePaying,
    /// For every half product (where cuBLAS takes the layout).
    Always,
    /// Never: cuBLAS's f32 GEMM with the fast half compute type.
    Never,
}

static COPIES: AtomicU8 = AtomicU8::new(0);

/// Sets when half products on a GPU read rounded half copies of their f32
/// operands ([`HalfCopies`]), on every device. The same products of the
/// same values either way, summed in f32 (by other kernels: not bit for
/// bit on a GPU).
///
/// ```
/// use tenjin::cuda::{half_copies, set_half_copies, HalfCopies};
/// assert_eq!(half_copies(), HalfCopies::WherePaying);
/// set_half_copies(HalfCopies::Never);
/// assert_eq!(half_copies(), HalfCopies::Never);
/// set_half_copies(HalfCopies::WherePaying);
/// ```
pub fn set_half_copies(when: HalfCopies) {
    COPIES.store(when as u8, Relaxed);
}

/// When half products read half copies of their operands
/// ([`set_half_copies`]).
pub fn half_copies() -> HalfCopies {
    match COPIES.load(Relaxed) {
        1 => HalfCopies::Always,
        2 => HalfCopies::Never,
        _ => HalfCopies::WherePaying,
    }
}

/// Seconds a product saves per floating-point operation over half
/// buffers: 1–4·10⁻¹⁵ over the shapes above (H200), the lower half taken.
const SAVED_PER_FLOP: f64 = 2e-15;
/// Seconds a rounded copy costs per element (an f32 read and a 16-bit
/// write: 0.24 ms per 10⁸ elements, H200).
const COPY_PER_ELEMENT: f64 = 2.5e-12;
/// Seconds a copy's launch costs.
const COPY_LAUNCH: f64 = 5e-6;
/// Elements of a half type in 16 bytes: each row, batch and call must
/// start at a multiple of it.
const ALIGN: usize = 8;

/// Whether the f32 operands `buffers` (their elements) are to be rounded
/// into half copies ([`half_copies`]; by default, whether that pays for
/// `plan`'s calls, one per point of its outer dimensions and of `k_outer`:
/// see the module documentation). `starts` are the operands' first
/// elements.
pub(super) fn pays(
    plan: &BlasPlan,
    k_outer: &[Dim],
    starts: [usize; 2],
    buffers: &[usize],
) -> bool {
    match half_copies() {
        HalfCopies::Always => return true,
        HalfCopies::Never => return false,
        HalfCopies::WherePaying => {}
    }
    let dims = || plan.outer.iter().chain(k_outer);
    let aligned = [plan.lda, plan.ldb, plan.stride_a, plan.stride_b]
        .into_iter()
        .chain(starts)
        .chain(dims().flat_map(|d| [d.a, d.b].map(|s| s.unsigned_abs())))
        .all(|x| x % ALIGN == 0);
    let calls: usize = dims().map(|d| d.len).product();
    let flops = 2.0 * (plan.m * plan.n * plan.k * plan.batch * calls) as f64;
    let elements: usize = buffers.iter().sum();
    aligned
        && elements as f64 * COPY_PER_ELEMENT + buffers.len() as f64 * COPY_LAUNCH
            < flops * SAVED_PER_FLOP
}

/// The two operands of a product as cuBLAS reads them.
pub(super) struct Operands {
    pub a: Arg,
    pub b: Arg,
    /// Their element type: the product's, or the half type of its
    /// products.
    pub dtype: DType,
    /// The copies' memory, held until the products reading them are
    /// queued (never read: dropping it frees the copies).
    #[allow(dead_code)]
    pub held: Vec<Buffer>,
}

/// The device a copy is made on: its driver, the backend's loaded
/// builtins and the device (for the pool).
type On<'a, D> = (&'a D, &'a Builtins<<D as Driver>::Function>, Device);

/// A copy of the buffer `src` of `from` values as `to` values (a
/// rounding to a half type, or a widening from one), queued on the
/// device: the buffer to read instead, and its memory.
fn copy<D: Driver>(
    (driver, builtins, device): On<'_, D>,
    src: Arg,
    (from, to): (DType, DType),
) -> Result<(Arg, Buffer), Error> {
    let Arg::Buffer { bytes, .. } = src else {
        return Err(Error::Invalid {
            function: "gemm".into(),
            message: "internal: a GEMM operand that is not a buffer".into(),
        });
    };
    let cast = super::backend::load_builtin(driver, builtins, Builtin::Cast { from }, to)?;
    let n = bytes / from.size();
    let mut memory = allocate_on(device, n * to.size())?;
    let (addr, bytes) = (memory.as_mut_ptr() as u64, n * to.size());
    let buffer = |writable| Arg::Buffer {
        addr,
        bytes,
        writable,
    };
    let name = if to.is_half() {
        "round operand"
    } else {
        "widen operand"
    };
    super::backend::cast_buffers(driver, name, &cast, src, buffer(true), n)?;
    Ok((buffer(false), memory))
}

/// The operands `[a, b]` of a product of `half` values, each with its
/// element type, as two buffers of one type cuBLAS reads (`half` or f32),
/// copies made where needed: two half buffers as they are; one of each,
/// the smaller converted to the other's type; two f32 ones rounded where
/// that pays (`pays_for`, given the two buffers' lengths), else as they
/// are.
pub(super) fn operands<D: Driver>(
    on: On<'_, D>,
    half: DType,
    [a, b]: [(Arg, DType); 2],
    pays_for: impl FnOnce(&[usize]) -> bool,
) -> Result<Operands, Error> {
    let len = |(x, d): (Arg, DType)| match x {
        Arg::Buffer { bytes, .. } => bytes / d.size(),
        Arg::Scalar(_) => 0,
    };
    let to = match (a.1 == half, b.1 == half) {
        (true, true) => half,
        // The smaller one converted: a widening is exact, and a rounding
        // gives the values the tensor cores would multiply.
        (true, false) | (false, true) => {
            let (h, w) = if a.1 == half { (a, b) } else { (b, a) };
            if len(w) <= len(h) {
                half
            } else {
                DType::F32
            }
        }
        (false, false) => {
            let buffers = if a.0 == b.0 {
                vec![len(a)]
            } else {
                vec![len(a), len(b)]
            };
            if pays_for(&buffers) {
                half
            } else {
                DType::F32
            }
        }
    };
    let mut held = Vec::with_capacity(2);
    let mut convert = |(x, d): (Arg, DType)| -> Result<Arg, Error> {
        if d == to {
            return Ok(x);
        }
        let (read, memory) = copy(on, x, (d, to))?;
        held.push(memory);
        Ok(read)
    };
    let ra = convert(a)?;
    // (One copy when both operands are the same buffer.)
    let rb = if b == a { ra } else { convert(b)? };
    Ok(Operands {
        a: ra,
        b: rb,
        dtype: to,
        held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A product `C[m, n] = A·B` over `batch` pairs, row-major operands.
    fn plan(m: usize, n: usize, k: usize, batch: usize) -> BlasPlan {
        BlasPlan {
            swapped: true,
            trans_a: false,
            trans_b: false,
            m,
            n,
            k,
            lda: m,
            ldb: k,
            ldc: m,
            batch,
            stride_a: m * k,
            stride_b: k * n,
            stride_c: m * n,
            outer: Vec::new(),
            alpha: 1.0,
        }
    }

    #[test]
    fn copies_are_made_where_the_arithmetic_outweighs_them_and_rows_align() {
        // Where copies measured faster on an H200: a 4096³ product, a GPT
        // MLP's first product.
        let square = plan(4096, 4096, 4096, 1);
        assert!(pays(&square, &[], [0, 0], &[1 << 24, 1 << 24]));
        let mlp_up = plan(3072, 8192, 768, 1);
        assert!(pays(&mlp_up, &[], [0, 0], &[6_291_456, 2_359_296]));
        // Where they measured about even, or slower: a projection's
        // weight gradient, the attention's second product (10⁸
        // probabilities).
        let weight_grad = plan(768, 768, 8192, 1);
        assert!(!pays(&weight_grad, &[], [0, 0], &[6_291_456, 6_291_456]));
        let context = plan(64, 1024, 1024, 96);
        assert!(!pays(&context, &[], [0, 0], &[100_663_296, 6_291_456]));
        // Every outer call counts: 96 calls of a scores-sized product.
        let mut heads = plan(1024, 1024, 64, 1);
        heads.outer = vec![Dim {
            len: 96,
            a: 65_536,
            b: 65_536,
            out: 1 << 20,
            d: 0,
        }];
        assert!(pays(&heads, &[], [0, 0], &[6_291_456 / 8, 6_291_456 / 8]));
        assert!(!pays(
            &plan(1024, 1024, 64, 1),
            &[],
            [0, 0],
            &[65_536, 65_536]
        ));
        // Rows of 50,257 elements (a vocabulary) do not align, nor does an
        // operand starting at an odd element.
        let mut logits = plan(768, 1024, 50_257, 8);
        (logits.lda, logits.ldb) = (50_257, 50_257);
        assert!(!pays(&logits, &[], [0, 0], &[38_597_376, 411_705_344]));
        assert!(!pays(&square, &[], [3, 0], &[1 << 24, 1 << 24]));
        // The switch overrides the rule.
        set_half_copies(HalfCopies::Always);
        assert!(pays(&logits, &[], [0, 0], &[38_597_376, 411_705_344]));
        set_half_copies(HalfCopies::Never);
        assert!(!pays(&square, &[], [0, 0], &[1 << 24, 1 << 24]));
        set_half_copies(HalfCopies::WherePaying);
    }
}
