"""Where a gradient-penalty step with soft-DTW goes on the GPU: host time, kernels, synchronisations (issue 24).

    PYTHONPATH=src python benchmarks/probes/penalty_profile.py [--B 64 --N 256] [--out FILE.txt]

The step bench_hvp.py times as "penalty_step": x (B, N, 1) float32 requiring grad, v = soft_dtw(x, y, gamma=1),
gx = autograd.grad(v.sum(), x, create_graph=True), (v.sum() + |gx|²).backward(). Prints the step's wall time
(synchronised, median), the sum of kernel times, the host waits, then the top ops by CPU and by CUDA time, with
hvp_xy on and off (backends.cuda.HVP_XY).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import softdtw  # noqa: E402
from softdtw.backends import cuda as backend  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--N", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.B, args.N, 1, device="cuda", generator=g)
    y = torch.randn(args.B, args.N, 1, device="cuda", generator=g)
    from softdtw.backends.cuda import fastpath

    fastpath.build()

    def step():
        xr = x.detach().requires_grad_(True)
        v = softdtw.soft_dtw(xr, y, gamma=1.0)
        (gx,) = torch.autograd.grad(v.sum(), xr, create_graph=True)
        (v.sum() + gx.square().sum()).backward()

    report = []
    for on in (True, False):
        backend.HVP_XY = on
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        walls = []
        for _ in range(args.steps):
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
        report.append(f"== hvp_xy {'on' if on else 'off'}: B={args.B} N=M={args.N}: step {wall:.3f} ms (median "
                      f"of {args.steps}), kernels {gpu / args.steps:.3f} ms per step, host waits {syncs}")
        report.append(ev.table(sort_by="self_cpu_time_total", row_limit=25))
        report.append(ev.table(sort_by="self_device_time_total", row_limit=15))
    backend.HVP_XY = True
    text = "\n".join(report)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
