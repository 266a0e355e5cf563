"""The cuda backend's launch choices that need no GPU (backends/cuda/launch.py's pure functions): runs everywhere.
What the kernels do with them is tested on a GPU (test_cuda.py)."""
from __future__ import annotations

import torch

from softdtw.backends.cuda import launch as lm


def test_split_links_at_k4_and_at_k8_while_the_batch_leaves_the_gpu_latency_bound(monkeypatch):
    """launch.split_links: the two-stage storing soft-min for float32 layouts without a band of K = 4 whatever the
    batch (it costs soft()'s MUFU operations: a gain where the MUFU pipe binds too), of K >= 8 while their warps fill
    at most a quarter of the GPU (unmeasured beyond), never for the chained forward of a fused cost nor K < 4; what it
    picks is in the kernel's name."""
    monkeypatch.setattr(lm, "sm_count", lambda index: 132)  # 132 x 16 / 4 = 528 warps
    P = lm.Plan
    assert lm.split_links(torch.float32, P(4, 4, 1), 32, False, 0)          # 32 x 512²: 128 warps
    assert lm.split_links(torch.float32, P(4, 2, 1), 1024, False, 0)        # 1024 x 256²: 2048, K = 4
    assert lm.split_links(torch.float32, P(4, 4, 8, True), 32, False, 0)    # chained K = 4: B·nch·W = 1024
    assert lm.split_links(torch.float32, P(8, 8, 1), 32, False, 0)          # 16 x 2048²'s halves: 256 warps
    assert not lm.split_links(torch.float32, P(8, 1, 1), 4096, False, 0)    # 4096 x 256²: K = 8, 4096 warps
    assert not lm.split_links(torch.float32, P(16, 2, 1), 1024, False, 0)   # 1024 x 1024²
    assert not lm.split_links(torch.float32, P(4, 4, 4, True), 16, False, 0, fused_chain=True)
    assert not lm.split_links(torch.float32, P(2, 8, 1), 32, False, 0)      # K = 2
    assert not lm.split_links(torch.float32, P(4, 4, 1), 32, True, 0)       # a band
    assert not lm.split_links(torch.float64, P(4, 4, 1), 32, False, 0)
    expr = lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False, split=True)
    assert expr == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 0, true>"
    assert lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False,
                         var=4) == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 4>"
