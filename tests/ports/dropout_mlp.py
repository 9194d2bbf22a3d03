"""An MLP with Dropout, trained by Adam with a cosine schedule, in float64:
the PyTorch side of tests/port_dropout.rs. PyTorch's random stream is not
tenjin's, so the dropout run itself is compared by its statistics and its
reproducibility; with p = 0 the whole trajectory is compared. Writes, to
tests/data/ports/:

- dropout_mlp_init.safetensors: the initial parameters;
- dropout_mlp_out.safetensors: the 10 losses with p = 0 and the final
  parameters.

Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) tests/ports/dropout_mlp.py
"""
import copy
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
STEPS = 10
OUT = "tests/data/ports/"

x = torch.sin(torch.arange(32 * 8, dtype=torch.float64) * 0.61).reshape(32, 8)
y = (torch.arange(32) * 7) % 3


def make(p):
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 3))


def train(model):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
    model.train()
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


model = make(0.0)
init = {k: v.contiguous() for k, v in model.state_dict().items()}
save_file(init, OUT + "dropout_mlp_init.safetensors")
losses = train(model)
out = {k: v.contiguous() for k, v in model.state_dict().items()}
out["losses"] = torch.tensor(losses)
save_file(out, OUT + "dropout_mlp_out.safetensors")
print("losses", losses)
# The script's run with dropout on (its losses depend on PyTorch's stream):
dropped = make(0.3)
dropped.load_state_dict(copy.deepcopy(init))
print("with p = 0.3:", train(dropped))
