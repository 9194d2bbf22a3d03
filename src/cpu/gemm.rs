//! Running a [`Contraction`] (the planner's description of a batched
//! matrix product over strided views) with the `gemm` crate.
//!
//! Owns the element types gemm runs, the tiling of a product across the
//! threads of tenjin's pool, and the calls to [`gemm::gemm`]. What is a
//! contraction, and its dimensions and strides, is decided by
//! [`crate::planner::contraction`]; this module must not decide it.
//!
//! # Threads
//!
//! Every gemm call is single-threaded. The larger of M and N is cut into at
//! most 8 tiles of at least 128 rows or columns (edges on multiples of 16),
//! a tiling that depends on the shape only; [`Contraction::set_threads`]
//! (or the JIT pool's count) decides how many threads of tenjin's pool
//! share the tiles. gemm's blocking, hence each element's rounding, depends
//! on a call's sizes only, so results are bitwise equal for every thread
//! count (the tests check it). gemm's own rayon parallelism is not used: on
//! two cores it cost tens of microseconds per call and scaled poorly on
//! `x·wᵀ`. Batch and K-outer loops run inside each tile.

use crate::kernel::contraction::{offsets, Contraction};

use crate::dtype::Element;

/// Tile edges are multiples of this (elements of m or n).
const TILE_ALIGN: usize = 16;

/// Products are cut into tiles of at least this many rows or columns ...
const MIN_TILE: usize = 128;

/// ... and into at most this many tiles.
const MAX_TILES: usize = 8;

/// The operand and output addresses of one run, shared by the threads
/// computing its tiles.
struct Operands<T> {
    a: *const T,
    b: *const T,
    dst: *mut T,
}

// SAFETY: the threads only read `a` and `b` and write disjoint tiles of
// `dst` (see `Contraction::run`), all within one `run` call that outlives them.
unsafe impl<T> Sync for Operands<T> {}

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
            out.fill(T::ZERO);
            return;
        }
        let beta = T::from_f64(self.scale);
        let n_batch: usize = self.batch.iter().map(|d| d.len).product();
        let n_k: usize = self.k_outer.iter().map(|d| d.len).product();
        let (m, n, k) = (self.m, self.n, self.k);
        // The larger of m and n is cut into contiguous tiles, each computed
        // by a single-threaded gemm call; threads share the tiles through
        // tenjin's own pool (a dispatch costs about a microsecond; gemm's
        // rayon parallelism cost tens of microseconds per call and scaled
        // poorly on two cores). The tiling depends on the shape only, never
        // on the thread count: gemm's blocking (and so the rounding of each
        // element) depends on the sizes of a call, so results stay bitwise
        // identical for any number of threads. Tile edges are multiples of
        // 16 (whole micro-kernel columns).
        let split_n = n.len >= m.len;
        let total = if split_n { n.len } else { m.len };
        let parts = (total / MIN_TILE).clamp(1, MAX_TILES);
        let edge = |p: usize| ((total * p / parts).div_ceil(TILE_ALIGN) * TILE_ALIGN).min(total);
        let ptrs = Operands {
            a: inputs[self.arg_a].as_ptr().wrapping_add(self.base_a),
            b: inputs[self.arg_b].as_ptr().wrapping_add(self.base_b),
            dst: out.as_mut_ptr(),
        };
        let ptrs = &ptrs;
        let tile = |p0: usize, p1: usize| {
            for p in p0..p1 {
                let (lo, hi) = (edge(p), edge(p + 1));
                if lo >= hi {
                    continue;
                }
                let (mut mt, mut nt) = (m, n);
                let (mut a_off, mut b_off) = (0isize, 0isize);
                let o_off = if split_n {
                    nt.len = hi - lo;
                    b_off = lo as isize * n.b;
                    lo as isize * n.out
                } else {
                    mt.len = hi - lo;
                    a_off = lo as isize * m.a;
                    lo as isize * m.out
                };
                // SAFETY: `detect` proved that every element the loop nest
                // reads is inside its argument's declared shape (offsets from
                // `base_*` stay in `0..len`), the lengths were checked above,
                // and distinct output variables have distinct row-major
                // strides, so every write lands in `out` and no two writes of
                // one gemm call alias; tiles cover disjoint output rows or
                // columns, so concurrent calls write disjoint elements. Inputs
                // are shared borrows and `out` is exclusive, so operands never
                // alias the output.
                unsafe {
                    for bi in 0..n_batch {
                        let (ba, bb, bo) = offsets(&self.batch, bi);
                        for ki in 0..n_k {
                            let (ka, kb, _) = offsets(&self.k_outer, ki);
                            gemm::gemm(
                                mt.len,
                                nt.len,
                                k.len,
                                ptrs.dst.offset(bo + o_off),
                                n.out,
                                m.out,
                                ki > 0,
                                ptrs.a.offset(ba + ka + a_off),
                                k.a,
                                m.a,
                                ptrs.b.offset(bb + kb + b_off),
                                n.b,
                                k.b,
                                T::ONE,
                                beta,
                                false,
                                false,
                                false,
                                gemm::Parallelism::None,
                            );
                        }
                    }
                }
            }
        };
        if parts > 1 && threads > 1 {
            super::pool::parallel_for(parts, 1, &tile);
        } else {
            tile(0, parts);
        }
    }
}
