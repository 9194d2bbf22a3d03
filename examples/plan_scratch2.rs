use tenjin::{DType, Tensor};
fn main() -> Result<(), tenjin::Error> {
    let x = Tensor::randn(&[32, 64], DType::F32, 1)?;
    let w = Tensor::randn(&[48, 64], DType::F32, 2)?.requires_grad();
    let c = Tensor::randn(&[48], DType::F32, 3)?.requires_grad();
    let h = tenjin::index_fn(
        "h[b; o] = max(sum{k}_0^63 (x[b; k] * w[o; k]) + c[o], 0)",
        &[("x", &x), ("w", &w), ("c", &c)],
    )?;
    println!("{}", tenjin::explain(&h)?);
    let p = x.requires_grad().softmax(1)?;
    println!("{}", tenjin::explain(&p)?);
    Ok(())
}
