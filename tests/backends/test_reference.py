"""The oracle itself: against tslearn, brute force over all paths, and its own autograd."""
import math

import pytest
import torch
from tslearn.metrics import dtw as ts_dtw
from tslearn.metrics import dtw_path as ts_dtw_path
from tslearn.metrics import soft_dtw as ts_soft_dtw
from tslearn.metrics import soft_dtw_alignment as ts_alignment

from softdtw import costs
from softdtw._windows import build_window
from softdtw.backends import reference as ref
from tests._helpers import case, rel_err


def _problem(N, M, D, r=None, s=None, seed=0):
    x, y = case(1, N, M, D, seed=seed)
    xl, yl = torch.tensor([N]), torch.tensor([M])
    return x, y, xl, yl, build_window(xl, yl, N, M, r, s)


def _constraint(r, s):
    kw = {}
    if r is not None:
        kw["sakoe_chiba_radius"] = r
    if s is not None:
        kw["itakura_max_slope"] = s
    return kw


@pytest.mark.parametrize("N,M,D,gamma,r,s", [
    (5, 7, 2, 1.0, None, None), (12, 12, 1, 0.1, None, None), (1, 6, 3, 1.0, None, None),
    (6, 1, 3, 1.0, None, None), (1, 1, 2, 0.5, None, None), (15, 11, 2, 1.0, 2, None),
    (12, 15, 3, 0.3, None, 2.0), (20, 20, 1, 1e-3, None, None), (9, 14, 2, 10.0, 1, None),
])
def test_value_and_alignment_match_tslearn(N, M, D, gamma, r, s):
    x, y, xl, yl, w = _problem(N, M, D, r, s)
    g = torch.tensor(gamma, dtype=torch.float64)
    value, R = ref.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    kw = _constraint(r, s)
    expected = ts_soft_dtw(x[0].numpy(), y[0].numpy(), gamma=gamma, **kw)
    assert abs(value.item() - expected) <= 1e-12 * abs(expected)
    E_ts, _ = ts_alignment(x[0].numpy(), y[0].numpy(), gamma=gamma, **kw)
    C = costs.pairwise_cost("sqeuclidean", x, y)
    E, _ = ref.backward_cost(torch.ones(1, dtype=torch.float64), C, g, xl, yl, w, value, R, "store")
    assert rel_err(E[0], torch.from_numpy(E_ts)) <= 1e-10


@pytest.mark.parametrize("N,M,r", [(8, 8, None), (9, 13, 1), (13, 6, None), (1, 5, None), (10, 10, 0)])
def test_hard_dtw_and_path_match_tslearn(N, M, r):
    x, y, xl, yl, w = _problem(N, M, 2, r)
    g = torch.tensor(0.0, dtype=torch.float64)
    value, R = ref.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    kw = _constraint(r, None)
    assert abs(value.item() - ts_dtw(x[0].numpy(), y[0].numpy(), **kw) ** 2) <= 1e-12 * value.item()
    C = costs.pairwise_cost("sqeuclidean", x, y)
    E, _ = ref.backward_cost(torch.ones(1, dtype=torch.float64), C, g, xl, yl, w, value, R, "store")
    path, _ = ts_dtw_path(x[0].numpy(), y[0].numpy(), **kw)
    assert torch.nonzero(E[0] > 0.5).tolist() == [list(p) for p in path]


def _all_paths(n, m):
    """Every monotone warping path from (0, 0) to (n-1, m-1), as lists of cells."""
    def walk(i, j):
        if (i, j) == (n - 1, m - 1):
            yield [(i, j)]
            return
        for di, dj in ((1, 1), (1, 0), (0, 1)):
            if i + di < n and j + dj < m:
                for rest in walk(i + di, j + dj):
                    yield [(i, j)] + rest
    return list(walk(0, 0))


@pytest.mark.parametrize("n,m,gamma", [(3, 4, 1.0), (4, 4, 0.3), (2, 5, 2.0), (4, 3, 0.05)])
def test_brute_force_over_all_paths(n, m, gamma):
    x, y, xl, yl, _ = _problem(n, m, 2, seed=n * 10 + m)
    C = costs.pairwise_cost("sqeuclidean", x, y)[0]
    path_costs = torch.stack([sum(C[i, j] for i, j in p) for p in _all_paths(n, m)])
    expected = -gamma * torch.logsumexp(-path_costs / gamma, 0)
    value, _ = ref.forward(x, y, torch.tensor(gamma, dtype=torch.float64), "sqeuclidean", xl, yl, None, "none")
    assert math.isclose(value.item(), expected.item(), rel_tol=1e-12)


@pytest.mark.parametrize("cost", ["sqeuclidean", "l1", "cosine"])
@pytest.mark.parametrize("gamma", [0.0, 0.1, 1.0])
def test_analytic_backward_equals_autograd(cost, gamma):
    B, N, M, D = 3, 9, 11, 2
    x, y = case(B, N, M, D, seed=7)
    xl, yl = torch.tensor([9, 5, 7]), torch.tensor([11, 11, 3])
    w = build_window(xl, yl, N, M, 2, None)
    g = torch.tensor(gamma, dtype=torch.float64)
    grad = torch.rand(B, dtype=torch.float64) + 0.5
    value, R = ref.forward(x, y, g, cost, xl, yl, w, "store")
    dx, dy, dg = ref.backward(grad, x, y, g, cost, xl, yl, w, value, R, "store")
    xa, ya = x.clone().requires_grad_(), y.clone().requires_grad_()
    ga = g.clone().requires_grad_()
    va, _ = ref.forward(xa, ya, ga, cost, xl, yl, w, "store")
    ax, ay, ag = torch.autograd.grad((va * grad).sum(), (xa, ya, ga), allow_unused=True)
    assert rel_err(dx, ax) <= 1e-10 and rel_err(dy, ay) <= 1e-10
    if gamma > 0:
        assert abs(dg.sum().item() - ag.item()) <= 1e-8 * max(1.0, abs(ag.item()))
    # Padded steps get no gradient.
    assert dx[1, 5:].abs().max() == 0 and dy[2, 3:].abs().max() == 0


def test_alignment_rows_are_probabilities_along_paths():
    x, y, xl, yl, _ = _problem(6, 8, 1)
    g = torch.tensor(0.5, dtype=torch.float64)
    value, R = ref.forward(x, y, g, "sqeuclidean", xl, yl, None, "store")
    C = costs.pairwise_cost("sqeuclidean", x, y)
    E, _ = ref.backward_cost(torch.ones(1, dtype=torch.float64), C, g, xl, yl, None, value, R, "store")
    assert E.min() >= 0 and E.max() <= 1 + 1e-12
    assert E[0, 0, 0] == pytest.approx(1.0) and E[0, -1, -1] == pytest.approx(1.0)
    # Every path visits every row and every column at least once.
    assert (E[0].sum(1) >= 1 - 1e-12).all() and (E[0].sum(0) >= 1 - 1e-12).all()
