//! Strided placements: where a view's elements lie in a flat buffer.
//!
//! Owns [`Strided`]: element `v` (a point of `shape`, row-major) at
//! `start + Σ_j coeffs[j]·v[j]`, no two elements at one position (a
//! strided window's gradient added into its base's, `x[:, t]` of a
//! `[B, T, D]` tensor). It gives the positions as runs of consecutive
//! elements ([`Strided::runs`], what a host loop adds), the same placement
//! with its dimensions merged where they continue each other
//! ([`Strided::merged`], what one device launch walks) and the positions'
//! extent ([`Strided::reach`], checked before any launch). Must not know
//! which view made the placement, nor add anything itself.
//!
//! ```
//! use tenjin::kernel::strided::Strided;
//! // `x[:, 1]` of a `[2, 3, 4]` tensor: two runs of 4, 12 apart.
//! let s = Strided { shape: vec![2, 4], coeffs: vec![12, 1] };
//! assert_eq!(s.runs(4, 24)?, (vec![4, 16], 4));
//! assert_eq!(s.reach(4), Some((4, 19)));
//! assert!(s.runs(4, 19).is_err()); // a position past the buffer
//! # Ok::<(), tenjin::Error>(())
//! ```

use crate::Error;

/// Element `v` of `shape` at `start + Σ_j coeffs[j]·v[j]` (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strided {
    pub shape: Vec<usize>,
    pub coeffs: Vec<i64>,
}

impl Strided {
    /// The elements as runs of consecutive positions (the innermost
    /// dimensions that continue each other): each run's first position,
    /// element 0 at `start`, and their length; every position checked to
    /// lie below `of`.
    pub fn runs(&self, start: usize, of: usize) -> Result<(Vec<usize>, usize), Error> {
        let (shape, coeffs) = (&self.shape, &self.coeffs);
        let (mut inner, mut run) = (shape.len(), 1usize);
        while inner > 0 && (shape[inner - 1] == 1 || coeffs[inner - 1] == run as i64) {
            inner -= 1;
            run *= shape[inner];
        }
        let outer = &shape[..inner];
        let count: usize = outer.iter().product();
        let mut at = Vec::with_capacity(count);
        let mut v = vec![0usize; outer.len()];
        for _ in 0..count {
            let p = v
                .iter()
                .zip(coeffs)
                .try_fold(start as i64, |p, (&i, &c)| {
                    p.checked_add(c.checked_mul(i as i64)?)
                })
                .and_then(|p| usize::try_from(p).ok())
                .filter(|&p| p + run <= of)
                .ok_or_else(|| outside(&format!("point {v:?} of {shape:?}"), of))?;
            at.push(p);
            for d in (0..v.len()).rev() {
                v[d] += 1;
                if v[d] < outer[d] {
                    break;
                }
                v[d] = 0;
            }
        }
        Ok((at, run))
    }

    /// The same placement with dimensions of size 1 dropped and each
    /// dimension merged into the next where it continues it (its
    /// coefficient the next one's times the next one's size): fewer
    /// dimensions, the same positions in the same order.
    ///
    /// ```
    /// use tenjin::kernel::strided::Strided;
    /// // A chunk of the last dimension of `[2, 3, 12]`: rows 12 apart.
    /// let s = Strided { shape: vec![2, 1, 3, 4], coeffs: vec![36, 99, 12, 1] };
    /// assert_eq!(s.merged(), Strided { shape: vec![6, 4], coeffs: vec![12, 1] });
    /// ```
    pub fn merged(&self) -> Strided {
        let mut out = Strided {
            shape: Vec::new(),
            coeffs: Vec::new(),
        };
        for (&n, &c) in self.shape.iter().zip(&self.coeffs).rev() {
            if n == 1 {
                continue;
            }
            match (out.shape.last_mut(), out.coeffs.last()) {
                (Some(m), Some(&inner)) if c == inner * *m as i64 => *m *= n,
                _ => {
                    out.shape.push(n);
                    out.coeffs.push(c);
                }
            }
        }
        out.shape.reverse();
        out.coeffs.reverse();
        out
    }

    /// The lowest and highest positions of the elements, element 0 at
    /// `start` (`None` when there are none, or they leave `i64`).
    pub fn reach(&self, start: usize) -> Option<(i64, i64)> {
        if self.shape.contains(&0) {
            return None;
        }
        let start = i64::try_from(start).ok()?;
        self.shape
            .iter()
            .zip(&self.coeffs)
            .try_fold((start, start), |(lo, hi), (&n, &c)| {
                let far = c.checked_mul(i64::try_from(n).ok()? - 1)?;
                Some((lo.checked_add(far.min(0))?, hi.checked_add(far.max(0))?))
            })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The error for a placement reaching past a buffer of `of` elements.
pub fn outside(what: &str, of: usize) -> Error {
    Error::Invalid {
        function: "window".into(),
        message: format!("internal: {what} placed outside {of} elements"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_every_position_in_order() {
        let cases = [
            Strided {
                shape: vec![2, 3, 4],
                coeffs: vec![40, 4, 1],
            },
            Strided {
                shape: vec![3, 2, 5],
                coeffs: vec![-10, 5, 1],
            },
            Strided {
                shape: vec![4, 1, 3],
                coeffs: vec![9, 0, -2],
            },
        ];
        for s in cases {
            let start = 40;
            let all = |s: &Strided| {
                let (at, run) = s.runs(start, 200).unwrap();
                at.iter().flat_map(|&p| p..p + run).collect::<Vec<usize>>()
            };
            let merged = s.merged();
            assert!(merged.shape.len() <= s.shape.len());
            assert_eq!(all(&merged), all(&s), "{s:?} → {merged:?}");
            let (lo, hi) = s.reach(start).unwrap();
            let every = all(&s);
            assert_eq!(lo as usize, *every.iter().min().unwrap());
            assert_eq!(hi as usize, *every.iter().max().unwrap());
        }
    }
}
