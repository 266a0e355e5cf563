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
    (16, 8192, 8192, True),     # 2 x 16 x 16 chunks x 4 warps = 2048 warps <= 132 x 16: 2.43 -> 2.21 ms (H200)
    (1, 8192, 8192, True),      # 2.17 -> 1.65
    (1, 65536, 65536, True),    # 17.5 -> 14.6
    (4, 16384, 16384, True),
    (64, 8192, 8192, False),    # the doubled launch would fill the GPU twice over: measured 15 % slower
    (16, 16384, 16384, False),  # halves at K = 8 against one end at K = 4: 6.79 -> 7.11 ms
    (32, 8192, 8192, False),    # the same: 3.35 -> 3.54
    (4, 65536, 65536, False),   # the same: 28.4 -> 28.8
    (1, 65536, 8192, True),     # K = 1 -> 2, both two-stage: 11.1 -> 5.5
    (1, 8192, 65536, True),     # K = 8 both: 9.36 -> 8.04
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
    """soft_dtw without a gradient at such a shape runs from both ends (the C++ launcher's plan is a two-ended one; the
    ops' kernels keep out of it) and equals the one-ended value; with a gradient too (its own two-ended plan)."""
    import softdtw
    from softdtw.backends.cuda import fastpath

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 4096, 1, device="cuda", generator=g)
    y = torch.randn(2, 4096, 1, device="cuda", generator=g)
    assert fastpath._plan(x, y, "sqeuclidean", "auto", None, False) is not False
    assert fastpath._plan(x, y, "sqeuclidean", "auto", None, False, op=True) is False
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


# --- the gradient from both ends (storing calls with a float gamma > 0) -------------------------------

@pytest.mark.parametrize("B,N,M,want", [
    (32, 512, 512, False),      # H200, kernels 0.293 -> 0.209 ms, but the host bounds the step and it lost
    (32, 767, 767, False),
    (32, 768, 768, True),       # kernels 0.600 -> 0.355 ms, the step 1.44-1.55x -> 1.40-1.48x the MSE step
    (64, 768, 768, True),
    (16, 1024, 1024, True),     # 0.858 -> 0.559
    (16, 2048, 2048, True),     # 1.72 -> 1.37
    (1, 8192, 8192, True),      # 6.95 -> 4.46
    (16, 128, 128, False),      # short pairs lose: 0.085 -> 0.126
    (64, 96, 96, False),
    (128, 64, 64, False),
    (1, 16, 16, False),
    (128, 512, 512, False),     # the doubled launch, 1024 warps: a training step 0.51 -> 0.53-0.71 ms
    (1024, 512, 512, False),
])
def test_applies_grad_to_long_pairs(h200_sms, B, N, M, want):
    assert te.applies_grad(B, N, M, 1, torch.float32, 0) is want


@pytest.mark.parametrize("B,N,M,want", [
    (1, 65536, 65536, True),    # H200, a forward + backward step 64.5 -> 51.7 ms (7.8 warps per SM)
    (1, 16384, 16384, True),    # 16.4 -> 11.5
    (4, 8192, 8192, True),      # 8.33 -> 5.95
    (32, 2048, 2048, True),     # 2.53 -> 2.29
    (2, 65536, 65536, False),   # 2048 warps, 15.5 per SM: 81.1 -> 93.2
    (16, 512, 512, False),      # pairs under CKPT_MIN_ROWS
    (32, 768, 768, False),      # the store bound (GRAD_MIN_ROWS) is lower; checkpoints keep theirs
    (16, 128, 128, False),      # short pairs
])
def test_applies_checkpointed_grad_to_long_pairs(h200_sms, B, N, M, want):
    assert te.applies_grad(B, N, M, 1, torch.float32, 0, "checkpoint") is want


def test_applies_grad_takes_only_store_and_checkpoint(h200_sms):
    assert not te.applies_grad(1, 8192, 8192, 1, torch.float32, 0, "none")
    assert not te.applies_grad(1, 8192, 8192, 1, torch.float32, 0, "auto")


def _one_ended(fn):
    """fn() with the two-ended paths off (and the launcher's learnt plans forgotten, before and after)."""
    from softdtw.backends.cuda import fastpath

    te.set_enabled(False)
    fastpath._PLANS.clear()
    fastpath._ENTRIES.clear()
    try:
        return fn()
    finally:
        te.set_enabled(True)
        fastpath._PLANS.clear()
        fastpath._ENTRIES.clear()


def _loss_grads(x, y, gamma, launcher, **kw):
    """Value and (dx, dy) of sum_b w_b soft_dtw(x, y)_b, the second call of the shape (the launcher takes it when on).
    The weights differ per pair (negative from the third pair on): the halves' backward runs with grad 1 and the grads
    kernel scales each pair's dx, dy by its own grad_b, which a plain sum would not check."""
    import softdtw
    from softdtw.backends.cuda import fastpath

    fastpath.set_enabled(launcher)
    try:
        for _ in range(2):
            xc, yc = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
            v = softdtw.soft_dtw(xc, yc, gamma, **kw)
        w = 1.3 - 0.7 * torch.arange(v.shape[0], dtype=v.dtype, device=v.device)
        dx, dy = torch.autograd.grad((w * v).sum(), (xc, yc))
    finally:
        fastpath.set_enabled(True)
    return v.detach(), dx, dy, _node_name(v.grad_fn)


def _node_name(fn) -> str:
    """An autograd node's name (the Python path's _Fused, applied through Function's base apply, has no name())."""
    try:
        return fn.name()
    except RuntimeError:
        return type(fn).__name__


GRAD_CASES = [  # B, N, M, D, cost, dtype, lengths (N <= M: a call runs as (y, x) where N > M, with M rows)
    (3, 1024, 1100, 2, "sqeuclidean", torch.float64, True),
    (2, 1200, 1300, 1, "l1", torch.float64, False),
    (4, 1024, 1030, 1, "sqeuclidean", torch.float32, True),
    (1, 4100, 4096, 3, "sqeuclidean", torch.float32, False),  # chained halves
]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,N,M,D,cost,dtype,lengths", GRAD_CASES)
def test_gradient_from_both_ends_matches_one_ended(B, N, M, D, cost, dtype, lengths):
    """soft_dtw with a float gamma and x, y needing gradients: through the Python path (its node _FusedTwoEnded) and
    the C++ launcher bitwise alike, and equal to the one-ended pass: float64 to 1e-11, float32 as close to float64's
    one-ended value and gradients as the one-ended float32 pass (2x, at least 1e-5)."""
    from softdtw.backends.cuda import fastpath

    fastpath.build()
    g = torch.Generator(device="cuda").manual_seed(N + M)
    x = torch.randn(B, N, D, device="cuda", dtype=torch.float64, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=torch.float64, generator=g)
    kw = {"cost": cost}
    if lengths:
        xl = torch.tensor([N, N // 2 + 3, 1, N // 3 + 1][:B], device="cuda")
        yl = torch.tensor([M, 1, M - 7, M // 2][:B], device="cuda")
        kw.update(x_lengths=xl, y_lengths=yl)
    slow = _loss_grads(x.to(dtype), y.to(dtype), 0.3, False, **kw)
    fast = _loss_grads(x.to(dtype), y.to(dtype), 0.3, True, **kw)
    assert "TwoEnded" in slow[3], slow[3]
    assert "CppNode" in fast[3], fast[3]
    for a, b in zip(fast[:3], slow[:3]):
        assert torch.equal(a, b), rel_err(a, b)
    one = _one_ended(lambda: _loss_grads(x.to(dtype), y.to(dtype), 0.3, False, **kw))
    assert "TwoEnded" not in one[3]
    if dtype == torch.float64:
        for a, b in zip(slow[:3], one[:3]):
            assert rel_err(a, b) <= 1e-11
    else:
        f64 = _one_ended(lambda: _loss_grads(x, y, 0.3, False, **kw))
        for a, b, c in zip(slow[:3], one[:3], f64[:3]):
            assert rel_err(a, c) <= max(2 * rel_err(b, c), 1e-5)


CKPT_CASES = [  # B, N, M, D, cost, dtype, lengths
    (3, 1024, 1100, 2, "sqeuclidean", torch.float64, True),
    (2, 1200, 1300, 1, "l1", torch.float64, False),
    (2, 4100, 4096, 3, "sqeuclidean", torch.float32, True),
]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,N,M,D,cost,dtype,lengths", CKPT_CASES)
def test_checkpointed_gradient_from_both_ends_matches_one_ended(B, N, M, D, cost, dtype, lengths):
    """memory="checkpoint" with x, y needing gradients: the halves keep checkpoints (node _FusedTwoEnded, the Python
    path with the launcher on or off), equal to the one-ended checkpointed pass (float64 to 1e-11; float32 as close to
    float64's as the one-ended float32 pass, 2x, at least 1e-5); create_graph=True's second derivative too."""
    g = torch.Generator(device="cuda").manual_seed(N + M + 1)
    x = torch.randn(B, N, D, device="cuda", dtype=torch.float64, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=torch.float64, generator=g)
    kw = {"cost": cost, "memory": "checkpoint"}
    if lengths:
        kw.update(x_lengths=torch.tensor([N, N // 2 + 3, 1][:B], device="cuda"),
                  y_lengths=torch.tensor([M, 1, M - 7][:B], device="cuda"))
    two = _loss_grads(x.to(dtype), y.to(dtype), 0.3, True, **kw)
    assert "TwoEnded" in two[3], two[3]
    assert torch.equal(_loss_grads(x.to(dtype), y.to(dtype), 0.3, False, **kw)[1], two[1])
    one = _one_ended(lambda: _loss_grads(x.to(dtype), y.to(dtype), 0.3, False, **kw))
    assert "TwoEnded" not in one[3]
    if dtype == torch.float64:
        for a, b in zip(two[:3], one[:3]):
            assert rel_err(a, b) <= 1e-11
        store = _loss_grads(x, y, 0.3, False, **{**kw, "memory": "store"})
        assert "TwoEnded" in store[3]
        for a, b in zip(two[:3], store[:3]):
            assert rel_err(a, b) <= 1e-11

        def second(fn_kw):
            import softdtw

            xc = x.clone().requires_grad_(True)
            v = softdtw.soft_dtw(xc, y, 0.3, **fn_kw)
            (dx,) = torch.autograd.grad(v.sum(), xc, create_graph=True)
            (ddx,) = torch.autograd.grad((dx ** 2).sum(), xc)
            return _node_name(v.grad_fn), dx.detach(), ddx

        if cost != "sqeuclidean":
            return
        name, dx2, ddx2 = second(kw)
        assert "TwoEnded" in name
        _, dx1, ddx1 = _one_ended(lambda: second(kw))
        assert rel_err(dx2, dx1) <= 1e-11 and rel_err(ddx2, ddx1) <= 1e-10
    else:
        f64 = _one_ended(lambda: _loss_grads(x, y, 0.3, False, **kw))
        for a, b, c in zip(two[:3], one[:3], f64[:3]):
            assert rel_err(a, c) <= max(2 * rel_err(b, c), 1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gradient_from_both_ends_edges():
    """Hard DTW, a tensor gamma and a band stay one-ended (memory="checkpoint" runs from both ends: the test above);
    create_graph=True takes the one-ended differentiable backward from both paths; the divergence's three terms run
    from both ends alike in both paths."""
    import softdtw
    from softdtw.backends.cuda import fastpath

    fastpath.build()
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(2, 1024, 1, device="cuda", dtype=torch.float64, generator=g)
    y = torch.randn(2, 1100, 1, device="cuda", dtype=torch.float64, generator=g)
    for gamma, kw in ((0.0, {}), (torch.tensor(0.3, device="cuda", dtype=torch.float64), {}), (0.3, {"bandwidth": 0.3}),
                      (0.0, {"memory": "checkpoint"})):
        v = softdtw.soft_dtw(x.clone().requires_grad_(True), y, gamma, **kw)
        assert "TwoEnded" not in _node_name(v.grad_fn)
    outs = {}
    for launcher in (True, False):
        fastpath.set_enabled(launcher)
        for _ in range(2):
            xc = x.clone().requires_grad_(True)
            v = softdtw.soft_dtw(xc, y, 0.3)
        (dx,) = torch.autograd.grad(v.sum(), xc, create_graph=True)
        (ddx,) = torch.autograd.grad((dx ** 2).sum(), xc)
        for _ in range(2):
            xd = x.clone().requires_grad_(True)
            d = softdtw.soft_dtw_divergence(xd, y, 0.3)
        (gd,) = torch.autograd.grad(d.sum(), xd)
        outs[launcher] = (v.detach(), dx.detach(), ddx, d.detach(), gd)
    fastpath.set_enabled(True)
    for a, b in zip(outs[True], outs[False]):
        assert torch.equal(a, b), rel_err(a, b)
