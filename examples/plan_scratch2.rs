use tenjin::planner::plan_node;
use tenjin::symbolic::IndexFn;
fn show(f: &IndexFn, wrt: &[usize]) {
    let p = plan_node(f, wrt, tenjin::DType::F32).unwrap();
    println!(
        "=== {f}\n-- forward\n{}-- backward\n{}",
        p.forward, p.backward
    );
    for (i, s) in p.backward.stages.iter().enumerate() {
        if let Some(t) = s.forward {
            println!("  backward stage {i} = forward stage {t}");
        }
    }
}
fn main() {
    let dense = IndexFn::parse(
        "h[b; o] = max(sum{k}_0^511 (x[b; k] * w[o; k]) + c[o], 0)",
        &[
            ("x", &[128, 512][..]),
            ("w", &[256, 512][..]),
            ("c", &[256][..]),
        ],
    )
    .unwrap();
    show(&dense, &[0, 1, 2]);
    let att = IndexFn::parse("o[i; d] = sum{j}_0^511 (exp(sum{e}_0^63 (q[i;e] * k[j;e])) / sum{m}_0^511 (exp(sum{e}_0^63 (q[i;e] * k[m;e]))) * v[j;d])",
        &[("q", &[512, 64][..]), ("k", &[512, 64][..]), ("v", &[512, 64][..])]).unwrap();
    show(&att, &[0, 1, 2]);
    let sm = IndexFn::parse("p[i; j] = exp(x[i; j] - max{m}_0^255 (x[i; m])) / sum{k}_0^255 (exp(x[i; k] - max{m}_0^255 (x[i; m])))",
        &[("x", &[64, 256][..])]).unwrap();
    show(&sm, &[0]);
}
