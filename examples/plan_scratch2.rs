use tenjin::alloc::{self, AllocMode};
use tenjin::{DType, Tensor};
fn main() -> Result<(), tenjin::Error> {
    let mode = if std::env::args().any(|a| a == "memory") {
        AllocMode::MemoryEfficient
    } else {
        AllocMode::RuntimeEfficient
    };
    alloc::set_mode(mode);
    let (n, e) = (512, 64);
    let q = Tensor::randn(&[n, e], DType::F32, 1)?
        .mul_scalar(0.1)?
        .detach()
        .requires_grad();
    let k = Tensor::randn(&[n, e], DType::F32, 2)?
        .mul_scalar(0.1)?
        .detach()
        .requires_grad();
    let v = Tensor::randn(&[n, e], DType::F32, 3)?.requires_grad();
    let src = "o[i; d] = sum{j}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[j; e])) / sum{m}_0^511 (exp (sum{e}_0^63 (q[i; e] * k[m; e]))) * v[j; d])";
    let o = tenjin::index_fn(src, &[("q", &q), ("k", &k), ("v", &v)])?;
    println!("{}", tenjin::explain(&o)?);
    let l = o.sum()?;
    drop(o);
    println!("{}", l.memory_plan()?);
    Ok(())
}
