"""float16 / bfloat16 inputs and torch.autocast: the DP runs in fp32, outputs come back in the input
dtype, and the error against float64 stays within 2x that of computing the cost in the low precision
with plain PyTorch (then running an exact DP on it), plus the rounding of the output to its dtype."""
import pytest
import torch

import softdtw
from softdtw import costs


def _devices():
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _truth(x64, y64, gamma, cost):
    return softdtw.soft_dtw(x64, y64, gamma, cost=cost, backend="reference")


def _plain_low_precision_error(x, y, gamma, cost, truth):
    """Error of the baseline: the cost in the low precision by plain PyTorch, the DP exact."""
    C = costs.pairwise_cost(cost, x, y)  # computed in x.dtype
    value = softdtw.soft_dtw_from_cost(C.double().cpu(), gamma, backend="reference")
    return (value - truth).abs().max().item()


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cost", ["sqeuclidean", "cosine"])
def test_half_inputs(device, dtype, cost):
    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(4, 48, 8, generator=g, dtype=torch.float64)
    y64 = torch.randn(4, 40, 8, generator=g, dtype=torch.float64)
    x, y = x64.to(device, dtype), y64.to(device, dtype)
    # The truth is the float64 soft-DTW of the inputs as the user holds them (already rounded).
    truth = _truth(x.double().cpu(), y.double().cpu(), 1.0, cost)
    value = softdtw.soft_dtw(x, y, 1.0, cost=cost)
    assert value.dtype == dtype and value.device.type == device
    err = (value.double().cpu() - truth).abs().max().item()
    baseline = _plain_low_precision_error(x, y, 1.0, cost, truth)
    # The output is rounded to its dtype: no result in that dtype can beat half an ulp of it.
    rounding = 0.5 * torch.finfo(dtype).eps * truth.abs().max().item()
    assert err <= 2 * baseline + rounding, (err, baseline, rounding)


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("cost", ["sqeuclidean", "cosine"])
@pytest.mark.parametrize("D", [16, 64])  # 64: the GEMM ("gram") form on CUDA, whose GEMMs stay in x's dtype
def test_autocast_keeps_the_dp_in_fp32_and_gradients_flow(device, cost, D):
    low = torch.bfloat16 if device == "cpu" else torch.float16
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, D, generator=g).to(device).requires_grad_()
    y = torch.randn(4, 36, D, generator=g).to(device)
    truth = _truth(x.detach().double().cpu(), y.double().cpu(), 0.5, cost)
    with torch.autocast(device_type=device, dtype=low):
        value = softdtw.soft_dtw(x, y, 0.5, cost=cost)
        with torch.no_grad():
            baseline = _plain_low_precision_error(x.detach(), y, 0.5, cost, truth)
    value.sum().backward()
    assert value.dtype == torch.float32  # the inputs' dtype
    assert torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    err = (value.detach().double().cpu() - truth).abs().max().item()
    assert err <= 2 * baseline + 1e-5 * truth.abs().max().item(), (err, baseline)
