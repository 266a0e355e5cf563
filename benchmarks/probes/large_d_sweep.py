"""Large D (issue 27 item 4): the planner's layout against chained ones for the GEMM paths (cost "gram" for
squared Euclidean; "precomputed" for l1), forward + backward, memory="store", float32, over a grid of B and N
(N = M). CUDA events, medians; JSON lines on stdout and in $OUT/large_d_sweep.jsonl.

    PYTHONPATH=src python benchmarks/probes/large_d_sweep.py [B,N,D,cost ...]
"""
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu import median_ms  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

OUT = os.environ.get("OUT")
GRID = sys.argv[1:] or ["32,2048,64,sqeuclidean", "16,2048,64,sqeuclidean", "128,1024,64,sqeuclidean",
                        "32,1024,64,sqeuclidean", "16,512,64,sqeuclidean", "256,512,64,sqeuclidean",
                        "64,256,64,sqeuclidean", "32,128,64,sqeuclidean", "4,4096,64,sqeuclidean",
                        "32,1024,32,l1"]
LAYOUTS = [None, (4, 4, True), (4, 2, True), (4, 1, True), (8, 4, True)]


def med(fn, reps=5):
    return median_ms(fn, reps, warmup=1)


for spec in GRID:
    B, N, D, cost = spec.split(",")
    B, N, D = int(B), int(N), int(D)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, D, device="cuda", generator=g)
    y = torch.randn(B, N, D, device="cuda", generator=g)
    gm = torch.tensor(1.0, device="cuda")
    ln = torch.full((B,), N, device="cuda")
    grad = torch.ones(B, device="cuda")
    for layout in LAYOUTS:
        try:
            def step():
                v, s = be.forward(x, y, gm, cost, ln, ln, None, "store")
                be.backward(grad, x, y, gm, cost, ln, ln, None, v, s, "store")

            if layout is None:
                ms = med(step)
                plan = str(be._plan("fused", B, N, N, D, torch.float32, 0, "store"))
            else:
                with launch.forced_plan(*layout):
                    ms = med(step)
                plan = str(layout)
            row = dict(B=B, N=N, D=D, cost=cost, layout=plan, planner=layout is None, ms=round(ms, 4),
                       gcups=round(B * N * N / ms / 1e6, 1))
        except Exception as exc:
            row = dict(B=B, N=N, D=D, cost=cost, layout=str(layout), error=f"{type(exc).__name__}: {str(exc)[:120]}")
        print(json.dumps(row), flush=True)
        if OUT:
            with open(os.path.join(OUT, "large_d_sweep.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
        torch.cuda.synchronize()
