"""torch.autograd.gradcheck (float64) through the ops, for x, y and gamma, on every CPU backend."""
import pytest
import torch
from torch.autograd import gradcheck

import softdtw
import softdtw.costs
from tests._helpers import case

BACKENDS = ["reference", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1", "cosine"])
def test_gradcheck_x_y_gamma(backend, cost):
    x, y = case(2, 6, 5, 2, seed=1, requires_grad=True)
    gamma = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b, g: softdtw.soft_dtw(a, b, g, cost=cost, backend=backend), (x, y, gamma))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_with_lengths_and_band(backend):
    x, y = case(3, 8, 7, 2, seed=2, requires_grad=True)
    gamma = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)

    def f(a, b, g):
        return softdtw.soft_dtw(a, b, g, bandwidth=1, x_lengths=[8, 5, 2], y_lengths=[4, 7, 7], backend=backend)

    assert gradcheck(f, (x, y, gamma))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_from_cost_and_divergence(backend):
    x, y = case(2, 5, 7, 3, seed=3, requires_grad=True)
    C = torch.rand(2, 5, 7, dtype=torch.float64, requires_grad=True)
    gamma = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda c, g: softdtw.soft_dtw_from_cost(c, g, backend=backend), (C, gamma))
    assert gradcheck(lambda a, b: softdtw.soft_dtw_divergence(a, b, 0.5, backend=backend), (x, y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_learnable_gamma_gets_the_documented_gradient(backend):
    """d sdtw / d gamma = (sdtw - <E, C>) / gamma (DESIGN.md)."""
    x, y = case(2, 9, 6, 2, seed=4)
    gamma = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    v = softdtw.soft_dtw(x, y, gamma, backend=backend)
    (dg,) = torch.autograd.grad(v.sum(), gamma)
    E = softdtw.soft_dtw_alignment(x, y, 0.4, backend=backend)
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y)
    expected = ((v.detach() - (E * C).sum((1, 2))) / 0.4).sum()
    assert torch.isclose(dg, expected, rtol=1e-9)
