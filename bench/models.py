"""The workloads every side-by-side script shares, written once for
PyTorch (any device) and JAX: the MLP 784-512-512-10 of the training-step
rows (ReLU, softmax cross-entropy, plain SGD), the element-wise chain, and
the GPT step's model in JAX (`jax_gpt_train`; PyTorch's is in
gpu_peers.py).
tenjin's side of each is in examples/ (peers.rs, staged_peers.rs,
gpu_peers.rs, memory_modes.rs); the shared reference script
../shared/bench/workloads.py writes the same ones.
"""

MLP_WIDTHS = (784, 512, 512, 10)


def chain(x, exp, tanh, sigmoid):
    """tanh(x)·σ(2x) + x² / (1 + e^(−x)): the element-wise chain, for any
    array library's functions."""
    return tanh(x) * sigmoid(2 * x) + x ** 2 / (1 + exp(-x))


def torch_chain(x):
    import torch
    return chain(x, torch.exp, torch.tanh, torch.sigmoid)


def torch_mlp(device="cpu"):
    """The MLP as PyTorch modules on `device`."""
    import torch.nn as nn
    w = MLP_WIDTHS
    return nn.Sequential(nn.Linear(w[0], w[1]), nn.ReLU(), nn.Linear(w[1], w[2]), nn.ReLU(),
                         nn.Linear(w[2], w[3])).to(device)


def torch_sgd_step(model, x, y, lr=1e-3, loss_fn=None):
    """One SGD step of `model` on (x, y) with softmax cross-entropy; the
    step function (`loss_fn` replaces the loss, e.g. a compiled one)."""
    import torch
    import torch.nn.functional as F
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = loss_fn or (lambda x, y: F.cross_entropy(model(x), y))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(x, y).backward()
        opt.step()
    return step


def jax_mlp_train(batch, lr=1e-3):
    """The MLP's jitted SGD step in JAX and its first state: (train,
    params, x, y), `train(params, x, y)` giving the next parameters."""
    import jax
    import jax.numpy as jnp
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    w = MLP_WIDTHS
    sizes = list(zip(w, w[1:]))
    params = [(jax.random.normal(k, s) / s[0] ** 0.5, jnp.zeros(s[1])) for k, s in zip(keys, sizes)]
    x = jax.random.normal(keys[3], (batch, w[0]))
    y = jnp.array([(i * 7 + 3) % w[-1] for i in range(batch)])

    def loss(params, x, y):
        h = x
        for i, (wt, b) in enumerate(params):
            h = h @ wt + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), y[:, None], axis=1))

    @jax.jit
    def train(params, x, y):
        g = jax.grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, d: p - lr * d, params, g)
    return train, params, x, y


def jax_gpt_train(layers, d, h, t, b, vocab):
    """The GPT step of bench/gpu_peers.py in JAX, as a JAX user writes it:
    the same model as its PyTorch `Gpt` (pre-norm blocks, exact GELU,
    tied embedding, causal mask of -1e9, mean cross-entropy) and AdamW with
    PyTorch's defaults (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, weight decay
    0.01 on every parameter), the update jitted with the gradient and the
    old parameters and moments donated. Returns (train, state, x, y) with
    `train(state, x, y)` giving (the next state, the loss)."""
    import math
    import jax
    import jax.numpy as jnp
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 8 * layers + 4))

    def linear(n_in, n_out, bias=True):
        bound = 1 / math.sqrt(n_in)
        w = jax.random.uniform(next(keys), (n_in, n_out), minval=-bound, maxval=bound)
        return {"w": w, "b": jnp.zeros(n_out)} if bias else {"w": w}

    def norm():
        return {"g": jnp.ones(d), "b": jnp.zeros(d)}
    params = {
        "tokens": jax.random.normal(next(keys), (vocab, d)),
        "positions": jax.random.normal(next(keys), (t, d)) * 0.1,
        "blocks": [{"ln1": norm(), "ln2": norm(), "wq": linear(d, d, False), "wk": linear(d, d, False),
                    "wv": linear(d, d, False), "wo": linear(d, d, False),
                    "fc1": linear(d, 4 * d), "fc2": linear(4 * d, d)} for _ in range(layers)],
        "ln": norm(),
    }
    mask = jnp.triu(jnp.full((t, t), -1e9), 1)

    def layer_norm(p, z):
        mean = z.mean(-1, keepdims=True)
        var = ((z - mean) ** 2).mean(-1, keepdims=True)
        return (z - mean) / jnp.sqrt(var + 1e-5) * p["g"] + p["b"]

    def dense(p, z):
        return z @ p["w"] + p["b"] if "b" in p else z @ p["w"]

    def loss(params, x, y):
        z = params["tokens"][x] + params["positions"]
        for blk in params["blocks"]:
            a = layer_norm(blk["ln1"], z)
            heads = lambda u: u.reshape(b, t, h, d // h).transpose(0, 2, 1, 3)  # noqa: E731
            q, k, v = heads(dense(blk["wq"], a)), heads(dense(blk["wk"], a)), heads(dense(blk["wv"], a))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // h) + mask
            att = (jax.nn.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            z = z + dense(blk["wo"], att)
            z = z + dense(blk["fc2"], jax.nn.gelu(dense(blk["fc1"], layer_norm(blk["ln2"], z)), approximate=False))
        logits = layer_norm(params["ln"], z) @ params["tokens"].T
        logp = jax.nn.log_softmax(logits.reshape(-1, vocab))
        return -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1).mean()

    lr, b1, b2, eps, decay = 1e-3, 0.9, 0.999, 1e-8, 1e-2

    def train(state, x, y):
        params, m, v, n = state
        value, g = jax.value_and_grad(loss)(params, x, y)
        n = n + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        step = lr / (1 - b1 ** n)
        root = jnp.sqrt(1 - b2 ** n)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p * (1 - lr * decay) - step * m / (jnp.sqrt(v) / root + eps), params, m, v)
        return (params, m, v, n), value

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
    ids = jnp.array([(k * 7919) % vocab for k in range(b * (t + 1))]).reshape(b, t + 1)
    return jax.jit(train, donate_argnums=0), state, ids[:, :-1], ids[:, 1:]
