"""Reference values for tests/clip_grad.rs: torch.nn.utils.clip_grad_norm_
and clip_grad_value_ on three gradients, float64 and float32, (shapes [3, 4], [5], [2, 2]),
for several norms and limits: the total norm returned, then every clipped
gradient element. Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_clip_grad.py > tests/data/torch_clip_grad.txt
"""
import math
import torch

SHAPES = [(3, 4), (5,), (2, 2)]


def grads():
    """Deterministic gradients: sin of the element's running index."""
    out, k = [], 0
    for s in SHAPES:
        n = math.prod(s)
        out.append(torch.tensor([math.sin(0.7 * (k + i)) * (1 + (k + i) % 3) for i in range(n)], dtype=torch.float64).reshape(s))
        k += n
    return out


def params(dtype):
    ps = [torch.zeros(s, dtype=dtype, requires_grad=True) for s in SHAPES]
    for p, g in zip(ps, grads()):
        p.grad = g.to(dtype)
    return ps


print(f"# torch {torch.__version__}: cases in float64, then in float32 (`f32` at the end of the line)")
for dtype, tag in [(torch.float64, ""), (torch.float32, " f32")]:
    for max_norm, norm_type in [(1.0, 2.0), (100.0, 2.0), (0.5, float("inf")), (2.0, 1.5), (0.0, 2.0)]:
        ps = params(dtype)
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
        print(f"norm {max_norm!r} {norm_type!r} {total.item()!r}{tag}")
        print(" ".join(repr(v) for p in ps for v in p.grad.flatten().tolist()))
    for clip in [0.75, 10.0]:
        ps = params(dtype)
        torch.nn.utils.clip_grad_value_(ps, clip)
        print(f"value {clip!r}{tag}")
        print(" ".join(repr(v) for p in ps for v in p.grad.flatten().tolist()))
