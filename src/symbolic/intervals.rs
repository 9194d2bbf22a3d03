//! Interval analysis of an index function: the values each index variable
//! can take, which reductions are never empty, and which nodes may be
//! computed speculatively.
//!
//! Owns [`Intervals`] (computed by [`Intervals::of`]) and interval
//! arithmetic on affine forms. The values are over-approximations (a
//! variable's interval is the hull over every place it is bound), good for
//! decisions that must be safe: lowering hoists a node out of a loop or a
//! guard only when it is speculable, and the planner moves a factor out of
//! a sum only when that cannot read out of bounds. Must not decide anything
//! itself.

use super::affine::{Affine, RatAffine, VarId};
use super::expr::{Node, NodeId};
use super::index_fn::IndexFn;
use rustc_hash::FxHashMap as HashMap;

/// Closed integer interval; `lo > hi` is empty. `i128` so that products of
/// extreme values cannot overflow.
pub(crate) type Interval = (i128, i128);

/// The result of the analysis (see the module documentation).
pub(crate) struct Intervals {
    /// The values of every output and reduction index.
    pub vars: HashMap<VarId, Interval>,
    /// Per reduction node: whether its range is non-empty wherever it is
    /// evaluated.
    pub nonempty: HashMap<NodeId, bool>,
    /// Per reduction node: an upper bound of its trip count.
    pub trips: HashMap<NodeId, u64>,
    /// Per node (by id): whether every argument access reachable from it is
    /// in bounds for all values its index variables can take.
    pub speculable: Vec<bool>,
}

impl Intervals {
    /// Analyses `f` (see the module documentation).
    pub(crate) fn of(f: &IndexFn) -> Intervals {
        let g = &f.graph;
        let mut iv: HashMap<VarId, Interval> = HashMap::default();
        for (v, &n) in f.out_vars.iter().zip(&f.out_shape) {
            iv.insert(*v, (0, n as i128 - 1));
        }
        let mut nonempty_map = HashMap::default();
        let mut trips_map = HashMap::default();
        // Parents have larger ids: visiting in decreasing order sees every
        // enclosing reduction before the ones it contains.
        for id in (0..g.len() as u32).rev().map(NodeId) {
            if let Node::Reduce { var, range, .. } = g.node(id) {
                // Per bound: the interval of its rounded value.
                let lows: Option<Vec<Interval>> = range
                    .lower
                    .iter()
                    .map(|b| {
                        let d = b.den as i128;
                        rat_interval(b, &iv).map(|(l, h)| (div_ceil(l, d), div_ceil(h, d)))
                    })
                    .collect();
                let highs: Option<Vec<Interval>> = range
                    .upper
                    .iter()
                    .map(|b| {
                        let d = b.den as i128;
                        rat_interval(b, &iv).map(|(l, h)| (div_floor(l, d), div_floor(h, d)))
                    })
                    .collect();
                let (lo, hi, nonempty) = match (lows, highs) {
                    (Some(lows), Some(highs)) => {
                        // The loop variable's values, and whether the largest
                        // lower bound never exceeds the smallest upper bound.
                        let lo = lows.iter().map(|i| i.0).max().unwrap_or(i128::MIN);
                        let hi = highs.iter().map(|i| i.1).min().unwrap_or(i128::MAX);
                        let worst_lo = lows.iter().map(|i| i.1).max().unwrap_or(i128::MIN);
                        let worst_hi = highs.iter().map(|i| i.0).min().unwrap_or(i128::MAX);
                        let boxed = lows.iter().chain(&highs).all(|i| i.0 <= i.1);
                        (lo, hi, boxed && worst_lo <= worst_hi)
                    }
                    _ => (i128::MIN / 4, i128::MAX / 4, false), // unknown: never safe
                };
                nonempty_map.insert(id, nonempty);
                let trips = if hi >= lo {
                    (hi - lo + 1).min(u64::MAX as i128) as u64
                } else {
                    0
                };
                trips_map.insert(id, trips);
                let e = iv.entry(*var).or_insert((lo, hi));
                *e = hull(*e, (lo, hi));
            }
        }
        let mut spec = vec![true; g.len()];
        for id in (0..g.len() as u32).map(NodeId) {
            let node = g.node(id);
            let own = match node {
                Node::Access { arg, index } => access_in_bounds(index, &f.args[*arg].shape, &iv),
                _ => true,
            };
            spec[id.0 as usize] = own && node.children().iter().all(|c| spec[c.0 as usize]);
        }
        Intervals {
            vars: iv,
            nonempty: nonempty_map,
            trips: trips_map,
            speculable: spec,
        }
    }

    /// The interval of an affine form over the variables' intervals.
    pub(crate) fn of_affine(&self, a: &Affine) -> Option<Interval> {
        affine_interval(a, &self.vars)
    }

    /// Whether a read at `index` of an argument of `shape` is in bounds
    /// for all values its variables take (an empty interval reads nothing).
    pub(crate) fn in_bounds(&self, index: &[Affine], shape: &[usize]) -> bool {
        access_in_bounds(index, shape, &self.vars)
    }

    /// How many values `v` takes (at least 1; 1 when unknown).
    pub(crate) fn points(&self, v: VarId) -> f64 {
        self.vars
            .get(&v)
            .map_or(1.0, |&(lo, hi)| (hi - lo + 1).max(1) as f64)
    }
}

fn access_in_bounds(index: &[Affine], shape: &[usize], iv: &HashMap<VarId, Interval>) -> bool {
    index
        .iter()
        .zip(shape)
        .all(|(form, &n)| match affine_interval(form, iv) {
            Some((lo, hi)) => lo > hi || (lo >= 0 && hi < n as i128),
            None => false,
        })
}

/// The hull of two intervals (an empty one is ignored).
pub(crate) fn hull(a: Interval, b: Interval) -> Interval {
    if a.0 > a.1 {
        b
    } else if b.0 > b.1 {
        a
    } else {
        (a.0.min(b.0), a.1.max(b.1))
    }
}

pub(crate) fn div_floor(a: i128, d: i128) -> i128 {
    let q = a / d;
    if (a % d != 0) && ((a < 0) != (d < 0)) {
        q - 1
    } else {
        q
    }
}

pub(crate) fn div_ceil(a: i128, d: i128) -> i128 {
    -div_floor(-a, d)
}

/// The range of an affine form over the variables' intervals; `None` when a
/// variable has no interval. An empty variable interval gives an empty one.
pub(crate) fn affine_interval(a: &Affine, iv: &HashMap<VarId, Interval>) -> Option<Interval> {
    let (mut lo, mut hi) = (a.constant as i128, a.constant as i128);
    let mut empty = false;
    for &(v, c) in &a.terms {
        let &(vl, vh) = iv.get(&v)?;
        if vl > vh {
            empty = true;
            continue;
        }
        let (x, y) = (vl.saturating_mul(c as i128), vh.saturating_mul(c as i128));
        lo = lo.saturating_add(x.min(y));
        hi = hi.saturating_add(x.max(y));
    }
    Some(if empty { (1, 0) } else { (lo, hi) })
}

fn rat_interval(r: &RatAffine, iv: &HashMap<VarId, Interval>) -> Option<Interval> {
    affine_interval(&r.num, iv)
}
