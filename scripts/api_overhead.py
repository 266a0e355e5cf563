"""Where the public API's per-call time goes for a tiny pair on the GPU (B = 1, N = M = 16)."""
import json
import time

import torch

import softdtw
from softdtw import _checks, _ops


def us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return round((time.perf_counter() - t) / n * 1e6, 1)


x = torch.randn(1, 16, 1, device="cuda", requires_grad=True)
y = torch.randn(1, 16, 1, device="cuda")
kw = dict(cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
          memory="auto", backend=None)
p = _checks.prepare(x, y, 1.0, **kw)
probes = {
    "prepare": lambda: _checks.prepare(x, y, 1.0, **kw),
    "check_values": lambda: _checks.check_values([(x, "x"), (y, "y")], [], None),
    "torch.full (cuda)": lambda: torch.full((1,), 16, dtype=torch.int64, device="cuda"),
    "resolve_memory": lambda: _ops.resolve_memory("auto", True, "cuda", "fused", 1, 16, 16, 1, torch.float32, x.device),
    "fused_value fwd": lambda: _ops.fused_value(p.x, p.y, p.gamma, "sqeuclidean", p.x_lengths, p.y_lengths, None,
                                                "store", "cuda"),
    "fused_value fwd+bwd": lambda: torch.autograd.grad(
        _ops.fused_value(p.x, p.y, p.gamma, "sqeuclidean", p.x_lengths, p.y_lengths, None, "store", "cuda").sum(), p.x),
    "soft_dtw fwd (no grad)": lambda: softdtw.soft_dtw(x.detach(), y, 1.0),
    "soft_dtw fwd+bwd": lambda: torch.autograd.grad(softdtw.soft_dtw(x, y, 1.0).sum(), x),
}
print(json.dumps({k: us(f) for k, f in probes.items()}, indent=1))
import cProfile, pstats
pr = cProfile.Profile()
pr.enable()
for _ in range(500):
    torch.autograd.grad(softdtw.soft_dtw(x, y, 1.0).sum(), x)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
