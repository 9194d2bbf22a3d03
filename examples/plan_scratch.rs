use tenjin::planner::plan_function;
use tenjin::symbolic::IndexFn;
use tenjin::DType;
fn show(name: &str, f: &IndexFn) {
    let p = plan_function(f, DType::F32).unwrap();
    println!("== {name}: {f}\n{p}");
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
    show("dense", &dense);
    for a in ["x", "w", "c"] {
        show(&format!("d{a}"), &dense.derive_reusing_output(a).unwrap());
    }
    let att = IndexFn::parse("o[i; d] = sum{j}_0^511 (exp(sum{e}_0^63 (q[i;e] * k[j;e])) / sum{m}_0^511 (exp(sum{e}_0^63 (q[i;e] * k[m;e]))) * v[j;d])",
        &[("q", &[512, 64][..]), ("k", &[512, 64][..]), ("v", &[512, 64][..])]).unwrap();
    show("attention", &att);
    for a in ["q", "k", "v"] {
        show(&format!("d{a}"), &att.derive_reusing_output(a).unwrap());
    }
    let sm = IndexFn::parse("p[i; j] = exp(x[i; j] - max{m}_0^255 (x[i; m])) / sum{k}_0^255 (exp(x[i; k] - max{m}_0^255 (x[i; m])))",
        &[("x", &[64, 256][..])]).unwrap();
    show("softmax", &sm);
    show("dsoftmax", &sm.derive_reusing_output("x").unwrap());
    let conv = IndexFn::parse_with_sizes(
        "y[b; o; t] = max(sum{c}_0^7 (sum{k}_0^2 (x[b; c; t + k] * w[o; c; k])) + bias[o], 0)",
        &[
            ("x", &[4, 8, 34][..]),
            ("w", &[16, 8, 3][..]),
            ("bias", &[16][..]),
        ],
        &[("t", 32)],
    )
    .unwrap();
    show("conv", &conv);
    for a in ["x", "w", "bias"] {
        show(&format!("d{a}"), &conv.derive_reusing_output(a).unwrap());
    }
}
