//! Rewriting a function's arguments: composing an argument's accesses with
//! an affine index map (how tensor views reach kernels without copies), and
//! dropping arguments the body never reads.
//!
//! Owns [`AffineMap`], [`IndexFn::compose_arg`] and
//! [`IndexFn::without_unused_args`]. It knows nothing about tensors: a view
//! is just "argument `a` of shape S is really `base[M·α + c]` with `base` of
//! shape B".

use super::affine::{Affine, Overflow};
use super::expr::{Graph, Node, NodeId};
use super::index_fn::{ArgDecl, IndexFn};
use crate::Error;
use rustc_hash::FxHashMap as HashMap;

/// `base[d] = Σ_j coeffs[d][j] · view[j] + offsets[d]`: where element `view`
/// of a view lives in its base (one row per base dimension).
///
/// ```
/// use tenjin::symbolic::compose::AffineMap;
/// // The transpose of a 2-D base: base[d0; d1] = view[d1; d0].
/// let t = AffineMap::permutation(&[1, 0]);
/// assert_eq!(t.apply(&[2, 5]), vec![5, 2]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffineMap {
    pub coeffs: Vec<Vec<i64>>,
    pub offsets: Vec<i64>,
}

impl AffineMap {
    /// The identity on `rank` dimensions.
    pub fn identity(rank: usize) -> AffineMap {
        let coeffs = (0..rank)
            .map(|d| (0..rank).map(|j| i64::from(d == j)).collect())
            .collect();
        AffineMap {
            coeffs,
            offsets: vec![0; rank],
        }
    }

    /// `view[j]` is `base[perm[j]]`, i.e. `base[perm[j]] = view[j]`.
    pub fn permutation(perm: &[usize]) -> AffineMap {
        let rank = perm.len();
        let mut coeffs = vec![vec![0; rank]; rank];
        for (j, &d) in perm.iter().enumerate() {
            coeffs[d][j] = 1;
        }
        AffineMap {
            coeffs,
            offsets: vec![0; rank],
        }
    }

    /// Number of view dimensions (columns).
    pub fn view_rank(&self) -> usize {
        self.coeffs.first().map_or(0, Vec::len)
    }

    /// Number of base dimensions (rows).
    pub fn base_rank(&self) -> usize {
        self.offsets.len()
    }

    /// The base index of view index `v`.
    pub fn apply(&self, v: &[i64]) -> Vec<i64> {
        self.coeffs
            .iter()
            .zip(&self.offsets)
            .map(|(row, c)| row.iter().zip(v).map(|(a, x)| a * x).sum::<i64>() + c)
            .collect()
    }

    /// `self ∘ inner`: first `inner` (view → middle), then `self` (middle →
    /// base).
    pub fn compose(&self, inner: &AffineMap) -> AffineMap {
        self.compose_to(inner, inner.view_rank())
    }

    /// [`AffineMap::compose`] for a view of rank `view_rank`: a map into a
    /// rank-0 middle has no rows to tell its view's rank (`x[3]` narrowed
    /// to one element, squeezed to rank 0, then unsqueezed).
    pub fn compose_to(&self, inner: &AffineMap, view_rank: usize) -> AffineMap {
        let cols = view_rank;
        let coeffs = self
            .coeffs
            .iter()
            .map(|row| {
                (0..cols)
                    .map(|j| {
                        row.iter()
                            .zip(&inner.coeffs)
                            .map(|(a, r)| r.get(j).map_or(0, |c| a * c))
                            .sum()
                    })
                    .collect()
            })
            .collect();
        let offsets = self
            .coeffs
            .iter()
            .zip(&self.offsets)
            .map(|(row, c)| {
                row.iter()
                    .zip(&inner.offsets)
                    .map(|(a, o)| a * o)
                    .sum::<i64>()
                    + c
            })
            .collect();
        AffineMap { coeffs, offsets }
    }
}

impl IndexFn {
    /// This function with argument `arg` read through `map` from a base of
    /// `base_shape`: every access `arg[e]` becomes `arg[M·e + c]` and the
    /// declaration takes the base's shape. The result is bounds-checked.
    ///
    /// ```
    /// use tenjin::symbolic::{compose::AffineMap, IndexFn};
    /// let f = IndexFn::parse("f[i; j] = x[i; j] * 2", &[("x", &[3, 2][..])])?;
    /// // x is the transpose of a [2, 3] base.
    /// let g = f.compose_arg(0, &[2, 3], &AffineMap::permutation(&[1, 0]))?;
    /// assert_eq!(g.to_string(), "f[i; j] = x[j; i] * 2");
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn compose_arg(
        &self,
        arg: usize,
        base_shape: &[usize],
        map: &AffineMap,
    ) -> Result<IndexFn, Error> {
        let decl = self
            .args
            .get(arg)
            .ok_or_else(|| self.invalid(format!("no argument number {arg}")))?;
        // A map into a rank-0 base has no rows to tell its view rank: every
        // view index reads the one element, whatever the view's rank.
        let view_rank_ok = map.base_rank() == 0 || map.view_rank() == decl.shape.len();
        if !view_rank_ok || map.base_rank() != base_shape.len() {
            return Err(self.invalid(format!(
                "a map from rank {} to rank {} cannot compose argument `{}` of rank {} with a base of rank {}",
                map.view_rank(),
                map.base_rank(),
                decl.name,
                decl.shape.len(),
                base_shape.len()
            )));
        }
        let overflow = |_: Overflow| Error::Overflow {
            op: format!("compose argument `{}` of {}", decl.name, self.name),
        };
        let mut out = self.clone();
        out.args[arg].shape = base_shape.to_vec();
        let root = rewrite_accesses(&mut out.graph, self.root, &mut |a, index| {
            if a != arg {
                return Ok(None);
            }
            let mapped = map
                .coeffs
                .iter()
                .zip(&map.offsets)
                .map(|(row, &c)| {
                    let mut form = Affine::constant(c);
                    for (e, &k) in index.iter().zip(row) {
                        if k != 0 {
                            form = form.add(&e.scale(k)?)?;
                        }
                    }
                    Ok(form)
                })
                .collect::<Result<Vec<_>, Overflow>>()?;
            Ok(Some((a, mapped)))
        })
        .map_err(overflow)?;
        out.root = root;
        out.check_bounds()?;
        Ok(out)
    }

    /// Positions of the arguments the body reads.
    pub fn used_args(&self) -> Vec<usize> {
        let mut used = vec![false; self.args.len()];
        for n in self.graph.reachable(self.root) {
            if let Node::Access { arg, .. } = self.graph.node(n) {
                used[*arg] = true;
            }
        }
        (0..used.len()).filter(|&a| used[a]).collect()
    }

    /// This function without the arguments its body never reads, and the
    /// original positions of the arguments kept (in order).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = y[i] * 3", &[("x", &[4][..]), ("y", &[4][..])])?;
    /// let (g, kept) = f.without_unused_args();
    /// assert_eq!(kept, vec![1]);
    /// assert_eq!(g.args().len(), 1);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn without_unused_args(&self) -> (IndexFn, Vec<usize>) {
        let kept = self.used_args();
        if kept.len() == self.args.len() {
            return (self.clone(), kept);
        }
        let out = self.with_args(&kept);
        (out, kept)
    }

    /// This function taking exactly the arguments at positions `order` of
    /// its current ones, in that order. Every argument the body reads must
    /// be among them (an argument read but not listed makes the result
    /// read the first listed argument instead; callers list all of
    /// [`IndexFn::used_args`]).
    ///
    /// ```
    /// use tenjin::symbolic::IndexFn;
    /// let f = IndexFn::parse("f[i] = x[i] - y[i]", &[("x", &[4][..]), ("y", &[4][..])])?;
    /// let g = f.with_args(&[1, 0]);
    /// assert_eq!(g.args()[0].name, "y");
    /// assert_eq!(g.eval_f64(&[("x", &[3.; 4][..]), ("y", &[1.; 4][..])])?, vec![2.; 4]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn with_args(&self, order: &[usize]) -> IndexFn {
        let renumber: HashMap<usize, usize> = order
            .iter()
            .enumerate()
            .map(|(new, &old)| (old, new))
            .collect();
        let mut out = self.clone();
        out.args = order
            .iter()
            .map(|&a| self.args[a].clone())
            .collect::<Vec<ArgDecl>>();
        out.root = rewrite_accesses(&mut out.graph, self.root, &mut |a, index| {
            Ok(Some((
                renumber.get(&a).copied().unwrap_or(0),
                index.to_vec(),
            )))
        })
        .expect("renumbering arguments does no arithmetic");
        let (graph, root) = out.graph.extract(out.root);
        out.graph = graph;
        out.root = root;
        out
    }
}

type AccessRewrite<'a> =
    dyn FnMut(usize, &[Affine]) -> Result<Option<(usize, Vec<Affine>)>, Overflow> + 'a;

/// Rebuilds the DAG under `root` with accesses rewritten by `f` (`None`
/// keeps an access as it is). Children are rebuilt before parents.
fn rewrite_accesses(
    g: &mut Graph,
    root: NodeId,
    f: &mut AccessRewrite,
) -> Result<NodeId, Overflow> {
    let mut map: HashMap<NodeId, NodeId> = HashMap::default();
    for n in g.reachable(root) {
        let node = g.node(n).clone();
        let new = match &node {
            Node::Access { arg, index } => match f(*arg, index)? {
                Some((arg, index)) => g.access(arg, index),
                None => n,
            },
            _ => {
                let rebuilt = node.map_children(&|c| map[&c]);
                if rebuilt == node {
                    n
                } else {
                    g.intern(rebuilt)
                }
            }
        };
        map.insert(n, new);
    }
    Ok(map[&root])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composing_maps_matches_applying_them_in_turn() {
        let transpose = AffineMap::permutation(&[1, 0]);
        let shift = AffineMap {
            coeffs: vec![vec![1, 0], vec![0, -1]],
            offsets: vec![2, 4],
        };
        let both = shift.compose(&transpose);
        for v in [[0, 0], [1, 3], [2, 1]] {
            assert_eq!(both.apply(&v), shift.apply(&transpose.apply(&v)));
        }
    }

    #[test]
    fn broadcasting_and_slicing_compose_into_accesses() {
        let f = IndexFn::parse(
            "f[i; j] = x[i; j] + y[i; j]",
            &[("x", &[2, 3][..]), ("y", &[2, 3][..])],
        )
        .unwrap();
        // y broadcasts a [3] base over rows; x is rows 1..3 of a [4, 3] base.
        let g = f
            .compose_arg(
                1,
                &[3],
                &AffineMap {
                    coeffs: vec![vec![0, 1]],
                    offsets: vec![0],
                },
            )
            .unwrap()
            .compose_arg(
                0,
                &[4, 3],
                &AffineMap {
                    coeffs: vec![vec![1, 0], vec![0, 1]],
                    offsets: vec![1, 0],
                },
            )
            .unwrap();
        let y = g
            .eval_f64(&[
                ("x", &(0..12).map(f64::from).collect::<Vec<_>>()[..]),
                ("y", &[10., 20., 30.][..]),
            ])
            .unwrap();
        assert_eq!(y, vec![13., 24., 35., 16., 27., 38.]);
        // A map that leaves the base is refused.
        let bad = AffineMap {
            coeffs: vec![vec![1, 0], vec![0, 1]],
            offsets: vec![3, 0],
        };
        assert!(matches!(
            f.compose_arg(0, &[4, 3], &bad),
            Err(Error::OutOfBounds { .. })
        ));
    }
}
