//! Thousands of random programs through the `Tensor` API (issue 13):
//! random shapes with dimensions of 0 and 1, random op sequences, NaN and
//! Inf in the data, then backward. Every call returns `Ok` or `Err`; none
//! panics. (Alongside `fuzz.rs`, which does the same for the parser.)

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tenjin::{DType, Error, Tensor};

const CASES: u64 = 6000;

fn random_shape(rng: &mut StdRng) -> Vec<usize> {
    let rank = rng.gen_range(0..=3);
    (0..rank)
        .map(|_| [0, 1, 1, 2, 3, 4][rng.gen_range(0..6)])
        .collect()
}

fn random_value(rng: &mut StdRng) -> f64 {
    match rng.gen_range(0..40) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => 0.0,
        _ => rng.gen_range(-2.0..2.0),
    }
}

fn random_tensor(rng: &mut StdRng, dtype: DType) -> Result<Tensor, Error> {
    let shape = random_shape(rng);
    let n = shape.iter().product::<usize>();
    let data: Vec<f64> = (0..n).map(|_| random_value(rng)).collect();
    let t = Tensor::from_vec_f64(data, &shape)?.to_dtype(dtype)?;
    Ok(if rng.gen_bool(0.7) {
        t.requires_grad()
    } else {
        t
    })
}

fn dim(rng: &mut StdRng, t: &Tensor) -> usize {
    // Sometimes out of range on purpose.
    rng.gen_range(0..=t.rank())
}

/// One random op applied to `x` (and maybe `y`).
fn step(rng: &mut StdRng, x: &Tensor, y: &Tensor) -> Result<Tensor, Error> {
    let d = dim(rng, x);
    match rng.gen_range(0..34) {
        0 => x.exp(),
        1 => x.log(),
        2 => x.sqrt(),
        3 => x.tanh(),
        4 => x.relu(),
        5 => x.sigmoid(),
        6 => x.abs()?.recip(),
        7 => x.add(y),
        8 => x.sub(y),
        9 => x.mul(y),
        10 => x.div(y),
        11 => x.maximum(y),
        12 => x.pow(y),
        13 => x.matmul(y),
        14 => x.sum(),
        15 => x.mean(),
        16 => x.max(),
        17 => x.sum_dims(&[d], rng.gen_bool(0.5)),
        18 => x.max_dims(&[d], rng.gen_bool(0.5)),
        19 => x.logsumexp(&[d], rng.gen_bool(0.5)),
        20 => x.softmax(d),
        21 => x.log_softmax(d),
        22 => x.transpose(d, dim(rng, x)),
        23 => x.reshape(&random_shape(rng)),
        24 => x.reshape(&[x.numel()]),
        25 => x.narrow(d, rng.gen_range(0..3), rng.gen_range(0..3)),
        26 => x.flip(&[d]),
        27 => x.unsqueeze(d),
        28 => x.squeeze(d),
        29 => x.broadcast_to(&random_shape(rng)),
        30 => Tensor::cat(&[x, y], d),
        31 => Tensor::stack(&[x, y], d),
        32 => x.pad(&vec![(1, 0); x.rank()], 0.5),
        _ => x.clamp(-1.0, 1.0),
    }
}

/// A random program: its outcome is irrelevant, only that it returns.
fn program(seed: u64) -> Result<(), Error> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dtype = if rng.gen_bool(0.5) {
        DType::F32
    } else {
        DType::F64
    };
    let a = random_tensor(&mut rng, dtype)?;
    let b = random_tensor(&mut rng, dtype)?;
    let mut x = a.clone();
    for _ in 0..rng.gen_range(1..6) {
        let y = if rng.gen_bool(0.5) {
            b.clone()
        } else {
            x.clone()
        };
        match step(&mut rng, &x, &y) {
            Ok(t) => x = t,
            Err(_) if rng.gen_bool(0.5) => continue,
            Err(e) => return Err(e),
        }
    }
    let _ = x.to_vec_f64()?;
    if x.is_requires_grad() {
        x.sum()?.backward()?;
        for t in [&a, &b] {
            if let Some(g) = t.grad() {
                assert_eq!(g.shape(), t.shape(), "a gradient has its tensor's shape");
                let _ = g.to_vec_f64()?;
            }
        }
    }
    Ok(())
}

#[test]
fn random_tensor_programs_return_ok_or_err_and_never_panic() {
    let (mut ok, mut err) = (0, 0);
    let mut panics = Vec::new();
    for seed in 0..CASES {
        match catch_unwind(AssertUnwindSafe(|| program(seed))) {
            Ok(Ok(())) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panics.push(seed),
        }
    }
    eprintln!(
        "{CASES} programs: {ok} ran through, {err} gave an Err, {} panicked",
        panics.len()
    );
    assert!(
        panics.is_empty(),
        "programs that panicked (seeds): {panics:?}"
    );
    assert!(ok > CASES / 4, "too few programs ran through ({ok})");
}
