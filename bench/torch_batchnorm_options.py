"""Reference values for tests/batchnorm_options.rs: torch.nn.BatchNorm2d(2)
with momentum=None, affine=False and track_running_stats=False (and the
defaults), in float64 and float32: the state-dict keys, then per training batch (three)
the output and the buffers, then the output in eval mode on the first
batch. Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_batchnorm_options.py > tests/data/torch_batchnorm_options.txt
"""
import torch

torch.set_default_dtype(torch.float64)
BATCHES = [torch.sin(torch.arange(36, dtype=torch.float64) * (0.3 + 0.2 * k) + k).reshape(2, 2, 3, 3) * (1 + k) for k in range(3)]
configs = {
    "defaults": dict(),
    "momentum_none": dict(momentum=None),
    "no_affine": dict(affine=False),
    "no_tracking": dict(track_running_stats=False),
}


def line(tag, t):
    print(tag, " ".join(repr(v) for v in t.flatten().tolist()))


print(f"# torch {torch.__version__}: cases in float64, then in float32 (`_f32`, the same batches rounded)")
for dtype, suffix in [(torch.float64, ""), (torch.float32, "_f32")]:
    for name, cfg in configs.items():
        bn = torch.nn.BatchNorm2d(2, dtype=dtype, **cfg)
        print("case", name + suffix)
        print("keys", " ".join(bn.state_dict().keys()))
        for x in BATCHES:
            line("train", bn(x.to(dtype)).detach())
            for k, v in bn.state_dict().items():
                if k in ("running_mean", "running_var", "num_batches_tracked"):
                    line(k, v.double())
        bn.eval()
        line("eval", bn(BATCHES[0].to(dtype)).detach())
