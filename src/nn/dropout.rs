//! [`Dropout`]: zeroes elements at random in training mode, the identity
//! in evaluation mode (PyTorch's `nn.Dropout`). The mask is drawn in the
//! kernel from the thread's default generator (`crate::manual_seed`) and
//! drawn again by the derivative: nothing is stored.

use super::{config_error, Mode, Module};
use crate::{Error, Tensor};

/// Zeroes each element with probability `p` and scales the rest by
/// `1/(1-p)` while training; passes its input through in evaluation mode.
///
/// ```
/// use tenjin::nn::{Dropout, Module, Sequential};
/// use tenjin::{DType, Tensor};
/// let model = Sequential::new().add(Dropout::new(0.5)?);
/// let x = Tensor::ones(&[4, 256], DType::F32)?;
/// tenjin::manual_seed(0);
/// let y = model.forward(&x)?.to_vec()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0) && y.contains(&0.0));
/// model.eval();
/// assert_eq!(model.forward(&x)?.to_vec()?, vec![1.0; 1024]);
/// assert!(Dropout::new(1.5).is_err());
/// # Ok::<(), tenjin::Error>(())
/// ```
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    mode: Mode,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1]`, in training mode.
    pub fn new(p: f64) -> Result<Dropout, Error> {
        if !(0.0..=1.0).contains(&p) {
            return Err(config_error(
                "Dropout",
                format!("the probability of an element to be zeroed must be in [0, 1], not {p}"),
            ));
        }
        Ok(Dropout {
            p,
            mode: Mode::default(),
        })
    }

    /// The probability of an element to be zeroed.
    pub fn p(&self) -> f64 {
        self.p
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor, Error> {
        x.dropout(self.p, self.is_training())
    }

    fn mode(&self) -> Option<&Mode> {
        Some(&self.mode)
    }
}
