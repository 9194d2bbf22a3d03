//! [`Conv2d`]: a 2-D convolution layer.

use super::{check_bias, config_error, init, Mode, Module};
use crate::{DType, Error, PaddingMode, Tensor};

/// Stride, padding, dilation, groups, bias and padding mode of a
/// [`Conv2d`] (PyTorch's defaults: 1, 0, 1, 1, with a bias, zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Input and output channels are split into `groups` independent
    /// groups (both counts must be divisible by it).
    pub groups: usize,
    pub bias: bool,
    /// What the padding holds (PyTorch's `padding_mode`): zeros are a
    /// guard inside the convolution; the other modes pad the input first
    /// ([`Tensor::pad_mode`]).
    pub padding_mode: PaddingMode,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            bias: true,
            padding_mode: PaddingMode::Zeros,
        }
    }
}

/// A 2-D convolution layer, as `torch.nn.Conv2d`: input `[N, C, H, W]`,
/// weight `[O, C/groups, KH, KW]`, bias `[O]`, both initialised from
/// `U(-1/√fan_in, 1/√fan_in)` with `fan_in = C/groups·KH·KW`. The forward
/// pass is [`Tensor::conv2d`]: one index function, zero padding as a guard.
///
/// ```
/// use tenjin::nn::{Conv2d, Conv2dConfig, Module};
/// use tenjin::{DType, Tensor};
/// let conv = Conv2d::with_config(
///     4, 8, [3, 3],
///     Conv2dConfig { padding: [1, 1], stride: [2, 2], groups: 2, ..Default::default() },
///     DType::F32, 0)?;
/// assert_eq!(conv.weight().shape(), &[8, 2, 3, 3]);
/// let y = conv.forward(&Tensor::randn(&[2, 4, 9, 9], DType::F32, 1)?)?;
/// assert_eq!(y.shape(), &[2, 8, 5, 5]);
/// assert!(Conv2d::with_config(3, 8, [3, 3], Conv2dConfig { groups: 2, ..Default::default() },
///                             DType::F32, 0).is_err()); // 3 channels, 2 groups
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    config: Conv2dConfig,
    mode: Mode,
}

impl Conv2d {
    /// An f32 layer with PyTorch's default configuration, initialised from
    /// `seed`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        seed: u64,
    ) -> Result<Conv2d, Error> {
        Conv2d::with_config(
            in_channels,
            out_channels,
            kernel_size,
            Conv2dConfig::default(),
            DType::F32,
            seed,
        )
    }

    /// A layer with `config`, of `dtype`, initialised from `seed`.
    pub fn with_config(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        config: Conv2dConfig,
        dtype: DType,
        seed: u64,
    ) -> Result<Conv2d, Error> {
        check_config(&config)?;
        let g = config.groups;
        if !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
            return Err(config_error(
                "Conv2d",
                format!(
                    "{in_channels} input and {out_channels} output channels are not both divisible by groups = {g}"
                ),
            ));
        }
        let shape = [
            out_channels,
            in_channels / g,
            kernel_size[0],
            kernel_size[1],
        ];
        let fan_in = shape[1] * shape[2] * shape[3];
        let w = init::fan_in_uniform(&shape, fan_in, dtype, seed)?;
        let b = if config.bias {
            Some(init::fan_in_uniform(
                &[out_channels],
                fan_in,
                dtype,
                init::sub_seed(seed),
            )?)
        } else {
            None
        };
        Ok(Conv2d {
            weight: w.requires_grad(),
            bias: b.map(Tensor::requires_grad),
            config,
            mode: Mode::default(),
        })
    }

    /// A layer with the given weight `[O, C/groups, KH, KW]` and bias `[O]`
    /// (made leaves that require a gradient); `config.bias` is ignored.
    pub fn from_parameters(
        weight: Tensor,
        bias: Option<Tensor>,
        config: Conv2dConfig,
    ) -> Result<Conv2d, Error> {
        check_config(&config)?;
        let ws = weight.shape().to_vec();
        if ws.len() != 4 || !ws[0].is_multiple_of(config.groups) {
            return Err(config_error(
                "Conv2d",
                format!(
                    "the weight must have shape [O, C/groups, KH, KW] with O divisible by groups = {}, got {ws:?}",
                    config.groups
                ),
            ));
        }
        check_bias("Conv2d", &weight, bias.as_ref())?;
        Ok(Conv2d {
            weight: weight.requires_grad(),
            config: Conv2dConfig {
                bias: bias.is_some(),
                ..config
            },
            bias: bias.map(Tensor::requires_grad),
            mode: Mode::default(),
        })
    }

    /// The weight, `[O, C/groups, KH, KW]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias, `[O]`.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Stride, padding, dilation, groups.
    pub fn config(&self) -> &Conv2dConfig {
        &self.config
    }
}

fn check_config(c: &Conv2dConfig) -> Result<(), Error> {
    if c.groups == 0 || c.stride.contains(&0) || c.dilation.contains(&0) {
        return Err(config_error(
            "Conv2d",
            format!(
                "groups ({}), stride ({:?}) and dilation ({:?}) must be at least 1",
                c.groups, c.stride, c.dilation
            ),
        ));
    }
    Ok(())
}

impl Module for Conv2d {
    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        let c = &self.config;
        let [ph, pw] = c.padding;
        let (x, padding) = if c.padding_mode == PaddingMode::Zeros || c.padding == [0, 0] {
            (x.clone(), c.padding)
        } else if x.rank() == 4 {
            let pads = [(0, 0), (0, 0), (ph, ph), (pw, pw)];
            (x.pad_mode(&pads, c.padding_mode)?, [0, 0])
        } else {
            return Err(config_error(
                "Conv2d",
                format!("the input must be [N, C, H, W], got {:?}", x.shape()),
            ));
        };
        x.conv2d(
            &self.weight,
            self.bias.as_ref(),
            c.stride,
            padding,
            c.dilation,
            c.groups,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        std::iter::once(("weight".to_string(), self.weight.clone()))
            .chain(self.bias.clone().map(|b| ("bias".to_string(), b)))
            .collect()
    }
}
