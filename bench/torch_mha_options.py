"""Reference values for tests/mha_options.rs: torch.nn.MultiheadAttention
with kdim/vdim (separate projection weights), add_bias_kv, add_zero_attn
and a key padding mask, float64: per case the options, every parameter by
its state-dict name, the inputs, the output and the gradient of
sum(output * w) for every parameter and input (w = cos(0.29 k)). Run once
with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_mha_options.py > tests/data/torch_mha_options.txt
"""
import torch

torch.set_default_dtype(torch.float64)
E, H, L, S, N = 4, 2, 3, 5, 2
CASES = {
    "kdim_vdim": dict(kdim=3, vdim=5),
    "bias_kv": dict(add_bias_kv=True),
    "zero_attn_key_padding": dict(add_zero_attn=True),
    "all_batch_first": dict(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True, batch_first=True),
}


def line(tag, t):
    print(tag, list(t.shape), " ".join(repr(v) for v in t.detach().reshape(-1).tolist()))


print(f"# torch {torch.__version__}, float64")
for name, cfg in CASES.items():
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(E, H, **cfg)
    with torch.no_grad():  # biases not zero, so their gradients show
        m.in_proj_bias.copy_(torch.sin(torch.arange(3 * E) * 0.9) * 0.1)
        m.out_proj.bias.copy_(torch.cos(torch.arange(E) * 0.7) * 0.1)
    bf = cfg.get("batch_first", False)
    kd, vd = cfg.get("kdim", E), cfg.get("vdim", E)
    shape = (lambda n, f: (N, n, f)) if bf else (lambda n, f: (n, N, f))
    q = (torch.sin(torch.arange(L * N * E) * 0.71).reshape(shape(L, E))).requires_grad_(True)
    k = (torch.cos(torch.arange(S * N * kd) * 0.53).reshape(shape(S, kd))).requires_grad_(True)
    v = (torch.sin(torch.arange(S * N * vd) * 0.37 + 1.0).reshape(shape(S, vd))).requires_grad_(True)
    kpm = torch.tensor([[False] * S, [False] * (S - 1) + [True]]) if "key_padding" in name else None
    out, _ = m(q, k, v, key_padding_mask=kpm, need_weights=False)
    w = torch.cos(torch.arange(out.numel()) * 0.29).reshape(out.shape)
    (out * w).sum().backward()
    print("case", name)
    print("options", kd, vd, int(cfg.get("add_bias_kv", False)), int(cfg.get("add_zero_attn", False)),
          int(bf), int(kpm is not None))
    for pname, p in m.named_parameters():
        line(f"param {pname}", p)
    for tag, t in [("q", q), ("k", k), ("v", v)]:
        line(f"input {tag}", t)
    line("out", out)
    for pname, p in m.named_parameters():
        line(f"grad {pname}", p.grad)
    for tag, t in [("q", q), ("k", k), ("v", v)]:
        line(f"grad {tag}", t.grad)
