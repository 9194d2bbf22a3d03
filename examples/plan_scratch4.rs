#[path = "../tests/common/user_functions.rs"]
mod user_functions;
fn main() {
    let k: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let kind = &user_functions::kinds()[k];
    let f = user_functions::function(kind, 8);
    let all: Vec<usize> = (0..f.args().len()).collect();
    println!("{}", kind.name);
    let p = tenjin::planner::plan_node(&f, &all, tenjin::DType::F64).unwrap();
    println!("ok {}", p.backward.stages.len());
}
