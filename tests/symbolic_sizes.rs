//! Sizes that stay symbols (issue 28), in the symbolic core: a function
//! whose sizes are affine forms in size symbols is derived once for every
//! value of them. Each derivative, bound to values, computes what the
//! concrete function's derivative computes at those values (bit for bit,
//! on random data, in the reference interpreter); it prints in the
//! paper's notation with the symbols in its sum ranges and guards, and
//! parses back to the same text; it can be derived again; and sizes that
//! fall out of bounds for some value are refused when parsed.

mod common;

use rand::{rngs::StdRng, SeedableRng};
use tenjin::symbolic::sizes::SymbolicFn;
use tenjin::symbolic::IndexFn;
use tenjin::Error;

/// `f` evaluated on random values of every argument (the same for the
/// same `seed`).
fn eval(f: &IndexFn, seed: u64) -> Vec<f64> {
    common::eval(
        f,
        &common::random_inputs(f, &mut StdRng::seed_from_u64(seed), false),
    )
}

/// Derives `f` by each of `wrt` symbolically, and checks every derivative
/// against the concrete one at each binding of `values`: the same values,
/// bit for bit. Returns the symbolic derivatives.
fn derive_everywhere(
    f: &SymbolicFn,
    wrt: &[&str],
    values: &[&[(&str, usize)]],
) -> Result<Vec<SymbolicFn>, Error> {
    let mut out = Vec::new();
    for &arg in wrt {
        let d = f.derive(arg)?;
        for &at in values {
            let symbolic_then_bound = d.bind(at)?;
            let bound_then_derived = f.bind(at)?.derive(arg)?;
            assert_eq!(
                symbolic_then_bound.output_shape(),
                bound_then_derived.output_shape(),
                "d{arg} of {f} at {at:?}"
            );
            let (got, want) = (eval(&symbolic_then_bound, 7), eval(&bound_then_derived, 7));
            assert!(!want.is_empty());
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "d{arg} of {f} at {at:?}, element {k}: {g} symbolic, {w} concrete\n{d}\n{bound_then_derived}"
                );
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// `d` printed, parsed back with its own sizes and printed again: the
/// same text.
fn parses_back(d: &SymbolicFn) -> Result<(), Error> {
    let text = d.to_string();
    let sizes = d.arg_sizes();
    let dims: Vec<Vec<&str>> = sizes
        .iter()
        .map(|(_, s)| s.iter().map(String::as_str).collect())
        .collect();
    let args: Vec<(&str, &[&str])> = sizes
        .iter()
        .zip(&dims)
        .map(|((n, _), s)| (n.as_str(), s.as_slice()))
        .collect();
    let outs = d.output_sizes();
    let head = text.split(" = ").next().unwrap_or_default();
    let names: Vec<&str> = head
        .trim_end_matches(']')
        .split_once('[')
        .map(|(_, i)| i.split("; ").filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let given: Vec<(&str, &str)> = names
        .iter()
        .zip(&outs)
        .map(|(n, s)| (*n, s.as_str()))
        .collect();
    let again = SymbolicFn::parse(&text, &args, &given)?;
    assert_eq!(again.to_string(), text);
    assert_eq!(again.output_sizes(), outs);
    Ok(())
}

#[test]
fn a_linear_layer_over_a_symbolic_batch_derives_once_for_every_batch() -> Result<(), Error> {
    let f = SymbolicFn::parse(
        "y[b; o] = tanh (sum{k}_0^4 (x[b; k] * w[k; o]) + c[o])",
        &[
            ("x", &["B", "5"][..]),
            ("w", &["5", "3"][..]),
            ("c", &["3"][..]),
        ],
        &[],
    )?;
    assert_eq!(f.symbols(), ["B"]);
    assert_eq!(f.output_sizes(), ["B", "3"]);
    let at: [&[(&str, usize)]; 4] = [&[("B", 2)], &[("B", 3)], &[("B", 17)], &[("B", 64)]];
    let ds = derive_everywhere(&f, &["x", "w", "c"], &at)?;
    // The weight's and the bias's gradients sum over the batch: their
    // ranges end at B − 1, whatever B is.
    for d in &ds[1..] {
        assert!(d.to_string().contains("(-1 + B)"), "{d}");
        parses_back(d)?;
    }
    parses_back(&ds[0])?;
    Ok(())
}

#[test]
fn a_sliding_window_over_a_symbolic_length_solves_its_borders_in_the_symbol() -> Result<(), Error> {
    // A valid conv1d: the input gradient's taps are clamped at both
    // borders, the upper one at T − 3.
    let f = SymbolicFn::parse(
        "y[b; t] = sum{k}_0^2 (x[b; t + k] * w[k])",
        &[("x", &["B", "T"][..]), ("w", &["3"][..])],
        &[("t", "T - 2")],
    )?;
    let at: [&[(&str, usize)]; 4] = [
        &[("B", 2), ("T", 2)],
        &[("B", 3), ("T", 3)],
        &[("B", 2), ("T", 9)],
        &[("B", 5), ("T", 40)],
    ];
    let ds = derive_everywhere(&f, &["x", "w"], &at)?;
    assert!(ds[0].to_string().contains('T'), "{}", ds[0]);
    for d in &ds {
        parses_back(d)?;
    }
    Ok(())
}

#[test]
fn reversed_and_strided_reads_keep_the_symbol_in_their_indices() -> Result<(), Error> {
    // `flip`: the read index holds the symbol.
    let flip = SymbolicFn::parse("y[i] = x[-1 + N - i] * x[i]", &[("x", &["N"][..])], &[])?;
    let at: [&[(&str, usize)]; 3] = [&[("N", 2)], &[("N", 5)], &[("N", 12)]];
    for d in derive_everywhere(&flip, &["x"], &at)? {
        assert!(d.to_string().contains('N'), "{d}");
        parses_back(&d)?;
    }
    // Stride 2 over `2·M` elements: the gradient reads every other one.
    let strided = SymbolicFn::parse(
        "y[i] = exp (x[2*i]) + x[2*i + 1]",
        &[("x", &["2*M"][..])],
        &[("i", "M")],
    )?;
    let at: [&[(&str, usize)]; 3] = [&[("M", 2)], &[("M", 3)], &[("M", 10)]];
    for d in derive_everywhere(&strided, &["x"], &at)? {
        parses_back(&d)?;
    }
    Ok(())
}

#[test]
fn a_mean_keeps_its_size_as_a_run_time_value() -> Result<(), Error> {
    // `1/B` stays the size read as a number: never folded into a constant.
    let f = SymbolicFn::parse(
        "m[j] = sum{b}_0^(B - 1) (x[b; j] ** 2) / idx(B)",
        &[("x", &["B", "4"][..])],
        &[],
    )?;
    let at: [&[(&str, usize)]; 3] = [&[("B", 2)], &[("B", 7)], &[("B", 33)]];
    let d = &derive_everywhere(&f, &["x"], &at)?[0];
    assert!(d.to_string().contains("1 / B"), "{d}");
    parses_back(d)?;
    Ok(())
}

#[test]
fn a_softmax_over_a_symbolic_row_and_its_second_derivative() -> Result<(), Error> {
    let f = SymbolicFn::parse(
        "y[r; t] = exp (x[r; t]) / sum{u}_0^(T - 1) (exp (x[r; u]))",
        &[("x", &["R", "T"][..])],
        &[],
    )?;
    let at: [&[(&str, usize)]; 3] = [
        &[("R", 2), ("T", 2)],
        &[("R", 3), ("T", 8)],
        &[("R", 2), ("T", 31)],
    ];
    let dx = &derive_everywhere(&f, &["x"], &at)?[0];
    parses_back(dx)?;
    // Reading the saved softmax instead of recomputing it: the same
    // function at every binding.
    let reusing = f.derive_reusing_output("x")?;
    assert!(
        reusing.to_string().contains("y[") && reusing.symbols() == ["R", "T"],
        "{reusing}"
    );
    for &values in &at {
        let want = f.bind(values)?.derive_reusing_output("x")?;
        let got = reusing.bind(values)?;
        assert_eq!(eval(&got, 3), eval(&want, 3), "{reusing} at {values:?}");
    }
    parses_back(&reusing)?;
    // Derived again (a Hessian-vector product's pieces), with respect to
    // the incoming gradient and to x.
    let second = derive_everywhere(dx, &["dy", "x"], &at)?;
    for d in &second {
        parses_back(d)?;
    }
    Ok(())
}

#[test]
fn sizes_out_of_bounds_for_some_value_are_refused() {
    // In bounds at T = 2, out of bounds from T = 3 on.
    let err = SymbolicFn::parse("y[t] = x[2*t]", &[("x", &["T"][..])], &[("t", "T - 1")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("x[2*t]") && err.contains("sizes"), "{err}");
    // A size that can be negative.
    let err = SymbolicFn::parse("y[t] = x[t]", &[("x", &["T - 3"][..])], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("-3 + T") && err.contains("negative"), "{err}");
    // Text that is no affine form of sizes.
    for bad in ["B*B", "B +", "2*", "(B)", "B/2"] {
        let err = SymbolicFn::parse("y[i] = x[i]", &[("x", &[bad][..])], &[]);
        assert!(err.is_err(), "{bad}");
    }
    // An index the text uses that is neither in scope nor a size.
    assert!(SymbolicFn::parse("y[i] = x[i + K]", &[("x", &["N"][..])], &[("i", "N")]).is_err());
}

#[test]
fn binding_names_every_size_at_two_or_more() -> Result<(), Error> {
    let f = SymbolicFn::parse("y[b] = x[b] * x[b]", &[("x", &["B"][..])], &[])?;
    let message = |r: Result<IndexFn, Error>| r.unwrap_err().to_string();
    assert!(message(f.bind(&[("B", 1)])).contains("`B` is 1"));
    assert!(message(f.bind(&[])).contains("no value for the size `B`"));
    assert!(message(f.bind(&[("B", 4), ("C", 2)])).contains("`C`"));
    assert_eq!(f.bind(&[("B", 6)])?.output_shape(), &[6]);
    Ok(())
}

#[test]
fn attention_in_one_line_and_a_dilated_convolution_over_symbolic_lengths() -> Result<(), Error> {
    let attention = SymbolicFn::parse(
        "o[i; e] = sum{j}_0^(N - 1) (exp (sum{d}_0^3 (q[i; d] * k[j; d])) * v[j; e]) / sum{j}_0^(N - 1) (exp (sum{d}_0^3 (q[i; d] * k[j; d])))",
        &[("q", &["M", "4"][..]), ("k", &["N", "4"][..]), ("v", &["N", "3"][..])],
        &[],
    )?;
    let at: [&[(&str, usize)]; 3] = [
        &[("M", 2), ("N", 2)],
        &[("M", 5), ("N", 3)],
        &[("M", 3), ("N", 16)],
    ];
    for d in derive_everywhere(&attention, &["q", "k", "v"], &at)? {
        parses_back(&d)?;
    }
    // Dilation 2: taps at t, t + 2, t + 4.
    let dilated = SymbolicFn::parse(
        "y[b; t] = sum{k}_0^2 (x[b; t + 2*k] * w[k])",
        &[("x", &["B", "T + 4"][..]), ("w", &["3"][..])],
        &[("t", "T")],
    )?;
    let at: [&[(&str, usize)]; 3] = [
        &[("B", 2), ("T", 2)],
        &[("B", 3), ("T", 5)],
        &[("B", 2), ("T", 23)],
    ];
    for d in derive_everywhere(&dilated, &["x", "w"], &at)? {
        parses_back(&d)?;
    }
    Ok(())
}

#[test]
fn a_condition_on_sizes_becomes_a_guard_not_a_refusal() -> Result<(), Error> {
    // The sum is empty at N = 2 and reads x[0..=N − 3] above it: whether
    // an element is read depends on N, so the derivative guards on it.
    let f = SymbolicFn::parse(
        "y[i] = x[i] * sum{k}_0^(N - 3) (x[k])",
        &[("x", &["N"][..])],
        &[],
    )?;
    let at: [&[(&str, usize)]; 4] = [&[("N", 2)], &[("N", 3)], &[("N", 4)], &[("N", 11)]];
    let dx = &derive_everywhere(&f, &["x"], &at)?[0];
    assert!(dx.to_string().contains("-3 + -dx_0 + N >= 0"), "{dx}");
    parses_back(dx)?;
    Ok(())
}

#[test]
fn a_declared_range_is_what_the_proofs_and_the_bindings_hold_to() -> Result<(), Error> {
    // Dilation 2 with `T − 4` outputs: valid from T = 5 on only.
    let src = "y[t] = sum{k}_0^2 (x[t + 2*k] * w[k])";
    let args: [(&str, &[&str]); 2] = [("x", &["T"]), ("w", &["3"])];
    let err = SymbolicFn::parse(src, &args, &[("t", "T - 4")]).unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
    let f = SymbolicFn::parse_in(src, &args, &[("t", "T - 4")], &[("T", 5..=64)])?;
    let at: [&[(&str, usize)]; 3] = [&[("T", 5)], &[("T", 6)], &[("T", 64)]];
    for d in derive_everywhere(&f, &["x", "w"], &at)? {
        assert_eq!(d.symbols(), ["T"]);
    }
    for outside in [4, 65] {
        let err = f.bind(&[("T", outside)]).unwrap_err().to_string();
        assert!(err.contains("declared range [5, 64]"), "{err}");
    }
    // A range must start at 2 or above, and be no range of another name.
    assert!(SymbolicFn::parse_in(src, &args, &[("t", "T - 4")], &[("T", 1..=8)]).is_err());
    assert!(SymbolicFn::parse_in(src, &args, &[("t", "T - 4")], &[("U", 5..=8)]).is_err());
    Ok(())
}
