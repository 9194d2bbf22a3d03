"""PyTorch eager, torch.compile and JAX side of bench/char_lm.sh: one Adam
step of examples/char_lm.rs's model (token and position embeddings, two
pre-layer-norm causal attention blocks with a GELU MLP, a final layer
norm, a linear head, cross-entropy over the next character) on one fixed
batch, written as a user of each writes it. One JSON line each with the
median time in ms (the first calls, compilation included, excluded).

Usage: python bench/char_lm_peers.py THREADS VOCAB [smoke]   (under taskset with as many cores)
"""
import math
import os
import sys

threads, vocab = int(sys.argv[1]), int(sys.argv[2])
if threads == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# Reads THREADS from the command line and sets torch's thread count.
sys.argv = sys.argv[:2] + sys.argv[3:]
from peers import median_ms, report  # noqa: E402

B, T, D, H, BLOCKS, LR = 32, 64, 64, 256, 2, 3e-3
reps = 1 if "smoke" in sys.argv else 31
rng = np.random.default_rng(3)
x_np = rng.integers(0, vocab, size=(B, T))
y_np = rng.integers(0, vocab, size=(B * T,))
size = f"B={B},T={T},d={D},hidden={H},blocks={BLOCKS},vocab={vocab}"


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(D, D, bias=False) for _ in range(4))
        self.fc1, self.fc2 = torch.nn.Linear(D, H), torch.nn.Linear(H, D)

    def forward(self, x, mask):
        h = self.ln1(x)
        scores = self.wq(h) @ self.wk(h).transpose(1, 2) / math.sqrt(D) + mask
        x = x + self.wo(scores.softmax(2) @ self.wv(h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharLm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, D)
        self.positions = torch.nn.Parameter(torch.randn(T, D) * 0.1)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, vocab, bias=False)
        self.register_buffer("mask", torch.full((T, T), -1e9).triu(1))

    def forward(self, x):
        z = self.tokens(x) + self.positions
        for b in self.blocks:
            z = b(z, self.mask)
        return self.head(self.ln(z)).reshape(B * T, vocab)


def torch_step(compiled):
    torch.manual_seed(0)
    model = CharLm()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    fwd = torch.compile(model) if compiled else model
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(4):
        step()
    report("torch_compile" if compiled else "torch", "char_lm_step", size, median_ms(reps, step))


def jax_step():
    import jax
    import jax.numpy as jnp
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 64))

    def dense(i, o, scale=None):
        return jax.random.normal(next(keys), (i, o)) * (scale or 1 / math.sqrt(i))
    ln = lambda: (jnp.ones(D), jnp.zeros(D))  # noqa: E731
    params = {
        "tokens": jax.random.normal(next(keys), (vocab, D)) * 0.1,
        "positions": jax.random.normal(next(keys), (T, D)) * 0.1,
        "blocks": [{"ln1": ln(), "wq": dense(D, D), "wk": dense(D, D), "wv": dense(D, D), "wo": dense(D, D),
                    "ln2": ln(), "w1": dense(D, H), "b1": jnp.zeros(H), "w2": dense(H, D), "b2": jnp.zeros(D)}
                   for _ in range(BLOCKS)],
        "ln": ln(),
        "head": dense(D, vocab),
    }
    mask = jnp.triu(jnp.full((T, T), -1e9), 1)

    def layer_norm(x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * p[0] + p[1]

    def loss_fn(params, x, y):
        z = params["tokens"][x] + params["positions"]
        for b in params["blocks"]:
            h = layer_norm(z, b["ln1"])
            scores = (h @ b["wq"]) @ (h @ b["wk"]).transpose(0, 2, 1) / math.sqrt(D) + mask
            z = z + jax.nn.softmax(scores, axis=2) @ (h @ b["wv"]) @ b["wo"]
            h = layer_norm(z, b["ln2"])
            z = z + jax.nn.gelu(h @ b["w1"] + b["b1"], approximate=False) @ b["w2"] + b["b2"]
        logits = (layer_norm(z, params["ln"]) @ params["head"]).reshape(B * T, vocab)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def train(params, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        step = LR * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - step * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return params, m, v, t, loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = [params, zeros, zeros, jnp.float32(0)]
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)

    def step():
        *s, loss = train(*state, x, y)
        state[:] = s
        return float(loss)
    for _ in range(4):
        step()
    report("jax", "char_lm_step", size, median_ms(reps, step))


torch_step(False)
torch_step(True)
jax_step()
