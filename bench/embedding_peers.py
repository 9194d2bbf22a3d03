"""PyTorch eager's side of bench/embedding.sh: the same embedding step as
examples/embedding_peers.rs (forward, backward with a fixed incoming
gradient, gradient cleared), one JSON line with the median time in ms.

Usage: python bench/embedding_peers.py THREADS
"""
import json
import sys
import time

threads = int(sys.argv[1])
import torch  # noqa: E402

torch.set_num_threads(threads)
vocab, dim, batch, seq = 5000, 256, 32, 128
emb = torch.nn.Embedding(vocab, dim)
g = torch.rand(batch, seq, dim) * 2 - 1
ids = torch.randint(0, vocab, (batch, seq))


def step():
    emb.weight.grad = None
    h = emb(ids)
    h.backward(g)


step()
times = []
for _ in range(200):
    t = time.perf_counter()
    step()
    times.append((time.perf_counter() - t) * 1e3)
times.sort()
print(json.dumps({"system": "torch", "workload": "embedding_fwd_bwd", "size": "32x128 ids, 5000x256 table",
                  "threads": threads, "median_ms": round(times[len(times) // 2], 4)}))
