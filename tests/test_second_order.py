"""Second derivatives (issue 24): the backends' hvp_cost against the path oracle and finite differences,
gradgradcheck through the public functions, the gradient-penalty case against pure autograd, and every public
entry point with create_graph=True (matches the reference, or raises a clear error)."""
import importlib

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.autograd import gradgradcheck

import softdtw
import softdtw.costs
from softdtw import _ops
from softdtw._checks import make_window
from softdtw._windows import valid_cells
from softdtw.backends import get_backend
from softdtw.backends import reference as ref
from tests import _paths
from tests._helpers import capture_cuda_graph, case, rel_err

BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _device(backend):
    return "cuda" if backend == "cuda" else "cpu"


def _has_hvp(backend) -> bool:
    return getattr(get_backend(backend), "hvp_cost", None) is not None


def _need_hvp(backend):
    """Skip (checked at run time) while a backend has no hvp_cost: the test passes once it lands."""
    if not _has_hvp(backend):
        pytest.skip(f"the {backend} backend has no hvp_cost yet (issue 24)")


# --- the backend function against the oracle ----------------------------------------------------------

def _hvp(backend, C, gamma, xl, yl, window, Cdot, gdot):
    dev = _device(backend)
    to = (lambda t: None if t is None else t.to(dev))
    out = get_backend(backend).hvp_cost(to(C).contiguous(), torch.tensor(gamma, dtype=C.dtype, device=dev), to(xl),
                                        to(yl), to(window), to(Cdot).contiguous(), to(gdot))
    return [t.cpu() for t in out]


def _problem(B, N, M, n, m, seed, scale, band=None, inf_cells=()):
    g = torch.Generator().manual_seed(seed)
    C = scale * torch.rand(B, N, M, generator=g, dtype=torch.float64)
    for b, i, j in inf_cells:
        C[b, i, j] = float("inf")
    Cdot = torch.randn(B, N, M, generator=g, dtype=torch.float64)
    gdot = torch.randn(B, generator=g, dtype=torch.float64)
    xl, yl = torch.tensor(n), torch.tensor(m)
    window = make_window(xl, yl, N, M, band, None) if band is not None else None
    return C, Cdot, gdot, xl, yl, window


CASES = {  # (B, N, M, x_lengths, y_lengths, band, +inf cells)
    "square": (1, 4, 4, [4], [4], None, ()),
    "N != M, lengths": (2, 5, 4, [5, 3], [2, 4], None, ()),
    "band": (2, 5, 6, [5, 4], [6, 6], 1, ()),
    "inf cells": (2, 4, 5, [4, 4], [5, 3], None, ((0, 1, 1), (1, 2, 0))),
    "one row": (1, 1, 4, [1], [4], None, ()),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("name", list(CASES))
def test_hvp_cost_matches_the_path_oracle(backend, gamma, name):
    _need_hvp(backend)
    B, N, M, n, m, band, inf_cells = CASES[name]
    # gamma = 1e-3 on costs of size 1 makes every weight 0 or 1 (the oracle's own rounding then dominates)
    C, Cdot, gdot, xl, yl, window = _problem(B, N, M, n, m, 5, 0.01 if gamma < 0.01 else 1.0, band, inf_cells)
    E, vg, Ed, vgd = _hvp(backend, C, gamma, xl, yl, window, Cdot, gdot)
    valid = valid_cells(xl, yl, window, N, M)
    for b in range(B):
        nb, mb = n[b], m[b]
        allowed = valid[b, :nb, :mb] & torch.isfinite(C[b, :nb, :mb])
        _, Eo, dgo = _paths.oracle(C[b, :nb, :mb], gamma, allowed=allowed)
        Edo, vgdo = _paths.directional(C[b, :nb, :mb], gamma, Cdot[b, :nb, :mb], float(gdot[b]), allowed=allowed)
        assert torch.allclose(E[b, :nb, :mb], Eo, rtol=1e-9, atol=1e-12)
        assert torch.allclose(vg[b], dgo, rtol=1e-9, atol=1e-12)
        scale = float(Edo.abs().max()) + 1.0
        assert float((Ed[b, :nb, :mb] - Edo).abs().max()) <= 1e-8 * scale, (b, Ed[b], Edo)
        assert abs(float(vgd[b] - vgdo)) <= 1e-8 * (abs(float(vgdo)) + 1.0)
        outside = torch.ones(N, M, dtype=torch.bool)
        outside[:nb, :mb] = ~allowed
        assert E[b][outside].abs().sum() == 0 and Ed[b][outside].abs().sum() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_hvp_cost_at_gamma_zero_is_the_hard_path_with_zero_derivatives(backend):
    _need_hvp(backend)
    C, Cdot, gdot, xl, yl, window = _problem(2, 5, 4, [5, 3], [4, 4], 6, 1.0)
    E, vg, Ed, vgd = _hvp(backend, C, 0.0, xl, yl, window, Cdot, gdot)
    for b in range(2):
        _, Eo, _ = _paths.oracle(C[b, :xl[b], :yl[b]], 0.0)
        assert torch.equal(E[b, :xl[b], :yl[b]], Eo)
    assert vg.abs().sum() == 0 and Ed.abs().sum() == 0 and vgd.abs().sum() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_hvp_cost_of_a_pair_without_a_finite_path_is_zero(backend):
    _need_hvp(backend)
    C, Cdot, gdot, xl, yl, window = _problem(2, 3, 3, [3, 3], [3, 3], 7, 1.0, inf_cells=((0, 1, 0), (0, 1, 1),
                                                                                        (0, 1, 2)))
    E, vg, Ed, vgd = _hvp(backend, C, 0.5, xl, yl, window, Cdot, gdot)
    assert E[0].abs().sum() == 0 and Ed[0].abs().sum() == 0 and vg[0] == 0 and vgd[0] == 0
    assert E[1].abs().sum() > 0 and torch.isfinite(Ed).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gamma", [0.05, 1.0])
def test_hvp_cost_matches_central_differences_of_backward_cost(backend, gamma):
    """Edot and vgamma_dot are the derivatives of backward_cost's (dC, dgamma) along (Cdot, gamma_dot)."""
    _need_hvp(backend)
    dev = _device(backend)
    C, Cdot, gdot, xl, yl, _ = _problem(3, 12, 15, [12, 9, 5], [15, 15, 11], 8, 1.0)
    window = make_window(xl, yl, 12, 15, 3, None)
    mod = get_backend(backend)
    to = (lambda t: t.to(dev))

    def first(t):
        Ct, gt = to(C + t * Cdot), torch.tensor(gamma + t * float(gdot[0]), dtype=torch.float64, device=dev)
        v, saved = mod.forward_cost(Ct, gt, to(xl), to(yl), to(window), "store")
        dC, dg = mod.backward_cost(torch.ones_like(v), Ct, gt, to(xl), to(yl), to(window), v, saved, "store")
        return dC.cpu(), dg.cpu()

    eps = 1e-5
    (Ep, gp), (Em, gm) = first(eps), first(-eps)
    gd = torch.full((3,), float(gdot[0]), dtype=torch.float64)  # one gamma for the whole batch
    E, vg, Ed, vgd = _hvp(backend, C, gamma, xl, yl, window, Cdot, gd)
    assert rel_err(Ed, (Ep - Em) / (2 * eps)) < 1e-6
    assert rel_err(vgd, (gp - gm) / (2 * eps)) < 1e-6


# --- properties ----------------------------------------------------------------------------------------

@st.composite
def _pairs(draw):
    B = draw(st.integers(1, 2))
    N, M = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    n = [draw(st.integers(1, N)) for _ in range(B)]
    m = [draw(st.integers(1, M)) for _ in range(B)]
    band = draw(st.sampled_from([None, 0, 1, 2.5]))
    gamma = draw(st.sampled_from([0.05, 0.3, 1.0, 4.0]))
    seed = draw(st.integers(0, 2**16))
    return B, N, M, n, m, band, gamma, seed


@settings(max_examples=30, deadline=None)
@given(_pairs())
def test_hessian_is_symmetric_and_linear_in_the_direction(args):
    B, N, M, n, m, band, gamma, seed = args
    C, U, gu, xl, yl, window = _problem(B, N, M, n, m, seed, 1.0, band)
    _, V, gv, _, _, _ = _problem(B, N, M, n, m, seed + 1, 1.0, band)
    _, _, Hu, hu = ref.hvp_cost(C, torch.tensor(gamma, dtype=torch.float64), xl, yl, window, U, gu)
    _, _, Hv, hv = ref.hvp_cost(C, torch.tensor(gamma, dtype=torch.float64), xl, yl, window, V, gv)
    valid = valid_cells(xl, yl, window, N, M)
    Um, Vm = U * valid, V * valid
    # <u, H v> = <v, H u>, gamma directions included
    a = (Um * Hv).sum((1, 2)) + gu * hv
    b = (Vm * Hu).sum((1, 2)) + gv * hu
    assert torch.allclose(a, b, rtol=1e-9, atol=1e-9)
    # linear in the direction
    _, _, Hw, hw = ref.hvp_cost(C, torch.tensor(gamma, dtype=torch.float64), xl, yl, window, 2 * U - 3 * V,
                                   2 * gu - 3 * gv)
    assert torch.allclose(Hw, 2 * Hu - 3 * Hv, rtol=1e-9, atol=1e-9)
    assert torch.allclose(hw, 2 * hu - 3 * hv, rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(_pairs())
def test_alignment_is_invariant_to_scaling_cost_and_gamma_together(args):
    """v(tC, t gamma) = t v(C, gamma), so E and dv/dgamma do not change along (C, gamma): Edot = 0."""
    B, N, M, n, m, band, gamma, seed = args
    C, _, _, xl, yl, window = _problem(B, N, M, n, m, seed, 1.0, band)
    E, vg, Ed, vgd = ref.hvp_cost(C, torch.tensor(gamma, dtype=torch.float64), xl, yl, window, C,
                                  torch.full((B,), gamma, dtype=torch.float64))
    assert Ed.abs().max() <= 1e-10 * (1 + E.abs().max() / gamma)
    assert vgd.abs().max() <= 1e-10 * (1 + vg.abs().max() / gamma)


# --- through the public functions ----------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 10.0])
def test_gradgradcheck_x_y_gamma(backend, gamma):
    _need_hvp(backend)
    dev = _device(backend)
    scale = 0.05 if gamma < 0.01 else 1.0  # keep the soft-min weights away from 0/1 at gamma = 1e-3
    x, y = case(2, 5, 4, 2, seed=11, device=dev)
    x, y = (scale * x).requires_grad_(), (scale * y).requires_grad_()
    g = torch.tensor(gamma, dtype=torch.float64, device=dev, requires_grad=True)

    def f(a, b, gg):
        return softdtw.soft_dtw(a, b, gg, bandwidth=2, x_lengths=[5, 3], y_lengths=[4, 4], backend=backend)

    assert gradgradcheck(f, (x, y, g), fast_mode=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradgradcheck_costs_from_cost_and_divergence(backend):
    _need_hvp(backend)
    dev = _device(backend)
    x, y = case(2, 4, 3, 2, seed=12, device=dev, requires_grad=True)
    g = torch.tensor(0.4, dtype=torch.float64, device=dev, requires_grad=True)
    for cost in ("l1", "cosine"):
        assert gradgradcheck(lambda a, b, gg: softdtw.soft_dtw(a, b, gg, cost=cost, backend=backend), (x, y, g),
                             fast_mode=True)
    C = torch.rand(2, 4, 5, dtype=torch.float64, device=dev, requires_grad=True)
    assert gradgradcheck(lambda c, gg: softdtw.soft_dtw_from_cost(c, gg, x_lengths=[4, 2], backend=backend), (C, g),
                         fast_mode=True)
    assert gradgradcheck(lambda a, b: softdtw.soft_dtw_divergence(a, b, 0.3, backend=backend), (x, y), fast_mode=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_hvp_matches_finite_differences_of_the_gradient(backend, memory):
    """The issue's case: x (2, 4, 2), y (2, 5, 2), gamma = 0.7 (32 % off before)."""
    _need_hvp(backend)
    if memory not in getattr(get_backend(backend), "MEMORY_MODES", ("store",)):
        pytest.skip(f"{backend} has no memory={memory!r}")
    dev = _device(backend)
    x, y = case(2, 4, 2, 2, seed=13, device=dev)
    y = case(2, 5, 2, 2, seed=14, device=dev)[1]
    v = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(dev)

    def grad(a, create_graph=False):
        a = a.detach().requires_grad_() if not create_graph else a
        (g,) = torch.autograd.grad(softdtw.soft_dtw(a, y, 0.7, memory=memory, backend=backend).sum(), a,
                                   create_graph=create_graph)
        return g

    xg = x.clone().requires_grad_()
    (Hv,) = torch.autograd.grad((grad(xg, True) * v).sum(), xg)
    eps = 1e-6
    fd = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    assert rel_err(Hv, fd) < 1e-6


def _pure_sdtw(x, y, gamma, cost="sqeuclidean", bandwidth=None, x_lengths=None, y_lengths=None):
    """The reference backend's forward run directly on tensors that require grad: plain torch ops, so autograd
    gives every order of derivative (the oracle for the ops layer's double backward)."""
    B, N, _ = x.shape
    M = y.shape[1]
    xl = torch.full((B,), N) if x_lengths is None else torch.as_tensor(x_lengths)
    yl = torch.full((B,), M) if y_lengths is None else torch.as_tensor(y_lengths)
    window = make_window(xl, yl, N, M, bandwidth, None)
    gamma = torch.as_tensor(gamma, dtype=torch.float64)
    C = softdtw.costs.pairwise_cost(cost, x.double().cpu(), y.double().cpu())
    return ref.forward_cost(C, gamma.cpu(), xl, yl, window, "store")[0]


def _pure_div(x, y, gamma, **kw):
    return _pure_sdtw(x, y, gamma, **kw) - 0.5 * _pure_sdtw(x, x, gamma) - 0.5 * _pure_sdtw(y, y, gamma)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_penalty_training_matches_pure_autograd(backend):
    """A few SGD steps of loss = sdtw(x, y) + lambda ||d sdtw / dx||^2 follow pure autograd's trajectory."""
    _need_hvp(backend)
    dev = _device(backend)
    x0, y = case(3, 6, 7, 2, seed=15)
    gamma = 0.5

    def run(fn, device):
        x = x0.clone().to(device).requires_grad_()
        yd = y.to(device)
        opt = torch.optim.SGD([x], lr=0.05)
        out = []
        for _ in range(4):
            v = fn(x, yd).sum()
            (gx,) = torch.autograd.grad(v, x, create_graph=True)
            loss = v + 0.3 * gx.pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(x.detach().cpu().clone())
        return out

    ours = run(lambda a, b: softdtw.soft_dtw(a, b, gamma, x_lengths=[6, 4, 5], backend=backend), dev)
    pure = run(lambda a, b: _pure_sdtw(a, b, gamma, x_lengths=[6, 4, 5]), "cpu")
    assert not torch.equal(pure[0], pure[-1])
    for a, b in zip(ours, pure):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-11)


# --- every public entry point with create_graph=True -------------------------------------------------------

W = torch.rand(2, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))


def _entry_points(backend):
    """(name, ours(x, y, gamma) -> (B,), pure(x, y, gamma) -> (B,), order, on_cpu_backend).

    order 2: the gradient is differentiable (a gradient penalty is checked); order 1: the gradient is already a
    second derivative (soft_dtw_alignment, DILATE), so create_graph=True must raise. on_cpu_backend: the entry
    point picks the backend by device (the compat modules), so it runs on the cpu backend for CPU tensors."""
    kw = dict(backend=backend)
    cc = softdtw.costs.pairwise_cost
    from softdtw.compat import maghoumi, pysdtw, sdtw_cuda_torch, tslearn

    def pure_align(x, y, g):
        C = cc("sqeuclidean", x.double().cpu(), y.double().cpu())
        v = ref.forward_cost(C, g.cpu(), torch.full((2,), 6), torch.full((2,), 5), None, "store")[0]
        (E,) = torch.autograd.grad(v.sum(), C, create_graph=True)
        return (E * W).sum((1, 2))

    def pure_dilate(x, y, g):
        C = cc("sqeuclidean", x.double().cpu(), y.double().cpu())
        v = ref.forward_cost(C, g.cpu(), torch.full((2,), 6), torch.full((2,), 5), None, "store")[0]
        (E,) = torch.autograd.grad(v.sum(), C, create_graph=True)
        i, j = torch.arange(6.0, dtype=torch.float64).view(6, 1), torch.arange(5.0, dtype=torch.float64).view(1, 5)
        return 0.3 * v + 0.7 * (E * ((i - j) / 6) ** 2).sum((1, 2))

    return [
        ("soft_dtw", lambda x, y, g: softdtw.soft_dtw(x, y, g, **kw), _pure_sdtw, 2, False),
        ("soft_dtw l1", lambda x, y, g: softdtw.soft_dtw(x, y, g, cost="l1", **kw),
         lambda x, y, g: _pure_sdtw(x, y, g, cost="l1"), 2, False),
        ("soft_dtw cosine", lambda x, y, g: softdtw.soft_dtw(x, y, g, cost="cosine", **kw),
         lambda x, y, g: _pure_sdtw(x, y, g, cost="cosine"), 2, False),
        ("soft_dtw band, lengths",
         lambda x, y, g: softdtw.soft_dtw(x, y, g, bandwidth=2, x_lengths=[6, 4], y_lengths=[5, 3], **kw),
         lambda x, y, g: _pure_sdtw(x, y, g, bandwidth=2, x_lengths=[6, 4], y_lengths=[5, 3]), 2, False),
        ("soft_dtw checkpoint", lambda x, y, g: softdtw.soft_dtw(x, y, g, memory="checkpoint", **kw)
         if "checkpoint" in getattr(get_backend(backend), "MEMORY_MODES", ()) else softdtw.soft_dtw(x, y, g, **kw),
         _pure_sdtw, 2, False),
        ("soft_dtw_divergence", lambda x, y, g: softdtw.soft_dtw_divergence(x, y, g, **kw), _pure_div, 2, False),
        ("soft_dtw_from_cost", lambda x, y, g: softdtw.soft_dtw_from_cost(cc("sqeuclidean", x, y), g, **kw),
         _pure_sdtw, 2, False),
        ("dtw", lambda x, y, g: softdtw.dtw(x, y, **kw), lambda x, y, g: _pure_sdtw(x, y, 0.0), 2, False),
        ("SoftDTW", lambda x, y, g: softdtw.SoftDTW(g, **kw)(x, y), _pure_sdtw, 2, False),
        ("SoftDTW normalize", lambda x, y, g: softdtw.SoftDTW(g, normalize=True, **kw)(x, y), _pure_div, 2, False),
        ("SoftDTWDivergence", lambda x, y, g: softdtw.SoftDTWDivergence(g, **kw)(x, y), _pure_div, 2, False),
        ("soft_dtw_alignment", lambda x, y, g: (softdtw.soft_dtw_alignment(x, y, g, **kw) * W.to(x.device)).sum((1, 2)),
         pure_align, 1, False),
        ("dilate_loss", lambda x, y, g: softdtw.dilate_loss(x, y, 0.3, g, **kw), pure_dilate, 1, False),
        ("DILATELoss", lambda x, y, g: softdtw.DILATELoss(0.3, g, **kw)(x, y), pure_dilate, 1, False),
        ("compat maghoumi", lambda x, y, g: maghoumi.SoftDTW(False, gamma=g)(x, y), _pure_sdtw, 2, True),
        ("compat pysdtw", lambda x, y, g: pysdtw.SoftDTW(gamma=g)(x, y), _pure_sdtw, 2, True),
        ("compat sdtw_cuda_torch", lambda x, y, g: sdtw_cuda_torch.SoftDTW(gamma=g, normalize=True)(x, y), _pure_div,
         2, True),
        ("compat tslearn", lambda x, y, g: tslearn.SoftDTWLossPyTorch(gamma=g)(x, y), _pure_sdtw, 2, True),
    ]


def _second(fn, x, y, g, order):
    """order 2: gradients of v + ||dv/dx||^2 + (dv/dgamma)^2 (a double backward); order 1: of v."""
    v = fn(x, y, g).sum()
    if order == 1:
        return [t.cpu() for t in torch.autograd.grad(v, (x, y, g))]
    gx, gg = torch.autograd.grad(v, (x, g), create_graph=True, allow_unused=True)
    pen = v + gx.pow(2).sum() + (0.0 if gg is None else gg.pow(2))
    out = torch.autograd.grad(pen, (x, y, g), allow_unused=True)
    return [torch.zeros_like(t).cpu() if o is None else o.cpu() for o, t in zip(out, (x, y, g))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_entry_point_with_create_graph_matches_or_raises(backend):
    dev = _device(backend)
    checked = []
    for name, ours, pure, order, by_device in _entry_points(backend):
        x, y = case(2, 6, 5, 2, seed=16)
        gamma = torch.tensor(0.0 if name == "dtw" else 0.7, dtype=torch.float64)
        xp, yp, gp = (t.clone().requires_grad_() for t in (x, y, gamma))
        expected = _second(pure, xp, yp, gp, order)
        xo, yo, go = (t.clone().to(dev).requires_grad_() for t in (x, y, gamma))
        runs_on = _device(backend) if by_device else backend
        if not _has_hvp(runs_on):
            with pytest.raises(NotImplementedError, match=f"{runs_on} backend"):
                _second(ours, xo, yo, go, order)
            checked.append((name, "raises"))
            continue
        got = _second(ours, xo, yo, go, order)
        for a, b, what in zip(got, expected, "x y gamma".split()):
            assert torch.allclose(a, b, rtol=1e-8, atol=1e-10), (name, what, rel_err(a, b))
        if order == 1:  # the gradient is itself a second derivative: no third
            xo, yo, go = (t.clone().to(dev).requires_grad_() for t in (x, y, gamma))
            with pytest.raises(NotImplementedError, match="(hvp_cost|dilate_loss)"):
                torch.autograd.grad(ours(xo, yo, go).sum(), xo, create_graph=True)
        checked.append((name, "matches"))
    assert len(checked) == len(_entry_points(backend))


def test_a_third_derivative_raises_and_names_hvp_cost():
    x, y = case(2, 4, 5, 2, seed=17)
    x.requires_grad_()
    (gx,) = torch.autograd.grad(softdtw.soft_dtw(x, y, 0.5, backend="reference").sum(), x, create_graph=True)
    with pytest.raises(NotImplementedError, match="softdtw::hvp_cost"):
        torch.autograd.grad(gx.pow(2).sum(), x, create_graph=True)


def test_a_backend_without_hvp_cost_refuses_create_graph(monkeypatch):
    """Never a gradient without its graph: a backend lacking hvp_cost raises at the first create_graph backward,
    naming the backend and the way around (backend='reference')."""
    mod = get_backend("reference")
    monkeypatch.delattr(mod, "hvp_cost")
    x, y = case(2, 4, 5, 2, seed=18)
    x.requires_grad_()
    v = softdtw.soft_dtw(x, y, 0.5, backend="reference").sum()
    with pytest.raises(NotImplementedError, match="reference backend.*backend='reference'"):
        torch.autograd.grad(v, x, create_graph=True)
    C = softdtw.costs.sqeuclidean(x, y)
    with pytest.raises(NotImplementedError, match="no hvp_cost"):
        torch.autograd.grad(softdtw.soft_dtw_from_cost(C, 0.5, backend="reference").sum(), x, create_graph=True)
    (g,) = torch.autograd.grad(softdtw.soft_dtw(x, y, 0.5, backend="reference").sum(), x)  # first order still works
    assert torch.isfinite(g).all()


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_backward_with_create_graph_builds_the_graph():
    """loss.backward(create_graph=True), the gradient-penalty idiom, leaves x.grad with its graph."""
    x, y = case(2, 6, 5, 2, seed=19)
    x.requires_grad_()
    softdtw.soft_dtw(x, y, 0.3, backend="reference").sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (h,) = torch.autograd.grad(x.grad.pow(2).sum(), x)
    xp = x.detach().clone().requires_grad_()
    (gp,) = torch.autograd.grad(_pure_sdtw(xp, y, 0.3).sum(), xp, create_graph=True)
    (hp,) = torch.autograd.grad(gp.pow(2).sum(), xp)
    assert torch.allclose(h, hp, rtol=1e-9, atol=1e-12)


def test_hard_dtw_second_derivative_is_the_cost_own():
    """gamma = 0: E is fixed (piecewise constant), so d/dx of dx is the cost's Hessian weighted by E."""
    x, y = case(1, 5, 4, 2, seed=20)
    x.requires_grad_()
    (gx,) = torch.autograd.grad(softdtw.dtw(x, y, backend="reference").sum(), x, create_graph=True)
    v = torch.randn_like(x)
    (Hv,) = torch.autograd.grad((gx * v).sum(), x)
    E = softdtw.soft_dtw_alignment(x.detach(), y, 0.0, backend="reference")
    assert torch.allclose(Hv, 2 * E.sum(2, keepdim=True) * v)  # sqeuclidean: d2/dx2 = 2 rowsum(E)


# --- the ops ---------------------------------------------------------------------------------------------

def _op_args(dtype=torch.float64):
    x, y = case(2, 5, 6, 2, dtype=dtype, seed=21)
    gamma = torch.tensor(0.5, dtype=dtype)
    xl, yl = torch.tensor([5, 3]), torch.tensor([6, 4])
    window = make_window(xl, yl, 5, 6, 2, None)
    return x, y, gamma, xl, yl, window


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_opcheck_hvp_cost(backend):
    _need_hvp(backend)
    x, y, gamma, xl, yl, window = _op_args()
    C = softdtw.costs.sqeuclidean(x, y)
    Cdot = torch.randn_like(C)
    gdot = torch.randn(2, dtype=torch.float64)
    torch.library.opcheck(_ops.hvp_cost, (C, gamma, xl, yl, window, Cdot, gdot, backend))
    torch.library.opcheck(_ops.hvp_cost, (C, gamma, xl, yl, None, Cdot, gdot, backend))


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_opcheck_backward_ops_with_gradients(backend):
    """The backward ops have their own autograd (the double backward): opcheck with inputs that require grad."""
    _need_hvp(backend)
    x, y, gamma, xl, yl, window = _op_args()
    value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", backend)
    grad = torch.rand(2, dtype=torch.float64)
    xr, yr, gr, gradr = (t.clone().requires_grad_() for t in (x, y, gamma, grad))
    torch.library.opcheck(_ops.backward, (gradr, xr, yr, gr, "sqeuclidean", xl, yl, window, value, saved, "store",
                                          backend))
    C = softdtw.costs.sqeuclidean(x, y)
    value, saved = _ops.forward_cost(C, gamma, xl, yl, window, "store", backend)
    torch.library.opcheck(_ops.backward_cost, (gradr, C.clone().requires_grad_(), gr, xl, yl, window, value, saved,
                                               "store", backend))


def test_gradgradcheck_through_the_ops_directly():
    """The custom-op path (the one torch.compile records) has the same double backward as the eager one."""
    x, y, gamma, xl, yl, window = _op_args()
    x.requires_grad_(), y.requires_grad_()
    g = gamma.clone().requires_grad_()
    assert gradgradcheck(lambda a, b, gg: _ops.forward(a, b, gg, "l1", xl, yl, window, "store", "reference")[0],
                         (x, y, g), fast_mode=True)
    C = softdtw.costs.sqeuclidean(x.detach(), y.detach()).requires_grad_()
    assert gradgradcheck(lambda c, gg: _ops.forward_cost(c, gg, xl, yl, window, "store", "reference")[0], (C, g),
                         fast_mode=True)


def test_module_reload_keeps_the_contract():
    """Every backend module either has hvp_cost with the contract's arity or none (then the ops raise); the
    alignment variants are keyword-only (SECOND_ORDER.md, "Variants")."""
    import inspect

    for name in ("reference", "cpu"):
        fn = getattr(importlib.import_module(f"softdtw.backends.{name}"), "hvp_cost", None)
        if fn is not None:
            params = inspect.signature(fn).parameters
            assert [n for n, p in params.items() if p.kind is not p.KEYWORD_ONLY] == [
                "C", "gamma", "x_lengths", "y_lengths", "window", "Cdot", "gamma_dot"]
            assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] in (
                [], ["open_begin", "open_end", "step_penalty", "penalty_dot"])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("what", ["penalty", "dilate"])
def test_cuda_graph_of_a_second_order_step(what):
    """A gradient-penalty step (create_graph, then the penalty's backward: hvp_cost) and a DILATE step,
    captured in a CUDA graph and replayed on new data, give the eager step's values and gradients."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 40, 1, generator=g).cuda().requires_grad_()
    y = torch.randn(4, 33, 1, generator=g).cuda()

    def step():
        if what == "penalty":
            v = softdtw.soft_dtw(x, y, 0.3).sum()
            (gx,) = torch.autograd.grad(v, x, create_graph=True)
            loss = v + gx.pow(2).sum()
        else:
            loss = softdtw.dilate_loss(x, y, alpha=0.5, gamma=0.1).sum()
        (dx,) = torch.autograd.grad(loss, x)
        return loss.detach(), dx

    graph, (loss_static, dx_static) = capture_cuda_graph(step)
    for seed in (5, 6):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x.copy_(torch.randn(4, 40, 1, generator=g).cuda())
            y.copy_(torch.randn(4, 33, 1, generator=g).cuda())
        graph.replay()
        loss, dx = step()
        assert torch.allclose(loss_static, loss, rtol=1e-6, atol=1e-6)
        assert torch.allclose(dx_static, dx, rtol=1e-5, atol=1e-6)


def test_torch_func_transforms_raise_a_clear_error():
    """torch.func's wrapped tensors have no storage for the kernels to read: every entry point says so and names
    the alternatives (it failed deep inside with 'Cannot access data pointer')."""
    from torch.func import grad, jvp, vmap

    x = torch.randn(2, 5, 1, dtype=torch.float64)
    y = torch.randn(2, 6, 1, dtype=torch.float64)
    C = torch.rand(2, 4, 4, dtype=torch.float64)
    calls = [
        lambda: grad(lambda a: softdtw.soft_dtw(a, y, 0.5).sum())(x),
        lambda: grad(lambda a: softdtw.soft_dtw(a, y, 0.5, backend="reference").sum())(x),
        lambda: vmap(lambda a, b: softdtw.soft_dtw(a, b, 0.5))(x, y),
        lambda: jvp(lambda a: softdtw.soft_dtw(a, y, 0.5), (x,), (torch.ones_like(x),)),
        lambda: grad(lambda c: softdtw.soft_dtw_from_cost(c, 0.5).sum())(C),
        lambda: grad(lambda a: softdtw.dilate_loss(a, y, 0.5).sum())(x),
        lambda: grad(lambda a: softdtw.pairwise_soft_dtw(a, gamma=0.5, progress=False).sum())(x),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="does not support torch.func transforms .* torch.autograd.grad"):
            call()


def test_functional_hvp_points_to_vhp():
    """torch.autograd.functional.hvp differentiates the double backward again (a third derivative here): the error
    names vhp, which gives the same product (the Hessian is symmetric)."""
    from torch.autograd.functional import hvp, vhp

    x = torch.randn(2, 5, 1, dtype=torch.float64)
    y = torch.randn(2, 6, 1, dtype=torch.float64)
    v = torch.randn_like(x)

    def f(a):
        return softdtw.soft_dtw(a, y, 0.3).sum()

    with pytest.raises(NotImplementedError, match="use torch.autograd.functional.vhp"):
        hvp(f, x, v)
    _, product = vhp(f, x, v)
    xr = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(xr), xr, create_graph=True)
    (want,) = torch.autograd.grad((g * v).sum(), xr)
    assert torch.allclose(product, want, rtol=1e-12, atol=1e-12)
