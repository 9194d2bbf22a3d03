use tenjin::planner::plan_function;
use tenjin::symbolic::IndexFn;
fn main() {
    let sm = IndexFn::parse("p[i; j] = exp(x[i; j] - max{m}_0^255 (x[i; m])) / sum{k}_0^255 (exp(x[i; k] - max{m}_0^255 (x[i; m])))",
        &[("x", &[64, 256][..])]).unwrap();
    println!("{}", plan_function(&sm, tenjin::DType::F32).unwrap());
}
