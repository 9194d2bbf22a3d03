//! Running a [`WinogradConv`] on the CPU: F(2×2, 3×3) and its transpose
//! F(3×3, 2×2) for filter gradients, cache-blocked.
//!
//! Owns the transforms' order and the blocks. The filters are transformed
//! once per run (`U_ξ[o; c] = (G g Gᵀ)_ξ`). The output's 2×2 tiles are cut
//! into blocks of whole tile rows of one image, sized so that a block's
//! transformed input and products (`16 · (C + O)` values per tile) stay
//! in L2; each block transforms its patches (`V_ξ[c; t] = (Bᵀ d B)_ξ`),
//! runs its 16 products `M_ξ = U_ξ · V_ξ` with tenjin's GEMM
//! (`super::gemm::product`), and writes its tiles `Aᵀ M A`. Blocks run in
//! parallel on the pool; the blocks, hence every result's rounding,
//! depend on the shapes only, so results are bitwise equal at every
//! thread count. The transforms run along a tile row, so with a unit
//! column stride they are plain vector loops.
//!
//! A filter gradient uses the same blocks and patches: each block also
//! transforms its 2×2 tiles of the output gradient (`A dy Aᵀ`) and adds
//! its 16 products `dW_ξ += (A dy Aᵀ)_ξ · V_ξᵀ` (summed over its tiles)
//! into the partial sums of its group of blocks; the groups (a fixed
//! number, by the shapes only) are added in order at the end and each
//! channel pair's `Gᵀ dW G` written.
//!
//! A tile past an odd output edge reads zeros past the image and writes
//! only its outputs inside. Must not decide when Winograd applies (the
//! planner does) nor change the [`WinogradConv`] it is given.

mod transforms;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::gemm::{self, Float};
use super::pool;
use super::wide::Width;
use crate::dtype::{not_computable, Element};
use crate::kernel::winograd::{Form, WinogradConv, G};
use crate::{DType, Error};
use std::ops::{Neg, Range, Sub};
use transforms::{gradient_at, input_at, output_at, GradientRun, InputRun, OutputRun};

/// Bytes of one block's transformed input and products.
const BLOCK_BYTES: usize = 1 << 20;

/// The element types Winograd's kernel computes in, with the host's own
/// kernels for runs of 16 tiles where it has them.
pub(crate) trait WinogradFloat: Float + Sub<Output = Self> + Neg<Output = Self> {
    fn input_run() -> Option<InputRun<Self>> {
        None
    }
    fn output_run() -> Option<OutputRun<Self>> {
        None
    }
    fn gradient_run() -> Option<GradientRun<Self>> {
        None
    }
}

impl WinogradFloat for f32 {
    #[cfg(target_arch = "x86_64")]
    fn input_run() -> Option<InputRun<f32>> {
        (Width::host() == Width::Avx512).then_some(x86::input_run as InputRun<f32>)
    }
    #[cfg(target_arch = "x86_64")]
    fn output_run() -> Option<OutputRun<f32>> {
        (Width::host() == Width::Avx512).then_some(x86::output_run as OutputRun<f32>)
    }
    #[cfg(target_arch = "x86_64")]
    fn gradient_run() -> Option<GradientRun<f32>> {
        (Width::host() == Width::Avx512).then_some(x86::gradient_run as GradientRun<f32>)
    }
}

impl WinogradFloat for f64 {}

/// The geometry of one run, in elements.
#[derive(Clone, Copy)]
struct Geometry {
    /// Output channels, input channels, rows, columns.
    o: usize,
    c: usize,
    h: usize,
    w: usize,
    /// Tile rows and columns of one image; tile rows per block.
    th: usize,
    tw: usize,
    rows_per_block: usize,
    /// Elements between the 16 slabs `V_ξ` of a block's transformed
    /// input, and between the 16 `M_ξ` of its products: a slab's size
    /// and a cache line more, so that the 16 values of one tile do not
    /// all fall in one L1 set (a slab of 32 KiB would put them there).
    v_slab: usize,
    m_slab: usize,
}

impl Geometry {
    fn of<T>(w: &WinogradConv) -> Geometry {
        let [_, o, c, h, width] = w.sizes();
        let (th, tw) = w.tiles();
        let per_tile = 16 * (c + o) * std::mem::size_of::<T>();
        let rows_per_block = (BLOCK_BYTES / per_tile / tw.max(1)).clamp(1, th.max(1));
        let line = 64 / std::mem::size_of::<T>();
        let block_tiles = rows_per_block * tw;
        Geometry {
            v_slab: c * block_tiles + line,
            m_slab: o * block_tiles + line,
            o,
            c,
            h,
            w: width,
            th,
            tw,
            rows_per_block,
        }
    }

    /// Blocks per image.
    fn blocks(&self) -> usize {
        self.th.div_ceil(self.rows_per_block)
    }

    /// Block `block`'s image and tile rows.
    fn block(&self, block: usize) -> (usize, Range<usize>) {
        let (n, ty0) = (
            block / self.blocks(),
            block % self.blocks() * self.rows_per_block,
        );
        (n, ty0..(ty0 + self.rows_per_block).min(self.th))
    }
}

/// Whether every element `w` reads and writes lies in its buffers (the
/// planner builds it from a function whose reads are in bounds; this is
/// checked again before any unchecked access).
fn in_bounds(w: &WinogradConv, inputs: [usize; 2], out: usize) -> bool {
    // The extreme offsets of a view: base + Σ (len − 1)·stride over its
    // positive and its negative strides.
    let span = |base: isize, dims: &[(usize, isize)]| {
        dims.iter().fold((base, base), |(lo, hi), &(len, s)| {
            let reach = (len as isize - 1) * s;
            (lo + reach.min(0), hi + reach.max(0))
        })
    };
    let (n, o, c) = (&w.batch, &w.out_channels, &w.in_channels);
    let (r, k) = (&w.rows, &w.cols);
    let image = span(
        w.image_base,
        &[
            (n.len, n.image),
            (c.len, c.image),
            (r.len + 2, r.image),
            (k.len + 2, k.image),
        ],
    );
    let (other, output) = match w.form {
        Form::Convolution => (
            [
                (o.len, o.other),
                (c.len, c.other),
                (3, r.other),
                (3, k.other),
            ],
            [
                (n.len, n.out),
                (o.len, o.out),
                (r.len, r.out),
                (k.len, k.out),
            ],
        ),
        Form::FilterGradient => (
            [
                (n.len, n.other),
                (o.len, o.other),
                (r.len, r.other),
                (k.len, k.other),
            ],
            [(o.len, o.out), (c.len, c.out), (3, r.out), (3, k.out)],
        ),
    };
    let fits = |(lo, hi): (isize, isize), len: usize| lo >= 0 && hi < len as isize;
    fits(image, inputs[0])
        && fits(span(w.other_base, &other), inputs[1])
        && fits(span(0, &output), out)
}

/// [`run`] over buffers of any element type: f32 and f64 run, any other
/// is an error.
pub(crate) fn run_element<T: Element>(
    w: &WinogradConv,
    inputs: &[&[T]],
    out: &mut [T],
) -> Result<(), Error> {
    // SAFETY: `T` is the type its `DTYPE` names.
    unsafe {
        match T::DTYPE {
            DType::F32 => run::<f32>(w, gemm::retype(inputs), gemm::retype_mut(out)),
            DType::F64 => run::<f64>(w, gemm::retype(inputs), gemm::retype_mut(out)),
            d => Err(not_computable("winograd", d)),
        }
    }
}

/// Runs `w` over the argument buffers `inputs` into `out`.
fn run<T: WinogradFloat>(w: &WinogradConv, inputs: &[&[T]], out: &mut [T]) -> Result<(), Error> {
    let (image, other) = match (inputs.get(w.image_arg), inputs.get(w.other_arg)) {
        (Some(i), Some(g)) => (*i, *g),
        _ => return Err(internal("an argument is missing")),
    };
    if !in_bounds(w, [image.len(), other.len()], out.len()) {
        return Err(internal("a read or write past its buffer"));
    }
    if out.is_empty() {
        return Ok(());
    }
    let geo = Geometry::of::<T>(w);
    match w.form {
        Form::Convolution => convolve(w, image, other, &geo, out),
        Form::FilterGradient => filter_gradient(w, image, other, &geo, out),
    }
    Ok(())
}

/// The convolution: each block's patches, products and outputs in turn.
fn convolve<T: WinogradFloat>(
    w: &WinogradConv,
    image: &[T],
    weight: &[T],
    geo: &Geometry,
    out: &mut [T],
) {
    let u = transformed_filters(w, weight, geo);
    let blocks = w.batch.len * geo.blocks();
    let out_ptr = Shared(out.as_mut_ptr());
    let body = |start: usize, end: usize| {
        let mut v = vec![T::from_f64(0.0); 16 * geo.v_slab];
        let mut m = vec![T::from_f64(0.0); 16 * geo.m_slab];
        for block in start..end {
            let (n, ty) = geo.block(block);
            let tiles = ty.len() * geo.tw;
            input_at(w, image, geo, n, ty.clone(), &mut v);
            for xi in 0..16 {
                let (uo, vo, mo) = (xi * geo.o * geo.c, xi * geo.v_slab, xi * geo.m_slab);
                // SAFETY: U_ξ is O × C, V_ξ is C × tiles and M_ξ is O ×
                // tiles, row-major, within their buffers; M is apart from
                // both factors.
                unsafe {
                    gemm::product(
                        [geo.o, tiles, geo.c],
                        T::from_f64(w.scale),
                        u[uo..].as_ptr(),
                        [geo.c as isize, 1],
                        v[vo..].as_ptr(),
                        [tiles as isize, 1],
                        m[mo..].as_mut_ptr(),
                        tiles as isize,
                        false,
                    )
                };
            }
            // SAFETY: the block writes only its own tiles' outputs, in
            // bounds (`in_bounds`), and no other block writes them.
            unsafe { output_at(w, &m, geo, n, ty, out_ptr) };
        }
    };
    pool::parallel_for(blocks, 1, &body);
}

/// Bytes of the filter gradient's partial sums, all groups together.
const PARTIAL_BYTES: usize = 32 << 20;

/// The most groups of blocks the filter gradient sums apart.
const MAX_GROUPS: usize = 8;

/// The filter gradient: the blocks cut into a fixed number of groups (by
/// the shapes only), each group summing its blocks' 16 products in order
/// into its own partial `dW_ξ`, the groups run in parallel, then their
/// partials added in order (in f64) and `dw = Gᵀ dW G` for each pair of
/// channels. Every sum has one order at every thread count.
fn filter_gradient<T: WinogradFloat>(
    w: &WinogradConv,
    image: &[T],
    dy: &[T],
    geo: &Geometry,
    out: &mut [T],
) {
    let blocks = w.batch.len * geo.blocks();
    let per_group = 16 * geo.o * geo.c;
    let fit = PARTIAL_BYTES / (per_group * std::mem::size_of::<T>()).max(1);
    let groups = fit.clamp(1, MAX_GROUPS).min(blocks);
    let mut partials = vec![T::from_f64(0.0); groups * per_group];
    let parts = Shared(partials.as_mut_ptr());
    let body = |start: usize, end: usize| {
        let mut v = vec![T::from_f64(0.0); 16 * geo.v_slab];
        let mut m = vec![T::from_f64(0.0); 16 * geo.m_slab];
        for group in start..end {
            let first = group * blocks / groups;
            for block in first..(group + 1) * blocks / groups {
                let (n, ty) = geo.block(block);
                let tiles = ty.len() * geo.tw;
                input_at(w, image, geo, n, ty.clone(), &mut v);
                gradient_at(w, dy, geo, n, ty, &mut m);
                for xi in 0..16 {
                    let (vo, mo) = (xi * geo.v_slab, xi * geo.m_slab);
                    // SAFETY: (A dy Aᵀ)_ξ is O × tiles and V_ξ is C ×
                    // tiles, row-major (read as its transpose), within
                    // their buffers; the group's dW_ξ (O × C) is its own
                    // part of `partials`, written by this thread only.
                    unsafe {
                        gemm::product(
                            [geo.o, geo.c, tiles],
                            T::from_f64(1.0),
                            m[mo..].as_ptr(),
                            [tiles as isize, 1],
                            v[vo..].as_ptr(),
                            [1, tiles as isize],
                            parts.at(group * per_group + xi * geo.o * geo.c),
                            geo.c as isize,
                            block > first,
                        )
                    };
                }
            }
        }
    };
    pool::parallel_for(groups, 1, &body);
    let (oo, co, ro, ko) = (
        w.out_channels.out,
        w.in_channels.out,
        w.rows.out,
        w.cols.out,
    );
    for o in 0..geo.o {
        for c in 0..geo.c {
            let at = o * geo.c + c;
            let dw: [f64; 16] = std::array::from_fn(|xi| {
                (0..groups)
                    .map(|g| partials[g * per_group + xi * geo.o * geo.c + at].to_f64())
                    .sum()
            });
            // Gᵀ dW G, in f64: one rounding.
            #[allow(clippy::needless_range_loop)] // (`a`, `b` index G's columns)
            for a in 0..3 {
                for b in 0..3 {
                    let x: f64 = (0..16).map(|k| G[k / 4][a] * dw[k] * G[k % 4][b]).sum();
                    let to = o as isize * oo + c as isize * co + a as isize * ro + b as isize * ko;
                    out[to as usize] = T::from_f64(w.scale * x);
                }
            }
        }
    }
}

/// A buffer's address shared by the blocks or groups that write disjoint
/// parts of it (the output's tiles, the filter gradient's partial sums).
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: shared only where every thread writes its own part (above).
unsafe impl<T> Sync for Shared<T> {}
unsafe impl<T> Send for Shared<T> {}

impl<T> Shared<T> {
    /// Element `i`'s address (a method, so that closures capture the
    /// whole `Shared`, which is `Sync`, not its pointer).
    fn at(self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

fn internal(what: &str) -> Error {
    Error::Invalid {
        function: "winograd".into(),
        message: format!("internal: {what}"),
    }
}

/// `U_ξ[o; c] = (G g Gᵀ)_ξ` for every filter `g = weight[o; c]`, as 16
/// matrices of `O × C`.
fn transformed_filters<T: WinogradFloat>(w: &WinogradConv, weight: &[T], geo: &Geometry) -> Vec<T> {
    let mut u = vec![T::from_f64(0.0); 16 * geo.o * geo.c];
    let at = |o: usize, c: usize, i: usize, j: usize| {
        let offset = w.other_base
            + o as isize * w.out_channels.other
            + c as isize * w.in_channels.other
            + i as isize * w.rows.other
            + j as isize * w.cols.other;
        weight[offset as usize].to_f64()
    };
    for o in 0..geo.o {
        for c in 0..geo.c {
            // G g (4 × 3), then (G g) Gᵀ (4 × 4), in f64: the filters are
            // few, and the transform is then exact up to one rounding.
            let mut gg = [[0.0f64; 3]; 4];
            for (r, row) in gg.iter_mut().enumerate() {
                for (j, x) in row.iter_mut().enumerate() {
                    *x = (0..3).map(|i| G[r][i] * at(o, c, i, j)).sum();
                }
            }
            for r in 0..4 {
                for s in 0..4 {
                    let x: f64 = (0..3).map(|j| gg[r][j] * G[s][j]).sum();
                    u[(r * 4 + s) * geo.o * geo.c + o * geo.c + c] = T::from_f64(x);
                }
            }
        }
    }
    u
}
