//! Views at run-time positions (issue 28): a view whose elements form a
//! block of its base (rows of a `narrow`/`select` along the first
//! dimension, or a run along the next dimension after fixed positions) is
//! read through a window of the base's memory, so ops reading it plan and
//! compile once for every position; gradients are added into the block of
//! the base's gradient. Also run on the simulated GPU by `sim_suite`.

use std::sync::Mutex;
use tenjin::{DType, Error, Tensor};

/// The compile-count tests read process-wide counters, which any test
/// that plans bumps: every test here runs alone.
static SERIAL: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn randn(shape: &[usize], seed: u64) -> Result<Tensor, Error> {
    Tensor::randn(shape, DType::F64, seed)
}

/// Entry `i` along the first dimension, as a view (PyTorch's `x[i]`).
fn row(x: &Tensor, i: usize) -> Result<Tensor, Error> {
    x.narrow(0, i, 1)?.squeeze(0)
}

/// Runs `step(0)` and `step(1)`, then `step(t)` for `t` in `2..n`: the
/// process-wide counters before and after the later steps.
fn later_steps(
    n: usize,
    step: impl Fn(usize) -> Result<(), Error>,
) -> Result<(tenjin::Stats, tenjin::Stats), Error> {
    step(0)?;
    step(1)?;
    let before = tenjin::stats();
    for t in 2..n {
        step(t)?;
    }
    Ok((before, tenjin::stats()))
}

/// Nothing was compiled, derived or planned between `before` and `after`.
fn assert_nothing_new(before: &tenjin::Stats, after: &tenjin::Stats) {
    assert_eq!(after.kernels_compiled, before.kernels_compiled);
    assert_eq!(after.derivations, before.derivations);
    assert_eq!(after.op_plans_built, before.op_plans_built);
}

#[test]
fn walking_a_tensor_by_position_compiles_nothing_after_the_first_step() -> Result<(), Error> {
    let _alone = alone();
    let data = Tensor::randn(&[200, 8], DType::F32, 1)?;
    let table = Tensor::randn(&[200, 8], DType::F32, 2)?.requires_grad();
    let w = Tensor::randn(&[8, 4], DType::F32, 3)?.requires_grad();
    let step = |t: usize| -> Result<(), Error> {
        let x = data.narrow(0, 3 * t, 5)?;
        let rows = row(&table, 7 * t)?.unsqueeze(0)?;
        let joined = Tensor::cat(&[&x, &rows, &table.narrow(0, t, 2)?], 0)?;
        joined.matmul(&w)?.tanh()?.sum()?.backward()
    };
    let (before, after) = later_steps(20, step)?;
    assert_nothing_new(&before, &after);
    Ok(())
}

/// Entry `i` along dimension `dim`, as a view (PyTorch's `x[:, i]`).
fn at(x: &Tensor, dim: usize, i: usize) -> Result<Tensor, Error> {
    x.narrow(dim, i, 1)?.squeeze(dim)
}

#[test]
fn walking_data_along_a_later_dimension_compiles_nothing_after_the_first_step() -> Result<(), Error>
{
    let _alone = alone();
    // An RNN's input read one time step at a time (`x[:, t]` of a
    // `[B, T, D]` batch), a window of time steps, and a strided one.
    let data = Tensor::randn(&[6, 40, 8], DType::F32, 11)?;
    let w = Tensor::randn(&[8, 4], DType::F32, 12)?.requires_grad();
    let h0 = Tensor::randn(&[6, 4], DType::F32, 13)?.requires_grad();
    let step = |t: usize| -> Result<(), Error> {
        let x = at(&data, 1, t)?;
        let window = data.narrow(1, t, 3)?.sum_dims(&[1], false)?;
        let strided = data.slice(1, t, t + 7, 2)?.mean()?;
        let h = x.add(&window)?.matmul(&w)?.add(&h0)?.tanh()?;
        h.sum()?.add(&strided)?.backward()
    };
    let (before, after) = later_steps(30, step)?;
    assert_nothing_new(&before, &after);
    Ok(())
}

#[test]
fn token_ids_read_one_time_step_at_a_time_embed_as_their_copies() -> Result<(), Error> {
    let _alone = alone();
    // A language model's `ids[:, t]` (integers, read through a span).
    let ids: Vec<i64> = (0..24).map(|v| v * 7 % 10).collect();
    let ids = Tensor::from_vec_i64(ids, &[4, 6])?;
    let table = randn(&[10, 3], 18)?;
    for t in 0..6 {
        let column = at(&ids, 1, t)?;
        let copy = Tensor::from_vec_i64(column.to_vec_i64()?, &[4])?;
        let expected: Vec<i64> = (0..4).map(|b| (b * 6 + t as i64) * 7 % 10).collect();
        assert_eq!(copy.to_vec_i64()?, expected);
        assert_eq!(
            table.embedding(&column)?.to_vec_f64()?,
            table.embedding(&copy)?.to_vec_f64()?
        );
    }
    Ok(())
}

#[test]
fn values_read_through_windows_equal_copies() -> Result<(), Error> {
    let _alone = alone();
    let x = randn(&[6, 5, 4], 4)?;
    let cases: Vec<(Tensor, Tensor)> = vec![
        (x.narrow(0, 2, 3)?, x.narrow(0, 2, 3)?.contiguous()?),
        (
            row(&x, 4)?.narrow(0, 1, 3)?,
            row(&x, 4)?.narrow(0, 1, 3)?.contiguous()?,
        ),
        (
            x.narrow(0, 1, 2)?.flip(&[0])?,
            x.narrow(0, 1, 2)?.flip(&[0])?.contiguous()?,
        ),
        (row(&x, 3)?.t()?, row(&x, 3)?.t()?.contiguous()?),
        // Views moving along later dimensions (spans of the base).
        (at(&x, 1, 2)?, at(&x, 1, 2)?.contiguous()?),
        (x.narrow(1, 1, 3)?, x.narrow(1, 1, 3)?.contiguous()?),
        (at(&x, 2, 3)?.t()?, at(&x, 2, 3)?.t()?.contiguous()?),
        (
            x.slice(2, 1, 4, 2)?.flip(&[1])?,
            x.slice(2, 1, 4, 2)?.flip(&[1])?.contiguous()?,
        ),
    ];
    for (view, copy) in &cases {
        // A kernel reading the view (through its window) against the
        // copy's values read back position by position.
        let expected: Vec<f64> = copy.to_vec_f64()?.iter().map(|v| v * 2.0).collect();
        assert_eq!(view.mul_scalar(2.0)?.to_vec_f64()?, expected);
    }
    // Every position of a walk: the values of the rows at that position,
    // and of the time steps of a walk along the second dimension.
    let all = x.to_vec_f64()?;
    for t in 0..6 {
        let got = row(&x, t)?.add_scalar(0.0)?.to_vec_f64()?;
        assert_eq!(got, all[t * 20..(t + 1) * 20].to_vec());
    }
    for t in 0..5 {
        let got = at(&x, 1, t)?.add_scalar(0.0)?.to_vec_f64()?;
        let expected: Vec<f64> = (0..6)
            .flat_map(|b| all[b * 20 + t * 4..b * 20 + t * 4 + 4].to_vec())
            .collect();
        assert_eq!(got, expected);
    }
    Ok(())
}

#[test]
fn gradients_through_windows_match_finite_differences() -> Result<(), Error> {
    let _alone = alone();
    let x = randn(&[5, 3, 4], 5)?;
    let w = randn(&[4, 2], 6)?;
    let report = tenjin::gradcheck(
        |t| {
            let (x, w) = (&t[0], &t[1]);
            // Overlapping windows, one read twice, a flipped one, a run
            // after a fixed position, a transposed one, and the base.
            let a = x.narrow(0, 1, 2)?.matmul(w)?.tanh()?.sum()?;
            let b = x.narrow(0, 2, 3)?.mul(&x.narrow(0, 2, 3)?)?.sum()?;
            let c = x
                .narrow(0, 0, 2)?
                .flip(&[0])?
                .exp()?
                .mul(&x.narrow(0, 3, 2)?)?
                .sum()?;
            let d = row(x, 4)?.narrow(0, 1, 2)?.sin()?.sum()?;
            let e = row(x, 2)?.t()?.matmul(&row(x, 0)?)?.sum()?;
            let f = x.sum()?;
            a.add(&b)?.add(&c)?.add(&d)?.add(&e)?.add(&f)
        },
        &[x.clone(), w.clone()],
    )?;
    assert!(report.max_abs_error < 1e-6, "{report:?}");
    Ok(())
}

#[test]
fn gradients_through_views_along_later_dimensions_match_finite_differences() -> Result<(), Error> {
    let _alone = alone();
    // Views of a base that takes a gradient whose elements are no block:
    // copied out of a span of the base, their gradients placed back at
    // their elements.
    let x = randn(&[3, 5, 4], 14)?;
    let w = randn(&[4, 2], 15)?;
    let report = tenjin::gradcheck(
        |t| {
            let (x, w) = (&t[0], &t[1]);
            // A time step, overlapping windows of time steps, a strided
            // and flipped slice, a column read transposed, a chunk.
            let a = at(x, 1, 2)?.matmul(w)?.tanh()?.sum()?;
            let b = x.narrow(1, 1, 3)?.mul(&x.narrow(1, 2, 3)?)?.sum()?;
            let c = x.slice(2, 1, 4, 2)?.flip(&[0, 2])?.exp()?.sum()?;
            let d = at(x, 2, 3)?.t()?.matmul(&at(x, 1, 0)?)?.sum()?;
            let e = x.chunk(2, 2)?[1].sin()?.mul(&x.chunk(2, 2)?[0])?.sum()?;
            a.add(&b)?.add(&c)?.add(&d)?.add(&e)
        },
        &[x.clone(), w.clone()],
    )?;
    assert!(report.max_abs_error < 1e-6, "{report:?}");
    Ok(())
}

#[test]
fn walking_a_table_along_a_later_dimension_compiles_nothing_after_the_first_step(
) -> Result<(), Error> {
    let _alone = alone();
    // An RNN over embedded tokens: `e[:, t]` of a `[B, T, D]` tensor that
    // takes a gradient.
    let emb = Tensor::randn(&[6, 40, 8], DType::F32, 16)?.requires_grad();
    let w = Tensor::randn(&[8, 4], DType::F32, 17)?.requires_grad();
    let step = |t: usize| -> Result<(), Error> {
        let x = at(&emb, 1, t)?.add(&emb.narrow(1, t, 2)?.sum_dims(&[1], false)?)?;
        x.matmul(&w)?.tanh()?.sum()?.backward()
    };
    let (before, after) = later_steps(30, step)?;
    assert_nothing_new(&before, &after);
    Ok(())
}

#[test]
fn a_window_of_a_computed_value_passes_its_gradient_on() -> Result<(), Error> {
    let _alone = alone();
    let x = randn(&[6, 3], 7)?;
    tenjin::gradcheck(
        |t| {
            let h = t[0].tanh()?;
            let top = h.narrow(0, 0, 3)?;
            let bottom = h.narrow(0, 3, 3)?;
            top.mul(&bottom)?.sum()?.add(&row(&h, 5)?.sum()?)
        },
        &[x],
    )?;
    Ok(())
}

#[test]
fn many_single_rows_sum_into_the_table_gradient() -> Result<(), Error> {
    let _alone = alone();
    // The embedding a new user writes: one `narrow` per id, joined.
    let table = randn(&[10, 3], 8)?.requires_grad();
    let ids = [4usize, 1, 4, 9, 0, 4];
    let rows: Vec<Tensor> = ids
        .iter()
        .map(|&i| table.narrow(0, i, 1))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Tensor> = rows.iter().collect();
    let weights = Tensor::from_vec_f64((0..18).map(f64::from).collect(), &[6, 3])?;
    Tensor::cat(&refs, 0)?.mul(&weights)?.sum()?.backward()?;
    // The same through index_select, whose gradient is a segmented sum.
    let table2 = table.detach().requires_grad();
    let ids_t = Tensor::from_vec_i64(ids.iter().map(|&i| i as i64).collect(), &[6])?;
    table2
        .index_select(0, &ids_t)?
        .mul(&weights)?
        .sum()?
        .backward()?;
    assert_eq!(
        table.grad().unwrap().to_vec_f64()?,
        table2.grad().unwrap().to_vec_f64()?
    );
    Ok(())
}

#[test]
fn second_derivatives_and_forward_mode_go_through_windows() -> Result<(), Error> {
    let _alone = alone();
    let x = randn(&[4, 3], 9)?;
    tenjin::gradgradcheck(
        |t| {
            t[0].narrow(0, 1, 2)?
                .pow_scalar(3.0)?
                .mul(&row(&t[0], 3)?)?
                .sum()
        },
        std::slice::from_ref(&x),
    )?;
    // The Hessian of Σ x[1:3]³: 6·x on the diagonal of the block, zeros
    // elsewhere.
    let h = tenjin::autograd::hessian(|x| x.narrow(0, 1, 2)?.pow_scalar(3.0)?.sum(), &x)?;
    let xv = x.to_vec_f64()?;
    let hv = h.to_vec_f64()?;
    for i in 0..12 {
        for j in 0..12 {
            let expected = if i == j && (3..9).contains(&i) {
                6.0 * xv[i]
            } else {
                0.0
            };
            assert!((hv[i * 12 + j] - expected).abs() < 1e-12, "H[{i}][{j}]");
        }
    }
    // The same through a column, whose elements are no block:
    // Σ x[:, 1]³ has 6·x on the diagonal at the column's positions.
    let h = tenjin::autograd::hessian(|x| at(x, 1, 1)?.pow_scalar(3.0)?.sum(), &x)?;
    let hv = h.to_vec_f64()?;
    for i in 0..12 {
        for j in 0..12 {
            let expected = if i == j && i % 3 == 1 {
                6.0 * xv[i]
            } else {
                0.0
            };
            assert!((hv[i * 12 + j] - expected).abs() < 1e-12, "H[{i}][{j}]");
        }
    }
    tenjin::gradgradcheck(
        |t| {
            let x = &t[0];
            at(x, 1, 2)?.pow_scalar(3.0)?.mul(&at(x, 1, 0)?)?.sum()
        },
        std::slice::from_ref(&x),
    )?;
    let v = randn(&[4, 3], 10)?;
    let (_, jv) = tenjin::autograd::jvp(|x| at(x, 1, 2)?.mul_scalar(2.0), &x, &v)?;
    let expected: Vec<f64> = v
        .to_vec_f64()?
        .iter()
        .skip(2)
        .step_by(3)
        .map(|a| a * 2.0)
        .collect();
    assert_eq!(jv.to_vec_f64()?, expected);
    // jvp: the tangent of x[1:3]·2 is v[1:3]·2.
    let (_, jv) = tenjin::autograd::jvp(|x| x.narrow(0, 1, 2)?.mul_scalar(2.0), &x, &v)?;
    let expected: Vec<f64> = v.to_vec_f64()?[3..9].iter().map(|a| a * 2.0).collect();
    assert_eq!(jv.to_vec_f64()?, expected);
    Ok(())
}

#[test]
fn a_base_written_in_place_after_a_window_was_saved_is_refused() -> Result<(), Error> {
    let _alone = alone();
    use tenjin::optim::{Optimizer, SgdConfig, SGD};
    let w = randn(&[4, 3], 11)?.requires_grad();
    // `mul` saves its arguments: the window of `w`.
    let y = w.narrow(0, 1, 2)?.mul(&w.narrow(0, 2, 2)?)?.sum()?;
    w.narrow(0, 0, 1)?.sum()?.backward()?;
    let mut sgd = SGD::new(
        vec![w.clone()],
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
    )?;
    sgd.step()?;
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("in place") || e.contains("modified"), "{e}");
    Ok(())
}
