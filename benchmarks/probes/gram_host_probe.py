"""Where the large-D ("gram") loss step's host time goes (issue 27, the D = 64 / 80 rows; measurement only).

At D <= FUSED_D_MAX a loss call issues two kernels from C++; past it the gram form also runs norms_kernel and
``at::bmm`` forwards and, backwards, two ``mul`` + ``baddbmm_`` pairs. This times, per call and on the host only
(a loop of ``--reps`` calls with no synchronisation inside, the GPU kept ahead of nothing: these kernels are µs),
each torch call the gram path makes, and the launcher's forward at D = 64 against D = 16, then prints a
torch.profiler table of whole steps (self CPU time per op). Needs a CUDA GPU.

    PYTHONPATH=src python3 benchmarks/probes/gram_host_probe.py [--shape B,N,M,D ...] [--out F.jsonl]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import median

import torch

GAMMA = 0.1


def host_us(fn, reps: int, rounds: int = 5) -> float:
    """Median over rounds of the host's time per call of fn (a loop of reps calls, synchronised only around it)."""
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        t1 = time.perf_counter_ns()
        torch.cuda.synchronize()
        out.append((t1 - t0) / reps / 1e3)
    return round(median(out), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", default=[], metavar="B,N,M,D")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import softdtw
    from softdtw.backends.cuda import fastpath

    fastpath.build()
    print(fastpath.status(), flush=True)
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.shape or ["32,128,128,64", "16,400,300,80"])]
    for B, N, M, D in shapes:
        torch.manual_seed(0)
        x = torch.randn(B, N, D, device="cuda")
        y = torch.randn(B, M, D, device="cuda")
        x16, y16 = x[..., :16].contiguous(), y[..., :16].contiguous()
        E = torch.randn(B, N, M, device="cuda")
        rs, cs = torch.randn(B, N, device="cuda"), torch.randn(B, M, device="cuda")
        xg = x.clone().requires_grad_(True)
        x16g = x16.clone().requires_grad_(True)
        for _ in range(3):  # plans registered, launcher taking the calls
            softdtw.soft_dtw(x, y, GAMMA)
            softdtw.soft_dtw(x16, y16, GAMMA)
            softdtw.soft_dtw(xg, y, GAMMA).sum().backward()
            softdtw.soft_dtw(x16g, y16, GAMMA).sum().backward()
        pieces = {
            "empty_BNM": lambda: torch.empty(B, N, M, device="cuda"),
            "bmm_x_yT": lambda: torch.bmm(x, y.transpose(1, 2)),
            "mul_x_rs": lambda: x * rs.unsqueeze(-1),
            "baddbmm_dx": lambda: (x * rs.unsqueeze(-1)).baddbmm_(E, y, beta=2.0, alpha=-2.0),
            "baddbmm_dy": lambda: (y * cs.unsqueeze(-1)).baddbmm_(E.transpose(1, 2), x, beta=2.0, alpha=-2.0),
            "fwd_value_D": lambda: softdtw.soft_dtw(x, y, GAMMA),
            "fwd_value_16": lambda: softdtw.soft_dtw(x16, y16, GAMMA),
            "fwd_store_D": lambda: softdtw.soft_dtw(xg, y, GAMMA),
            "fwd_store_16": lambda: softdtw.soft_dtw(x16g, y16, GAMMA),
        }
        row = {"B": B, "N": N, "M": M, "D": D, "gpu": torch.cuda.get_device_name()}
        for name, fn in pieces.items():
            row[name + "_us"] = host_us(fn, args.reps)
        # the backward alone: a fresh graph per call, its forward outside the timed span
        for tag, (a, b) in (("D", (x, y)), ("16", (x16, y16))):
            ts = []
            for _ in range(args.reps):
                ag = a.clone().requires_grad_(True)
                loss = softdtw.soft_dtw(ag, b, GAMMA).mean()
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                loss.backward()
                ts.append((time.perf_counter_ns() - t0) / 1e3)
            row["backward_" + tag + "_us"] = round(median(ts), 2)
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                ag = x.clone().requires_grad_(True)
                softdtw.soft_dtw(ag, y, GAMMA).mean().backward()
            torch.cuda.synchronize()
        print(f"=== profile of 50 steps, B={B} N={N} M={M} D={D}", flush=True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), flush=True)


if __name__ == "__main__":
    main()
