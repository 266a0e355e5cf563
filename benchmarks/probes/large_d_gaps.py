"""Where the large-D call's wall time goes beyond its kernels: host syncs (sync debug mode), the GPU timeline's
idle gaps (torch.profiler), and the host time of one call without a sync. B = 32, N = M = 2048, D = 64.

    PYTHONPATH=src python3 benchmarks/probes/large_d_gaps.py
"""
import json, sys, time, warnings
import torch
sys.path.insert(0, "src")
import softdtw
from torch.profiler import profile, ProfilerActivity

B, N, D = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32,2048,64").split(","))
x0 = torch.randn(B, N, D, device="cuda"); y0 = torch.randn(B, N, D, device="cuda")
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    def step():
        x = x0.clone().requires_grad_(True)
        softdtw.soft_dtw(x, y0, 1.0, memory="store").mean().backward()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode(1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        step()
    torch.cuda.set_sync_debug_mode(0)
    syncs = [str(m.message)[:200] for m in w]
    torch.cuda.synchronize()
    t0 = time.perf_counter(); step(); host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    t0 = time.perf_counter(); step(); torch.cuda.synchronize(); wall_ms = (time.perf_counter() - t0) * 1e3
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        step(); torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                key=lambda e: e.time_range.start)
    busy = sum(e.time_range.end - e.time_range.start for e in ev)
    span = ev[-1].time_range.end - ev[0].time_range.start
    gaps = []
    for a, b in zip(ev, ev[1:]):
        g = b.time_range.start - a.time_range.end
        if g > 8:
            gaps.append((round(g, 1), a.name[:50], b.name[:50]))
    print(json.dumps({"tf32": tf32, "syncs": syncs, "host_ms_no_sync": round(host_ms, 3), "wall_ms": round(wall_ms, 3),
                      "gpu_busy_ms": round(busy / 1e3, 3), "gpu_span_ms": round(span / 1e3, 3),
                      "kernels": [(e.name[:60], round((e.time_range.end - e.time_range.start) / 1e3, 3)) for e in ev],
                      "gaps_us": gaps}, indent=1), flush=True)
