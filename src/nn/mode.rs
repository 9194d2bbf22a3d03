//! [`Mode`]: a module's own training flag (PyTorch's `self.training`).
//!
//! Owns the flag only; what a mode changes is each module's forward
//! ([`super::Dropout`], [`super::BatchNorm`]), and how it spreads to the
//! children is [`super::Module::set_training`]'s.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Training (`true`, the state a module is made in) or evaluation. A
/// module that holds one returns it from [`super::Module::mode`]; the
/// flag is shared-mutable so `model.eval()` works through `&self`, as
/// every other module method does.
///
/// ```
/// use tenjin::nn::Mode;
/// let mode = Mode::default();
/// assert!(mode.get());
/// mode.set(false);
/// assert!(!mode.get());
/// ```
#[derive(Debug)]
pub struct Mode(AtomicBool);

impl Mode {
    /// Whether the module is in training mode.
    pub fn get(&self) -> bool {
        self.0.load(Relaxed)
    }

    /// Sets training (`true`) or evaluation mode.
    pub fn set(&self, training: bool) {
        self.0.store(training, Relaxed);
    }
}

impl Default for Mode {
    fn default() -> Mode {
        Mode(AtomicBool::new(true))
    }
}

/// A copy starts in the mode of the original, as PyTorch's
/// `copy.deepcopy(module)` does.
impl Clone for Mode {
    fn clone(&self) -> Mode {
        Mode(AtomicBool::new(self.get()))
    }
}
