//! Small typed builders for the index-function text of ops, so that an op
//! reads as its formula (`define("f", &i, guard(ge(&i[0], 1), access("x",
//! &i), "0"))`) and no op escapes braces by hand.
//!
//! Owns the spelling of the notation's pieces — index lists, accesses,
//! definitions, reductions, guards, conditions, affine index forms,
//! explicit sizes — and nothing else: which formula an op uses is the op's
//! business, parsing is `crate::symbolic`'s. Each builder returns the text
//! the parser reads back unchanged (`tests` below pin the spelling).

use std::fmt::Display;

/// Index names `{prefix}0, {prefix}1, …` for `rank` dimensions.
///
/// ```ignore
/// assert_eq!(indices("i", 2), ["i0", "i1"]);
/// ```
pub(crate) fn indices(prefix: &str, rank: usize) -> Vec<String> {
    (0..rank).map(|d| format!("{prefix}{d}")).collect()
}

/// `name[e0; e1; …]`: an access (or an output's left-hand side).
pub(crate) fn access<S: AsRef<str>>(name: &str, index: &[S]) -> String {
    let parts: Vec<&str> = index.iter().map(AsRef::as_ref).collect();
    format!("{name}[{}]", parts.join("; "))
}

/// `name[e0; e1; …] = body`: a whole index function.
pub(crate) fn define<S: AsRef<str>>(name: &str, out: &[S], body: impl Display) -> String {
    format!("{} = {body}", access(name, out))
}

/// `op{var}_lo^hi (body)` for a reduction `op` (`sum`, `max`, `min`).
pub(crate) fn reduce(
    op: &str,
    var: impl Display,
    lo: impl Display,
    hi: impl Display,
    body: impl Display,
) -> String {
    format!("{op}{{{var}}}_{lo}^{hi} ({body})")
}

/// `sum{var}_lo^hi (body)`.
pub(crate) fn sum(
    var: impl Display,
    lo: impl Display,
    hi: impl Display,
    body: impl Display,
) -> String {
    reduce("sum", var, lo, hi, body)
}

/// `body` summed over `var` from 0 to `n - 1`.
pub(crate) fn sum_to(var: impl Display, n: usize, body: impl Display) -> String {
    sum(var, 0, n as i64 - 1, body)
}

/// `if {cond} then (then) else (otherwise)`.
pub(crate) fn guard(cond: impl Display, then: impl Display, otherwise: impl Display) -> String {
    format!("if {{{cond}}} then ({then}) else ({otherwise})")
}

/// `a op b` as a guard's condition (`op` one of `<`, `<=`, `>`, `>=`, `=`,
/// `!=`).
pub(crate) fn cmp(a: impl Display, op: &str, b: impl Display) -> String {
    format!("{a} {op} {b}")
}

/// `base + offset` as an index form (`base` alone for offset 0).
pub(crate) fn shifted(base: impl Display, offset: i64) -> String {
    match offset {
        0 => base.to_string(),
        o if o < 0 => format!("{base} - {}", -o),
        o => format!("{base} + {o}"),
    }
}

/// `(index names, explicit sizes)` for an output of `shape`, indices named
/// `{prefix}{d}`.
pub(crate) fn sizes(prefix: &str, shape: &[usize]) -> Vec<(String, usize)> {
    shape
        .iter()
        .enumerate()
        .map(|(d, &n)| (format!("{prefix}{d}"), n))
        .collect()
}

/// `sizes` as the `(&str, usize)` pairs `apply` takes.
pub(crate) fn size_refs(sizes: &[(String, usize)]) -> Vec<(&str, usize)> {
    sizes.iter().map(|(n, s)| (n.as_str(), *s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolic::IndexFn;

    #[test]
    fn the_pieces_spell_the_notation() {
        let i = indices("i", 2);
        assert_eq!(i, ["i0", "i1"]);
        assert_eq!(access("x", &i), "x[i0; i1]");
        assert_eq!(access::<&str>("l", &[]), "l[]");
        assert_eq!(sum_to("k", 4, "x[k]"), "sum{k}_0^3 (x[k])");
        assert_eq!(reduce("max", "m", 0, 2, "x[m]"), "max{m}_0^2 (x[m])");
        assert_eq!(
            guard(cmp("i0", ">=", 1), "x[i0 - 1]", 0),
            "if {i0 >= 1} then (x[i0 - 1]) else (0)"
        );
        assert_eq!(shifted("i0", -2), "i0 - 2");
        assert_eq!(shifted("i0", 3), "i0 + 3");
        assert_eq!(shifted("i0", 0), "i0");
    }

    #[test]
    fn built_text_parses_back() {
        let i = indices("i", 1);
        let body = guard(
            cmp(&i[0], ">=", 1),
            sum_to(
                "k",
                2,
                access("x", &[format!("{} + k", shifted(&i[0], -1))]),
            ),
            "0",
        );
        let src = define("f", &i, body);
        let f = IndexFn::parse_with_sizes(&src, &[("x", &[5][..])], &[("i0", 4)]).unwrap();
        assert_eq!(f.output_shape(), &[4]);
    }
}
