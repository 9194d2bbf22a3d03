"""Reference trajectories for tests/state.rs: torch.optim.Adam and AdamW
with amsgrad=True on loss = sum(p³)/3 (gradient p², which shrinks and
grows, so the running maximum of v matters), five steps, float64, then
the state dict's max_exp_avg_sq. Run once with the venv of
../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_adam_amsgrad.py > tests/data/torch_adam_amsgrad.txt
"""
import torch

configs = {
    "adam": (torch.optim.Adam, dict(lr=0.3, betas=(0.5, 0.9), amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.3, betas=(0.5, 0.9), weight_decay=0.1, amsgrad=True)),
}
print(f"# torch {torch.__version__}, float64: parameters after each step, then max_exp_avg_sq")
for name, (cls, cfg) in configs.items():
    p = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    opt = cls([p], **cfg)
    print("case", name)
    for _ in range(5):
        opt.zero_grad()
        (p ** 3).sum().div(3).backward()
        opt.step()
        print(" ".join(repr(v) for v in p.detach().tolist()))
    print(" ".join(repr(v) for v in opt.state_dict()["state"][0]["max_exp_avg_sq"].tolist()))
