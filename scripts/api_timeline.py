"""Timeline of one public-API forward + backward of a tiny pair (B = 1, N = M = 16) on the GPU: host timestamps
taken in the calling thread and inside the autograd Function's backward (the engine's device thread), so the
hand-overs between the two threads show as gaps. Median over many calls, µs from the call's start."""
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_api import medians_by_check, tiny_pair  # noqa: E402  (also puts src/ on the path)

import softdtw  # noqa: E402
from softdtw import _ops  # noqa: E402

marks = {}
orig_bwd = _ops._Fused.backward
orig_fwd = _ops._Fused.forward


def bwd(ctx, g):
    marks["bwd_in"] = time.perf_counter_ns()
    out = orig_bwd(ctx, g)
    marks["bwd_out"] = time.perf_counter_ns()
    return out


def fwd(ctx, *a):
    marks["fwd_in"] = time.perf_counter_ns()
    out = orig_fwd(ctx, *a)
    marks["fwd_out"] = time.perf_counter_ns()
    return out


_ops._Fused.backward = staticmethod(bwd)
_ops._Fused.forward = staticmethod(fwd)

x, y = tiny_pair()


def one_call():
    """ns from the call's start to each mark."""
    t0 = time.perf_counter_ns()
    v = softdtw.soft_dtw(x, y, 1.0)
    t1 = time.perf_counter_ns()
    s = v.sum()
    t2 = time.perf_counter_ns()
    torch.autograd.grad(s, x)
    t3 = time.perf_counter_ns()
    return {"fwd_in": marks["fwd_in"] - t0, "fwd_out": marks["fwd_out"] - t0, "soft_dtw": t1 - t0, "sum": t2 - t0,
            "bwd_in": marks["bwd_in"] - t0, "bwd_out": marks["bwd_out"] - t0, "grad": t3 - t0}


res = medians_by_check(one_call, warmup=200)
print(json.dumps(res, indent=1))
# The same through torch.profiler, for the kernels and the threads.
from torch.profiler import ProfilerActivity, profile  # noqa: E402
os.environ["SOFTDTW_CHECK_VALUES"] = "1"
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(20):
        torch.autograd.grad(softdtw.soft_dtw(x, y, 1.0).sum(), x)
    torch.cuda.synchronize()
out = os.environ.get("OUT")
if out:
    prof.export_chrome_trace(str(Path(out, "api_timeline_trace.json")))
    Path(out, "api_timeline.json").write_text(json.dumps(res, indent=1) + "\n")
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
