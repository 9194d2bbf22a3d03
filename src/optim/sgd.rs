//! Stochastic gradient descent with momentum, dampening, Nesterov momentum
//! and L2 weight decay, as `torch.optim.SGD`.

use super::groups::{Groups, ParamGroup};
use super::{
    check_non_negative, checked_momentum, invalid, update_gradient, Optimizer, Param,
    StackedUpdate, StateDict, Update,
};
use crate::tensor::Tensor;
use crate::Error;

/// Hyperparameters of [`SGD`] (PyTorch's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate (default `1e-3`).
    pub lr: f64,
    /// Momentum factor (default 0: plain SGD).
    pub momentum: f64,
    /// Dampening of the gradient added to the velocity (default 0).
    pub dampening: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Ascend instead: the update follows `−g` (PyTorch's `maximize`,
    /// default `false`).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            maximize: false,
        }
    }
}

/// Stochastic gradient descent, with PyTorch's semantics. With
/// `d = g + weight_decay·p`:
///
/// ```text
/// without momentum:  p ← p − lr·d
/// with momentum:     v ← d                          (first step)
///                    v ← momentum·v + (1 − dampening)·d
///                    p ← p − lr·v                   (or, Nesterov: p − lr·(d + momentum·v))
/// ```
///
/// Per parameter and step: one fused kernel, in place over `p` without
/// momentum; with momentum, over the rows `[p; v]` of the parameter's
/// block (see the module documentation).
///
/// ```
/// use tenjin::optim::{Optimizer, SgdConfig, SGD};
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![1.0], &[1])?.requires_grad();
/// let config = SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
/// let mut opt = SGD::new(vec![w.clone()], config)?;
/// for _ in 0..2 {
///     opt.zero_grad();
///     w.sum()?.backward()?; // gradient 1
///     opt.step()?;
/// }
/// // v = 1, then 0.9 + 1 = 1.9: w = 1 − 0.1 − 0.19
/// assert!((w.item()? - 0.71).abs() < 1e-12);
/// assert!(SGD::new(vec![w], SgdConfig { nesterov: true, ..Default::default() }).is_err());
/// # Ok::<(), tenjin::Error>(())
/// ```
#[allow(clippy::upper_case_acronyms)]
pub struct SGD {
    groups: Groups<SgdConfig>,
    /// Per parameter (`None` for parameters without elements).
    state: Vec<Option<State>>,
}

/// Per parameter: its one compiled update and whether the velocity (kept
/// in the parameter's block, see the module documentation) was initialised.
struct State {
    update: UpdateKernel,
    started: bool,
}

enum UpdateKernel {
    /// No momentum: in place over the parameter.
    InPlace(Update),
    /// Momentum: rows `[p; v]`.
    Stacked(StackedUpdate),
}

/// Scalar arguments (all of shape `[]`).
const SCALARS: &[(&str, usize)] = &[("lr", 1), ("wd", 1), ("mu", 1), ("a", 1), ("c", 1)];

impl SGD {
    /// An optimizer for `params` (leaves that require a gradient).
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Result<SGD, Error> {
        SGD::with_groups(vec![ParamGroup::new(params, config)])
    }

    /// An optimizer for parameter groups, each with its own
    /// hyperparameters; parameters are numbered across the groups in order
    /// (as in PyTorch's state dict).
    pub fn with_groups(groups: Vec<ParamGroup<SgdConfig>>) -> Result<SGD, Error> {
        let groups = Groups::new("SGD", groups, SCALARS, check_config)?;
        let state = groups.build(build_state)?;
        Ok(SGD { groups, state })
    }

    /// The hyperparameters (of the first group).
    pub fn config(&self) -> &SgdConfig {
        &self.groups.configs[0]
    }

    /// The hyperparameters of each group.
    pub fn group_configs(&self) -> &[SgdConfig] {
        &self.groups.configs
    }
}

fn build_state(param: &Param, c: &SgdConfig) -> Result<State, Error> {
    let n = param.numel();
    let v1: &[usize] = &[n];
    let s0: &[usize] = &[];
    // The gradient with weight decay, `d` in the documentation.
    let (d, mut d_args) = if c.weight_decay != 0.0 {
        (
            update_gradient(c.maximize, Some("p[i]")),
            vec![("g", v1), ("p", v1), ("wd", s0)],
        )
    } else {
        (update_gradient(c.maximize, None), vec![("g", v1)])
    };
    if c.momentum == 0.0 {
        let src = format!("sgd[i] = p[i] - lr[] * {d}");
        let mut args = vec![("p", v1), ("lr", s0)];
        args.extend(d_args.iter().filter(|(n, _)| *n != "p"));
        return Ok(State {
            update: UpdateKernel::InPlace(Update::new(
                &src,
                &args,
                "p",
                (param.dtype(), param.device()),
            )?),
            started: false,
        });
    }
    // Rows [p; v] of the parameter's block: v ← a·v + c·d, with
    // (a, c) = (0, 1) on the first step and (momentum, 1 − dampening)
    // afterwards; p ← p − lr·v (Nesterov: p − lr·(d + momentum·v)),
    // with the new v.
    let d = d.replace("p[i]", "s[0; i]");
    let v = format!("(a[] * s[1; i] + c[] * {d})");
    let p = if c.nesterov {
        format!("s[0; i] - lr[] * ({d} + mu[] * {v})")
    } else {
        format!("s[0; i] - lr[] * {v}")
    };
    let src = format!("sgd[r; i] = if {{r = 0}} then ({p}) else ({v})");
    let stacked: &[usize] = &[2, n];
    d_args.retain(|(n, _)| *n != "p");
    let mut args = vec![("s", stacked), ("a", s0), ("c", s0), ("lr", s0)];
    if c.nesterov {
        args.push(("mu", s0));
    }
    args.extend(d_args);
    Ok(State {
        update: UpdateKernel::Stacked(StackedUpdate::new(&src, &args, 2, param)?),
        started: false,
    })
}

fn check_config(c: &SgdConfig) -> Result<(), Error> {
    check_non_negative("SGD", "lr", c.lr)?;
    check_non_negative("SGD", "momentum", c.momentum)?;
    check_non_negative("SGD", "weight_decay", c.weight_decay)?;
    if !c.dampening.is_finite() {
        return Err(invalid(
            "SGD",
            format!("dampening must be finite, got {}", c.dampening),
        ));
    }
    if c.nesterov && (c.momentum <= 0.0 || c.dampening != 0.0) {
        return Err(invalid(
            "SGD",
            format!(
                "Nesterov momentum requires momentum > 0 and dampening = 0 (got momentum {}, dampening {})",
                c.momentum, c.dampening
            ),
        ));
    }
    Ok(())
}

impl Optimizer for SGD {
    fn step(&mut self) -> Result<(), Error> {
        let groups = &mut self.groups;
        for k in 0..groups.params.len() {
            let (param, gi) = (&groups.params[k], groups.group[k]);
            let c = groups.configs[gi];
            let Some(g) = param.grad("SGD")? else {
                continue;
            };
            let Some(state) = self.state[k].as_mut() else {
                continue; // no elements
            };
            let (a, damp) = if state.started {
                (c.momentum, 1.0 - c.dampening)
            } else {
                (0.0, 1.0)
            };
            let values = [c.lr, c.weight_decay, c.momentum, a, damp];
            groups.scalars[gi].set(param, &values)?;
            let (p, scalars) = (param.storage(), &groups.scalars[gi]);
            let arg = |name: &str| match name {
                "p" => Some(p),
                "g" => Some(&g),
                _ => scalars.get(param, name),
            };
            match &state.update {
                UpdateKernel::InPlace(u) => u.run(arg)?,
                UpdateKernel::Stacked(u) => u.run(param, arg)?,
            }
            state.started = true;
        }
        Ok(())
    }

    super::groups::group_rates!("SGD", groups);

    fn momentum(&self) -> Option<f64> {
        let m = self.config().momentum;
        (m > 0.0).then_some(m)
    }

    /// Keeps each group's form (`checked_momentum`).
    fn set_momentum(&mut self, momentum: f64) -> Result<(), Error> {
        self.groups.set_all(|c| {
            let momentum = checked_momentum("SGD", c.momentum, momentum)?;
            Ok(SgdConfig { momentum, ..*c })
        })
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>, Error> {
        let mut out = Vec::new();
        for (k, (p, s)) in self.groups.params.iter().zip(&self.state).enumerate() {
            if let Some(State {
                update: UpdateKernel::Stacked(u),
                started: true,
            }) = s
            {
                out.push((format!("state.{k}.momentum_buffer"), u.row(p, 1)?));
            }
        }
        out.extend(self.groups.rate_entries()?);
        Ok(out)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<(), Error> {
        let (rates, state) = self.groups.split_rates("SGD", state)?;
        let mut given = StateDict::new("SGD", &state);
        let mut loads = Vec::new();
        for (k, p) in self.groups.params.iter().enumerate() {
            if let Some(t) = given.take(k, "momentum_buffer", p.shape())? {
                match &self.state[k] {
                    Some(State {
                        update: UpdateKernel::Stacked(_),
                        ..
                    }) => loads.push((k, t)),
                    _ => {
                        return Err(invalid(
                            "SGD",
                            format!("parameter {k} has no momentum buffer (momentum is 0 or it has no elements)"),
                        ))
                    }
                }
            }
        }
        given.finish()?;
        for s in self.state.iter_mut().flatten() {
            s.started = false;
        }
        for (k, t) in loads {
            if let Some(State {
                update: UpdateKernel::Stacked(u),
                started,
            }) = &mut self.state[k]
            {
                u.set_row(&self.groups.params[k], 1, t)?;
                *started = true;
            }
        }
        self.groups.apply_rates("SGD", rates)
    }
}
