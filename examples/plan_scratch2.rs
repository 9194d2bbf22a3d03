use tenjin::planner::plan_node;
use tenjin::symbolic::IndexFn;
fn main() {
    let f = IndexFn::parse(
        "r[i; j] = exp (-sum{d}_0^511 ((x[i; d] - y[j; d]) ** 2) / 1024)",
        &[("x", &[256, 512][..]), ("y", &[256, 512][..])],
    )
    .unwrap();
    let p = plan_node(&f, &[0, 1], tenjin::DType::F32).unwrap();
    println!(
        "{}\n-- forward\n{}-- backward\n{}",
        f, p.forward, p.backward
    );
    for (i, s) in p.backward.stages.iter().enumerate() {
        println!("stage {i} work {} fwd {:?}", s.work(), s.forward);
    }
    for (i, s) in p.forward.stages.iter().enumerate() {
        println!("fwd stage {i} work {}", s.work());
    }
}
