"""The cuda backend's launch choices that need no GPU (backends/cuda/launch.py's pure functions): runs everywhere.
What the kernels do with them is tested on a GPU (test_cuda.py)."""
from __future__ import annotations

import torch

from softdtw.backends.cuda import launch as lm


def test_split_links_for_float32_layouts_of_k_at_least_4_without_a_band():
    """launch.split_links: the two-stage storing soft-min for float32 layouts of K >= 4 without a band, whatever the
    batch and whether chained (measured faster in each: OPTIMIZATION_LOG.md, "The open split everywhere"); not K < 4,
    a band or float64. What it picks is in the kernel's name."""
    P = lm.Plan
    assert lm.split_links(torch.float32, P(4, 4, 1), False)           # 32 x 512²
    assert lm.split_links(torch.float32, P(4, 2, 1), False)           # 1024 x 256²
    assert lm.split_links(torch.float32, P(4, 4, 8, True), False)     # chained, a fused cost or not
    assert lm.split_links(torch.float32, P(8, 8, 1), False)           # 16 x 2048²'s halves
    assert lm.split_links(torch.float32, P(8, 1, 1), False)           # 4096 x 256², a full GPU
    assert lm.split_links(torch.float32, P(16, 2, 1), False)          # 1024 x 1024²
    assert not lm.split_links(torch.float32, P(2, 8, 1), False)       # K = 2
    assert not lm.split_links(torch.float32, P(4, 4, 1), True)        # a band
    assert not lm.split_links(torch.float64, P(4, 4, 1), False)
    expr = lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False, split=True)
    assert expr == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 0, true>"
    assert lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False,
                         var=4) == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 4>"
