//! Shared helpers of the integration tests: random inputs and
//! finite-difference checks of derivatives, through the public API only.
#![allow(dead_code)]

pub mod cases;
pub mod ports;
pub mod user_functions;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenjin::symbolic::IndexFn;

/// A function under test: its text, argument shapes and explicit sizes.
pub struct Case {
    pub src: &'static str,
    pub args: Vec<(&'static str, Vec<usize>)>,
    pub sizes: Vec<(&'static str, usize)>,
    /// Inputs drawn from (0.5, 1.5) instead of (-1, 1) (for log, sqrt, pow).
    pub positive: bool,
}

pub fn case(src: &'static str, args: &[(&'static str, &[usize])]) -> Case {
    Case {
        src,
        args: args.iter().map(|(n, s)| (*n, s.to_vec())).collect(),
        sizes: vec![],
        positive: false,
    }
}

impl Case {
    pub fn sizes(mut self, sizes: &[(&'static str, usize)]) -> Case {
        self.sizes = sizes.to_vec();
        self
    }

    pub fn positive(mut self) -> Case {
        self.positive = true;
        self
    }

    pub fn parse(&self) -> IndexFn {
        let args: Vec<(&str, &[usize])> =
            self.args.iter().map(|(n, s)| (*n, s.as_slice())).collect();
        IndexFn::parse_with_sizes(self.src, &args, &self.sizes)
            .unwrap_or_else(|e| panic!("{}: {e}", self.src))
    }
}

pub fn random_vec(rng: &mut StdRng, n: usize, positive: bool) -> Vec<f64> {
    (0..n)
        .map(|_| {
            if positive {
                rng.gen_range(0.5..1.5)
            } else {
                rng.gen_range(-1.0..1.0)
            }
        })
        .collect()
}

pub type Inputs = Vec<(String, Vec<f64>)>;

pub fn random_inputs(f: &IndexFn, rng: &mut StdRng, positive: bool) -> Inputs {
    f.args()
        .iter()
        .map(|a| {
            (
                a.name.clone(),
                random_vec(rng, a.shape.iter().product(), positive),
            )
        })
        .collect()
}

pub fn eval(f: &IndexFn, inputs: &Inputs) -> Vec<f64> {
    let refs: Vec<(&str, &[f64])> = inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    f.eval_f64(&refs)
        .unwrap_or_else(|e| panic!("eval {f}: {e}"))
}

pub fn with(inputs: &Inputs, name: &str, data: Vec<f64>) -> Inputs {
    let mut out: Inputs = inputs.iter().filter(|(n, _)| n != name).cloned().collect();
    out.push((name.to_string(), data));
    out
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Asserts |a − b| ≤ tol · max(1, max|b|) element-wise.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {k}: symbolic {g} vs numeric {w} (scale {scale})\n got  {got:?}\n want {want:?}"
        );
    }
}

/// Central differences of `L(x) = Σ f(x)·G` with respect to `arg`.
pub fn numeric_gradient(f: &IndexFn, inputs: &Inputs, arg: &str, g: &[f64]) -> Vec<f64> {
    let x = &inputs.iter().find(|(n, _)| n == arg).unwrap().1;
    let h = 1e-6;
    (0..x.len())
        .map(|k| {
            let mut plus = x.clone();
            plus[k] += h;
            let mut minus = x.clone();
            minus[k] -= h;
            let lp = dot(&eval(f, &with(inputs, arg, plus)), g);
            let lm = dot(&eval(f, &with(inputs, arg, minus)), g);
            (lp - lm) / (2.0 * h)
        })
        .collect()
}

/// A parsed case with random inputs and a random incoming gradient `G`.
struct Setup {
    f: IndexFn,
    rng: StdRng,
    inputs: Inputs,
    g: Vec<f64>,
    grad_name: String,
}

fn setup(c: &Case, seed: u64) -> Setup {
    let f = c.parse();
    let mut rng = StdRng::seed_from_u64(seed);
    let inputs = random_inputs(&f, &mut rng, c.positive);
    let n_out: usize = f.output_shape().iter().product();
    let g = random_vec(&mut rng, n_out, false);
    let grad_name = format!("d{}", f.name());
    Setup {
        f,
        rng,
        inputs,
        g,
        grad_name,
    }
}

/// Checks every argument's derivative against central differences; returns
/// the derivatives for further checks.
pub fn check_gradients(c: &Case, seed: u64, tol: f64) -> Vec<IndexFn> {
    let Setup {
        f,
        rng: _,
        inputs,
        g,
        grad_name,
    } = setup(c, seed);
    let mut derivs = Vec::new();
    for a in f.args() {
        let d = f
            .derive(&a.name)
            .unwrap_or_else(|e| panic!("derive {} by {}: {e}", c.src, a.name));
        d.check_bounds()
            .unwrap_or_else(|e| panic!("{d}\nis out of bounds: {e}"));
        let reparsed_args: Vec<(&str, &[usize])> = d
            .args()
            .iter()
            .map(|a| (a.name.as_str(), a.shape.as_slice()))
            .collect();
        let text = d.to_string();
        let sizes: Vec<(&str, usize)> = d
            .output_indices()
            .into_iter()
            .zip(d.output_shape().iter().copied())
            .collect();
        let reparsed = IndexFn::parse_with_sizes(&text, &reparsed_args, &sizes)
            .unwrap_or_else(|e| panic!("derivative does not parse back: {e}\n{text}"));
        assert_eq!(
            reparsed, d,
            "printed derivative parses to a different function:\n{text}"
        );
        let sym = eval(&d, &with(&inputs, &grad_name, g.clone()));
        let num = numeric_gradient(&f, &inputs, &a.name, &g);
        assert_close(&format!("{}\n d/d{}: {d}", c.src, a.name), &sym, &num, tol);
        derivs.push(d);
    }
    derivs
}

/// Checks the Hessian-vector product `H·v` of `L = Σ f·G` with respect to
/// `arg` (the derivative of the derivative, with `dd<arg>` = v) against
/// central differences of the symbolic gradient.
pub fn check_hvp(c: &Case, arg: &str, seed: u64, tol: f64) {
    let Setup {
        f,
        mut rng,
        inputs,
        g,
        grad_name,
    } = setup(c, seed);
    let dx = f.derive(arg).unwrap();
    let ddx = dx
        .derive(arg)
        .unwrap_or_else(|e| panic!("second derivative of {}: {e}\n{dx}", c.src));
    ddx.check_bounds()
        .unwrap_or_else(|e| panic!("{ddx}\nis out of bounds: {e}"));
    let x = inputs.iter().find(|(n, _)| n == arg).unwrap().1.clone();
    let v = random_vec(&mut rng, x.len(), false);
    let base = with(&inputs, &grad_name, g.clone());
    let hv = eval(&ddx, &with(&base, &format!("d{}", dx.name()), v.clone()));
    let h = 1e-5;
    let shifted = |s: f64| {
        let xs: Vec<f64> = x.iter().zip(&v).map(|(a, b)| a + s * b).collect();
        eval(&dx, &with(&base, arg, xs))
    };
    let (gp, gm) = (shifted(h), shifted(-h));
    let num: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(p, m)| (p - m) / (2.0 * h))
        .collect();
    assert_close(
        &format!("H·v of {} by {arg}:\n{ddx}", c.src),
        &hv,
        &num,
        tol,
    );
}

/// A float whose bit pattern can be compared.
pub trait Bits: Copy {
    fn bits(self) -> u64;
}

impl Bits for f32 {
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Bits for f64 {
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// Whether two results are equal bit for bit (thread-count independence).
pub fn same_bits<T: Bits>(a: &[T], b: &[T]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.bits() == y.bits())
}

/// CUDA device 0: the simulated one, or with `TENJIN_GPU_TESTS=cuda`
/// (and a build with the `cuda` feature on a machine with a GPU) the real
/// one, so a test file using it checks a card against the CPU.
pub fn gpu() -> tenjin::Device {
    let real = std::env::var("TENJIN_GPU_TESTS").is_ok_and(|v| v == "cuda");
    if real && tenjin::cuda::is_available() {
        return tenjin::Device::Cuda(0);
    }
    if real {
        eprintln!("TENJIN_GPU_TESTS=cuda but no CUDA device is available: the simulated one runs");
    }
    tenjin::cuda::simulate().expect("the simulated device");
    tenjin::Device::Cuda(0)
}

/// The Python of the PyTorch venv of `../shared/bench/setup.sh`
/// (`$TENJIN_BENCH_VENV`, else its default place), or `None` with a
/// message saying the test skips.
pub fn bench_python() -> Option<std::path::PathBuf> {
    let python = std::env::var("TENJIN_BENCH_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/tenjin-bench/venv")
        })
        .join("bin/python");
    if python.exists() {
        return Some(python);
    }
    eprintln!(
        "skipped: no PyTorch venv at {} (run ../shared/bench/setup.sh)",
        python.display()
    );
    None
}
