//! Parameter groups: parameters that share one optimizer but have their
//! own hyperparameters (PyTorch's `param_groups`), e.g. weight decay on
//! the weights and none on biases and norms.
//!
//! Parameters are numbered across the groups in order, as PyTorch numbers
//! them in an optimizer's state dict (`state.{k}.…`), so checkpoints cross
//! over. Each group has its own hyperparameter tensors (`Scalars`), so a
//! group's rate changes without touching another's kernels.
//!
//! Owns the grouping and the per-group rates; the update formulas are the
//! optimizers'.

use super::{check_non_negative, invalid, Param, Scalars};
use crate::tensor::Tensor;
use crate::{DType, Error};

/// Parameters with the hyperparameters an optimizer applies to them.
///
/// ```
/// use tenjin::optim::{AdamConfig, AdamW, Optimizer, ParamGroup};
/// use tenjin::Tensor;
/// let w = Tensor::from_vec_f64(vec![1.0, 2.0], &[2])?.requires_grad();
/// let b = Tensor::from_vec_f64(vec![0.5], &[1])?.requires_grad();
/// let decay = AdamConfig { lr: 0.1, weight_decay: 0.1, ..AdamConfig::adamw() };
/// let mut opt = AdamW::with_groups(vec![
///     ParamGroup::new(vec![w.clone()], decay),
///     ParamGroup::new(vec![b.clone()], AdamConfig { weight_decay: 0.0, ..decay }),
/// ])?;
/// assert_eq!(opt.learning_rates(), vec![0.1, 0.1]);
/// opt.set_learning_rates(&[0.1, 0.0])?; // freeze the bias
/// w.add(&b)?.sum()?.mul_scalar(0.0)?.backward()?; // zero gradients
/// opt.step()?;
/// assert!((w.to_vec_f64()?[0] - 0.99).abs() < 1e-12); // decayed
/// assert_eq!(b.to_vec_f64()?, vec![0.5]); // no decay, no rate
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ParamGroup<C> {
    pub params: Vec<Tensor>,
    pub config: C,
}

impl<C> ParamGroup<C> {
    pub fn new(params: Vec<Tensor>, config: C) -> ParamGroup<C> {
        ParamGroup { params, config }
    }
}

/// What [`Groups::split_rates`] splits a state into: each group's rate,
/// when the state has them, and the per-parameter entries.
pub(crate) type RatesAndRest = (Option<Vec<f64>>, Vec<(String, Tensor)>);

/// A configuration with a learning rate.
pub(crate) trait Rate: Copy {
    fn lr(&self) -> f64;
    fn set_lr(&mut self, lr: f64);
}

/// An optimizer's parameters, numbered across groups, with each group's
/// configuration and hyperparameter tensors.
pub(crate) struct Groups<C> {
    pub(crate) params: Vec<Param>,
    /// The group of each parameter.
    pub(crate) group: Vec<usize>,
    pub(crate) configs: Vec<C>,
    pub(crate) scalars: Vec<Scalars>,
}

impl<C: Rate> Groups<C> {
    /// Checks every group's configuration and the parameters (each listed
    /// once over all groups, at least one in all), and allocates each
    /// group's hyperparameter tensors.
    pub(crate) fn new(
        op: &str,
        groups: Vec<ParamGroup<C>>,
        layout: &'static [(&'static str, usize)],
        check: impl Fn(&C) -> Result<(), Error>,
    ) -> Result<Groups<C>, Error> {
        let mut tensors = Vec::new();
        let mut group = Vec::new();
        let mut configs = Vec::with_capacity(groups.len());
        for (g, pg) in groups.into_iter().enumerate() {
            check(&pg.config)?;
            group.extend(std::iter::repeat_n(g, pg.params.len()));
            tensors.extend(pg.params);
            configs.push(pg.config);
        }
        let params = Param::collect(op, tensors)?;
        let mut scalars: Vec<Scalars> = configs.iter().map(|_| Scalars::new(layout)).collect();
        for (p, &g) in params.iter().zip(&group) {
            scalars[g].prepare_for(std::slice::from_ref(p))?;
        }
        Ok(Groups {
            params,
            group,
            configs,
            scalars,
        })
    }

    /// The configuration of parameter `k`'s group.
    pub(crate) fn config_of(&self, k: usize) -> &C {
        &self.configs[self.group[k]]
    }

    /// `build(p, its group's configuration)` per parameter (`None` for a
    /// parameter without elements): state and kernels exist before any
    /// forward pass, so the first step takes no cached block the next
    /// forward pass needs.
    pub(crate) fn build<S>(
        &self,
        build: impl Fn(&Param, &C) -> Result<S, Error>,
    ) -> Result<Vec<Option<S>>, Error> {
        self.params
            .iter()
            .enumerate()
            .map(|(k, p)| {
                (p.numel() > 0)
                    .then(|| build(p, self.config_of(k)))
                    .transpose()
            })
            .collect()
    }

    pub(crate) fn zero_grad(&self) {
        self.params.iter().for_each(Param::zero_grad);
    }

    pub(crate) fn learning_rates(&self) -> Vec<f64> {
        self.configs.iter().map(Rate::lr).collect()
    }

    /// One rate per group, all checked before any is set.
    pub(crate) fn set_learning_rates(&mut self, op: &str, lrs: &[f64]) -> Result<(), Error> {
        if lrs.len() != self.configs.len() {
            return Err(invalid(
                op,
                format!(
                    "{} learning rates for {} parameter groups",
                    lrs.len(),
                    self.configs.len()
                ),
            ));
        }
        for &lr in lrs {
            check_non_negative(op, "lr", lr)?;
        }
        for (c, &lr) in self.configs.iter_mut().zip(lrs) {
            c.set_lr(lr);
        }
        Ok(())
    }

    /// `param_groups.{g}.lr` for every group: the part of PyTorch's
    /// `param_groups` that changes while training (a schedule's rate), kept
    /// beside the per-parameter state so a resumed run continues at it.
    pub(crate) fn rate_entries(&self) -> Result<Vec<(String, Tensor)>, Error> {
        self.configs
            .iter()
            .enumerate()
            .map(|(g, c)| {
                Ok((
                    format!("param_groups.{g}.lr"),
                    Tensor::scalar(c.lr(), DType::F64)?,
                ))
            })
            .collect()
    }

    /// Splits the `param_groups.*` entries off `state`: the rates they
    /// give (one per group, or none at all), checked, and the rest.
    pub(crate) fn split_rates(
        &self,
        op: &str,
        state: &[(String, Tensor)],
    ) -> Result<RatesAndRest, Error> {
        let (groups, rest): (Vec<_>, Vec<_>) = state
            .iter()
            .cloned()
            .partition(|(n, _)| n.starts_with("param_groups."));
        if groups.is_empty() {
            return Ok((None, rest));
        }
        let mut rates = Vec::with_capacity(self.configs.len());
        for g in 0..self.configs.len() {
            let key = format!("param_groups.{g}.lr");
            let Some((_, t)) = groups.iter().find(|(n, _)| *n == key) else {
                return Err(invalid(
                    op,
                    format!("the state has param_groups entries but no `{key}`"),
                ));
            };
            let lr = t.item()?;
            check_non_negative(op, &key, lr)?;
            rates.push(lr);
        }
        if let Some((n, _)) = groups
            .iter()
            .find(|(n, _)| !(0..self.configs.len()).any(|g| *n == format!("param_groups.{g}.lr")))
        {
            return Err(invalid(
                op,
                format!(
                    "unexpected key `{n}` in the optimizer state ({} parameter groups; only `lr` is kept)",
                    self.configs.len()
                ),
            ));
        }
        Ok((Some(rates), rest))
    }

    /// The rates [`Groups::split_rates`] found, set (nothing without any).
    pub(crate) fn apply_rates(&mut self, op: &str, rates: Option<Vec<f64>>) -> Result<(), Error> {
        match rates {
            Some(lrs) => self.set_learning_rates(op, &lrs),
            None => Ok(()),
        }
    }

    /// Sets a value of every group's configuration through `set`, which
    /// checks it against the group's own; all or none.
    pub(crate) fn set_all(&mut self, set: impl Fn(&C) -> Result<C, Error>) -> Result<(), Error> {
        let new = self
            .configs
            .iter()
            .map(set)
            .collect::<Result<Vec<C>, Error>>()?;
        self.configs = new;
        Ok(())
    }
}

/// The `Optimizer` methods of the rates and gradients, for an optimizer
/// whose `Groups` are at the field path given.
macro_rules! group_rates {
    ($name:expr, $($field:ident).+) => {
        fn zero_grad(&self) {
            self.$($field).+.zero_grad();
        }

        fn learning_rate(&self) -> f64 {
            self.$($field).+.configs[0].lr
        }

        fn set_learning_rate(&mut self, lr: f64) -> Result<(), Error> {
            let lrs = vec![lr; self.$($field).+.configs.len()];
            self.$($field).+.set_learning_rates($name, &lrs)
        }

        fn learning_rates(&self) -> Vec<f64> {
            self.$($field).+.learning_rates()
        }

        fn set_learning_rates(&mut self, lrs: &[f64]) -> Result<(), Error> {
            self.$($field).+.set_learning_rates($name, lrs)
        }
    };
}
pub(crate) use group_rates;

/// `Rate` for the optimizers' configurations.
macro_rules! rate {
    ($($t:ty),*) => {$(
        impl Rate for $t {
            fn lr(&self) -> f64 {
                self.lr
            }
            fn set_lr(&mut self, lr: f64) {
                self.lr = lr;
            }
        }
    )*};
}
rate!(super::SgdConfig, super::AdamConfig, super::RmspropConfig);
