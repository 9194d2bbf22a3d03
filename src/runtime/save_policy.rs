//! Which forward values a recorded op keeps for its backward pass, and
//! which it recomputes there (JAX's `jax.checkpoint` policies).
//!
//! Owns [`SavePolicy`], the thread's policy scope ([`save_policy`]) and the
//! policy each allocation mode defaults to. It decides per forward *stage*
//! of one op (a GEMM, a row statistic, an element-wise epilogue); it does
//! not decide what the tape saves besides them (an op's arguments and
//! output, which its backward reads as they are) and does not touch
//! buffers: the tape asks [`policy_for`] when it records a node, and the
//! op plan keeps one set of needs per policy.

use crate::alloc::{self, AllocMode, Device};
use std::cell::Cell;

/// Which intermediate forward values of an op the tape keeps for the
/// backward pass; the others are recomputed by the op's forward stage
/// right before the backward reads them.
///
/// By default each memory mode picks one: runtime-efficient mode keeps
/// [`SavePolicy::Everything`], memory-efficient mode
/// [`SavePolicy::Reductions`]. [`save_policy`] chooses another for the ops
/// recorded inside a scope (one model, one block).
///
/// ```
/// use tenjin::{index_fn, save_policy, SavePolicy, Tensor};
/// let x = Tensor::from_vec(vec![1., -2., 3., 4.], &[2, 2])?.requires_grad();
/// let w = Tensor::from_vec(vec![0.5, 1., -1., 2.], &[2, 2])?.requires_grad();
/// // One op, a GEMM and its ReLU: the backward reads the GEMM's value,
/// // which this policy recomputes instead of keeping.
/// let layer = "h[i; j] = max(sum{k}_0^1 (x[i; k] * w[k; j]), 0)";
/// let h = save_policy(SavePolicy::Nothing, || index_fn(layer, &[("x", &x), ("w", &w)]))?;
/// h.sum()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec()?, vec![1., 3., -2., 4.]);
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SavePolicy {
    /// Keep every forward value the backward reads: no recomputation
    /// (JAX's `everything_saveable`; runtime-efficient mode's default).
    #[default]
    Everything,
    /// Keep the values computed by a sum — GEMM and convolution outputs,
    /// row statistics — and recompute the element-wise ones from them
    /// (JAX's `dots_saveable`; memory-efficient mode's default). Recomputing
    /// costs one pass over memory, never a reduction.
    Reductions,
    /// Keep none: recompute every forward value the backward reads from
    /// the op's saved arguments (JAX's `nothing_saveable`), GEMMs included.
    Nothing,
}

impl SavePolicy {
    /// Every policy, in the order [`SavePolicy::index`] numbers them.
    pub(crate) const ALL: [SavePolicy; 3] = [
        SavePolicy::Everything,
        SavePolicy::Reductions,
        SavePolicy::Nothing,
    ];

    /// The policy's position in [`SavePolicy::ALL`].
    pub(crate) fn index(self) -> usize {
        match self {
            SavePolicy::Everything => 0,
            SavePolicy::Reductions => 1,
            SavePolicy::Nothing => 2,
        }
    }

    /// Whether a forward value is kept: `reduces` says whether the stage
    /// computing it sums (or takes a maximum) over an index.
    pub(crate) fn keeps(self, reduces: bool) -> bool {
        match self {
            SavePolicy::Everything => true,
            SavePolicy::Reductions => reduces,
            SavePolicy::Nothing => false,
        }
    }

    /// The policy `mode` defaults to.
    pub fn of_mode(mode: AllocMode) -> SavePolicy {
        match mode {
            AllocMode::RuntimeEfficient => SavePolicy::Everything,
            AllocMode::MemoryEfficient => SavePolicy::Reductions,
        }
    }
}

thread_local! {
    static SCOPED: Cell<Option<SavePolicy>> = const { Cell::new(None) };
}

/// Runs `f` with `policy` deciding what the ops it records keep for their
/// backward pass, whatever the memory mode; the previous policy (or the
/// mode's default) comes back after it, also when `f` panics. Only what is
/// recorded on this thread is affected; the backward pass may run anywhere.
///
/// ```
/// use tenjin::{save_policy, SavePolicy, Tensor};
/// let x = Tensor::from_vec(vec![0.5; 6], &[2, 3])?.requires_grad();
/// let y = save_policy(SavePolicy::Reductions, || x.tanh()?.sum())?;
/// y.backward()?;
/// assert!((x.grad().unwrap().to_vec()?[0] - (1.0 - 0.5f32.tanh().powi(2))).abs() < 1e-6);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn save_policy<T>(policy: SavePolicy, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<SavePolicy>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SCOPED.with(|s| s.replace(Some(policy))));
    f()
}

/// The policy an op recorded now on `device` saves by: the innermost
/// [`save_policy`] scope's, else the default of `device`'s memory mode.
pub(crate) fn policy_for(device: Device) -> SavePolicy {
    SCOPED
        .with(Cell::get)
        .unwrap_or_else(|| SavePolicy::of_mode(alloc::mode_for(device)))
}
