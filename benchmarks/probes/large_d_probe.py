"""Where the time of a large-D (D > FUSED_D_MAX) forward + backward goes: kernels launched, their GPU time,
and the time of the whole call (CUDA events, host launches included), at the backend, memory="store".

    PYTHONPATH=src python3 benchmarks/probes/large_d_probe.py [B,N,D ...] [--json out.json]

For each size: per call, the number of kernels, their summed GPU time (torch.profiler), the event time
and the peak memory above the inputs; then the kernels of one call, largest first.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu import cuda_kernels, median_ms  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402

SIZES = ["16,128,64", "32,128,64", "16,512,64", "16,128,1", "16,512,1", "16,1024,64"]


def call(x, y, g, lengths, grad):
    v, saved = be.forward(x, y, g, "sqeuclidean", lengths, lengths, None, "store")
    return be.backward(grad, x, y, g, "sqeuclidean", lengths, lengths, None, v, saved, "store")


def probe(B: int, N: int, D: int) -> dict:
    torch.manual_seed(0)
    x = torch.randn(B, N, D, device="cuda")
    y = torch.randn(B, N, D, device="cuda")
    g = torch.tensor(1.0, device="cuda")
    lengths = torch.full((B,), N, device="cuda")
    grad = torch.ones(B, device="cuda")
    event_ms = median_ms(lambda: call(x, y, g, lengths, grad), 30, warmup=3)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call(x, y, g, lengths, grad)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 1e6
    reps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call(x, y, g, lengths, grad)
        torch.cuda.synchronize()
    rows = sorted(((n, c / reps, t / 1e3 / reps) for n, (c, t) in cuda_kernels(prof).items()), key=lambda r: -r[2])
    out = {"B": B, "N": N, "D": D, "event_ms": event_ms, "peak_mb": peak,
           "kernels_per_call": sum(r[1] for r in rows), "gpu_ms": sum(r[2] for r in rows),
           "kernels": [{"name": n, "count": c, "ms": t} for n, c, t in rows]}
    print(f"B={B} N={N} D={D}: {out['event_ms']:.4f} ms per call (events), {out['kernels_per_call']:.0f} kernels, "
          f"GPU {out['gpu_ms']:.4f} ms, peak {peak:.1f} MB")
    for n, c, t in rows:
        print(f"    {t * 1e3:8.1f} us  x{c:<4.0f} {n}")
    return out


def main():
    args = sys.argv[1:]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = args[i + 1]
        args = args[:i] + args[i + 2:]
    sizes = [tuple(int(v) for v in s.split(",")) for s in (args or SIZES)]
    print(torch.cuda.get_device_name())
    res = [probe(*s) for s in sizes]
    if out:
        Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": res}, indent=1))


if __name__ == "__main__":
    main()
