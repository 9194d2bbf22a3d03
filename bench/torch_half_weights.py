"""A half-precision checkpoint for tests/safetensors_half.rs: PyTorch's own
bf16 and f16 tensors written by safetensors (as Hugging Face checkpoints
are), each beside its values widened to float32 by PyTorch. The bit
patterns cover every exponent of both formats (zero, subnormals, normals,
infinities, NaNs), both signs and several mantissas, and every f16
subnormal. Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_half_weights.py tests/data/torch_half_weights.safetensors
"""
import sys

import torch
from safetensors.torch import save_file


def patterns(exp_bits, man_bits, all_subnormals):
    out = []
    for sign in (0, 1):
        for e in range(1 << exp_bits):
            mans = {0, 1, 2, (1 << man_bits) // 3, (1 << man_bits) - 1}
            if e == 0 and all_subnormals:
                mans = set(range(1 << man_bits))
            for m in sorted(mans):
                out.append((sign << (exp_bits + man_bits)) | (e << man_bits) | m)
    return torch.tensor(out, dtype=torch.int32).to(torch.int16)  # two's complement bits


bf16 = patterns(8, 7, False).view(torch.bfloat16)
f16 = patterns(5, 10, True).view(torch.float16)
# A matrix as a model's weight would be (shape kept), rounded by PyTorch.
w = torch.linspace(-3, 3, 12, dtype=torch.float32).reshape(3, 4)
save_file({
    "bf16": bf16, "bf16_as_f32": bf16.float(),
    "f16": f16, "f16_as_f32": f16.float(),
    "weight.bf16": w.bfloat16(), "weight.bf16_as_f32": w.bfloat16().float(),
    "weight.f16": w.half(), "weight.f16_as_f32": w.half().float(),
}, sys.argv[1], metadata={"format": "pt", "torch": torch.__version__})
