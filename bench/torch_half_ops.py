"""Reference values for tests/half_vs_torch.rs: ops on bfloat16 and float16
tensors computed by PyTorch (CPU), each op's value and the gradient of
sum(f(x) * w) for every input, all in the half type, written as
safetensors (bit for bit). The inputs are f32 values rounded by PyTorch;
tests/half_vs_torch.rs reads the same inputs back. Run once with the venv
of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_half_ops.py tests/data/torch_half_ops.safetensors
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

n = torch.arange(48, dtype=torch.float32)
X = (torch.sin(n * 1.3) * 1.5).reshape(6, 8)           # signs mixed
P = (torch.sin(n * 0.7) * 0.4 + 1.0).reshape(6, 8)      # positive
Y = (torch.cos(n * 0.9) * 0.7).reshape(6, 8)            # a second operand
M = (torch.cos(torch.arange(40, dtype=torch.float32) * 0.61) * 0.5).reshape(8, 5)
W = (torch.cos(n) * 0.5 + 1.0).reshape(6, 8)            # the cotangent
G = torch.sin(torch.arange(8, dtype=torch.float32)) + 1.0   # layer-norm weight
B = torch.cos(torch.arange(8, dtype=torch.float32)) * 0.2   # layer-norm bias
IMG = torch.sin(torch.arange(100, dtype=torch.float32) * 0.37).reshape(1, 2, 5, 10)
K = torch.cos(torch.arange(36, dtype=torch.float32) * 0.43).reshape(2, 2, 3, 3)
LAB = torch.tensor([3, 0, 7, 1, 1, 5])

# name -> (function, inputs)
CASES = {
    "exp": (torch.exp, [X]),
    "tanh": (torch.tanh, [X]),
    "sigmoid": (torch.sigmoid, [X]),
    "gelu": (F.gelu, [X]),
    "relu": (F.relu, [X]),
    "log": (torch.log, [P]),
    "sqrt": (torch.sqrt, [P]),
    "add": (torch.add, [X, Y]),
    "mul": (torch.mul, [X, Y]),
    "div": (torch.div, [X, P]),
    "matmul": (torch.matmul, [X, M]),
    "sum_rows": (lambda x: x.sum(1), [X]),
    "mean": (lambda x: x.mean(), [X]),
    "softmax": (lambda x: torch.softmax(x, 1), [X]),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), [X]),
    "layer_norm": (lambda x, g, b: F.layer_norm(x, (8,), g, b, 1e-5), [X, G, B]),
    "cross_entropy": (lambda x: F.cross_entropy(x, LAB), [X]),
    "conv2d": (lambda x, k: F.conv2d(x, k, padding=1), [IMG, K]),
}


def main(path):
    out = {}
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for name, (f, inputs) in CASES.items():
            xs = [x.to(dtype).requires_grad_() for x in inputs]
            y = f(*xs)
            w = torch.cos(torch.arange(y.numel(), dtype=torch.float32)).reshape(y.shape) * 0.5 + 1.0
            y.backward(w.to(dtype))
            key = f"{tag}.{name}"
            for k, x in enumerate(xs):
                out[f"{key}.in{k}"] = x.detach().contiguous()
                out[f"{key}.grad{k}"] = x.grad.contiguous()
            out[f"{key}.out"] = y.detach().contiguous()
            out[f"{key}.cotangent"] = w.to(dtype).contiguous()
    save_file(out, path, metadata={"format": "pt", "torch": torch.__version__})


main(sys.argv[1])
