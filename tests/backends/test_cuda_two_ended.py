"""The value-only forward from both ends (backends/cuda/two_ended.py, kernels/two_ended.cu).

Few long pairs run as 2B chained passes of about N / 2 rows, the top half of each pair's rows forward and the bottom
half reversed, and the value is a soft-min over the columns of their last rows. The choice (which calls take it) runs
everywhere; the values are checked on a GPU against the float64 reference (small shapes under forced chained layouts,
several chunks), against the one-ended pass at a shape the planner sends both ends, and through the public API.
Tolerances as in test_cuda.py: float32 values 1e-5, float64 1e-10.
"""
from __future__ import annotations

import pytest
import torch

from softdtw.backends.cuda import launch as lm
from softdtw.backends.cuda import two_ended as te
from tests._helpers import rel_err

@pytest.fixture
def h200_sms(monkeypatch):
    monkeypatch.setattr(lm, "sm_count", lambda index: 132)
    te._CACHE.clear()
    yield
    te._CACHE.clear()


# --- which calls run from both ends (pure Python: runs everywhere) ------------------------------------

@pytest.mark.parametrize("B,N,M,want", [
    (16, 8192, 8192, True),     # 2 x 16 x 16 chunks x 4 warps = 2048 warps <= 132 x 16: 2.94 -> 2.47 ms (H200)
    (1, 8192, 8192, True),      # 2.71 -> 1.72
    (1, 65536, 65536, True),    # 21.7 -> 15.0
    (4, 16384, 16384, True),
    (64, 8192, 8192, False),    # the doubled launch would fill the GPU twice over: measured 15 % slower
    (16, 16384, 16384, True),
    (16, 65536, 65536, False),
    (128, 2048, 2048, False),   # sequential plans
    (16, 128, 128, False),
    (1, 1, 70000, False),       # one row: nothing to halve
])
def test_applies_to_few_long_pairs(h200_sms, B, N, M, want):
    assert te.applies(B, N, M, 1, torch.float32, 0) is want


def test_switch_turns_it_off(h200_sms):
    te.set_enabled(False)
    try:
        assert not te.applies(16, 8192, 8192, 1, torch.float32, 0)
    finally:
        te.set_enabled(True)
    assert te.applies(16, 8192, 8192, 1, torch.float32, 0)


def test_the_fold_is_exact_on_small_tables():
    """The crossing formula itself, on the reference DP's rows (float64, CPU): value = smin_j (R[h-1, j] +
    smin(S[h, j], S[h, j+1])) with S from the reversed bottom half, for soft and hard DTW and odd and one-row n."""
    from softdtw.backends import reference as ref

    g = torch.Generator().manual_seed(3)
    for n, m, gamma in [(9, 7, 0.5), (8, 1, 0.1), (2, 5, 1.0), (17, 13, 0.0), (6, 6, 0.0)]:
        x = torch.randn(1, n, 2, generator=g, dtype=torch.float64)
        y = torch.randn(1, m, 2, generator=g, dtype=torch.float64)
        gam = torch.tensor(gamma, dtype=torch.float64)
        want = ref.forward(x, y, gam, "sqeuclidean", torch.tensor([n]), torch.tensor([m]), None, "none")[0]
        h = (n + 1) // 2
        top = torch.stack([ref.forward(x[:, :h], y[:, :j + 1], gam, "sqeuclidean", torch.tensor([h]),
                                       torch.tensor([j + 1]), None, "none")[0] for j in range(m)], dim=1)
        xr, yr = x[:, h:].flip(1), y.flip(1)
        S = torch.stack([ref.forward(xr, yr[:, :m - j], gam, "sqeuclidean", torch.tensor([n - h]),
                                     torch.tensor([m - j]), None, "none")[0] for j in range(m)], dim=1)
        S_next = torch.cat([S[:, 1:], torch.full((1, 1), float("inf"), dtype=torch.float64)], dim=1)
        if gamma == 0:
            got = (top + torch.minimum(S, S_next)).min()
        else:
            pair = -gamma * torch.logaddexp(-S / gamma, -S_next / gamma)
            got = -gamma * torch.logsumexp(-(top + pair) / gamma, dim=1)
        assert rel_err(got.reshape(1), want) <= 1e-13, (n, m, gamma)


# --- values on the GPU -----------------------------------------------------------------------------

CASES = [
    # B, N, M, D, cost, gamma, lengths, K, W (forced chained layout of the halves)
    (3, 301, 257, 1, "sqeuclidean", 0.5, True, 2, 1),
    (3, 300, 257, 3, "sqeuclidean", 0.01, True, 1, 2),
    (2, 2, 517, 1, "sqeuclidean", 1.0, False, 2, 1),
    (4, 129, 700, 2, "l1", 0.3, True, 4, 1),
    (3, 301, 257, 1, "sqeuclidean", 0.0, True, 2, 1),
    (2, 1000, 64, 1, "sqeuclidean", 1.0, True, 1, 1),
]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("B,N,M,D,cost,gamma,lengths,K,W", CASES)
def test_two_ended_matches_reference(dtype, B, N, M, D, cost, gamma, lengths, K, W):
    from tests.backends.test_cuda import TOL, _gamma, _problem
    from softdtw.backends import reference as ref

    x, y, xl, yl, _ = _problem(B, N, M, D, seed=N + M + K, lengths=lengths)
    if lengths and B > 2:
        xl[-1] = 1  # a one-row pair: its bottom half is a dummy row
        yl[-2] = 1
    want = ref.forward(x, y, _gamma(gamma, torch.float64), cost, xl, yl, None, "none")[0]
    with lm.forced_plan(K, W, chain=True):
        got = te.forward(x.to(dtype), y.to(dtype), _gamma(gamma, dtype), cost, xl, yl)
    assert got.dtype == dtype and got.shape == (B,)
    assert torch.isfinite(got).all()
    assert rel_err(got, want) <= TOL[dtype][0]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_planned_shape_matches_one_ended(dtype):
    """A shape the planner sends both ends (B = 2, N = M = 4096, lengths): the backend's value-only forward equals the
    one-ended pass (switched off) to 1e-12 in float64, and in float32 both are as close to the float64 value."""
    from softdtw.backends import cuda as be
    from tests.backends.test_cuda import _gamma, _problem

    x, y, xl, yl, _ = _problem(2, 4096, 4096, 1, seed=5, lengths=True)
    assert te.applies(2, 4096, 4096, 1, dtype, 0)
    g = _gamma(0.1, dtype)
    two = be.forward(x.to(dtype), y.to(dtype), g, "sqeuclidean", xl, yl, None, "none")[0]
    te.set_enabled(False)
    try:
        one = be.forward(x.to(dtype), y.to(dtype), g, "sqeuclidean", xl, yl, None, "none")[0]
        f64 = be.forward(x, y, _gamma(0.1, torch.float64), "sqeuclidean", xl, yl, None, "none")[0]
    finally:
        te.set_enabled(True)
    if dtype == torch.float64:
        assert rel_err(two, one) <= 1e-12
    else:
        assert rel_err(two, f64) <= max(2 * rel_err(one, f64), 1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_public_api_and_launcher_route():
    """soft_dtw without a gradient at such a shape runs from both ends (the C++ launcher keeps out of it: its plan is
    False) and equals the backend's value; with a gradient the launcher's one-ended store path is unchanged."""
    import softdtw
    from softdtw.backends.cuda import fastpath

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 4096, 1, device="cuda", generator=g)
    y = torch.randn(2, 4096, 1, device="cuda", generator=g)
    assert fastpath._plan(x, y, "sqeuclidean", "auto", None, False) is False
    with torch.no_grad():
        v = softdtw.soft_dtw(x, y, gamma=1.0)
    te.set_enabled(False)
    try:
        with torch.no_grad():
            v1 = softdtw.soft_dtw(x, y, gamma=1.0)
    finally:
        te.set_enabled(True)
    assert rel_err(v, v1) <= 1e-5
    xg = x.clone().requires_grad_(True)
    softdtw.soft_dtw(xg, y, gamma=1.0).sum().backward()
    assert torch.isfinite(xg.grad).all()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_replay():
    """The three launches capture in a CUDA graph; a replay on new data gives the new value."""
    from softdtw.backends import cuda as be

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(2, 4096, 1, device="cuda", generator=g)
    y = torch.randn(2, 4096, 1, device="cuda", generator=g)
    xl = torch.full((2,), 4096, device="cuda")
    gam = torch.tensor(1.0, device="cuda")
    be.forward(x, y, gam, "sqeuclidean", xl, xl, None, "none")  # compile first
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = be.forward(x, y, gam, "sqeuclidean", xl, xl, None, "none")[0]
    x.copy_(torch.randn(2, 4096, 1, device="cuda", generator=g))
    graph.replay()
    torch.cuda.synchronize()
    want = be.forward(x, y, gam, "sqeuclidean", xl, xl, None, "none")[0]
    assert rel_err(out, want) <= 1e-6
