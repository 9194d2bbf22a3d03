//! Whether ops fuse: the one switch, per device kind, that forward
//! fusion (`crate::ops`'s `fuse`: element-wise results deferred and inlined
//! into their readers) and the backward pass's fold (`crate::trace`'s
//! `fold`: a pointwise gradient computed by the step producing its input)
//! obey. Owns [`set_fusion`] and [`fusion`]; must not decide what fuses.

use crate::alloc::Device;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::OnceLock;

/// Per device kind (CPU, GPU): 0 for the default, 1 on, 2 off.
static SETTING: [AtomicU8; 2] = [AtomicU8::new(0), AtomicU8::new(0)];

fn kind(device: Device) -> usize {
    match device {
        Device::Cpu => 0,
        Device::Cuda(_) => 1,
    }
}

/// Turns fusion across ops on or off for every device of `device`'s kind
/// (the CPU, or the GPUs). Results already deferred stay so.
///
/// ```
/// use tenjin::{fusion, set_fusion, Device};
/// set_fusion(Device::Cpu, true);
/// assert!(fusion(Device::Cpu));
/// set_fusion(Device::Cpu, false);
/// # Ok::<(), tenjin::Error>(())
/// ```
pub fn set_fusion(device: Device, on: bool) {
    SETTING[kind(device)].store(if on { 1 } else { 2 }, Relaxed);
}

/// Whether ops on `device` fuse (see [`set_fusion`]). By default they do on
/// GPUs and do not on the CPU; the environment variable `TENJIN_FUSION`
/// (`1` or `0`) sets the default for both.
pub fn fusion(device: Device) -> bool {
    // The environment is read once: this is asked on every op.
    static FROM_ENV: OnceLock<Option<bool>> = OnceLock::new();
    match SETTING[kind(device)].load(Relaxed) {
        1 => true,
        2 => false,
        _ => FROM_ENV
            .get_or_init(|| match std::env::var("TENJIN_FUSION").as_deref() {
                Ok("1") => Some(true),
                Ok("0") => Some(false),
                _ => None,
            })
            .unwrap_or(device != Device::Cpu),
    }
}
