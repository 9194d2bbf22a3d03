use tenjin::planner::plan_node;
use tenjin::symbolic::IndexFn;
fn main() {
    let f = IndexFn::parse_with_sizes(
        "y[b; o; t] = max(sum{c}_0^63 (sum{k}_0^4 (x[b; c; t + k] * w[o; c; k])) + bias[o], 0)",
        &[
            ("x", &[8, 64, 516][..]),
            ("w", &[64, 64, 5][..]),
            ("bias", &[64][..]),
        ],
        &[("t", 512)],
    )
    .unwrap();
    let p = plan_node(&f, &[0, 1, 2], tenjin::DType::F32).unwrap();
    println!("-- forward\n{}-- backward\n{}", p.forward, p.backward);
    for (i, s) in p.backward.stages.iter().enumerate() {
        println!("stage {i} work {}", s.work());
    }
}
