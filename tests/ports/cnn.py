"""A CNN with BatchNorm trained by SGD with Nesterov momentum in train
mode, then evaluated in eval mode (running statistics), in float64: the
PyTorch side of tests/port_cnn.rs. Writes, to tests/data/ports/:

- cnn_init.safetensors: the initial state (BatchNorm's running statistics
  and its num_batches_tracked buffer included);
- cnn_mid.safetensors: the state after 3 steps and the SGD state
  (`opt.state.{k}.momentum_buffer`);
- cnn_out.safetensors: the 6 training losses, the eval-mode loss and the
  final state.

Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) tests/ports/cnn.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
N, STEPS, MID = 16, 6, 3
OUT = "tests/data/ports/"

model = nn.Sequential(
    nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(4 * 4 * 4, 10))


def batch(step):
    x = torch.sin(torch.arange(N * 64, dtype=torch.float64) * 0.37 + step).reshape(N, 1, 8, 8)
    y = (torch.arange(N) * 3 + step) % 10
    return x, y


def state():
    return {k: v.contiguous() for k, v in model.state_dict().items()}


save_file(state(), OUT + "cnn_init.safetensors")
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
model.train()
losses = []
for step in range(STEPS):
    if step == MID:
        mid = state()
        for i, st in opt.state_dict()["state"].items():
            mid[f"opt.state.{i}.momentum_buffer"] = st["momentum_buffer"].contiguous()
        save_file(mid, OUT + "cnn_mid.safetensors")
    x, y = batch(step)
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
model.eval()
x, y = batch(100)
with torch.no_grad():
    eval_loss = F.cross_entropy(model(x), y).item()
out = state()
out["losses"] = torch.tensor(losses)
out["eval_loss"] = torch.tensor(eval_loss)
save_file(out, OUT + "cnn_out.safetensors")
print("losses", losses, "eval", eval_loss)
