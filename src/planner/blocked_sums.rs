//! Long sums of f32 kernels split into blocks: accurate without losing
//! the vector loop.
//!
//! Owns [`block_long_sums`]. A sum of `n` f32 values accumulated in one
//! f32 register (or a few vector partial sums) has an error growing with
//! `n`: 10⁷ times 0.1 came to 1,005,958.56 instead of 1,000,000.015, and
//! the mean of 3·10⁸ ones to 0.8948 (the sum stops at 2²⁴). Here a sum
//! whose range may exceed [`BLOCK`] becomes
//!
//! ```text
//! sum.f64 b in ⌊lo/B⌋ ..= ⌊hi/B⌋ { sum k in max(lo, B·b) ..= min(hi, B·b + B−1) { … } }
//! ```
//!
//! The inner sum keeps everything the vectoriser decided (f32 partial
//! sums over at most `B` values); the outer one is `wide`: it adds the
//! block sums in f64 and rounds once (PyTorch's cascade sum plays the same
//! role). A scalar sum (one accumulator, nothing to keep) longer than
//! [`SCALAR_NARROW_LIMIT`] values is made `wide` as a whole: widening each
//! value is off the accumulator's critical path, so it costs almost
//! nothing. Blocks are aligned to multiples of `B` of the summation index,
//! so the order of additions depends only on the range, never on how a
//! kernel call's outputs are split between threads: results stay bitwise
//! identical at any thread count.
//!
//! A sum inside a vector output loop (one f32 accumulator per lane: a
//! column sum over rows) is split the same way into blocks of
//! [`LANE_BLOCK`] rows: each lane sums a block in f32, in order, and adds
//! it into an f64 of its own.
//!
//! On the CPU, where a kernel's bounds may be run-time constants shared by
//! every batch size (`crate::cpu`'s code cache), a sum's form must not
//! depend on its length, or each side of a threshold is a nest of its own:
//!
//! - a sum outside every loop, in other sums or not (a loss, a mean over
//!   the batch, its rows' sums), keeps both forms, under a guard on its
//!   length (`if hi − lo − 1024 ≥ 0 { blocked } else { plain }`): the
//!   same decision, taken where the sum runs (a guard around sums inside
//!   loops cost a max pool's step 7 %, measured, so those keep deciding
//!   by their longest length);
//! - a column sum right in a parallel vector loop (a bias gradient over
//!   the batch) is blocked at any length: a guard there would cost the
//!   loop's unrolled copies their interleaving, and one block of up to 64
//!   rows adds the same values in the same order as the plain sum.
//!
//! So one code serves sums over 10 rows and over 100,000, and code with
//! the constants compiled in computes the same bits. Must not emit code;
//! f64 kernels are never passed here.

use crate::kernel::{Bound, Cond, IVar, Kernel, Lin, Loop, Reg, Stmt};
use crate::symbolic::CmpOp;
use crate::symbolic::ReduceOp;

/// Values per block of a split sum.
pub(crate) const BLOCK: i64 = 1024;

/// Values per block of a sum inside a vector output loop: each lane sums
/// its block alone, in order, so blocks are shorter.
pub(crate) const LANE_BLOCK: i64 = 64;

/// The longest scalar sum accumulated in f32; longer ones are `wide`.
pub(crate) const SCALAR_NARROW_LIMIT: u64 = 32;

/// `k` with every sum that may run longer than [`BLOCK`] split (see the
/// module documentation).
/// With `guarded` (the CPU), a sum outside every loop keeps both forms
/// under a guard on its length, and a column sum right in the parallel
/// vector loop is blocked at any length.
pub(crate) fn block_long_sums(mut k: Kernel, guarded: bool) -> Kernel {
    let body = std::mem::take(&mut k.body);
    let mut splitter = Splitter {
        ivars: k.num_ivars,
        regs: k.num_regs,
        in_vector_loop: false,
        in_parallel_vector: false,
        loops: 0,
        guarded,
    };
    k.body = splitter.stmts(body);
    k.num_ivars = splitter.ivars;
    k.num_regs = splitter.regs;
    k
}

/// The walk: the next fresh loop variable and register, and where it is.
struct Splitter {
    ivars: u32,
    regs: u32,
    /// Whether the statements visited run inside a vector output loop.
    in_vector_loop: bool,
    /// Whether the statements visited run right in the parallel loop, a
    /// vector one (not in a sum inside it).
    in_parallel_vector: bool,
    /// Loops around the statements visited (sums aside).
    loops: usize,
    /// Whether a sum outside every loop keeps both forms under a guard
    /// (and a column sum right in the parallel vector loop is always
    /// blocked).
    guarded: bool,
}

impl Splitter {
    fn stmts(&mut self, stmts: Vec<Stmt>) -> Vec<Stmt> {
        stmts.into_iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: Stmt) -> Stmt {
        match s {
            Stmt::For(mut l) => {
                let parallel = l.is_parallel();
                let outer = (
                    std::mem::replace(&mut self.in_vector_loop, l.vector),
                    std::mem::replace(&mut self.in_parallel_vector, l.vector && parallel),
                );
                self.loops += 1;
                l.body = self.stmts(std::mem::take(&mut l.body));
                self.loops -= 1;
                (self.in_vector_loop, self.in_parallel_vector) = outer;
                Stmt::For(l)
            }
            branch @ Stmt::If { .. } => branch.map_branches(|b| self.stmts(b)),
            Stmt::Reduce {
                op,
                value,
                result,
                mut body,
                wide,
            } => {
                // Outside every loop, in other sums or not (a loss over
                // `[B, T, D]` sums rows of `T` inside its sum over `B`).
                let top_level = self.loops == 0;
                let outer = std::mem::replace(&mut self.in_parallel_vector, false);
                body.body = self.stmts(std::mem::take(&mut body.body));
                self.in_parallel_vector = outer;
                let sum = op == ReduceOp::Sum && !wide;
                let lanes = self.in_vector_loop;
                let block = if lanes { LANE_BLOCK } else { BLOCK };
                if sum && self.guarded && top_level {
                    // (Outside every loop: no vector loop around it.)
                    if let Some(guarded) = self.guarded_sum(value, result, &body) {
                        return guarded;
                    }
                }
                // A guard in a vector loop costs its unrolled copies their
                // interleaving (layer norm's gradient 1.65×, measured); a
                // column sum right in the parallel vector loop (a bias
                // gradient over the batch) is blocked at any length instead.
                let column = self.guarded && lanes && self.in_parallel_vector;
                let long = body.max_trips > block as u64 || (column && body.max_trips >= 2);
                if sum && (body.vector || lanes) && long {
                    // Vector code keeps its f32 partial sums per block; the
                    // blocks add in f64.
                    if let Some(blocked) = self.split(value, result, &body, block) {
                        return blocked;
                    }
                }
                let scalar = !body.vector && !lanes;
                Stmt::Reduce {
                    op,
                    value,
                    result,
                    wide: wide || (sum && scalar && body.max_trips > SCALAR_NARROW_LIMIT),
                    body,
                }
            }
            other => other,
        }
    }

    /// `if hi − lo ≥ limit { long form } else { result = sum inner { … } }`
    /// for a sum outside every loop over `lo ..= hi` whose length is the
    /// same wherever it runs (one bound each, whole, their difference free
    /// of loop variables), where the long form is the blocked one (a
    /// vector sum, beyond [`BLOCK`] values) or the one accumulated in f64
    /// (a scalar sum, beyond [`SCALAR_NARROW_LIMIT`] values); `None` for
    /// any other sum, or when the blocked form would overflow.
    fn guarded_sum(&mut self, value: Reg, result: Reg, inner: &Loop) -> Option<Stmt> {
        let ([lo], [hi]) = (&inner.lower[..], &inner.upper[..]) else {
            return None;
        };
        let length = hi.num.checked_sub(&lo.num)?;
        if lo.den != 1 || hi.den != 1 || !length.terms.is_empty() {
            return None;
        }
        let blocked = inner.vector;
        let limit = if blocked {
            BLOCK as u64
        } else {
            SCALAR_NARROW_LIMIT
        };
        let (long_result, short_result) = (Reg(self.regs), Reg(self.regs + 1));
        self.regs += 2;
        let long = if blocked {
            self.split(value, long_result, inner, BLOCK)?
        } else {
            Stmt::Reduce {
                op: ReduceOp::Sum,
                value,
                result: long_result,
                wide: true,
                body: inner.clone(),
            }
        };
        // hi − lo − limit ≥ 0: more than `limit` values.
        let form = length.checked_sub(&Lin::constant(i64::try_from(limit).ok()?))?;
        Some(Stmt::If {
            cond: Cond::Index(form, CmpOp::Ge),
            then: vec![long],
            then_value: long_result,
            otherwise: vec![Stmt::Reduce {
                op: ReduceOp::Sum,
                value,
                result: short_result,
                wide: false,
                body: inner.clone(),
            }],
            otherwise_value: short_result,
            result,
        })
    }

    /// The blocked form of `result = sum inner { … fold value }`, or
    /// `None` when a bound of it would overflow.
    fn split(&mut self, value: Reg, result: Reg, inner: &Loop, block: i64) -> Option<Stmt> {
        let b = IVar(self.ivars);
        // ⌊⌈x⌉/B⌋ ≥ ⌊x/B⌋ = ⌈(n − dB + 1)/(dB)⌉ for x = n/d: a lower bound
        // of the first block (at worst one empty block before it).
        let outer_lower = inner
            .lower
            .iter()
            .map(|l| {
                let den = l.den.checked_mul(block)?;
                let shift = Lin::constant(1 - den);
                Some(Bound {
                    num: l.num.checked_add(&shift)?,
                    den,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        // ⌊⌊x⌋/B⌋ = ⌊x/B⌋.
        let outer_upper = inner
            .upper
            .iter()
            .map(|u| {
                Some(Bound {
                    num: u.num.clone(),
                    den: u.den.checked_mul(block)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let block_start = Lin {
            constant: 0,
            terms: vec![(b, block)],
        };
        let mut lower = inner.lower.clone();
        lower.push(Bound {
            num: block_start.clone(),
            den: 1,
        });
        let mut upper = inner.upper.clone();
        upper.push(Bound {
            num: block_start.checked_add(&Lin::constant(block - 1))?,
            den: 1,
        });
        // The blocks a constant range meets; one more than its length
        // needs otherwise (it may start inside a block).
        let blocks = match inner.constant_range() {
            Some((lo, hi)) if lo <= hi => (hi.div_euclid(block) - lo.div_euclid(block) + 1) as u64,
            _ => inner.max_trips.div_ceil(block as u64) + 1,
        };
        self.ivars += 1;
        let block_sum = Reg(self.regs);
        self.regs += 1;
        Some(Stmt::Reduce {
            op: ReduceOp::Sum,
            value: block_sum,
            result,
            wide: true,
            body: Loop {
                var: b,
                lower: outer_lower,
                upper: outer_upper,
                max_trips: blocks,
                vector: false,
                body: vec![Stmt::Reduce {
                    op: ReduceOp::Sum,
                    value,
                    result: block_sum,
                    wide: false,
                    body: Loop {
                        lower,
                        upper,
                        max_trips: inner.max_trips.min(block as u64),
                        ..inner.clone()
                    },
                }],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::planner::passes::{loop_kernel, LoopRole};
    use crate::planner::route::Target;
    use crate::symbolic::IndexFn;
    use crate::DType;

    fn planned(src: &str, x: &[usize], target: Target) -> String {
        let f = IndexFn::parse(src, &[("x", x)]).unwrap();
        loop_kernel(&f, DType::F32, target, LoopRole::Whole)
            .unwrap()
            .to_string()
    }

    /// The loop nest of `src` over `x` on the CPU with its constants read
    /// at run time (the kernel's header and their values left out).
    fn shared_nest((src, x): (String, Vec<usize>)) -> String {
        let f = IndexFn::parse(&src, &[("x", &x)]).unwrap();
        let k = loop_kernel(&f, DType::F32, Target::Cpu, LoopRole::Whole).unwrap();
        let text = k.with_run_time_constants().to_string();
        text.lines().skip(2).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn a_long_sum_is_split_into_blocks_added_in_f64() {
        let text = planned("f[] = sum{i}_0^9999 x[i]", &[10_000], Target::Gpu);
        assert!(text.contains("sum.f64"), "{text}");
        let short = planned("f[] = sum{i}_0^19 x[i]", &[20], Target::Gpu);
        assert!(!short.contains("sum.f64"), "{short}");
        // On the CPU both forms, under a guard on the length.
        let cpu = planned("f[] = sum{i}_0^999 x[i]", &[1000], Target::Cpu);
        assert!(
            cpu.contains("if -25 >= 0") && cpu.contains("sum.f64"),
            "{cpu}"
        );
    }

    #[test]
    fn a_long_column_sum_is_split_in_its_vector_loop() {
        let text = planned("f[j] = sum{i}_0^99999 x[i; j]", &[100_000, 8], Target::Gpu);
        assert!(text.contains("sum.f64"), "{text}");
        // On the CPU, a short one too (one block: the same additions).
        let cpu = planned("f[j] = sum{i}_0^9 x[i; j]", &[10, 8], Target::Cpu);
        assert!(cpu.contains("vector") && cpu.contains("sum.f64"), "{cpu}");
        let gpu = planned("f[j] = sum{i}_0^9 x[i; j]", &[10, 8], Target::Gpu);
        assert!(!gpu.contains("sum.f64"), "{gpu}");
    }

    #[test]
    fn on_the_cpu_short_and_long_sums_have_one_nest() {
        // A column sum in a vector loop (blocks of 64), a vector sum
        // (blocks of 1024) and a scalar sum of rows (f64 beyond 32).
        fn column(n: usize) -> (String, Vec<usize>) {
            (format!("f[j] = sum{{i}}_0^{} x[i; j]", n - 1), vec![n, 8])
        }
        fn whole(n: usize) -> (String, Vec<usize>) {
            (format!("f[] = sum{{i}}_0^{} x[i]", n - 1), vec![n])
        }
        fn rows(n: usize) -> (String, Vec<usize>) {
            (
                format!("f[] = sum{{i}}_0^{} sum{{j}}_0^9 x[i; j]", n - 1),
                vec![n, 10],
            )
        }
        type Case = fn(usize) -> (String, Vec<usize>);
        let cases: [(Case, usize, usize); 3] =
            [(column, 10, 1000), (whole, 100, 5000), (rows, 10, 100)];
        for (case, short, long) in cases {
            assert_eq!(
                shared_nest(case(short)),
                shared_nest(case(long)),
                "{}",
                case(short).0
            );
        }
    }
}
