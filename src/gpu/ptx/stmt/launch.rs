//! What a module with run-time constants reads at launch
//! (`crate::gpu::ptx::launch_sizes`): its constants (`p0`, `p1`, …), the
//! parallel loop's extent (`ext`) and the output's dimensions (`n0`, `n1`,
//! …), loaded into registers where the code needs them. A kernel with its
//! constants compiled in reads none: its sizes are literals ([`Size`]).
//! Must not decide anything by a size's value (the emitter does, at the
//! kernel's own values).

use super::super::asm::{Asm, Ty, R};
use super::Emitter;
use crate::kernel::Kernel;

/// A size the code uses: compiled in, or read from a launch parameter.
#[derive(Clone, Copy, Debug)]
pub(super) enum Size {
    Known(u64),
    Read(R),
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size::Known(n) => write!(f, "{n}"),
            Size::Read(r) => write!(f, "{r}"),
        }
    }
}

/// `k`'s run-time constants, each into its variable's register (of type
/// `int`) in every one of `lanes` lanes; a float's bits too
/// (`Expr::ConstParam` reads those from the parameter itself).
pub(super) fn load_constants(a: &mut Asm, k: &Kernel, int: Ty, lanes: u32) {
    for (j, &(v, _)) in k.params.iter().enumerate() {
        let r = a.reg(Ty::B64);
        a.op(format!("ld.param.u64 {r}, [p{j}]"));
        for lane in 0..lanes {
            let iv = R {
                ty: int,
                n: v.0 + lane * k.num_ivars,
            };
            match int {
                Ty::B32 => a.op(format!("cvt.u32.u64 {iv}, {r}")),
                _ => a.op(format!("mov.b64 {iv}, {r}")),
            }
        }
    }
}

impl Emitter<'_> {
    fn lifted(&self) -> bool {
        !self.k.params.is_empty()
    }

    /// `end` (the parallel loop's end) set to the kernel's extent.
    pub(super) fn load_extent(&mut self, end: R) {
        if !self.lifted() {
            let bits = self.int_bits();
            self.a.op(format!("mov.{bits} {end}, {}", self.k.extent));
            return;
        }
        let e = self.a.reg(Ty::B64);
        self.a.op(format!("ld.param.u64 {e}, [ext]"));
        match self.int.0 {
            Ty::B32 => self.a.op(format!("cvt.u32.u64 {end}, {e}")),
            _ => self.a.op(format!("mov.b64 {end}, {e}")),
        }
    }

    /// The output dimensions a thread's index is decomposed over (`known`,
    /// their values in this kernel) and their product.
    pub(super) fn output_sizes(&mut self, known: &[u64]) -> (Vec<Size>, Size) {
        let count = known.iter().product();
        if !self.lifted() || self.k.out_shape.is_empty() {
            let total = Size::Known(count);
            return (known.iter().map(|&n| Size::Known(n)).collect(), total);
        }
        let a = &mut self.a;
        let dims: Vec<Size> = (0..known.len())
            .map(|d| {
                let r = a.reg(Ty::B64);
                a.op(format!("ld.param.u64 {r}, [n{d}]"));
                Size::Read(r)
            })
            .collect();
        let mut total = dims[0];
        for d in &dims[1..] {
            total = Size::Read(a.bin("mul.lo.u64", Ty::B64, total, d));
        }
        (dims, total)
    }
}
