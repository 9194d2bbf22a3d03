"""PyTorch eager side of bench/staged.sh: the workloads of
examples/staged_peers.rs, one JSON line each with the median time in ms.

- mlp_step: one SGD step of the MLP 784-512-512-10 (nn.Linear, ReLU,
  F.cross_entropy), as ../shared/bench/workloads.py writes it (the one of
  bench/peers.py);
- attention: forward and backward (to q, k, v) of softmax(q kᵀ) v written
  with matmul and softmax, N = 512, E = 64, with a fixed incoming gradient.

Usage: python bench/staged_peers.py THREADS [attention] [smoke]   (under taskset with as many cores)
"""
import sys

import numpy as np
import torch

# Reads THREADS from the command line and sets the thread count.
from peers import median_ms, mlp, report, rng

reps = 1 if "smoke" in sys.argv else 21


def attention(N=512, E=64):
    q, k = (torch.from_numpy((rng.standard_normal((N, E)) * 0.1).astype(np.float32)).requires_grad_(True) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32))

    def vg():
        o = torch.softmax(q @ k.T, dim=-1) @ v
        return torch.autograd.grad(o, (q, k, v), G)
    report("torch", "attention", f"N={N},E={E}", median_ms(max(reps // 2, 1), vg))


if "attention" in sys.argv:
    attention()
else:
    mlp(64, reps)
    mlp(256, reps)
    attention()
