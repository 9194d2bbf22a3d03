"""Reference values for tests/everyday_ops_vs_torch.rs: each op's forward
value and the gradient of sum(f(x) * w) w.r.t. every input, computed by
PyTorch in float64. Run once with the venv of ../shared/bench/setup.sh:

    $(../shared/bench/setup.sh) bench/torch_everyday.py > tests/data/torch_everyday.txt
"""
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
n = torch.arange(12, dtype=torch.float64)
X = (torch.sin(n * 1.3) * 1.5).reshape(3, 4)          # signs mixed
P = (torch.sin(n * 0.7) * 0.4 + 1.0).reshape(3, 4)     # positive
U = (torch.sin(n * 1.1) * 0.8).reshape(3, 4)           # inside (-1, 1)
Y = (torch.cos(n * 0.9) * 0.7).reshape(3, 4)           # a second operand
T = (torch.sin(n * 0.5) * 0.5 + 0.5).reshape(3, 4)     # probabilities
W = (torch.cos(n) * 0.5 + 1.0).reshape(3, 4)           # the cotangent
G = torch.tensor([0.5, -1.0, 2.0, 1.5])                # layer-norm weight
B = torch.tensor([0.1, 0.2, -0.3, 0.0])                # layer-norm bias

m = torch.arange(72, dtype=torch.float64)
CX = torch.sin(m * 0.37).reshape(2, 3, 3, 4)            # conv_transpose input
CW = torch.cos(torch.arange(36, dtype=torch.float64) * 0.61).reshape(3, 2, 2, 3)
CB = torch.tensor([0.3, -0.2])
PX = torch.sin(torch.arange(50, dtype=torch.float64) * 0.83).reshape(1, 2, 5, 5)

IDS = torch.tensor([2, 0, 2, 1, 2])                     # repeated ids
GIDX = torch.tensor([[3, 3, 0], [1, 2, 1], [0, 0, 0]])  # gather along dim 1
LAB = torch.tensor([3, 0, 1])                           # class labels of X's rows
CWT = torch.tensor([0.5, 2.0, 1.0, 3.0])                 # class weights

# Attention: queries [2, 2, 5, 4], keys [2, 2, 6, 4], values [2, 2, 6, 3].
QA = torch.sin(torch.arange(80, dtype=torch.float64) * 0.71).reshape(2, 2, 5, 4)
KA = torch.cos(torch.arange(96, dtype=torch.float64) * 0.53).reshape(2, 2, 6, 4)
VA = torch.sin(torch.arange(72, dtype=torch.float64) * 0.37 + 1.0).reshape(2, 2, 6, 3)
FM = torch.sin(torch.arange(5, dtype=torch.float64)[:, None] * 0.7 + torch.arange(6)[None, :] * 1.3) * 0.5
# Boolean mask [2, 1, 5, 6], True taking part; every row keeps a key.
BM = (torch.arange(2)[:, None, None, None] + torch.arange(5)[None, None, :, None]
      + 2 * torch.arange(6)[None, None, None, :]) % 3 != 0
# Multi-head attention: x [L=5, N=2, E=8] (sequence first), 2 heads.
XM = torch.sin(torch.arange(80, dtype=torch.float64) * 0.29).reshape(5, 2, 8)
IW = torch.cos(torch.arange(192, dtype=torch.float64) * 0.41).reshape(24, 8) * 0.3
IB = torch.sin(torch.arange(24, dtype=torch.float64) * 0.9) * 0.1
OW = torch.sin(torch.arange(64, dtype=torch.float64) * 0.61).reshape(8, 8) * 0.3
OB = torch.cos(torch.arange(8, dtype=torch.float64)) * 0.1
KPM = torch.tensor([[False] * 5, [False, False, False, False, True]])  # ignore batch 1's last key
CAUSAL = torch.ones(5, 5, dtype=torch.bool).triu(1)                  # True: not allowed


def mha(x, iw, ib, ow, ob, **kw):
    out, _ = F.multi_head_attention_forward(
        x, x, x, 8, 2, iw, ib, None, None, False, 0.0, ow, ob, training=False, need_weights=False, **kw)
    return out


CW2 = torch.cos(torch.arange(36, dtype=torch.float64) * 0.43).reshape(3, 2, 2, 3)  # [O=3, C=2, 2, 3]
BW = torch.tensor([0.7, -1.3])
BB = torch.tensor([0.2, 0.5])


def bn_train(x, w, b):
    return F.batch_norm(x, torch.zeros(2), torch.ones(2), w, b, training=True, momentum=0.1, eps=1e-5)


def bn_running(x):
    rm, rv = torch.zeros(2), torch.ones(2)
    F.batch_norm(x, rm, rv, None, None, training=True, momentum=0.1, eps=1e-5)
    return torch.cat([rm, rv]).detach().requires_grad_(False) + 0 * x.sum()


cases = {
    "batch_norm_train": ([PX, BW, BB], bn_train),
    "batch_norm_eval": ([PX, BW, BB], lambda x, w, b: F.batch_norm(
        x, torch.tensor([0.1, -0.2]), torch.tensor([0.5, 2.0]), w, b, training=False, eps=1e-5)),
    "batch_norm_running_stats": ([PX], bn_running),
    "index_select_dim0": ([X], lambda x: torch.index_select(x, 0, IDS)),
    "index_select_dim1": ([X], lambda x: torch.index_select(x, 1, torch.tensor([3, 3, 1]))),
    "gather_dim1": ([X], lambda x: torch.gather(x, 1, GIDX)),
    "nll_loss": ([X], lambda x: F.nll_loss(F.log_softmax(x, 1), LAB)),
    "cross_entropy_smoothing": ([X], lambda x: F.cross_entropy(x, LAB, label_smoothing=0.1)),
    "cross_entropy_ignore_sum": ([X], lambda x: F.cross_entropy(x, LAB, ignore_index=0, reduction="sum")),
    "cross_entropy_none": ([X], lambda x: F.cross_entropy(x, LAB, reduction="none")),
    "cross_entropy_weighted": ([X], lambda x: F.cross_entropy(x, LAB, weight=CWT)),
    "cross_entropy_weighted_smooth_ignore": ([X], lambda x: F.cross_entropy(x, LAB, weight=CWT, label_smoothing=0.2, ignore_index=0)),
    "nll_loss_weighted_none": ([X], lambda x: F.nll_loss(F.log_softmax(x, 1), LAB, weight=CWT, reduction="none")),
    "conv_transpose2d": ([CX, CW, CB], lambda x, w, b: F.conv_transpose2d(
        x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), dilation=(1, 2))),
    "avg_pool2d_padded": ([PX], lambda x: F.avg_pool2d(x, 3, 2, 1)),
    "max_pool2d_padded": ([PX], lambda x: F.max_pool2d(x, 3, 2, 1)),
    "adaptive_avg_pool2d": ([PX], lambda x: F.adaptive_avg_pool2d(x, (2, 3))),
    "log1p": ([P], lambda x: torch.log1p(x)),
    "expm1": ([X], lambda x: torch.expm1(x)),
    "log2": ([P], lambda x: torch.log2(x)),
    "rsqrt": ([P], lambda x: torch.rsqrt(x)),
    "tan": ([U], lambda x: torch.tan(x)),
    "atan": ([X], lambda x: torch.atan(x)),
    "asin": ([U], lambda x: torch.asin(x)),
    "sinh": ([X], lambda x: torch.sinh(x)),
    "cosh": ([X], lambda x: torch.cosh(x)),
    "erf": ([X], lambda x: torch.erf(x)),
    "gelu": ([X], lambda x: F.gelu(x)),
    "gelu_tanh": ([X], lambda x: F.gelu(x, approximate="tanh")),
    "silu": ([X], lambda x: F.silu(x)),
    "softplus": ([X], lambda x: F.softplus(x)),
    "softplus_beta2_threshold1": ([X], lambda x: F.softplus(x, beta=2.0, threshold=1.0)),
    "elu": ([X], lambda x: F.elu(x, alpha=0.7)),
    "floor": ([X], lambda x: torch.floor(x)),
    "atan2": ([X, Y], lambda a, b: torch.atan2(a, b)),
    "prod_dim1": ([X], lambda x: torch.prod(x, 1)),
    "var_dim1": ([X], lambda x: torch.var(x, 1)),
    "std_dim0_biased": ([X], lambda x: torch.std(x, 0, correction=0)),
    "norm2_dim1": ([X], lambda x: torch.linalg.vector_norm(x, 2, dim=1)),
    "norm1_dim1": ([X], lambda x: torch.linalg.vector_norm(x, 1, dim=1)),
    "norm3_all": ([P], lambda x: torch.linalg.vector_norm(x, 3)),
    "cumsum_dim1": ([X], lambda x: torch.cumsum(x, 1)),
    "tril_0": ([X], lambda x: torch.tril(x)),
    "triu_1": ([X], lambda x: torch.triu(x, 1)),
    "layer_norm": ([X, G, B], lambda x, g, b: F.layer_norm(x, (4,), g, b, 1e-5)),
    "layer_norm_no_affine": ([X], lambda x: F.layer_norm(x, (4,), None, None, 1e-5)),
    "masked_fill": ([X], lambda x: x.masked_fill(X > 0.5, -1.25)),
    "masked_fill_row_mask": ([X], lambda x: x.masked_fill(torch.tensor([True, False, True, False]), 2.0)),
    "chunk3_dim1_weighted": ([X], lambda x: torch.cat([c * (k + 1) for k, c in enumerate(torch.chunk(x, 3, dim=1))], 1)),
    "split3_dim1_weighted": ([X], lambda x: torch.cat([c * (k + 1) for k, c in enumerate(torch.split(x, 3, dim=1))], 1)),
    "split_sizes_dim0_weighted": ([X], lambda x: torch.cat([c * (k + 1) for k, c in enumerate(torch.split(x, [1, 2], dim=0))], 0)),
    "l1_loss": ([X, Y], lambda a, b: F.l1_loss(a, b)),
    "mse_loss_sum": ([X, Y], lambda a, b: F.mse_loss(a, b, reduction="sum")),
    "smooth_l1_loss_beta0.5": ([X, Y], lambda a, b: F.smooth_l1_loss(a, b, beta=0.5)),
    "bce_with_logits": ([X, T], lambda a, b: F.binary_cross_entropy_with_logits(a, b)),
    "bce_with_logits_sum": ([X, T], lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum")),
    "max_pool2d_dilated_ceil": ([PX], lambda x: F.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True)),
    "max_pool2d_ceil": ([PX], lambda x: F.max_pool2d(x, (3, 2), (2, 2), ceil_mode=True)),
    "avg_pool2d_ceil_padded": ([PX], lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)),
    "avg_pool2d_ceil_exclude_pad": ([PX], lambda x: F.avg_pool2d(x, (2, 3), (2, 2), (1, 1), ceil_mode=True, count_include_pad=False)),
    "avg_pool2d_exclude_pad": ([PX], lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    "avg_pool2d_divisor_override": ([PX], lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=5)),
    "layer_norm_no_bias": ([X, G], lambda x, g: F.layer_norm(x, (4,), g, None, 1e-5)),
    "pad_reflect": ([PX], lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect")),
    "pad_replicate": ([PX], lambda x: F.pad(x, (2, 1, 1, 3), mode="replicate")),
    "pad_circular": ([PX], lambda x: F.pad(x, (2, 1, 1, 3), mode="circular")),
    "conv2d_reflect": ([PX, CW2], lambda x, w: F.conv2d(F.pad(x, (1, 1, 2, 2), mode="reflect"), w)),
    "sdpa": ([QA, KA, VA], lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
    "sdpa_causal_l5_s6": ([QA, KA, VA], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    "sdpa_float_mask_scale": ([QA, KA, VA], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=FM, scale=0.3)),
    "sdpa_bool_mask": ([QA, KA, VA], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=BM)),
    "unfold_dim1_size2_step1": ([X], lambda x: x.unfold(1, 2, 1)),
    "unfold_last_size2_step2": ([PX], lambda x: x.unfold(-1, 2, 2)),
    "sdpa_gqa_causal": ([QA.reshape(1, 4, 5, 4), KA[:1].clone(), VA[:1].clone()],
                        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
    "mha": ([XM, IW, IB, OW, OB], lambda *t: mha(*t)),
    "mha_causal_key_padding": ([XM, IW, IB, OW, OB], lambda *t: mha(*t, key_padding_mask=KPM, attn_mask=CAUSAL)),
}


def line(tag, t):
    t = t.detach().reshape(-1)
    print(tag, " ".join(repr(v) for v in t.tolist()))


print(f"# torch {torch.__version__}, float64")
for name, (inputs, f) in cases.items():
    xs = [x.clone().requires_grad_(True) for x in inputs]
    out = f(*xs)
    w = W if out.shape == W.shape else torch.ones_like(out) * 0.75
    if out.dim() == 4:  # a cotangent that varies over the image
        w = torch.cos(torch.arange(out.numel(), dtype=torch.float64) * 0.29).reshape(out.shape)
    (out * w).sum().backward()
    print("case", name)
    for k, x in enumerate(xs):
        line(f"in{k} {list(x.shape)}".replace(" ", ""), x)
    line(f"out {list(out.shape)}".replace(" ", "").replace("out", "out "), out)
    for k, x in enumerate(xs):
        line(f"grad{k}", x.grad)
print("case argmax_dim1")
line("in0[3,4]", X)
line("out [3]", torch.argmax(X, 1).double())
for name, kw in [("max_pool2d_indices_dilated_ceil", dict(kernel_size=2, stride=2, padding=1, dilation=2, ceil_mode=True)),
                 ("max_pool2d_indices_3x3_s1_p1", dict(kernel_size=3, stride=1, padding=1))]:
    print("case", name)
    line("in0[1,2,5,5]", PX)
    _, at = F.max_pool2d(PX, return_indices=True, **kw)
    line(f"out {list(at.shape)}".replace(" ", "").replace("out", "out "), at.double())
