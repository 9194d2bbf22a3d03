"""The peers' side of bench/memory_rss.sh: the MLP training step of
examples/memory_modes.rs (784-512-512-10, ReLU, softmax cross-entropy,
plain SGD, f32, batch 256) in PyTorch eager, torch.compile or JAX jit, for
the process's peak RSS.

Usage: python bench/mlp_step_torch.py [STEPS] [THREADS] [eager|compile|jax]
"""
import os
import sys
import time

from models import jax_mlp_train, torch_mlp, torch_sgd_step

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
system = sys.argv[3] if len(sys.argv) > 3 else "eager"
B = 256


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return line[len(key):].strip()
    return ""


def torch_step(compiled):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.randn(B, 784)
    y = torch.tensor([(i * 7 + 3) % 10 for i in range(B)])
    m = torch_mlp()

    def loss_fn(x, y):
        return F.cross_entropy(m(x), y)
    step = torch_sgd_step(m, x, y, loss_fn=torch.compile(loss_fn) if compiled else loss_fn)
    label = "torch.compile" if compiled else "torch eager"
    return f"{label} ({torch.__version__})", step


def jax_step():
    if threads == 1:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    train, params, x, y = jax_mlp_train(B)
    state = {"params": params}

    def step():
        state["params"] = jax.block_until_ready(train(state["params"], x, y))
    return f"JAX jit ({jax.__version__})", step


label, step = jax_step() if system == "jax" else torch_step(system == "compile")
print(f"{label}, {threads} threads; before training: VmRSS {status('VmRSS:')}")
times = []
for s in range(steps):
    t = time.perf_counter()
    step()
    if s > 0:
        times.append((time.perf_counter() - t) * 1e3)
    if s == 1:
        # Linux: reset the peak RSS, to read the steady state's peak below.
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
times.sort()
print(f"{label}: step (median) {times[len(times) // 2]:.3f} ms over {len(times)} steps")
print(f"process peak RSS over steps 3..{steps}: VmHWM {status('VmHWM:')}; VmRSS {status('VmRSS:')} at the end")
