//! Affine forms over integer index variables.
//!
//! Owns [`VarId`], the integer [`Affine`] form `c₀ + Σ cᵥ·v` and the rational
//! [`RatAffine`] form `(c₀ + Σ cᵥ·v) / d`. Every index map, sum bound and
//! guard in the IR is built from these. Arithmetic is checked: an overflow is
//! reported as [`Overflow`], never wrapped. This module must not know about
//! expressions, tensors or devices.

use num_integer::Integer;
use std::collections::BTreeMap;
use std::fmt;

/// An index variable (output index, sum index or derivative kernel index),
/// numbered inside one [`crate::symbolic::IndexFn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// Integer overflow in exact index arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "integer overflow in index arithmetic")
    }
}

pub(crate) fn add_i64(a: i64, b: i64) -> Result<i64, Overflow> {
    a.checked_add(b).ok_or(Overflow)
}

pub(crate) fn mul_i64(a: i64, b: i64) -> Result<i64, Overflow> {
    a.checked_mul(b).ok_or(Overflow)
}

/// `constant + Σ coeff·var` with integer coefficients.
///
/// Terms are kept sorted by variable with no zero coefficients, so two equal
/// forms are structurally equal.
///
/// ```
/// use tenjin::symbolic::{Affine, VarId};
/// let i = VarId(0);
/// let j = VarId(1);
/// let a = Affine::var(i).add(&Affine::var(j).scale(-2).unwrap()).unwrap().add_const(3).unwrap();
/// assert_eq!(a.coeff(j), -2);
/// assert_eq!(a.eval(&|v| if v == i { 5 } else { 1 }).unwrap(), 6);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Affine {
    /// Sorted by variable, no zero coefficients.
    pub terms: Vec<(VarId, i64)>,
    pub constant: i64,
}

impl Affine {
    pub fn constant(c: i64) -> Affine {
        Affine {
            terms: Vec::new(),
            constant: c,
        }
    }

    pub fn var(v: VarId) -> Affine {
        Affine {
            terms: vec![(v, 1)],
            constant: 0,
        }
    }

    /// Builds a form from unsorted terms, merging repeats and dropping zeros.
    pub fn from_terms(
        terms: impl IntoIterator<Item = (VarId, i64)>,
        constant: i64,
    ) -> Result<Affine, Overflow> {
        let mut map: BTreeMap<VarId, i64> = BTreeMap::new();
        for (v, c) in terms {
            let e = map.entry(v).or_insert(0);
            *e = add_i64(*e, c)?;
        }
        Ok(Affine {
            terms: map.into_iter().filter(|&(_, c)| c != 0).collect(),
            constant,
        })
    }

    pub fn is_constant(&self) -> bool {
        self.terms.is_empty()
    }

    /// The coefficient of `v` (0 when absent).
    pub fn coeff(&self, v: VarId) -> i64 {
        self.terms
            .binary_search_by_key(&v, |&(w, _)| w)
            .map(|k| self.terms[k].1)
            .unwrap_or(0)
    }

    /// `Some(v)` when the form is exactly the bare variable `v`.
    pub fn as_single_var(&self) -> Option<VarId> {
        match (self.terms.as_slice(), self.constant) {
            ([(v, 1)], 0) => Some(*v),
            _ => None,
        }
    }

    pub fn vars(&self) -> impl Iterator<Item = VarId> + '_ {
        self.terms.iter().map(|&(v, _)| v)
    }

    pub fn add(&self, other: &Affine) -> Result<Affine, Overflow> {
        Affine::from_terms(
            self.terms.iter().chain(other.terms.iter()).copied(),
            add_i64(self.constant, other.constant)?,
        )
    }

    pub fn sub(&self, other: &Affine) -> Result<Affine, Overflow> {
        self.add(&other.scale(-1)?)
    }

    pub fn add_const(&self, c: i64) -> Result<Affine, Overflow> {
        Ok(Affine {
            terms: self.terms.clone(),
            constant: add_i64(self.constant, c)?,
        })
    }

    pub fn scale(&self, k: i64) -> Result<Affine, Overflow> {
        if k == 0 {
            return Ok(Affine::constant(0));
        }
        let terms = self
            .terms
            .iter()
            .map(|&(v, c)| Ok((v, mul_i64(c, k)?)))
            .collect::<Result<Vec<_>, Overflow>>()?;
        Ok(Affine {
            terms,
            constant: mul_i64(self.constant, k)?,
        })
    }

    /// gcd of the variable coefficients (0 for a constant form).
    /// Computed on magnitudes, so `i64::MIN` coefficients cannot overflow.
    pub fn coeff_gcd(&self) -> u64 {
        self.terms
            .iter()
            .fold(0u64, |g, &(_, c)| g.gcd(&c.unsigned_abs()))
    }

    /// Replaces each variable by an affine form (`None`: keep the variable).
    pub fn substitute(&self, map: &dyn Fn(VarId) -> Option<Affine>) -> Result<Affine, Overflow> {
        let mut out = Affine::constant(self.constant);
        for &(v, c) in &self.terms {
            let repl = map(v).unwrap_or_else(|| Affine::var(v));
            out = out.add(&repl.scale(c)?)?;
        }
        Ok(out)
    }

    /// Value at integer variable values.
    pub fn eval(&self, value: &dyn Fn(VarId) -> i64) -> Result<i64, Overflow> {
        let mut acc = self.constant;
        for &(v, c) in &self.terms {
            acc = add_i64(acc, mul_i64(c, value(v))?)?;
        }
        Ok(acc)
    }
}

/// `num / den` with an integer affine numerator and a positive denominator,
/// kept in lowest terms (gcd of all numerator coefficients, the constant
/// included, and the denominator is 1).
///
/// Used for sum bounds (a lower bound is rounded up, an upper bound down)
/// and for `is int` guards.
///
/// ```
/// use tenjin::symbolic::{Affine, RatAffine, VarId};
/// let i = VarId(0);
/// let half = RatAffine::new(Affine::var(i).add_const(-1).unwrap(), 2).unwrap(); // (i - 1)/2
/// assert_eq!(half.eval_ceil(&|_| 4).unwrap(), 2);
/// assert_eq!(half.eval_floor(&|_| 4).unwrap(), 1);
/// assert!(!half.is_int_at(&|_| 4).unwrap());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RatAffine {
    pub num: Affine,
    /// Always positive.
    pub den: i64,
}

impl RatAffine {
    pub fn new(num: Affine, den: i64) -> Result<RatAffine, Overflow> {
        if den == 0 {
            return Err(Overflow);
        }
        let (num, den) = if den < 0 {
            (num.scale(-1)?, den.checked_neg().ok_or(Overflow)?)
        } else {
            (num, den)
        };
        // den > 0, so g ≤ den ≤ i64::MAX and the cast is exact.
        let g = num
            .coeff_gcd()
            .gcd(&num.constant.unsigned_abs())
            .gcd(&den.unsigned_abs()) as i64;
        if g > 1 {
            let terms = num.terms.iter().map(|&(v, c)| (v, c / g)).collect();
            Ok(RatAffine {
                num: Affine {
                    terms,
                    constant: num.constant / g,
                },
                den: den / g,
            })
        } else {
            Ok(RatAffine { num, den })
        }
    }

    pub fn integer(a: Affine) -> RatAffine {
        RatAffine { num: a, den: 1 }
    }

    pub fn constant(c: i64) -> RatAffine {
        RatAffine::integer(Affine::constant(c))
    }

    /// `Some(form)` when the denominator is 1.
    pub fn as_integer(&self) -> Option<&Affine> {
        (self.den == 1).then_some(&self.num)
    }

    pub fn vars(&self) -> impl Iterator<Item = VarId> + '_ {
        self.num.vars()
    }

    pub fn substitute(&self, map: &dyn Fn(VarId) -> Option<Affine>) -> Result<RatAffine, Overflow> {
        RatAffine::new(self.num.substitute(map)?, self.den)
    }

    pub fn eval_floor(&self, value: &dyn Fn(VarId) -> i64) -> Result<i64, Overflow> {
        Ok(Integer::div_floor(&self.num.eval(value)?, &self.den))
    }

    pub fn eval_ceil(&self, value: &dyn Fn(VarId) -> i64) -> Result<i64, Overflow> {
        Ok(num_integer::Integer::div_ceil(
            &self.num.eval(value)?,
            &self.den,
        ))
    }

    pub fn is_int_at(&self, value: &dyn Fn(VarId) -> i64) -> Result<bool, Overflow> {
        Ok(self.num.eval(value)?.mod_floor(&self.den) == 0)
    }

    /// Exact rational value as (numerator, denominator).
    pub fn eval_exact(&self, value: &dyn Fn(VarId) -> i64) -> Result<(i64, i64), Overflow> {
        Ok((self.num.eval(value)?, self.den))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_terms_merges_and_drops_zeros() {
        let a = Affine::from_terms([(VarId(2), 3), (VarId(1), 1), (VarId(2), -3)], 4).unwrap();
        assert_eq!(a.terms, vec![(VarId(1), 1)]);
        assert_eq!(a.constant, 4);
    }

    #[test]
    fn rational_forms_are_reduced() {
        let r = RatAffine::new(Affine::from_terms([(VarId(0), 4)], -6).unwrap(), -2).unwrap();
        assert_eq!(r.den, 1);
        assert_eq!(r.num.coeff(VarId(0)), -2);
        assert_eq!(r.num.constant, 3);
    }

    #[test]
    fn overflow_is_reported() {
        let a = Affine::constant(i64::MAX);
        assert_eq!(a.add_const(1), Err(Overflow));
        assert_eq!(
            Affine::var(VarId(0)).scale(i64::MAX).unwrap().scale(2),
            Err(Overflow)
        );
    }

    #[test]
    fn extreme_coefficients_do_not_panic() {
        let a = Affine::from_terms([(VarId(0), i64::MIN)], i64::MIN).unwrap();
        let r = RatAffine::new(a, 2).unwrap();
        assert_eq!(r.den, 1);
        assert_eq!(r.num.constant, i64::MIN / 2);
        assert!(RatAffine::new(Affine::var(VarId(0)), i64::MIN).is_err());
    }

    #[test]
    fn floor_and_ceil_of_negative_values() {
        let r = RatAffine::new(Affine::var(VarId(0)), 3).unwrap();
        assert_eq!(r.eval_floor(&|_| -4).unwrap(), -2);
        assert_eq!(r.eval_ceil(&|_| -4).unwrap(), -1);
    }
}
