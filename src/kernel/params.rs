//! Run-time constants: the integer constants of a kernel's loop bounds,
//! guards and strides, and its float constants, turned into parameters its
//! code reads when called (issue 28).
//!
//! Owns [`Kernel::with_run_time_constants`]. The bounds a size reaches
//! (`sum b in 0 ..= B − 1`, `floor((B − 1)/64)` blocks of a long sum, a
//! guard `i ≤ B − 1`) are constants of the loop nest; two kernels that
//! differ only in them have the same nest once those constants are
//! parameters ([`Kernel::params`]), so a backend compiles one code for
//! every batch size and passes each kernel's values at the call. The
//! kernel computes exactly what it computed before, bit for bit: the same
//! loops run in the same order over the same ranges (a loop whose range
//! is no longer constant is not unrolled, in the same order). Must not
//! decide what to share, compile or run anything.

use super::{Bound, Cond, Expr, IVar, Kernel, Lin, RunTimeStride, Stmt, END, START};

impl Kernel {
    /// `self` with the constant of every loop bound (but the parallel
    /// loop's, run over the range of each call) and of
    /// every integer guard, read from a new parameter ([`Kernel::params`])
    /// that holds it, one parameter per constant; a bound's zero constant
    /// stays (there is nothing to read), a guard's is read too (a guard on
    /// a sum's length is zero at one size). Float constants (a mean's
    /// `1/B`, a scale) are read too, as the bits of an `f64`
    /// ([`super::Expr::ConstParam`]). So are the strides of loads and
    /// stores but 1 (`x[b·T·D + t·D + d]`: [`Kernel::strides`]), one
    /// parameter per term. Offsets' constants stay compiled in: a load's
    /// constant folds into its address there, and reading it at run time
    /// cost pools and depthwise windows, whose taps are loads at constant
    /// offsets, 8–14 % (measured). The result runs exactly as `self`,
    /// slower where constant bounds would fold away (a peeled loop known
    /// empty, a division by a block size) or let a short loop be unrolled:
    /// the CPU runs it while a size is new and gives a kernel run often
    /// its own code (`crate::cpu`'s code cache).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let sum_over = |b: usize| -> Result<tenjin::kernel::Kernel, tenjin::Error> {
    ///     let f = IndexFn::parse(&format!("f[j] = sum{{b}}_0^{} x[b; j]", b - 1), &[("x", &[b, 3][..])])?;
    ///     Ok(tenjin::kernel::lower(&f)?.with_run_time_constants())
    /// };
    /// let (k5, k7) = (sum_over(5)?, sum_over(7)?);
    /// // The sum's last index, and the stride of `x`'s rows (`x[b·3 + j]`):
    /// assert_eq!(k5.params.iter().map(|p| p.1).collect::<Vec<_>>(), [4, 3]);
    /// assert_eq!(k7.params.iter().map(|p| p.1).collect::<Vec<_>>(), [6, 3]);
    /// assert_eq!(k5.strides.len(), 1);
    /// // The same loop nest (after the header and the constants' values):
    /// let nest = |k: &tenjin::kernel::Kernel| k.to_string().lines().skip(2).collect::<Vec<_>>().join("\n");
    /// assert_eq!(nest(&k5), nest(&k7));
    /// assert!(nest(&k5).contains("sum v3 in 0 ..= v4"), "{k5}");
    /// // A mean's `1/B`, a float constant, is read at run time too:
    /// let mean = |b: usize| -> Result<tenjin::kernel::Kernel, tenjin::Error> {
    ///     let src = format!("f[j] = {:?} * sum{{b}}_0^{} x[b; j]", 1.0 / b as f64, b - 1);
    ///     let f = IndexFn::parse(&src, &[("x", &[b, 3][..])])?;
    ///     Ok(tenjin::kernel::lower(&f)?.with_run_time_constants())
    /// };
    /// let (m4, m8) = (mean(4)?, mean(8)?);
    /// assert_eq!(nest(&m4), nest(&m8));
    /// assert!(m4.to_string().contains(" = 0.25"), "{m4}");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_run_time_constants(&self) -> Kernel {
        let mut k = self.clone();
        let mut lifter = Lifter {
            next: k.num_ivars,
            params: std::mem::take(&mut k.params),
            strides: std::mem::take(&mut k.strides),
        };
        lifter.stmts(&mut k.body);
        k.num_ivars = lifter.next;
        k.params = lifter.params;
        k.strides = lifter.strides;
        k
    }

    /// `l` as it reads at this kernel's values: each run-time constant's
    /// term ([`Kernel::params`]) folded into the constant, each run-time
    /// stride's variable `w` ([`Kernel::strides`]) the term `index · value`
    /// it stands for, in its place. That is the form the kernel had before
    /// [`Kernel::with_run_time_constants`] lifted it, term for term, for
    /// the analyses that decide by values (a GPU's index width and vector
    /// accesses: the code they choose is then right for this kernel's
    /// values, and shared only with kernels whose code comes out the
    /// same). A kernel with no run-time constants gives `l` back.
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i; j] = x[j; i]", &[("x", &[3, 5][..])])?;
    /// let k = tenjin::kernel::lower(&f)?;
    /// let lifted = k.with_run_time_constants();
    /// assert!(!lifted.strides.is_empty());
    /// // Every offset of the lifted kernel resolves to the original's.
    /// let offsets = |k: &tenjin::kernel::Kernel| {
    ///     let mut all = Vec::new();
    ///     tenjin::kernel::visit_stmts(&k.body, &mut |s| match s {
    ///         tenjin::kernel::Stmt::Let(_, tenjin::kernel::Expr::Load { offset, .. })
    ///         | tenjin::kernel::Stmt::Store { offset, .. } => all.push(k.resolve(offset)),
    ///         _ => {}
    ///     });
    ///     all
    /// };
    /// assert_eq!(offsets(&k), offsets(&lifted));
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn resolve(&self, l: &Lin) -> Lin {
        if self.params.is_empty() {
            return l.clone();
        }
        let mut out = Lin::constant(l.constant);
        for &(v, c) in &l.terms {
            if let Some(&(_, value)) = self.params.iter().find(|p| p.0 == v) {
                out.constant += c * value;
            } else if let Some(s) = self.strides.iter().find(|s| s.var == v) {
                let value = self
                    .params
                    .iter()
                    .find(|p| p.0 == s.stride)
                    .map_or(0, |p| p.1);
                out.terms.push((s.index, c * value));
            } else {
                out.terms.push((v, c));
            }
        }
        out
    }
}

struct Lifter {
    next: u32,
    params: Vec<(IVar, i64)>,
    strides: Vec<RunTimeStride>,
}

impl Lifter {
    fn stmts(&mut self, stmts: &mut [Stmt]) {
        for s in stmts {
            match s {
                Stmt::For(l) | Stmt::Reduce { body: l, .. } => {
                    for Bound { num, .. } in l.lower.iter_mut().chain(l.upper.iter_mut()) {
                        // The parallel loop's `start ..= end − 1` is given
                        // per call already.
                        if num.coeff(START) == 0 && num.coeff(END) == 0 {
                            self.lin(num);
                        }
                    }
                    self.stmts(&mut l.body);
                }
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                    ..
                } => {
                    if let Cond::Index(form, _) = cond {
                        // Zero too: a guard on a length (`hi − lo − 32 ≥
                        // 0`) is zero at one size, and must not make the
                        // nest of that size one of its own.
                        self.lift(form);
                    }
                    self.stmts(then);
                    self.stmts(otherwise);
                }
                Stmt::Let(_, e) => match e {
                    Expr::Const(c) => {
                        // A float constant (a mean's `1/B`): its bits.
                        let p = self.param(c.to_bits() as i64);
                        *e = Expr::ConstParam(p);
                    }
                    Expr::Load { offset, .. } => self.offset(offset),
                    _ => {}
                },
                Stmt::Store { offset, .. } => self.offset(offset),
            }
        }
    }

    /// `form`'s constant read from a parameter of its own (a new one, the
    /// last variable, so the terms stay sorted by variable). Two constants
    /// equal at one size are not merged: `B − 1` and a row length of 9
    /// coincide at batch 10 only, and a nest merged there would be a nest
    /// of its own, compiled for that size alone.
    fn lin(&mut self, form: &mut Lin) {
        if form.constant != 0 {
            self.lift(form);
        }
    }

    /// `form`'s constant, whatever it is, read from a parameter of its own.
    fn lift(&mut self, form: &mut Lin) {
        let c = form.constant;
        form.constant = 0;
        let p = self.param(c);
        form.terms.push((p, 1));
    }

    /// An offset with each stride but 1 read at run time (a vector loop's
    /// too: its lanes are then that far apart): the term `v·c` becomes
    /// `w·1`, `w = v·p` ([`Kernel::strides`]) with `p` a new parameter
    /// holding `c`, in the term's place (outer variables first, so that the
    /// code still adds the part invariant in an inner loop first). One parameter per term, as for constants: two
    /// strides equal at one size only (a row of `T` and one of 64) must
    /// not make that size's nest one of its own. The offset's constant
    /// stays compiled in (see [`Kernel::with_run_time_constants`]).
    fn offset(&mut self, offset: &mut Lin) {
        for k in 0..offset.terms.len() {
            let (v, c) = offset.terms[k];
            if c != 1 {
                let stride = self.param(c);
                let var = self.fresh();
                self.strides.push(RunTimeStride {
                    var,
                    index: v,
                    stride,
                });
                offset.terms[k] = (var, 1);
            }
        }
    }

    /// A new parameter holding `value`.
    fn param(&mut self, value: i64) -> IVar {
        let p = self.fresh();
        self.params.push((p, value));
        p
    }

    fn fresh(&mut self) -> IVar {
        let v = IVar(self.next);
        self.next += 1;
        v
    }
}
