//! A 3×3 stride-1 convolution computed by Winograd's minimal filtering
//! algorithm F(2×2, 3×3) (Lavin and Gray, 2016), as data.
//!
//! Owns [`WinogradConv`]: where the image, the weights and the output lie
//! (an [`Axis`] per dimension, strides in elements, any layout), the
//! algorithm's constant matrices ([`B_T`], [`G`], [`A_T`]) and its counts
//! (tiles, products, flops). The planner recognises such a convolution on
//! an index function and builds this, only when the user asked for it
//! (`crate::planner::winograd`); the CPU backend runs it (`crate::cpu::winograd`).
//! Must not decide when it applies, nor run it.
//!
//! # The algorithm
//!
//! The output is cut into 2×2 tiles. For each tile and input channel, the
//! 4×4 patch `d` of the image under it becomes `V = Bᵀ d B`; for each pair
//! of channels the 3×3 filter `g` becomes `U = G g Gᵀ`; for each of the 16
//! positions ξ of the 4×4 transformed tile, the products `M_ξ[o; t] =
//! Σ_c U_ξ[o; c] · V_ξ[c; t]` are 16 GEMMs; and each tile's output is
//! `Y = Aᵀ M A`. That takes 16 multiply-adds per tile and channel pair
//! where the direct convolution takes 36: 2.25× fewer. The transforms add
//! and subtract, so the result differs from the direct sum by rounding:
//! the f32 error is measured and documented (`BENCHMARKS.md`), and the
//! algorithm is off unless the user turns it on.

/// `Bᵀ`: the input transform `V = Bᵀ d B` of a 4×4 patch `d`.
pub const B_T: [[f64; 4]; 4] = [
    [1.0, 0.0, -1.0, 0.0],
    [0.0, 1.0, 1.0, 0.0],
    [0.0, -1.0, 1.0, 0.0],
    [0.0, 1.0, 0.0, -1.0],
];

/// `G`: the filter transform `U = G g Gᵀ` of a 3×3 filter `g`.
pub const G: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];

/// `Aᵀ`: the output transform `Y = Aᵀ M A` of a transformed 4×4 tile.
pub const A_T: [[f64; 4]; 2] = [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]];

/// One dimension of the convolution: its length and its strides, in
/// elements, in the image, the weights and the output (0 where it does
/// not index that tensor). For the two spatial dimensions, `weight` is
/// the stride of the filter tap paired with it (`image[y + ky]`,
/// `weight[ky]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    pub(crate) len: usize,
    pub(crate) image: isize,
    pub(crate) weight: isize,
    pub(crate) out: isize,
}

/// `out[n; o; y; x] = scale · Σ_c Σ_{ky < 3} Σ_{kx < 3}
/// image[n; c; y + ky; x + kx] · weight[o; c; ky; kx]` over strided views
/// of two argument buffers, into a dense output.
#[derive(Clone, Debug, PartialEq)]
pub struct WinogradConv {
    /// Argument numbers (into the function's arguments) of the image and
    /// the weights.
    pub(crate) image_arg: usize,
    pub(crate) weight_arg: usize,
    /// Declared length of every argument buffer, and of the output.
    pub(crate) arg_lens: Vec<usize>,
    pub(crate) out_len: usize,
    /// Offsets (elements) of `image[0; 0; 0; 0]` and `weight[0; 0; 0; 0]`.
    pub(crate) image_base: isize,
    pub(crate) weight_base: isize,
    pub(crate) batch: Axis,
    pub(crate) out_channels: Axis,
    pub(crate) in_channels: Axis,
    /// The output's rows and columns (columns: the dimension with the
    /// smaller image stride, usually 1).
    pub(crate) rows: Axis,
    pub(crate) cols: Axis,
    pub(crate) scale: f64,
}

impl WinogradConv {
    /// The 2×2 tiles covering one image's output: `(rows, columns)`.
    pub fn tiles(&self) -> (usize, usize) {
        (self.rows.len.div_ceil(2), self.cols.len.div_ceil(2))
    }

    /// Multiply-adds of the 16 products of one run, times 2.
    pub fn product_flops(&self) -> usize {
        let (th, tw) = self.tiles();
        2 * 16 * self.batch.len * th * tw * self.in_channels.len * self.out_channels.len
    }

    /// Floating-point operations of the direct convolution it replaces:
    /// `2 · |output| · 9 · channels`.
    pub fn direct_flops(&self) -> usize {
        2 * self.out_len * 9 * self.in_channels.len
    }

    /// `(batch, out channels, in channels, rows, columns)`.
    pub fn sizes(&self) -> [usize; 5] {
        [
            self.batch.len,
            self.out_channels.len,
            self.in_channels.len,
            self.rows.len,
            self.cols.len,
        ]
    }
}
