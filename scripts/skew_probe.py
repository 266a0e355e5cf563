"""Value-only forward: the skewed-lane kernels (kernels/forward_skew.cu) over a sweep of layouts, against the
unskewed plan the planner picks today. One JSON line per (size, layout) to stdout and to --out.

    python3 scripts/skew_probe.py [--out FILE] [--sizes B,N B,N ...] [--budget-s S]
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402

SIZES = ["1,65536", "1,16384", "16,8192", "32,2048", "16,2048", "16,1024", "16,512", "32,512", "16,128",
         "32,128", "256,512", "4096,512", "16384,512"]


def ms_of(fn, budget_ms=400.0, max_reps=10):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = (time.perf_counter() - t) * 1e3
    reps = int(max(1, min(max_reps, budget_ms / max(one, 1e-3))))
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--sizes", nargs="*", default=SIZES)
    ap.add_argument("--budget-s", type=float, default=240.0)
    args = ap.parse_args()
    out = open(args.out, "w") if args.out else None
    start = time.perf_counter()

    def emit(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for spec in args.sizes:
        B, N = (int(v) for v in spec.split(","))
        M = N
        x = torch.randn(B, N, 1, device="cuda")
        y = torch.randn(B, M, 1, device="cuda")
        g = torch.tensor(1.0, device="cuda")
        lengths = torch.full((B,), N, device="cuda")

        def fwd():
            be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, "none")

        with launch.forced_skew(None):
            base = ms_of(fwd)
        plan = launch.plan_for(B, N, M, 1, torch.float32, 0)
        emit({"B": B, "N": N, "layout": "unskewed", "plan": [plan.K, plan.W, plan.nch, plan.chain], "ms": round(base, 4),
              "gcups": round(B * N * M / base / 1e6, 1)})
        results = []
        for chain in (False, True):
            for W in (1, 2, 4, 8):
                for K in (1, 2, 4, 8, 16):
                    CW = 32 * W * K
                    nch = -(-M // CW)
                    if CW >= 2 * M and (K > 1 or W > 1):
                        continue
                    if chain and nch == 1:
                        continue
                    if not chain and nch > 1 and nch * N > 300_000:
                        continue
                    if chain and W > 4:
                        continue
                    if time.perf_counter() - start > args.budget_s:
                        emit({"stopped": "budget", "at": spec})
                        return
                    with launch.forced_skew(K, W, chain):
                        t = ms_of(fwd)
                    results.append((t, K, W, chain))
                    emit({"B": B, "N": N, "layout": "skew", "K": K, "W": W, "chain": chain, "nch": nch,
                          "ms": round(t, 4), "gcups": round(B * N * M / t / 1e6, 1), "vs_unskewed": round(base / t, 3)})
        if results:
            t, K, W, chain = min(results)
            emit({"B": B, "N": N, "best_skew": [K, W, chain], "ms": round(t, 4), "unskewed_ms": round(base, 4),
                  "speedup": round(base / t, 3)})
        del x, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
