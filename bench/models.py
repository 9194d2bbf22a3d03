"""The workloads every side-by-side script shares, written once for
PyTorch (any device) and JAX: the MLP 784-512-512-10 of the training-step
rows (ReLU, softmax cross-entropy, plain SGD) and the element-wise chain.
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
