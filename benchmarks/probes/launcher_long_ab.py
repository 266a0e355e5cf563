"""A/B of the long and large-D calls through the C++ launcher (issue 27): per shape, the synced training call (clone,
soft_dtw, mean, backward) or value-only call, median of 20 after warm-up, its summed kernel time (torch.profiler),
and whether the launcher took it (fastpath.call returned its value). Run once per tree, alternating, into one file.
The launcher is built before timing (fastpath.build), so both trees time what a training loop gets.

    python3 benchmarks/probes/launcher_long_ab.py SRC TAG OUT.jsonl     (SRC: the tree's src directory)
"""
import json
import sys

src, tag, out = sys.argv[1:4]
sys.path.insert(0, src)
sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import softdtw  # noqa: E402
from softdtw.backends.cuda import fastpath  # noqa: E402
from gpu import kernel_us, median_ms  # noqa: E402

assert softdtw.__file__.startswith(src), softdtw.__file__
fastpath.build()
taken = []
_call = fastpath.call


def _recorded(*args, **kwargs):
    value = _call(*args, **kwargs)
    taken.append(value is not None)
    return value


fastpath.call = _recorded  # functional.soft_dtw looks it up on the module at each call

SHAPES = [  # (B, N, D, memory, tf32, grad)
    (32, 2048, 64, "store", False, True),
    (32, 2048, 64, "store", True, True),
    (32, 2048, 64, "auto", False, True),
    (32, 2048, 64, "checkpoint", False, True),
    (16, 1024, 64, "store", False, True),
    (2, 2048, 1, "store", False, True),
    (4, 4096, 1, "store", False, True),
    (1, 16384, 1, "store", False, True),
    (16, 8192, 1, "auto", False, False),
]

for B, N, D, memory, tf32, grad in SHAPES:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    g = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(B, N, D, device="cuda", generator=g)
    y0 = torch.randn(B, N, D, device="cuda", generator=g)
    taken.clear()

    def step():
        if grad:
            x = x0.clone().requires_grad_(True)
            softdtw.soft_dtw(x, y0, 1.0, memory=memory).mean().backward()
        else:
            with torch.no_grad():
                softdtw.soft_dtw(x0, y0, 1.0, memory=memory)

    step()
    step()
    torch.cuda.synchronize()
    ms = median_ms(step, reps=20)
    ku = kernel_us(step, reps=3)
    r = {"tag": tag, "B": B, "N": N, "D": D, "memory": memory, "tf32": tf32, "grad": grad, "ms": round(ms, 3),
         "gpu_ms": round(sum(ku.values()) / 1e3, 3), "launcher": bool(taken and taken[-1]),
         "gcups": round(B * N * N / ms / 1e6, 1)}
    print(json.dumps(r), flush=True)
    with open(out, "a") as f:
        f.write(json.dumps(r) + "\n")
    torch.cuda.empty_cache()
torch.backends.cuda.matmul.allow_tf32 = False
