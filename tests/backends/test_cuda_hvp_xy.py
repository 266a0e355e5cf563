"""The cuda backend's ``hvp_xy``: the double backward of soft_dtw(x, y) with a fused cost (squared Euclidean, l1) formed
in the HVP kernel's cells (kernels/hvp_warp.cu, hvp_warp_xy_kernel; backends/cuda/hvp.py).

Checked against what the general path computes from hvp_cost's E and E-dot (C and C-dot built by torch, the
contractions by costs.cost_vjp / cost_vjp_jvp), in float64 to 1e-10 and float32 against that float64 result;
over N != M, D = 1..3, per-pair lengths, bands, gamma in {0 (hard), 1e-3, 0.1, 1, 10}, every (K, W) class of the
warp kernel (forced plans W = 2, 4 cross the warps' hand-over of dx), and where it does not run (pairs wider
than the warp kernel, K·D above HVPX_MAX_KD: None). End to end, a gradient penalty's gradient through
soft_dtw(backend="cuda") with hvp_xy on and off, and against the cpu backend.

Marked ``cuda``, skipped without a GPU:
``PYTHONPATH=src python3 -m pytest -m cuda tests/backends/test_cuda_hvp_xy.py``.
"""
from __future__ import annotations

import importlib

import pytest
import torch

import softdtw
from softdtw import costs
from softdtw._checks import make_window
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

F64 = torch.float64


def cuda_backend():
    return importlib.import_module("softdtw.backends.cuda")


def _problem(B, N, M, D, seed=0, lengths=False, band=None):
    """x, y and a direction (xd, yd), gamma_dot `(B,)`, lengths and the window, float64 on the GPU."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=F64).cumsum(1) * 0.3
    y = torch.randn(B, M, D, generator=g, dtype=F64).cumsum(1) * 0.3
    xd = torch.randn(B, N, D, generator=g, dtype=F64)
    yd = torch.randn(B, M, D, generator=g, dtype=F64)
    gd = torch.randn(B, generator=g, dtype=F64)
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    if lengths and B > 1:
        xl[1:] = torch.randint(max(1, N // 2), N + 1, (B - 1,), generator=g)
        yl[1:] = torch.randint(max(1, M // 2), M + 1, (B - 1,), generator=g)
    window = make_window(xl, yl, N, M, band, None)
    dev = "cuda"
    return ([t.to(dev) for t in (x, y, xd, yd, gd)], xl.to(dev), yl.to(dev),
            None if window is None else window.to(dev))


def _general(x, y, xd, yd, gd, gamma, xl, yl, window, cost="sqeuclidean"):
    """(s1, vgamma, vgamma_dot, dx, dy) as _ops._backward_backward's general path forms them from hvp_cost."""
    be = cuda_backend()
    C = costs.pairwise_cost(cost, x, y).contiguous()
    Cd = costs.cost_jvp(cost, x, y, xd, yd).contiguous()
    E, vg, Ed, vgd = be.hvp_cost(C, gamma, xl, yl, window, Cd, gd)
    s1 = (Cd * E).sum((1, 2))
    dx, dy = costs.cost_vjp(cost, x, y, Ed)
    hx, hy = costs.cost_vjp_jvp(cost, x, y, E, xd, yd)
    return s1, vg, vgd, dx + hx, dy + hy


def _fused(x, y, xd, yd, gd, gamma, xl, yl, window, cost="sqeuclidean"):
    out = cuda_backend().hvp_xy(cost, x, y, gamma, xl, yl, window, xd, yd, gd)
    assert out is not None, "hvp_xy declined a call it should take"
    for t in out:
        assert torch.isfinite(t).all(), "non-finite output of hvp_xy"
    return out


def _close(got, want, tol):
    names = ("s1", "vgamma", "vgamma_dot", "dx", "dy")
    for name, a, b in zip(names, got, want):
        assert a.shape == b.shape, name
        err = rel_err(a.double(), b.double())
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:.0e}"


CASES = [  # B, N, M, D, lengths, band
    (3, 17, 23, 1, False, None),
    (4, 40, 33, 2, True, None),
    (2, 33, 40, 3, True, None),
    (5, 64, 256, 1, True, None),      # K = 8 at one warp
    (3, 12, 7, 1, False, None),
    (4, 60, 70, 1, True, 9),          # a band
    (1, 1, 5, 1, False, None),
    (2, 9, 1, 2, False, None),
]


@pytest.mark.parametrize("B,N,M,D,lengths,band", CASES)
@pytest.mark.parametrize("gamma", [1.0, 0.1, 1e-3, 10.0, 0.0])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_matches_the_general_path_float64(B, N, M, D, lengths, band, gamma, cost):
    (x, y, xd, yd, gd), xl, yl, window = _problem(B, N, M, D, seed=B * N + M, lengths=lengths, band=band)
    g = torch.tensor(gamma, dtype=F64, device="cuda")
    want = _general(x, y, xd, yd, gd, g, xl, yl, window, cost)
    got = _fused(x, y, xd, yd, gd, g, xl, yl, window, cost)
    _close(got, want, 1e-10)
    for b in range(B):  # rows past the pair's length get zero
        assert (got[3][b, int(xl[b]):] == 0).all() and (got[4][b, int(yl[b]):] == 0).all()


@pytest.mark.parametrize("B,N,M,D,lengths,band", CASES[:6] + [(2, 50, 500, 1, False, None)])  # 500: K = 16
@pytest.mark.parametrize("gamma", [1.0, 0.1])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_float32_against_float64(B, N, M, D, lengths, band, gamma, cost):
    (x, y, xd, yd, gd), xl, yl, window = _problem(B, N, M, D, seed=7 + N, lengths=lengths, band=band)
    want = _general(x, y, xd, yd, gd, torch.tensor(gamma, dtype=F64, device="cuda"), xl, yl, window, cost)
    f = [t.float() for t in (x, y, xd, yd, gd)]
    got = _fused(*f, torch.tensor(gamma, device="cuda"), xl, yl, window, cost)
    assert all(t.dtype == torch.float32 for t in got)
    _close(got, want, 2e-3)


@pytest.mark.parametrize("plan", [(1, 4), (2, 4), (2, 2), (4, 2), (8, 1)])
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_every_warp_layout(plan, dtype):
    """Forced (K, W) layouts: W > 1 hands each row's dx from warp to warp through shared memory."""
    from softdtw.backends.cuda import hvp as _hvp

    (x, y, xd, yd, gd), xl, yl, window = _problem(3, 70, 128, 1, seed=3, lengths=True)
    g = torch.tensor(0.5, dtype=F64, device="cuda")
    want = _general(x, y, xd, yd, gd, g, xl, yl, window)
    saved, _hvp.force_plan = _hvp.force_plan, plan
    try:
        assert _hvp.hvp_xy_plan(3, 70, 128, 1, dtype) == plan
        got = _fused(*[t.to(dtype) for t in (x, y, xd, yd, gd)], g.to(dtype), xl, yl, window)
    finally:
        _hvp.force_plan = saved
    _close(got, want, 1e-10 if dtype == F64 else 2e-3)


@pytest.mark.parametrize("B,N,M,D,lengths,band,plan", [(3, 40, 33, 2, True, None, None), (4, 60, 70, 1, True, 9, None),
                                                       (5, 64, 256, 1, True, None, None), (3, 70, 128, 1, True, None, (2, 4)),
                                                       (2, 33, 40, 3, False, None, (1, 2))])
@pytest.mark.parametrize("gamma", [1.0, 1e-3, 0.0])
@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_without_gamma_terms(B, N, M, D, lengths, band, plan, gamma, dtype, cost):
    """gamma_terms=False (the kernel's VG = false: a constant gamma) gives s1, dx, dy as gamma_terms=True with
    gamma_dot = 0, and None for vgamma, vgamma_dot; gamma_dot is ignored."""
    from softdtw.backends.cuda import hvp as _hvp

    (x, y, xd, yd, gd), xl, yl, window = _problem(B, N, M, D, seed=N + 5 * M, lengths=lengths, band=band)
    x, y, xd, yd, gd = (t.to(dtype) for t in (x, y, xd, yd, gd))
    g = torch.tensor(gamma, dtype=dtype, device="cuda")
    be = cuda_backend()
    saved, _hvp.force_plan = _hvp.force_plan, plan
    try:
        want = be.hvp_xy(cost, x, y, g, xl, yl, window, xd, yd, torch.zeros_like(gd))
        got = be.hvp_xy(cost, x, y, g, xl, yl, window, xd, yd, gd, gamma_terms=False)
    finally:
        _hvp.force_plan = saved
    assert got[1] is None and got[2] is None
    tol = 1e-12 if dtype == F64 else 1e-5
    for name, i in (("s1", 0), ("dx", 3), ("dy", 4)):
        assert torch.isfinite(got[i]).all(), name
        err = rel_err(got[i].double(), want[i].double())
        assert err <= tol, f"{name}: {err:.2e}"


def test_gamma_terms_follow_the_graph(monkeypatch):
    """The double backward asks for the gamma terms only where gamma is in the graph; the gradients in x and y agree
    either way, and a learnable gamma still gets its second-order gradient (against the cpu backend)."""
    be = cuda_backend()
    seen = []
    real = be.hvp_xy

    def spy(*args, **kw):
        seen.append(kw.get("gamma_terms", True))
        return real(*args, **kw)

    monkeypatch.setattr(be, "hvp_xy", spy)
    g = torch.Generator().manual_seed(21)
    x0 = torch.randn(4, 30, 2, generator=g, dtype=F64)
    y0 = torch.randn(4, 25, 2, generator=g, dtype=F64)
    const = _penalty_grads("cuda", x0.cuda(), y0.cuda(), 0.4)
    assert seen == [False]

    def with_gamma(backend, dev):
        x = x0.to(dev).requires_grad_(True)
        y = y0.to(dev).requires_grad_(True)
        gam = torch.tensor(0.4, dtype=F64, device=dev, requires_grad=True)
        v = softdtw.soft_dtw(x, y, gamma=gam, backend=backend)
        (gx,) = torch.autograd.grad(v.sum(), x, create_graph=True)
        return torch.autograd.grad(v.sum() + gx.square().sum(), (x, y, gam))

    learn = with_gamma("cuda", "cuda")
    assert seen == [False, True]
    cpu = with_gamma("cpu", "cpu")
    for a, b in zip(const, learn[:2]):
        assert rel_err(a, b) < 1e-12
    for a, b in zip(learn, cpu):
        assert rel_err(a.cpu(), b) < 1e-9


def test_float64_plan_takes_more_warps_than_hvp_cost():
    """hvp_xy's float64 layouts give a pair at least as many warps as hvp_cost's (HVPX_PAIRS_PER_SM: its float64
    chain, not a cost ring, bounds it), and agree with the general path there."""
    from softdtw.backends.cuda import hvp as _hvp

    for B in (64, 512, 1024, 2048):
        xy, cost = _hvp.hvp_xy_plan(B, 256, 256, 1, F64), _hvp._warp_plan(B, 256, F64)
        assert xy[1] >= cost[1] and 32 * xy[0] * xy[1] >= 256
    (x, y, xd, yd, gd), xl, yl, window = _problem(600, 40, 256, 1, seed=9, lengths=True)
    g = torch.tensor(0.7, dtype=F64, device="cuda")
    _close(_fused(x, y, xd, yd, gd, g, xl, yl, window), _general(x, y, xd, yd, gd, g, xl, yl, window), 1e-10)


def test_declines_what_it_does_not_run():
    be = cuda_backend()
    (x, y, xd, yd, gd), xl, yl, _ = _problem(2, 20, 600, 1)  # wider than the warp kernel (float64: 256)
    g = torch.tensor(1.0, dtype=F64, device="cuda")
    assert be.hvp_xy("sqeuclidean", x, y, g, xl, yl, None, xd, yd, gd) is None
    from softdtw.backends.cuda import hvp as _hvp

    (x, y, xd, yd, gd), xl, yl, _ = _problem(2, 20, 256, 4)
    saved, _hvp.force_plan = _hvp.force_plan, (8, 1)  # K = 8 times D = 4 features: too many registers
    try:
        assert be.hvp_xy("sqeuclidean", x, y, g, xl, yl, None, xd, yd, gd) is None
    finally:
        _hvp.force_plan = saved
    (x, y, xd, yd, gd), xl, yl, _ = _problem(2, 20, 30, 1)
    assert be.hvp_xy("cosine", x, y, g, xl, yl, None, xd, yd, gd) is None


def _penalty_grads(backend, x0, y0, gamma, cost="sqeuclidean", **kw):
    """Gradient of soft_dtw + |d soft_dtw / dx|² in x and y (the gradient-penalty case of issue 24)."""
    x = x0.clone().requires_grad_(True)
    y = y0.clone().requires_grad_(True)
    v = softdtw.soft_dtw(x, y, gamma=gamma, backend=backend, cost=cost, **kw)
    (gx,) = torch.autograd.grad(v.sum(), x, create_graph=True)
    loss = v.sum() + gx.square().sum()
    return torch.autograd.grad(loss, (x, y))


@pytest.mark.parametrize("D", [1, 2])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_gradient_penalty_on_and_off_and_cpu(D, cost):
    be = cuda_backend()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 48, D, generator=g, dtype=F64)
    y = torch.randn(6, 40, D, generator=g, dtype=F64)
    on = _penalty_grads("cuda", x.cuda(), y.cuda(), 0.3, cost)
    saved, be.HVP_XY = be.HVP_XY, False
    try:
        off = _penalty_grads("cuda", x.cuda(), y.cuda(), 0.3, cost)
    finally:
        be.HVP_XY = saved
    cpu = _penalty_grads("cpu", x, y, 0.3, cost)
    for a, b, c in zip(on, off, cpu):
        assert rel_err(a, b) < 1e-10
        assert rel_err(a.cpu(), c) < 1e-9


def test_gradient_penalty_with_lengths_float32():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 64, 1, generator=g, dtype=F64)
    y = torch.randn(5, 50, 1, generator=g, dtype=F64)
    xl = torch.tensor([64, 30, 41, 64, 7])
    yl = torch.tensor([50, 50, 22, 9, 31])
    kw = dict(x_lengths=xl, y_lengths=yl)
    want = _penalty_grads("cpu", x, y, 0.5, **kw)
    got = _penalty_grads("cuda", x.float().cuda(), y.float().cuda(), 0.5, x_lengths=xl.cuda(), y_lengths=yl.cuda())
    for a, b in zip(got, want):
        assert rel_err(a.double().cpu(), b) < 2e-3


def test_eager_double_backward_takes_it_for_parameters_too(monkeypatch):
    """The eager double backward runs hvp_xy for plain tensors and nn.Parameter alike (traced graphs and functorch
    transforms take the hvp_cost op instead: test_cuda_integration's opcheck)."""
    be = cuda_backend()
    taken = []
    real = be.hvp_xy

    def counting(*args, **kw):
        out = real(*args, **kw)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(be, "hvp_xy", counting)
    g = torch.Generator().manual_seed(2)
    x = torch.nn.Parameter(torch.randn(3, 20, 1, generator=g, dtype=F64).cuda())
    y = torch.randn(3, 25, 1, generator=g, dtype=F64).cuda()
    v = softdtw.soft_dtw(x, y, gamma=0.5)
    (gx,) = torch.autograd.grad(v.sum(), x, create_graph=True)
    gx.square().sum().backward()
    assert taken == [True]
    assert torch.isfinite(x.grad).all()


# --- DILATE through one kernel (hvp.dilate_xy, dilate._DilateXY) -------------------------------------------------

def _dilate(x0, y0, gamma, fused, monkeypatch=None, **kw):
    """Loss, dx, dy (and dgamma for a tensor gamma) of dilate_loss(...).sum() on the cuda backend, through
    dilate_xy or (fused False) the general path (C, a value-only forward, hvp_cost along Omega)."""
    import softdtw.dilate as dil

    saved = dil._dilate_xy
    if not fused:
        dil._dilate_xy = lambda *a: None
    try:
        x = x0.clone().requires_grad_(True)
        y = y0.clone().requires_grad_(True)
        g = gamma.clone().requires_grad_(True) if isinstance(gamma, torch.Tensor) else gamma
        loss = softdtw.dilate_loss(x, y, backend="cuda", gamma=g, **kw)
        wrt = (x, y) + ((g,) if isinstance(g, torch.Tensor) else ())
        grads = torch.autograd.grad(loss.sum(), wrt)
    finally:
        dil._dilate_xy = saved
    return (loss,) + grads


@pytest.mark.parametrize("B,N,M,D", [(4, 30, 26, 1), (3, 64, 256, 1), (2, 40, 33, 2), (5, 12, 7, 3), (2, 50, 70, 1)])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("alpha,gamma", [(0.5, 0.01), (0.2, 1.0), (1.0, 0.1), (0.0, 0.1), (0.5, 0.0)])
def test_dilate_xy_matches_the_general_path(B, N, M, D, cost, alpha, gamma):
    g = torch.Generator().manual_seed(B + N + M)
    x = torch.randn(B, N, D, generator=g, dtype=F64).cumsum(1).mul(0.2).cuda()
    y = torch.randn(B, M, D, generator=g, dtype=F64).cumsum(1).mul(0.2).cuda()
    gam = torch.tensor(gamma, dtype=F64, device="cuda")
    want = _dilate(x, y, gam, False, alpha=alpha, cost=cost)
    got = _dilate(x, y, gam, True, alpha=alpha, cost=cost)
    for a, b in zip(got, want):
        assert rel_err(a, b) < 1e-10 or (b.abs().max() == 0 and a.abs().max() < 1e-12)


def test_dilate_xy_with_lengths_and_float32():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, 48, 1, generator=g, dtype=F64).cuda()
    y = torch.randn(5, 40, 1, generator=g, dtype=F64).cuda()
    kw = dict(alpha=0.5, x_lengths=torch.tensor([48, 20, 33, 48, 5]), y_lengths=torch.tensor([40, 40, 11, 7, 30]))
    want = _dilate(x, y, 0.05, False, **kw)
    got64 = _dilate(x, y, 0.05, True, **kw)
    got32 = _dilate(x.float(), y.float(), 0.05, True, **kw)
    for a, b, c in zip(got64, got32, want):
        assert rel_err(a, c) < 1e-10
        assert rel_err(b, c) < 2e-3


def test_dilate_xy_is_taken_and_declines(monkeypatch):
    """The default call takes dilate_xy; Omega, a band, the divergence or return_terms take the general path."""
    from softdtw.backends.cuda import hvp as _hvp

    calls = []
    real = _hvp.dilate_xy
    monkeypatch.setattr(_hvp, "dilate_xy", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(3, 20, 1, device="cuda", requires_grad=True)
    y = torch.randn(3, 24, 1, device="cuda")
    softdtw.dilate_loss(x, y, gamma=0.1, backend="cuda").sum().backward()
    assert len(calls) == 1
    for kw in (dict(omega=torch.rand(20, 24, device="cuda")), dict(bandwidth=5), dict(divergence=True),
               dict(return_terms=True)):
        out = softdtw.dilate_loss(x, y, gamma=0.1, backend="cuda", **kw)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    assert len(calls) == 1
