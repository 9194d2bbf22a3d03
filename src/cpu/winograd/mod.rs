//! Running a [`WinogradConv`] on the CPU: F(2×2, 3×3), cache-blocked.
//!
//! Owns the three transforms and their order. The filters are transformed
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
//! A tile past an odd output edge reads zeros past the image and writes
//! only its outputs inside. Must not decide when Winograd applies (the
//! planner does) nor change the [`WinogradConv`] it is given.

mod transforms;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::gemm::{self, Float};
use super::pool;
use super::wide::Width;
use crate::kernel::winograd::{WinogradConv, G};
use crate::Error;
use std::ops::Sub;
#[cfg(target_arch = "x86_64")]
use transforms::{input_avx2, input_avx512, output_avx2, output_avx512};
use transforms::{transform_input, transform_output, InputRun, OutputRun};

/// Bytes of one block's transformed input and products.
const BLOCK_BYTES: usize = 1 << 20;

/// The element types Winograd's kernel computes in, with the host's own
/// kernels for runs of 16 tiles where it has them.
pub(crate) trait WinogradFloat: Float + Sub<Output = Self> {
    fn input_run() -> Option<InputRun<Self>> {
        None
    }
    fn output_run() -> Option<OutputRun<Self>> {
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
    let (r, c) = (&w.rows, &w.cols);
    let image = span(
        w.image_base,
        &[
            (w.batch.len, w.batch.image),
            (w.in_channels.len, w.in_channels.image),
            (r.len + 2, r.image),
            (c.len + 2, c.image),
        ],
    );
    let weight = span(
        w.weight_base,
        &[
            (w.out_channels.len, w.out_channels.weight),
            (w.in_channels.len, w.in_channels.weight),
            (3, r.weight),
            (3, c.weight),
        ],
    );
    let output = span(
        0,
        &[
            (w.batch.len, w.batch.out),
            (w.out_channels.len, w.out_channels.out),
            (r.len, r.out),
            (c.len, c.out),
        ],
    );
    let fits = |(lo, hi): (isize, isize), len: usize| lo >= 0 && hi < len as isize;
    fits(image, inputs[0]) && fits(weight, inputs[1]) && fits(output, out)
}

/// Runs `w` over the argument buffers `inputs` into `out`.
pub(crate) fn run<T: WinogradFloat>(
    w: &WinogradConv,
    inputs: &[&[T]],
    out: &mut [T],
) -> Result<(), Error> {
    let (image, weight) = match (inputs.get(w.image_arg), inputs.get(w.weight_arg)) {
        (Some(i), Some(g)) => (*i, *g),
        _ => return Err(internal("an argument is missing")),
    };
    if !in_bounds(w, [image.len(), weight.len()], out.len()) {
        return Err(internal("a read or write past its buffer"));
    }
    if out.is_empty() {
        return Ok(());
    }
    let geo = Geometry::of::<T>(w);
    let u = transformed_filters(w, weight, &geo);
    let blocks = w.batch.len * geo.blocks();
    let out_ptr = Shared(out.as_mut_ptr());
    let width = Width::host();
    let body = |start: usize, end: usize| {
        let mut v = vec![T::from_f64(0.0); 16 * geo.v_slab];
        let mut m = vec![T::from_f64(0.0); 16 * geo.m_slab];
        for block in start..end {
            let (n, ty0) = (
                block / geo.blocks(),
                block % geo.blocks() * geo.rows_per_block,
            );
            let ty1 = (ty0 + geo.rows_per_block).min(geo.th);
            let tiles = (ty1 - ty0) * geo.tw;
            let v_block = &mut v[..];
            // SAFETY: the host has the width's instructions (`Width::host`).
            unsafe {
                match width {
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx512 => input_avx512(w, image, &geo, n, ty0..ty1, v_block),
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx2 => input_avx2(w, image, &geo, n, ty0..ty1, v_block),
                    _ => transform_input(w, image, &geo, n, ty0..ty1, v_block),
                }
            }
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
                    )
                };
            }
            let m_block = &m[..];
            // SAFETY: the block writes only its own tiles' outputs, in
            // bounds (`in_bounds`), and no other block writes them; the
            // host has the width's instructions.
            unsafe {
                match width {
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx512 => output_avx512(w, m_block, &geo, n, ty0..ty1, out_ptr),
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx2 => output_avx2(w, m_block, &geo, n, ty0..ty1, out_ptr),
                    _ => transform_output(w, m_block, &geo, n, ty0..ty1, out_ptr),
                }
            }
        }
    };
    pool::parallel_for(blocks, 1, &body);
    Ok(())
}

/// The output's address, shared by the blocks (each writes its own tiles).
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: see `run`: blocks write disjoint outputs.
unsafe impl<T> Sync for Shared<T> {}
unsafe impl<T> Send for Shared<T> {}

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
        let offset = w.weight_base
            + o as isize * w.out_channels.weight
            + c as isize * w.in_channels.weight
            + i as isize * w.rows.weight
            + j as isize * w.cols.weight;
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
