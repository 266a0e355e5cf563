"""A/B of the checkpointed gradient from both ends (memory="checkpoint", backends/cuda/two_ended.py) against the
one-ended checkpointed pass, in one process: soft_dtw(x, y, 0.1, memory="checkpoint").sum().backward() with the
two-ended paths switched on and off (two_ended.set_enabled) in alternating rounds, medians by CUDA events, the peak
memory of one step, and dx against the one-ended dx (float32, relative norm). One JSON line per (shape, round, mode);
the rule's warps per SM (two_ended.applies_grad counts them) beside each shape, so the bound can be read off.

    PYTHONPATH=src python3 benchmarks/probes/two_ended_ckpt_ab.py > ckpt_ab.jsonl

--th T runs the two-ended side under launch.forced_plan(4, 4, True, T) (the planner's K, W at these shapes; tiles of T
rows for the halves), --shapes picks entries of SHAPES: halving the halves' tiles keeps their tile buffers at the
one-ended call's size (the peak memory of a checkpointed call is mostly those buffers).
"""
import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import softdtw  # noqa: E402
from gpu import median_ms, node_name, peak_mb  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402
from softdtw.backends.cuda import two_ended as te  # noqa: E402

SHAPES = [(1, 4096), (8, 4096), (16, 4096), (1, 8192), (4, 8192), (8, 8192), (16, 2048), (32, 2048), (1, 16384),
          (2, 16384), (4, 16384), (1, 32768), (2, 32768), (1, 65536), (2, 65536)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--th", type=int, default=0)
    ap.add_argument("--shapes", default="")
    args = ap.parse_args()
    shapes = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    te.CKPT_WARPS_PER_SM = 1 << 20  # every shape from both ends when on: the rule's bound is what this measures
    for B, N in shapes:
        g = torch.Generator(device="cuda").manual_seed(B + N)
        x = torch.randn(B, N, 1, device="cuda", generator=g)
        y = torch.randn(B, N, 1, device="cuda", generator=g)
        half = launch.plan_for(2 * B, (N + 1) // 2, N, 1, torch.float32, 0, True)
        warps = 2 * B * half.W * half.nch

        def step():
            xc = x.clone().requires_grad_(True)
            softdtw.soft_dtw(xc, y, 0.1, memory="checkpoint").sum().backward()
            return xc

        def grad():
            xc = step()
            torch.cuda.synchronize()
            return xc.grad

        reps = 4 if N >= 32768 else 10
        dx = {}
        for rnd in range(2):
            for on in (True, False):
                te.set_enabled(on)
                with launch.forced_plan(4, 4, True, args.th) if on and args.th else contextlib.nullcontext():
                    xc = x.clone().requires_grad_(True)
                    node = node_name(softdtw.soft_dtw(xc, y, 0.1, memory="checkpoint").grad_fn)
                    ms = median_ms(step, reps, warmup=2)
                    mb = peak_mb(step)
                    if rnd == 0:
                        dx[on] = grad()
                print(json.dumps({"B": B, "N": N, "round": rnd, "two_ended": on, "th": args.th, "node": node,
                                  "step_ms": round(ms, 3),
                                  "peak_mb": round(mb, 1), "half_plan": str(half), "warps": warps,
                                  "warps_per_sm": round(warps / launch.sm_count(0), 2)}), flush=True)
        te.set_enabled(True)
        rel = float((dx[True] - dx[False]).norm() / dx[False].norm())
        print(json.dumps({"B": B, "N": N, "dx_rel_two_vs_one": rel}), flush=True)
        del dx
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
