"""PyTorch eager and numpy side of bench/compare.sh: the same workloads as
examples/peers.rs, one JSON line each with the median time in ms.

Usage: python bench/peers.py THREADS [peers]   (run under taskset with as many cores)

`peers` runs instead the workloads whose summary rows in BENCHMARKS.md
had only PyTorch eager (the chain's forward, dropout, the paper
function's forward, the two matmuls), each under PyTorch eager,
torch.compile and JAX jit (single-threaded XLA at THREADS = 1).
"""
import json
import sys
import time

threads = int(sys.argv[1])
import os  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", str(threads))
if threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from models import torch_chain, torch_mlp, torch_sgd_step  # noqa: E402

torch.set_num_threads(threads)
rng = np.random.default_rng(0)


def median_ms(reps, f):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def report(system, workload, size, ms):
    print(json.dumps({"system": system, "workload": workload, "size": size, "threads": threads, "median_ms": round(ms, 4)}))


def chain(n):
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    xg = x.clone().requires_grad_(True)

    def fwd():
        with torch.no_grad():
            return torch_chain(x)

    def vg():
        y = torch_chain(xg).sum()
        (g,) = torch.autograd.grad(y, xg)
        return y, g

    report("torch", "elementwise_forward", f"n={n}", median_ms(7, fwd))
    report("torch", "elementwise_chain", f"n={n}", median_ms(7, vg))


def urban(I, K=64):
    a, b = (torch.from_numpy((rng.standard_normal((I, K)) * 0.1).astype(np.float32)) for _ in range(2))
    c = torch.from_numpy((rng.random((I, I)) * 0.1).astype(np.float32))
    d = torch.from_numpy((rng.standard_normal(I + K - 1) * 0.1).astype(np.float32))
    G = torch.from_numpy(rng.standard_normal((I, I)).astype(np.float32))
    idx = torch.arange(I)[:, None] + torch.arange(K)[None, :]

    def f(a, b, c, d):
        s = ((a[:, None, :] + b[None, :, :]) ** 2 * torch.diagonal(c)[:, None, None] + (d[idx] ** 3)[:, None, :]).sum(-1)
        return torch.exp(-s)

    def fwd():
        with torch.no_grad():
            return f(a, b, c, d)

    leaves = [t.clone().requires_grad_(True) for t in (a, b, c, d)]

    def vg():
        v = (f(*leaves) * G).sum()
        return v, torch.autograd.grad(v, leaves)

    report("torch", "urban_forward", f"I=J={I},K={K}", median_ms(7, fwd))
    report("torch", "urban_value_grad", f"I=J={I},K={K}", median_ms(5, vg))


def matmul(m, k, n):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    with threadpool_limits(limits=threads):
        report("numpy", "matmul", f"{m}x{k}x{n}", median_ms(21, lambda: a @ b))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    report("torch", "matmul", f"{m}x{k}x{n}", median_ms(21, lambda: ta @ tb))


def mlp(B, reps=41):
    """One SGD step of the MLP 784-512-512-10 (`models.py`, as
    ../shared/bench/workloads.py)."""
    x = torch.from_numpy(rng.standard_normal((B, 784)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=B))
    step = torch_sgd_step(torch_mlp(), x, y)
    t = time.perf_counter()
    step()
    report("torch", "mlp_first_step", f"batch={B}", (time.perf_counter() - t) * 1e3)
    report("torch", "mlp_step", f"batch={B}", median_ms(reps, step))


def conv1d():
    """conv1d value and gradients (as ../shared/bench/workloads.py's conv)."""
    import torch.nn.functional as F
    B, C, O, T, K = 32, 64, 64, 1024, 5
    x = torch.from_numpy(rng.standard_normal((B, C, T)).astype(np.float32)).requires_grad_(True)
    w = torch.from_numpy((rng.standard_normal((O, C, K)) * 0.05).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal((B, O, T - K + 1)).astype(np.float32))

    def vg():
        v = (F.conv1d(x, w) * G).sum()
        return v, torch.autograd.grad(v, (x, w))
    report("torch", "conv1d_value_grad", f"B={B},C=O={C},T={T},K={K}", median_ms(11, vg))


def dropout(n):
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal(n).astype(np.float32))

    def fwd():
        with torch.no_grad():
            return torch.nn.functional.dropout(x, 0.5, training=True)

    def vg():
        y = (torch.nn.functional.dropout(x, 0.5, training=True) * G).sum()
        (gx,) = torch.autograd.grad(y, x)
        return y, gx

    report("torch", "dropout_forward", f"n={n},p=0.5", median_ms(7, fwd))
    report("torch", "dropout_value_grad", f"n={n},p=0.5", median_ms(7, vg))


def peer_columns():
    """The `peers` workloads under torch eager, torch.compile and JAX."""
    import jax
    import jax.numpy as jnp
    from models import chain as chain_of

    def three(workload, size, reps, torch_f, jax_f, jax_args, compiled=None):
        """`torch_f` eager and compiled (or `compiled`, where only the
        forward part compiles), `jax_f` jitted on `jax_args`."""
        report("torch", workload, size, median_ms(reps, torch_f))
        report("torch_compile", workload, size, median_ms(reps, compiled or torch.compile(torch_f)))
        f = jax.jit(jax_f)
        report("jax", workload, size, median_ms(reps, lambda: jax.block_until_ready(f(*jax_args))))

    n = 1 << 24
    x_np = rng.standard_normal(n).astype(np.float32)
    x = torch.from_numpy(x_np)

    def chain_fwd():
        with torch.no_grad():
            return torch_chain(x)
    three("elementwise_forward", f"n={n}", 7, chain_fwd,
          lambda x: chain_of(x, jnp.exp, jnp.tanh, jax.nn.sigmoid), (jnp.asarray(x_np),))

    G_np = rng.standard_normal(n).astype(np.float32)
    xg, G = x.clone().requires_grad_(True), torch.from_numpy(G_np)

    def drop_fwd():
        with torch.no_grad():
            return torch.nn.functional.dropout(x, 0.5, training=True)

    def drop_loss(x):
        return (torch.nn.functional.dropout(x, 0.5, training=True) * G).sum()

    def drop_vg(loss=drop_loss):
        y = loss(xg)
        return y, torch.autograd.grad(y, xg)
    compiled_loss = torch.compile(drop_loss)

    def jax_dropout(x, key):
        keep = jax.random.bernoulli(key, 0.5, x.shape)
        return jnp.where(keep, x / 0.5, 0.0)
    key, xj, Gj = jax.random.PRNGKey(0), jnp.asarray(x_np), jnp.asarray(G_np)
    three("dropout_forward", f"n={n},p=0.5", 7, drop_fwd, jax_dropout, (xj, key))
    three("dropout_value_grad", f"n={n},p=0.5", 7, drop_vg,
          jax.value_and_grad(lambda x, key: (jax_dropout(x, key) * Gj).sum()), (xj, key),
          compiled=lambda: drop_vg(compiled_loss))

    I, K = 256, 64
    a_np, b_np = ((rng.standard_normal((I, K)) * 0.1).astype(np.float32) for _ in range(2))
    c_np = (rng.random((I, I)) * 0.1).astype(np.float32)
    d_np = (rng.standard_normal(I + K - 1) * 0.1).astype(np.float32)
    idx_np = np.arange(I)[:, None] + np.arange(K)[None, :]
    a, b, c, d, idx = (torch.from_numpy(t) for t in (a_np, b_np, c_np, d_np, idx_np))

    def urban_torch():
        with torch.no_grad():
            s = ((a[:, None, :] + b[None, :, :]) ** 2 * torch.diagonal(c)[:, None, None]
                 + (d[idx] ** 3)[:, None, :]).sum(-1)
            return torch.exp(-s)

    def urban_jax(a, b, c, d):
        s = ((a[:, None, :] + b[None, :, :]) ** 2 * jnp.diagonal(c)[:, None, None]
             + (d[idx_np] ** 3)[:, None, :]).sum(-1)
        return jnp.exp(-s)
    three("urban_forward", f"I=J={I},K={K}", 7, urban_torch, urban_jax,
          tuple(jnp.asarray(t) for t in (a_np, b_np, c_np, d_np)))

    for m, k, n in ((512, 512, 512), (256, 784, 512)):
        a_np = rng.standard_normal((m, k)).astype(np.float32)
        b_np = rng.standard_normal((k, n)).astype(np.float32)
        ta, tb = torch.from_numpy(a_np), torch.from_numpy(b_np)
        three("matmul", f"{m}x{k}x{n}", 21, lambda: ta @ tb, jnp.matmul, (jnp.asarray(a_np), jnp.asarray(b_np)))


if __name__ == "__main__" and "peers" in sys.argv:
    peer_columns()
elif __name__ == "__main__":
    dropout(1 << 24)
    conv1d()
    mlp(64)
    mlp(256)
    chain(1 << 24)
    urban(256)
    matmul(512, 512, 512)
    matmul(256, 784, 512)
