"""PyTorch eager side of bench/staged.sh: the workloads of
examples/staged_peers.rs, one JSON line each with the median time in ms.

- mlp_step: one SGD step of the MLP 784-512-512-10 (nn.Linear, ReLU,
  F.cross_entropy), as ../shared/bench/workloads.py writes it (the one of
  bench/peers.py);
- attention: forward and backward (to q, k, v) of softmax(q kᵀ) v written
  with matmul and softmax, N = 512, E = 64, with a fixed incoming gradient.

Usage: python bench/staged_peers.py THREADS [attention] [smoke] [peers]   (under taskset with as many cores)

`peers` runs both workloads under torch.compile and JAX jit as well
(single-threaded XLA at THREADS = 1).
"""
import os
import sys

if sys.argv[1] == "1":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import torch  # noqa: E402

# Reads THREADS from the command line and sets the thread count.
from peers import median_ms, mlp, report, rng
from models import jax_mlp_train, torch_mlp, torch_sgd_step

reps = 1 if "smoke" in sys.argv else 21


def attention(N=512, E=64):
    q, k = (torch.from_numpy((rng.standard_normal((N, E)) * 0.1).astype(np.float32)).requires_grad_(True) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal((N, E)).astype(np.float32))

    def forward(q, k, v):
        return torch.softmax(q @ k.T, dim=-1) @ v

    def vg(f=forward):
        return torch.autograd.grad(f(q, k, v), (q, k, v), G)
    report("torch", "attention", f"N={N},E={E}", median_ms(max(reps // 2, 1), vg))
    if not peers:
        return
    compiled = torch.compile(forward)
    report("torch_compile", "attention", f"N={N},E={E}", median_ms(max(reps // 2, 1), lambda: vg(compiled)))
    import jax
    import jax.numpy as jnp
    Gj = jnp.asarray(G.numpy())
    f = jax.jit(jax.grad(lambda q, k, v: (jax.nn.softmax(q @ k.T, axis=-1) @ v * Gj).sum(), argnums=(0, 1, 2)))
    args = tuple(jnp.asarray(t.detach().numpy()) for t in (q, k, v))
    report("jax", "attention", f"N={N},E={E}", median_ms(max(reps // 2, 1), lambda: jax.block_until_ready(f(*args))))


def mlp_peers(B):
    """The MLP's SGD step under torch.compile (the loss compiled) and JAX."""
    import torch.nn.functional as F
    x = torch.from_numpy(rng.standard_normal((B, 784)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=B))
    model = torch_mlp()
    step = torch_sgd_step(model, x, y, loss_fn=torch.compile(lambda x, y: F.cross_entropy(model(x), y)))
    report("torch_compile", "mlp_step", f"batch={B}", median_ms(reps, step))
    import jax
    train, params, xj, yj = jax_mlp_train(B)
    state = [params]

    def jax_step():
        state[0] = jax.block_until_ready(train(state[0], xj, yj))
    report("jax", "mlp_step", f"batch={B}", median_ms(reps, jax_step))


peers = "peers" in sys.argv
if "attention" in sys.argv:
    attention()
else:
    mlp(64, reps)
    mlp(256, reps)
    if peers:
        mlp_peers(64)
        mlp_peers(256)
    attention()
