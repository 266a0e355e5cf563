"""Two-ended value-only forward (backends/cuda/two_ended.py) against the one-ended chained pass, per shape: which
shapes gain, to set two_ended.applies. Both paths are timed two ways: back to back (`calls` calls between two events:
the GPU's time per call, the host running ahead) and one call per event pair after a synchronisation (what a single
synchronised call costs, host time before the first kernel included). The two-ended path is run directly
(two_ended.forward) wherever the planner's layouts are chained, whatever applies says.

    PYTHONPATH=src python3 benchmarks/probes/two_ended_probe.py [--quick]

Prints one JSON line per shape: applies, both times both ways, GCUPS, and the two values' relative difference (and each
one's to a float64 one-ended value where that is affordable).
"""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_variants import queued_ms  # noqa: E402  (calls queued back to back, one synchronisation)
from gpu import median_ms  # noqa: E402  (CUDA events, one call each, median after warm-up)
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402
from softdtw.backends.cuda import two_ended as te  # noqa: E402


def back_to_back_ms(fn, calls, reps=5):
    """Median over `reps` runs of bench_variants.queued_ms: ms per call of `calls` calls queued back to back."""
    return sorted(queued_ms(fn, calls) for _ in range(reps))[reps // 2]


SHAPES = [(1, 2048, 2048), (16, 2048, 2048), (1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096),
          (1, 8192, 8192), (4, 8192, 8192), (8, 8192, 8192), (16, 8192, 8192), (32, 8192, 8192), (64, 8192, 8192),
          (1, 16384, 16384), (4, 16384, 16384), (16, 16384, 16384), (1, 65536, 65536), (4, 65536, 65536),
          (16, 65536, 65536), (1, 65536, 8192), (1, 8192, 65536)]
QUICK = [(16, 8192, 8192), (1, 8192, 8192), (64, 8192, 8192), (16, 16384, 16384), (1, 65536, 65536)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    for B, N, M in QUICK if args.quick else SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(B + N + M)
        x = torch.randn(B, N, 1, device="cuda", generator=gen, dtype=dtype)
        y = torch.randn(B, M, 1, device="cuda", generator=gen, dtype=dtype)
        xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
        yl = torch.full((B,), M, dtype=torch.int64, device="cuda")
        gamma = torch.tensor(1.0, device="cuda", dtype=dtype)
        cells = B * N * M
        calls = max(1, min(20, int(2e10 // cells)))
        reps = 5 if cells > 2**33 else 11
        half = launch.plan_for(2 * B, (N + 1) // 2, M, 1, dtype, 0)
        one_plan = launch.plan_for(B, N, M, 1, dtype, 0)
        applies = te.applies(B, N, M, 1, dtype, 0)
        te.set_enabled(False)
        try:
            one = lambda: be.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "none")  # noqa: E731
            v1 = one()[0]
            one_b2b, one_sync = back_to_back_ms(one, calls), median_ms(one, reps)
            v64 = None
            if cells <= 2**31 and one_plan.chain:
                v64 = be.forward(x.double(), y.double(), gamma.double(), "sqeuclidean", xl, yl, None, "none")[0]
        finally:
            te.set_enabled(True)
        row = {"B": B, "N": N, "M": M, "dtype": args.dtype, "applies": applies,
               "one_plan": [one_plan.K, one_plan.W, one_plan.nch, one_plan.chain],
               "half_plan": [half.K, half.W, half.nch, half.chain],
               "one_b2b_ms": round(one_b2b, 3), "one_sync_ms": round(one_sync, 3)}
        if one_plan.chain and half.chain:
            two = lambda: te.forward(x, y, gamma, "sqeuclidean", xl, yl)  # noqa: E731
            v2 = two()
            two_b2b, two_sync = back_to_back_ms(two, calls), median_ms(two, reps)
            row.update({"two_b2b_ms": round(two_b2b, 3), "two_sync_ms": round(two_sync, 3),
                        "ratio_b2b": round(two_b2b / one_b2b, 3), "ratio_sync": round(two_sync / one_sync, 3),
                        "one_gcups": round(cells / one_b2b / 1e6, 1), "two_gcups": round(cells / two_b2b / 1e6, 1),
                        "rel_two_vs_one": float(((v2 - v1).abs() / v1.abs()).max())})
            if v64 is not None:
                row["rel_two_vs_f64"] = float(((v2.double() - v64).abs() / v64.abs()).max())
                row["rel_one_vs_f64"] = float(((v1.double() - v64).abs() / v64.abs()).max())
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
