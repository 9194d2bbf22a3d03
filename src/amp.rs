//! Mixed precision, as `torch.amp`: [`autocast`] (computing in a half type
//! inside a scope, defined with the ops) and [`GradScaler`] (dynamic loss
//! scaling for f16, whose narrow range underflows small gradients).
//!
//! Owns the scaler's state machine (scale, unscale, step, update) and its
//! arithmetic, which follows PyTorch's: the scale is an f32 value, the
//! gradients are multiplied by its f32 reciprocal, and it backs off and
//! grows by the same rules. Reaches gradients through `nn::utils` (the
//! in-place gradient scaling clipping uses); must not know how ops run.

use crate::nn::utils::{gradients, scale_grad};
pub use crate::ops::{autocast, autocast_dtype};
use crate::optim::Optimizer;
use crate::{DType, Error, Tensor};

/// The settings of a [`GradScaler`], PyTorch's defaults by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale (default 2¹⁶).
    pub init_scale: f64,
    /// The factor the scale grows by after `growth_interval` steps in a
    /// row without an overflow (default 2).
    pub growth_factor: f64,
    /// The factor the scale shrinks by on an overflow (default 0.5).
    pub backoff_factor: f64,
    /// Steps without an overflow before the scale grows (default 2000).
    pub growth_interval: usize,
    /// `false` makes every method a pass-through (default `true`).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// Where a scaler is within a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// No gradient unscaled since the last `update`.
    Ready,
    /// Gradients unscaled; whether one held an inf or a NaN.
    Unscaled { found_inf: bool },
    /// `step` ran (or skipped the optimizer).
    Stepped { found_inf: bool },
}

/// Dynamic loss scaling (PyTorch's `torch.amp.GradScaler`): the loss is
/// multiplied by a large scale before `backward` so that small f16
/// gradients do not flush to zero; [`GradScaler::step`] divides the
/// gradients by it and skips the optimizer's step when one of them is
/// inf or NaN; [`GradScaler::update`] halves the scale after such a step
/// and doubles it after `growth_interval` clean ones.
///
/// ```
/// use tenjin::amp::{GradScaler, GradScalerConfig};
/// use tenjin::optim::{SgdConfig, SGD};
/// use tenjin::{DType, Tensor};
/// let w = Tensor::from_vec(vec![1.0, 2.0], &[2])?.requires_grad();
/// let mut opt = SGD::new(vec![w.clone()], SgdConfig { lr: 0.5, ..Default::default() })?;
/// let mut scaler = GradScaler::new(GradScalerConfig::default())?;
/// let loss = w.mul(&w)?.sum()?;                 // gradient 2w = (2, 4)
/// scaler.scale(&loss)?.backward()?;             // (2, 4) · 65536
/// assert!(scaler.step(&mut opt, &[w.clone()])?); // unscaled, then stepped
/// scaler.update()?;
/// assert_eq!(w.to_vec()?, vec![0.0, 0.0]);      // w − 0.5 · (2, 4)
/// assert_eq!(scaler.scale_factor(), 65536.0);   // grows after 2000 clean steps
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Debug)]
pub struct GradScaler {
    config: GradScalerConfig,
    /// The current scale, an f32 value as PyTorch keeps it.
    scale: f32,
    /// Clean steps in a row since the scale last changed.
    growth_tracker: usize,
    stage: Stage,
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        function: "GradScaler".into(),
        message,
    }
}

impl GradScaler {
    /// A scaler with `config`; an error for a scale that is not a
    /// positive finite f32, a growth factor not above 1, a backoff factor
    /// not in (0, 1) or a growth interval of 0.
    pub fn new(config: GradScalerConfig) -> Result<GradScaler, Error> {
        let scale = config.init_scale as f32;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(invalid(format!(
                "init_scale must be a positive finite f32, got {}",
                config.init_scale
            )));
        }
        if !(config.growth_factor > 1.0 && config.growth_factor.is_finite()) {
            return Err(invalid(format!(
                "growth_factor must be finite and > 1, got {}",
                config.growth_factor
            )));
        }
        if !(config.backoff_factor > 0.0 && config.backoff_factor < 1.0) {
            return Err(invalid(format!(
                "backoff_factor must be in (0, 1), got {}",
                config.backoff_factor
            )));
        }
        if config.growth_interval == 0 {
            return Err(invalid("growth_interval must be at least 1".into()));
        }
        Ok(GradScaler {
            config,
            scale,
            growth_tracker: 0,
            stage: Stage::Ready,
        })
    }

    /// The current scale (1 when disabled).
    pub fn scale_factor(&self) -> f64 {
        if self.config.enabled {
            f64::from(self.scale)
        } else {
            1.0
        }
    }

    /// `loss` multiplied by the scale (in the loss's type; recorded, so
    /// `backward` of the result gives scaled gradients).
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor, Error> {
        if !self.config.enabled {
            return Ok(loss.clone());
        }
        loss.mul_scalar(f64::from(self.scale))
    }

    /// Divides the gradients of `params` by the scale, in place, and
    /// records whether one held an inf or a NaN (the value read back to
    /// the host: the step waits for it here, as PyTorch's `step` does).
    /// At most once between two [`GradScaler::update`]s; call it before
    /// clipping gradients, then [`GradScaler::step`].
    pub fn unscale(&mut self, params: &[Tensor]) -> Result<(), Error> {
        if !self.config.enabled {
            return Ok(());
        }
        match self.stage {
            Stage::Ready => {}
            Stage::Unscaled { .. } => {
                return Err(invalid(
                    "unscale was already called since the last update".into(),
                ))
            }
            Stage::Stepped { .. } => {
                return Err(invalid("unscale after step: call update first".into()))
            }
        }
        let grads = gradients(params)?;
        let found_inf = non_finite(&grads)?;
        // PyTorch: the reciprocal in f64, rounded to f32.
        let inv = (1.0 / f64::from(self.scale)) as f32;
        // One coefficient per dtype and device, shared by their gradients.
        let mut coefs: Vec<Tensor> = Vec::new();
        for (p, g) in &grads {
            let at = coefs
                .iter()
                .position(|c| c.dtype() == g.dtype() && c.device() == g.device());
            let coef = match at {
                Some(k) => &coefs[k],
                None => {
                    let c = Tensor::scalar(f64::from(inv), g.dtype())?.to_device(g.device())?;
                    coefs.push(c);
                    &coefs[coefs.len() - 1]
                }
            };
            scale_grad(p, coef)?;
        }
        self.stage = Stage::Unscaled { found_inf };
        Ok(())
    }

    /// Unscales the gradients of `params` (unless [`GradScaler::unscale`]
    /// did already) and runs `optimizer`'s step unless one held an inf or
    /// a NaN. Returns whether the optimizer stepped. Once per
    /// [`GradScaler::update`].
    pub fn step(
        &mut self,
        optimizer: &mut dyn Optimizer,
        params: &[Tensor],
    ) -> Result<bool, Error> {
        if !self.config.enabled {
            optimizer.step()?;
            return Ok(true);
        }
        if let Stage::Stepped { .. } = self.stage {
            return Err(invalid(
                "step was already called since the last update".into(),
            ));
        }
        if self.stage == Stage::Ready {
            self.unscale(params)?;
        }
        let Stage::Unscaled { found_inf } = self.stage else {
            return Err(invalid("internal: no unscale before step".into()));
        };
        if !found_inf {
            optimizer.step()?;
        }
        self.stage = Stage::Stepped { found_inf };
        Ok(!found_inf)
    }

    /// Adjusts the scale after a step: multiplied by the backoff factor if
    /// a gradient overflowed, by the growth factor after
    /// `growth_interval` clean steps in a row (PyTorch's
    /// `_amp_update_scale_`, in f32).
    pub fn update(&mut self) -> Result<(), Error> {
        if !self.config.enabled {
            return Ok(());
        }
        let Stage::Stepped { found_inf } = self.stage else {
            return Err(invalid("update before step".into()));
        };
        if found_inf {
            self.scale *= self.config.backoff_factor as f32;
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.config.growth_interval {
                let grown = self.scale * self.config.growth_factor as f32;
                // PyTorch keeps the scale when growing would overflow f32.
                if grown.is_finite() {
                    self.scale = grown;
                }
                self.growth_tracker = 0;
            }
        }
        self.stage = Stage::Ready;
        Ok(())
    }
}

/// Whether one of `grads` (parameters' gradients) holds an inf or a NaN: one kernel per
/// dtype and device over all of them counting the elements beyond the
/// type's largest finite magnitude (a NaN compares false), read back.
/// (Not `Σ g·0`: the symbolic core folds `g·0` to 0.)
fn non_finite(grads: &[(&Tensor, Tensor)]) -> Result<bool, Error> {
    let mut groups: Vec<Vec<Tensor>> = Vec::new();
    for (_, g) in grads {
        let flat = g.reshape(&[g.numel()])?;
        match groups
            .iter_mut()
            .find(|gs| gs[0].dtype() == flat.dtype() && gs[0].device() == flat.device())
        {
            Some(group) => group.push(flat),
            None => groups.push(vec![flat]),
        }
    }
    for group in groups {
        let names: Vec<String> = (0..group.len()).map(|k| format!("g{k}")).collect();
        let terms: Vec<String> = names
            .iter()
            .zip(&group)
            .filter(|(_, g)| g.numel() > 0)
            .map(|(n, g)| {
                let max = match g.dtype() {
                    DType::F64 => f64::MAX,
                    _ => f64::from(f32::MAX), // halves are computed in f32
                };
                format!(
                    "sum{{i}}_0^{} (if {{abs ({n}[i]) <= {max:?}}} then (0) else (1))",
                    g.numel() - 1
                )
            })
            .collect();
        if terms.is_empty() {
            continue;
        }
        let args: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&group).collect();
        let count = crate::index_fn(&format!("s[] = {}", terms.join(" + ")), &args)?;
        if count.item()? != 0.0 {
            return Ok(true);
        }
    }
    Ok(false)
}
