//! A 3×3 stride-1 convolution, or its filter gradient, computed by
//! Winograd's minimal filtering algorithms F(2×2, 3×3) and F(3×3, 2×2)
//! (Lavin and Gray, 2016), as data.
//!
//! Owns [`WinogradConv`]: which of the two ([`Form`]), where the image,
//! the other operand (the weights, or the output gradient) and the output
//! lie (an [`Axis`] per dimension, strides in elements, any layout), the
//! algorithms' constant matrices ([`B_T`], [`G`], [`A_T`]) and their counts
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
//! where the direct convolution takes 36: 2.25× fewer.
//!
//! The filter gradient `dw[o; c; a; b] = Σ_n Σ_y Σ_x image[n; c; y + a;
//! x + b] · dy[n; o; y; x]` is the same algorithm transposed (F(3×3,
//! 2×2)): the same patches `V = Bᵀ d B`, each 2×2 tile of `dy` as `A dy
//! Aᵀ`, the 16 products `dW_ξ[o; c] = Σ_t (A dy Aᵀ)_ξ[o; t] · V_ξ[c; t]`
//! summed over every tile, and `dw = Gᵀ dW G` per channel pair. The transforms add
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

/// Which of the two computations a [`WinogradConv`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `out[n; o; y; x] = scale · Σ_c Σ_{ky < 3} Σ_{kx < 3}
    /// image[n; c; y + ky; x + kx] · other[o; c; ky; kx]` (the other
    /// operand: the weights).
    Convolution,
    /// `out[o; c; ky; kx] = scale · Σ_n Σ_y Σ_x image[n; c; y + ky;
    /// x + kx] · other[n; o; y; x]` (the other operand: the output
    /// gradient).
    FilterGradient,
}

/// One dimension: its length and its strides, in elements, in the image,
/// the other operand and the output (0 where it does not index that
/// tensor). The two spatial dimensions run over the positions `y`, `x`
/// (the convolution's output positions); each also stands for the tap
/// paired with it (`image[y + ky]`): for a [`Form::Convolution`] its
/// `other` is the tap's stride in the weights and `out` the position's in
/// the output; for a [`Form::FilterGradient`], `other` is the position's
/// stride in the output gradient and `out` the tap's in the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    pub(crate) len: usize,
    pub(crate) image: isize,
    pub(crate) other: isize,
    pub(crate) out: isize,
}

/// A [`Form`] over strided views of two argument buffers, into a dense
/// output.
#[derive(Clone, Debug, PartialEq)]
pub struct WinogradConv {
    pub(crate) form: Form,
    /// Argument numbers (into the function's arguments) of the image and
    /// the other operand.
    pub(crate) image_arg: usize,
    pub(crate) other_arg: usize,
    /// Declared length of every argument buffer, and of the output.
    pub(crate) arg_lens: Vec<usize>,
    pub(crate) out_len: usize,
    /// Offsets (elements) of `image[0; 0; 0; 0]` and `other[0; 0; 0; 0]`.
    pub(crate) image_base: isize,
    pub(crate) other_base: isize,
    pub(crate) batch: Axis,
    pub(crate) out_channels: Axis,
    pub(crate) in_channels: Axis,
    /// The positions' rows and columns (columns: the dimension with the
    /// smaller image stride, usually 1).
    pub(crate) rows: Axis,
    pub(crate) cols: Axis,
    pub(crate) scale: f64,
}

impl WinogradConv {
    /// The 2×2 tiles covering one image's positions: `(rows, columns)`.
    pub fn tiles(&self) -> (usize, usize) {
        (self.rows.len.div_ceil(2), self.cols.len.div_ceil(2))
    }

    /// The 2×2 tiles of every image.
    pub fn tile_count(&self) -> usize {
        let (th, tw) = self.tiles();
        self.batch.len * th * tw
    }

    /// Multiply-adds of the 16 products of one run, times 2.
    pub fn product_flops(&self) -> usize {
        2 * 16 * self.tile_count() * self.in_channels.len * self.out_channels.len
    }

    /// An estimate of one run's operations: the products' multiply-adds,
    /// and 16 values per tile and channel transformed.
    pub fn work(&self) -> u64 {
        let channels = self.in_channels.len + self.out_channels.len;
        (self.product_flops() / 2 + 16 * self.tile_count() * channels) as u64
    }

    /// `(batch, out channels, in channels, rows, columns)` (the rows and
    /// columns of the positions).
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
