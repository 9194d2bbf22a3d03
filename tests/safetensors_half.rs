//! Half-precision checkpoints (`BF16`, `F16` safetensors, as most
//! published weights are) load as half-precision tensors, bit for bit, and
//! widen to f32 as PyTorch's own widening does (a NaN as a NaN): every
//! exponent of both formats (zero, subnormals, normals, infinities, NaNs),
//! both signs, and every f16 subnormal, from a file PyTorch wrote
//! (`bench/torch_half_weights.py`). What tenjin writes reads back bit for
//! bit, and loads into an f32 model converted.

mod common;

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

const PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/torch_half_weights.safetensors"
);

fn get(loaded: &[(String, tenjin::Tensor)], name: &str) -> tenjin::Tensor {
    loaded
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
        .1
        .clone()
}

#[test]
fn bf16_and_f16_tensors_load_as_themselves_and_widen_as_pytorch_does() {
    let loaded = tenjin::safetensors::load(PATH).unwrap();
    let get = |name: &str| get(&loaded, name);
    for (half, dtype) in [
        ("bf16", DType::BF16),
        ("f16", DType::F16),
        ("weight.bf16", DType::BF16),
        ("weight.f16", DType::F16),
    ] {
        let (got, want) = (get(half), get(&format!("{half}_as_f32")));
        assert_eq!(got.dtype(), dtype, "{half}");
        // Widened by a conversion (a kernel), not only read back.
        let widened = got.to_dtype(DType::F32).unwrap();
        assert_eq!(
            first_difference(&widened.to_vec().unwrap(), &want.to_vec().unwrap()),
            None,
            "{half}: to_dtype(F32)"
        );
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

#[test]
fn half_tensors_written_by_tenjin_read_back_bit_for_bit_and_load_into_f32_models() {
    let loaded = tenjin::safetensors::load(PATH).unwrap();
    let (bf, f) = (get(&loaded, "bf16"), get(&loaded, "f16"));
    let dir = std::env::temp_dir().join(format!("tenjin-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("half.safetensors");
    // A view is written as its elements.
    let bf_view = bf.narrow(0, 3, 5).unwrap();
    tenjin::safetensors::save(&path, &[("b", &bf), ("f", &f), ("v", &bf_view)]).unwrap();
    let back = tenjin::safetensors::load(&path).unwrap();
    let bits = |t: &tenjin::Tensor| -> Vec<u16> {
        match t.dtype() {
            DType::BF16 => t
                .to_vec_bf16()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
            _ => t
                .to_vec_f16()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
        }
    };
    assert_eq!(bits(&get(&back, "b")), bits(&bf));
    assert_eq!(bits(&get(&back, "f")), bits(&f));
    assert_eq!(bits(&get(&back, "v")), bits(&bf)[3..8].to_vec());
    // An f32 model takes a half checkpoint converted to its dtype.
    let lin = tenjin::nn::Linear::new(4, 3, 0).unwrap();
    use tenjin::nn::Module;
    let w = get(&loaded, "weight.bf16");
    let b = tenjin::Tensor::zeros(&[3], DType::BF16).unwrap();
    lin.load_state_dict(&[("weight".into(), w.clone()), ("bias".into(), b)])
        .unwrap();
    let (_, weight) = lin
        .named_parameters()
        .into_iter()
        .find(|(n, _)| n == "weight")
        .unwrap();
    assert_eq!(weight.dtype(), DType::F32);
    assert_eq!(
        weight.to_vec().unwrap(),
        get(&loaded, "weight.bf16_as_f32").to_vec().unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// PyTorch's `safetensors.torch.load_file` reads the half tensors tenjin
/// writes as the same bits, in its own bf16 and f16 types (skips with a
/// message when the venv of `../shared/bench/setup.sh` is absent).
#[test]
fn pytorch_loads_the_half_tensors_tenjin_writes() {
    let Some(python) = common::bench_python() else {
        return;
    };
    let x = tenjin::Tensor::randn(&[3, 5], DType::F32, 8)
        .unwrap()
        .mul_scalar(1000.0)
        .unwrap();
    let (b, h) = (
        x.to_dtype(DType::BF16).unwrap(),
        x.to_dtype(DType::F16).unwrap(),
    );
    let dir = std::env::temp_dir().join(format!("tenjin-half-torch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("for-torch.safetensors");
    tenjin::safetensors::save(&path, &[("b", &b), ("h", &h)]).unwrap();
    let script = "import sys, torch\nfrom safetensors.torch import load_file\nd = load_file(sys.argv[1])\nfor k in ('b', 'h'):\n    t = d[k]\n    print(k, str(t.dtype), list(t.shape), ' '.join(str(v & 0xffff) for v in t.view(torch.int16).flatten().tolist()))\n";
    let out = std::process::Command::new(&python)
        .args(["-c", script, path.to_str().expect("a UTF-8 path")])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bits = |v: Vec<u16>| v.iter().map(u16::to_string).collect::<Vec<_>>().join(" ");
    let want = format!(
        "b torch.bfloat16 [3, 5] {}\nh torch.float16 [3, 5] {}\n",
        bits(
            b.to_vec_bf16()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        ),
        bits(
            h.to_vec_f16()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        ),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    std::fs::remove_dir_all(&dir).unwrap();
}
