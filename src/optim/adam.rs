//! Adam (Kingma & Ba 2015) with L2 weight decay, and AdamW (Loshchilov &
//! Hutter 2019) with decoupled weight decay, as `torch.optim.Adam` and
//! `torch.optim.AdamW`, with or without `amsgrad`.

use super::groups::{Groups, ParamGroup};
use super::{
    check_non_negative, invalid, load_stepped_state, stepped_state_dict, update_gradient,
    Optimizer, Param, StackedUpdate, StepState,
};
use crate::tensor::Tensor;
use crate::Error;

/// Hyperparameters of [`Adam`] and [`AdamW`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate (default `1e-3`).
    pub lr: f64,
    /// Decay rates of the first and second moment estimates (default
    /// `(0.9, 0.999)`).
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability (default `1e-8`).
    pub eps: f64,
    /// Weight decay: an L2 penalty added to the gradient for `Adam`
    /// (default 0), decoupled `p ← p·(1 − lr·wd)` for `AdamW` (default
    /// `1e-2`, see [`AdamConfig::adamw`]).
    pub weight_decay: f64,
    /// AMSGrad (Reddi et al. 2018): the denominator uses the largest
    /// second-moment estimate so far, kept as a fourth row of the
    /// parameter's block (`max_exp_avg_sq` in the state dict). Default
    /// `false`.
    pub amsgrad: bool,
    /// Ascend instead: the update follows `−g` (PyTorch's `maximize`,
    /// default `false`).
    pub maximize: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
        }
    }
}

impl AdamConfig {
    /// PyTorch's `AdamW` defaults: as `Adam`'s with `weight_decay = 1e-2`.
    pub fn adamw() -> AdamConfig {
        AdamConfig {
            weight_decay: 1e-2,
            ..AdamConfig::default()
        }
    }
}

/// Adam, with PyTorch's semantics. At step `t` (counted per parameter),
/// with `d = g + weight_decay·p`:
///
/// ```text
/// m ← β₁·m + (1 − β₁)·d
/// v ← β₂·v + (1 − β₂)·d²
/// p ← p − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + eps)
/// ```
///
/// `m` and `v` live in the parameter's block, after its elements. Per
/// parameter and step: one fused kernel computing the rows `[p; m; v]`
/// (see the module documentation). The bias corrections change every step;
/// they are scalar tensor arguments, so nothing is recompiled.
///
/// ```
/// use tenjin::optim::{Adam, AdamConfig, Optimizer};
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![3.0, -1.0], &[2])?.requires_grad();
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig { lr: 0.1, ..Default::default() })?;
/// opt.zero_grad();
/// w.mul(&w)?.sum()?.backward()?;
/// opt.step()?;
/// // The first step of Adam moves each weight by about lr against its gradient's sign.
/// let v = w.to_vec_f64()?;
/// assert!((v[0] - 2.9).abs() < 1e-6 && (v[1] + 0.9).abs() < 1e-6);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct Adam {
    inner: AdamCore,
}

/// AdamW: Adam with decoupled weight decay, with PyTorch's semantics. At
/// step `t`, with the gradient `g` (no L2 term):
///
/// ```text
/// p ← p·(1 − lr·weight_decay)
/// m ← β₁·m + (1 − β₁)·g
/// v ← β₂·v + (1 − β₂)·g²
/// p ← p − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + eps)
/// ```
///
/// The decay is fused into the update: one kernel per parameter and step,
/// as [`Adam`].
///
/// ```
/// use tenjin::optim::{AdamConfig, AdamW, Optimizer};
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![1.0], &[1])?.requires_grad();
/// let mut opt = AdamW::new(vec![w.clone()], AdamConfig { lr: 0.1, weight_decay: 0.5, ..Default::default() })?;
/// w.mul_scalar(0.0)?.sum()?.backward()?; // a zero gradient: only the decay acts
/// opt.step()?;
/// assert!((w.item()? - 0.95).abs() < 1e-12);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub struct AdamW {
    inner: AdamCore,
}

struct AdamCore {
    name: &'static str,
    decoupled: bool,
    groups: Groups<AdamConfig>,
    /// Per parameter (`None` for parameters without elements).
    state: Vec<Option<StepState>>,
}

/// Hyperparameter tensors (shape `[]`): `b1`, `b2` and `omb1 = 1 − β₁`,
/// `omb2 = 1 − β₂`; `wd` is the L2 factor for Adam and `1 − lr·weight_decay`
/// for AdamW; `step` is `lr / (1 − β₁ᵗ)`; `bc2` is `√(1 − β₂ᵗ)`.
const SCALARS: &[(&str, usize)] = &[
    ("b1", 1),
    ("omb1", 1),
    ("b2", 1),
    ("omb2", 1),
    ("wd", 1),
    ("step", 1),
    ("bc2", 1),
    ("eps", 1),
];

impl AdamCore {
    fn new(
        name: &'static str,
        decoupled: bool,
        groups: Vec<ParamGroup<AdamConfig>>,
    ) -> Result<AdamCore, Error> {
        let groups = Groups::new(name, groups, SCALARS, |c| check_config(name, c))?;
        let state = groups.build(|p, c| build_state(name, decoupled, p, c))?;
        Ok(AdamCore {
            name,
            decoupled,
            groups,
            state,
        })
    }
}

fn build_state(
    name: &str,
    decoupled: bool,
    param: &Param,
    c: &AdamConfig,
) -> Result<StepState, Error> {
    let n = param.numel();
    let s0: &[usize] = &[];
    let v1: &[usize] = &[n];
    let rows = if c.amsgrad { 4 } else { 3 };
    let stacked: &[usize] = &[rows, n];
    let l2 = !decoupled && c.weight_decay != 0.0;
    let decoupled = decoupled && c.weight_decay != 0.0;
    // Rows [p; m; v] of the parameter's block, each reading column i:
    // m ← β₁·m + (1 − β₁)·d, v ← β₂·v + (1 − β₂)·d², and
    // p ← p − step·m / (√v / bc2 + eps) with the new m and v (AdamW
    // first scales p by 1 − lr·weight_decay).
    let d = update_gradient(c.maximize, l2.then_some("s[0; i]"));
    let m = format!("(b1[] * s[1; i] + omb1[] * {d})");
    let v = format!("(b2[] * s[2; i] + omb2[] * {d} * {d})");
    let p0 = if decoupled {
        "s[0; i] * wd[]"
    } else {
        "s[0; i]"
    };
    // AMSGrad: v̂ ← max(v̂, v), and v̂ in the denominator.
    let vmax = format!("max(s[3; i], {v})");
    let denominator = if c.amsgrad { &vmax } else { &v };
    let p = format!("{p0} - step[] * {m} / (sqrt ({denominator}) / bc2[] + eps[])");
    let name = name.to_lowercase();
    let last = if c.amsgrad {
        format!("(if {{r = 2}} then ({v}) else ({vmax}))")
    } else {
        format!("({v})")
    };
    let src = format!(
        "{name}[r; i] = if {{r = 0}} then ({p}) else (if {{r = 1}} then ({m}) else {last})"
    );
    let mut args = vec![
        ("s", stacked),
        ("g", v1),
        ("b1", s0),
        ("omb1", s0),
        ("b2", s0),
        ("omb2", s0),
        ("step", s0),
        ("bc2", s0),
        ("eps", s0),
    ];
    if l2 || decoupled {
        args.push(("wd", s0));
    }
    // The one compiled update of the rows `[p; m; v]`.
    Ok(StepState::new(StackedUpdate::new(
        &src, &args, rows, param,
    )?))
}

impl AdamCore {
    fn step(&mut self) -> Result<(), Error> {
        let groups = &mut self.groups;
        for k in 0..groups.params.len() {
            let (param, gi) = (&groups.params[k], groups.group[k]);
            let c = groups.configs[gi];
            let (b1, b2) = c.betas;
            let Some(g) = param.grad(self.name)? else {
                continue;
            };
            let Some(state) = self.state[k].as_mut() else {
                continue; // no elements
            };
            state.steps += 1;
            let t = state.steps.min(i32::MAX as u64) as i32;
            let bc1 = 1.0 - b1.powi(t);
            let bc2 = (1.0 - b2.powi(t)).sqrt();
            let wd = if self.decoupled {
                1.0 - c.lr * c.weight_decay
            } else {
                c.weight_decay
            };
            let values = [b1, 1.0 - b1, b2, 1.0 - b2, wd, c.lr / bc1, bc2, c.eps];
            groups.scalars[gi].set(param, &values)?;
            let scalars = &groups.scalars[gi];
            let arg = |name: &str| match name {
                "g" => Some(&g),
                _ => scalars.get(param, name),
            };
            state.update.run(param, arg)?;
        }
        Ok(())
    }
}

/// Adam's state rows by PyTorch's names (AMSGrad adds the fourth).
const ROWS: &[(&str, usize)] = &[("exp_avg", 1), ("exp_avg_sq", 2)];
const AMSGRAD_ROWS: &[(&str, usize)] = &[("exp_avg", 1), ("exp_avg_sq", 2), ("max_exp_avg_sq", 3)];

fn rows(c: &AdamConfig) -> Vec<(&'static str, usize)> {
    if c.amsgrad { AMSGRAD_ROWS } else { ROWS }.to_vec()
}

fn check_config(name: &str, c: &AdamConfig) -> Result<(), Error> {
    check_non_negative(name, "lr", c.lr)?;
    check_non_negative(name, "eps", c.eps)?;
    check_non_negative(name, "weight_decay", c.weight_decay)?;
    for (i, beta) in [c.betas.0, c.betas.1].into_iter().enumerate() {
        if !(0.0..1.0).contains(&beta) {
            return Err(invalid(
                name,
                format!("betas.{i} must be in [0, 1), got {beta}"),
            ));
        }
    }
    Ok(())
}

macro_rules! adam_impls {
    ($ty:ident, $name:literal, $decoupled:expr) => {
        impl $ty {
            /// An optimizer for `params` (leaves that require a gradient).
            pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Result<$ty, Error> {
                $ty::with_groups(vec![ParamGroup::new(params, config)])
            }

            /// An optimizer for parameter groups, each with its own
            /// hyperparameters; parameters are numbered across the groups
            /// in order (as in PyTorch's state dict).
            pub fn with_groups(groups: Vec<ParamGroup<AdamConfig>>) -> Result<$ty, Error> {
                Ok($ty {
                    inner: AdamCore::new($name, $decoupled, groups)?,
                })
            }

            /// The hyperparameters (of the first group).
            pub fn config(&self) -> &AdamConfig {
                &self.inner.groups.configs[0]
            }

            /// The hyperparameters of each group.
            pub fn group_configs(&self) -> &[AdamConfig] {
                &self.inner.groups.configs
            }
        }

        impl Optimizer for $ty {
            fn step(&mut self) -> Result<(), Error> {
                self.inner.step()
            }

            super::groups::group_rates!($name, inner.groups);

            /// `betas.0`, the rate of the first moment's average.
            fn momentum(&self) -> Option<f64> {
                Some(self.config().betas.0)
            }

            fn set_momentum(&mut self, beta1: f64) -> Result<(), Error> {
                self.inner.groups.set_all(|c| {
                    let c = AdamConfig {
                        betas: (beta1, c.betas.1),
                        ..*c
                    };
                    check_config($name, &c)?;
                    Ok(c)
                })
            }

            fn state_dict(&self) -> Result<Vec<(String, Tensor)>, Error> {
                let g = &self.inner.groups;
                let mut out =
                    stepped_state_dict(&g.params, &self.inner.state, &|k| rows(g.config_of(k)))?;
                out.extend(g.rate_entries()?);
                Ok(out)
            }

            fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<(), Error> {
                let c = &mut self.inner;
                let (rates, state) = c.groups.split_rates(c.name, state)?;
                let g = &c.groups;
                load_stepped_state(
                    c.name,
                    &g.params,
                    &mut c.state,
                    &|k| rows(g.config_of(k)),
                    &state,
                )?;
                c.groups.apply_rates(c.name, rates)
            }
        }
    };
}

adam_impls!(Adam, "Adam", false);
adam_impls!(AdamW, "AdamW", true);
