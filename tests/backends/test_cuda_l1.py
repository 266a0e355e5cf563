"""The l1 cost of large D and its vector-Jacobian product (backends/cuda/l1.py, kernels/l1.cu).

The cost must equal the elementwise form sum_d |x_id - y_jd| (summed over d in ascending order) to the bit; the
gradients must equal autograd through that form: float64 to 1e-12, float32 to 1e-5 of the gradient's scale (the
kernel sums over j in another order). Ties x_id == y_jd (integer-valued data, zero padding) take sign 0, as torch
does. Shapes cover partial tiles (rows, columns not multiples of 64, D not a multiple of 16 or 32) and a band of
y's columns (a view whose batch stride is not M·D).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tests._helpers import rel_err

pytestmark = pytest.mark.cuda


def _l1():
    from softdtw.backends.cuda import l1

    return l1


def _elementwise(x, y):
    C = (x[:, :, None, 0] - y[:, None, :, 0]).abs()
    for d in range(1, x.shape[2]):
        C = C + (x[:, :, None, d] - y[:, None, :, d]).abs()
    return C


def _inputs(B, N, M, D, dtype, ties=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if ties:  # small integers: many x_id == y_jd
        x = torch.randint(-2, 3, (B, N, D), device="cuda", generator=g).to(dtype)
        y = torch.randint(-2, 3, (B, M, D), device="cuda", generator=g).to(dtype)
    else:
        x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
        y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    return x, y


SHAPES = [(1, 1, 1, 1), (2, 7, 5, 17), (3, 64, 64, 16), (2, 65, 129, 33), (4, 200, 70, 64), (1, 300, 17, 100)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,N,M,D", SHAPES)
def test_cost_equals_the_elementwise_form(B, N, M, D, dtype):
    x, y = _inputs(B, N, M, D, dtype)
    assert torch.equal(_l1().cost(x, y), _elementwise(x, y))


def test_cost_of_a_band_of_columns():
    x, y = _inputs(3, 70, 300, 20, torch.float32)
    band = y[:, 128:256]  # batch stride 300 * 20
    assert not band.is_contiguous()
    assert torch.equal(_l1().cost(x, band), _elementwise(x, band.contiguous()))


def _autograd_vjp(x, y, G):
    xr, yr = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    (_elementwise(xr, yr) * G).sum().backward()
    return xr.grad, yr.grad


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,N,M,D", SHAPES)
def test_vjp_equals_autograd(B, N, M, D, dtype, ties):
    x, y = _inputs(B, N, M, D, dtype, ties)
    G = torch.rand(B, N, M, device="cuda", dtype=dtype) - 0.3
    dx, dy = _l1().vjp(x, y, G)
    rx, ry = _autograd_vjp(x, y, G)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert rel_err(dx, rx) < tol and rel_err(dy, ry) < tol


def test_vjp_of_a_band_of_columns():
    x, y = _inputs(2, 90, 300, 40, torch.float64)
    band = y[:, 100:230]
    G = torch.randn(2, 90, 130, device="cuda", dtype=torch.float64)
    dx, dy = _l1().vjp(x, band, G)
    rx, ry = _autograd_vjp(x, band.contiguous(), G)
    assert rel_err(dx, rx) < 1e-12 and rel_err(dy, ry) < 1e-12


def test_vjp_of_ties_is_zero():
    """Every x_id equal to every y_jd (each feature constant along both series): every sign is 0, so both
    gradients are exactly 0 whatever G."""
    v = torch.randn(2, 1, 24, device="cuda")
    x, y = v.expand(2, 40, 24).contiguous(), v.expand(2, 33, 24).contiguous()
    dx, dy = _l1().vjp(x, y, torch.randn(2, 40, 33, device="cuda"))
    assert not dx.any() and not dy.any()


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), N=st.integers(1, 150), M=st.integers(1, 150), D=st.integers(1, 70),
       seed=st.integers(0, 2**31 - 1))
def test_vjp_is_linear_in_g_and_matches_autograd(B, N, M, D, seed):
    x, y = _inputs(B, N, M, D, torch.float64, seed=seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    G1 = torch.randn(B, N, M, device="cuda", dtype=torch.float64, generator=g)
    G2 = torch.randn(B, N, M, device="cuda", dtype=torch.float64, generator=g)
    l1 = _l1()
    dx1, dy1 = l1.vjp(x, y, G1)
    dx2, dy2 = l1.vjp(x, y, G2)
    dx, dy = l1.vjp(x, y, G1 + 2 * G2)
    assert rel_err(dx, dx1 + 2 * dx2) < 1e-12 and rel_err(dy, dy1 + 2 * dy2) < 1e-12
    rx, ry = _autograd_vjp(x, y, G1)
    assert rel_err(dx1, rx) < 1e-12 and rel_err(dy1, ry) < 1e-12
