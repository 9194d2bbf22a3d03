"""JAX and PyTorch side of bench/hessian.sh: the Hessians of
examples/hessian_peers.rs, written as ../shared/bench/workloads.py writes
them (jax.jit(jax.hessian(f)); torch.autograd.functional.hessian; and
torch.compile(torch.func.hessian(f)) for the logistic regression), f32,
and the jvp of the per-sample losses (jax.jit(jax.jvp); torch.func.jvp
eager and compiled), one JSON line each with the median time in ms (first
call excluded).

Usage: python bench/hessian_peers.py THREADS [smoke]   (under taskset with as many cores)
"""
import os
import sys

threads = int(sys.argv[1])
if threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# Reads THREADS from the command line and sets torch's thread count.
from peers import median_ms, report, rng  # noqa: E402
import torch  # noqa: E402

smoke = "smoke" in sys.argv
reps = 1 if smoke else 11


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


n = 100 if smoke else 1000
m = 2 * n
X_np, w_np = randn(m, n, scale=1 / np.sqrt(n)), randn(n, scale=0.1)
y_np = np.where(rng.random(m) < 0.5, -1.0, 1.0).astype(np.float32)
X, y, w = jnp.asarray(X_np), jnp.asarray(y_np), jnp.asarray(w_np)
h = jax.jit(jax.hessian(lambda w, X, y: jnp.sum(jnp.log(jnp.exp(-y * (X @ w)) + 1))))
report("jax", "logreg_hessian", f"n={n},m={m}", median_ms(reps, lambda: jax.block_until_ready(h(w, X, y))))
losses = lambda w: jnp.log(jnp.exp(-y * (X @ w)) + 1)
d = jnp.asarray(randn(n))
jv = jax.jit(lambda w, d: jax.jvp(losses, (w,), (d,)))
report("jax", "logreg_jvp", f"n={n},m={m}", median_ms(reps, lambda: jax.block_until_ready(jv(w, d))))
Xt, yt, wt = torch.from_numpy(X_np), torch.from_numpy(y_np), torch.from_numpy(w_np)
report("torch", "logreg_hessian", f"n={n},m={m}", median_ms(
    min(reps, 3), lambda: torch.autograd.functional.hessian(lambda w: torch.log(torch.exp(-yt * (Xt @ w)) + 1).sum(), wt)))
# torch.compile of torch.func's Hessian (forward over reverse), and
# torch.func.jvp eager and compiled.
hc = torch.compile(torch.func.hessian(lambda w: torch.log(torch.exp(-yt * (Xt @ w)) + 1).sum()))
report("torch_compile", "logreg_hessian", f"n={n},m={m}", median_ms(min(reps, 3), lambda: hc(wt)))
t_losses = lambda w: torch.log(torch.exp(-yt * (Xt @ w)) + 1)
dt = torch.from_numpy(np.asarray(d))
report("torch", "logreg_jvp", f"n={n},m={m}", median_ms(reps, lambda: torch.func.jvp(t_losses, (wt,), (dt,))))
jc = torch.compile(lambda w, d: torch.func.jvp(t_losses, (w,), (d,)))
report("torch_compile", "logreg_jvp", f"n={n},m={m}", median_ms(reps, lambda: jc(wt, dt)))

mn, k = (30, 5) if smoke else (300, 5)
T_np, U_np, V_np = randn(mn, mn), randn(mn, k), randn(mn, k)
T, U, V = jnp.asarray(T_np), jnp.asarray(U_np), jnp.asarray(V_np)
h = jax.jit(jax.hessian(lambda U, V, T: jnp.sum((T - U @ V.T) ** 2)))
report("jax", "mf_hessian", f"m=n={mn},k={k}", median_ms(reps, lambda: jax.block_until_ready(h(U, V, T))))
Tt, Ut, Vt = torch.from_numpy(T_np), torch.from_numpy(U_np), torch.from_numpy(V_np)
report("torch", "mf_hessian", f"m=n={mn},k={k}", median_ms(
    min(reps, 3), lambda: torch.autograd.functional.hessian(lambda U: ((Tt - U @ Vt.T) ** 2).sum(), Ut)))
