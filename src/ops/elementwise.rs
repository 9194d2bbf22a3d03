//! Element-wise operations: unary maths, operations with a scalar, binary
//! operations with NumPy broadcasting, comparisons and `where`.
//!
//! Each op is one line of index-function text over the full index `I` of
//! its output, listed in a table; broadcasting is a view (no copy), so
//! `a + b` with `b` of shape `[n]` and `a` of `[m, n]` is
//! `f[i0; i1] = a[i0; i1] + b[i1]` after composition.

use super::formula::{self, access, cmp, define, guard, indices, size_refs};
use super::{apply, lit};
use crate::tensor::Tensor;
use crate::Error;

/// Unary ops: method name and body over `{x}` (the element of the input).
const UNARY: &[(&str, &str)] = &[
    ("neg", "-{x}"),
    ("exp", "exp ({x})"),
    ("log", "log ({x})"),
    ("log10", "log10 ({x})"),
    ("sqrt", "sqrt ({x})"),
    ("tanh", "tanh ({x})"),
    ("sin", "sin ({x})"),
    ("cos", "cos ({x})"),
    ("abs", "abs ({x})"),
    ("sign", "sgn ({x})"),
    ("sigmoid", "sigmoid ({x})"),
    // `0` first: the first operand wins ties, so the gradient at 0 is 0
    // (as PyTorch's), and a NaN input stays NaN (`0 >= NaN` is false).
    ("relu", "max(0, {x})"),
    ("square", "{x} ** 2"),
    ("recip", "1 / {x}"),
    ("log1p", "log1p ({x})"),
    ("expm1", "expm1 ({x})"),
    ("log2", "log ({x}) / 0.6931471805599453"),
    ("rsqrt", "1 / sqrt ({x})"),
    ("tan", "sin ({x}) / cos ({x})"),
    ("atan", "atan ({x})"),
    // (1 − x)(1 + x) keeps 1 − x² accurate near ±1; |x| > 1 gives NaN.
    ("asin", "atan ({x} / sqrt ((1 - {x}) * (1 + {x})))"),
    // expm1 on both sides: no cancellation near 0.
    ("sinh", "(expm1 ({x}) - expm1 (-{x})) * 0.5"),
    ("cosh", "(exp ({x}) + exp (-{x})) * 0.5"),
    ("erf", "erf ({x})"),
    // PyTorch's default (exact) GELU: x·Φ(x).
    ("gelu", "0.5 * {x} * (1 + erf ({x} * 0.7071067811865476))"),
    // PyTorch's `approximate='tanh'`.
    (
        "gelu_tanh",
        "0.5 * {x} * (1 + tanh (0.7978845608028654 * ({x} + 0.044715 * {x} ** 3)))",
    ),
    ("silu", "{x} * sigmoid ({x})"),
    ("floor", "floor ({x})"),
];

/// Binary ops with broadcasting: method name and body over `{a}`, `{b}`.
const BINARY: &[(&str, &str)] = &[
    ("add", "{a} + {b}"),
    ("sub", "{a} - {b}"),
    ("mul", "{a} * {b}"),
    ("div", "{a} / {b}"),
    ("pow", "{a} ** {b}"),
    ("maximum", "max({a}, {b})"),
    ("minimum", "min({a}, {b})"),
    // The quadrant from the signs; `b = 0` by the sign of `a`; a NaN falls
    // through to the last branch.
    (
        "atan2",
        "if {{b} > 0} then (atan ({a} / {b})) else (if {{b} < 0} then (if {{a} >= 0} then (atan ({a} / {b}) + 3.141592653589793) else (atan ({a} / {b}) - 3.141592653589793)) else (if {{b} = 0} then (if {{a} > 0} then (1.5707963267948966) else (if {{a} < 0} then (-1.5707963267948966) else (0 * {a}))) else ({a} + {b})))",
    ),
];

/// Operations with a scalar `c`: method name and body over `{x}`, `{c}`.
const SCALAR: &[(&str, &str)] = &[
    ("add_scalar", "{x} + {c}"),
    ("sub_scalar", "{x} - {c}"),
    ("rsub_scalar", "{c} - {x}"),
    ("mul_scalar", "{x} * {c}"),
    ("div_scalar", "{x} / {c}"),
    ("pow_scalar", "{x} ** {c}"),
];

/// Comparisons: method name and the condition between `{a}` and `{b}`.
const COMPARE: &[(&str, &str)] = &[
    ("gt", ">"),
    ("ge", ">="),
    ("lt", "<"),
    ("le", "<="),
    ("eq", "="),
    ("ne", "!="),
];

fn body_of(table: &[(&str, &'static str)], name: &str) -> &'static str {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
        .expect("op listed in its table")
}

/// The NumPy broadcast of two shapes, or an error naming the dimension.
pub(crate) fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>, Error> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], d: usize| {
        if d + s.len() >= r {
            s[d + s.len() - r]
        } else {
            1
        }
    };
    (0..r)
        .map(|d| match (at(a, d), at(b, d)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(Error::shape(
                op,
                format!(
                    "lhs {a:?} and rhs {b:?} do not broadcast: dimension {d} of the result would need {x} (lhs) and {y} (rhs) to match or one of them to be 1"
                ),
            )),
        })
        .collect()
}

impl Tensor {
    fn unary(&self, name: &str) -> Result<Tensor, Error> {
        let ix = indices("i", self.rank());
        let body = body_of(UNARY, name).replace("{x}", &access("x", &ix));
        apply(name, &define("f", &ix, body), &[("x", self)], &[])
    }

    fn binary(&self, name: &str, other: &Tensor) -> Result<Tensor, Error> {
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        let a = self.broadcast_to(&shape)?;
        let b = other.broadcast_to(&shape)?;
        let ix = indices("i", shape.len());
        let body = body_of(BINARY, name)
            .replace("{a}", &access("a", &ix))
            .replace("{b}", &access("b", &ix));
        apply(name, &define("f", &ix, body), &[("a", &a), ("b", &b)], &[])
    }

    fn scalar_op(&self, name: &str, c: f64) -> Result<Tensor, Error> {
        self.with_scalar(name, body_of(SCALAR, name), c)
    }

    fn with_scalar(&self, name: &str, template: &str, c: f64) -> Result<Tensor, Error> {
        let ix = indices("i", self.rank());
        let body = template
            .replace("{x}", &access("x", &ix))
            .replace("{c}", &lit(name, c)?);
        // The constant can fold the body to a constant (`x * 0`, `x ** 0`),
        // leaving no access to size the output by: give the sizes.
        let sizes = formula::sizes("i", self.shape());
        apply(
            name,
            &define("f", &ix, body),
            &[("x", self)],
            &size_refs(&sizes),
        )
    }

    /// Values limited to `[lo, hi]` (the gradient is zero where clamped).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec(vec![-2., 0.5, 3.], &[3])?;
    /// assert_eq!(x.clamp(-1.0, 1.0)?.to_vec()?, vec![-1., 0.5, 1.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn clamp(&self, lo: f64, hi: f64) -> Result<Tensor, Error> {
        if lo > hi {
            return Err(Error::shape(
                "clamp",
                format!("the lower bound {lo} exceeds the upper bound {hi}"),
            ));
        }
        let template = "min(max({x}, {lo}), {c})".replace("{lo}", &lit("clamp", lo)?);
        self.with_scalar("clamp", &template, hi)
    }

    /// ELU: `x` where `x > 0`, else `alpha · (eˣ − 1)` (PyTorch's `elu`).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![-1., 2.], &[2])?;
    /// let y = x.elu(1.0)?.to_vec_f64()?;
    /// assert!((y[0] - (-1f64).exp_m1()).abs() < 1e-15 && y[1] == 2.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn elu(&self, alpha: f64) -> Result<Tensor, Error> {
        self.with_scalar(
            "elu",
            "if {{x} > 0} then ({x}) else ({c} * expm1 ({x}))",
            alpha,
        )
    }

    /// Softplus `log(1 + e^(βx)) / β`, linear (`x`) where `βx > threshold`
    /// (PyTorch's `softplus(beta=1, threshold=20)` is `softplus(1.0, 20.0)`).
    ///
    /// ```
    /// let x = tenjin::Tensor::from_vec_f64(vec![0., 30.], &[2])?;
    /// let y = x.softplus(1.0, 20.0)?.to_vec_f64()?;
    /// assert!((y[0] - 2f64.ln()).abs() < 1e-15 && y[1] == 30.0);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn softplus(&self, beta: f64, threshold: f64) -> Result<Tensor, Error> {
        let template =
            "if {{x} * {beta} > {t}} then ({x}) else (log1p (exp ({x} * {beta})) / {beta})"
                .replace("{beta}", &lit("softplus", beta)?)
                .replace("{t}", &lit("softplus", threshold)?);
        let ix = indices("i", self.rank());
        let body = template.replace("{x}", &access("x", &ix));
        apply("softplus", &define("f", &ix, body), &[("x", self)], &[])
    }

    /// `max(x, slope · x)`: leaky ReLU (`slope` < 1).
    pub fn leaky_relu(&self, slope: f64) -> Result<Tensor, Error> {
        self.with_scalar("leaky_relu", "max({x}, {x} * {c})", slope)
    }

    /// `where(cond, a, b)`: `a` where `cond` is non-zero, else `b`, with
    /// broadcasting. The condition carries no gradient.
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let x = Tensor::from_vec(vec![-1., 2., -3.], &[3])?;
    /// let zero = Tensor::zeros(&[1], tenjin::DType::F32)?;
    /// let relu = Tensor::where_(&x.gt(&zero)?, &x, &zero)?;
    /// assert_eq!(relu.to_vec()?, vec![0., 2., 0.]);
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor, Error> {
        let ab = broadcast_shapes("where", a.shape(), b.shape())?;
        let shape = broadcast_shapes("where", cond.shape(), &ab)?;
        let c = cond.detach().broadcast_to(&shape)?;
        let (a, b) = (a.broadcast_to(&shape)?, b.broadcast_to(&shape)?);
        let ix = indices("i", shape.len());
        let body = guard(
            cmp(access("c", &ix), "!=", 0),
            access("a", &ix),
            access("b", &ix),
        );
        let src = define("f", &ix, body);
        apply("where", &src, &[("c", &c), ("a", &a), ("b", &b)], &[])
    }

    /// `value` where `mask` is non-zero, else `self` (PyTorch's
    /// `masked_fill`); `mask` broadcasts to `self`'s shape and carries no
    /// gradient. `value` may be ±∞ or NaN (an attention mask's `-inf`).
    ///
    /// ```
    /// use tenjin::Tensor;
    /// let scores = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;
    /// let causal = Tensor::from_vec(vec![0., 1., 0., 0.], &[2, 2])?;
    /// let p = scores.masked_fill(&causal, f64::NEG_INFINITY)?.softmax(-1)?.to_vec()?;
    /// assert_eq!(p[..2], [1.0, 0.0]);
    /// assert!(scores.masked_fill(&Tensor::ones(&[3], tenjin::DType::F32)?, 0.0).is_err());
    /// # Ok::<(), tenjin::Error>(())
    /// ```
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor, Error> {
        let shape = broadcast_shapes("masked_fill", self.shape(), mask.shape())?;
        if shape != self.shape() {
            return Err(Error::shape(
                "masked_fill",
                format!(
                    "a mask of shape {:?} does not broadcast to the input's shape {:?}",
                    mask.shape(),
                    self.shape()
                ),
            ));
        }
        let c = mask.detach().broadcast_to(&shape)?;
        let ix = indices("i", shape.len());
        let value = if value.is_nan() {
            "nan".to_string()
        } else if value.is_infinite() {
            if value > 0.0 { "inf" } else { "(-inf)" }.to_string()
        } else {
            lit("masked_fill", value)?
        };
        let body = guard(cmp(access("c", &ix), "!=", 0), value, access("x", &ix));
        let sizes = formula::sizes("i", self.shape());
        apply(
            "masked_fill",
            &define("f", &ix, body),
            &[("c", &c), ("x", self)],
            &size_refs(&sizes),
        )
    }

    fn compare(&self, name: &str, other: &Tensor) -> Result<Tensor, Error> {
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
        if !self.dtype().is_float() || !other.dtype().is_float() {
            return self.integer_compare(name, other, &shape);
        }
        let a = self.detach().broadcast_to(&shape)?;
        let b = other.detach().broadcast_to(&shape)?;
        let ix = indices("i", shape.len());
        let op = body_of(COMPARE, name);
        let src = define(
            "f",
            &ix,
            guard(cmp(access("a", &ix), op, access("b", &ix)), 1, 0),
        );
        apply(name, &src, &[("a", &a), ("b", &b)], &[])
    }
}

/// Public methods from a table: each `name` calls `self.via("name")`, or
/// `self.via("name", arg)` for methods taking one argument.
macro_rules! table_methods {
    ($via:ident() { $($name:ident: $doc:literal),* $(,)? }) => {
        impl Tensor {
            $(
                #[doc = $doc]
                pub fn $name(&self) -> Result<Tensor, Error> {
                    self.$via(stringify!($name))
                }
            )*
        }
    };
    ($via:ident($arg:ident: $ty:ty) { $($name:ident: $doc:literal),* $(,)? }) => {
        impl Tensor {
            $(
                #[doc = $doc]
                pub fn $name(&self, $arg: $ty) -> Result<Tensor, Error> {
                    self.$via(stringify!($name), $arg)
                }
            )*
        }
    };
}

table_methods!(unary() {
    neg: "`-x` element-wise.",
    exp: "`exp(x)` element-wise.\n\n```\nlet x = tenjin::Tensor::from_vec_f64(vec![0., 1.], &[2])?;\nassert_eq!(x.exp()?.to_vec_f64()?, vec![1., 1f64.exp()]);\n# Ok::<(), tenjin::Error>(())\n```",
    log: "Natural logarithm element-wise.",
    log10: "Base-10 logarithm element-wise.",
    sqrt: "Square root element-wise.",
    tanh: "`tanh(x)` element-wise.",
    sin: "`sin(x)` element-wise.",
    cos: "`cos(x)` element-wise.",
    abs: "`|x|` element-wise.",
    sign: "The sign (−1, 0, 1) element-wise; its gradient is zero.",
    sigmoid: "`1 / (1 + exp(-x))` element-wise.",
    relu: "`max(x, 0)` element-wise.\n\n```\nlet x = tenjin::Tensor::from_vec(vec![-1., 2.], &[2])?;\nassert_eq!(x.relu()?.to_vec()?, vec![0., 2.]);\n# Ok::<(), tenjin::Error>(())\n```",
    square: "`x²` element-wise.",
    recip: "`1 / x` element-wise.",
    log1p: "`log(1 + x)` element-wise, accurate near 0.\n\n```\nlet x = tenjin::Tensor::from_vec_f64(vec![1e-20], &[1])?;\nassert_eq!(x.log1p()?.to_vec_f64()?, vec![1e-20]);\n# Ok::<(), tenjin::Error>(())\n```",
    expm1: "`eˣ − 1` element-wise, accurate near 0.",
    log2: "Base-2 logarithm element-wise.",
    rsqrt: "`1 / √x` element-wise.",
    tan: "`tan(x)` element-wise.",
    atan: "`atan(x)` element-wise.",
    asin: "`asin(x)` element-wise (NaN outside [−1, 1]).",
    sinh: "`sinh(x)` element-wise.",
    cosh: "`cosh(x)` element-wise.",
    erf: "The error function element-wise.",
    gelu: "GELU `x·Φ(x) = x·(1 + erf(x/√2))/2` (PyTorch's default, exact).\n\n```\nlet x = tenjin::Tensor::from_vec_f64(vec![0., 1.], &[2])?;\nlet y = x.gelu()?.to_vec_f64()?;\nassert!(y[0] == 0.0 && (y[1] - 0.8413447460685429).abs() < 1e-15);\n# Ok::<(), tenjin::Error>(())\n```",
    gelu_tanh: "GELU with PyTorch's `approximate='tanh'`.",
    silu: "SiLU (swish) `x · sigmoid(x)`.",
    floor: "Rounds down element-wise; its gradient is zero.",
});

table_methods!(binary(other: &Tensor) {
    add: "`a + b` with NumPy broadcasting.\n\n```\nuse tenjin::Tensor;\nlet a = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;\nlet b = Tensor::from_vec(vec![10., 20.], &[2])?;\nassert_eq!(a.add(&b)?.to_vec()?, vec![11., 22., 13., 24.]);\nassert!(a.add(&Tensor::ones(&[3], tenjin::DType::F32)?).is_err());\n# Ok::<(), tenjin::Error>(())\n```",
    sub: "`a - b` with broadcasting.",
    mul: "`a · b` with broadcasting.",
    div: "`a / b` with broadcasting.",
    pow: "`a ** b` with broadcasting.",
    maximum: "`max(a, b)` with broadcasting (ties send the gradient to `a`).",
    minimum: "`min(a, b)` with broadcasting (ties send the gradient to `a`).",
    atan2: "`atan2(a, b)`: the angle of the point `(b, a)`, in (−π, π], with broadcasting.\n\n```\nuse tenjin::Tensor;\nlet y = Tensor::from_vec_f64(vec![1., -1.], &[2])?;\nlet x = Tensor::from_vec_f64(vec![-1., 0.], &[2])?;\nlet a = y.atan2(&x)?.to_vec_f64()?;\nassert!((a[0] - 0.75 * std::f64::consts::PI).abs() < 1e-15);\nassert_eq!(a[1], -std::f64::consts::FRAC_PI_2);\n# Ok::<(), tenjin::Error>(())\n```",
});

table_methods!(compare(other: &Tensor) {
    gt: "`1` where `a > b`, else `0` (a mask: no gradient).",
    ge: "`1` where `a >= b`, else `0` (no gradient).",
    lt: "`1` where `a < b`, else `0` (no gradient).",
    le: "`1` where `a <= b`, else `0` (no gradient).",
    eq: "`1` where `a == b`, else `0` (no gradient).",
    ne: "`1` where `a != b`, else `0` (no gradient).",
});

table_methods!(scalar_op(c: f64) {
    add_scalar: "`x + c` element-wise.",
    sub_scalar: "`x - c` element-wise.",
    rsub_scalar: "`c - x` element-wise.",
    mul_scalar: "`x · c` element-wise.\n\n```\nlet x = tenjin::Tensor::from_vec(vec![1., -2.], &[2])?;\nassert_eq!(x.mul_scalar(3.0)?.to_vec()?, vec![3., -6.]);\n# Ok::<(), tenjin::Error>(())\n```",
    div_scalar: "`x / c` element-wise.",
    pow_scalar: "`x ** c` element-wise.",
});
