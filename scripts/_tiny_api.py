"""What the tiny-pair API probes (scripts/api_overhead.py, api_split.py, api_timeline.py, api_pieces.py) share:
the import path, the tiny pair on the GPU (B = 1, N = M = 16), the benchmark's timing loop, a one-op autograd
Function, and the loop over the value checks on and off."""
import os
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu import wall_ms  # noqa: E402

#: _checks.prepare's keyword arguments of a default soft_dtw call.
PREPARE_KW = dict(cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
                  memory="auto", backend=None)


def tiny_pair():
    """x `(1, 16, 1)` requiring grad and y `(1, 16, 1)`, on the GPU."""
    return torch.randn(1, 16, 1, device="cuda", requires_grad=True), torch.randn(1, 16, 1, device="cuda")


def us(fn, n=2000):
    """Host wall time per call, µs (the benchmark's timing loop)."""
    return round(wall_ms(fn, n) * 1e3, 1)


class Neg(torch.autograd.Function):
    """One torch op each way: what autograd alone costs for a Function."""

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return -g


def medians_by_check(call, calls=3000, warmup=300):
    """{"check=1" | "check=0": {piece: median µs}}: call() (returning {piece: ns}) repeated with SOFTDTW_CHECK_VALUES
    1 and 0, the first `warmup` calls left out."""
    res = {}
    for check in ("1", "0"):
        os.environ["SOFTDTW_CHECK_VALUES"] = check
        rows = [call() for _ in range(calls)][warmup:]
        res[f"check={check}"] = {k: round(statistics.median(r.get(k, 0) for r in rows) / 1e3, 1) for k in rows[-1]}
        torch.cuda.synchronize()
    return res
