//! Sizes that stay symbols (issue 28): a linear layer over a batch of
//! `B` rows and attention over `N` keys, derived once for every size,
//! printed in the paper's notation, then bound to sizes. Times the one
//! symbolic derivation against deriving again at each size.
//!
//! `cargo run --release --example symbolic_sizes`

use std::time::Instant;
use tenjin::symbolic::sizes::SymbolicFn;

fn main() -> Result<(), tenjin::Error> {
    let layer = SymbolicFn::parse(
        "y[b; o] = tanh (sum{k}_0^783 (x[b; k] * w[k; o]) + c[o])",
        &[
            ("x", &["B", "784"][..]),
            ("w", &["784", "512"][..]),
            ("c", &["512"][..]),
        ],
        &[],
    )?;
    let attention = SymbolicFn::parse(
        "o[i; e] = sum{j}_0^(N - 1) (exp (sum{d}_0^63 (q[i; d] * k[j; d])) * v[j; e]) / sum{j}_0^(N - 1) (exp (sum{d}_0^63 (q[i; d] * k[j; d])))",
        &[("q", &["M", "64"][..]), ("k", &["N", "64"][..]), ("v", &["N", "64"][..])],
        &[],
    )?;
    for (f, args, sizes) in [
        (
            &layer,
            ["x", "w", "c"],
            vec![vec![("B", 1usize << 6)], vec![("B", 1 << 8)]],
        ),
        (
            &attention,
            ["q", "k", "v"],
            vec![vec![("M", 128), ("N", 128)], vec![("M", 512), ("N", 512)]],
        ),
    ] {
        println!("{f}");
        let start = Instant::now();
        let derivatives = args.map(|a| f.derive(a));
        let once = start.elapsed();
        for d in &derivatives {
            println!("  {}", d.as_ref().map_err(Clone::clone)?);
        }
        let mut per_size = Vec::new();
        for at in &sizes {
            let concrete = f.bind(at)?;
            let start = Instant::now();
            for a in args {
                concrete.derive(a)?;
            }
            per_size.push(start.elapsed());
        }
        println!(
            "  derived once for every size: {:.3} ms; derived again at each size: {}",
            once.as_secs_f64() * 1e3,
            sizes
                .iter()
                .zip(&per_size)
                .map(|(at, t)| format!("{at:?} {:.3} ms", t.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
