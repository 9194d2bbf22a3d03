use tenjin::planner::plan_node;
use tenjin::symbolic::IndexFn;
fn main() {
    let d = 512;
    let dl = d - 1;
    let mean = |var: &str| format!("sum{{{var}}}_0^{dl} (x[i; {var}]) / {d}");
    let src = format!("y[i; j] = (x[i; j] - {}) / sqrt (sum{{k}}_0^{dl} ((x[i; k] - {}) ** 2) / {d} + 0.00001) * g[j] + b[j]", mean("m"), mean("q"));
    let f = IndexFn::parse(
        &src,
        &[("x", &[256, d][..]), ("g", &[d][..]), ("b", &[d][..])],
    )
    .unwrap();
    let p = plan_node(&f, &[0, 1, 2], tenjin::DType::F32).unwrap();
    println!("-- forward\n{}-- backward\n{}", p.forward, p.backward);
}
