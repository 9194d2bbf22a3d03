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

    fn compare(&self, name: &str, other: &Tensor) -> Result<Tensor, Error> {
        let shape = broadcast_shapes(name, self.shape(), other.shape())?;
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
});

table_methods!(binary(other: &Tensor) {
    add: "`a + b` with NumPy broadcasting.\n\n```\nuse tenjin::Tensor;\nlet a = Tensor::from_vec(vec![1., 2., 3., 4.], &[2, 2])?;\nlet b = Tensor::from_vec(vec![10., 20.], &[2])?;\nassert_eq!(a.add(&b)?.to_vec()?, vec![11., 22., 13., 24.]);\nassert!(a.add(&Tensor::ones(&[3], tenjin::DType::F32)?).is_err());\n# Ok::<(), tenjin::Error>(())\n```",
    sub: "`a - b` with broadcasting.",
    mul: "`a · b` with broadcasting.",
    div: "`a / b` with broadcasting.",
    pow: "`a ** b` with broadcasting.",
    maximum: "`max(a, b)` with broadcasting (ties send the gradient to `a`).",
    minimum: "`min(a, b)` with broadcasting (ties send the gradient to `a`).",
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
