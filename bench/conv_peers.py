"""PyTorch eager side of bench/conv.sh: the workloads of
examples/conv_peers.rs (value and gradients with respect to x and w of
sum(conv(x, w) * G), as ../shared/bench/workloads.py's conv and conv2d;
value and gradient of sum(pool(x) * G) for the pools), one JSON line each
with the median time in ms.

Usage: python bench/conv_peers.py THREADS [WORKLOAD] [smoke] [peers]   (under taskset with as many cores)

`peers` adds torch.compile and JAX jit for the pools.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

# Reads THREADS from the command line and sets the thread count.
from peers import median_ms, report, rng

reps = 1 if "smoke" in sys.argv else 11
only = next((a for a in sys.argv[2:] if a not in ("smoke", "peers")), None)


def value_grad(workload, size, x_shape, w_shape, conv):
    x = torch.from_numpy(rng.standard_normal(x_shape).astype(np.float32)).requires_grad_(True)
    fan_in = np.prod(w_shape[1:])
    w = torch.from_numpy((rng.standard_normal(w_shape) / np.sqrt(fan_in)).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal(conv(x, w).shape).astype(np.float32))

    def vg():
        v = (conv(x, w) * G).sum()
        return v, torch.autograd.grad(v, (x, w))
    report("torch", workload, size, median_ms(reps, vg))


if only in (None, "conv1d"):
    value_grad("conv1d", "B=32,C=O=64,T=1024,K=5", (32, 64, 1024), (64, 64, 5), F.conv1d)
for workload, label, stride, groups in (("conv2d_s1", "3x3,p1", 1, 1), ("conv2d_s2", "3x3,p1,s2", 2, 1),
                                        ("conv2d_depthwise", "3x3,p1,depthwise", 1, 64)):
    if only in (None, workload, "conv2d_line" if workload == "conv2d_s1" else None):
        value_grad(workload, f"B=32,C=O=64,32x32,{label}", (32, 64, 32, 32), (64, 64 // groups, 3, 3),
                   lambda x, w, s=stride, g=groups: F.conv2d(x, w, stride=s, padding=1, groups=g))


def pool_value_grad(workload, size, pool):
    x = torch.from_numpy(rng.standard_normal((32, 64, 32, 32)).astype(np.float32)).requires_grad_(True)
    G = torch.from_numpy(rng.standard_normal(pool(x).shape).astype(np.float32))

    def vg():
        v = (pool(x) * G).sum()
        return v, torch.autograd.grad(v, (x,))
    report("torch", workload, size, median_ms(reps, vg))


def pool_value_grad_peers(workload, size, pool, jax_pool):
    """`pool_value_grad` under torch.compile and JAX jit (with `peers` on
    the command line)."""
    x_np = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
    x = torch.from_numpy(x_np).requires_grad_(True)
    G_np = rng.standard_normal(pool(x).shape).astype(np.float32)
    G = torch.from_numpy(G_np)
    compiled = torch.compile(lambda x: (pool(x) * G).sum())

    def vg():
        v = compiled(x)
        return v, torch.autograd.grad(v, (x,))
    report("torch_compile", workload, size, median_ms(reps, vg))
    import jax
    import jax.numpy as jnp
    f = jax.jit(jax.value_and_grad(lambda x: (jax_pool(x) * jnp.asarray(G_np)).sum()))
    xj = jnp.asarray(x_np)
    report("jax", workload, size, median_ms(reps, lambda: jax.block_until_ready(f(xj))))


def jax_pool(op, init, kernel, stride, padding, scale=1.0):
    import jax
    pads = ((0, 0), (0, 0), (padding, padding), (padding, padding))
    return lambda x: jax.lax.reduce_window(x, init, op, (1, 1, kernel, kernel), (1, 1, stride, stride), pads) * scale


peers = "peers" in sys.argv
if only in (None, "max_pool2d"):
    pool_value_grad("max_pool2d", "B=32,C=O=64,32x32,3x3,s2,p1",
                    lambda x: F.max_pool2d(x, 3, stride=2, padding=1))
    if peers:
        import jax.lax
        pool_value_grad_peers("max_pool2d", "B=32,C=O=64,32x32,3x3,s2,p1",
                              lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
                              jax_pool(jax.lax.max, -np.inf, 3, 2, 1))
if only in (None, "avg_pool2d"):
    pool_value_grad("avg_pool2d", "B=32,C=O=64,32x32,2x2,s2", lambda x: F.avg_pool2d(x, 2))
    if peers:
        import jax.lax
        pool_value_grad_peers("avg_pool2d", "B=32,C=O=64,32x32,2x2,s2", lambda x: F.avg_pool2d(x, 2),
                              jax_pool(jax.lax.add, 0.0, 2, 2, 0, 0.25))
