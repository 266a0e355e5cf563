"""Memcheck workload for the checkpointed backward's row bands and recompute ring: large-D (table) checkpoint calls
cut into bands of one tile (as tests/backends/test_cuda_banded.py does), both costs that build a table (the Gram form
and l1), float32 and float64, per-pair lengths, a Sakoe-Chiba band, and forced layouts whose recompute ring has
8 stages (W = 1, 2) or none (K = 4, W = 8: no room; plain loads).

    PYTHONPATH=src compute-sanitizer --tool memcheck python3 benchmarks/probes/memcheck_banded.py
"""
import sys

import torch

sys.path.insert(0, "src")
import softdtw  # noqa: E402
import softdtw.backends.cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

be.COST_BAND_BYTES, be.ROW_BANDS, be.COST_WHOLE_MAX = 1, 1000, 1  # bands of one tile
torch.manual_seed(0)
dev = "cuda"
cases = [  # (B, N, M, D, dtype, cost, lengths, bandwidth, (K, W, TH))
    (2, 600, 500, 20, torch.float32, "sqeuclidean", False, None, (4, 1, 128)),
    (3, 333, 250, 17, torch.float64, "sqeuclidean", True, None, (4, 1, 96)),
    (2, 400, 700, 33, torch.float32, "l1", True, 100, (2, 2, 160)),
    (2, 300, 1100, 40, torch.float32, "sqeuclidean", True, None, (4, 8, 544)),
]
for B, N, M, D, dtype, cost, lengths, bandwidth, (K, W, TH) in cases:
    x = torch.randn(B, N, D, device=dev, dtype=dtype, requires_grad=True)
    y = torch.randn(B, M, D, device=dev, dtype=dtype, requires_grad=True)
    kw = {}
    if lengths:
        kw = dict(x_lengths=torch.randint(N // 2, N + 1, (B,), device=dev),
                  y_lengths=torch.randint(M // 2, M + 1, (B,), device=dev))
    with launch.forced_plan(K, W, TH=TH):
        v = softdtw.soft_dtw(x, y, 1.0, cost=cost, bandwidth=bandwidth, memory="checkpoint", **kw)
        gx, gy = torch.autograd.grad(v.sum(), (x, y))
    torch.cuda.synchronize()
    assert torch.isfinite(v).all() and torch.isfinite(gx).all() and torch.isfinite(gy).all()
    print("ok", B, N, M, D, dtype, cost, lengths, bandwidth, (K, W, TH), flush=True)
