"""Layout sweep for long pairs (chained plans): times of forward (value only) and forward + backward with
memory="checkpoint" and "store" under forced (K, W), to calibrate launch.choose_plan.

    PYTHONPATH=src python3 benchmarks/probes/long_probe.py            (B = 1, N = M = 65536 and B = 16, N = M = 8192)
    PYTHONPATH=src python3 benchmarks/probes/long_probe.py --split B N [K W [TH]]
                                                 (each kernel of store and checkpoint alone)
    PYTHONPATH=src python3 benchmarks/probes/long_probe.py --value B N K W [K W ...]  (value-only forward per layout)

Prints one JSON line per measurement.
"""
import contextlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu import median_ms as timed  # noqa: E402  (CUDA events, median after warm-up)
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402


def problem(B, N):
    """Seeded data for B pairs of length N (D = 1): the backend's positional arguments, and grad."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, N, 1, device="cuda", generator=g)
    y = torch.randn(B, N, 1, device="cuda", generator=g)
    lengths = torch.full((B,), N, dtype=torch.int64, device="cuda")
    gamma = torch.tensor(1.0, device="cuda")
    return (x, y, gamma, "sqeuclidean", lengths, lengths, None), torch.ones(B, device="cuda")


def main():
    sizes = [(1, 65536, 3), (16, 8192, 3)]
    layouts = [(None, None), (4, 1), (8, 1), (2, 2), (4, 2), (8, 2), (4, 4), (2, 4)]
    for B, N, reps in sizes:
        args, grad = problem(B, N)
        for K, W in layouts:
            with launch.forced_plan(K, W, chain=True) if K else contextlib.nullcontext():
                plan = launch.plan_for(B, N, N, 1, torch.float32, 0, True)
                fwd = timed(lambda: be.forward(*args, "none"), reps)
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()

                def fb():
                    v, s = be.forward(*args, "checkpoint")
                    be.backward(grad, *args, v, s, "checkpoint")
                fbt = timed(fb, reps)
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
                cells = B * N * N
                print(json.dumps({"B": B, "N": N, "K": plan.K, "W": plan.W, "nch": plan.nch, "TH": plan.TH,
                                  "forced": K is not None, "fwd_ms": round(fwd, 3),
                                  "fwd_gcups": round(cells / fwd / 1e6, 1), "fb_ckpt_ms": round(fbt, 3),
                                  "fb_gcups": round(cells / fbt / 1e6, 1), "peak_mib": round(peak, 1)}), flush=True)


def split(B, N, K=4, W=4, TH=None):
    """Times of each launch alone: value-only forward, storing forward, store backward, checkpointing
    forward, checkpoint backward, all under one chained plan (K, W) so the modes are comparable; TH forces
    the checkpoint tile height."""
    args, grad = problem(B, N)
    with launch.forced_plan(K, W, chain=True, TH=TH):
        plan = launch.plan_for(B, N, N, 1, torch.float32, 0, True)
        res = {"B": B, "N": N, "K": plan.K, "W": plan.W, "nch": plan.nch, "TH": plan.TH}
        res["fwd_none"] = timed(lambda: be.forward(*args, "none"), 3)
        store_ok = B * N * N * 4 < 20e9
        if store_ok:
            v, s = be.forward(*args, "store")
            res["fwd_store"] = timed(lambda: be.forward(*args, "store"), 3)
            res["bwd_store"] = timed(lambda: be.backward(grad, *args, v, s, "store"), 3)
            del s
        v, s = be.forward(*args, "checkpoint")
        res["fwd_ckpt"] = timed(lambda: be.forward(*args, "checkpoint"), 3)
        res["bwd_ckpt"] = timed(lambda: be.backward(grad, *args, v, s, "checkpoint"), 3)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}), flush=True)


def value_sweep(B, N, layouts):
    """Value-only forward time under each forced chained layout (K, W)."""
    args, _ = problem(B, N)
    for K, W in layouts:
        with launch.forced_plan(K, W, chain=True):
            plan = launch.plan_for(B, N, N, 1, torch.float32, 0, False)
            t = timed(lambda: be.forward(*args, "none"), 3)
            print(json.dumps({"B": B, "N": N, "K": plan.K, "W": plan.W, "nch": plan.nch, "fwd_none": round(t, 3),
                              "gcups": round(B * N * N / t / 1e6, 1)}), flush=True)


def stagger_sweep(B, N, K, W, values):
    """Checkpoint backward time against the tile stagger (rows between neighbouring chunks' tiles)."""
    args, grad = problem(B, N)
    default = launch.STAGGER_PER_WARP, launch.STAGGER_FIXED
    try:
        with launch.forced_plan(K, W, chain=True):
            for sv in values:
                launch.STAGGER_PER_WARP, launch.STAGGER_FIXED = 0, sv
                v, s = be.forward(*args, "checkpoint")
                t = timed(lambda: be.backward(grad, *args, v, s, "checkpoint"), 3)
                print(json.dumps({"B": B, "N": N, "K": K, "W": W, "stagger": sv, "bwd_ckpt": round(t, 3)}),
                      flush=True)
    finally:
        launch.STAGGER_PER_WARP, launch.STAGGER_FIXED = default


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--stagger":
        a = [int(v) for v in sys.argv[2:]]
        stagger_sweep(a[0], a[1], a[2], a[3], a[4:])
    elif len(sys.argv) > 1 and sys.argv[1] == "--value":
        a = [int(v) for v in sys.argv[2:]]
        value_sweep(a[0], a[1], list(zip(a[2::2], a[3::2])))
    elif len(sys.argv) > 1 and sys.argv[1] == "--split":
        split(*[int(a) for a in sys.argv[2:]])
    else:
        main()
