"""Would the large-D float32 GEMMs be faster, at float32's precision, as three TF32 products on the tensor cores
(x_hi·y_hiᵀ + x_hi·y_loᵀ + x_lo·y_hiᵀ, x_hi = x rounded to TF32's 10 mantissa bits, x_lo = x - x_hi)?

x·yᵀ as one TF32 GEMM over the concatenated depth ([x_hi, x_hi, x_lo] · [y_hi, y_lo, y_hi]ᵀ, 3D = 192) against
cuBLAS's float32 GEMM (the FFMA kernel at D = 64) and plain TF32; and E·y (the dx GEMM) as E_hi·[y_hi, y_lo] plus
E_lo·y_hi against float32. Times in ms (gpu.median_ms: CUDA events, median of 20, splits included), errors against
float64: of x·yᵀ relative to |x||y|, of the Gram cost |x|² + |y|² - 2 x·y relative to the float64 cost, of E·y
relative to |E||y| per row. B = 32, N = M = 2048, D = 64 by default.

    python3 benchmarks/probes/gemm_3xtf32_probe.py [B,N,D]
"""
import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from gpu import median_ms  # noqa: E402  (CUDA events, median)

B, N, D = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32,2048,64").split(","))
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(B, N, D, device="cuda", generator=g)
y = torch.randn(B, N, D, device="cuda", generator=g)
E = torch.rand(B, N, N, device="cuda", generator=g) * (torch.rand(B, N, N, device="cuda", generator=g) < 0.01)


def tf32_hi(t):
    """t rounded to TF32 (10 mantissa bits), so the tensor cores take it exactly."""
    i = t.view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def xy_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.bmm(x, y.transpose(1, 2))


def xy_tf32():
    torch.backends.cuda.matmul.allow_tf32 = True
    return torch.bmm(x, y.transpose(1, 2))


def xy_3x():
    torch.backends.cuda.matmul.allow_tf32 = True
    xh, yh = tf32_hi(x), tf32_hi(y)
    X = torch.cat((xh, xh, x - xh), -1)
    Y = torch.cat((yh, y - yh, yh), -1)
    return torch.bmm(X, Y.transpose(1, 2))


def ey_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.bmm(E, y)


def ey_3x():
    torch.backends.cuda.matmul.allow_tf32 = True
    Eh = tf32_hi(E)
    yh = tf32_hi(y)
    two = torch.bmm(Eh, torch.cat((yh, y - yh), -1))
    return two[..., :D] + two[..., D:] + torch.bmm(E - Eh, yh)


xd, yd = x.double(), y.double()
ref = torch.bmm(xd, yd.transpose(1, 2))
scale = xd.norm(dim=-1).unsqueeze(-1) * yd.norm(dim=-1).unsqueeze(1)
cost_ref = (xd.square().sum(-1).unsqueeze(-1) + yd.square().sum(-1).unsqueeze(1) - 2 * ref)
xn, yn = x.square().sum(-1).unsqueeze(-1), y.square().sum(-1).unsqueeze(1)
rows = []
for name, fn in (("fp32", xy_fp32), ("tf32", xy_tf32), ("3xtf32", xy_3x)):
    C = fn().double()
    cost = (xn + yn).double() - 2 * C
    rows.append({"gemm": "x·yT", "impl": name, "ms": round(median_ms(fn, reps=20), 4),
                 "max_rel_xy": float(((C - ref).abs() / scale).max()),
                 "max_rel_cost": float(((cost - cost_ref).abs() / cost_ref.clamp_min(1e-3)).max()),
                 "median_rel_cost": float(((cost - cost_ref).abs() / cost_ref.clamp_min(1e-3)).median())})
del ref, scale, cost_ref
Ed = E.double()
eref = torch.bmm(Ed, yd)
escale = Ed.norm(dim=-1).unsqueeze(-1) * yd.norm(dim=1).unsqueeze(1)
for name, fn in (("fp32", ey_fp32), ("3xtf32", ey_3x)):
    R = fn().double()
    rows.append({"gemm": "E·y", "impl": name, "ms": round(median_ms(fn, reps=20), 4),
                 "max_rel": float(((R - eref).abs() / escale).max())})
torch.backends.cuda.matmul.allow_tf32 = False
for r in rows:
    print(json.dumps(r))
