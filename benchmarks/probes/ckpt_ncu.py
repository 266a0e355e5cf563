"""What the checkpointed backward's band kernel spends its steps on, beside store's backward: one training call of
each at B = 32, N = M = 2048, D = 64 (float32 GEMMs) after a warm-up, for Nsight Compute to profile the
backward_chain_kernel launches of the second round (one for store, one per row band for checkpoint). The backward
runs on autograd's own thread, outside any NVTX range pushed here, so the warm-up's launches are skipped by count:
one for store, two for checkpoint's two bands at the default shape. ``ROW_BANDS=k`` sets the checkpoint's bands.

    ncu --launch-skip 3 --launch-count 3 --kernel-name regex:backward_chain_kernel \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \\
        python3 benchmarks/probes/ckpt_ncu.py [B,N,D]
"""
import os
import sys

import torch

sys.path.insert(0, "src")
import softdtw  # noqa: E402
from softdtw.backends import cuda as be  # noqa: E402

B, N, D = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32,2048,64").split(","))
be.ROW_BANDS = int(os.environ.get("ROW_BANDS", be.ROW_BANDS))
x0 = torch.randn(B, N, D, device="cuda")
y0 = torch.randn(B, N, D, device="cuda")


def step(memory):
    x = x0.clone().requires_grad_(True)
    softdtw.soft_dtw(x, y0, 1.0, memory=memory).mean().backward()


for _ in range(2):  # the first round compiles and warms up
    for memory in ("store", "checkpoint"):
        step(memory)
    torch.cuda.synchronize()
print("done", B, N, D, "bands", be.ROW_BANDS)
