"""Reference trajectories for tests/state.rs: torch.optim.RMSprop on
loss = sum(p³)/3 (gradient p²), five steps, float64. Run once with the venv
of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_rmsprop.py > tests/data/torch_rmsprop.txt
"""
import torch

configs = {
    "plain": dict(lr=0.01),
    "centered_momentum_wd": dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.9, centered=True),
    "momentum": dict(lr=0.05, momentum=0.5),
}
print(f"# torch {torch.__version__}, float64: parameters after each step")
for name, cfg in configs.items():
    p = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.RMSprop([p], **cfg)
    print("case", name)
    for _ in range(5):
        opt.zero_grad()
        (p ** 3).sum().div(3).backward()
        opt.step()
        print(" ".join(repr(v) for v in p.detach().tolist()))
