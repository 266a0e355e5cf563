"""Large D (the "gram" path, issue 27 item 4): forward and backward kernel-path times of B = 32, N = M = 2048,
D = 64, float32, memory="store", under the planner's layout and forced ones; the GEMM x·yᵀ in FP32 and TF32;
D = 1 at the same size for comparison. CUDA events, medians; prints JSON lines (also to $OUT/large_d_plans.jsonl).

    PYTHONPATH=src python benchmarks/probes/large_d_plans.py
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


def med(fn, reps=7):
    return median_ms(fn, reps, warmup=1)


def emit(**row):
    print(json.dumps(row), flush=True)
    if OUT:
        with open(os.path.join(OUT, "large_d_plans.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")


B, N, D = 32, 2048, 64
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(B, N, D, device="cuda", generator=g)
y = torch.randn(B, N, D, device="cuda", generator=g)
gm = torch.tensor(1.0, device="cuda")
ln = torch.full((B,), N, device="cuda")
grad = torch.ones(B, device="cuda")
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    emit(what="bmm x·yT", tf32=tf32, ms=round(med(lambda: torch.bmm(x, y.transpose(1, 2))), 4))
torch.backends.cuda.matmul.allow_tf32 = False
for dd in (D, 1):
    xs, ys = x[..., :dd].contiguous(), y[..., :dd].contiguous()
    for layout in (None, (8, 8, False), (4, 1, True), (2, 4, True), (4, 4, True), (1, 4, True), (4, 2, True),
                   (8, 4, True), (2, 1, True)):
        if dd == 1 and layout not in (None, (2, 4, True), (4, 4, True)):
            continue
        ctx = launch.forced_plan(*layout) if layout else torch.no_grad()
        try:
            with ctx:
                saved = {}

                def fwd():
                    saved["v"], saved["s"] = be.forward(xs, ys, gm, "sqeuclidean", ln, ln, None, "store")

                def bwd():
                    be.backward(grad, xs, ys, gm, "sqeuclidean", ln, ln, None, saved["v"], saved["s"], "store")

                f = med(fwd)
                b = med(bwd)
            emit(what="dp", D=dd, layout=str(layout), fwd_ms=round(f, 4), bwd_ms=round(b, 4),
                 total_ms=round(f + b, 4), gcups=round(B * N * N / (f + b) / 1e6, 1))
        except Exception as exc:  # a layout the kernels' shared memory does not take
            emit(what="dp", D=dd, layout=str(layout), error=f"{type(exc).__name__}: {str(exc)[:160]}")
        torch.cuda.synchronize()
