"""Where PyTorch eager's time goes in the GPT-2-small step of
bench/gpu_peers.py: one step under torch.profiler after two warm-ups, the
CUDA kernels summed by name, the costliest first, and the share of GEMMs
(kernels whose name says gemm/sgemm/cutlass). Beside tenjin's own
breakdown (`TENJIN_GPU_PROFILE=1`, examples/gpu_peers.rs), it shows where
the two differ (`PROFILE_COMPILE=1`: torch.compile's step as well;
`PROFILE_AUTOCAST=1`: eager's step with its forward and loss under
torch.autocast(bf16), as gpu_peers.py's gpt_step_autocast). Runs on the GPU
machine: python3 bench/gpu_torch_profile.py
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_peers as peers  # noqa: E402  (the same model)

layers, d, h, t, b, vocab = 12, 768, 12, 1024, 8, 50257
ids = torch.tensor([(k * 7919) % vocab for k in range(b * (t + 1))]).view(b, t + 1)
x, y = ids[:, :-1].contiguous().to(peers.dev), ids[:, 1:].contiguous().to(peers.dev)
model = peers.Gpt(layers, d, h, t, vocab).to(peers.dev)
opt = torch.optim.AdamW(model.parameters())


def breakdown(system, loss_fn):
    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(x, y).backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        ms = (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)) / 1e3
        if ms > 0:
            r = rows.setdefault(e.key, [0, 0.0])
            r[0] += e.count
            r[1] += ms
    total = sum(r[1] for r in rows.values())
    gemm = sum(r[1] for n, r in rows.items() if any(s in n.lower() for s in ("gemm", "cutlass", "xmma")))
    print(f"PyTorch {system} GPT step on the GPU: {total:.1f} ms of kernels, GEMMs {gemm:.1f} ms")
    print("| ms | calls | kernel |\n| --- | --- | --- |")
    for name, (calls, ms) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:int(os.environ.get("ROWS", "30"))]:
        print(f"| {ms:.3f} | {calls} | {name[:110]} |")


if os.environ.get("PROFILE_AUTOCAST") == "1":
    def autocast_model(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x, y)

    breakdown("eager under bf16 autocast", autocast_model)
else:
    breakdown("eager", model)
# `PROFILE_COMPILE=1`: torch.compile's step too (its fused kernels by name).
if os.environ.get("PROFILE_COMPILE") == "1":
    breakdown("torch.compile", torch.compile(model))
