"""PyTorch eager side of bench/memory_rss.sh: the MLP training step of
examples/memory_modes.rs (784-512-512-10, ReLU, softmax cross-entropy,
plain SGD, f32, batch 256), for the process's peak RSS.

Usage: python bench/mlp_step_torch.py [STEPS] [THREADS]
"""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return line[len(key):].strip()
    return ""


torch.set_num_threads(threads)
torch.manual_seed(0)
B = 256
x = torch.randn(B, 784)
y = torch.tensor([(i * 7 + 3) % 10 for i in range(B)])
m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
print(f"torch {torch.__version__}, {threads} threads; before training: VmRSS {status('VmRSS:')}")


def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    opt.step()


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
print(f"torch eager: step (median) {times[len(times) // 2]:.3f} ms over {len(times)} steps")
print(f"process peak RSS over steps 3..{steps}: VmHWM {status('VmHWM:')}; VmRSS {status('VmRSS:')} at the end")
