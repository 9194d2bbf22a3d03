"""An MLP with Dropout, trained by Adam with a cosine schedule, in float64:
the PyTorch side of tests/port_dropout.rs. PyTorch's random stream is not
tenjin's, so the dropout run itself is compared by its statistics and its
reproducibility; with p = 0 the whole trajectory is compared. Writes, to
tests/data/ports/:

- dropout_mlp_init.safetensors: the initial parameters;
- dropout_mlp_mid.safetensors: with p = 0, the parameters after 5 steps,
  the Adam state (`opt.state.{k}.{name}`, `opt.param_groups.0.lr`) and the
  schedule's (`sched.{name}`);
- dropout_mlp_out.safetensors: the 10 losses with p = 0 and the final
  parameters; with p = 0.3, the mean and standard deviation of each
  step's loss over 32 seeds.

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
MID = 5
SEEDS = 32
OUT = "tests/data/ports/"

x = torch.sin(torch.arange(32 * 8, dtype=torch.float64) * 0.61).reshape(32, 8)
y = (torch.arange(32) * 7) % 3


def make(p):
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 3))


def train(model, start=0, opt_state=None, sched_state=None, mid=None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
    if opt_state is not None:
        opt.load_state_dict(opt_state)
        sched.load_state_dict(sched_state)
    model.train()
    losses = []
    for step in range(start, STEPS):
        if step == MID and mid is not None:
            mid.update({k: v.clone() for k, v in model.state_dict().items()})
            for i, st in opt.state_dict()["state"].items():
                for name, v in st.items():
                    mid[f"opt.state.{i}.{name}"] = v.reshape(()).clone() if name == "step" else v.clone()
            for g, group in enumerate(opt.state_dict()["param_groups"]):
                mid[f"opt.param_groups.{g}.lr"] = torch.tensor(group["lr"])
            # The schedule's numbers (lists by index); flags are left out.
            for k, v in sched.state_dict().items():
                if isinstance(v, list):
                    for g, e in enumerate(v):
                        mid[f"sched.{k}.{g}"] = torch.tensor(float(e))
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    mid[f"sched.{k}"] = torch.tensor(float(v))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


model = make(0.0)
init = {k: v.clone() for k, v in model.state_dict().items()}
save_file(init, OUT + "dropout_mlp_init.safetensors")
mid = {}
losses = train(model, mid=mid)
save_file({k: v.contiguous() for k, v in mid.items()}, OUT + "dropout_mlp_mid.safetensors")
out = {k: v.contiguous() for k, v in model.state_dict().items()}
out["losses"] = torch.tensor(losses)
# With dropout on, the losses depend on the random stream: their mean and
# standard deviation over SEEDS seeds, per step, are what tenjin's stream
# must reproduce statistically.
runs = []
for seed in range(SEEDS):
    torch.manual_seed(seed)
    dropped = make(0.3)
    dropped.load_state_dict(copy.deepcopy(init))
    runs.append(train(dropped))
runs = torch.tensor(runs)
out["dropout_loss_mean"] = runs.mean(0)
out["dropout_loss_std"] = runs.std(0)
save_file(out, OUT + "dropout_mlp_out.safetensors")
print("losses", losses)
print("with p = 0.3, mean over seeds:", runs.mean(0).tolist())
