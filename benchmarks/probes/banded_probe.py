# Historical: written for the column bands (launch.band_plan, COST_BANDS), which the row bands replaced
# (OPTIMIZATION_LOG.md, "Row bands"); runs at ccb444d and before, not on later trees.
"""Large-D costs band by band (cuda backend): time and peak memory of forward + backward, checkpoint
(banded) against store (whole cost), at the backend. Prints one JSON line per row.

    python benchmarks/probes/banded_probe.py [B,N,D ...]      (default: 32,2048,64 16,2048,64 16,1024,64 1,16384,64)
    python benchmarks/probes/banded_probe.py --long           (also B = 1, N = M = 65536, D = 64, checkpoint only)
    python benchmarks/probes/banded_probe.py --sweep B,N,D  (checkpoint under every layout K, W whose chunk fits a band)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu  # noqa: E402  (benchmarks/gpu.py: data, timing and memory helpers)

from softdtw.backends import cuda as be  # noqa: E402


def probe(B, N, D, memories=("checkpoint", "store")):
    x, y = gpu.data(B, N, N, D)
    g = torch.tensor(1.0, device="cuda")
    for memory in memories:
        fn = gpu.backend_step(x, y, g, gpu.full_lengths(B, N, N), memory)
        try:
            ms, peak, reps = gpu.timed_with_peak(fn, budget_ms=3000, max_reps=20)
            plan = be._plan("fused", B, N, N, D, torch.float32, 0, memory)
            bands = None
            if be._banded("fused", D, memory, B, N, N, torch.float32):
                _, nband = be._band_plan(B, N, N, torch.float32, 0)
                bands = -(-plan.nch // nband)
            print(json.dumps({"B": B, "N": N, "D": D, "memory": memory, "ms": round(ms, 3), "peak_mb": round(peak, 1),
                              "reps": reps, "table_mb": round(B * N * N * 4 / 1e6, 1), "plan": str(plan),
                              "bands": bands}), flush=True)
        except Exception as err:  # out of memory for the store rows of long pairs
            print(json.dumps({"B": B, "N": N, "D": D, "memory": memory, "error": gpu.failure_note(err)}), flush=True)
        del fn
        torch.cuda.empty_cache()


def sweep(B, N, D):
    """Checkpointed forward + backward of the banded path under each layout whose chunk fits the band."""
    x, y = gpu.data(B, N, N, D)
    g = torch.tensor(1.0, device="cuda")
    budget = be._band_bytes(B, N, N, torch.float32)
    for W in (1, 2, 4):
        for K in (1, 2, 4, 8):
            if B * N * 32 * W * K * 4 > budget and (K > 1 or W > 1):
                continue
            with be._launch.forced_plan(K, W):
                plan, nband = be._launch.band_plan(B, N, N, torch.float32, 0, budget, be.COST_BANDS)
                fn = gpu.backend_step(x, y, g, gpu.full_lengths(B, N, N), "checkpoint")
                ms, peak, reps = gpu.timed_with_peak(fn, budget_ms=1500, max_reps=10)
            print(json.dumps({"sweep": [B, N, D], "K": K, "W": W, "plan": str(plan), "nband": nband,
                              "bands": -(-plan.nch // nband), "ms": round(ms, 3), "peak_mb": round(peak, 1)}),
                  flush=True)


if __name__ == "__main__":
    if "--sweep" in sys.argv:
        for a in sys.argv[sys.argv.index("--sweep") + 1:]:
            sweep(*(int(v) for v in a.split(",")))
        sys.exit()
    args = [a for a in sys.argv[1:] if a != "--long"]
    sizes = [tuple(int(v) for v in a.split(",")) for a in args] or [(32, 2048, 64), (16, 2048, 64), (16, 1024, 64),
                                                                     (1, 16384, 64)]
    for B, N, D in sizes:
        probe(B, N, D)
    if "--long" in sys.argv:
        probe(1, 65536, 64, ("checkpoint",))
