//! Prints an index function and its derivative with respect to every
//! argument, in the notation of Urban & van der Smagt.
//!
//! ```text
//! cargo run --example derive                                   # the paper's example
//! cargo run --example derive -- 'f[i; j] = x[i + j]' x=6 i:3   # args as name=3x5, sizes as index:7
//! ```

use std::process::ExitCode;
use tenjin::symbolic::IndexFn;

const PAPER: &str =
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))";

fn parse_shape(text: &str) -> Result<Vec<usize>, String> {
    if text.is_empty() || text == "scalar" {
        return Ok(vec![]);
    }
    text.split('x')
        .map(|d| {
            d.parse::<usize>()
                .map_err(|_| format!("bad dimension `{d}` in shape `{text}`"))
        })
        .collect()
}

fn run(argv: &[String]) -> Result<(), String> {
    let (src, rest): (String, Vec<String>) = match argv.split_first() {
        None => (
            PAPER.to_string(),
            ["a=3x5", "b=4x5", "c=3x3", "d=8"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        Some((src, rest)) => (src.clone(), rest.to_vec()),
    };
    let mut args: Vec<(String, Vec<usize>)> = Vec::new();
    let mut sizes: Vec<(String, usize)> = Vec::new();
    for item in &rest {
        if let Some((name, shape)) = item.split_once('=') {
            args.push((name.to_string(), parse_shape(shape)?));
        } else if let Some((index, size)) = item.split_once(':') {
            let size = size.parse().map_err(|_| format!("bad size in `{item}`"))?;
            sizes.push((index.to_string(), size));
        } else {
            return Err(format!(
                "`{item}`: expected name=3x5 (an argument) or index:7 (a size)"
            ));
        }
    }
    let arg_refs: Vec<(&str, &[usize])> = args
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_slice()))
        .collect();
    let size_refs: Vec<(&str, usize)> = sizes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let f = IndexFn::parse_with_sizes(&src, &arg_refs, &size_refs).map_err(|e| e.to_string())?;
    println!("Input: {f}");
    println!("Shape: {:?}", f.output_shape());
    for (name, _) in &args {
        let d = f.derive(name).map_err(|e| e.to_string())?;
        println!("Derivative of {} wrt. {name}: {d}", f.name());
    }
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match run(&argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
