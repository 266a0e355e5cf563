"""A/B of the gradient from both ends in the training step (clone, soft_dtw, .mean(), .backward(), synchronise), as a
user runs it through the C++ launcher: run twice in separate processes, SOFTDTW_TWO_ENDED=1 and =0, and compare the
medians (one JSON line per shape; the MSE step on the same tensors beside them).

    SOFTDTW_TWO_ENDED=0 python3 benchmarks/probes/two_ended_grad_ab.py --label off
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import softdtw  # noqa: E402
from gpu import median_ms, node_name  # noqa: E402  (CUDA events, one call each, median after warm-up)
from softdtw.backends.cuda import fastpath  # noqa: E402

SHAPES = [(32, 512, 512, 1), (64, 512, 512, 1), (128, 512, 512, 1), (16, 1024, 1024, 1), (16, 2048, 2048, 1),
          (1, 8192, 8192, 1), (64, 96, 96, 7), (16, 128, 128, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default=os.environ.get("SOFTDTW_TWO_ENDED", "1"))
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args()
    fastpath.build()
    for B, N, M, D in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(B + N)
        x = torch.randn(B, N, D, device="cuda", generator=g)
        y = torch.randn(B, M, D, device="cuda", generator=g)

        def step():
            xc = x.clone().requires_grad_(True)
            softdtw.soft_dtw(xc, y, 0.1).mean().backward()
            torch.cuda.synchronize()

        def mse():
            xc = x.clone().requires_grad_(True)
            F.mse_loss(xc, y if N == M else x).backward()
            torch.cuda.synchronize()

        xc = x.clone().requires_grad_(True)
        node = node_name(softdtw.soft_dtw(xc, y, 0.1).grad_fn)
        ms = median_ms(step, args.reps, warmup=5)
        print(json.dumps({"label": args.label, "B": B, "N": N, "M": M, "D": D, "step_ms": round(ms, 4),
                          "mse_ms": round(median_ms(mse, args.reps, warmup=5), 4), "node": node}), flush=True)


if __name__ == "__main__":
    main()
