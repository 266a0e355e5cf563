"""Time and peak memory of the public API at 2^18 steps (issue 4: "any N, M up to at least 2^18"): value-only
forward and forward + backward with memory="checkpoint", D = 1, fp32, gamma = 1.

    PYTHONPATH=src python3 benchmarks/probes/probe_2_18.py   (one JSON line per case; $OUT/h100_2_18.json if OUT is set)
"""
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import softdtw  # noqa: E402

N18 = 1 << 18
CASES = [  # (label, B, N, M, keyword arguments)
    ("2^18 x 2^18", 1, N18, N18, {}),
    ("2^16 x 2^18", 1, N18 // 4, N18, {}),
    ("2^18 x 2^16", 1, N18, N18 // 4, {}),
    ("2 pairs 2^18 x (2^18 - 100), band 128, lengths", 2, N18, N18 - 100,
     dict(bandwidth=128, x_lengths=[N18, N18 - 150], y_lengths=[N18 - 100, N18 - 177])),
]


def timed(fn, reps=2):
    fn()  # compile, warm up
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return best * 1e3, (torch.cuda.max_memory_allocated() - base) / 2**30


rows = []
for label, B, N, M, kw in CASES:
    g = torch.Generator(device="cuda").manual_seed(N + M)
    x = torch.randn(B, N, 1, device="cuda", generator=g)
    y = torch.randn(B, M, 1, device="cuda", generator=g) + 1.0
    kw = {k: (torch.tensor(v, device="cuda") if isinstance(v, list) else v) for k, v in kw.items()}

    def value_only():
        with torch.no_grad():
            softdtw.soft_dtw(x, y, 1.0, **kw)

    def fwd_bwd():
        xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
        softdtw.soft_dtw(xc, yc, 1.0, memory="checkpoint", **kw).sum().backward()

    for mode, fn in (("forward", value_only), ("forward_backward checkpoint", fwd_bwd)):
        ms, gib = timed(fn)
        r = {"case": label, "mode": mode, "B": B, "N": N, "M": M, "ms": round(ms, 2), "peak_gib": round(gib, 3),
             "gcups_full_table": round(B * N * M / (ms * 1e-3) / 1e9, 1)}
        rows.append(r)
        print(json.dumps(r), flush=True)
out = os.environ.get("OUT")
if out:
    Path(out, "h100_2_18.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                                       "git_sha": os.environ.get("SOFTDTW_GIT_SHA"), "rows": rows},
                                                      indent=1) + "\n")
