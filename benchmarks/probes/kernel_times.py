"""Kernel-by-kernel GPU time of the backend's forward + backward (torch.profiler), for a few sizes.

    MEMORY=checkpoint python3 benchmarks/probes/kernel_times.py B,N,D [B,N,D ...]     (MEMORY: store by default)

Prints one JSON line per size: the launch plan, the wall time of one step (host included), the sum of
kernel times, and each kernel's name, count and mean µs. Shows whether a small problem is bound by its
kernels or by the host launching them."""
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from softdtw.backends import cuda as be  # noqa: E402

MEMORY = os.environ.get("MEMORY", "store")

for spec in sys.argv[1:]:
    B, N, D = (int(v) for v in spec.split(","))
    x = torch.randn(B, N, D, device="cuda")
    y = torch.randn(B, N, D, device="cuda")
    g = torch.tensor(1.0, device="cuda")
    lengths = torch.full((B,), N, device="cuda")
    grad = torch.ones(B, device="cuda")

    def step():
        v, saved = be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, MEMORY)
        be.backward(grad, x, y, g, "sqeuclidean", lengths, lengths, None, v, saved, MEMORY)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / reps * 1e6
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    kernels = defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name[:90]].append(e.device_time)
    total = sum(sum(v) for v in kernels.values()) / reps
    plan = be._plan("fused", B, N, N, D, torch.float32, 0, MEMORY)
    print(json.dumps({"B": B, "N": N, "D": D, "memory": MEMORY, "plan": str(plan), "wall_us_per_step": round(wall, 1),
                      "kernel_us_per_step": round(total, 1),
                      "kernels": {k: [len(v) // reps, round(sum(v) / len(v), 1)] for k, v in kernels.items()}}),
          flush=True)
