"""PyTorch CUDA side of bench/gpu.sh: the workloads of examples/gpu_peers.rs
written as a PyTorch user writes them, one JSON line each with the median
time in ms (every repetition ends with torch.cuda.synchronize()), plus the
card, the driver and the precision flags, and a device-to-device copy of a
256 MB buffer as the bandwidth reference.

Usage: python bench/gpu_peers.py [tf32] [--skip WORKLOAD,...] [--only WORKLOAD,...]

Every workload also runs under torch.compile (the forward compiled,
`autograd.grad` outside; the GPT step compiles the model), and, where JAX
with a CUDA backend imports, under jax.jit (system "jax"; the GPT step's
model is `models.jax_gpt_train`); without it a line {"system": "jax",
"skipped": why} says so. XLA's f32 products default to TF32 on Ampere and
later cards: JAX's matmul precision is set to "highest" (or
"tensorfloat32" with `tf32`), as the PyTorch flags below are.

JAX runs in the same process (its rows right after the bandwidth
reference, its GPT step after PyTorch's), with its preallocation of most
of the card's memory turned off (XLA_PYTHON_CLIENT_PREALLOCATE=false) so
that PyTorch's workloads get the memory they need. `--skip gpt_step,jax`
leaves workloads or JAX out (the GPT step's compilations take minutes);
`--only matmul` runs just those (and the bandwidth reference).

`matmul` is a 4096³ product in f32, bf16 and f16 (half tensors in,
half out, f32 accumulation on the tensor cores: PyTorch's default for
half matmuls), eager only.

`tf32` sets torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 to True; otherwise both are False (PyTorch's
defaults differ: matmul False, cuDNN convolutions True), so both systems
run at the same precision. Both flags are in the first line.
"""
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import chain as chain_of, jax_gpt_train, torch_chain, torch_mlp, torch_sgd_step  # noqa: E402

tf32 = "tf32" in sys.argv
torch.backends.cuda.matmul.allow_tf32 = tf32
torch.backends.cudnn.allow_tf32 = tf32
dev = torch.device("cuda")
math_mode = "tf32" if tf32 else "full"
skip = set(sys.argv[sys.argv.index("--skip") + 1].split(",")) if "--skip" in sys.argv else set()
only = set(sys.argv[sys.argv.index("--only") + 1].split(",")) if "--only" in sys.argv else None


def want(workload):
    return workload not in skip and (only is None or workload in only)
gen = torch.Generator(device="cpu").manual_seed(0)


def driver():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def median_ms(reps, f):
    f()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def report(system, workload, size, ms, **extra):
    print(json.dumps({"system": system, "workload": workload, "size": size, "math": math_mode,
                      "median_ms": round(ms, 4), **extra}), flush=True)


def rand(*shape, scale=1.0, grad=False):
    x = ((torch.rand(*shape, generator=gen) * 2 - 1) * scale).to(dev)
    return x.requires_grad_(grad)


class Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, z, mask):
        b, t, d = z.shape
        a = self.ln1(z)
        heads = lambda y: y.view(b, t, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.wq(a)), heads(self.wk(a)), heads(self.wv(a))
        scores = q @ k.transpose(2, 3) / math.sqrt(d // self.h) + mask
        att = (scores.softmax(3) @ v).transpose(1, 2).reshape(b, t, d)
        z = z + self.wo(att)
        return z + self.fc2(F.gelu(self.fc1(self.ln2(z))))


class Gpt(torch.nn.Module):
    def __init__(self, layers, d, h, t, vocab):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, d)
        self.positions = torch.nn.Parameter(torch.randn(t, d) * 0.1)
        self.blocks = torch.nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.register_buffer("mask", torch.full((t, t), -1e9).triu(1))

    def forward(self, x, y):
        z = self.tokens(x) + self.positions
        for blk in self.blocks:
            z = blk(z, self.mask)
        logits = self.ln(z) @ self.tokens.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))


def gpt_step_autocast(layers=12, d=768, h=12, t=1024, b=8, vocab=50257):
    """The GPT step with its forward under torch.autocast(bf16), eager."""
    size = f"layers={layers},d={d},heads={h},T={t},B={b},vocab={vocab},BF16"
    ids = torch.tensor([(k * 7919) % vocab for k in range(b * (t + 1))]).view(b, t + 1)
    x, y = ids[:, :-1].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)
    model = Gpt(layers, d, h, t, vocab).to(dev)
    opt = torch.optim.AdamW(model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()
    step()
    report("torch", "gpt_step_autocast", size, median_ms(5, step))
    del model, opt


def gpt_step(layers=12, d=768, h=12, t=1024, b=8, vocab=50257):
    size = f"layers={layers},d={d},heads={h},T={t},B={b},vocab={vocab}"
    ids = torch.tensor([(k * 7919) % vocab for k in range(b * (t + 1))]).view(b, t + 1)
    x, y = ids[:, :-1].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)
    for system in ("torch", "torch.compile"):
        model = Gpt(layers, d, h, t, vocab).to(dev)
        opt = torch.optim.AdamW(model.parameters())
        loss_fn = torch.compile(model) if system == "torch.compile" else model

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(x, y)
            loss.backward()
            opt.step()
            return loss.item()
        step()  # compilation
        report(system, "gpt_step", size, median_ms(5, step))
        del model, opt
    jax = jax_or_none()
    if jax is not None and "jax" not in skip:
        train, state, jx, jy = jax_gpt_train(layers, d, h, t, b, vocab)
        held = [state]

        def jax_step():
            held[0], loss = train(held[0], jx, jy)
            return float(loss)
        jax_step()  # compilation
        report("jax", "gpt_step", size, median_ms(5, jax_step))


def mlp_step(batch):
    x = rand(batch, 784)
    y = torch.arange(batch, device=dev) % 10
    step = torch_sgd_step(torch_mlp(dev), x, y, lr=0.01)
    report("torch", "mlp_step", f"784-512-512-10,batch={batch}", median_ms(11, step))
    model = torch_mlp(dev)
    step = torch_sgd_step(model, x, y, lr=0.01, loss_fn=torch.compile(lambda x, y: F.cross_entropy(model(x), y)))
    report("torch.compile", "mlp_step", f"784-512-512-10,batch={batch}", median_ms(11, step))


def matmul(n):
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        a, b = rand(n, n).to(dtype), rand(n, n).to(dtype)
        ms = median_ms(11, lambda a=a, b=b: a @ b)
        report("torch", "matmul", f"{n}^3,{name}", ms, tflops=round(2 * n**3 / ms / 1e9, 1))


def half_products(layers=12, d=768, h=12, t=1024, b=8):
    """The GPT step's products alone over bf16 matrices, as
    examples/gpu_peers.rs's half_products (the same names and shapes)."""
    heads, dh, rows = b * h, d // h, b * t
    for name, sa, sb in (
        ("scores", [heads, t, dh], [heads, dh, t]),
        ("context", [heads, t, t], [heads, t, dh]),
        ("projection", [rows, d], [d, d]),
        ("mlp_up", [rows, d], [d, 4 * d]),
        ("mlp_down", [rows, 4 * d], [4 * d, d]),
        ("weight_grad", [d, rows], [rows, d]),
    ):
        x, y = rand(*sa).to(torch.bfloat16), rand(*sb).to(torch.bfloat16)
        report("torch", "half_products", f"{name},{sa}x{sb},bf16".replace(" ", ""), median_ms(11, lambda x=x, y=y: x @ y))


def value_grad(system, workload, size, shapes, f, **extra):
    """Value and gradients of sum(f(xs) * g); with system "torch" also
    under torch.compile (f compiled)."""
    xs = [rand(*s, grad=True) for s in shapes]
    g = rand(*f(*xs).shape)

    def vg(f=f):
        v = (f(*xs) * g).sum()
        torch.autograd.grad(v, xs)
    report(system, workload, size, median_ms(11, vg), **extra)
    if system == "torch":
        compiled = torch.compile(f)
        report("torch.compile", workload, size, median_ms(11, lambda: vg(compiled)), **extra)


def jax_or_none():
    """JAX, where it imports with a CUDA backend (else None, and a line
    saying why), its f32 products at this run's precision."""
    try:
        import jax
        if not jax.devices("gpu"):
            raise RuntimeError("no GPU device")
    except Exception as e:  # noqa: BLE001 (any reason JAX cannot run here)
        print(json.dumps({"system": "jax", "skipped": f"JAX with a CUDA backend is not available: {e}"}), flush=True)
        return None
    # XLA's f32 products and convolutions default to TF32 on this card: ask
    # for the precision the other systems run at.
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    return jax


def jax_rows():
    """The workloads under jax.jit on the GPU, where JAX has a CUDA
    backend."""
    jax = jax_or_none()
    if jax is None:
        return
    import jax.numpy as jnp
    from models import jax_mlp_train

    def timed(reps, f, *args):
        return median_ms(reps, lambda: jax.block_until_ready(f(*args)))

    def value_grad(workload, size, shapes, f, **extra):
        keys = jax.random.split(jax.random.PRNGKey(0), len(shapes) + 1)
        xs = [jax.random.uniform(k, s, minval=-1.0, maxval=1.0) for k, s in zip(keys, shapes)]
        g = jax.random.uniform(keys[-1], f(*xs).shape, minval=-1.0, maxval=1.0)
        vg = jax.jit(jax.value_and_grad(lambda *xs: (f(*xs) * g).sum(), argnums=tuple(range(len(xs)))))
        report("jax", workload, size, timed(11, vg, *xs), **extra)

    for batch in (64, 256, 1024):
        train, params, x, y = jax_mlp_train(batch, lr=0.01)
        state = [params]

        def step():
            state[0] = train(state[0], x, y)
            return state[0]
        report("jax", "mlp_step", f"784-512-512-10,batch={batch}", median_ms(11, lambda: jax.block_until_ready(step())))
    for n in (512, 2048):
        e = 64
        value_grad("attention", f"N={n},E={e}", [(n, e)] * 3,
                   lambda q, k, v: jax.nn.softmax(q @ k.T / math.sqrt(e), axis=1) @ v)
    n = 1 << 24
    x = jax.random.uniform(jax.random.PRNGKey(1), (n,), minval=-3.0, maxval=3.0)
    jchain = lambda x: chain_of(x, jnp.exp, jnp.tanh, jax.nn.sigmoid)  # noqa: E731
    report("jax", "elementwise_forward", f"n={n}", timed(11, jax.jit(jchain), x), bytes=8 * n)
    report("jax", "elementwise_exp", f"n={n}", timed(11, jax.jit(jnp.exp), x), bytes=8 * n)
    value_grad("elementwise_value_grad", f"n={n}", [(n,)], jchain)
    value_grad("softmax", "4096x4096", [(4096, 4096)], lambda x: jax.nn.softmax(x, axis=1))

    def layer_norm(x):
        mean = x.mean(1, keepdims=True)
        var = ((x - mean) ** 2).mean(1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5)
    value_grad("layer_norm", "4096x4096", [(4096, 4096)], layer_norm)
    value_grad("conv2d", "B=32,C=O=64,32x32,3x3,p1", [(32, 64, 32, 32), (64, 64, 3, 3)],
               lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                                         dimension_numbers=("NCHW", "OIHW", "NCHW")))


chain = torch_chain


def main():
    print(json.dumps({"system": "card", "name": torch.cuda.get_device_name(0), "driver": driver(),
                      "cuda": torch.version.cuda, "torch": torch.__version__,
                      "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                      "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}))
    # The bandwidth reference: a device-to-device copy of 256 MB.
    src = torch.empty(64 << 20, device=dev)
    dst = torch.empty_like(src)
    copy_ms = median_ms(21, lambda: dst.copy_(src))
    report("torch", "copy", "256MB", copy_ms, bytes=2 * src.numel() * 4,
           gb_per_s=round(2 * src.numel() * 4 / copy_ms / 1e6, 1))
    del src, dst
    if "jax" not in skip and only is None:
        jax_rows()
    if want("matmul"):
        matmul(4096)
    for batch in (64, 256, 1024) if want("mlp_step") else ():
        mlp_step(batch)
    for n in (512, 2048) if want("attention") else ():
        e = 64
        value_grad("torch", "attention", f"N={n},E={e}", [(n, e)] * 3,
                   lambda q, k, v: torch.softmax(q @ k.t() / math.sqrt(e), 1) @ v)
        value_grad("torch sdpa", "attention", f"N={n},E={e}", [(n, e)] * 3,
                   lambda q, k, v: F.scaled_dot_product_attention(q[None], k[None], v[None])[0])
    n = 1 << 24
    x = rand(n, scale=3.0)
    if want("elementwise_forward"):
        ms = median_ms(11, lambda: chain(x))
        report("torch", "elementwise_forward", f"n={n}", ms, bytes=8 * n)
        report("torch.compile", "elementwise_forward", f"n={n}", median_ms(11, lambda c=torch.compile(chain): c(x)),
               bytes=8 * n)
    if want("elementwise_exp"):
        report("torch", "elementwise_exp", f"n={n}", median_ms(11, lambda: torch.exp(x)), bytes=8 * n)
        report("torch.compile", "elementwise_exp", f"n={n}", median_ms(11, lambda c=torch.compile(torch.exp): c(x)),
               bytes=8 * n)
    if want("elementwise_value_grad"):
        value_grad("torch", "elementwise_value_grad", f"n={n}", [(n,)], chain)
    if want("softmax"):
        value_grad("torch", "softmax", "4096x4096", [(4096, 4096)], lambda x: torch.softmax(x, 1))
    if want("layer_norm"):
        value_grad("torch", "layer_norm", "4096x4096", [(4096, 4096)], lambda x: F.layer_norm(x, (4096,), eps=1e-5))
    if want("conv2d"):
        value_grad("torch", "conv2d", "B=32,C=O=64,32x32,3x3,p1", [(32, 64, 32, 32), (64, 64, 3, 3)],
                   lambda x, w: F.conv2d(x, w, padding=1))
    if want("half_products"):
        half_products()
    if want("gpt_step_autocast"):
        gpt_step_autocast()
    if want("gpt_step"):
        gpt_step()  # last: the largest, and torch.compile's compilation the longest


if __name__ == "__main__":
    main()
