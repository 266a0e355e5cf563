"""Per-pass times of the backend's kernels (D = 1, fp32, gamma = 1): value-only forward, storing forward
and store backward, each alone (CUDA events, median), under the planner's layout. For before / after
comparisons of the step loops (benchmarks/OPTIMIZATION_LOG.md, "Leaner steps").

    PYTHONPATH=src python3 benchmarks/probes/step_probe.py [B,N ...]     (default: the latency-bound grid rows)

Prints one JSON line per size: plan, ms per kernel, and ns per step of the latency-bound passes.
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu import median_ms  # noqa: E402
from long_probe import problem  # noqa: E402  (the same seeded D = 1 data)
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

DEFAULT = ["16,128", "32,128", "16,512", "32,512", "16,1024", "32,2048", "16384,512"]


def probe(B: int, N: int) -> dict:
    args, grad = problem(B, N)
    reps = 20 if B * N * N < 2**32 else 5
    plan = launch.plan_for(B, N, N, 1, torch.float32, 0, False)
    res = {"B": B, "N": N, "plan": f"K={plan.K} W={plan.W} nch={plan.nch} chain={plan.chain}"}
    res["fwd_none_ms"] = median_ms(lambda: be.forward(*args, "none"), reps)
    v, s = be.forward(*args, "store")
    res["fwd_store_ms"] = median_ms(lambda: be.forward(*args, "store"), reps)
    res["bwd_store_ms"] = median_ms(lambda: be.backward(grad, *args, v, s, "store"), reps)
    steps = plan.nch * (N + 32 * plan.W - 1)  # SEQ passes; chained plans overlap their chunks
    if not plan.chain:
        for k in ("fwd_none", "fwd_store", "bwd_store"):
            res[k + "_ns_per_step"] = round(res[k + "_ms"] * 1e6 / steps, 1)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}


if __name__ == "__main__":
    for spec in sys.argv[1:] or DEFAULT:
        B, N = (int(v) for v in spec.split(","))
        print(json.dumps(probe(B, N)), flush=True)
