//! Gradients as tensors: the trace walked in reverse, each node's derived
//! functions applied as ordinary ops.
//!
//! Owns [`gradients`], the one driver behind `grad`, `vjp`, `hvp`,
//! `jacobian` and `hessian`. A node's derivative with respect to an
//! argument is the index function the symbolic core derived for it
//! (`d<x>[β] = Σ_α d<f>[α] · ∂f[α]/∂x[β]`, reading the node's arguments,
//! the incoming gradient and the node's output). Applied through
//! `ops::apply_index_fn`, it is planned, staged and compiled like any op,
//! and, with `create_graph`, recorded on the tape: a gradient is then a
//! tensor like any other and can be differentiated again, to any order.
//!
//! With the [`Seed::Identity`] seed every derivative is first lifted over
//! leading batch indices (`IndexFn::lift_seed`): one walk computes a whole
//! Jacobian, one row per batch element. The identity, and every gradient
//! without reductions after it, stays symbolic (`Pending::Lazy`) and is
//! inlined into the next derivative, where the delta rule collapses the
//! sums it meets (no `n × n` identity is ever multiplied). Must not run
//! kernels itself or know any op.

use super::post_order;
use crate::ops::{apply_index_fn, window};
use crate::symbolic::IndexFn;
use crate::tensor::Tensor;
use crate::trace::Origin;
use crate::trace::{self, Node};
use crate::Error;
use dashmap::DashMap;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};

/// A derivative lifted over a batch, and its text (its plan's key).
struct Lifted {
    f: IndexFn,
    text: String,
}

/// Lifted derivatives by (derivative text with its shapes, batch): a
/// Jacobian computed again lifts nothing.
type LiftKey = (String, Vec<usize>);
static LIFTED: LazyLock<DashMap<LiftKey, Arc<Lifted>>> = LazyLock::new(DashMap::new);

fn lifted(
    f: &IndexFn,
    text: &str,
    seed: Option<usize>,
    batch: &[usize],
) -> Result<Arc<Lifted>, Error> {
    let shapes: Vec<&[usize]> = f.args().iter().map(|a| &a.shape[..]).collect();
    let key = (
        format!("{text}|{shapes:?}|{:?}", f.output_shape()),
        batch.to_vec(),
    );
    if let Some(l) = LIFTED.get(&key) {
        return Ok(l.clone());
    }
    let f = f.lift_seed(seed, batch, false)?;
    let l = Arc::new(Lifted {
        text: f.to_string(),
        f,
    });
    LIFTED.insert(key, l.clone());
    Ok(l)
}

/// What flows into the outputs.
#[derive(Clone)]
pub(crate) enum Seed {
    /// One gradient per output, of its shape.
    Plain(Vec<Tensor>),
    /// The identity over the elements of the one output: a batch of
    /// gradients, one unit vector per output element (a Jacobian's rows).
    Identity,
}

/// Where a gradient collects: a leaf, or the output of a recorded node.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    Leaf(usize),
    Node(u64),
}

fn target_of(origin: &Origin) -> Option<Target> {
    match origin {
        Origin::Constant => None,
        Origin::Leaf(l) => Some(Target::Leaf(Arc::as_ptr(l) as usize)),
        Origin::Op(n) => Some(Target::Node(n.id())),
    }
}

/// A gradient on its way to a target.
enum Pending {
    /// Computed: the sum of what reached the target.
    Value(Tensor),
    /// Kept symbolic: a function without reductions over
    /// `batch ++ target shape` and the tensors it reads. An identity seed
    /// starts so, and stays so through element-wise derivatives and
    /// reshapes until a sum collapses its deltas or a contraction needs a
    /// value.
    Lazy { f: Box<IndexFn>, args: Vec<Tensor> },
}

/// The largest symbolic gradient kept unevaluated (body nodes).
const LAZY_NODES: usize = 256;

/// `d outputs / d inputs` contracted with `seed`, per input (`None` where
/// no gradient reaches it). With `create_graph` the results are recorded
/// on the tape; otherwise nothing is recorded and they are constants.
/// Gradients of inputs that are outputs of recorded ops (not leaves) are
/// the gradients flowing into those outputs.
pub(crate) fn gradients(
    outputs: &[&Tensor],
    seed: Seed,
    inputs: &[&Tensor],
    create_graph: bool,
) -> Result<Vec<Option<Tensor>>, Error> {
    for x in inputs {
        if x.is_view() {
            return Err(trace::autograd_error(
                "grad",
                format!(
                    "an input of shape {:?} is a view; differentiate with respect to the tensor it views",
                    x.shape()
                ),
            ));
        }
        if !x.is_requires_grad() {
            return Err(trace::autograd_error(
                "grad",
                format!(
                    "an input of shape {:?} does not require a gradient (call .requires_grad() on it before computing the outputs)",
                    x.shape()
                ),
            ));
        }
    }
    trace::with_grad_enabled(create_graph, || {
        let dtype = outputs.first().map_or(crate::DType::F32, |y| y.dtype());
        let device = outputs
            .first()
            .map_or_else(crate::tensor::default_device, |y| y.device());
        let batch = match (&seed, outputs.first()) {
            (Seed::Identity, Some(y)) => y.shape().to_vec(),
            _ => Vec::new(),
        };
        let walk = || Walk::new(inputs, batch, dtype, device)?.run(outputs, seed);
        // A graph of gradients is differentiated again by this walk, which
        // applies each recorded derivative to that op's inputs: they are
        // kept, whatever the op's own backward program would keep (a
        // forward stage, such as a row sum of the incoming gradient, may
        // stand in for an input there).
        if create_graph {
            trace::keep_inputs(walk)
        } else {
            walk()
        }
    })
}

struct Walk {
    batch: Vec<usize>,
    dtype: crate::DType,
    /// Where the gradients are computed (the outputs' device).
    device: crate::Device,
    wanted: Vec<Target>,
    /// Gradients collected so far, per target.
    pending: HashMap<Target, Pending>,
    /// The nodes through which a gradient reaches a wanted target.
    useful: HashSet<u64>,
    /// The shape of each wanted leaf (a gradient may reach it flat,
    /// through a reshape).
    leaf_shapes: HashMap<Target, Vec<usize>>,
}

impl Walk {
    fn new(
        inputs: &[&Tensor],
        batch: Vec<usize>,
        dtype: crate::DType,
        device: crate::Device,
    ) -> Result<Walk, Error> {
        let wanted: Vec<Target> = inputs
            .iter()
            .map(|x| target_of(x.origin()).expect("inputs require a gradient"))
            .collect();
        let leaf_shapes = wanted
            .iter()
            .zip(inputs)
            .map(|(t, x)| (*t, x.shape().to_vec()))
            .collect();
        Ok(Walk {
            batch,
            dtype,
            device,
            wanted,
            pending: HashMap::new(),
            useful: HashSet::new(),
            leaf_shapes,
        })
    }

    fn run(mut self, outputs: &[&Tensor], seed: Seed) -> Result<Vec<Option<Tensor>>, Error> {
        let mut roots: Vec<Arc<Node>> = Vec::new();
        // A view among the outputs is copied, recorded, so that the copy's
        // derivative leads to what it views.
        let dense: Vec<Tensor> = trace::with_grad_enabled(true, || {
            outputs
                .iter()
                .map(|y| y.contiguous())
                .collect::<Result<_, _>>()
        })?;
        let seeds: Vec<Pending> = match seed {
            Seed::Plain(seeds) => {
                check_count(outputs.len(), seeds.len())?;
                for (y, s) in dense.iter().zip(&seeds) {
                    check_seed(y, s.shape(), &[])?;
                }
                seeds.into_iter().map(Pending::Value).collect()
            }
            Seed::Identity => {
                check_count(outputs.len(), 1)?;
                let y = &dense[0];
                vec![if y.rank() == 0 {
                    // The identity over a one-element output is a one.
                    Pending::Value(Tensor::ones_on(&[], y.dtype(), y.device())?)
                } else {
                    Pending::Lazy {
                        f: Box::new(IndexFn::identity(y.shape())?),
                        args: Vec::new(),
                    }
                }]
            }
        };
        for (y, s) in dense.iter().zip(seeds) {
            let Some(t) = target_of(y.origin()) else {
                return Err(trace::autograd_error(
                    "grad",
                    format!(
                        "an output of shape {:?} does not require a gradient: no input it was computed from requires one",
                        y.shape()
                    ),
                ));
            };
            self.add(t, s)?;
            if let Origin::Op(n) = y.origin() {
                roots.push(n.clone());
            }
        }
        for node in self.reverse_topological(&roots) {
            self.visit(&node)?;
        }
        self.wanted
            .clone()
            .into_iter()
            .map(|t| match self.pending.remove(&t) {
                None => Ok(None),
                Some(p) => self.value(p).map(Some),
            })
            .collect()
    }

    /// A pending gradient as a tensor.
    fn value(&self, p: Pending) -> Result<Tensor, Error> {
        match p {
            Pending::Value(v) => Ok(v),
            Pending::Lazy { f, args } => self.evaluate("gradient", &f, None, &args),
        }
    }

    /// `f` applied to `args`, a tensor passed twice read once: a
    /// symbolic gradient names a tensor once per derivative it composes
    /// (`x` and `x_1`), and merged the planner sees one operand (the
    /// Hessian `Σ_i x[i; b]·d(i)·x[i; a]` of a linear model is then one
    /// scaled, symmetric GEMM).
    /// `text` is `f`'s, when the caller has it.
    fn evaluate(
        &self,
        name: &str,
        f: &IndexFn,
        text: Option<&str>,
        args: &[Tensor],
    ) -> Result<Tensor, Error> {
        let mut merged: Option<IndexFn> = None;
        let mut args: Vec<&Tensor> = args.iter().collect();
        let mut j = 1;
        while j < args.len() {
            match (0..j).find(|&i| args[i].reads_as(args[j])) {
                Some(i) => {
                    merged = Some(merged.as_ref().unwrap_or(f).merge_args(i, j)?);
                    args.remove(j);
                }
                None => j += 1,
            }
        }
        let f = merged.as_ref().unwrap_or(f);
        let text = match (&merged, text) {
            (None, Some(t)) => std::borrow::Cow::Borrowed(t),
            _ => std::borrow::Cow::Owned(f.to_string()),
        };
        apply_index_fn(name, f, &text, &args, self.dtype, self.device)
    }

    /// `pending[t] += g`, symbolically while both are symbolic and small.
    fn add(&mut self, t: Target, g: Pending) -> Result<(), Error> {
        let sum = match (self.pending.remove(&t), g) {
            (None, g) => g,
            (Some(Pending::Lazy { f: a, args: mut x }), Pending::Lazy { f: b, args: y })
                if a.node_count() + b.node_count() <= LAZY_NODES =>
            {
                x.extend(y);
                Pending::Lazy {
                    f: Box::new(a.add_fn(&b)?),
                    args: x,
                }
            }
            (Some(a), b) => Pending::Value(self.value(a)?.add(&self.value(b)?)?),
        };
        self.pending.insert(t, sum);
        Ok(())
    }

    /// The nodes reachable from `roots` through which a gradient reaches a
    /// wanted target, every node before the nodes it reads.
    fn reverse_topological(&mut self, roots: &[Arc<Node>]) -> Vec<Arc<Node>> {
        let wanted = &self.wanted;
        let mut order = post_order(roots, |node, kept| {
            wanted.contains(&Target::Node(node.id()))
                || node.edges.iter().any(|e| match e {
                    Origin::Constant => false,
                    Origin::Leaf(_) => target_of(e).is_some_and(|t| wanted.contains(&t)),
                    Origin::Op(c) => kept.contains(&c.id()),
                })
        });
        order.reverse();
        self.useful = order.iter().map(|n| n.id()).collect();
        order
    }

    /// Applies `node`'s derivatives to the gradient collected at its
    /// output, delivering one gradient per differentiated argument.
    fn visit(&mut self, node: &Arc<Node>) -> Result<(), Error> {
        let here = Target::Node(node.id());
        // A wanted node keeps its gradient; the walk reads it on.
        let g = if self.wanted.contains(&here) {
            match self.pending.remove(&here) {
                None => return Ok(()),
                Some(p) => {
                    let v = self.value(p)?;
                    self.pending.insert(here, Pending::Value(v.clone()));
                    Pending::Value(v)
                }
            }
        } else {
            match self.pending.remove(&here) {
                None => return Ok(()),
                Some(p) => p,
            }
        };
        if node.placed.is_some() {
            return self.visit_window(node, g);
        }
        if node.plan.is_host() {
            return Err(crate::trace::autograd_error(
                node.op_name(),
                "a graph of gradients (create_graph, grad of grad, jacobian, hessian) through a host stage (index_select, embedding, gather, to_dtype, checkpoint) is not supported yet: its backward is a host kernel, not an index function".into(),
            ));
        }
        let f = &node.plan.f;
        let n = f.args().len();
        let out = || -> Result<Tensor, Error> {
            let s = node
                .output_storage()
                .ok_or_else(|| missing(node, "its output"))?;
            Ok(Tensor::dense(
                f.output_shape().to_vec(),
                s,
                Origin::Op(node.clone()),
            ))
        };
        let grad = node.grad.clone();
        for (p, &a) in grad.plan.wrt.iter().enumerate() {
            let edge = &node.edges[a];
            let Some(t) = target_of(edge) else { continue };
            if !self.reaches(edge) {
                continue;
            }
            let d = &grad.graph_derivatives()[p];
            // The derivative's arguments but its incoming gradient.
            let mut args: Vec<Tensor> = Vec::with_capacity(d.reads.len());
            let mut seed = None;
            for (k, &r) in d.reads.iter().enumerate() {
                if r < n {
                    let s = node.input_storage(r).ok_or_else(|| {
                        missing(node, &format!("its input `{}`", f.args()[r].name))
                    })?;
                    args.push(Tensor::dense(
                        f.args()[r].shape.clone(),
                        s,
                        node.edges[r].clone(),
                    ));
                } else if r == n {
                    seed = Some(k);
                } else {
                    args.push(out()?);
                }
            }
            let name = format!("d{}/d{}", node.op_name(), f.args()[a].name);
            let contribution = self.apply(&name, d, seed, &g, args)?;
            // A reshape's derivative is flat: give it the target's shape.
            let contribution = self.reshaped(contribution, &self.shape_at(edge, t))?;
            self.add(t, contribution)?;
        }
        Ok(())
    }

    /// A window's gradient: `g` placed at the window's block of the base
    /// (`ops::window`), delivered to the base.
    fn visit_window(&mut self, node: &Arc<Node>, g: Pending) -> Result<(), Error> {
        let edge = &node.edges[0];
        let Some(t) = target_of(edge) else {
            return Ok(());
        };
        if !self.reaches(edge) {
            return Ok(());
        }
        let g = self.value(g)?;
        let placed = window::place_gradient(node, &g, self.batch.len())?;
        self.add(t, Pending::Value(placed.reshape(&self.shape_at(edge, t))?))
    }

    /// The shape of a gradient delivered along `edge` to `t`: the batch's
    /// dimensions, then the target's.
    fn shape_at(&self, edge: &Origin, t: Target) -> Vec<usize> {
        let target: &[usize] = match edge {
            Origin::Op(m) => m.plan.f.output_shape(),
            _ => &self.leaf_shapes[&t],
        };
        self.batch.iter().chain(target).copied().collect()
    }

    /// One derivative `d` applied to the incoming gradient `g` (read as
    /// its argument number `seed`) and the other arguments `args`.
    fn apply(
        &self,
        name: &str,
        d: &trace::GraphDerivative,
        seed: Option<usize>,
        g: &Pending,
        mut args: Vec<Tensor>,
    ) -> Result<Pending, Error> {
        let run = |f: &IndexFn, text: &str, args: &[Tensor]| -> Result<Pending, Error> {
            self.evaluate(name, f, Some(text), args).map(Pending::Value)
        };
        let with_seed = |args: &mut Vec<Tensor>, v: &Tensor| {
            if let Some(k) = seed {
                args.insert(k, v.clone());
            }
        };
        if self.batch.is_empty() {
            let Pending::Value(v) = g else {
                return Err(trace::autograd_error(
                    "grad",
                    "internal: a symbolic gradient without a batch".into(),
                ));
            };
            with_seed(&mut args, v);
            return run(&d.f, &d.text, &args);
        }
        let l = lifted(&d.f, &d.text, seed, &self.batch)?;
        match (g, seed) {
            (Pending::Value(v), _) => {
                with_seed(&mut args, v);
                run(&l.f, &l.text, &args)
            }
            (Pending::Lazy { .. }, None) => run(&l.f, &l.text, &args),
            (
                Pending::Lazy {
                    f: def,
                    args: extra,
                },
                Some(k),
            ) => {
                let f = l.f.inline_arg(k, def)?.collapse_deltas()?;
                args.extend(extra.iter().cloned());
                if f.has_reduction() || f.node_count() > LAZY_NODES {
                    run(&f, &f.to_string(), &args)
                } else {
                    Ok(Pending::Lazy {
                        f: Box::new(f),
                        args,
                    })
                }
            }
        }
    }

    /// `p` with the shape `shape`: a flat gradient (a reshape's
    /// derivative, `batch ++ [numel]`) read at row-major offsets.
    fn reshaped(&self, p: Pending, shape: &[usize]) -> Result<Pending, Error> {
        let current: Vec<usize> = match &p {
            Pending::Value(v) => v.shape().to_vec(),
            Pending::Lazy { f, .. } => f.output_shape().to_vec(),
        };
        if current == shape {
            return Ok(p);
        }
        match p {
            Pending::Value(v) => Ok(Pending::Value(v.reshape(shape)?)),
            Pending::Lazy { f, args } => {
                let unflat = unflatten(&self.batch, &shape[self.batch.len()..], &current)?;
                match unflat {
                    Some(u) => Ok(Pending::Lazy {
                        f: Box::new(u.inline_arg(0, &f)?),
                        args,
                    }),
                    None => Ok(Pending::Value(
                        self.value(Pending::Lazy { f, args })?.reshape(shape)?,
                    )),
                }
            }
        }
    }

    /// Whether a gradient into `edge` can reach a wanted target.
    fn reaches(&self, edge: &Origin) -> bool {
        match edge {
            Origin::Constant => false,
            Origin::Leaf(_) => self.wanted.contains(&target_of(edge).unwrap()),
            Origin::Op(n) => self.useful.contains(&n.id()),
        }
    }
}

/// `u[b…; i…] = flat[b…; Σ stride·i]`: a gradient of shape
/// `batch ++ [numel]` read as `batch ++ shape` (`None` when `current` is
/// not that flat shape).
fn unflatten(
    batch: &[usize],
    shape: &[usize],
    current: &[usize],
) -> Result<Option<IndexFn>, Error> {
    let numel: usize = shape.iter().product();
    let flat: Vec<usize> = batch.iter().copied().chain([numel]).collect();
    if current != flat {
        return Ok(None);
    }
    let b: Vec<String> = (0..batch.len()).map(|k| format!("b{k}")).collect();
    let i: Vec<String> = (0..shape.len()).map(|k| format!("i{k}")).collect();
    let mut stride = 1usize;
    let mut terms: Vec<String> = Vec::new();
    for (name, &n) in i.iter().zip(shape).rev() {
        terms.push(format!("{stride} * {name}"));
        stride *= n;
    }
    let offset = if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    };
    let out: Vec<&str> = b.iter().chain(&i).map(String::as_str).collect();
    let read: Vec<String> = b.iter().cloned().chain([offset]).collect();
    let src = format!("u[{}] = g[{}]", out.join("; "), read.join("; "));
    let sizes: Vec<(&str, usize)> = out
        .iter()
        .copied()
        .zip(batch.iter().chain(shape).copied())
        .collect();
    IndexFn::parse_with_sizes(&src, &[("g", &flat)], &sizes).map(Some)
}

fn missing(node: &Node, what: &str) -> Error {
    trace::autograd_error(
        "grad",
        format!(
            "differentiating through {} needs {what}, which was freed or modified in place after the op ran (a backward without retain_graph releases it, and in runtime-efficient mode an op may keep a forward value instead); compute the outputs inside tenjin::autograd::keep_inputs(|| ...) or in memory-efficient mode",
            node.op_name()
        ),
    )
}

fn check_count(outputs: usize, seeds: usize) -> Result<(), Error> {
    if outputs != seeds {
        return Err(trace::autograd_error(
            "grad",
            format!("{outputs} outputs but {seeds} gradients for them"),
        ));
    }
    Ok(())
}

fn check_seed(y: &Tensor, seed: &[usize], batch: &[usize]) -> Result<(), Error> {
    let want: Vec<usize> = batch.iter().chain(y.shape()).copied().collect();
    if seed != want {
        return Err(Error::Shape {
            op: "grad".into(),
            message: format!(
                "the gradient for an output of shape {:?} has shape {seed:?}; expected {want:?}",
                y.shape()
            ),
        });
    }
    Ok(())
}
