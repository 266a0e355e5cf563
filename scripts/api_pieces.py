"""Inclusive host time of each piece of the public API's forward + backward for a tiny pair (B = 1, N = M = 16)
on the GPU: the pieces are wrapped with perf_counter timers (no profiler), µs per call, median over calls."""
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_api import medians_by_check, tiny_pair  # noqa: E402  (also puts src/ on the path)

import softdtw  # noqa: E402
from softdtw import _checks, _ops, functional  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import checks, compile as cmp, launch  # noqa: E402

acc = defaultdict(int)


def wrap(owner, name, label=None, static=False):
    fn = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    def w(*a, **k):
        t = time.perf_counter_ns()
        try:
            return fn(*a, **k)
        finally:
            acc[label] += time.perf_counter_ns() - t
    setattr(owner, name, staticmethod(w) if static else w)
    return w


prep = wrap(_checks, "prepare")
functional.prepare = prep
rc = wrap(_checks, "run_checked")
functional.run_checked = rc
wrap(_checks, "finish_check")
wrap(_checks, "make_window")
functional.make_window = _checks.make_window
wrap(_checks, "_check_or_defer")
wrap(_checks, "as_gamma")
wrap(_checks, "as_lengths")
wrap(checks, "start")
wrap(checks.PendingCheck, "ok", "PendingCheck.ok")
wrap(functional, "_run")
wrap(functional, "_finish")
wrap(_ops, "resolve_memory")
wrap(_ops, "fused_value")
wrap(_ops._Fused, "forward", "_Fused.forward", static=True)
wrap(_ops._Fused, "backward", "_Fused.backward", static=True)
wrap(be, "forward", "cuda.forward")
wrap(be, "backward", "cuda.backward")
wrap(be, "saved_spec", "cuda.saved_spec")
wrap(be, "_run_forward", "cuda._run_forward")
wrap(be, "_run_backward", "cuda._run_backward")
wrap(be, "_backward_outputs", "cuda._backward_outputs")
wrap(be, "_alloc", "cuda._alloc")
wrap(be, "_like", "cuda._like")
wrap(launch, "launch", "launch.launch")
wrap(launch, "plan_for", "launch.plan_for")
wrap(launch, "current_stream", "launch.current_stream")
wrap(cmp, "get_kernel", "compile.get_kernel")
cc = cmp.cuda_core()
wrap(cc, "launch", "cuda_core.launch")

x, y = tiny_pair()


def one_call():
    """ns spent in each wrapped piece during one forward + backward."""
    acc.clear()
    t0 = time.perf_counter_ns()
    v = softdtw.soft_dtw(x, y, 1.0)
    t1 = time.perf_counter_ns()
    torch.autograd.grad(v.sum(), x)
    t2 = time.perf_counter_ns()
    acc["[soft_dtw]"] = t1 - t0
    acc["[sum + autograd.grad]"] = t2 - t1
    return dict(acc)


# The pieces, slowest first.
res = {check: dict(sorted(m.items(), key=lambda kv: -kv[1])) for check, m in medians_by_check(one_call).items()}
print(json.dumps(res, indent=1))
out = os.environ.get("OUT")
if out:
    Path(out, "api_pieces.json").write_text(json.dumps(res, indent=1) + "\n")
