//! Running a [`Contraction`] (the planner's description of a batched
//! matrix product over strided views) with tenjin's own GEMM.
//!
//! Owns the tiling of a product across the threads of tenjin's pool, the
//! batch loop around each single-threaded product, the folding of the outer
//! summed dimensions into one K (tables of offsets, `Terms`: a
//! convolution's taps read straight from the image) and of the batch into
//! M or N where `Contraction::folded` allows (tables of row offsets,
//! `Rows`: a convolution's output rows read from its padded image, one
//! product per image: implicit GEMM), the packing of a
//! factor the whole batch shares, and the mirror of a symmetric product.
//! The product itself is BLIS-style (`blis`: cache blocks and packing from
//! the views, `pack`; register-tiled micro-kernels, `kernels` and `x86`:
//! AVX-512 and AVX2 with FMA picked at run time, a portable kernel
//! elsewhere or when `TENJIN_SIMD=f32x4` forces it). What is a contraction,
//! and its dimensions and strides, is decided by
//! [`crate::planner::contraction`]; this module must not decide it.
//!
//! # Threads
//!
//! The larger of M and N is cut into one tile per thread of at least 128
//! rows or columns (edges on multiples of the register tile; a symmetric
//! product's rows by equal areas of its lower triangle), each a
//! single-threaded product. The blocks of K, hence each element's
//! rounding, depend on the whole product's shape and the kernel's `kc`
//! only, never on the tiling, so results are bitwise equal for every
//! thread count (the tests check it).

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod bf16;
/// No tile unit off x86-64.
#[cfg(not(target_arch = "x86_64"))]
mod amx {
    pub(super) const MR: usize = 1;
    pub(super) const NR: usize = 1;
    pub(super) fn available() -> bool {
        false
    }
}
/// No bf16 products off x86-64: the f32 kernels run them.
#[cfg(not(target_arch = "x86_64"))]
mod bf16 {
    pub(super) const MR: usize = 1;
    pub(super) const NR: usize = 1;
    pub(super) const KC: usize = 512;
    pub(super) fn available() -> bool {
        false
    }
    pub(super) unsafe fn gemm(_: usize, _: super::Product<f32>) {
        unreachable!("no bf16 products off x86-64 (`available` is false)")
    }
}
mod blis;
mod gemv;
mod kernels;
mod pack;
mod pack_transposed;
#[cfg(target_arch = "x86_64")]
mod pairs;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use blis::{Operand, Product};
pub(crate) use kernels::Float;
use pack::Index;

use crate::dtype::{DType, Element};
use crate::kernel::contraction::{diag_offset, offsets, Contraction, Dim};
use crate::kernel::fold::Folded;

/// `c` as the CPU runs it best: a product whose C is column-major (its M
/// contiguous: a convolution phase's positions against its channels) with
/// its factors' roles exchanged, so that C is row-major and a factor the
/// whole batch shares is packed once; any other as it is. The same sums in
/// the same order (`blis::gemm` computed such a C as its transpose).
pub(crate) fn oriented(c: &Contraction) -> Contraction {
    if !c.symmetric && blis::computes_transpose(c.m.out, c.n.out) {
        c.swapped()
    } else {
        c.clone()
    }
}

/// `C = alpha · A · B` (or `C += …` when `accumulate`) on this thread,
/// for A of `m × k` (element `(i, p)` at `a + i·rs_a + p·cs_a`), B of `k
/// × n` (element `(p, j)` at `b + p·rs_b + j·cs_b`) and a row-major C of
/// `m × n` at `c`, its rows `ldc` apart: the product of kernels built
/// around GEMMs (`super::winograd`). Its blocks of K, hence its rounding,
/// depend on `n` and `k` only.
///
/// # Safety
///
/// Every element of the three views is valid (C's for writes), C
/// overlaps neither factor, and `m, n, k ≥ 1`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product<T: Float>(
    [m, n, k]: [usize; 3],
    alpha: T,
    a: *const T,
    [rs_a, cs_a]: [isize; 2],
    b: *const T,
    [rs_b, cs_b]: [isize; 2],
    c: *mut T,
    ldc: isize,
    accumulate: bool,
) {
    let kernel = T::kernel_for(n);
    let kc = blis::k_block(&kernel, n, k);
    let operand = |ptr, rows, k| Operand {
        ptr,
        rows: Index::Stride(rows),
        k: Index::Stride(k),
        packed: std::ptr::null(),
    };
    let p = Product {
        m,
        n,
        k,
        alpha,
        a: operand(a, rs_a, cs_a),
        b: operand(b, cs_b, rs_b),
        diag: None,
        c,
        rs_c: ldc,
        cs_c: 1,
        accumulate,
        lower: None,
    };
    // SAFETY: as the caller promises.
    unsafe { blis::gemm(&kernel, kc, p) }
}

/// Products of bf16 operands of fewer terms `m·n·k` than this run with
/// the f32 kernels (see `Contraction::run`).
const MIN_BF16_PRODUCT: usize = 1 << 21;

/// Products are cut into tiles of at least this many rows or columns, one
/// per thread at most.
const MIN_TILE: usize = 128;

/// A factor shared by every product of a batch is packed once when its
/// packed form takes at most this many bytes (in L2, or L3 beside it:
/// reading it back costs less than packing it again from its source; a
/// convolution weight gradient's 1 MB factor over 5 taps: 3.2 -> 2.3 ms,
/// against 512 KiB).
const SHARED_PACK_BYTES: usize = 2 << 20;

/// The operand and output addresses of one run, shared by the threads
/// computing its tiles.
struct Operands<T> {
    a: *const T,
    b: *const T,
    /// The diagonal factor (null: none).
    d: *const T,
    dst: *mut T,
    /// Where the terms of K lie (tables owned by the run).
    terms: Terms,
}

// SAFETY: the threads only read `a`, `b`, `d` and the tables of `terms`,
// and write disjoint tiles of `dst` (see `Contraction::run`), all within
// one `run` call that outlives them.
unsafe impl<T> Sync for Operands<T> {}

/// The micro-kernel products in `dtype` run with in this process (its
/// register tile and instruction set, e.g. `"avx512 6x32"`), or `None` for
/// a dtype no GEMM computes. Benchmarks report it. `BF16`: the kernel of
/// products of bf16 operands (`Contraction::set_half_operands`), where the
/// host has one.
///
/// ```
/// let name = tenjin::jit::gemm::kernel_name(tenjin::DType::F32).unwrap();
/// assert!(["avx512", "avx2", "portable"].iter().any(|w| name.starts_with(w)));
/// ```
pub fn kernel_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some(f32::kernel().name),
        DType::F64 => Some(f64::kernel().name),
        DType::BF16 if amx::available() => Some("amx 32x32"),
        DType::BF16 if bf16::available() => Some("avx512_bf16 12x32"),
        _ => None,
    }
}

thread_local! {
    /// Products of bf16 operands this thread ran as bf16 pairs.
    static BF16_PRODUCTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many products this thread ran as bf16 pairs (`avx512_bf16`): for
/// tests and benchmarks that check which kernel a product took (per
/// thread, so tests running beside each other do not see each other's).
pub fn bf16_products_run() -> u64 {
    BF16_PRODUCTS.with(std::cell::Cell::get)
}

/// The terms of K of one product: the GEMM's K dimension, inside the
/// outer summed dimensions when there are some (the taps of a convolution
/// read as a window of the image), as one index, so that one product sums
/// every term (no partial sums written back to C per tap).
#[derive(Clone, Copy)]
struct Terms {
    len: usize,
    a: Index,
    b: Index,
    d: Index,
}

/// Offsets of every term in each operand and the diagonal factor.
type Tables = Option<[Vec<isize>; 3]>;

impl Terms {
    /// The offset tables of the summed dimensions `dims` (outermost
    /// first; none when there is one).
    fn tables(dims: &[Dim]) -> Tables {
        let (&k, outer) = dims.split_last()?;
        if outer.is_empty() {
            return None;
        }
        let n_outer: usize = outer.iter().map(|d| d.len).product();
        let mut tables: [Vec<isize>; 3] = Default::default();
        for t in &mut tables {
            t.reserve(n_outer * k.len);
        }
        for q in 0..n_outer {
            let (a, b, _) = offsets(outer, q);
            let d = diag_offset(outer, q);
            for p in 0..k.len as isize {
                tables[0].push(a + p * k.a);
                tables[1].push(b + p * k.b);
                tables[2].push(d + p * k.d);
            }
        }
        Some(tables)
    }

    fn of(k: Dim, tables: &Tables) -> Terms {
        match tables {
            None => Terms {
                len: k.len,
                a: Index::Stride(k.a),
                b: Index::Stride(k.b),
                d: Index::Stride(k.d),
            },
            Some([a, b, d]) => Terms {
                len: a.len(),
                a: Index::Table(a.as_ptr()),
                b: Index::Table(b.as_ptr()),
                d: Index::Table(d.as_ptr()),
            },
        }
    }
}

/// M or N of one run: its rows, their output stride, and where they lie
/// in their factor (a stride, or a table when the batch was folded in).
struct Rows {
    len: usize,
    out: isize,
    stride: isize,
    table: Option<Vec<isize>>,
}

impl Rows {
    /// The rows of `dims` (outermost first), whose stride in their factor
    /// is `stride`.
    fn of(dims: &[Dim], stride: fn(&Dim) -> isize) -> Rows {
        Rows {
            len: Folded::len(dims),
            out: Folded::out_stride(dims),
            stride: dims.last().map_or(0, stride),
            table: Folded::row_offsets(dims, stride),
        }
    }

    /// Where the rows from `lo ≤ len` lie, for the packing (a table lives
    /// as long as `self`), and the offset to add to the factor's pointer.
    fn from(&self, lo: usize) -> (Index, isize) {
        match &self.table {
            Some(t) => (Index::Table(t[lo.min(t.len())..].as_ptr()), 0),
            None => (Index::Stride(self.stride), lo as isize * self.stride),
        }
    }
}

/// `inputs` as slices of `U`.
///
/// # Safety
///
/// `T` and `U` are the same type.
pub(crate) unsafe fn retype<'a, T, U>(inputs: &'a [&'a [T]]) -> &'a [&'a [U]] {
    std::slice::from_raw_parts(inputs.as_ptr() as *const &[U], inputs.len())
}

/// `out` as a slice of `U`.
///
/// # Safety
///
/// `T` and `U` are the same type.
pub(crate) unsafe fn retype_mut<T, U>(out: &mut [T]) -> &mut [U] {
    std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut U, out.len())
}

impl Contraction {
    /// Computes the function in f32. `inputs` are ordered like `f.args()`
    /// and `out` is the dense row-major output; the caller has checked their
    /// lengths against the declared shapes (a mismatch is a bug: it fails a
    /// debug assertion, and in release builds nothing is written).
    pub fn run_f32(&self, inputs: &[&[f32]], out: &mut [f32]) {
        self.run(inputs, out, self.threads)
    }

    /// Computes the function in f64; see [`Contraction::run_f32`].
    pub fn run_f64(&self, inputs: &[&[f64]], out: &mut [f64]) {
        self.run(inputs, out, self.threads)
    }

    /// As `run_f32`/`run_f64` with an explicit thread count (the JIT passes
    /// the pool's current one without copying the plan).
    pub(crate) fn run_with_threads<T: Element>(
        &self,
        inputs: &[&[T]],
        out: &mut [T],
        threads: usize,
    ) {
        self.run(inputs, out, threads.max(1))
    }

    fn lengths_match<T>(&self, inputs: &[&[T]], out: &[T]) -> bool {
        inputs.len() == self.arg_lens.len()
            && inputs
                .iter()
                .zip(&self.arg_lens)
                .all(|(x, &n)| x.len() == n)
            && out.len() == self.out_len
    }

    fn run<T: Element>(&self, inputs: &[&[T]], out: &mut [T], threads: usize) {
        // SAFETY: `Element` is sealed, and its `DTYPE` names the type
        // itself, so each cast is from a type to itself.
        unsafe {
            match T::DTYPE {
                DType::F32 => self.run_float::<f32>(retype(inputs), retype_mut(out), threads),
                DType::F64 => self.run_float::<f64>(retype(inputs), retype_mut(out), threads),
                other => debug_assert!(false, "gemm contraction: no GEMM computes {other:?}"),
            }
        }
    }

    fn run_float<T: Float>(&self, inputs: &[&[T]], out: &mut [T], threads: usize) {
        if !self.lengths_match(inputs, out) {
            debug_assert!(
                false,
                "gemm contraction: buffer lengths {:?} (output {}) do not match the declared {:?} (output {})",
                inputs.iter().map(|x| x.len()).collect::<Vec<_>>(),
                out.len(),
                self.arg_lens,
                self.out_len
            );
            return;
        }
        if self.out_len == 0 {
            return;
        }
        if self.k_total == 0 {
            out.fill(T::default());
            return;
        }
        let alpha = T::from_f64(self.scale);
        // The batch folded into M and N where it nests there in C (rows
        // of a factor through tables: a convolution over a padded image
        // is one product, not one per row of the image).
        let folded = self.folded();
        let n_batch = Folded::len(&folded.batch);
        let (mut m, mut n) = (Rows::of(&folded.m, |d| d.a), Rows::of(&folded.n, |d| d.b));
        // A symmetric C is its own transpose: with M's and N's output
        // strides swapped, a C whose M is contiguous is written row-major,
        // and its lower triangle suffices (where `blis::gemm` would
        // compute a column-major C whole).
        if self.symmetric && blis::computes_transpose(m.out, n.out) {
            std::mem::swap(&mut m.out, &mut n.out);
        }
        let (m, n) = (&m, &n);
        let tables = Terms::tables(&folded.k);
        let k = folded.k.last().copied().unwrap_or(Dim::UNIT);
        let terms = Terms::of(k, &tables);
        // The whole product's blocks of K, not a tile's (`blis::k_block`);
        // `blis::gemm` computes Cᵀ when C's columns are contiguous, and its
        // N is then M.
        let transposed = blis::computes_transpose(m.out, n.out);
        let n_all = if transposed { m.len } else { n.len };
        let kernel = T::kernel_for(n_all);
        // bf16 operands multiplied as bf16 pairs (`bf16`), where the host
        // has the instruction; matrix–vector products stay with `gemv`,
        // and small products with the f32 kernels (below
        // `MIN_BF16_PRODUCT` terms, packing pairs costs more than the
        // faster kernel saves: a 64-128-10 MLP's step took 211 µs, not 71).
        let pairs = self.half_operands == Some(DType::BF16)
            && T::DTYPE == DType::F32
            && self.diag.is_none()
            && m.len > 1
            && n.len > 1
            && m.len.saturating_mul(n.len).saturating_mul(terms.len) >= MIN_BF16_PRODUCT
            && bf16::available();
        if pairs {
            BF16_PRODUCTS.with(|n| n.set(n.get() + 1));
        }
        // (Pairs are packed from the f32 buffers: their B is 4 bytes an
        // element, as the f32 kernels'.)
        let kc = if pairs {
            blis::k_block_of(bf16::KC, 4, n_all, terms.len)
        } else {
            blis::k_block(&kernel, n_all, terms.len)
        };
        // A symmetric product computes its lower triangle (rows split so
        // that every tile holds about as many elements of it) and mirrors
        // it; `blis::gemm` transposes a column-major C, which would turn
        // the triangle, so that case computes the whole.
        let symmetric = self.symmetric && !transposed && m.len > 1;
        // The larger of m and n is cut into contiguous tiles, one per
        // thread, each computed by a single-threaded product through
        // tenjin's own pool (a dispatch costs about a microsecond). The
        // rounding of each element depends on K's blocks only (`blis`), so
        // results stay bitwise identical for any number of threads. Tile
        // edges are multiples of the register tile.
        let split_n = !symmetric && n.len >= m.len;
        let total = if split_n { n.len } else { m.len };
        let (mr, nr) = if pairs && amx::available() {
            (amx::MR, amx::NR)
        } else if pairs {
            (bf16::MR, bf16::NR)
        } else {
            (kernel.mr, kernel.nr)
        };
        let align = if split_n { nr } else { mr };
        let parts = (total / MIN_TILE).clamp(1, threads);
        let edge = |p: usize| {
            let share = p as f64 / parts as f64;
            let share = if symmetric { share.sqrt() } else { share };
            let at = (total as f64 * share).round() as usize;
            (at.div_ceil(align) * align).min(total)
        };
        let ptrs = Operands {
            a: inputs[self.arg_a].as_ptr().wrapping_add(self.base_a),
            b: inputs[self.arg_b].as_ptr().wrapping_add(self.base_b),
            d: self.diag.map_or(std::ptr::null(), |d| {
                inputs[d.arg].as_ptr().wrapping_add(d.base)
            }),
            dst: out.as_mut_ptr(),
            terms,
        };
        let ptrs = &ptrs;
        // Too few rows or columns for a tile per thread, but a batch of
        // products (a convolution's weight gradient, one product per
        // tap): the batch is split too, each product still computed whole
        // by one thread (the same bits at any thread count).
        let batch_parts = if parts < threads {
            (threads / parts).min(n_batch).max(1)
        } else {
            1
        };
        let tile = |w0: usize, w1: usize| {
            for w in w0..w1 {
                let (p, chunk) = (w / batch_parts, w % batch_parts);
                let batches = n_batch * chunk / batch_parts..n_batch * (chunk + 1) / batch_parts;
                let (lo, hi) = (edge(p), edge(p + 1));
                if lo >= hi {
                    continue;
                }
                // The tile: rows `lo..hi` of N (or of M).
                let (a_lo, b_lo) = if split_n { (0, lo) } else { (lo, 0) };
                let (mt, nt) = if split_n {
                    (m.len, hi - lo)
                } else {
                    (hi - lo, n.len)
                };
                let (a_rows, a_off) = m.from(a_lo);
                let (b_rows, b_off) = n.from(b_lo);
                let o_off = a_lo as isize * m.out + b_lo as isize * n.out;
                // SAFETY: `detect` proved that every element the loop nest
                // reads is inside its argument's declared shape (offsets from
                // `base_*` stay in `0..len`), the lengths were checked above,
                // and distinct output variables have distinct row-major
                // strides, so every write lands in `out` and no two writes of
                // one product alias; tiles cover disjoint output rows or
                // columns, so concurrent calls write disjoint elements. Inputs
                // are shared borrows and `out` is exclusive, so operands never
                // alias the output.
                unsafe {
                    // A factor the whole batch shares (a convolution's
                    // weights against every image) is packed once (not
                    // for matrix–vector products, which pack nothing).
                    let shared = |stride: fn(&Dim) -> isize, rows: usize| {
                        let bytes = rows * ptrs.terms.len * std::mem::size_of::<T>();
                        !pairs
                            && n_batch > 1
                            && !transposed
                            && mt > 1
                            && nt > 1
                            && folded.batch.iter().all(|d| stride(d) == 0)
                            && bytes <= SHARED_PACK_BYTES
                    };
                    // The factors of batch point `(ba, bb)`, read through
                    // `packed` when the batch shares one.
                    let a_at = |ba: isize, packed: *const T| Operand {
                        ptr: ptrs.a.wrapping_offset(ba + a_off),
                        rows: a_rows,
                        k: ptrs.terms.a,
                        packed,
                    };
                    let b_at = |bb: isize, packed: *const T| Operand {
                        ptr: ptrs.b.wrapping_offset(bb + b_off),
                        rows: b_rows,
                        k: ptrs.terms.b,
                        packed,
                    };
                    let diag = (!ptrs.d.is_null()).then_some((ptrs.d, ptrs.terms.d));
                    let none = std::ptr::null();
                    let a_in_place = matches!(ptrs.terms.a, Index::Stride(1));
                    let (len, mr, nr) = (ptrs.terms.len, kernel.mr, kernel.nr);
                    let a_shared = (shared(|d| d.a, mt) && !a_in_place)
                        .then(|| blis::prepack(mr, kc, mt, len, a_at(0, none), None));
                    let b_shared = shared(|d| d.b, nt)
                        .then(|| blis::prepack(nr, kc, nt, len, b_at(0, none), diag));
                    let packed = |v: &Option<Vec<T>>| v.as_ref().map_or(none, |v| v.as_ptr());
                    for bi in batches.clone() {
                        let (ba, bb, bo) = offsets(&folded.batch, bi);
                        let product = Product {
                            m: mt,
                            n: nt,
                            k: len,
                            alpha,
                            a: a_at(ba, packed(&a_shared)),
                            b: b_at(bb, packed(&b_shared)),
                            diag,
                            c: ptrs.dst.offset(bo + o_off),
                            rs_c: m.out,
                            cs_c: n.out,
                            accumulate: false,
                            lower: symmetric.then_some(lo as isize),
                        };
                        if pairs {
                            bf16_gemm(kc, product);
                        } else {
                            blis::gemm(&kernel, kc, product);
                        }
                    }
                }
            }
        };
        let work = parts * batch_parts;
        if work > 1 && threads > 1 {
            super::pool::parallel_for(work, 1, &tile);
        } else {
            tile(0, work);
        }
        if symmetric {
            for bi in 0..n_batch {
                let (_, _, bo) = offsets(&folded.batch, bi);
                // SAFETY: the batch slice's square output lies in `out`
                // (as for the products above), and no product runs now.
                unsafe { blis::mirror_lower(out.as_mut_ptr().offset(bo), m.len, m.out, n.out) };
            }
        }
    }
}

/// Runs a product of f32 views holding bf16 values as bf16 pairs (an f64
/// product is a bug: `pairs` checks the type).
///
/// # Safety
///
/// As for `blis::gemm`, on a host where `bf16::available`.
unsafe fn bf16_gemm<T: 'static>(kc: usize, p: Product<T>) {
    match (&p as &dyn std::any::Any).downcast_ref::<Product<f32>>() {
        #[cfg(target_arch = "x86_64")]
        Some(&p) if amx::available() => amx::gemm(kc, p, amx::tiles),
        Some(&p) => bf16::gemm(kc, p),
        None => debug_assert!(false, "a bf16 product of f64 operands"),
    }
}
