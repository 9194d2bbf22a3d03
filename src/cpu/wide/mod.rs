//! Element-wise loops at the full width of the vector unit: AVX2 (8 f32
//! lanes) and AVX-512 (16), chosen at run time.
//!
//! Cranelift emits no vector wider than 128 bits on x86-64, so f32x4 code
//! (`super::simd`) leaves three quarters of an AVX-512 unit idle, and
//! transcendental functions are where that shows. This module runs a
//! vectorised output loop as a [`Program`] of whole-tile steps
//! (`program`) in precompiled Rust code built for each width (`exec`,
//! with the lane operations of `lanes`); the generated kernel computes the
//! loop's bounds and pointers and calls the executor in place of the loop.
//! Runs of cheap steps (arithmetic) are compiled as f32x4 code that keeps
//! their values in registers (`super::wide_segment`), so only the
//! transcendental steps pay for a trip through L1. The lane sequences are
//! those of the f32x4 code (`super::vmath`), so an element gets the same
//! bits at every width (up to the sign and payload of a NaN: x86 returns
//! the first of two NaN operands, and Cranelift may swap commutative
//! ones), and results stay independent of the thread count.
//!
//! Owns the choice of width ([`Width::host`]: the widest the host has, or
//! the one `TENJIN_SIMD` names: `f32x4`, `avx2` or `avx512`, so that CI
//! can force the portable path) and the executor. Must not decide which
//! loops are vectorised (the planner does) nor emit code (the code
//! generator calls [`Program::build`] and the entry points).

#[cfg(target_arch = "x86_64")]
mod exec;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod program;

#[cfg(target_arch = "x86_64")]
pub(crate) use exec::{
    tenjin_wide_avx2, tenjin_wide_avx512, tenjin_wide_sum_avx2, tenjin_wide_sum_avx512,
};
pub(crate) use program::{is_cheap, Dst, Op, Output, Program, Scalar, Src, Step, TILE};

use std::sync::OnceLock;

/// The vector width element-wise f32 loops run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Width {
    /// Cranelift's f32x4 code: every host.
    F32x4,
    /// 8 lanes: AVX2 with FMA.
    Avx2,
    /// 16 lanes: AVX-512F with FMA.
    Avx512,
}

impl Width {
    /// The widest width this host runs.
    pub(crate) fn supported() -> Width {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                return Width::Avx512;
            }
            if fma && std::arch::is_x86_feature_detected!("avx2") {
                return Width::Avx2;
            }
        }
        Width::F32x4
    }

    /// The width kernels compiled in this process use: [`Width::supported`],
    /// capped by `TENJIN_SIMD` (`f32x4`, `avx2`, `avx512`; read once).
    pub(crate) fn host() -> Width {
        static HOST: OnceLock<Width> = OnceLock::new();
        *HOST.get_or_init(|| {
            let cap = match std::env::var("TENJIN_SIMD").as_deref() {
                Ok("f32x4") => Width::F32x4,
                Ok("avx2") => Width::Avx2,
                _ => Width::Avx512,
            };
            cap.min(Width::supported())
        })
    }

    /// The name `TENJIN_SIMD` and benchmark reports use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Width::F32x4 => "f32x4",
            Width::Avx2 => "avx2",
            Width::Avx512 => "avx512",
        }
    }

    /// The executor's entry points, `None` for f32x4.
    pub(crate) fn entries(self) -> Option<Entries> {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Width::Avx512 => Some(Entries {
                    store: ("tenjin_wide_avx512", tenjin_wide_avx512 as *const u8),
                    sum: (
                        "tenjin_wide_sum_avx512",
                        tenjin_wide_sum_avx512 as *const u8,
                    ),
                }),
                Width::Avx2 => Some(Entries {
                    store: ("tenjin_wide_avx2", tenjin_wide_avx2 as *const u8),
                    sum: ("tenjin_wide_sum_avx2", tenjin_wide_sum_avx2 as *const u8),
                }),
                Width::F32x4 => None,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }
}

/// The symbols and addresses of a width's executor: a loop that stores
/// (`(program, streams, scalars, out, n)`) and a sum (`(program, streams,
/// scalars, n) -> f32`).
#[derive(Clone, Copy)]
pub(crate) struct Entries {
    pub(crate) store: (&'static str, *const u8),
    pub(crate) sum: (&'static str, *const u8),
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
