//! 10,000 random and mutated strings go through the parser and, when they
//! parse, through derivation and evaluation: every outcome is `Ok` or `Err`,
//! never a panic, and every derivative is in bounds.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenjin::symbolic::IndexFn;

const SEEDS: [&str; 8] = [
    "f[i; j] = exp (-sum{k}_0^4 (((a[i; k] + b[j; k]) ** 2 * c[i; i] + d[i + k] ** 3)))",
    "f[i] = sum{k}_(max [0; i - 1])^(min [4; i + 1]) (d[k] * a[0; k - i + 1])",
    "f[i; j] = if {i - j = 0} then (a[i; j] ** 2) else (max(a[i; j], 0))",
    "f[i] = max{k}_0^4 (a[i; k]) + idx(i + 1) * d[2*i]",
    "f[] = sum{i}_0^2 (log (sum{k}_0^4 (exp a[i; k])))",
    "f[i; j] = if {1/2*i is int} then (c[i; j]) else (sigmoid c[j; i])",
    "f[i] = sum{k}_0^(i) (d[k] ** d[i]) / (1 + abs d[i])",
    "f[i; j] = tanh (a[i; j] - b[j; i]) * sqrt (c[i; i] ** 2 + 1)",
];

const TOKENS: [&str; 40] = [
    "f", "[", "]", ";", "=", "i", "j", "k", "a", "b", "c", "d", "+", "-", "*", "/", "**", "(", ")",
    "sum", "{", "}", "_", "^", "0", "2", "4", "exp", "log", "max", "min", "if", "then", "else",
    "is", "int", ">=", "1/2", " ", "idx",
];

fn mutate(rng: &mut StdRng, s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    for _ in 0..rng.gen_range(1..4) {
        let alphabet: Vec<char> = "fijkabcd[];=+-*/(){}_^0123456789 .,<>!".chars().collect();
        let pos = rng.gen_range(0..=chars.len());
        match rng.gen_range(0..3) {
            0 if pos < chars.len() => {
                chars.remove(pos);
            }
            1 if pos < chars.len() => chars[pos] = alphabet[rng.gen_range(0..alphabet.len())],
            _ => chars.insert(pos, alphabet[rng.gen_range(0..alphabet.len())]),
        }
    }
    chars.into_iter().collect()
}

/// A random, mostly valid function over i, j < 3 built from templates.
fn random_function(rng: &mut StdRng, depth: usize) -> String {
    const LEAVES: [&str; 10] = [
        "a[i; j]",
        "c[j; i]",
        "d[i + j]",
        "b[j; i + 1]",
        "d[2*i + j]",
        "c[i; i]",
        "2",
        "idx(i - j)",
        "a[i; 2*j]",
        "d[i]",
    ];
    const UNARY: [&str; 6] = ["exp", "tanh", "sigmoid", "sin", "abs", "-"];
    const BINARY: [&str; 5] = ["+", "-", "*", "/", "**"];
    if depth == 0 || rng.gen_range(0..4) == 0 {
        return LEAVES[rng.gen_range(0..LEAVES.len())].to_string();
    }
    let a = random_function(rng, depth - 1);
    match rng.gen_range(0..6) {
        0 => format!("{} ({a})", UNARY[rng.gen_range(0..UNARY.len())]),
        1 => format!("sum{{k}}_0^(i) ({a} * d[k + j])"),
        2 => format!("max{{m}}_(j)^2 ({a} + a[i; m])"),
        3 => {
            let b = random_function(rng, depth - 1);
            format!("if {{i - j >= 0}} then ({a}) else ({b})")
        }
        4 => format!("max({a}, c[i; j])"),
        _ => {
            let b = random_function(rng, depth - 1);
            format!("({a}) {} ({b})", BINARY[rng.gen_range(0..BINARY.len())])
        }
    }
}

fn random_tokens(rng: &mut StdRng) -> String {
    let n = rng.gen_range(1..30);
    (0..n)
        .map(|_| TOKENS[rng.gen_range(0..TOKENS.len())])
        .collect::<Vec<_>>()
        .join("")
}

#[test]
fn parser_and_derivation_never_panic() {
    let shapes: [(&str, &[usize]); 4] =
        [("a", &[3, 5]), ("b", &[4, 5]), ("c", &[3, 3]), ("d", &[8])];
    let mut rng = StdRng::seed_from_u64(2024);
    let (mut parsed, mut derived) = (0, 0);
    for n in 0..10_000 {
        let src = if n % 3 == 0 {
            random_tokens(&mut rng)
        } else if n % 3 == 1 {
            format!("f[i; j] = {}", random_function(&mut rng, 4))
        } else {
            let seed = SEEDS[rng.gen_range(0..SEEDS.len())];
            mutate(&mut rng, seed)
        };
        let sizes = [("i", 3), ("j", 3)];
        let Ok(f) = IndexFn::parse(&src, &shapes)
            .or_else(|_| IndexFn::parse_with_sizes(&src, &shapes, &sizes))
        else {
            continue;
        };
        parsed += 1;
        let _ = f.to_string();
        for a in ["a", "b", "c", "d"] {
            if let Ok(d) = f.derive(a) {
                derived += 1;
                d.check_bounds()
                    .unwrap_or_else(|e| panic!("{src}\n -> {d}\n: {e}"));
            }
        }
    }
    // The mutations keep a good share of inputs valid, so derivation is exercised.
    assert!(parsed > 500, "only {parsed} inputs parsed");
    assert!(derived > 500, "only {derived} derivatives");
}
