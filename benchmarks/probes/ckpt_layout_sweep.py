"""Which chained layout (K columns per lane, W warps per chunk) serves the large-D checkpoint best: the row-band
layout (launch.row_band_plan: K = 4, and W = 1 or 2 by ROW_BAND_W2_GAIN) was chosen from this sweep on an H200
(OPTIMIZATION_LOG.md, "Row bands of two warps"). Per layout, forced with launch.forced_plan (the tile height left to
launch.tile_rows): the training call's time (median of 10 synced calls; forced plans take the Python path, ~0.3 ms
more host time than the planner's launcher calls), its forward / backward / all kernel times and the peak above the
inputs, some rounds in turn, beside store.

    python3 benchmarks/probes/ckpt_layout_sweep.py [B,N,D] [K,W ...] [--M M] [--cost C] [--dtype T] [--rounds R]
                                                                          (JSON lines on stdout)
"""
import argparse
import json
import sys

import torch

sys.path.insert(0, "src")
sys.path.insert(0, "benchmarks")
import softdtw  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402
from gpu import kernel_us, median_ms  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("shape", nargs="?", default="32,2048,64", help="B,N,D")
ap.add_argument("layouts", nargs="*", help="K,W ...")
ap.add_argument("--M", type=int, default=None, help="y's length (default N)")
ap.add_argument("--cost", default="sqeuclidean")
ap.add_argument("--dtype", default="float32")
ap.add_argument("--rounds", type=int, default=2)
args = ap.parse_args()
B, N, D = (int(v) for v in args.shape.split(","))
M = args.M or N
layouts = [tuple(int(v) for v in a.split(",")) for a in args.layouts] or [(4, 1), (4, 2), (8, 1), (4, 4), (2, 2)]
dtype = getattr(torch, args.dtype)
g = torch.Generator(device="cuda").manual_seed(0)
x0 = torch.randn(B, N, D, device="cuda", generator=g, dtype=dtype)
y0 = torch.randn(B, M, D, device="cuda", generator=g, dtype=dtype)
tag = {"B": B, "N": N, "M": M, "D": D, "cost": args.cost, "dtype": args.dtype}


def step(memory):
    x = x0.clone().requires_grad_(True)
    softdtw.soft_dtw(x, y0, 1.0, memory=memory, cost=args.cost).mean().backward()


def measure(memory):
    step(memory)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(memory)
    torch.cuda.synchronize()
    ku = kernel_us(lambda: step(memory), reps=3)
    return {"ms": round(median_ms(lambda: step(memory), reps=10), 3),
            "fwd_ms": round(sum(v for k, v in ku.items() if "forward_chain" in k) / 1e3, 3),
            "bwd_ms": round(sum(v for k, v in ku.items() if "backward_chain" in k) / 1e3, 3),
            "gpu_ms": round(sum(ku.values()) / 1e3, 3),
            "peak_mb": round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)}


for rnd in range(1, args.rounds + 1):
    print(json.dumps({**tag, "round": rnd, "layout": "store", **measure("store")}), flush=True)
    print(json.dumps({**tag, "round": rnd, "layout": "planner", **measure("checkpoint")}), flush=True)
    for K, W in layouts:
        with launch.forced_plan(K, W):
            r = measure("checkpoint")
        print(json.dumps({**tag, "round": rnd, "layout": f"K{K} W{W}", **r}), flush=True)
    torch.cuda.empty_cache()
