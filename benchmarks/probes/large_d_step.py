"""Issue 27's large-D row through the public API: B = 32, N = M = 2048, D = 64, `soft_dtw(x, y, 1.0).mean()
.backward()` with store (TF32 off, then on) and with checkpoint, plus the GPU time of each call's kernels.

    PYTHONPATH=src python3 benchmarks/probes/large_d_step.py [--out results.json] [--sizes B,N,D ...]

Per size and mode: the median of 10 event-timed calls (clone, loss, mean, backward; two warm-up calls first), the
summed kernel time of one call (torch.profiler) and its five largest kernels, and the peak memory above the inputs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import softdtw  # noqa: E402
from gpu import kernel_us, median_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--sizes", nargs="*", default=["32,2048,64"])
    args = ap.parse_args()
    rows = []
    for spec in args.sizes:
        B, N, D = (int(v) for v in spec.split(","))
        x0 = torch.randn(B, N, D, device="cuda")
        y0 = torch.randn(B, N, D, device="cuda")
        for memory, tf32 in (("store", False), ("store", True), ("checkpoint", False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32

            def step():
                x = x0.clone().requires_grad_(True)
                softdtw.soft_dtw(x, y0, 1.0, memory=memory).mean().backward()

            step()
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ms = median_ms(step, reps=10)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            per = {name: us / 1e3 for name, us in kernel_us(step, reps=3).items()}  # ms
            top = sorted(per.items(), key=lambda kv: -kv[1])[:5]
            row = {"B": B, "N": N, "D": D, "memory": memory, "tf32": tf32, "ms": round(ms, 3),
                   "gpu_ms": round(sum(per.values()), 3), "peak_mb": round(peak, 1),
                   "top": [(k, round(v, 3)) for k, v in top]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
