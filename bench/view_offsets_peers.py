"""PyTorch eager on the workloads of examples/view_offsets.rs (issue 28):
views at a new position every step. One JSON line per workload.

    python bench/view_offsets_peers.py [threads]
"""
import json
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
STEPS, WARM = 60, 2
data = torch.randn(1000, 64)
w = torch.randn(64, 32, requires_grad=True)
table = torch.randn(1000, 64, requires_grad=True)
seq = torch.randn(32, 128, 64)
emb = torch.randn(32, 128, 64, requires_grad=True)
qkv = torch.randn(4, 128, 384, requires_grad=True)


def chunk_attention(_):
    q, k, v = qkv.chunk(3, 2)
    (torch.softmax(q @ k.transpose(1, 2), -1) @ v).tanh().sum().backward()



def ids(t):
    return [(t * 131 + k * 977) % 1000 for k in range(32)]


def median_ms(step):
    times = []
    for t in range(STEPS):
        start = time.perf_counter()
        step(t)
        if t >= WARM:
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


workloads = {
    "walk": lambda t: (data.narrow(0, t * 7, 16) @ w).tanh().sum().backward(),
    "walk_grad": lambda t: table.narrow(0, t * 7, 16).tanh().sum().backward(),
    "time_steps": lambda t: (seq[:, t] @ w).tanh().sum().backward(),
    "time_steps_grad": lambda t: (emb[:, t] @ w).tanh().sum().backward(),
    "chunk_attention": chunk_attention,
    "narrow_cat": lambda t: (torch.cat([table.narrow(0, i, 1) for i in ids(t)], 0) @ w)
    .sum()
    .backward(),
    "embedding": lambda t: (torch.nn.functional.embedding(torch.tensor(ids(t)), table) @ w)
    .sum()
    .backward(),
}
for name, step in workloads.items():
    print(json.dumps({"system": "torch", "workload": name, "median_ms": round(median_ms(step), 4)}))
