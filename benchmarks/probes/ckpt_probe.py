"""memory="checkpoint" at B = 32, N = M = 2048, D = 64 (float32 GEMMs): the call's time against store, its host
timeline (launch stamps), syncs, GPU gaps; the row bands' recompute forced to the two-stage soft-min (split) or not.

    PYTHONPATH=src python3 benchmarks/probes/ckpt_probe.py
"""
import json, sys, warnings
import torch
sys.path.insert(0, "src"); sys.path.insert(0, "benchmarks")
import softdtw
from softdtw.backends import cuda as be
from softdtw.backends.cuda import launch as L
from gpu import HostStamps, kernel_us, median_ms
from torch.profiler import profile, ProfilerActivity

B, N, D = 32, 2048, 64
x0 = torch.randn(B, N, D, device="cuda"); y0 = torch.randn(B, N, D, device="cuda")
SPLIT = [False]
_expr = L.expression
def expr(kernel, dtype, cost, D, plan, window, *flags, var=0, split=False):
    if kernel == "backward_chain_kernel" and flags == (True,):  # the row bands' recompute, split or not
        split = SPLIT[0]
    return _expr(kernel, dtype, cost, D, plan, window, *flags, var=var, split=split)
L.expression = expr
stamps = HostStamps(((L, "launch"), (be, "_gram_table"), (be, "_available_bytes"), (torch.cuda, "mem_get_info")))
def step(memory):
    x = x0.clone().requires_grad_(True)
    v = softdtw.soft_dtw(x, y0, 1.0, memory=memory)
    stamps.mark("fwd ret")
    v.mean().backward()
out = {}
for split in (False, True, False, True):
    SPLIT[0] = split
    r = {}
    for mem in ("store", "checkpoint"):
        r[mem] = round(median_ms(lambda: step(mem), reps=10), 3)
    ku = kernel_us(lambda: step("checkpoint"), reps=3)
    r["ckpt_top"] = sorted(((k[:70], round(v / 1e3, 3)) for k, v in ku.items()), key=lambda kv: -kv[1])[:4]
    r["ckpt_gpu"] = round(sum(ku.values()) / 1e3, 3)
    r["ratio"] = round(r["checkpoint"] / r["store"], 3)
    print(json.dumps({"split_recompute": split, **r}), flush=True)
SPLIT[0] = False
for _ in range(2):
    step("checkpoint")
torch.cuda.synchronize()
torch.cuda.set_sync_debug_mode(1)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always"); step("checkpoint")
torch.cuda.set_sync_debug_mode(0)
print("syncs", [str(m.message)[:300] for m in w])
for r in range(2):
    torch.cuda.synchronize(); stamps.start(); step("checkpoint")
    stamps.mark("bwd ret")
    torch.cuda.synchronize(); stamps.mark("synced")
    print("run", r, stamps.line())
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    step("checkpoint"); torch.cuda.synchronize()
ev = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
            key=lambda e: e.time_range.start)
t0 = ev[0].time_range.start
for e in ev:
    print(f"  {e.time_range.start - t0:8.0f} {e.time_range.end - e.time_range.start:8.1f}  {e.name[:70]}")
