"""Host time of one kernel launch through the driver directly (ctypes cuLaunchKernel, launch.DIRECT) and through
cuda-core's launch, on the same kernel and arguments (the tiny pair's forward_kernel), alternated in blocks; with
PyTorch's own allocation and a one-kernel op beside them. Prints and writes $OUT/launch_probe.json (issue 27)."""
import json
import os
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from softdtw.backends import cuda as be  # noqa: E402
from softdtw.backends.cuda import launch  # noqa: E402


def per_call_us(fn, n=200):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return dt / n * 1e6


x = torch.randn(1, 16, 1, device="cuda")
y = torch.randn(1, 16, 1, device="cuda")
xl = torch.full((1,), 16, device="cuda")
gamma = torch.tensor(0.1, device="cuda")
spec = be._seq("forward", 1, 16, 16, 1, torch.float32, 0, "sqeuclidean", False, False, False)
value = torch.empty(1, device="cuda")
args = (x.data_ptr(), y.data_ptr(), 0, gamma.data_ptr(), xl.data_ptr(), xl.data_ptr(), 0, value.data_ptr(), 0, 0,
        *spec.tail, *be._PLAIN_FWD)


def launch_with(direct):
    def f():
        launch.DIRECT = direct
        launch.launch("forward", spec.expr, 0, spec.grid, spec.block, args)
    return f


cases = {"direct (ctypes cuLaunchKernel)": launch_with(True), "cuda-core launch": launch_with(False),
         "torch.empty(1) on cuda": lambda: torch.empty(1, device="cuda"),
         "x.new_empty((1,))": lambda: x.new_empty((1,)),
         "torch.neg(value) (alloc + one kernel)": lambda: torch.neg(value)}
for f in cases.values():
    for _ in range(50):
        f()
res = {k: [] for k in cases}
for _ in range(30):
    for k, f in cases.items():
        res[k].append(per_call_us(f))
launch.DIRECT = True
out = {k: round(median(v), 2) for k, v in res.items()}
print(json.dumps(out, indent=1))
if os.environ.get("OUT"):
    Path(os.environ["OUT"], "launch_probe.json").write_text(json.dumps(out, indent=1) + "\n")
