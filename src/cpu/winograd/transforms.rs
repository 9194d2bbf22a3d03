//! The transforms of Winograd's F(2×2, 3×3) and F(3×3, 2×2): `Bᵀ d B` of
//! the image's 4×4 patches, `A g Aᵀ` of the output gradient's 2×2 tiles
//! and `Aᵀ M A` of the products, along a tile row.
//!
//! Owns [`input_tile`], [`gradient_tile`] and [`output_tile`] (written
//! once, for single values and for runs of tiles, [`Lanes`]), and the
//! loops over one block's tile rows ([`input_at`], [`gradient_at`],
//! [`output_at`], each compiled at the host's width): runs of 16 tiles
//! through the host's own kernel where it has one
//! (`super::x86`, AVX-512 f32: a run's columns de-interleaved by permutes),
//! else runs of 16 and 4 tiles as plain loops compiled at the host's
//! width, then one tile at a time at the edges (zeros past the image,
//! outputs past the edge not written). Every path computes each value by
//! the same additions in the same order, so all give the same bits. Must
//! not choose blocks (`super`) nor compute products.

use super::{Geometry, Shared, WinogradFloat};
use crate::cpu::wide::Width;
use crate::kernel::winograd::WinogradConv;
use std::ops::{Add, Neg, Range, Sub};

/// A kernel transforming the patches of 16 tiles: the patch rows' starts
/// (at the run's first column), where `ξ = 0` of the first tile goes, and
/// the distance between two values `ξ` of one tile.
pub(super) type InputRun<T> = unsafe fn(rows: [*const T; 4], dst: *mut T, stride: usize);

/// A kernel transforming 16 tiles of an output gradient: its two rows'
/// starts (at the run's first column; unit column stride), where `ξ = 0`
/// of the first tile goes, and the distance between two values `ξ`.
pub(super) type GradientRun<T> = unsafe fn(rows: [*const T; 2], dst: *mut T, stride: usize);

/// A kernel writing the outputs of 16 tiles: where `ξ = 0` of the first
/// tile's products lies, the distance between two values `ξ`, and the
/// two output rows' starts (at the run's first column; unit column
/// stride).
pub(super) type OutputRun<T> = unsafe fn(m: *const T, stride: usize, rows: [*mut T; 2]);

/// `$at`: `$inner` at the host's width ([`Width::host`]), by copies of it
/// compiled for AVX-512 and for AVX2. The transforms are loops of
/// additions over runs of tiles, which the compiler vectorises at the
/// width it may use; an addition rounds the same at every width, so the
/// results do not depend on it. `unsafe` when `$inner` is.
macro_rules! at_widths {
    ($(#[$doc:meta])* unsafe fn $at:ident = $inner:ident $args:tt) => {
        at_widths!(@ [$(#[$doc])*] [unsafe] $at $inner $args);
    };
    ($(#[$doc:meta])* fn $at:ident = $inner:ident $args:tt) => {
        at_widths!(@ [$(#[$doc])*] [] $at $inner $args);
    };
    (@ [$($doc:tt)*] [$($unsafety:tt)*] $at:ident $inner:ident ($($arg:ident: $ty:ty),*)) => {
        $($doc)*
        #[allow(unused_unsafe)] // (a safe `$inner` needs none)
        pub(super) $($unsafety)* fn $at<T: WinogradFloat>($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            unsafe fn wide<T: WinogradFloat>($($arg: $ty),*) {
                // SAFETY: forwarded from the caller.
                unsafe { $inner($($arg),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn narrow<T: WinogradFloat>($($arg: $ty),*) {
                // SAFETY: forwarded from the caller.
                unsafe { $inner($($arg),*) }
            }
            // SAFETY: the host has the width's instructions
            // (`Width::host` checked them); the rest is the caller's.
            unsafe {
                match Width::host() {
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx512 => wide($($arg),*),
                    #[cfg(target_arch = "x86_64")]
                    Width::Avx2 => narrow($($arg),*),
                    _ => $inner($($arg),*),
                }
            }
        }
    };
}

at_widths!(
    /// [`transform_input`] at the host's width.
    fn input_at = transform_input(
        w: &WinogradConv, image: &[T], geo: &Geometry, n: usize, ty: Range<usize>, v: &mut [T]
    )
);
at_widths!(
    /// [`transform_gradient`] at the host's width.
    fn gradient_at = transform_gradient(
        w: &WinogradConv, dy: &[T], geo: &Geometry, n: usize, ty: Range<usize>, m: &mut [T]
    )
);
at_widths!(
    /// [`transform_output`] at the host's width.
    ///
    /// # Safety
    ///
    /// As for [`transform_output`].
    unsafe fn output_at = transform_output(
        w: &WinogradConv, m: &[T], geo: &Geometry, n: usize, ty: Range<usize>, out: Shared<T>
    )
);

/// Tiles transformed together along a tile row: a vector of f32 on
/// AVX-512, then a narrower one for short rows.
const WIDE: usize = 16;
const NARROW: usize = 4;

/// One value per tile of a run of `L` tiles, added and subtracted lane by
/// lane (the transforms below run on single values and on these alike).
#[derive(Clone, Copy)]
struct Lanes<T, const L: usize>([T; L]);

/// `$op` of [`Lanes`] as `$f` of each lane.
macro_rules! lanewise {
    ($op:ident, $method:ident, |$a:ident $(, $b:ident)?| $f:expr) => {
        impl<T: WinogradFloat, const L: usize> $op for Lanes<T, L> {
            type Output = Self;
            #[inline(always)]
            fn $method(mut self $(, $b: Self)?) -> Self {
                for l in 0..L {
                    let $a = self.0[l];
                    $(let $b = $b.0[l];)?
                    self.0[l] = $f;
                }
                self
            }
        }
    };
}

lanewise!(Add, add, |a, b| a + b);
lanewise!(Sub, sub, |a, b| a - b);
lanewise!(Neg, neg, |a| -a);

/// `Bᵀ d B` of a 4×4 patch, as the 16 values of the transformed tile.
#[inline(always)]
pub(super) fn input_tile<V: Copy + Add<Output = V> + Sub<Output = V>>(d: [[V; 4]; 4]) -> [V; 16] {
    // Bᵀ's rows: d0 − d2, d1 + d2, d2 − d1, d1 − d3 (`B_T`), down the
    // columns and then along the rows.
    let down = |j: usize| {
        [
            d[0][j] - d[2][j],
            d[1][j] + d[2][j],
            d[2][j] - d[1][j],
            d[1][j] - d[3][j],
        ]
    };
    let cols = [down(0), down(1), down(2), down(3)];
    let mut v = [d[0][0]; 16];
    for r in 0..4 {
        v[r * 4] = cols[0][r] - cols[2][r];
        v[r * 4 + 1] = cols[1][r] + cols[2][r];
        v[r * 4 + 2] = cols[2][r] - cols[1][r];
        v[r * 4 + 3] = cols[1][r] - cols[3][r];
    }
    v
}

/// `Aᵀ M A` of a transformed tile, as the 2×2 outputs.
#[inline(always)]
pub(super) fn output_tile<V: Copy + Add<Output = V> + Sub<Output = V>>(m: [V; 16]) -> [[V; 2]; 2] {
    // Aᵀ's rows: m0 + m1 + m2 and m1 − m2 − m3 (`A_T`).
    let down = |j: usize| [m[j] + m[4 + j] + m[8 + j], m[4 + j] - m[8 + j] - m[12 + j]];
    let cols = [down(0), down(1), down(2), down(3)];
    let mut y = [[m[0]; 2]; 2];
    for (a, row) in y.iter_mut().enumerate() {
        row[0] = cols[0][a] + cols[1][a] + cols[2][a];
        row[1] = cols[1][a] - cols[2][a] - cols[3][a];
    }
    y
}

/// The transformed patches of image `n`'s tile rows `ty` into `v`, as
/// `V_ξ[c; t]` (ξ's slabs `geo.v_slab` apart, then channel, then the
/// block's tile `t`).
#[inline(always)]
fn transform_input<T: WinogradFloat>(
    w: &WinogradConv,
    image: &[T],
    geo: &Geometry,
    n: usize,
    ty: Range<usize>,
    v: &mut [T],
) {
    let tiles = ty.len() * geo.tw;
    let fast = T::input_run();
    let (hi, wi) = (geo.h + 2, geo.w + 2);
    let (sy, sx) = (w.rows.image, w.cols.image);
    // Tiles whose patch lies wholly inside the image's columns
    // (`2·t + 3 < w + 2`).
    let full = geo.w / 2;
    for c in 0..geo.c {
        let plane = w.image_base + n as isize * w.batch.image + c as isize * w.in_channels.image;
        for (r, y) in ty.clone().enumerate() {
            let top = 2 * y;
            let first = plane + top as isize * sy;
            let row = |i: usize| first + i as isize * sy;
            // Value `ξ` of tile `tx` at `ξ · slab + base + tx`.
            let base = c * tiles + r * geo.tw;
            // The rows of the patch inside the image.
            let rows_in = (hi - top).min(4);
            let mut tx = 0;
            if rows_in == 4 {
                let rows = [row(0), row(1), row(2), row(3)];
                if let (Some(run), 1) = (fast, sx) {
                    while tx + 16 <= full {
                        // SAFETY: the patches of tiles `tx..tx + 16` lie
                        // in the image (`super::in_bounds` checked its
                        // extent, `full` keeps them inside its columns),
                        // their values in `v`.
                        unsafe {
                            let from = rows.map(|r| image.as_ptr().offset(r + 2 * tx as isize));
                            run(from, v.as_mut_ptr().add(base + tx), geo.v_slab);
                        }
                        tx += 16;
                    }
                }
                let to = (base, geo.v_slab);
                tx = input_runs::<T, WIDE>(image, (rows, sx), tx..full, to, v);
                tx = input_runs::<T, NARROW>(image, (rows, sx), tx..full, to, v);
            }
            // The rest, one tile at a time, zeros past the image.
            let load = |i: usize, x: usize| -> T {
                if i < rows_in && x < wi {
                    image[(row(i) + x as isize * sx) as usize]
                } else {
                    T::from_f64(0.0)
                }
            };
            for tx in tx..geo.tw {
                let d = [0, 1, 2, 3].map(|i| [0, 1, 2, 3].map(|j| load(i, 2 * tx + j)));
                for (xi, value) in input_tile(d).into_iter().enumerate() {
                    v[xi * geo.v_slab + base + tx] = value;
                }
            }
        }
    }
}

/// The tiles `tiles` (from its start, in runs of `L` below its end) whose
/// patch rows start at offsets `rows` of `image`, columns `sx` apart,
/// transformed into `v` (value `ξ` of tile `t` at `ξ · slab + base + t`).
/// Returns the first tile left.
#[inline(always)]
fn input_runs<T: WinogradFloat, const L: usize>(
    image: &[T],
    (rows, sx): ([isize; 4], isize),
    tiles: Range<usize>,
    (base, slab): (usize, usize),
    v: &mut [T],
) -> usize {
    let (mut tx, end) = (tiles.start, tiles.end);
    while tx + L <= end {
        // (Loops, not `array::map`: those closures are not inlined.)
        let mut d = [[Lanes([T::from_f64(0.0); L]); 4]; 4];
        for (i, &row) in rows.iter().enumerate() {
            if sx == 1 {
                // Two columns per tile: the run's columns, read once.
                let start = (row + 2 * tx as isize) as usize;
                let seg = &image[start..start + 2 * L + 2];
                for (j, lanes) in d[i].iter_mut().enumerate() {
                    for l in 0..L {
                        lanes.0[l] = seg[2 * l + j];
                    }
                }
            } else {
                for (j, lanes) in d[i].iter_mut().enumerate() {
                    for l in 0..L {
                        lanes.0[l] = image[(row + (2 * (tx + l) + j) as isize * sx) as usize];
                    }
                }
            }
        }
        for (xi, value) in input_tile(d).into_iter().enumerate() {
            let start = xi * slab + base + tx;
            v[start..start + L].copy_from_slice(&value.0);
        }
        tx += L;
    }
    tx
}

/// `A g Aᵀ` of a 2×2 tile of the output gradient, as the 16 values of the
/// transformed tile (`A`: the transpose of `A_T`).
#[inline(always)]
pub(super) fn gradient_tile<V>(g: [[V; 2]; 2]) -> [V; 16]
where
    V: Copy + Add<Output = V> + Sub<Output = V> + Neg<Output = V>,
{
    // A's rows: g0, g0 + g1, g0 − g1, −g1; down the columns, then along
    // the rows.
    let down = |j: usize| [g[0][j], g[0][j] + g[1][j], g[0][j] - g[1][j], -g[1][j]];
    let cols = [down(0), down(1)];
    let mut u = [g[0][0]; 16];
    for r in 0..4 {
        u[r * 4] = cols[0][r];
        u[r * 4 + 1] = cols[0][r] + cols[1][r];
        u[r * 4 + 2] = cols[0][r] - cols[1][r];
        u[r * 4 + 3] = -cols[1][r];
    }
    u
}

/// The transformed 2×2 tiles of the output gradient `dy` of image `n`'s
/// tile rows `ty` into `m`, as `(A dy Aᵀ)_ξ[o; t]` (ξ's slabs `geo.m_slab`
/// apart, then output channel, then the block's tile `t`); zeros past
/// the positions.
#[inline(always)]
fn transform_gradient<T: WinogradFloat>(
    w: &WinogradConv,
    dy: &[T],
    geo: &Geometry,
    n: usize,
    ty: Range<usize>,
    m: &mut [T],
) {
    let tiles = ty.len() * geo.tw;
    let fast = T::gradient_run();
    let (sy, sx) = (w.rows.other, w.cols.other);
    let zero = T::from_f64(0.0);
    // Tiles whose 2×2 positions lie inside the columns.
    let full = geo.w / 2;
    for o in 0..geo.o {
        let plane = w.other_base + n as isize * w.batch.other + o as isize * w.out_channels.other;
        for (r, y) in ty.clone().enumerate() {
            let base = o * tiles + r * geo.tw;
            let row = |i: usize| plane + (2 * y + i) as isize * sy;
            let mut tx = 0;
            if 2 * y + 1 < geo.h && sx == 1 {
                let rows = [row(0), row(1)];
                if let Some(run) = fast {
                    while tx + 16 <= full {
                        // SAFETY: the tiles' positions lie in `dy`
                        // (`super::in_bounds` checked its extent, `full`
                        // keeps them inside its columns), their values in
                        // `m`.
                        unsafe {
                            let from = rows.map(|r| dy.as_ptr().offset(r + 2 * tx as isize));
                            run(from, m.as_mut_ptr().add(base + tx), geo.m_slab);
                        }
                        tx += 16;
                    }
                }
                let to = (base, geo.m_slab);
                tx = gradient_runs::<T, WIDE>(dy, rows, tx..full, to, m);
                tx = gradient_runs::<T, NARROW>(dy, rows, tx..full, to, m);
            }
            // The rest, one tile at a time, zeros past the positions.
            for tx in tx..geo.tw {
                let mut g = [[zero; 2]; 2];
                for (i, line) in g.iter_mut().enumerate() {
                    for (j, value) in line.iter_mut().enumerate() {
                        let (y, x) = (2 * y + i, 2 * tx + j);
                        if y < geo.h && x < geo.w {
                            *value = dy[(row(i) + x as isize * sx) as usize];
                        }
                    }
                }
                for (xi, value) in gradient_tile(g).into_iter().enumerate() {
                    m[xi * geo.m_slab + base + tx] = value;
                }
            }
        }
    }
}

/// The tiles `tiles` (from its start, in runs of `L` below its end) of
/// the two rows of `dy` from offsets `rows` (unit column stride),
/// transformed into `m` (value `ξ` of tile `t` at `ξ · slab + base + t`).
/// Returns the first tile left.
#[inline(always)]
fn gradient_runs<T: WinogradFloat, const L: usize>(
    dy: &[T],
    rows: [isize; 2],
    tiles: Range<usize>,
    (base, slab): (usize, usize),
    m: &mut [T],
) -> usize {
    let (mut tx, end) = (tiles.start, tiles.end);
    while tx + L <= end {
        // (Loops, not `array::map`: those closures are not inlined.)
        let mut g = [[Lanes([T::from_f64(0.0); L]); 2]; 2];
        for (i, &row) in rows.iter().enumerate() {
            let start = (row + 2 * tx as isize) as usize;
            let seg = &dy[start..start + 2 * L];
            for (j, lanes) in g[i].iter_mut().enumerate() {
                for l in 0..L {
                    lanes.0[l] = seg[2 * l + j];
                }
            }
        }
        for (xi, value) in gradient_tile(g).into_iter().enumerate() {
            let start = xi * slab + base + tx;
            m[start..start + L].copy_from_slice(&value.0);
        }
        tx += L;
    }
    tx
}

/// Writes the outputs of image `n`'s tile rows `ty` from the block's
/// products `m` (`M_ξ[o; t]`, ξ's slabs `geo.m_slab` apart).
///
/// # Safety
///
/// `out` is the output buffer, every output of these tiles is in it
/// (`in_bounds`) and no other thread writes them meanwhile.
#[inline(always)]
unsafe fn transform_output<T: WinogradFloat>(
    w: &WinogradConv,
    m: &[T],
    geo: &Geometry,
    n: usize,
    ty: Range<usize>,
    out: Shared<T>,
) {
    let tiles = ty.len() * geo.tw;
    let fast = T::output_run();
    let (oy, ox) = (w.rows.out, w.cols.out);
    // Tiles whose 2×2 outputs all lie inside the output's columns.
    let full = geo.w / 2;
    for o in 0..geo.o {
        let plane = n as isize * w.batch.out + o as isize * w.out_channels.out;
        for (r, y) in ty.clone().enumerate() {
            let t0 = r * geo.tw;
            let top = plane + 2 * y as isize * oy;
            let rows_out = (geo.h - 2 * y).min(2);
            // Value `ξ` of tile `tx` at `ξ · slab + base + tx`.
            let base = o * tiles + t0;
            let mut tx = 0;
            if rows_out == 2 {
                let rows = [top, top + oy];
                if let (Some(run), 1) = (fast, ox) {
                    while tx + 16 <= full {
                        let dst = rows.map(|r| unsafe { out.0.offset(r + 2 * tx as isize) });
                        // SAFETY: as the caller promises; `full` keeps the
                        // tiles' outputs inside the output's columns.
                        unsafe { run(m.as_ptr().add(base + tx), geo.m_slab, dst) };
                        tx += 16;
                    }
                }
                // SAFETY: as the caller promises.
                let from = (base, geo.m_slab);
                unsafe {
                    tx = output_runs::<T, WIDE>(m, from, tx..full, (rows, ox), out);
                    tx = output_runs::<T, NARROW>(m, from, tx..full, (rows, ox), out);
                }
            }
            for tx in tx..geo.tw {
                let values = output_tile(std::array::from_fn(|xi| m[xi * geo.m_slab + base + tx]));
                let cols_out = (geo.w - 2 * tx).min(2);
                for (a, row) in values.iter().enumerate().take(rows_out) {
                    for (b, &value) in row.iter().enumerate().take(cols_out) {
                        let at = top + a as isize * oy + (2 * tx + b) as isize * ox;
                        // SAFETY: as the caller promises.
                        unsafe { *out.0.offset(at) = value };
                    }
                }
            }
        }
    }
}

/// Writes the 2×2 outputs of the tiles `tiles` (from its start, in runs
/// of `L` below its end) from the products `m` (value `ξ` of tile `t` at
/// `ξ · slab + base + t`) into the two output rows at offsets `rows` of
/// `out`, columns `ox` apart. Returns the first tile left.
///
/// # Safety
///
/// As for [`transform_output`].
#[inline(always)]
unsafe fn output_runs<T: WinogradFloat, const L: usize>(
    m: &[T],
    (base, slab): (usize, usize),
    tiles: Range<usize>,
    (rows, ox): ([isize; 2], isize),
    out: Shared<T>,
) -> usize {
    let (mut tx, end) = (tiles.start, tiles.end);
    while tx + L <= end {
        let mut tile = [Lanes([T::from_f64(0.0); L]); 16];
        for (xi, lanes) in tile.iter_mut().enumerate() {
            let start = xi * slab + base + tx;
            lanes.0.copy_from_slice(&m[start..start + L]);
        }
        let values = output_tile(tile);
        for (row, pair) in rows.iter().zip(values) {
            // SAFETY: as the caller promises.
            unsafe {
                let first = out.0.offset(row + (2 * tx) as isize * ox);
                if ox == 1 {
                    let dst = std::slice::from_raw_parts_mut(first, 2 * L);
                    for l in 0..L {
                        dst[2 * l] = pair[0].0[l];
                        dst[2 * l + 1] = pair[1].0[l];
                    }
                } else {
                    for l in 0..L {
                        *first.offset(2 * l as isize * ox) = pair[0].0[l];
                        *first.offset((2 * l + 1) as isize * ox) = pair[1].0[l];
                    }
                }
            }
        }
        tx += L;
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::winograd::{A_T, B_T};

    #[test]
    fn the_transforms_are_the_constant_matrices() {
        // Bᵀ d B against the matrices, for a patch of distinct values.
        let d: [[f64; 4]; 4] = std::array::from_fn(|i| {
            std::array::from_fn(|j| (i * 7 + j * 3) as f64 + 0.25 * (i * j) as f64)
        });
        let v = input_tile(d);
        for r in 0..4 {
            for s in 0..4 {
                let want: f64 = (0..4)
                    .flat_map(|i| (0..4).map(move |j| (i, j)))
                    .map(|(i, j)| B_T[r][i] * d[i][j] * B_T[s][j])
                    .sum();
                assert_eq!(v[r * 4 + s], want);
            }
        }
        // A g Aᵀ against the matrix (A = A_Tᵀ).
        let g = [[1.5f64, -2.25], [0.75, 3.0]];
        let u = gradient_tile(g);
        for r in 0..4 {
            for s in 0..4 {
                let want: f64 = (0..2)
                    .flat_map(|i| (0..2).map(move |j| (i, j)))
                    .map(|(i, j)| A_T[i][r] * g[i][j] * A_T[j][s])
                    .sum();
                assert_eq!(u[r * 4 + s], want);
            }
        }
        let m: [f64; 16] = std::array::from_fn(|k| (k * k) as f64 - 3.5);
        let y = output_tile(m);
        for a in 0..2 {
            for b in 0..2 {
                let want: f64 = (0..16).map(|k| A_T[a][k / 4] * m[k] * A_T[b][k % 4]).sum();
                assert_eq!(y[a][b], want);
            }
        }
    }

    /// Values with all kinds of mantissas (so that any change in the
    /// order of the additions shows in the bits).
    fn noise(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state as f32 / u32::MAX as f32 - 0.5) * 3.0
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_host_kernels_give_the_portable_bits() {
        use crate::cpu::wide::Width;
        if Width::supported() != Width::Avx512 {
            eprintln!("skipped: no AVX-512 on this host");
            return;
        }
        // Input: four rows of 40 columns, 16 tiles from column 2·3.
        let image = noise(160, 7);
        let rows = [0, 40, 80, 120];
        let (tx, stride) = (3, 19);
        let mut fast = vec![0.0f32; 16 * stride + 16];
        let mut portable = fast.clone();
        // SAFETY: the four rows hold columns 6..40, `fast` the 16 runs.
        unsafe {
            let from = rows.map(|r: isize| image.as_ptr().offset(r + 2 * tx as isize));
            super::super::x86::input_run(from, fast.as_mut_ptr(), stride);
        }
        // (Tile `t` at `base + t`: `base` puts tile `tx` at 0.)
        let mut shifted = vec![0.0f32; fast.len() + tx];
        input_runs::<f32, 16>(&image, (rows, 1), tx..tx + 16, (0, stride), &mut shifted);
        portable.copy_from_slice(&shifted[tx..]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&portable));
        assert!(fast.iter().any(|&x| x != 0.0));
        // Output: 16 tiles' products, into two rows of 32 columns.
        let m = noise(16 * stride + 16, 11);
        let mut fast = vec![0.0f32; 64];
        let mut portable = fast.clone();
        // SAFETY: `m` holds the 16 runs, the outputs two rows of 32.
        unsafe {
            let rows = [fast.as_mut_ptr(), fast.as_mut_ptr().add(32)];
            super::super::x86::output_run(m.as_ptr(), stride, rows);
            let out = Shared(portable.as_mut_ptr());
            output_runs::<f32, 16>(&m, (0, stride), 0..16, ([0, 32], 1), out);
        }
        assert_eq!(bits(&fast), bits(&portable));
        // An output gradient's tiles: two rows of 40, 16 tiles from 2·3.
        let dy = noise(80, 13);
        let mut fast = vec![0.0f32; 16 * stride + 16];
        let mut portable = fast.clone();
        // SAFETY: the rows hold columns 6..38, `fast` the 16 runs.
        unsafe {
            let from = [0isize, 40].map(|r| dy.as_ptr().offset(r + 2 * tx as isize));
            super::super::x86::gradient_run(from, fast.as_mut_ptr(), stride);
        }
        // (Tile `t` at `base + t`: the first `tx` values skipped.)
        let mut shifted = vec![0.0f32; fast.len() + tx];
        gradient_runs::<f32, 16>(&dy, [0, 40], tx..tx + 16, (0, stride), &mut shifted);
        portable.copy_from_slice(&shifted[tx..]);
        assert_eq!(bits(&fast), bits(&portable));
    }
}
