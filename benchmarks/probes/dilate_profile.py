"""Where a DILATE training step goes on the GPU: host time, kernels, synchronisations (issue 24's <= 3x target).

    PYTHONPATH=src python benchmarks/probes/dilate_profile.py [--B 64 --N 256] [--out FILE.txt]

Runs bench_dilate's step (loss(pred, target).mean().backward(), pred (B, N, 1) float32, gamma = 0.01) and the
soft-DTW loss step under torch.profiler; prints per step: wall time, the sum of kernel times (GPU busy), and the
device-to-host copies / synchronisations the host waited on, then the top ops by CUDA and by CPU time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import softdtw  # noqa: E402
from bench_dilate import GAMMA, _data  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--N", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    pred, target = _data(args.B, args.N, args.N, "cuda", torch.float32)
    from softdtw.backends.cuda import fastpath

    fastpath.build()  # the soft-DTW step through the C++ launcher, as in bench_dilate
    losses = {"sdtw": lambda a, b: softdtw.soft_dtw(a, b, GAMMA),
              "dilate": lambda a, b: softdtw.dilate_loss(a, b, alpha=0.5, gamma=GAMMA)}
    report = []
    for name, fn in losses.items():
        def step():
            q = pred.detach().requires_grad_()
            fn(q, target).mean().backward()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        walls = []
        for _ in range(args.steps):  # as bench_dilate: each step synchronised, median
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
        wall = sorted(walls)[len(walls) // 2] * 1e3
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        ev = prof.key_averages()
        gpu = sum(e.self_device_time_total for e in ev if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3
        syncs = {e.key: e.count for e in ev if any(s in e.key for s in ("Synchronize", "Memcpy", "item",
                                                                          "_local_scalar_dense", "nonzero"))}
        report.append(f"== {name}: wall {wall:.3f} ms/step, kernels {gpu / args.steps:.3f} ms/step, "
                      f"syncs per step {({k: round(v / args.steps, 1) for k, v in syncs.items()})}")
        print(report[-1], flush=True)
        report.append(ev.table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=50))
        report.append(ev.table(sort_by="cpu_time_total", row_limit=22, max_name_column_width=50))
    if args.out:
        Path(args.out).write_text("\n".join(report))


if __name__ == "__main__":
    main()
