"""A small causal transformer trained with AdamW (two parameter groups:
weight decay on matrices only), gradient clipping at 0.75 and a cosine
schedule with linear warm-up, dropout off, in float64: the PyTorch side of
tests/port_transformer.rs. Writes, to tests/data/ports/:

- transformer_init.safetensors: the initial parameters;
- transformer_mid.safetensors: the parameters after 6 steps, the AdamW
  state (`opt.state.{k}.{name}`, `opt.param_groups.{g}.lr`) and the
  schedule's (`sched.{name}`);
- transformer_out.safetensors: the 12 losses and the final parameters.

Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) tests/ports/transformer.py
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
V, E, H, L, B = 20, 16, 2, 8, 4
WARMUP, TOTAL, STEPS, MID = 3, 12, 12, 6
OUT = "tests/data/ports/"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(E)
        self.attn = nn.MultiheadAttention(E, H, batch_first=True)
        self.ln2 = nn.LayerNorm(E)
        self.mlp = nn.Sequential(nn.Linear(E, 4 * E), nn.GELU(), nn.Linear(4 * E, E))

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(L, E) * 0.02)
        self.tok = nn.Embedding(V, E)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln_f = nn.LayerNorm(E)
        self.head = nn.Linear(E, V, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos
        mask = torch.ones(L, L, dtype=torch.bool).triu(1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))


def batch(step):
    # Deterministic ids: a shifted pattern the model can learn.
    k = torch.arange(B * (L + 1)).reshape(B, L + 1)
    ids = (k * 7 + step * 3 + (k // 5)) % V
    return ids[:, :L], ids[:, 1:]


model = Model()
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, OUT + "transformer_init.safetensors")
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-3, betas=(0.9, 0.95))
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * min(s, TOTAL) / TOTAL)))
losses = []
for step in range(STEPS):
    if step == MID:
        mid = {k: v.contiguous() for k, v in model.state_dict().items()}
        for i, st in opt.state_dict()["state"].items():
            for name, v in st.items():
                mid[f"opt.state.{i}.{name}"] = v.reshape(()) if name == "step" else v.contiguous()
        for g, group in enumerate(opt.state_dict()["param_groups"]):
            mid[f"opt.param_groups.{g}.lr"] = torch.tensor(group["lr"])
        s = sched.state_dict()
        for g, v in enumerate(s["base_lrs"]):
            mid[f"sched.base_lrs.{g}"] = torch.tensor(v)
        for g, v in enumerate(s["_last_lr"]):
            mid[f"sched._last_lr.{g}"] = torch.tensor(v)
        mid["sched.last_epoch"] = torch.tensor(float(s["last_epoch"]))
        mid["sched._step_count"] = torch.tensor(float(s["_step_count"]))
        save_file(mid, OUT + "transformer_mid.safetensors")
    ids, targets = batch(step)
    opt.zero_grad()
    loss = F.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.75)
    opt.step()
    sched.step()
    losses.append(loss.item())
out = {k: v.contiguous() for k, v in model.state_dict().items()}
out["losses"] = torch.tensor(losses)
save_file(out, OUT + "transformer_out.safetensors")
print("losses", losses)
