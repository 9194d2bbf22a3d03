"""Reference learning rates for tests/lr_scheduler.rs: each of
torch.optim.lr_scheduler's schedules on an SGD optimizer with two
parameter groups (lr 0.1 and 0.03, momentum 0.9), the first group's rate
and momentum and the second group's rate after the constructor and after
each of 40 steps, float64 as Python computes it.
Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_lr_schedulers.py > tests/data/torch_lr_schedulers.txt
"""
import math
import torch
from torch.optim import lr_scheduler as S

STEPS = 40
# ReduceLROnPlateau's metric: falls, stalls, falls a little, stalls.
METRIC = [1.0 / (1 + k) if k < 8 else (0.12 if k < 20 else 0.1199 - 1e-6 * k) for k in range(STEPS)]

cases = {
    "step": lambda o: S.StepLR(o, step_size=7, gamma=0.5),
    "multistep": lambda o: S.MultiStepLR(o, milestones=[3, 10, 10, 25], gamma=0.3),
    "exponential": lambda o: S.ExponentialLR(o, gamma=0.93),
    "cosine": lambda o: S.CosineAnnealingLR(o, T_max=15, eta_min=0.001),
    "cosine_zero_min": lambda o: S.CosineAnnealingLR(o, T_max=10),
    "linear": lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=12),
    "linear_decay": lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=30),
    "lambda": lambda o: S.LambdaLR(o, lambda e: min(1.0, (e + 1) / 10) * 0.5 * (1 + math.cos(math.pi * e / STEPS))),
    "one_cycle_cos": lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=STEPS),
    "one_cycle_linear_three_phase": lambda o: S.OneCycleLR(
        o, max_lr=0.5, total_steps=STEPS, pct_start=0.2, anneal_strategy="linear",
        three_phase=True, div_factor=10.0, final_div_factor=100.0, base_momentum=0.8, max_momentum=0.9),
    "one_cycle_no_momentum": lambda o: S.OneCycleLR(o, max_lr=0.3, total_steps=STEPS, cycle_momentum=False),
    "plateau_min": lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=1e-3, cooldown=1, min_lr=0.004),
    "plateau_max_abs": lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.1, patience=1, threshold=0.01, threshold_mode="abs"),
}

print(f"# torch {torch.__version__}: lr, momentum and the second group's lr after the constructor, then after each of {STEPS} steps")
print("metric " + " ".join(repr(m) for m in METRIC))
for name, make in cases.items():
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    q = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.03}], lr=0.1, momentum=0.9)
    sched = make(opt)
    print("case", name)
    def row():
        g, h = opt.param_groups
        assert g["momentum"] == h["momentum"]
        print(repr(g["lr"]), repr(g["momentum"]), repr(h["lr"]))
    row()
    for k in range(STEPS):
        opt.step()
        if isinstance(sched, S.ReduceLROnPlateau):
            metric = METRIC[k] if name == "plateau_min" else -METRIC[k]
            sched.step(metric)
        else:
            sched.step()
        row()
