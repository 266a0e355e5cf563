"""The cuda backend's launch choices that need no GPU (backends/cuda/launch.py's pure functions): runs everywhere.
What the kernels do with them is tested on a GPU (test_cuda.py)."""
from __future__ import annotations

import torch

from softdtw.backends.cuda import launch as lm


def test_split_links_for_float32_storing_passes_of_four_columns_a_lane():
    """launch.split_links: the two-stage storing soft-min for float32 layouts of K >= 4 without a band, whatever the
    batch (it costs soft()'s MUFU operations, so it gains where the MUFU pipe binds too), never for the chained
    forward of a fused cost; what it picks is in the kernel's name."""
    P = lm.Plan
    assert lm.split_links(torch.float32, P(4, 4, 1), False)                    # 32 x 512²
    assert lm.split_links(torch.float32, P(4, 2, 1), False)                    # 1024 x 256²: fills the GPU
    assert lm.split_links(torch.float32, P(8, 8, 1), False)
    assert lm.split_links(torch.float32, P(4, 4, 8, True), False)              # chained, precomputed cost
    assert not lm.split_links(torch.float32, P(4, 4, 4, True), False, fused_chain=True)
    assert not lm.split_links(torch.float32, P(2, 8, 1), False)                # K = 2
    assert not lm.split_links(torch.float32, P(4, 4, 1), True)                 # a band
    assert not lm.split_links(torch.float64, P(4, 4, 1), False)
    expr = lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False, split=True)
    assert expr == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 0, true>"
    assert lm.expression("forward_kernel", torch.float32, "sqeuclidean", 1, P(4, 4, 1), False, True, False,
                         var=4) == "sdtw::forward_kernel<float, 0, 1, 4, 4, false, true, false, 4>"
