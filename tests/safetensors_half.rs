//! Half-precision checkpoints (`BF16`, `F16` safetensors, as most
//! published weights are) load as f32, bit for bit what PyTorch's own
//! widening gives (a NaN as a NaN): every exponent of both formats (zero, subnormals,
//! normals, infinities, NaNs), both signs, and every f16 subnormal, from a
//! file PyTorch wrote (`bench/torch_half_weights.py`).

use tenjin::DType;

/// The first element where `got` is not `want` bit for bit (a NaN only
/// has to be a NaN: PyTorch's f16 widening makes every NaN its canonical
/// one), or `None`.
fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| {
            if w.is_nan() {
                !g.is_nan()
            } else {
                g.to_bits() != w.to_bits()
            }
        })
        .map(|(k, (g, w))| (k, *g, *w))
}

#[test]
fn bf16_and_f16_tensors_load_as_pytorchs_f32_values() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/torch_half_weights.safetensors"
    );
    let loaded = tenjin::safetensors::load(path).unwrap();
    let get = |name: &str| {
        loaded
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
            .1
            .clone()
    };
    for half in ["bf16", "f16", "weight.bf16", "weight.f16"] {
        let (got, want) = (get(half), get(&format!("{half}_as_f32")));
        assert_eq!(got.dtype(), DType::F32, "{half}");
        assert_eq!(got.shape(), want.shape(), "{half}");
        let (g, w) = (got.to_vec().unwrap(), want.to_vec().unwrap());
        assert!(g.len() > 10, "{half}");
        assert_eq!(g.len(), w.len(), "{half}");
        assert_eq!(first_difference(&g, &w), None, "{half}: PyTorch's widening");
    }
    // The file holds what the module documentation promises.
    let f16 = get("f16").to_vec().unwrap();
    assert!(f16.iter().any(|x| x.is_nan()) && f16.iter().any(|x| x.is_infinite()));
    assert!(
        f16.iter()
            .filter(|x| x.is_subnormal() || (**x != 0.0 && x.abs() < 6.2e-5))
            .count()
            >= 2046
    );
}
