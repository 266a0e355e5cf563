"""Where the public API's per-call time goes for a tiny pair on the GPU (B = 1, N = M = 16)."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_api import PREPARE_KW as kw, Neg, tiny_pair, us  # noqa: E402  (also puts src/ and benchmarks/ on the path)

import softdtw  # noqa: E402
from gpu import api_step, backend_step, full_lengths  # noqa: E402
from softdtw import _checks, _ops  # noqa: E402

x, y = tiny_pair()
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
    "benchmark api_step (2 clones, .sum().backward())": api_step(x.detach(), y, "forward_backward"),
    "benchmark backend_step": backend_step(x.detach(), y, torch.tensor(1.0, device="cuda"),
                                           full_lengths(1, 16, 16), "store"),
    # The floor autograd itself sets on this machine: a Function with one torch op each way.
    "autograd.Function, 1 op each way": lambda: torch.autograd.grad(Neg.apply(x).sum(), x),
    "x.clone()": lambda: x.clone(),
    "torch.empty(1) cuda": lambda: torch.empty(1, device="cuda"),
}
print(json.dumps({k: us(f) for k, f in probes.items()}, indent=1))
import cProfile, pstats
pr = cProfile.Profile()
pr.enable()
for _ in range(500):
    torch.autograd.grad(softdtw.soft_dtw(x, y, 1.0).sum(), x)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(30)
pstats.Stats(pr).sort_stats("cumulative").print_stats(40)
