"""The host path of the cuda backend (issue 27): the driver-direct launch against cuda-core's, the kernels one
step launches, and prepare's cache of validated calls. Marked ``cuda``; skipped without a GPU."""
from __future__ import annotations

import pytest
import torch

import softdtw
from softdtw import _checks
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_a_small_step_launches_four_kernels_of_ours():
    """check (in front of the forward; it also measures the range bound's inputs), forward, the backward run ahead
    behind it (fastpath.AHEAD_MAX_CELLS) and the node's scale_grads_kernel: no fills, copies, norms or syncs besides
    them."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(4, 30, 2, device="cuda", requires_grad=True)
    y = torch.randn(4, 20, 2, device="cuda")
    for _ in range(2):
        softdtw.soft_dtw(x, y, 0.5).sum().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        softdtw.soft_dtw(x, y, 0.5).sum().backward()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ours = [n for n in names if "sdtw" in n]
    assert len(ours) == 4, names
    assert "check_kernel" in ours[0] and "forward_kernel" in ours[1] and "backward_kernel" in ours[2]
    assert "scale_grads_kernel" in ours[3]


def test_repeated_calls_through_the_prepared_cache_match_fresh_ones():
    """prepare keeps the validation of a call per (shapes, dtypes, devices, options, float gamma); the calls that
    reuse it (other data, gamma values and kinds, unbatched, half, non-contiguous inputs) must give what the CPU
    backend gives."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 21, 2, generator=g, dtype=torch.float64)
    y = torch.randn(6, 17, 2, generator=g, dtype=torch.float64)
    _checks._PREPARED.clear()
    cases = [dict(gamma=0.5), dict(gamma=0.5), dict(gamma=0.25), dict(gamma=1), dict(gamma=torch.tensor(0.7)),
             dict(gamma=0.5, bandwidth=3), dict(gamma=0.5, bandwidth=3), dict(gamma=0.5, cost="l1")]
    for kw in cases:
        for scale in (1.0, 2.0):  # new data under the same key
            xs, ys = x * scale, y * scale
            want = softdtw.soft_dtw(xs, ys, **kw)
            kc = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            got = softdtw.soft_dtw(xs.cuda(), ys.cuda(), **kc)
            assert rel_err(got, want) <= 1e-12, kw
    assert len(_checks._PREPARED) >= 4
    # unbatched, non-contiguous and half inputs through keys seen before
    for _ in range(2):
        got = softdtw.soft_dtw(x[0].cuda(), y[0].cuda(), 0.5)
        assert got.dim() == 0 and rel_err(got, softdtw.soft_dtw(x[0], y[0], 0.5)) <= 1e-12
        xt = x.transpose(0, 1).contiguous().transpose(0, 1)  # same shape, other strides
        assert rel_err(softdtw.soft_dtw(xt.cuda(), y.cuda(), 0.5), softdtw.soft_dtw(x, y, 0.5)) <= 1e-12
        got = softdtw.soft_dtw(x.half().cuda(), y.half().cuda(), 0.5)
        assert got.dtype == torch.float16
        assert rel_err(got, softdtw.soft_dtw(x.half().double(), y.half().double(), 0.5)) <= 2e-3


@pytest.mark.parametrize("wrt", [("x",), ("y",), ("x", "y"), ("x", "gamma"), ("x", "y", "gamma")])
def test_gradients_asked_for_are_right_whichever_are_skipped(wrt):
    """The backward writes the gradients nobody asked for into scratch buffers shared between calls; the ones
    asked for must match the float64 CPU backend, call after call, whatever the others were."""
    g = torch.Generator().manual_seed(len(wrt))
    for B, N, M, D in ((3, 20, 25, 2), (2, 40, 700, 1)):  # one chunk, several chunks
        x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
        y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
        gamma = torch.tensor(0.4, dtype=torch.float64)
        for _ in range(2):
            got, want = [], []
            for dev, out in (("cuda", got), ("cpu", want)):
                args = {"x": x.to(dev), "y": y.to(dev), "gamma": gamma.to(dev)}
                for k in wrt:
                    args[k] = args[k].clone().requires_grad_()
                v = softdtw.soft_dtw(args["x"], args["y"], args["gamma"])
                out.extend(torch.autograd.grad((v * torch.arange(1, B + 1, device=dev)).sum(),
                                               [args[k] for k in wrt]))
            for a, b in zip(got, want):
                assert rel_err(a, b) <= 1e-10, wrt
