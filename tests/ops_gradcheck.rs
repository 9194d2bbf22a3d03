//! Every op and every view against finite differences (`tenjin::gradcheck`,
//! f64) on random small shapes (size-1 dimensions and broadcasting
//! included), the same ops in f32 against f64, and comparisons as masks
//! without gradient.
//!
//! Each case is a closure over its input tensors, so one catalogue feeds
//! both the gradient checks and the f32/f64 comparison. Inputs avoid the
//! points where an op is not differentiable (kinks of `relu`, `abs`,
//! `clamp`; ties of `max`).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tenjin::{gradcheck, gradgradcheck_with, DType, Error, GradcheckOptions, Tensor};

type OpFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor, Error>>;

struct Case {
    name: String,
    inputs: Vec<Tensor>,
    f: OpFn,
}

fn case(
    name: impl Into<String>,
    inputs: Vec<Tensor>,
    f: impl Fn(&[Tensor]) -> Result<Tensor, Error> + 'static,
) -> Case {
    Case {
        name: name.into(),
        inputs,
        f: Box::new(f),
    }
}

const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

/// Random data for the cases.
struct Gen(StdRng);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(StdRng::seed_from_u64(seed))
    }

    /// A shape of rank in `ranks`, dimensions in `1..=4`.
    fn shape(&mut self, ranks: std::ops::RangeInclusive<usize>) -> Vec<usize> {
        let r = self.0.gen_range(ranks);
        (0..r).map(|_| self.0.gen_range(1..=4)).collect()
    }

    fn dim(&mut self, range: std::ops::RangeInclusive<usize>) -> usize {
        self.0.gen_range(range)
    }

    fn tensor(&mut self, shape: &[usize], f: impl Fn(&mut StdRng) -> f64) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|_| f(&mut self.0)).collect();
        Tensor::from_vec_f64(v, shape).expect("shape matches data")
    }

    /// Values in `(-1, 1)`.
    fn normal(&mut self, shape: &[usize]) -> Tensor {
        self.tensor(shape, |r| r.gen_range(-1.0..1.0))
    }

    /// Values in `(0.5, 1.5)`.
    fn positive(&mut self, shape: &[usize]) -> Tensor {
        self.tensor(shape, |r| r.gen_range(0.5..1.5))
    }

    /// Values in `(-1.2, 1.2)` at least `0.1` away from each of `points`.
    fn avoiding(&mut self, shape: &[usize], points: &[f64]) -> Tensor {
        self.tensor(shape, |r| loop {
            let v: f64 = r.gen_range(-1.2..1.2);
            if points.iter().all(|p| (v - p).abs() > 0.1) {
                break v;
            }
        })
    }

    /// Pairwise distinct values (at least `0.2` apart), shuffled, offset by
    /// `shift` (two tensors with shifts 0 and 0.1 never tie either).
    fn distinct(&mut self, shape: &[usize], shift: f64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut v: Vec<f64> = (0..n).map(|k| 0.2 * k as f64 - 1.0 + shift).collect();
        v.shuffle(&mut self.0);
        Tensor::from_vec_f64(v, shape).expect("shape matches data")
    }

    /// `shape` with some dimensions set to 1 and some leading ones dropped:
    /// a shape that broadcasts to `shape`.
    fn broadcastable(&mut self, shape: &[usize]) -> Vec<usize> {
        let drop = self.0.gen_range(0..=shape.len());
        let drop = if self.0.gen_bool(0.5) { 0 } else { drop };
        shape[drop..]
            .iter()
            .map(|&n| if self.0.gen_bool(0.3) { 1 } else { n })
            .collect()
    }

    fn bool(&mut self) -> bool {
        self.0.gen_bool(0.5)
    }

    /// A random subset of `0..rank`, never empty when `rank > 0`.
    fn dims(&mut self, rank: usize) -> Vec<usize> {
        let mut d: Vec<usize> = (0..rank).filter(|_| self.0.gen_bool(0.5)).collect();
        if d.is_empty() && rank > 0 {
            d.push(self.0.gen_range(0..rank));
        }
        d
    }
}

fn check(cases: Vec<Case>) {
    assert!(!cases.is_empty());
    let mut failures = Vec::new();
    for c in &cases {
        let shapes: Vec<&[usize]> = c.inputs.iter().map(|t| t.shape()).collect();
        match gradcheck(&c.f, &c.inputs) {
            Ok(r) => assert!(r.compared > 0 || c.inputs.iter().all(|t| t.numel() == 0)),
            Err(e) => failures.push(format!("{} on {shapes:?}: {e}", c.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- catalogue

fn unary_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    type U = fn(&Tensor) -> Result<Tensor, Error>;
    let smooth: &[(&str, U)] = &[
        ("neg", Tensor::neg),
        ("exp", Tensor::exp),
        ("tanh", Tensor::tanh),
        ("sin", Tensor::sin),
        ("cos", Tensor::cos),
        ("sigmoid", Tensor::sigmoid),
        ("square", Tensor::square),
    ];
    let positive: &[(&str, U)] = &[
        ("log", Tensor::log),
        ("log10", Tensor::log10),
        ("sqrt", Tensor::sqrt),
        ("recip", Tensor::recip),
    ];
    let kinked: &[(&str, U)] = &[
        ("abs", Tensor::abs),
        ("sign", Tensor::sign),
        ("relu", Tensor::relu),
    ];
    for &(name, f) in smooth {
        let s = g.shape(0..=3);
        out.push(case(name, vec![g.normal(&s)], move |t| f(&t[0])));
    }
    for &(name, f) in positive {
        let s = g.shape(0..=3);
        out.push(case(name, vec![g.positive(&s)], move |t| f(&t[0])));
    }
    for &(name, f) in kinked {
        let s = g.shape(0..=3);
        out.push(case(name, vec![g.avoiding(&s, &[0.0])], move |t| f(&t[0])));
    }
    out
}

fn binary_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    type B = fn(&Tensor, &Tensor) -> Result<Tensor, Error>;
    let ops: &[(&str, B)] = &[
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", Tensor::pow),
        ("maximum", Tensor::maximum),
        ("minimum", Tensor::minimum),
    ];
    for &(name, f) in ops {
        let full = g.shape(0..=3);
        let (sa, sb) = if g.bool() {
            (full.clone(), g.broadcastable(&full))
        } else {
            (g.broadcastable(&full), full.clone())
        };
        let (a, b) = match name {
            "div" => (g.normal(&sa), g.avoiding(&sb, &[0.0])),
            "pow" => (g.positive(&sa), g.normal(&sb)),
            "maximum" | "minimum" => (g.distinct(&sa, 0.0), g.distinct(&sb, 0.1)),
            _ => (g.normal(&sa), g.normal(&sb)),
        };
        out.push(case(format!("{name} (broadcast)"), vec![a, b], move |t| {
            f(&t[0], &t[1])
        }));
    }
    out
}

fn scalar_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    let s = g.shape(0..=3);
    out.push(case("add_scalar", vec![g.normal(&s)], |t| {
        t[0].add_scalar(1.5)
    }));
    out.push(case("sub_scalar", vec![g.normal(&s)], |t| {
        t[0].sub_scalar(-0.5)
    }));
    out.push(case("rsub_scalar", vec![g.normal(&s)], |t| {
        t[0].rsub_scalar(2.0)
    }));
    out.push(case("mul_scalar", vec![g.normal(&s)], |t| {
        t[0].mul_scalar(-3.0)
    }));
    out.push(case("div_scalar", vec![g.normal(&s)], |t| {
        t[0].div_scalar(0.25)
    }));
    let s = g.shape(1..=3);
    out.push(case("pow_scalar 2.5", vec![g.positive(&s)], |t| {
        t[0].pow_scalar(2.5)
    }));
    out.push(case("pow_scalar 3", vec![g.normal(&s)], |t| {
        t[0].pow_scalar(3.0)
    }));
    out.push(case("pow_scalar -1", vec![g.positive(&s)], |t| {
        t[0].pow_scalar(-1.0)
    }));
    let s = g.shape(1..=3);
    out.push(case("clamp", vec![g.avoiding(&s, &[-0.3, 0.6])], |t| {
        t[0].clamp(-0.3, 0.6)
    }));
    out.push(case("leaky_relu", vec![g.avoiding(&s, &[0.0])], |t| {
        t[0].leaky_relu(0.1)
    }));
    out
}

fn where_cases(g: &mut Gen) -> Vec<Case> {
    let full = g.shape(1..=3);
    let sc = g.broadcastable(&full);
    let sa = g.broadcastable(&full);
    // The condition is data captured by the case, not an input: finite
    // differences of a 0/1 mask would be meaningless.
    let cond = g.normal(&sc);
    vec![
        case(
            "where_ (broadcast a, b and cond)",
            vec![g.normal(&sa), g.normal(&full)],
            move |t| {
                let z = Tensor::zeros(&[], t[0].dtype())?;
                let mask = cond.to_dtype(t[0].dtype())?.gt(&z)?;
                Tensor::where_(&mask, &t[0], &t[1])
            },
        ),
        // The condition computed from a differentiated input: no gradient
        // flows through it, only through the selected values.
        case(
            "where_ (cond from the input)",
            vec![g.avoiding(&full, &[0.0])],
            |t| {
                let z = Tensor::zeros(&[1], t[0].dtype())?;
                Tensor::where_(&t[0].gt(&z)?, &t[0].square()?, &t[0].neg()?)
            },
        ),
    ]
}

fn reduce_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    let s = g.shape(0..=3);
    out.push(case("sum", vec![g.normal(&s)], |t| t[0].sum()));
    out.push(case("mean", vec![g.normal(&s)], |t| t[0].mean()));
    out.push(case("max", vec![g.distinct(&s, 0.0)], |t| t[0].max()));
    out.push(case("min", vec![g.distinct(&s, 0.0)], |t| t[0].min()));
    for keepdim in [false, true] {
        let s = g.shape(1..=4);
        let dims = g.dims(s.len());
        let d = dims.clone();
        out.push(case(
            format!("sum_dims {dims:?} keepdim {keepdim}"),
            vec![g.normal(&s)],
            move |t| t[0].sum_dims(&d, keepdim),
        ));
        let d = dims.clone();
        out.push(case(
            format!("mean_dims {dims:?} keepdim {keepdim}"),
            vec![g.normal(&s)],
            move |t| t[0].mean_dims(&d, keepdim),
        ));
        let d = dims.clone();
        out.push(case(
            format!("max_dims {dims:?} keepdim {keepdim}"),
            vec![g.distinct(&s, 0.0)],
            move |t| t[0].max_dims(&d, keepdim),
        ));
        let d = dims.clone();
        out.push(case(
            format!("min_dims {dims:?} keepdim {keepdim}"),
            vec![g.distinct(&s, 0.0)],
            move |t| t[0].min_dims(&d, keepdim),
        ));
        let d = dims.clone();
        out.push(case(
            format!("logsumexp {dims:?} keepdim {keepdim}"),
            vec![g.normal(&s)],
            move |t| t[0].logsumexp(&d, keepdim),
        ));
    }
    out
}

fn linalg_cases(g: &mut Gen) -> Vec<Case> {
    let (m, k, n) = (g.dim(1..=4), g.dim(1..=4), g.dim(1..=4));
    let b1 = g.dim(1..=3);
    let b2 = g.dim(1..=3);
    let mm = |t: &[Tensor]| t[0].matmul(&t[1]);
    let mut out = vec![
        case("matmul vec·vec", vec![g.normal(&[k]), g.normal(&[k])], mm),
        case(
            "matmul mat·vec",
            vec![g.normal(&[m, k]), g.normal(&[k])],
            mm,
        ),
        case(
            "matmul vec·mat",
            vec![g.normal(&[k]), g.normal(&[k, n])],
            mm,
        ),
        case(
            "matmul mat·mat",
            vec![g.normal(&[m, k]), g.normal(&[k, n])],
            mm,
        ),
        case(
            "matmul batched·mat",
            vec![g.normal(&[b1, m, k]), g.normal(&[k, n])],
            mm,
        ),
        case(
            "matmul broadcast batch",
            vec![g.normal(&[b1, 1, m, k]), g.normal(&[b2, k, n])],
            mm,
        ),
        case(
            "matmul batched·vec",
            vec![g.normal(&[b1, m, k]), g.normal(&[k])],
            mm,
        ),
    ];
    let lead = g.shape(0..=2);
    let xs = [&lead[..], &[k]].concat();
    out.push(case(
        format!("linear with bias, input {xs:?}"),
        vec![g.normal(&xs), g.normal(&[n, k]), g.normal(&[n])],
        |t| t[0].linear(&t[1], Some(&t[2])),
    ));
    out.push(case(
        format!("linear without bias, input {xs:?}"),
        vec![g.normal(&xs), g.normal(&[n, k])],
        |t| t[0].linear(&t[1], None),
    ));
    out
}

fn view_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    let s = g.shape(1..=3);
    let n: usize = s.iter().product();
    // Reshape to a random factorisation: [a, n / a] with a dividing n.
    let divisors: Vec<usize> = (1..=n).filter(|&a| n.is_multiple_of(a)).collect();
    let a = divisors[g.dim(0..=divisors.len() - 1)];
    out.push(case(
        format!("reshape to [{a}, {}]", n / a),
        vec![g.normal(&s)],
        move |t| t[0].reshape(&[a, n / a]),
    ));
    out.push(case("flatten", vec![g.normal(&s)], |t| t[0].flatten()));
    out.push(case("reshape of a view", vec![g.normal(&s)], move |t| {
        t[0].flip(&[0])?.reshape(&[n])
    }));
    let s = g.shape(2..=4);
    let mut perm: Vec<usize> = (0..s.len()).collect();
    perm.shuffle(&mut g.0);
    let p = perm.clone();
    out.push(case(
        format!("permute {perm:?}"),
        vec![g.normal(&s)],
        move |t| t[0].permute(&p),
    ));
    let (a, b) = (g.dim(0..=s.len() - 1), g.dim(0..=s.len() - 1));
    out.push(case(
        format!("transpose {a} {b}"),
        vec![g.normal(&s)],
        move |t| t[0].transpose(a, b),
    ));
    let m = [g.dim(1..=4), g.dim(1..=4)];
    out.push(case("t", vec![g.normal(&m)], |t| t[0].t()));
    out.push(case(
        "t then mul",
        vec![g.normal(&m), g.normal(&[m[1], m[0]])],
        |t| t[0].t()?.mul(&t[1]),
    ));
    let s = g.shape(1..=3);
    let d = g.dim(0..=s.len() - 1);
    let start = g.dim(0..=s[d] - 1);
    let len = g.dim(1..=s[d] - start);
    out.push(case(
        format!("narrow dim {d} {start}+{len}"),
        vec![g.normal(&s)],
        move |t| t[0].narrow(d, start, len),
    ));
    let s = [g.dim(1..=3), g.dim(5..=8)];
    let (start, step) = (g.dim(0..=2), g.dim(1..=3));
    let end = g.dim(start + 1..=s[1]);
    out.push(case(
        format!("slice {start}..{end} step {step}"),
        vec![g.normal(&s)],
        move |t| t[0].slice(1, start, end, step),
    ));
    out.push(case(
        "slice of a slice, then exp",
        vec![g.normal(&[2, 9])],
        |t| t[0].slice(1, 1, 9, 2)?.slice(1, 1, 4, 2)?.exp(),
    ));
    let s = g.shape(1..=3);
    let dims = g.dims(s.len());
    let d = dims.clone();
    out.push(case(
        format!("flip {dims:?}"),
        vec![g.normal(&s)],
        move |t| t[0].flip(&d),
    ));
    let full = g.shape(1..=3);
    let sb = g.broadcastable(&full);
    let f2 = full.clone();
    out.push(case(
        format!("broadcast_to {full:?}"),
        vec![g.normal(&sb)],
        move |t| t[0].broadcast_to(&f2),
    ));
    let s = g.shape(0..=3);
    let d = g.dim(0..=s.len());
    out.push(case(
        format!("unsqueeze {d}"),
        vec![g.normal(&s)],
        move |t| t[0].unsqueeze(d),
    ));
    let mut s = g.shape(0..=2);
    let d = g.dim(0..=s.len());
    s.insert(d, 1);
    out.push(case(format!("squeeze {d}"), vec![g.normal(&s)], move |t| {
        t[0].squeeze(d)
    }));
    let m = [g.dim(1..=4), g.dim(1..=4)];
    for off in [0i64, 1, -1, 2] {
        if (off >= 0 && off as usize >= m[1]) || (off < 0 && (-off) as usize >= m[0]) {
            continue;
        }
        out.push(case(
            format!("diagonal offset {off}"),
            vec![g.normal(&m)],
            move |t| t[0].diagonal(off),
        ));
    }
    let s = g.shape(2..=3);
    out.push(case("contiguous of a transpose", vec![g.normal(&s)], |t| {
        t[0].transpose(0, 1)?.contiguous()
    }));
    out.push(case("contiguous of dense", vec![g.normal(&s)], |t| {
        t[0].contiguous()?.tanh()
    }));
    out.push(case(
        "composed views (permute, flip, narrow, unsqueeze, broadcast)",
        vec![g.normal(&[3, 4])],
        |t| {
            t[0].t()?
                .flip(&[1])?
                .narrow(0, 1, 3)?
                .unsqueeze(0)?
                .broadcast_to(&[2, 3, 3])?
                .sin()
        },
    ));
    out
}

fn shape_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    let s = g.shape(1..=3);
    let d = g.dim(0..=s.len() - 1);
    let k = g.dim(1..=4);
    let mut inputs = Vec::new();
    for _ in 0..k {
        let mut si = s.clone();
        si[d] = g.dim(1..=3);
        inputs.push(g.normal(&si));
    }
    out.push(case(
        format!("cat {k} tensors along {d}"),
        inputs,
        move |t| Tensor::cat(&t.iter().collect::<Vec<_>>(), d),
    ));
    out.push(case(
        "cat of views (transpose, broadcast)",
        vec![g.normal(&[3, 2]), g.normal(&[3])],
        |t| {
            let a = t[0].t()?;
            let b = t[1].broadcast_to(&[1, 3])?;
            Tensor::cat(&[&a, &b, &a], 0)
        },
    ));
    out.push(case("cat with itself", vec![g.normal(&[2, 2])], |t| {
        Tensor::cat(&[&t[0], &t[0]], 1)?.square()
    }));
    let s = g.shape(0..=3);
    let d = g.dim(0..=s.len());
    let k = g.dim(1..=3);
    let inputs = (0..k).map(|_| g.normal(&s)).collect();
    out.push(case(
        format!("stack {k} tensors at {d}"),
        inputs,
        move |t| Tensor::stack(&t.iter().collect::<Vec<_>>(), d),
    ));
    let s = g.shape(1..=3);
    let pads: Vec<(usize, usize)> = s.iter().map(|_| (g.dim(0..=2), g.dim(0..=2))).collect();
    let p = pads.clone();
    out.push(case(
        format!("pad {pads:?}"),
        vec![g.normal(&s)],
        move |t| t[0].pad(&p, 0.5),
    ));
    let s = g.shape(1..=3);
    let p: Vec<(usize, usize)> = s.iter().map(|_| (1, 0)).collect();
    out.push(case("pad of a flip", vec![g.normal(&s)], move |t| {
        t[0].flip(&[0])?.pad(&p, -1.0)?.exp()
    }));
    let s = g.shape(0..=2);
    let extra = g.dim(0..=1);
    let reps: Vec<usize> = (0..s.len() + extra).map(|_| g.dim(1..=3)).collect();
    let r = reps.clone();
    out.push(case(
        format!("repeat {reps:?}"),
        vec![g.normal(&s)],
        move |t| t[0].repeat(&r),
    ));
    out
}

/// `(input shape, weight shape, stride, padding, dilation, groups)` of a
/// random valid convolution with `s` spatial dimensions.
#[allow(clippy::type_complexity)]
fn conv_geometry(
    g: &mut Gen,
    s: usize,
) -> (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    usize,
) {
    let groups = g.dim(1..=2);
    let (cg, q) = (g.dim(1..=2), g.dim(1..=2));
    let n = g.dim(1..=2);
    let mut xs = vec![n, groups * cg];
    let mut ws = vec![groups * q, cg];
    let (mut st, mut pa, mut di) = (vec![], vec![], vec![]);
    for _ in 0..s {
        let k = g.dim(1..=3);
        let dil = g.dim(1..=2);
        let pad = g.dim(0..=2);
        let stride = g.dim(1..=2);
        let span = dil * (k - 1) + 1;
        let len = (span + g.dim(0..=3)).saturating_sub(2 * pad).max(1);
        xs.push(len);
        ws.push(k);
        st.push(stride);
        pa.push(pad);
        di.push(dil);
    }
    (xs, ws, st, pa, di, groups)
}

fn conv_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    for bias in [true, false] {
        let (xs, ws, st, pa, di, groups) = conv_geometry(g, 1);
        let name = format!(
            "conv1d x {xs:?} w {ws:?} stride {} padding {} dilation {} groups {groups} bias {bias}",
            st[0], pa[0], di[0]
        );
        let mut inputs = vec![g.normal(&xs), g.normal(&ws)];
        if bias {
            inputs.push(g.normal(&[ws[0]]));
        }
        out.push(case(name, inputs, move |t| {
            t[0].conv1d(&t[1], t.get(2), st[0], pa[0], di[0], groups)
        }));
        let (xs, ws, st, pa, di, groups) = conv_geometry(g, 2);
        let name = format!(
            "conv2d x {xs:?} w {ws:?} stride {st:?} padding {pa:?} dilation {di:?} groups {groups} bias {bias}"
        );
        let mut inputs = vec![g.normal(&xs), g.normal(&ws)];
        if bias {
            inputs.push(g.normal(&[ws[0]]));
        }
        out.push(case(name, inputs, move |t| {
            t[0].conv2d(
                &t[1],
                t.get(2),
                [st[0], st[1]],
                [pa[0], pa[1]],
                [di[0], di[1]],
                groups,
            )
        }));
    }
    // Fixed cases covering every feature at once.
    out.push(case(
        "conv1d stride 2 padding 2 dilation 2 groups 2",
        vec![g.normal(&[2, 4, 7]), g.normal(&[6, 2, 3]), g.normal(&[6])],
        |t| t[0].conv1d(&t[1], Some(&t[2]), 2, 2, 2, 2),
    ));
    out.push(case(
        "conv2d stride [2, 1] padding [1, 2] dilation [1, 2] groups 3",
        vec![
            g.normal(&[1, 3, 5, 4]),
            g.normal(&[3, 1, 2, 3]),
            g.normal(&[3]),
        ],
        |t| t[0].conv2d(&t[1], Some(&t[2]), [2, 1], [1, 2], [1, 2], 3),
    ));
    out.push(case(
        "conv2d of a permuted input",
        vec![g.normal(&[1, 4, 3, 2]), g.normal(&[3, 2, 2, 2])],
        |t| {
            t[0].permute(&[0, 3, 1, 2])?
                .conv2d(&t[1], None, [1, 1], [1, 0], [1, 1], 1)
        },
    ));
    let lead = g.shape(0..=2);
    let l = g.dim(2..=7);
    let (k, st) = (g.dim(1..=2), g.dim(1..=2));
    let xs = [&lead[..], &[l]].concat();
    out.push(case(
        format!("avg_pool1d {xs:?} kernel {k} stride {st}"),
        vec![g.normal(&xs)],
        move |t| t[0].avg_pool1d(k, st),
    ));
    out.push(case(
        format!("max_pool1d {xs:?} kernel {k} stride {st}"),
        vec![g.distinct(&xs, 0.0)],
        move |t| t[0].max_pool1d(k, st),
    ));
    let lead = g.shape(0..=2);
    let (h, w) = (g.dim(2..=5), g.dim(2..=5));
    let k = [g.dim(1..=2), g.dim(1..=2)];
    let st = [g.dim(1..=2), g.dim(1..=2)];
    let xs = [&lead[..], &[h, w]].concat();
    out.push(case(
        format!("avg_pool2d {xs:?} kernel {k:?} stride {st:?}"),
        vec![g.normal(&xs)],
        move |t| t[0].avg_pool2d(k, st),
    ));
    out.push(case(
        format!("max_pool2d {xs:?} kernel {k:?} stride {st:?}"),
        vec![g.distinct(&xs, 0.0)],
        move |t| t[0].max_pool2d(k, st),
    ));
    out
}

fn loss_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    let s = g.shape(1..=3);
    for d in 0..s.len() {
        out.push(case(
            format!("softmax dim {d}"),
            vec![g.normal(&s)],
            move |t| t[0].softmax(d),
        ));
        out.push(case(
            format!("log_softmax dim {d}"),
            vec![g.normal(&s)],
            move |t| t[0].log_softmax(d),
        ));
    }
    out.push(case(
        "softmax with a large shift",
        vec![g.normal(&[2, 3]).add_scalar(300.0).expect("add")],
        |t| t[0].softmax(1),
    ));
    let (b, c) = (g.dim(1..=4), g.dim(1..=5));
    let labels: Vec<usize> = (0..b).map(|_| g.dim(0..=c - 1)).collect();
    let l = labels.clone();
    out.push(case(
        format!("cross_entropy labels {labels:?}"),
        vec![g.normal(&[b, c])],
        move |t| t[0].cross_entropy(&l),
    ));
    let p = g.positive(&[b, c]);
    let p = p.div(&p.sum_dims(&[1], true).expect("sum")).expect("div");
    out.push(case(
        "cross_entropy_soft",
        vec![g.normal(&[b, c]), p],
        |t| t[0].cross_entropy_soft(&t[1]),
    ));
    out.push(case(
        "cross_entropy of a transposed view",
        vec![g.normal(&[3, 2])],
        |t| t[0].t()?.cross_entropy(&[2, 0]),
    ));
    // Long rows: the same one function (its derivative stays linear: the
    // planner computes the row statistics once).
    let c = 70;
    let labels: Vec<usize> = (0..2).map(|_| g.dim(0..=c - 1)).collect();
    out.push(case(
        format!("cross_entropy with {c} classes"),
        vec![g.normal(&[2, c])],
        move |t| t[0].cross_entropy(&labels),
    ));
    let p = g.positive(&[2, c]);
    out.push(case(
        format!("cross_entropy_soft with {c} classes"),
        vec![g.normal(&[2, c]), p],
        |t| t[0].cross_entropy_soft(&t[1]),
    ));
    out.push(case(
        format!("softmax over {c} elements"),
        vec![g.normal(&[c, 2])],
        |t| t[0].softmax(0),
    ));
    out.push(case(
        format!("log_softmax over {c} elements"),
        vec![g.normal(&[2, c])],
        |t| t[0].log_softmax(1),
    ));
    let s = g.shape(0..=3);
    out.push(case("mse_loss", vec![g.normal(&s), g.normal(&s)], |t| {
        t[0].mse_loss(&t[1])
    }));
    out
}

fn index_fn_cases(g: &mut Gen) -> Vec<Case> {
    vec![
        case(
            "index_fn dilated strided conv",
            vec![g.normal(&[7]), g.normal(&[2])],
            |t| {
                tenjin::index_fn_with_sizes(
                    "y[t] = sum{k}_0^1 (x[2*t + 2*k] * w[k])",
                    &[("x", &t[0]), ("w", &t[1])],
                    &[("t", 2)],
                )
            },
        ),
        case(
            "index_fn with a guard and a view argument",
            vec![g.normal(&[4, 3])],
            |t| {
                let xt = t[0].t()?;
                tenjin::index_fn(
                    "y[i; j] = if {i > 0} then (exp (x[i; j]) * x[i - 1; j]) else (x[i; j] ** 2)",
                    &[("x", &xt)],
                )
            },
        ),
    ]
}

/// The everyday ops of issue 12: element-wise functions, statistics,
/// triangles, layer norm and the pointwise losses.
fn everyday_cases(g: &mut Gen) -> Vec<Case> {
    use tenjin::{LossReduction, Norm};
    let mut out = Vec::new();
    type U = fn(&Tensor) -> Result<Tensor, Error>;
    let smooth: &[(&str, U)] = &[
        ("expm1", Tensor::expm1),
        ("tan", Tensor::tan),
        ("atan", Tensor::atan),
        ("sinh", Tensor::sinh),
        ("cosh", Tensor::cosh),
        ("erf", Tensor::erf),
        ("gelu", Tensor::gelu),
        ("gelu_tanh", Tensor::gelu_tanh),
        ("silu", Tensor::silu),
        ("asin", |x| x.mul_scalar(0.8)?.asin()),
        ("log1p", |x| x.mul_scalar(0.5)?.log1p()),
    ];
    let positive: &[(&str, U)] = &[("log2", Tensor::log2), ("rsqrt", Tensor::rsqrt)];
    for &(name, f) in smooth {
        let s = g.shape(0..=3);
        out.push(case(name, vec![g.normal(&s)], move |t| f(&t[0])));
    }
    for &(name, f) in positive {
        let s = g.shape(0..=3);
        out.push(case(name, vec![g.positive(&s)], move |t| f(&t[0])));
    }
    let s = g.shape(1..=3);
    out.push(case(
        "floor",
        vec![g.avoiding(&s, &[-1.0, 0.0, 1.0])],
        |t| t[0].floor(),
    ));
    out.push(case("elu", vec![g.avoiding(&s, &[0.0])], |t| t[0].elu(0.7)));
    out.push(case("softplus", vec![g.normal(&s)], |t| {
        t[0].softplus(1.0, 20.0)
    }));
    out.push(case(
        "softplus beta 2 threshold 1",
        vec![g.avoiding(&s, &[0.5])],
        |t| t[0].softplus(2.0, 1.0),
    ));
    let b = g.broadcastable(&s);
    out.push(case(
        "atan2",
        vec![g.normal(&s), g.avoiding(&b, &[0.0])],
        |t| t[0].atan2(&t[1]),
    ));
    // Statistics over one or more dimensions.
    let s = g.shape(1..=3);
    let dims = g.dims(s.len());
    let keep = g.bool();
    if s.iter()
        .enumerate()
        .filter(|(d, _)| dims.contains(d))
        .map(|(_, &n)| n)
        .product::<usize>()
        > 1
    {
        let d1 = dims.clone();
        out.push(case("var", vec![g.normal(&s)], move |t| {
            t[0].var(&d1, 1, keep)
        }));
        let d2 = dims.clone();
        out.push(case("std", vec![g.normal(&s)], move |t| {
            t[0].std(&d2, 0, keep)
        }));
    }
    let d3 = dims.clone();
    out.push(case("norm p=2", vec![g.positive(&s)], move |t| {
        t[0].norm(Norm::P(2.0), &d3, keep)
    }));
    let d4 = dims.clone();
    out.push(case("norm p=1", vec![g.avoiding(&s, &[0.0])], move |t| {
        t[0].norm(Norm::P(1.0), &d4, keep)
    }));
    let d5 = dims.clone();
    out.push(case("norm p=3", vec![g.positive(&s)], move |t| {
        t[0].norm(Norm::P(3.0), &d5, keep)
    }));
    let d6 = dims.clone();
    out.push(case("norm inf", vec![g.distinct(&s, 2.0)], move |t| {
        t[0].norm(Norm::Inf, &d6, keep)
    }));
    let dim = g.dim(0..=s.len() - 1);
    out.push(case("prod", vec![g.normal(&s)], move |t| {
        t[0].prod(dim, keep)
    }));
    out.push(case("cumsum", vec![g.normal(&s)], move |t| {
        t[0].cumsum(dim)
    }));
    // Triangles and layer norm.
    let m = g.shape(2..=3);
    let k = g.dim(0..=2) as i64 - 1;
    out.push(case("tril", vec![g.normal(&m)], move |t| t[0].tril(k)));
    out.push(case("triu", vec![g.normal(&m)], move |t| t[0].triu(k)));
    let x = g.shape(2..=3);
    let inner = x[x.len() - 1..].to_vec();
    if inner[0] > 1 {
        out.push(case(
            "layer_norm",
            vec![g.normal(&x), g.normal(&inner), g.normal(&inner)],
            |t| t[0].layer_norm(1, Some(&t[1]), Some(&t[2]), 1e-5),
        ));
    }
    // Batch norm in training (batch statistics), over [N, C] and [N, C, H, W].
    for shape in [vec![4, 3], vec![2, 3, 2, 2]] {
        out.push(case(
            format!("batch_norm {shape:?}"),
            vec![g.normal(&shape), g.normal(&[3]), g.normal(&[3])],
            |t| {
                let mut bn = tenjin::nn::BatchNorm::new(3, 1e-5, 0.1, t[0].dtype())?;
                bn.weight = t[1].clone();
                bn.bias = t[2].clone();
                tenjin::nn::Module::forward(&bn, &t[0])
            },
        ));
    }
    // Padded pools, adaptive pooling, transposed convolution.
    let (h, w) = (g.dim(2..=5), g.dim(2..=5));
    let img = [g.dim(1..=2), g.dim(1..=2), h, w];
    out.push(case("avg_pool2d_padded", vec![g.normal(&img)], |t| {
        t[0].avg_pool2d_padded([2, 2], [1, 2], [1, 1])
    }));
    out.push(case(
        "max_pool2d_padded",
        vec![g.distinct(&img, 0.0)],
        |t| t[0].max_pool2d_padded([3, 2], [2, 1], [1, 1]),
    ));
    let (oh, ow) = (g.dim(1..=h), g.dim(1..=w));
    out.push(case(
        "adaptive_avg_pool2d",
        vec![g.normal(&img)],
        move |t| t[0].adaptive_avg_pool2d([oh, ow]),
    ));
    let (cin, cout) = (g.dim(1..=3), g.dim(1..=2));
    let stride = [g.dim(1..=2), g.dim(1..=3)];
    let dilation = [g.dim(1..=2), 1];
    let output_padding = [stride[0].max(dilation[0]) - 1, stride[1] - 1];
    let x = [g.dim(1..=2), cin, g.dim(1..=3), g.dim(1..=3)];
    let k = [cin, cout, g.dim(1..=3), g.dim(1..=2)];
    out.push(case(
        format!("conv_transpose2d stride {stride:?} dilation {dilation:?}"),
        vec![g.normal(&x), g.normal(&k), g.normal(&[cout])],
        move |t| {
            t[0].conv_transpose2d(&t[1], Some(&t[2]), stride, [0, 0], output_padding, dilation)
        },
    ));
    // Losses, each reduction.
    let s = g.shape(1..=3);
    for (name, r) in [
        ("mean", LossReduction::Mean),
        ("sum", LossReduction::Sum),
        ("none", LossReduction::None),
    ] {
        let (p, y) = (g.normal(&s), g.normal(&s).mul_scalar(0.25).unwrap());
        out.push(case(
            format!("l1_loss {name}"),
            vec![p.clone(), y.clone()],
            move |t| t[0].l1_loss(&t[1], r),
        ));
        out.push(case(
            format!("smooth_l1_loss {name}"),
            vec![g.avoiding(&s, &[]), y.clone()],
            move |t| t[0].smooth_l1_loss(&t[1], 0.5, r),
        ));
        let probs = g.positive(&s).mul_scalar(0.5).unwrap();
        out.push(case(
            format!("bce_with_logits {name}"),
            vec![g.normal(&s), probs],
            move |t| t[0].binary_cross_entropy_with_logits(&t[1], r),
        ));
    }
    out
}

fn all_cases(g: &mut Gen) -> Vec<Case> {
    let mut out = Vec::new();
    for f in [
        unary_cases,
        binary_cases,
        scalar_cases,
        where_cases,
        reduce_cases,
        linalg_cases,
        view_cases,
        shape_cases,
        conv_cases,
        loss_cases,
        index_fn_cases,
        everyday_cases,
    ] {
        out.extend(f(g));
    }
    out
}

// ------------------------------------------------------------------- tests

macro_rules! gradcheck_family {
    ($($test:ident: $family:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                for seed in SEEDS {
                    check($family(&mut Gen::new(seed)));
                }
            }
        )*
    };
}

gradcheck_family! {
    gradcheck_unary: unary_cases,
    gradcheck_binary_broadcasting: binary_cases,
    gradcheck_scalar_ops: scalar_cases,
    gradcheck_where: where_cases,
    gradcheck_reductions: reduce_cases,
    gradcheck_matmul_linear: linalg_cases,
    gradcheck_views: view_cases,
    gradcheck_cat_stack_pad_repeat: shape_cases,
    gradcheck_conv_pool: conv_cases,
    gradcheck_losses: loss_cases,
    gradcheck_index_fn: index_fn_cases,
    gradcheck_everyday_ops: everyday_cases,
}

/// Second derivatives of every op: its recorded gradient (built with
/// `create_graph`) differentiated again, against finite differences of
/// that gradient (`tenjin::gradgradcheck`), to 1e-7 absolute and relative.
fn check_second(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in &cases {
        let shapes: Vec<&[usize]> = c.inputs.iter().map(|t| t.shape()).collect();
        let tight = GradcheckOptions {
            atol: 1e-7,
            rtol: 1e-7,
            ..GradcheckOptions::default()
        };
        if let Err(e) = gradgradcheck_with(&c.f, &c.inputs, tight) {
            failures.push(format!("{} on {shapes:?}: {e}", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

macro_rules! gradgradcheck_family {
    ($($test:ident: $family:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                for seed in 1..=2 {
                    check_second($family(&mut Gen::new(seed)));
                }
            }
        )*
    };
}

gradgradcheck_family! {
    gradgradcheck_unary: unary_cases,
    gradgradcheck_binary_broadcasting: binary_cases,
    gradgradcheck_scalar_ops: scalar_cases,
    gradgradcheck_where: where_cases,
    gradgradcheck_reductions: reduce_cases,
    gradgradcheck_matmul_linear: linalg_cases,
    gradgradcheck_views: view_cases,
    gradgradcheck_cat_stack_pad_repeat: shape_cases,
    gradgradcheck_conv_pool: conv_cases,
    gradgradcheck_losses: loss_cases,
    gradgradcheck_index_fn: index_fn_cases,
    gradgradcheck_everyday_ops: everyday_cases,
}

/// Forward mode on every op: `jvp` (each op's tangent function, one pass)
/// equals the Jacobian from the reverse walk (`jacobian`, a batch of
/// seeds) times the same direction, for each input in turn.
#[test]
fn forward_mode_equals_the_jacobian_for_every_op() {
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in all_cases(&mut Gen::new(1)) {
        for i in 0..c.inputs.len() {
            let f = |x: &Tensor| {
                let mut inputs = c.inputs.clone();
                inputs[i] = x.clone();
                (c.f)(&inputs)
            };
            let x = &c.inputs[i];
            let result = (|| -> Result<(), String> {
                let v = Tensor::randn(x.shape(), DType::F64, 77).map_err(|e| e.to_string())?;
                let (y, jv) = tenjin::autograd::jvp(f, x, &v).map_err(|e| e.to_string())?;
                let j = tenjin::autograd::jacobian(f, x).map_err(|e| e.to_string())?;
                let (jv, j, v) = (
                    jv.to_vec_f64().map_err(|e| e.to_string())?,
                    j.to_vec_f64().map_err(|e| e.to_string())?,
                    v.to_vec_f64().map_err(|e| e.to_string())?,
                );
                if jv.len() != y.numel() {
                    return Err(format!(
                        "jvp has {} elements, the output {}",
                        jv.len(),
                        y.numel()
                    ));
                }
                let want: Vec<f64> = (0..y.numel())
                    .map(|r| (0..v.len()).map(|k| j[r * v.len() + k] * v[k]).sum())
                    .collect();
                let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
                match jv
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| (a - b).abs() > 1e-10 * scale || a.is_nan())
                {
                    Some(k) => Err(format!("element {k}: jvp {} but J·v {}", jv[k], want[k])),
                    None => Ok(()),
                }
            })();
            compared += 1;
            if let Err(e) = result {
                let shapes: Vec<&[usize]> = c.inputs.iter().map(|t| t.shape()).collect();
                failures.push(format!("{} input {i} on {shapes:?}: {e}", c.name));
            }
        }
    }
    assert!(compared > 100, "{compared} comparisons");
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each op on f32 data matches the same op on the same data in f64, in its
/// value and in the gradient of every input.
#[test]
fn f32_matches_f64() {
    let mut failures = Vec::new();
    for seed in SEEDS {
        for c in all_cases(&mut Gen::new(seed)) {
            if let Err(e) = compare_dtypes(&c) {
                failures.push(format!("{}: {e}", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Forward values and gradients (of `Σ y·v` for a fixed random `v`) of a
/// case in `dtype`, as f64.
fn run_in(c: &Case, dtype: DType) -> Result<(Vec<f64>, Vec<Vec<f64>>), Error> {
    let leaves: Vec<Tensor> = c
        .inputs
        .iter()
        .map(|t| t.to_dtype(dtype).map(Tensor::requires_grad))
        .collect::<Result<_, _>>()?;
    let y = (c.f)(&leaves)?;
    let v = Tensor::rand(y.shape(), DType::F64, 99)?.to_dtype(dtype)?;
    y.backward_with(&v)?;
    let grads = leaves
        .iter()
        .map(|l| match l.grad() {
            Some(g) => g.to_vec_f64(),
            None => Ok(vec![0.0; l.numel()]),
        })
        .collect::<Result<_, _>>()?;
    Ok((y.to_vec_f64()?, grads))
}

fn close(what: &str, a: &[f64], b: &[f64]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!(
            "{what}: {} values in f32, {} in f64",
            a.len(),
            b.len()
        ));
    }
    let scale = b.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x - y).abs() <= 1e-4 * scale; // false for NaN too
        if !ok {
            return Err(format!("{what}[{i}]: f32 {x} but f64 {y}"));
        }
    }
    Ok(())
}

fn compare_dtypes(c: &Case) -> Result<(), String> {
    let (y32, g32) = run_in(c, DType::F32).map_err(|e| format!("f32: {e}"))?;
    let (y64, g64) = run_in(c, DType::F64).map_err(|e| format!("f64: {e}"))?;
    close("value", &y32, &y64)?;
    for (k, (a, b)) in g32.iter().zip(&g64).enumerate() {
        close(&format!("gradient of input {k}"), a, b)?;
    }
    Ok(())
}

/// Comparisons are masks: no gradient flows through them, whatever the
/// inputs require.
#[test]
fn comparisons_carry_no_gradient() -> Result<(), Error> {
    type C = fn(&Tensor, &Tensor) -> Result<Tensor, Error>;
    let ops: &[(&str, C)] = &[
        ("gt", Tensor::gt),
        ("ge", Tensor::ge),
        ("lt", Tensor::lt),
        ("le", Tensor::le),
        ("eq", Tensor::eq),
        ("ne", Tensor::ne),
    ];
    let mut g = Gen::new(7);
    for &(name, f) in ops {
        let a = g.normal(&[3, 4]).requires_grad();
        let b = g.normal(&[4]).requires_grad();
        let m = f(&a, &b)?;
        assert!(
            !m.is_requires_grad(),
            "{name}: the mask requires a gradient"
        );
        assert!(m.backward().is_err(), "{name}: backward through a mask");
        let mv = m.to_vec_f64()?;
        assert!(mv.iter().all(|&v| v == 0.0 || v == 1.0), "{name}: {mv:?}");
        // Through a product the mask is a constant factor: d(a·m)/da = m,
        // and b (only compared) gets no gradient at all.
        a.mul(&m)?.sum()?.backward()?;
        assert_eq!(
            a.grad().expect("a has a gradient").to_vec_f64()?,
            mv,
            "{name}"
        );
        assert!(
            b.grad().is_none(),
            "{name}: b got a gradient through a mask"
        );
        // And gradcheck agrees with finite differences (away from ties).
        let (x, y) = (g.distinct(&[2, 3], 0.0), g.distinct(&[3], 0.1));
        gradcheck(move |t| t[0].mul(&f(&t[0], &t[1])?), &[x, y]).map_err(|e| Error::Autograd {
            op: name.into(),
            message: e.to_string(),
        })?;
    }
    // The mask's values are right.
    let a = Tensor::from_vec_f64(vec![1., 2., 3.], &[3])?;
    let b = Tensor::from_vec_f64(vec![2.], &[1])?;
    assert_eq!(a.gt(&b)?.to_vec_f64()?, vec![0., 0., 1.]);
    assert_eq!(a.ge(&b)?.to_vec_f64()?, vec![0., 1., 1.]);
    assert_eq!(a.lt(&b)?.to_vec_f64()?, vec![1., 0., 0.]);
    assert_eq!(a.le(&b)?.to_vec_f64()?, vec![1., 1., 0.]);
    assert_eq!(a.eq(&b)?.to_vec_f64()?, vec![0., 1., 0.]);
    assert_eq!(a.ne(&b)?.to_vec_f64()?, vec![1., 0., 1.]);
    Ok(())
}

/// Forward values of the new ops against direct computations.
#[test]
fn shape_conv_loss_values() -> Result<(), Error> {
    // cat along the middle dimension of three inputs, one of them empty.
    let a = Tensor::arange(4, DType::F64)?.reshape(&[2, 1, 2])?;
    let b = Tensor::zeros(&[2, 0, 2], DType::F64)?;
    let c = Tensor::arange(8, DType::F64)?
        .add_scalar(10.0)?
        .reshape(&[2, 2, 2])?;
    let y = Tensor::cat(&[&a, &b, &c], 1)?;
    assert_eq!(y.shape(), &[2, 3, 2]);
    assert_eq!(
        y.to_vec_f64()?,
        vec![0., 1., 10., 11., 12., 13., 2., 3., 14., 15., 16., 17.]
    );
    // Many inputs (a deep guard tree).
    let parts: Vec<Tensor> = (0..37)
        .map(|k| Tensor::full(&[1, 2], k as f64, DType::F64))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Tensor> = parts.iter().collect();
    let y = Tensor::cat(&refs, 0)?;
    let want: Vec<f64> = (0..37).flat_map(|k| [k as f64, k as f64]).collect();
    assert_eq!(y.to_vec_f64()?, want);
    // repeat against a direct tiling.
    let x = Tensor::arange(6, DType::F64)?.reshape(&[2, 3])?;
    let y = x.repeat(&[2, 1, 2])?;
    assert_eq!(y.shape(), &[2, 2, 6]);
    let row = |r: usize| (0..6).map(move |j| (3 * r + j % 3) as f64);
    let want: Vec<f64> = (0..2).flat_map(|_| (0..2).flat_map(row)).collect();
    assert_eq!(y.to_vec_f64()?, want);
    // conv1d against a direct loop, with every feature.
    let (n, c, l, o, k, groups) = (2, 4, 9, 6, 3, 2);
    let (stride, pad, dil) = (2, 2, 2);
    let x = Tensor::randn(&[n, c, l], DType::F64, 11)?;
    let w = Tensor::randn(&[o, c / groups, k], DType::F64, 12)?;
    let bias = Tensor::randn(&[o], DType::F64, 13)?;
    let y = x.conv1d(&w, Some(&bias), stride, pad, dil, groups)?;
    let lo = (l + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    assert_eq!(y.shape(), &[n, o, lo]);
    let (xv, wv, bv, yv) = (
        x.to_vec_f64()?,
        w.to_vec_f64()?,
        bias.to_vec_f64()?,
        y.to_vec_f64()?,
    );
    let (cg, q) = (c / groups, o / groups);
    for b in 0..n {
        for oc in 0..o {
            for t in 0..lo {
                let mut s = bv[oc];
                for ci in 0..cg {
                    for kk in 0..k {
                        let pos = (stride * t + dil * kk) as i64 - pad as i64;
                        if pos >= 0 && (pos as usize) < l {
                            let ch = (oc / q) * cg + ci;
                            s += xv[(b * c + ch) * l + pos as usize] * wv[(oc * cg + ci) * k + kk];
                        }
                    }
                }
                let got = yv[(b * o + oc) * lo + t];
                assert!((got - s).abs() < 1e-12, "[{b}, {oc}, {t}]: {got} vs {s}");
            }
        }
    }
    // cross_entropy against log_softmax.
    let x = Tensor::randn(&[3, 5], DType::F64, 3)?;
    let ls = x.log_softmax(1)?.to_vec_f64()?;
    let labels = [4, 0, 2];
    let want = -(ls[4] + ls[5] + ls[12]) / 3.0;
    assert!((x.cross_entropy(&labels)?.item()? - want).abs() < 1e-12);
    // Errors are data and name the op.
    let e = x.conv1d(&w, None, 1, 0, 1, 1).unwrap_err().to_string();
    assert!(e.starts_with("conv1d:"), "{e}");
    let e = Tensor::cat(&[&x, &w], 0).unwrap_err().to_string();
    assert!(e.starts_with("cat:"), "{e}");
    assert!(Tensor::cat(&[], 0).is_err());
    assert!(x.conv1d(&w, None, 0, 0, 1, 1).is_err());
    let big = Tensor::randn(&[1, 1, 2], DType::F64, 1)?;
    let wk = Tensor::randn(&[1, 1, 5], DType::F64, 1)?;
    let e = big.conv1d(&wk, None, 1, 1, 1, 1).unwrap_err().to_string();
    assert!(e.contains("kernel spans"), "{e}");
    assert!(big.conv1d(&wk, None, 1, 2, 1, 1).is_ok());
    Ok(())
}

/// Shapes that once broke the core: views of rank-0 tensors (the view map
/// has no rows) and derivatives over size-1 dimensions (bounds equal on
/// the box, like `0` and `β` for `β ∈ 0..=0`, were both pruned, leaving an
/// unbounded sum or an out-of-bounds gather).
#[test]
fn size_one_and_rank_zero_regressions() {
    let mut g = Gen::new(5);
    check(vec![
        case("broadcast of a scalar", vec![g.normal(&[]), g.normal(&[2, 3])], |t| {
            t[0].mul(&t[1])
        }),
        case("unsqueeze of a scalar", vec![g.normal(&[])], |t| {
            t[0].unsqueeze(0)?.unsqueeze(1)
        }),
        case("reshape [1, 1, 3] → [1, 3]", vec![g.normal(&[1, 1, 3])], |t| {
            t[0].reshape(&[1, 3])?.square()
        }),
        case(
            "linear of [1, 1, 3]",
            vec![g.normal(&[1, 1, 3]), g.normal(&[1, 3])],
            |t| t[0].linear(&t[1], None),
        ),
        case(
            "conv1d x [2, 4, 1] w [2, 2, 2] stride 2 padding 2 groups 2",
            vec![g.normal(&[2, 4, 1]), g.normal(&[2, 2, 2])],
            |t| t[0].conv1d(&t[1], None, 2, 2, 1, 2),
        ),
        case(
            "conv2d x [1, 2, 1, 6] w [2, 1, 1, 3] stride [2, 1] padding [2, 0] dilation [2, 1] groups 2",
            vec![g.normal(&[1, 2, 1, 6]), g.normal(&[2, 1, 1, 3])],
            |t| t[0].conv2d(&t[1], None, [2, 1], [2, 0], [2, 1], 2),
        ),
    ]);
}

/// `relu` as PyTorch defines it at the edges: its gradient at exactly 0 is
/// 0, and a NaN input gives NaN, in the interpreter's and the JIT's
/// agreement (f32 and f64).
#[test]
fn relu_at_zero_and_nan_is_pytorchs() -> Result<(), Error> {
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_vec_f64(vec![0.0, f64::NAN, -1.0, 2.0], &[4])?
            .to_dtype(dtype)?
            .requires_grad();
        let y = x.relu()?;
        let v = y.to_vec_f64()?;
        assert_eq!(v[0], 0.0);
        assert!(v[1].is_nan(), "relu(NaN) = {}", v[1]);
        assert_eq!((v[2], v[3]), (0.0, 2.0));
        y.sum()?.backward()?;
        let g = x.grad().unwrap().to_vec_f64()?;
        assert_eq!((g[0], g[2], g[3]), (0.0, 0.0, 1.0), "{dtype:?}");
    }
    Ok(())
}

/// A NaN anywhere reaches the result of every max-type op (as in PyTorch),
/// whatever its position, in f32 (JIT, vectorised where it can) and f64.
#[test]
fn nan_propagates_through_max_type_ops() -> Result<(), Error> {
    for dtype in [DType::F32, DType::F64] {
        for pos in 0..9 {
            let mut v: Vec<f64> = (0..9).map(|k| k as f64 - 4.0).collect();
            v[pos] = f64::NAN;
            let x = Tensor::from_vec_f64(v.clone(), &[9])?.to_dtype(dtype)?;
            let other = Tensor::zeros(&[9], dtype)?;
            let checks: Vec<(&str, Tensor)> = vec![
                ("max", x.max()?),
                ("min", x.min()?),
                ("flipped max", x.flip(&[0])?.max()?),
                ("max_dims", x.reshape(&[3, 3])?.max_dims(&[1], false)?),
                ("min_dims", x.reshape(&[3, 3])?.min_dims(&[0], false)?),
                ("maximum(x, 0)", x.maximum(&other)?),
                ("maximum(0, x)", other.maximum(&x)?),
                ("minimum(x, 0)", x.minimum(&other)?),
                ("clamp", x.clamp(-1.0, 1.0)?),
                ("relu", x.relu()?),
                ("max_pool1d", x.reshape(&[1, 1, 9])?.max_pool1d(9, 1)?),
                (
                    "max_pool2d",
                    x.reshape(&[1, 1, 3, 3])?.max_pool2d([3, 3], [1, 1])?,
                ),
            ];
            for (name, t) in checks {
                let out = t.to_vec_f64()?;
                assert!(
                    out.iter().any(|y| y.is_nan()),
                    "{name} of {v:?} ({dtype:?}) lost the NaN: {out:?}"
                );
            }
        }
    }
    Ok(())
}

/// Ops on empty inputs keep `requires_grad`, and backward gives every
/// input a zero gradient of its shape (PyTorch's behaviour: a conv2d over
/// an empty batch gives its weight a zero gradient).
#[test]
fn empty_inputs_keep_their_gradient() -> Result<(), Error> {
    type Op = fn(&Tensor) -> Result<Tensor, Error>;
    let ops: &[(&str, Op)] = &[
        ("softmax", |x| x.softmax(1)),
        ("log_softmax", |x| x.log_softmax(1)),
        ("repeat", |x| x.repeat(&[2, 1])),
        ("stack", |x| Tensor::stack(&[x, x], 0)),
        ("cat", |x| Tensor::cat(&[x, x], 0)),
        ("max_pool1d", |x| x.reshape(&[0, 1, 5])?.max_pool1d(2, 1)),
        ("matmul", |x| x.matmul(&Tensor::ones(&[5, 2], DType::F64)?)),
    ];
    for (name, op) in ops {
        let x = Tensor::zeros(&[0, 5], DType::F64)?.requires_grad();
        let y = op(&x)?;
        assert!(y.is_requires_grad(), "{name}");
        y.sum()?.backward()?;
        assert_eq!(
            x.grad().map(|g| g.shape().to_vec()),
            Some(vec![0, 5]),
            "{name}"
        );
    }
    let x = Tensor::zeros(&[0, 2, 5, 5], DType::F64)?.requires_grad();
    let w = Tensor::ones(&[3, 2, 3, 3], DType::F64)?.requires_grad();
    let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1)?;
    assert!(y.is_requires_grad());
    y.sum()?.backward()?;
    let gw = w.grad().expect("the weight gets a gradient").to_vec_f64()?;
    assert!(gw.len() == 54 && gw.iter().all(|&g| g == 0.0));
    Ok(())
}

/// Backward through ops with an empty input gives every input requiring a
/// gradient a zero gradient of its own shape, as PyTorch does
/// (`a[0,3] @ b[3,4]` gives `b.grad` = zeros(3,4)).
#[test]
fn backward_through_empty_operands_gives_zero_gradients() -> Result<(), Error> {
    type Binary = fn(&Tensor, &Tensor) -> Result<Tensor, Error>;
    let cases: &[(&str, &[usize], &[usize], Binary)] = &[
        ("matmul", &[0, 3], &[3, 4], |a, b| a.matmul(b)),
        ("add", &[0, 3], &[3], |a, b| a.add(b)),
        ("mul", &[2, 0, 3], &[1, 1, 3], |a, b| a.mul(b)),
        ("pad", &[0, 3], &[3], |a, b| {
            a.pad(&[(1, 1), (0, 0)], 0.0)?.add(b)
        }),
    ];
    for (name, sa, sb, op) in cases {
        let a = Tensor::zeros(sa, DType::F64)?.requires_grad();
        let b = Tensor::ones(sb, DType::F64)?.requires_grad();
        let y = op(&a, &b)?;
        assert!(y.is_requires_grad(), "{name}");
        y.sum()?.backward()?;
        for (t, s) in [(&a, sa), (&b, sb)] {
            let g = t.grad().unwrap_or_else(|| panic!("{name}: no gradient"));
            assert_eq!(g.shape(), *s, "{name}");
            // PyTorch (2.x, float64): every gradient is zero, except b's
            // through pad, which is 2 (two padded rows read it).
            let expected = if *name == "pad" && t.numel() > 0 {
                2.0
            } else {
                0.0
            };
            assert!(g.to_vec_f64()?.iter().all(|&v| v == expected), "{name}");
        }
    }
    Ok(())
}
