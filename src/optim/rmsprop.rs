//! RMSprop as `torch.optim.RMSprop` (smoothing `alpha`, `eps`, L2 weight
//! decay, momentum, the centred variant).

use super::groups::{Groups, ParamGroup};
use super::{
    check_non_negative, checked_momentum, invalid, load_stepped_state, stepped_state_dict,
    update_gradient, Optimizer, Param, StackedUpdate, StepState,
};
use crate::tensor::Tensor;
use crate::Error;

/// RMSprop's hyperparameters (PyTorch's defaults but `lr`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmspropConfig {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub centered: bool,
    /// Ascend instead: the update follows `−g` (PyTorch's `maximize`,
    /// default `false`).
    pub maximize: bool,
}

impl Default for RmspropConfig {
    fn default() -> Self {
        RmspropConfig {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            maximize: false,
        }
    }
}

/// RMSprop with PyTorch's update. With `d = g + weight_decay·p`:
///
/// ```text
/// v ← α·v + (1 − α)·d²                       (square_avg)
/// a ← α·a + (1 − α)·d;  s = √(v − a²) + eps  (centred; else s = √v + eps)
/// b ← momentum·b + d/s;  p ← p − lr·b         (momentum; else p ← p − lr·d/s)
/// ```
///
/// One fused kernel per parameter and step over the rows `[p; v; (a);
/// (b)]` of the parameter's block, as [`super::Adam`].
///
/// ```
/// use tenjin::optim::{Optimizer, RmspropConfig, RMSprop};
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![1.0], &[1])?.requires_grad();
/// let mut opt = RMSprop::new(vec![w.clone()], RmspropConfig { lr: 0.01, ..Default::default() })?;
/// w.mul(&w)?.sum()?.backward()?; // g = 2
/// opt.step()?;
/// // v = 0.01·4, p = 1 − 0.01·2/(√0.04 + 1e-8)
/// assert!((w.item()? - (1.0 - 0.02 / (0.04f64.sqrt() + 1e-8))).abs() < 1e-15);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[allow(clippy::upper_case_acronyms)]
pub struct RMSprop {
    groups: Groups<RmspropConfig>,
    state: Vec<Option<StepState>>,
}

const SCALARS: &[(&str, usize)] = &[
    ("lr", 1),
    ("al", 1),
    ("oma", 1),
    ("eps", 1),
    ("wd", 1),
    ("mu", 1),
];

impl RMSprop {
    pub fn new(params: Vec<Tensor>, config: RmspropConfig) -> Result<RMSprop, Error> {
        RMSprop::with_groups(vec![ParamGroup::new(params, config)])
    }

    /// An optimizer for parameter groups, each with its own
    /// hyperparameters; parameters are numbered across the groups in order
    /// (as in PyTorch's state dict).
    pub fn with_groups(groups: Vec<ParamGroup<RmspropConfig>>) -> Result<RMSprop, Error> {
        let groups = Groups::new("RMSprop", groups, SCALARS, check_config)?;
        let state = groups.build(build_state)?;
        Ok(RMSprop { groups, state })
    }

    /// The hyperparameters (of the first group).
    pub fn config(&self) -> &RmspropConfig {
        &self.groups.configs[0]
    }

    /// The hyperparameters of each group.
    pub fn group_configs(&self) -> &[RmspropConfig] {
        &self.groups.configs
    }
}

/// The rows of the state: `(name, row)` in PyTorch's names.
fn rows(c: &RmspropConfig) -> Vec<(&'static str, usize)> {
    let mut rows = vec![("square_avg", 1)];
    if c.centered {
        rows.push(("grad_avg", rows.len() + 1));
    }
    if c.momentum > 0.0 {
        rows.push(("momentum_buffer", rows.len() + 1));
    }
    rows
}

fn build_state(param: &Param, c: &RmspropConfig) -> Result<StepState, Error> {
    let n = param.numel();
    let rows = rows(c);
    let row = |name: &str| rows.iter().find(|(r, _)| *r == name).map(|(_, k)| *k);
    let d = update_gradient(c.maximize, (c.weight_decay != 0.0).then_some("s[0; i]"));
    let v = format!("(al[] * s[1; i] + oma[] * {d} * {d})");
    let mut values = vec![v.clone()];
    let scale = match row("grad_avg") {
        Some(r) => {
            let a = format!("(al[] * s[{r}; i] + oma[] * {d})");
            values.push(a.clone());
            format!("(sqrt ({v} - {a} * {a}) + eps[])")
        }
        None => format!("(sqrt ({v}) + eps[])"),
    };
    let p = match row("momentum_buffer") {
        Some(r) => {
            let b = format!("(mu[] * s[{r}; i] + {d} / {scale})");
            values.push(b.clone());
            format!("s[0; i] - lr[] * {b}")
        }
        None => format!("s[0; i] - lr[] * {d} / {scale}"),
    };
    // rmsprop[r; i] = if {r = 0} then (p) else (if {r = 1} then (v) else …)
    let mut body = values.pop().expect("square_avg");
    for (k, value) in values.iter().enumerate().rev() {
        body = format!("if {{r = {}}} then ({value}) else ({body})", k + 1);
    }
    let src = format!("rmsprop[r; i] = if {{r = 0}} then ({p}) else ({body})");
    let (s0, v1): (&[usize], &[usize]) = (&[], &[n]);
    let stacked = [rows.len() + 1, n];
    let mut args = vec![("s", &stacked[..]), ("g", v1), ("al", s0), ("oma", s0)];
    args.extend([("lr", s0), ("eps", s0)]);
    if c.weight_decay != 0.0 {
        args.push(("wd", s0));
    }
    if c.momentum > 0.0 {
        args.push(("mu", s0));
    }
    Ok(StepState::new(StackedUpdate::new(
        &src,
        &args,
        rows.len() + 1,
        param,
    )?))
}

fn check_config(c: &RmspropConfig) -> Result<(), Error> {
    for (name, v) in [
        ("lr", c.lr),
        ("eps", c.eps),
        ("weight_decay", c.weight_decay),
        ("momentum", c.momentum),
        ("alpha", c.alpha),
    ] {
        check_non_negative("RMSprop", name, v)?;
    }
    if c.alpha > 1.0 {
        return Err(invalid(
            "RMSprop",
            format!("alpha must be in [0, 1], got {}", c.alpha),
        ));
    }
    Ok(())
}

impl Optimizer for RMSprop {
    fn step(&mut self) -> Result<(), Error> {
        let groups = &mut self.groups;
        for k in 0..groups.params.len() {
            let (param, gi) = (&groups.params[k], groups.group[k]);
            let c = groups.configs[gi];
            let Some(g) = param.grad("RMSprop")? else {
                continue;
            };
            let Some(state) = self.state[k].as_mut() else {
                continue; // no elements
            };
            let values = [
                c.lr,
                c.alpha,
                1.0 - c.alpha,
                c.eps,
                c.weight_decay,
                c.momentum,
            ];
            groups.scalars[gi].set(param, &values)?;
            let scalars = &groups.scalars[gi];
            let arg = |name: &str| match name {
                "g" => Some(&g),
                _ => scalars.get(param, name),
            };
            state.update.run(param, arg)?;
            state.steps += 1;
        }
        Ok(())
    }

    super::groups::group_rates!("RMSprop", groups);

    fn momentum(&self) -> Option<f64> {
        let m = self.config().momentum;
        (m > 0.0).then_some(m)
    }

    /// Keeps each group's form (`checked_momentum`).
    fn set_momentum(&mut self, momentum: f64) -> Result<(), Error> {
        self.groups.set_all(|c| {
            let momentum = checked_momentum("RMSprop", c.momentum, momentum)?;
            Ok(RmspropConfig { momentum, ..*c })
        })
    }

    fn state_dict(&self) -> Result<Vec<(String, Tensor)>, Error> {
        let g = &self.groups;
        let mut out = stepped_state_dict(&g.params, &self.state, &|k| rows(g.config_of(k)))?;
        out.extend(g.rate_entries()?);
        Ok(out)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<(), Error> {
        let (rates, state) = self.groups.split_rates("RMSprop", state)?;
        let g = &self.groups;
        load_stepped_state(
            "RMSprop",
            &g.params,
            &mut self.state,
            &|k| rows(g.config_of(k)),
            &state,
        )?;
        self.groups.apply_rates("RMSprop", rates)
    }
}
