//! Whether a kernel's integer arithmetic fits in 32 bits.
//!
//! GPUs multiply 32-bit integers natively and emulate 64-bit multiplies
//! with several instructions, so index arithmetic (offsets, loop bounds,
//! guards) runs in `s32` when every value it can take fits. Each loop
//! variable's range is found from its bounds by interval arithmetic over
//! the ranges of the variables outside it (`START` and `END` lie in
//! `[0, extent]`); every affine form the kernel evaluates (offsets, bound
//! numerators, conditions, index values), including every partial sum on
//! the way, must then lie within `±(2³¹ − 1)`. Addresses stay 64-bit
//! (`mad.wide.s32`). A kernel with run-time constants is judged at its
//! own values ([`Kernel::resolve`]): its code then differs from that of a
//! kernel whose values need 64 bits, so no module is shared across the
//! two. Must not emit code.

use crate::kernel::{Bound, Cond, Expr, IVar, Kernel, Lin, Loop, Stmt, END, START};
use std::collections::HashMap;

/// `[lo, hi]` of an integer value.
type Range = (i128, i128);

const LIMIT: i128 = i32::MAX as i128;

/// Whether every integer value of `k` fits in an `s32`.
pub(super) fn fits_in_32_bits(k: &Kernel) -> bool {
    let mut w = Walk {
        k,
        ranges: HashMap::new(),
        fits: true,
    };
    let extent = k.extent as i128;
    w.ranges.insert(START, (0, extent));
    w.ranges.insert(END, (0, extent));
    w.stmts(&k.body);
    w.fits
}

struct Walk<'k> {
    k: &'k Kernel,
    ranges: HashMap<IVar, Range>,
    fits: bool,
}

impl Walk<'_> {
    /// The range of `l`, checking that it and every partial sum fit.
    fn lin(&mut self, l: &Lin) -> Range {
        let l = &self.k.resolve(l);
        let (mut lo, mut hi) = (0i128, 0i128);
        for &(v, c) in &l.terms {
            let Some(&(a, b)) = self.ranges.get(&v) else {
                self.fits = false;
                return (0, 0);
            };
            let (p, q) = (a * c as i128, b * c as i128);
            lo += p.min(q);
            hi += p.max(q);
            self.check((lo, hi));
        }
        let r = (lo + l.constant as i128, hi + l.constant as i128);
        self.check(r);
        r
    }

    fn check(&mut self, (lo, hi): Range) {
        if lo < -LIMIT || hi > LIMIT {
            self.fits = false;
        }
    }

    /// The range of `⌈num/den⌉` (`ceil`) or `⌊num/den⌋`.
    fn bound(&mut self, b: &Bound, ceil: bool) -> Range {
        let (lo, hi) = self.lin(&b.num);
        let d = b.den.max(1) as i128;
        let div = |x: i128| {
            if ceil {
                x.div_euclid(d) + i128::from(x.rem_euclid(d) != 0)
            } else {
                x.div_euclid(d)
            }
        };
        (div(lo), div(hi))
    }

    fn looped(&mut self, l: &Loop) {
        let lower: Vec<Range> = l.lower.iter().map(|b| self.bound(b, true)).collect();
        let upper: Vec<Range> = l.upper.iter().map(|b| self.bound(b, false)).collect();
        // The variable starts at the largest lower bound and stops at the
        // smallest upper one.
        let lo = lower.iter().map(|r| r.0).max().unwrap_or(0);
        let hi = upper.iter().map(|r| r.1).min().unwrap_or(0);
        // Past the last iteration it is incremented once more: by 1, or by
        // a block's threads (at most 1,024) in a team's strided loop.
        let range = (lo, hi.max(lo) + 1024);
        self.check(range);
        self.ranges.insert(l.var, range);
        self.stmts(&l.body);
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Let(_, e) => self.expr(e),
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                    ..
                } => {
                    match cond {
                        Cond::Index(l, _) | Cond::Divisible(l, _) => {
                            self.lin(l);
                        }
                        Cond::Value(..) => {}
                    }
                    self.stmts(then);
                    self.stmts(otherwise);
                }
                Stmt::Reduce { body, .. } | Stmt::For(body) => self.looped(body),
                Stmt::Store { offset, .. } => {
                    self.lin(offset);
                }
            }
        }
    }

    fn expr(&mut self, e: &Expr) {
        match e {
            Expr::Load { offset, .. } => {
                self.lin(offset);
            }
            Expr::Index(l) | Expr::Random { counter: l, .. } => {
                self.lin(l);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fits_in_32_bits;
    use crate::symbolic::IndexFn;

    fn kernel(src: &str, x: &[usize]) -> crate::kernel::Kernel {
        let f = IndexFn::parse(src, &[("x", x)]).unwrap();
        crate::kernel::lower(&f).unwrap()
    }

    #[test]
    fn offsets_decide_the_width() {
        assert!(fits_in_32_bits(&kernel(
            "f[i; j] = x[j; i] * 2",
            &[300, 200]
        )));
        // 2³¹ + 3 elements: the last offset needs 64 bits.
        let big = (1usize << 31) + 3;
        assert!(!fits_in_32_bits(&kernel("f[i] = x[i] + 1", &[big])));
        // A transpose of 50,000 × 50,000: offsets up to 2.5·10⁹.
        assert!(!fits_in_32_bits(&kernel(
            "f[i; j] = x[j; i]",
            &[50_000, 50_000]
        )));
    }
}
