"""Reference trajectories for tests/param_groups.rs: torch.optim.AdamW, SGD
and RMSprop, each with two parameter groups of their own options (the
second group with maximize=True), on
loss = sum over parameters of sum(p³)/3 (gradient p²), float64: every
parameter after each of 6 steps, and the optimizer's state after step 5
by its state-dict keys (parameters numbered across the groups; each
group's rate), in float64 and in float32. Run once
with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_param_groups.py > tests/data/torch_param_groups.txt
"""
import torch

INIT = {"a": [0.5, -1.0, 2.0], "b": [1.5, -0.25], "c": [0.3, 0.7, -0.9, 1.1]}


def adamw(a, b, c):
    return torch.optim.AdamW(
        [
            {"params": [a, b], "weight_decay": 0.1},
            {"params": [c], "weight_decay": 0.0, "lr": 0.05, "amsgrad": True, "maximize": True},
        ],
        lr=0.1, betas=(0.8, 0.95),
    )


def sgd(a, b, c):
    return torch.optim.SGD(
        [
            {"params": [a], "momentum": 0.9, "nesterov": True},
            {"params": [b, c], "momentum": 0.5, "dampening": 0.1, "lr": 0.2, "weight_decay": 0.01, "maximize": True},
        ],
        lr=0.1,
    )


def rmsprop(a, b, c):
    return torch.optim.RMSprop(
        [
            {"params": [a, b], "centered": True},
            {"params": [c], "momentum": 0.9, "lr": 0.02, "maximize": True},
        ],
        lr=0.01, alpha=0.9,
    )


print(f"# torch {torch.__version__}: parameters after each step, then the state after step 5 "
      "(cases in float64; `_f32` cases in float32)")
for dtype, suffix in [(torch.float64, ""), (torch.float32, "_f32")]:
    for name, make in {"adamw": adamw, "sgd": sgd, "rmsprop": rmsprop}.items():
        ps = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in INIT.items()}
        opt = make(ps["a"], ps["b"], ps["c"])
        print("case", name + suffix)
        for step in range(1, 7):
            opt.zero_grad()
            sum((p ** 3).sum() / 3 for p in ps.values()).backward()
            opt.step()
            for k, p in ps.items():
                print("step", step, k, " ".join(repr(x) for x in p.detach().tolist()))
            if step == 5:
                sd = opt.state_dict()
                for i, st in sorted(sd["state"].items()):
                    for key, v in sorted(st.items()):
                        vals = v.reshape(-1).tolist() if torch.is_tensor(v) else [float(v)]
                        print("state", f"state.{i}.{key}", " ".join(repr(float(x)) for x in vals))
                for g, group in enumerate(sd["param_groups"]):
                    print("state", f"param_groups.{g}.lr", repr(float(group["lr"])))
