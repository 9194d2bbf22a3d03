//! Cutting a subexpression out of a function as a stage of its own.
//!
//! Owns [`cut`]: given a node `e` of a function, the function
//! `s[q₀; …; qₘ] = e` that computes `e` once per point of its domain, and
//! the index at which the function reads it back (`s[φ₀ − lo₀; …]`).
//!
//! **Coordinates.** A stage is indexed by the affine forms through which
//! `e` uses its free indices, not by the indices themselves: the mask
//! `if {z[b; o; s − k] ≥ 0} then (dy[b; o; s − k]) else (0)` inside a
//! convolution's input gradient depends on `(b, o, s − k)`, three
//! coordinates, not on the four indices `b, o, s, k`. The coordinates are
//! found by integer elimination over the forms of `e`, those of its reads
//! first (a padded copy's guard `32 − t ≥ 0` would otherwise make its
//! coordinate run backwards), then its guards and bounds (each new form is
//! reduced by the earlier ones; what remains becomes a coordinate with a
//! pivot index of coefficient ±1); the pivots are then solved for, so the
//! stage's body is `e` with every free index replaced by its value in the
//! coordinates. A form with no ±1 coefficient left (`2·i + 3·j`) refuses
//! the cut.
//!
//! **Order.** The coordinates are ordered by the stride at which `e`'s
//! reads walk them, largest first (ties: first occurrence), so the
//! innermost output loop of the stage reads contiguous memory where it can.
//! The order depends on `e` alone, so the same subexpression met in two
//! functions (two derivatives of one node, a forward pass and its
//! derivative) gives the same stage.
//!
//! **Domain.** Each coordinate's range is its interval over the indices'
//! ranges (`symbolic::intervals`), narrowed to where the reads that `e`
//! always performs (outside its guards and possibly empty sums) are in
//! bounds. It is checked exactly twice by the caller's use: the stage is
//! bounds-checked here, and the function reading it back is bounds-checked
//! by the caller, so a cut that would read outside its domain is refused
//! rather than trusted.
//!
//! Must not decide *what* to cut (that is `extract`), and must not change
//! the function it cuts from.

use crate::symbolic::affine::{Affine, VarId};
use crate::symbolic::expr::{Cond, Node, NodeId};
use crate::symbolic::index_fn::row_major_strides;
use crate::symbolic::intervals::Intervals;
use crate::symbolic::subst::substitute;
use crate::symbolic::IndexFn;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A subexpression as a stage (see the module documentation).
#[derive(Clone)]
pub(crate) struct Cut {
    /// `s[q…] = e`, over the cut function's arguments (all of them),
    /// its coordinates in canonical order.
    pub stage: IndexFn,
    /// The index at which the cut function reads the stage, one form per
    /// dimension of `stage` (over the cut function's indices).
    pub read: Vec<Affine>,
}

/// A form met inside `e`: where it sits decides what it says about the
/// domain.
struct Form {
    /// The form itself (over free and bound indices).
    form: Affine,
    /// For an access evaluated whenever `e` is: its argument and dimension.
    always_read: Option<(usize, usize)>,
    /// Whether an access reads at it (its coordinates come first).
    read: bool,
}

/// The stage computing node `n` of `f` (see the module documentation);
/// `None` when `n` cannot be cut (no unimodular coordinates, an unbounded
/// or empty domain, or a stage that is not in bounds on its domain).
pub(crate) fn cut(f: &IndexFn, iv: &Intervals, n: NodeId) -> Option<Cut> {
    let g = &f.graph;
    let free: Vec<VarId> = g.free_vars(n).to_vec();
    // The forms of reads give the coordinates first, so a stage runs the
    // way the data it reads does (a padded copy's guard `32 − t − k ≥ 0`
    // would otherwise make its coordinate, and the copy, run backwards).
    let mut forms = collect_forms(f, iv, n);
    forms.sort_by_key(|fm| !fm.read);

    // Coordinates, found by elimination. Each keeps its reduced form `R`
    // (coefficient 1 on its pivot, 0 on earlier pivots) for solving, and
    // `R` in terms of the coordinates. A coordinate is the form as read
    // (`1 + c + 2·z`, not what is left of it after `z` was eliminated) when
    // that is unimodular, so a shifted read stays one coordinate that its
    // argument's bounds narrow.
    struct Coord {
        form: Affine,
        reduced: Affine,
        pivot: VarId,
        in_q: Affine,
    }
    let q_var = |j: usize| VarId((f.var_names.len() + j) as u32);
    let mut coords: Vec<Coord> = Vec::new();
    for fm in &forms {
        let original = external(&fm.form, &free);
        let (mut r, mut in_q) = (original.clone(), Affine::var(q_var(coords.len())));
        for c in &coords {
            let k = r.coeff(c.pivot);
            if k != 0 {
                r = r.sub(&c.reduced.scale(k).ok()?).ok()?;
                in_q = in_q.sub(&c.in_q.scale(k).ok()?).ok()?;
            }
        }
        if r.terms.is_empty() {
            continue;
        }
        let gcd = r.coeff_gcd() as i64;
        let (form, reduced, in_q) = if gcd == 1 {
            (original, r, in_q)
        } else {
            // Not unimodular as read: the reduced form is the coordinate.
            let r = Affine::from_terms(r.terms.iter().map(|&(v, c)| (v, c / gcd)), 0).ok()?;
            (r.clone(), r, Affine::var(q_var(coords.len())))
        };
        let &(pivot, pc) = reduced.terms.iter().find(|(_, c)| c.abs() == 1)?;
        coords.push(Coord {
            form,
            reduced: reduced.scale(pc).ok()?,
            pivot,
            in_q: in_q.scale(pc).ok()?,
        });
    }
    let m = coords.len();

    // New output indices (appended to the variable table).
    let mut var_names = f.var_names.clone();
    let q: Vec<VarId> = (0..m)
        .map(|j| {
            var_names.push(format!("s_{j}"));
            q_var(j)
        })
        .collect();

    // Domain: the hull, narrowed by the reads always performed.
    let mut domain: Vec<(i128, i128)> = Vec::with_capacity(m);
    for c in &coords {
        domain.push(iv.of_affine(&c.form)?);
    }
    let pivots: Vec<VarId> = coords.iter().map(|c| c.pivot).collect();
    let sol = solve(
        &coords
            .iter()
            .map(|c| (c.reduced.clone(), c.pivot, c.in_q.clone()))
            .collect::<Vec<_>>(),
    )?;
    for fm in forms.iter().filter(|fm| fm.always_read.is_some()) {
        let (arg, dim) = fm.always_read.expect("filtered");
        let size = f.args[arg].shape[dim] as i128;
        let in_q = fm.form.substitute(&|v| sol.get(&v).cloned()).ok()?;
        let on_q: Vec<(usize, i64)> = q
            .iter()
            .enumerate()
            .filter_map(|(j, v)| Some((j, in_q.coeff(*v))).filter(|(_, c)| *c != 0))
            .collect();
        let [(j, a)] = on_q[..] else { continue };
        if a.abs() != 1 || in_q.vars().any(|v| free.contains(&v)) {
            continue;
        }
        let rest = Affine::from_terms(
            in_q.terms.iter().filter(|(v, _)| !q.contains(v)).copied(),
            in_q.constant,
        )
        .ok()?;
        let (wl, wh) = iv.of_affine(&rest)?;
        let (lo, hi) = if a == 1 {
            (-wl, size - 1 - wh)
        } else {
            (wh - (size - 1), wl)
        };
        domain[j] = (domain[j].0.max(lo), domain[j].1.min(hi));
    }
    let mut sizes = Vec::with_capacity(m);
    for &(lo, hi) in &domain {
        if lo > hi || lo < i64::MIN as i128 / 4 || hi > i64::MAX as i128 / 4 {
            return None;
        }
        sizes.push(usize::try_from(hi - lo + 1).ok()?);
    }

    // The body in the (shifted) coordinates: q_j = q'_j + lo_j.
    let shift: HashMap<VarId, Affine> = q
        .iter()
        .zip(&domain)
        .map(|(&v, &(lo, _))| Some((v, Affine::var(v).add_const(i64::try_from(lo).ok()?).ok()?)))
        .collect::<Option<_>>()?;
    let mut map: HashMap<VarId, Affine> = HashMap::default();
    for p in &pivots {
        let s = sol[p].substitute(&|v| shift.get(&v).cloned()).ok()?;
        map.insert(*p, s);
    }
    // In `n`'s own nodes, not a copy of the whole function's.
    let (mut graph, n) = g.extract(n);
    let body = substitute(&mut graph, n, &map).ok()?;
    if graph.free_vars(body).iter().any(|v| !q.contains(v)) {
        return None; // an index the coordinates do not determine
    }
    let (graph, root) = graph.extract(body);

    // Canonical order: the largest stride first.
    let order = canonical_order(f, &graph, root, &q);
    let stage = IndexFn {
        name: "s".into(),
        out_vars: order.iter().map(|&j| q[j]).collect(),
        out_shape: order.iter().map(|&j| sizes[j]).collect(),
        args: f.args.clone(),
        var_names,
        graph,
        root,
    };
    stage.check_bounds().ok()?;
    let read = order
        .iter()
        .map(|&j| {
            coords[j]
                .form
                .add_const(-i64::try_from(domain[j].0).ok()?)
                .ok()
        })
        .collect::<Option<Vec<Affine>>>()?;
    Some(Cut { stage, read })
}

/// The part of `form` over the indices `free` (no constant).
fn external(form: &Affine, free: &[VarId]) -> Affine {
    Affine {
        terms: form
            .terms
            .iter()
            .filter(|(v, _)| free.contains(v))
            .copied()
            .collect(),
        constant: 0,
    }
}

/// Every affine form under `n` in first-occurrence order (children in
/// order), marking the accesses evaluated whenever `n` is.
fn collect_forms(f: &IndexFn, iv: &Intervals, n: NodeId) -> Vec<Form> {
    let g = &f.graph;
    let mut out = Vec::new();
    let mut seen: HashSet<(NodeId, bool)> = HashSet::default();
    let mut stack = vec![(n, true)];
    while let Some((id, always)) = stack.pop() {
        if !seen.insert((id, always)) {
            continue;
        }
        let mut children: Vec<(NodeId, bool)> = Vec::new();
        match g.node(id) {
            Node::Access { arg, index } => {
                for (d, form) in index.iter().enumerate() {
                    out.push(Form {
                        form: form.clone(),
                        always_read: always.then_some((*arg, d)),
                        read: true,
                    });
                }
            }
            Node::Index(a) => out.push(Form {
                form: a.clone(),
                always_read: None,
                read: false,
            }),
            Node::Random { key, counter } => {
                out.push(Form {
                    form: counter.clone(),
                    always_read: None,
                    read: false,
                });
                children.extend(key.iter().map(|k| (*k, always)));
            }
            Node::Select {
                cond,
                then,
                otherwise,
            } => {
                match cond {
                    Cond::Index(r, _) | Cond::IsInt(r) => out.push(Form {
                        form: r.num.clone(),
                        always_read: None,
                        read: false,
                    }),
                    Cond::Value(a, _, b) => {
                        children.push((*a, always));
                        children.push((*b, always));
                    }
                }
                children.push((*then, false));
                children.push((*otherwise, false));
            }
            Node::Reduce { range, body, .. } => {
                for b in range.lower.iter().chain(&range.upper) {
                    out.push(Form {
                        form: b.num.clone(),
                        always_read: None,
                        read: false,
                    });
                }
                let nonempty = iv.nonempty.get(&id).copied().unwrap_or(false);
                children.push((*body, always && nonempty));
            }
            Node::Unary(_, a) => children.push((*a, always)),
            Node::Binary(_, a, b) => {
                children.push((*a, always));
                children.push((*b, always));
            }
            Node::Const(_) => {}
        }
        stack.extend(children.into_iter().rev());
    }
    out
}

/// The pivots in terms of the coordinates: `reduced = value` for each
/// `(reduced, pivot, value)`, solved by back substitution (each reduced
/// form has coefficient 1 on its pivot and 0 on earlier pivots).
fn solve(coords: &[(Affine, VarId, Affine)]) -> Option<HashMap<VarId, Affine>> {
    let mut sol: HashMap<VarId, Affine> = HashMap::default();
    for (c, p, value) in coords.iter().rev() {
        // p = value − (c − p), later pivots replaced by their solutions.
        let rest = c.sub(&Affine::var(*p)).ok()?;
        let rest = rest.substitute(&|v| sol.get(&v).cloned()).ok()?;
        sol.insert(*p, value.sub(&rest).ok()?);
    }
    Some(sol)
}

/// Positions of `q` sorted by the stride at which the largest argument
/// read under `root` walks each (largest stride first; ties: the smaller
/// stride in that argument, then first occurrence). The largest argument
/// decides because its reads dominate the memory traffic: a bias `c[o]`
/// must not make `o` the innermost coordinate of a `[b; o; t]` stage.
fn canonical_order(
    f: &IndexFn,
    graph: &crate::symbolic::Graph,
    root: NodeId,
    q: &[VarId],
) -> Vec<usize> {
    // Per coordinate: (elements of the largest argument walking it, its
    // smallest stride there); never read: outermost.
    let mut score: Vec<(u128, i128)> = vec![(0, i128::MAX); q.len()];
    for n in graph.reachable(root) {
        if let Node::Access { arg, index } = graph.node(n) {
            let shape = &f.args[*arg].shape;
            let Some(strides) = row_major_strides(shape) else {
                continue;
            };
            let elements = shape.iter().map(|&d| d as u128).product::<u128>();
            for (j, v) in q.iter().enumerate() {
                let flat: i128 = index
                    .iter()
                    .zip(&strides)
                    .map(|(form, &s)| form.coeff(*v) as i128 * s as i128)
                    .sum();
                if flat == 0 {
                    continue;
                }
                let (size, stride) = score[j];
                if elements > size || (elements == size && flat.abs() < stride) {
                    score[j] = (elements, flat.abs());
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..q.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(score[j].1));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str, args: &[(&str, &[usize])], sizes: &[(&str, usize)]) -> IndexFn {
        IndexFn::parse_with_sizes(src, args, sizes).unwrap()
    }

    /// The node of `f` that prints as `text`.
    fn node(f: &IndexFn, text: &str) -> NodeId {
        f.graph
            .reachable(f.root)
            .into_iter()
            .find(|&n| crate::symbolic::print::node_to_string(f, n) == text)
            .unwrap_or_else(|| panic!("no node `{text}` in {f}"))
    }

    #[test]
    fn a_reduction_over_fewer_indices_becomes_a_smaller_stage() {
        let f = parse(
            "f[i; j] = sum{k}_0^3 (a[i; k]) * b[i; j]",
            &[("a", &[2, 4]), ("b", &[2, 3])],
            &[],
        );
        let iv = Intervals::of(&f);
        let c = cut(&f, &iv, node(&f, "sum{k}_0^3 (a[i; k])")).unwrap();
        assert_eq!(c.stage.output_shape(), &[2]);
        assert_eq!(c.stage.to_string(), "s[s_0] = sum{k}_0^3 (a[s_0; k])");
        assert_eq!(c.read.len(), 1);
    }

    #[test]
    fn shifted_reads_are_coordinates_with_a_narrowed_domain() {
        // The mask of a convolution's input gradient depends on (b, s − k).
        let f = parse(
            "f[b; s] = sum{k}_(max [0; s - 5])^(min [2; s]) (if {z[b; s - k] >= 0} then (dy[b; s - k]) else (0) * w[k])",
            &[("z", &[2, 6]), ("dy", &[2, 6]), ("w", &[3])],
            &[("s", 8)],
        );
        let iv = Intervals::of(&f);
        let mask = node(&f, "if {z[b; s + -k] >= 0} then (dy[b; s + -k]) else (0)");
        let c = cut(&f, &iv, mask).unwrap();
        assert_eq!(c.stage.output_shape(), &[2, 6]);
        assert_eq!(
            c.stage.to_string(),
            "s[s_0; s_1] = if {z[s_0; s_1] >= 0} then (dy[s_0; s_1]) else (0)"
        );
        assert_eq!(c.read.len(), 2);
    }

    #[test]
    fn coordinates_follow_the_strides_of_the_reads() {
        // z is read as [b; o; t] but written by a sum over x[b; c; t + k]
        // and w[o; c; k]: t walks x contiguously, so it comes last.
        let f = parse(
            "f[b; o; t] = max(sum{c}_0^1 (sum{k}_0^2 (x[b; c; t + k] * w[o; c; k])), 0)",
            &[("x", &[2, 2, 9]), ("w", &[3, 2, 3])],
            &[("t", 7)],
        );
        let iv = Intervals::of(&f);
        let s = node(&f, "sum{c}_0^1 (sum{k}_0^2 (x[b; c; t + k] * w[o; c; k]))");
        let c = cut(&f, &iv, s).unwrap();
        assert_eq!(c.stage.output_shape(), &[2, 3, 7]);
    }
}
