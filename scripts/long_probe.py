"""Layout sweep for long pairs (chained plans): times of forward (value only) and forward + backward with
memory="checkpoint" and "store" under forced (K, W), to calibrate launch.choose_plan.

    PYTHONPATH=src python3 scripts/long_probe.py      (B = 1, N = M = 65536 and B = 16, N = M = 8192)

Prints one JSON line per measurement.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return sorted(out)[len(out) // 2]


def main():
    sizes = [(1, 65536, 3), (16, 8192, 3)]
    layouts = [(None, None), (4, 1), (8, 1), (2, 2), (4, 2), (8, 2), (4, 4), (2, 4)]
    for B, N, reps in sizes:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, N, 1, device="cuda", generator=g)
        y = torch.randn(B, N, 1, device="cuda", generator=g)
        xl = torch.full((B,), N, dtype=torch.int64, device="cuda")
        gm = torch.tensor(1.0, device="cuda")
        grad = torch.ones(B, device="cuda")
        for K, W in layouts:
            ctx = launch.forced_plan(K, W, chain=True) if K else None
            try:
                if ctx:
                    ctx.__enter__()
                plan = launch.plan_for(B, N, N, 1, torch.float32, 0, True)
                fwd = timed(lambda: be.forward(x, y, gm, "sqeuclidean", xl, xl, None, "none"), reps)
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()

                def fb():
                    v, s = be.forward(x, y, gm, "sqeuclidean", xl, xl, None, "checkpoint")
                    be.backward(grad, x, y, gm, "sqeuclidean", xl, xl, None, v, s, "checkpoint")
                fbt = timed(fb, reps)
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
                cells = B * N * N
                print(json.dumps({"B": B, "N": N, "K": plan.K, "W": plan.W, "nch": plan.nch, "TH": plan.TH,
                                  "forced": K is not None, "fwd_ms": round(fwd, 3),
                                  "fwd_gcups": round(cells / fwd / 1e6, 1), "fb_ckpt_ms": round(fbt, 3),
                                  "fb_gcups": round(cells / fbt / 1e6, 1), "peak_mib": round(peak, 1)}), flush=True)
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
