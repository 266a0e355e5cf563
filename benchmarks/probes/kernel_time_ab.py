"""Kernel-time A/B of two source trees: the GPU time per step of the DP kernels (torch.profiler, not wall time).

    python benchmarks/probes/kernel_time_ab.py SRC_DIR TAG OUT.jsonl

SRC_DIR is a `src/` folder (a copy of this tree, with or without a patch); one JSON line per call goes to OUT.jsonl:
the loss step's forward / backward DP kernels (`soft_dtw(...).mean().backward()`, gamma 0.1) on ten shapes, then
per HVP shape the `hvp_xy` kernels (gamma terms off) and a DILATE step's kernels. With SHAPES=extra in the
environment: seven other loss shapes (float64, hard DTW, many pairs, a step penalty, checkpoint) and no HVP rows;
with SHAPES=throughput four batches that fill the GPU; with SHAPES=chain three long pairs (chained storing passes of a
fused cost); with SHAPES=kbig four full batches of K >= 8 layouts; with SHAPES=grad512 five shapes of 512-768 rows and
with SHAPES=grad768 seven of 768-1023 rows, around the gradient from both ends' bound (two_ended.GRAD_MIN_ROWS); with
SHAPES=loss the default loss shapes without the
HVP rows; with SHAPES=hvp the HVP rows alone.
`kernel_time_ab.sh` runs it as an A/B: a warm-up process per tree (the NVRTC compiles), then base, new, base, new.
Kernel times resolve 1-2 % between processes where event-timed steps of these sizes move with the host
(OPTIMIZATION_LOG.md, "The backward's ring address once")."""
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402

import softdtw  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpu import kernel_us  # noqa: E402  (benchmarks/gpu.py)


def ktimes(fn, reps=20, warm=5):
    """GPU µs per call of fn's kernels by kind: hvp, bwd (backward), fwd (forward), other."""
    k = defaultdict(float)
    for n, us in kernel_us(fn, reps, warm).items():
        k["hvp" if "hvp" in n else ("bwd" if "backward" in n else ("fwd" if "forward" in n else "other"))] += us
    return {a: round(b, 1) for a, b in k.items()}


SH = [("512", 32, 512, 512, 1, {}), ("128", 16, 128, 128, 1, {}), ("fc96", 64, 96, 96, 7, {}),
      ("gest64", 128, 64, 64, 3, {}), ("speech", 16, 400, 300, 80, {}), ("2048", 16, 2048, 2048, 1, {}),
      ("g2048", 32, 2048, 2048, 64, {}), ("lens512", 32, 512, 480, 1, {"lengths": True}),
      ("band512", 32, 512, 512, 1, {"bandwidth": 64}), ("oe512", 32, 512, 512, 1, {"open_end": True})]
# SHAPES=extra (environment): float64, hard DTW, many pairs (one warp per pair), a step penalty, checkpoint.
EXTRA = [("f64_512", 32, 512, 512, 1, {"dtype": torch.float64}), ("hard512", 32, 512, 512, 1, {"gamma": 0.0}),
         ("b1024_128", 1024, 128, 128, 1, {}), ("b256_256", 256, 256, 256, 1, {}),
         ("pen512", 32, 512, 512, 1, {"step_penalty": 0.1}), ("ckpt4096", 8, 4096, 4096, 1, {"memory": "checkpoint"}),
         ("gckpt1024", 32, 1024, 1024, 64, {"memory": "checkpoint"})]
# SHAPES=throughput: batches that fill the GPU (the planner's W = 1 and W >= 2 layouts with every SM busy).
THROUGHPUT = [("b4096_128", 4096, 128, 128, 1, {}), ("b1024_256", 1024, 256, 256, 1, {}),
              ("b512_512", 512, 512, 512, 1, {}), ("b256_1024", 256, 1024, 1024, 1, {})]
# SHAPES=chain: long pairs whose storing forward is a chained pass of a fused cost (the halves of a gradient from
# both ends: 2 x 4096 x 8192, 8 x 2048 x 4096, 2 x 8192 x 16384).
CHAIN = [("s8192", 1, 8192, 8192, 1, {}), ("s4096", 4, 4096, 4096, 1, {}), ("s16384", 1, 16384, 16384, 1, {})]
# SHAPES=kbig: full batches the planner runs at K >= 8 (K8 W1, K16 W1, K16 W2, K8 W1 at D = 3).
KBIG = [("b4096_256", 4096, 256, 256, 1, {}), ("b4096_512", 4096, 512, 512, 1, {}),
        ("b1024_1024", 1024, 1024, 1024, 1, {}), ("b4096_512d3", 4096, 512, 512, 3, {})]
# SHAPES=grad512: pairs of 512-768 rows, for a tree whose gradient from both ends starts at 512 rows
# (two_ended.GRAD_MIN_ROWS = 512; GRAD_WARPS_PER_SM), whose "other" kernels (the halves' inputs and the fold) count too.
GRAD512 = [("b8_512", 8, 512, 512, 1, {}), ("b16_512", 16, 512, 512, 1, {}), ("b64_512", 64, 512, 512, 1, {}),
           ("b32_768", 32, 768, 768, 1, {}), ("b32_512d3", 32, 512, 512, 3, {})]
# SHAPES=grad768: around the bound of 768 rows (OPTIMIZATION_LOG.md, "The gradient from both ends from 768 rows"):
# 4 to 64 pairs of 768 (two-ended), 128 (one-ended: GRAD_WARPS_PER_SM), 1023 rows and D = 7.
GRAD768 = [("b4_768", 4, 768, 768, 1, {}), ("b16_768", 16, 768, 768, 1, {}), ("b32_768", 32, 768, 768, 1, {}),
           ("b64_768", 64, 768, 768, 1, {}), ("b128_768", 128, 768, 768, 1, {}), ("b32_1023", 32, 1023, 1023, 1, {}),
           ("b32_768d7", 32, 768, 768, 7, {})]
out = open(sys.argv[3], "a")
rec = {"tag": sys.argv[2], "kind": "loss"}
SHAPES = os.environ.get("SHAPES", "")
SETS = {"extra": EXTRA, "throughput": THROUGHPUT, "chain": CHAIN, "kbig": KBIG, "grad512": GRAD512, "grad768": GRAD768,
        "hvp": [], "loss": SH}
for name, B, N, M, D, kw in SETS.get(SHAPES, SH):
    kw = dict(kw)
    dtype = kw.pop("dtype", torch.float32)
    gamma = kw.pop("gamma", 0.1)
    x0 = torch.randn(B, N, D, device="cuda", dtype=dtype)
    y0 = torch.randn(B, M, D, device="cuda", dtype=dtype)
    if kw.pop("lengths", False):
        kw["x_lengths"] = torch.randint(N // 2, N + 1, (B,), device="cuda")
        kw["y_lengths"] = torch.randint(M // 2, M + 1, (B,), device="cuda")

    def step():
        x = x0.clone().requires_grad_(True)
        softdtw.soft_dtw(x, y0, gamma, **kw).mean().backward()

    for nm, v in ktimes(step).items():
        rec[f"{name}_{nm}"] = v
if SHAPES != "hvp":
    print(json.dumps(rec), file=out, flush=True)
HVP = [] if SHAPES in SETS and SHAPES != "hvp" else [(1024, 256, 256, 1.0), (1024, 256, 256, 0.1), (64, 512, 512, 1.0),
                                                    (256, 128, 128, 0.1)]
for B, N, M, gamma in HVP:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", generator=g)
    y = torch.randn(B, M, 1, device="cuda", generator=g)
    xd = torch.randn(B, N, 1, device="cuda", generator=g)
    yd = torch.zeros_like(y)
    gam = torch.tensor(gamma, device="cuda")
    gd = torch.zeros(B, device="cuda")
    xl = torch.full((B,), N, device="cuda", dtype=torch.int64)
    yl = torch.full((B,), M, device="cuda", dtype=torch.int64)
    xr = x.clone().requires_grad_(True)

    def hx():
        return be.hvp_xy("sqeuclidean", x, y, gam, xl, yl, None, xd, yd, gd, gamma_terms=False)

    def dil():
        xr.grad = None
        softdtw.dilate_loss(xr, y, alpha=0.5, gamma=gamma).mean().backward()

    r = {"tag": sys.argv[2], "kind": "hvp", "B": B, "N": N, "gamma": gamma}
    r.update({"hx_" + k: v for k, v in ktimes(hx).items()})
    r.update({"dil_" + k: v for k, v in ktimes(dil, reps=10).items()})
    print(json.dumps(r), file=out, flush=True)
