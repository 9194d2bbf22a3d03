"""PyTorch eager side of bench/staged.sh: the workloads of
examples/staged_peers.rs, one JSON line each with the median time in ms.

- mlp_step: one SGD step of the MLP 784-512-512-10 (nn.Linear, ReLU,
  F.cross_entropy), as ../shared/bench/workloads.py writes it;
- attention: forward and backward (to q, k, v) of softmax(q kᵀ) v written
  with matmul and softmax, N = 512, E = 64, with a fixed incoming gradient.

Usage: python bench/staged_peers.py THREADS [attention]   (under taskset with as many cores)
"""
import json
import os
import sys
import time

threads = int(sys.argv[1])
os.environ.setdefault("OMP_NUM_THREADS", str(threads))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(threads)
rng = np.random.default_rng(0)
reps = 1 if "smoke" in sys.argv else 21


def median_ms(reps, f):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def report(workload, size, ms):
    print(json.dumps({"system": "torch", "workload": workload, "size": size, "threads": threads, "median_ms": round(ms, 4)}))


def mlp(B):
    x = torch.from_numpy(rng.standard_normal((B, 784)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=B))
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    t = time.perf_counter()
    step()
    report("mlp_first_step", f"batch={B}", (time.perf_counter() - t) * 1e3)
    report("mlp_step", f"batch={B}", median_ms(reps, step))


def attention(N=512, E=64):
    q, k = (torch.from_numpy((rng.standard_normal((N, E)) * 0.1).astype(np.float32)).requires_grad_(True) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32))

    def vg():
        o = torch.softmax(q @ k.T, dim=-1) @ v
        return torch.autograd.grad(o, (q, k, v), G)
    report("attention", f"N={N},E={E}", median_ms(max(reps // 2, 1), vg))


if "attention" in sys.argv:
    attention()
else:
    mlp(64)
    mlp(256)
    attention()
