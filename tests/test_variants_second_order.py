"""Second order of the alignment variants (issues 24 and 25): open_begin, open_end and step_penalty in
hvp_cost (reference, cpu and cuda backends; cuda marked ``cuda``) and through the double backward of every public
entry point.

The oracle is soft-DTW as the soft-min over enumerated warping paths (tests/_paths.py) with float64 double
autograd: E, dv/dgamma, dv/dp and their derivatives along any direction (Cdot, gamma_dot, penalty_dot) are exact
there. Tiny sizes so that every pair's paths can be enumerated; larger sizes compare the cpu backend with the
reference backend (the oracle of the kernels) and check properties (Hessian symmetry).
"""
import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.autograd import gradcheck, gradgradcheck

import softdtw
import softdtw.costs
from softdtw import _ops
from softdtw.backends import cpu, get_backend
from softdtw.backends import reference as ref
from tests._helpers import rel_err
from tests._paths import alignment_matrices, moves, paths, soft_value

F64 = torch.float64
BACKENDS = ["reference", "cpu"]
#: hvp_cost's own tests run on the GPU too (inputs moved there, outputs back: _hvp).
HVP_BACKENDS = BACKENDS + [pytest.param("cuda", marks=pytest.mark.cuda)]
# (open_begin, open_end, penalty): penalty None, a float (shared) or "pairs" (one per pair, hvp_cost only)
VARIANTS = [(True, False, None), (False, True, None), (True, True, None), (False, False, 0.3), (True, True, -0.2),
            (False, True, 0.5), (True, False, "pairs")]
API_VARIANTS = [v for v in VARIANTS if v[2] != "pairs"]
XL, YL = [3, 2, 3], [5, 4, 2]  # per-pair lengths; N = 3 != M = 5


def _vid(v):
    return f"b{int(v[0])}e{int(v[1])}p{v[2]}"


def _g(value, dtype=F64):
    return torch.tensor(value, dtype=dtype)


def _penalty(pen, B, dtype=F64, seed=0):
    """None, a 0-d tensor, or `(B,)` penalties ("pairs")."""
    if pen is None:
        return None
    if pen == "pairs":
        return 0.4 * torch.randn(B, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return torch.tensor(pen, dtype=dtype)


# --- the oracle ------------------------------------------------------------------------------------------

def _oracle(C, gamma, open_begin, open_end, pen, Cdot, gdot, pdot, allowed=None):
    """(E, vgamma, Edot, vgamma_dot, vpen, vpen_dot) of one pair C `(n, m)` by enumeration: the first derivatives
    of v(C, gamma, p) and their derivatives along (Cdot, gdot, pdot), float64 double autograd."""
    n, m = C.shape
    if allowed is None:
        allowed = torch.isfinite(C)
    ps = paths(n, m, allowed.tolist(), open_begin, open_end)
    A, mv = alignment_matrices(ps, n, m), moves(ps)
    Cg = torch.where(allowed, C.double(), torch.zeros_like(C, dtype=F64)).requires_grad_()
    g = torch.tensor(float(gamma), dtype=F64, requires_grad=True)
    p = torch.tensor(float(pen), dtype=F64, requires_grad=True)
    v = soft_value(Cg, g, A, p, mv)
    E, dg, dp = torch.autograd.grad(v, (Cg, g, p), create_graph=True)
    Cd = torch.where(allowed, Cdot.double(), torch.zeros_like(Cdot, dtype=F64))
    inner = (E * Cd).sum() + dg * float(gdot) + dp * float(pdot)
    out = torch.autograd.grad(inner, (Cg, g, p), allow_unused=True)
    Ed, dgd, dpd = (torch.zeros_like(t) if o is None else o for o, t in zip(out, (Cg, g, p)))
    return E.detach(), dg.detach(), Ed, dgd, dp.detach(), dpd


def _hvp(backend, C, gamma, xl, yl, window, Cdot, gdot, open_begin, open_end, pen, pdot):
    """The backend's hvp_cost as a 6-tuple (vpen, vpen_dot None without a penalty); cuda: the inputs on the GPU,
    the outputs back on the CPU."""
    dev = "cuda" if backend == "cuda" else "cpu"

    def to(t):
        return None if t is None else t.to(dev)

    out = get_backend(backend).hvp_cost(to(C), to(_g(gamma, C.dtype)), to(xl), to(yl), to(window), to(Cdot), to(gdot),
                                        open_begin=open_begin, open_end=open_end, step_penalty=to(pen),
                                        penalty_dot=None if pen is None else to(pdot))
    assert len(out) == (4 if pen is None else 6)
    return tuple(t.cpu() for t in out) + ((None, None) if pen is None else ())


def _check_pairs(out, C, gamma, xl, yl, Cdot, gdot, ob, oe, pen, pdot, tol, allowed=None):
    """Every pair of a backend's hvp_cost output against the oracle (relative to each output's scale)."""
    E, vg, Ed, vgd, vp, vpd = out
    for b in range(C.shape[0]):
        n, m = int(xl[b]), int(yl[b])
        p = 0.0 if pen is None else float(pen if pen.dim() == 0 else pen[b])
        a = None if allowed is None else allowed[b, :n, :m]
        pd = 0.0 if pen is None else pdot[b]  # no penalty: no penalty direction either
        want = _oracle(C[b, :n, :m], gamma, ob, oe, p, Cdot[b, :n, :m], gdot[b], pd, a)
        got = [E[b, :n, :m], vg[b], Ed[b, :n, :m], vgd[b]]
        if pen is not None:
            got += [vp[b], vpd[b]]
        for i, (x, w) in enumerate(zip(got, want)):
            assert torch.allclose(x.double(), w, rtol=tol, atol=tol * max(1.0, float(w.abs().max()))), (b, i, x, w)
        outside = torch.ones_like(E[b], dtype=torch.bool)
        outside[:n, :m] = False
        assert not E[b][outside].any() and not Ed[b][outside].any()  # zeros outside the pair


def _direction(B, N, M, dtype=F64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, N, M, generator=g, dtype=dtype), torch.randn(B, generator=g, dtype=dtype),
            torch.randn(B, generator=g, dtype=dtype))


# --- hvp_cost against the oracle ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("backend", HVP_BACKENDS)
def test_hvp_cost_matches_the_path_oracle(backend, gamma, variant):
    """Per-pair lengths, N != M, every variant, a penalty shared or per pair, a random direction including
    penalty_dot; gamma = 1e-3 on costs of its scale (the weights away from 0/1)."""
    ob, oe, pen = variant
    B, N, M = 3, 3, 5
    scale = 0.01 if gamma < 0.01 else 1.0
    C = scale * torch.rand(B, N, M, generator=torch.Generator().manual_seed(7), dtype=F64)
    xl, yl = torch.tensor(XL), torch.tensor(YL)
    Cdot, gdot, pdot = _direction(B, N, M)
    P = _penalty(pen, B)
    if P is not None:
        P = P * scale
    out = _hvp(backend, C, gamma, xl, yl, None, Cdot, gdot, ob, oe, P, pdot)
    _check_pairs(out, C, gamma, xl, yl, Cdot, gdot, ob, oe, P, pdot, 1e-8)


@pytest.mark.parametrize("backend", HVP_BACKENDS)
def test_hvp_cost_with_a_band_a_penalty_and_forbidden_cells(backend):
    """A step penalty with a Sakoe-Chiba band and +inf cells; open ends with +inf cells (bands with open ends
    are refused)."""
    B, N, M = 2, 4, 5
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(3), dtype=F64)
    C[0, 1, 2] = C[1, 2, 1] = C[1, 0, 3] = float("inf")
    xl, yl = torch.tensor([4, 3]), torch.tensor([5, 4])
    Cdot, gdot, pdot = _direction(B, N, M)
    window = softdtw._checks.make_window(xl, yl, N, M, 1, None)
    allowed = softdtw._windows.valid_cells(xl, yl, window, N, M) & torch.isfinite(C)
    P = torch.tensor(0.25, dtype=F64)
    out = _hvp(backend, C, 0.3, xl, yl, window, Cdot, gdot, False, False, P, pdot)
    _check_pairs(out, C, 0.3, xl, yl, Cdot, gdot, False, False, P, pdot, 1e-8, allowed)
    for ob, oe in [(True, False), (False, True), (True, True)]:
        out = _hvp(backend, C, 0.3, xl, yl, None, Cdot, gdot, ob, oe, P, pdot)
        _check_pairs(out, C, 0.3, xl, yl, Cdot, gdot, ob, oe, P, pdot, 1e-8, torch.isfinite(C))
        with pytest.raises(ValueError, match="cannot be combined with a band"):
            _hvp(backend, C, 0.3, xl, yl, window, Cdot, gdot, ob, oe, P, pdot)


@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("backend", HVP_BACKENDS)
def test_hvp_cost_at_gamma_zero_is_the_hard_path(backend, variant):
    """gamma = 0: E is the optimal path, vpen its number of non-diagonal moves, the derivatives 0."""
    ob, oe, pen = variant
    B, N, M = 3, 3, 5
    C = torch.rand(B, N, M, generator=torch.Generator().manual_seed(9), dtype=F64)
    xl, yl = torch.tensor(XL), torch.tensor(YL)
    Cdot, gdot, pdot = _direction(B, N, M)
    P = _penalty(pen, B)
    E, vg, Ed, vgd, vp, vpd = _hvp(backend, C, 0.0, xl, yl, None, Cdot, gdot, ob, oe, P, pdot)
    assert float(vg.abs().max()) == 0 and float(Ed.abs().max()) == 0 and float(vgd.abs().max()) == 0
    for b in range(B):
        n, m = XL[b], YL[b]
        p = 0.0 if P is None else float(P if P.dim() == 0 else P[b])
        ps = paths(n, m, None, ob, oe)
        A, mv = alignment_matrices(ps, n, m), moves(ps)
        best = int(((A * C[b, :n, :m]).sum((1, 2)) + p * mv).argmin())
        assert torch.equal(E[b, :n, :m], A[best])
        if P is not None:
            assert float(vp[b]) == float(mv[best]) and float(vpd[b]) == 0


@pytest.mark.parametrize("backend", HVP_BACKENDS)
def test_hvp_cost_of_a_pair_without_a_finite_path_is_zero(backend):
    B, N, M = 2, 3, 4
    C = torch.rand(B, N, M, dtype=F64)
    C[1, 1, :] = float("inf")  # no path crosses row 1
    xl, yl = torch.tensor([3, 3]), torch.tensor([4, 4])
    Cdot, gdot, pdot = _direction(B, N, M)
    for ob, oe in [(True, False), (False, True), (True, True)]:
        out = _hvp(backend, C, 0.5, xl, yl, None, Cdot, gdot, ob, oe, torch.tensor(0.2, dtype=F64), pdot)
        for t in out:
            assert float(t[1].abs().max()) == 0
            assert torch.isfinite(t).all()
        assert float(out[0][0].abs().max()) > 0


# --- cpu against the reference, larger sizes -----------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("plan", ["planned", "lanes3", "one"])
def test_cpu_hvp_cost_equals_the_reference(variant, plan, monkeypatch):
    """float64 within 1e-9 (relative) at B = 7, N = 11, M = 17 with per-pair lengths, under the plan cpu picks,
    groups of 3 lanes (a partial last group, several kernel calls) and one pair a group; float32 within 1e-4."""
    if plan == "lanes3":
        monkeypatch.setattr(cpu, "_hvp_plan", lambda B, N, M: (3, 2))
    elif plan == "one":
        monkeypatch.setattr(cpu, "_hvp_plan", lambda B, N, M: (1, 1))
    ob, oe, pen = variant
    B, N, M = 7, 11, 17
    gen = torch.Generator().manual_seed(11)
    C = torch.rand(B, N, M, generator=gen, dtype=F64)
    xl = torch.randint(1, N + 1, (B,), generator=gen)
    yl = torch.randint(1, M + 1, (B,), generator=gen)
    xl[0], yl[0] = N, M
    Cdot, gdot, pdot = _direction(B, N, M)
    P = _penalty(pen, B)
    for gamma in (0.05, 1.0):
        want = _hvp("reference", C, gamma, xl, yl, None, Cdot, gdot, ob, oe, P, pdot)
        got = _hvp("cpu", C, gamma, xl, yl, None, Cdot, gdot, ob, oe, P, pdot)
        for a, b in zip(got, want):
            if b is not None:
                assert rel_err(a, b) < 1e-9
        f32 = _hvp("cpu", C.float(), gamma, xl, yl, None, Cdot.float(), gdot.float(), ob, oe,
                   None if P is None else P.float(), pdot.float())
        for a, b in zip(f32, want):
            if b is not None:
                assert a.dtype == torch.float32 and rel_err(a, b) < 1e-4


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 6), st.booleans(), st.booleans(),
       st.sampled_from([None, "shared", "pairs"]), st.sampled_from([0.05, 0.5, 5.0]), st.integers(0, 2**31 - 1))
def test_hessian_of_the_variants_is_symmetric(B, N, M, ob, oe, pen, gamma, seed):
    """<u, H v> = <v, H u> for directions over (C, gamma, p) and the cpu backend; H is linear in the direction."""
    gen = torch.Generator().manual_seed(seed)
    C = torch.rand(B, N, M, generator=gen, dtype=F64)
    xl = torch.randint(1, N + 1, (B,), generator=gen)
    yl = torch.randint(1, M + 1, (B,), generator=gen)
    P = None if pen is None else (torch.tensor(0.3, dtype=F64) if pen == "shared" else torch.randn(B, generator=gen,
                                                                                                  dtype=F64))
    U, gu, pu = _direction(B, N, M, seed=seed + 1)
    V, gv, pv = _direction(B, N, M, seed=seed + 2)
    valid = softdtw._windows.valid_cells(xl, yl, None, N, M)
    U, V = U * valid, V * valid
    if P is None:
        pu, pv = torch.zeros(B, dtype=F64), torch.zeros(B, dtype=F64)
    hu = _hvp("cpu", C, gamma, xl, yl, None, U, gu, ob, oe, P, pu)
    hv = _hvp("cpu", C, gamma, xl, yl, None, V, gv, ob, oe, P, pv)

    def dot(h, D, gd, pd):
        out = (h[2] * D).sum((1, 2)) + h[3] * gd
        return out if P is None else out + h[5] * pd

    a, b = dot(hv, U, gu, pu), dot(hu, V, gv, pv)
    assert torch.allclose(a, b, rtol=1e-9, atol=1e-9 * (1 + float(a.abs().max())))
    hw = _hvp("cpu", C, gamma, xl, yl, None, 2 * U - 3 * V, 2 * gu - 3 * gv, ob, oe, P, 2 * pu - 3 * pv)
    for i in (2, 3) if P is None else (2, 3, 5):
        assert torch.allclose(hw[i], 2 * hu[i] - 3 * hv[i], rtol=1e-9, atol=1e-9 * (1 + float(hw[i].abs().max())))


# --- the public API: double backward against the oracle ----------------------------------------------------

def _data(seed=0, B=3, N=3, M=5, D=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, D, generator=g, dtype=F64), torch.randn(B, M, D, generator=g, dtype=F64)


def _pure(x, y, gamma, p, variant, cost="sqeuclidean", xl=XL, yl=YL):
    """Soft-DTW values `(B,)` by enumeration, per pair lengths (XL / YL), differentiable (twice) in everything."""
    ob, oe, _ = variant
    out = []
    for b, (n, m) in enumerate(zip(xl, yl)):
        C = softdtw.costs.pairwise_cost(cost, x[b:b + 1, :n], y[b:b + 1, :m])[0]
        ps = paths(n, m, None, ob, oe)
        out.append(soft_value(C, gamma, alignment_matrices(ps, n, m), p, moves(ps)))
    return torch.stack(out)


def _penalised(fn, x, y, g, p):
    """Gradients in (x, y, gamma, p) of v + ||dv/dx||^2 + (dv/dgamma)^2 + (dv/dp)^2 (a double backward)."""
    v = fn(x, y, g, p).sum()
    gx, gg, gp = torch.autograd.grad(v, (x, g, p), create_graph=True)
    obj = v + gx.pow(2).sum() + gg.pow(2) + gp.pow(2)
    return torch.autograd.grad(obj, (x, y, g, p), allow_unused=True)


def _leaves(x, y, gamma, pen):
    return (x.clone().requires_grad_(), y.clone().requires_grad_(), torch.tensor(gamma, dtype=F64, requires_grad=True),
            torch.tensor(pen, dtype=F64, requires_grad=True))


@pytest.mark.parametrize("variant", API_VARIANTS, ids=_vid)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_penalty_of_every_entry_point_matches_the_oracle(backend, variant):
    """soft_dtw, soft_dtw_from_cost and SoftDTW with create_graph=True: the gradient of a penalty on the gradient
    (in x, gamma and the step penalty) equals the oracle's, in x, y, gamma and the penalty."""
    ob, oe, pen = variant
    x, y = _data()
    xl, yl = torch.tensor(XL), torch.tensor(YL)
    gamma = 0.7
    p0 = 0.0 if pen is None else pen

    def pure(a, b, g, p):
        return _pure(a, b, g, p if pen is not None else 0.0 * p, variant)

    lengths = dict(x_lengths=xl, y_lengths=yl)
    opts = dict(backend=backend, open_begin=ob, open_end=oe)

    def P(p):  # the penalty argument (p always takes part: 0 * p without a penalty)
        return p if pen is not None else None

    entries = {
        "soft_dtw": lambda a, b, g, p: softdtw.soft_dtw(a, b, g, step_penalty=P(p), **lengths, **opts) + 0.0 * p,
        "soft_dtw_from_cost": lambda a, b, g, p: softdtw.soft_dtw_from_cost(
            softdtw.costs.sqeuclidean(a, b), g, step_penalty=P(p), **lengths, **opts) + 0.0 * p,
        "SoftDTW": lambda a, b, g, p: softdtw.SoftDTW(g, step_penalty=P(p), **opts)(a, b, **lengths) + 0.0 * p,
    }
    expected = {name: pure for name in entries}
    if not (ob or oe):  # the divergence takes a step penalty (no open ends)
        entries["soft_dtw_divergence"] = lambda a, b, g, p: softdtw.soft_dtw_divergence(
            a, b, g, step_penalty=P(p), backend=backend, **lengths) + 0.0 * p
        expected["soft_dtw_divergence"] = lambda a, b, g, p: (
            _pure(a, b, g, p, variant) - 0.5 * _pure(a, a, g, p, variant, yl=XL)
            - 0.5 * _pure(b, b, g, p, variant, xl=YL))
    for name, fn in entries.items():
        want = _penalised(expected[name], *_leaves(x, y, gamma, p0))
        got = _penalised(fn, *_leaves(x, y, gamma, p0))
        for a, b, what in zip(got, want, ("x", "y", "gamma", "penalty")):
            a = torch.zeros_like(b) if a is None else a
            assert torch.allclose(a, b, rtol=1e-8, atol=1e-10), (name, what, rel_err(a, b))


@pytest.mark.parametrize("memory", ["store", "checkpoint"])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
def test_cpu_gradient_penalty_matches_the_reference_in_every_memory_mode(cost, memory):
    """cpu (memory store or checkpoint, fused costs, float64 and float32) against the reference backend: the
    gradient-penalty step's gradients in x, y, gamma and the penalty, open_end and a step penalty, lengths."""
    gen = torch.Generator().manual_seed(13)
    x, y = torch.randn(5, 9, 3, generator=gen, dtype=F64), torch.randn(5, 14, 3, generator=gen, dtype=F64)
    xl, yl = torch.tensor([9, 4, 7, 9, 1]), torch.tensor([14, 14, 3, 8, 5])

    def run(backend, dtype, mem):
        def fn(a, b, g, p):
            return softdtw.soft_dtw(a, b, g, cost=cost, x_lengths=xl, y_lengths=yl, memory=mem, backend=backend,
                                    open_end=True, step_penalty=p)
        return _penalised(fn, *(t.to(dtype) for t in _leaves(x, y, 0.3, 0.1)))

    want = run("reference", F64, "auto")
    for dtype, tol in ((F64, 1e-9), (torch.float32, 1e-3)):  # float32: the plain DP's gamma part is 7e-5 off here
        got = run("cpu", dtype, memory)
        for a, b, what in zip(got, want, ("x", "y", "gamma", "penalty")):
            assert a.dtype == dtype and rel_err(a, b) < tol, (what, dtype, rel_err(a, b))


@pytest.mark.parametrize("variant", API_VARIANTS, ids=_vid)
@pytest.mark.parametrize("backend", BACKENDS)
def test_alignment_with_variants_is_differentiable(backend, variant):
    """The VJP of <E, W> (E = soft_dtw_alignment) in x, y, gamma and the penalty equals the oracle's."""
    ob, oe, pen = variant
    x, y = _data(seed=4)
    xl, yl = torch.tensor(XL), torch.tensor(YL)
    W = torch.randn(3, 3, 5, generator=torch.Generator().manual_seed(5), dtype=F64)
    p0 = 0.0 if pen is None else pen
    xs, ys, g, p = _leaves(x, y, 0.5, p0)
    E = softdtw.soft_dtw_alignment(xs, ys, g, x_lengths=xl, y_lengths=yl, backend=backend, open_begin=ob,
                                   open_end=oe, step_penalty=p if pen is not None else None)
    assert E.requires_grad
    got = torch.autograd.grad((E * W).sum(), (xs, ys, g, p), allow_unused=True)
    # The oracle's E of each pair: dv/dC of the enumerated value at C(x, y), keeping C's graph to x and y.
    xs, ys, g, p = _leaves(x, y, 0.5, p0)
    inner = 0
    for b, (n, m) in enumerate(zip(XL, YL)):
        C = softdtw.costs.sqeuclidean(xs[b:b + 1, :n], ys[b:b + 1, :m])[0]
        ps = paths(n, m, None, ob, oe)
        v = soft_value(C, g, alignment_matrices(ps, n, m), p if pen is not None else 0.0, moves(ps))
        (Eb,) = torch.autograd.grad(v, C, create_graph=True)
        inner = inner + (Eb * W[b, :n, :m]).sum()
    want = torch.autograd.grad(inner, (xs, ys, g, p), allow_unused=True)
    for a, b, what in zip(got, want, ("x", "y", "gamma", "penalty")):
        if b is None:
            assert a is None or float(a.abs().max()) == 0, what
            continue
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10), (what, rel_err(a, b))


@pytest.mark.parametrize("variant", API_VARIANTS, ids=_vid)
@pytest.mark.parametrize("gamma", [1e-3, 0.1, 10.0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradgradcheck_with_variants(backend, gamma, variant):
    """float64 gradgradcheck in x, y, gamma and a penalty that requires grad, lengths, N != M."""
    ob, oe, pen = variant
    scale = 0.05 if gamma < 0.01 else 1.0  # keep the soft-min weights away from 0/1 at gamma = 1e-3
    x, y = _data(seed=6, B=2, N=3, M=4)
    x, y = (scale * x).requires_grad_(), (scale * y).requires_grad_()
    g = torch.tensor(gamma, dtype=F64, requires_grad=True)
    p = torch.tensor(scale * (0.1 if pen is None else pen), dtype=F64, requires_grad=True)
    kw = dict(x_lengths=[3, 2], y_lengths=[4, 3], backend=backend, open_begin=ob, open_end=oe)

    def f(a, b, gg, pp):
        return softdtw.soft_dtw(a, b, gg, step_penalty=pp if pen is not None else None, **kw) + 0.0 * pp

    assert gradgradcheck(f, (x, y, g, p), fast_mode=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradgradcheck_from_cost_and_alignment_with_every_variant(backend):
    g = torch.tensor(0.4, dtype=F64, requires_grad=True)
    p = torch.tensor(0.2, dtype=F64, requires_grad=True)
    C = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(8), dtype=F64, requires_grad=True)
    x, y = _data(seed=2, B=2, N=3, M=4)
    x.requires_grad_()
    for ob, oe in itertools.product([False, True], repeat=2):
        kw = dict(x_lengths=[3, 2], backend=backend, open_begin=ob, open_end=oe)
        assert gradgradcheck(lambda c, gg, pp: softdtw.soft_dtw_from_cost(c, gg, step_penalty=pp, **kw), (C, g, p),
                             fast_mode=True)
        assert gradcheck(lambda a, gg, pp: softdtw.soft_dtw_alignment(a, y, gg, step_penalty=pp, **kw), (x, g, p),
                         fast_mode=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_backward_ops_double_backward_takes_a_per_pair_penalty_direction(backend):
    """gradcheck of the backward ops as functions of (grad, C or x, gamma, penalty): their VJP sends a different
    upstream to each pair's dpenalty output, the per-pair penalty direction of hvp_cost."""
    x, y = _data(seed=3, B=2, N=3, M=4)
    xl, yl = torch.tensor([3, 2]), torch.tensor([4, 4])
    gamma = torch.tensor(0.6, dtype=F64)
    pen = torch.tensor(0.3, dtype=F64)
    C = softdtw.costs.sqeuclidean(x, y)
    empty = torch.zeros(0, dtype=F64)  # nothing saved: the backward recomputes its table from its own C (x, y)
    for ob, oe in [(False, False), (True, True), (False, True)]:
        value, _ = _ops.forward_cost(C, gamma, xl, yl, None, "store", backend, ob, oe, pen)
        grad = torch.tensor([0.7, -1.3], dtype=F64)
        leaves = [t.clone().requires_grad_() for t in (grad, C, gamma, pen)]

        def bc(gr, c, gg, pp):
            return _ops.backward_cost(gr, c, gg, xl, yl, None, value, empty, "store", backend, ob, oe, pp)

        assert gradcheck(bc, leaves)
        value, _ = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", backend, ob, oe, pen)
        leaves = [t.clone().requires_grad_() for t in (grad, x, y, gamma, pen)]

        def bw(gr, a, b, gg, pp):
            return _ops.backward(gr, a, b, gg, "sqeuclidean", xl, yl, None, value, empty, "store", backend, ob, oe,
                                 pp)

        assert gradcheck(bw, leaves)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_forward_ops_double_backward_equals_the_eager_functions(backend):
    """The custom ops' own autograd (what torch.compile runs: softdtw::forward / forward_cost -> the backward op ->
    its double backward) gives the eager Functions' gradient-penalty gradients, with open ends and a penalty."""
    x, y = _data(seed=14)
    xl, yl = torch.tensor(XL), torch.tensor(YL)

    def by_ops(a, b, g, p):
        return _ops.forward(a, b, g, "sqeuclidean", xl, yl, None, "store", backend, True, True, p)[0]

    def by_cost_op(a, b, g, p):
        return _ops.forward_cost(softdtw.costs.sqeuclidean(a, b), g, xl, yl, None, "store", backend, False, True,
                                 p)[0]

    def eager(ob):
        return lambda a, b, g, p: softdtw.soft_dtw(a, b, g, x_lengths=xl, y_lengths=yl, backend=backend,
                                                   open_begin=ob, open_end=True, step_penalty=p)

    for ops_fn, ob in ((by_ops, True), (by_cost_op, False)):
        got = _penalised(ops_fn, *_leaves(x, y, 0.4, 0.2))
        want = _penalised(eager(ob), *_leaves(x, y, 0.4, 0.2))
        for a, b in zip(got, want):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck_of_the_ops_with_variants(backend):
    x, y = _data(seed=5, B=2, N=3, M=4)
    xl, yl = torch.tensor([3, 2]), torch.tensor([4, 3])
    gamma = torch.tensor(0.5, dtype=F64)
    pen = torch.tensor(0.2, dtype=F64)
    C = softdtw.costs.sqeuclidean(x, y)
    Cdot, gdot, pdot = _direction(2, 3, 4)
    for ob, oe, P in [(True, False, None), (False, True, pen), (True, True, pen)]:
        torch.library.opcheck(_ops.hvp_cost, (C, gamma, xl, yl, None, Cdot, gdot, backend, ob, oe, P,
                                              None if P is None else pdot))
        value, saved = _ops.forward_cost(C, gamma, xl, yl, None, "store", backend, ob, oe, P)
        args = [t.clone().requires_grad_() for t in (torch.rand(2, dtype=F64), C, gamma)]
        Pr = None if P is None else P.clone().requires_grad_()
        torch.library.opcheck(_ops.backward_cost, (*args, xl, yl, None, value, saved, "store", backend, ob, oe, Pr))


def test_hvp_cost_op_returns_empty_penalty_outputs_without_a_penalty():
    C = torch.rand(2, 3, 4, dtype=F64)
    out = _ops.hvp_cost(C, torch.tensor(0.5, dtype=F64), torch.tensor([3, 3]), torch.tensor([4, 4]), None,
                        torch.randn_like(C), torch.zeros(2, dtype=F64), "cpu", True, True)
    assert len(out) == 6 and out[4].shape == (0,) and out[5].shape == (0,)
    want = ref.hvp_cost(C, torch.tensor(0.5, dtype=F64), torch.tensor([3, 3]), torch.tensor([4, 4]), None,
                        torch.zeros_like(C), torch.zeros(2, dtype=F64), open_begin=True, open_end=True)
    assert rel_err(out[0], want[0]) < 1e-12


# --- hard DTW -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", API_VARIANTS, ids=_vid)
@pytest.mark.parametrize("backend", BACKENDS)
def test_hard_dtw_second_derivative_is_the_cost_own(backend, variant):
    """gamma = 0: E is piecewise constant, so the Hessian-vector product in x is the cost's own weighted by E
    (sqeuclidean: 2 rowsum(E) v), and d(dv/dp)/dx = 0 (the number of moves of the optimal path)."""
    ob, oe, pen = variant
    x, y = _data(seed=12, B=2, N=4, M=5)
    xs = x.clone().requires_grad_()
    p = torch.tensor(0.0 if pen is None else pen, dtype=F64, requires_grad=True)
    kw = dict(backend=backend, open_begin=ob, open_end=oe, step_penalty=p if pen is not None else None)
    v = softdtw.dtw(xs, y, **kw).sum()
    if pen is None:
        (gx,) = torch.autograd.grad(v, xs, create_graph=True)
        gp = None
    else:
        gx, gp = torch.autograd.grad(v, (xs, p), create_graph=True)
    u = torch.randn_like(x)
    (Hu,) = torch.autograd.grad((gx * u).sum(), xs, retain_graph=gp is not None)
    E = softdtw.soft_dtw_alignment(x, y, 0.0, backend=backend, open_begin=ob, open_end=oe,
                                   step_penalty=None if pen is None else pen)
    assert torch.allclose(Hu, 2 * E.sum(2, keepdim=True) * u)
    if gp is not None:
        dx, dp = torch.autograd.grad(gp, (xs, p), allow_unused=True)
        assert dx is None or float(dx.abs().max()) == 0
        assert dp is None or float(dp.abs().max()) == 0


# --- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("option", [dict(open_begin=True), dict(open_end=True), dict(step_penalty=0.5)])
def test_a_backend_without_variant_hvp_refuses_create_graph(monkeypatch, option):
    """A backend without the variants' hvp_cost (HVP_VARIANTS unset; every backend has it now): a create_graph
    backward of a call with a variant raises a NotImplementedError naming the option and the backend; the first
    order still works. Simulated on cpu."""
    monkeypatch.setattr(cpu, "HVP_VARIANTS", False)
    name = next(iter(option))
    x, y = _data()
    xs = x.clone().requires_grad_()
    v = softdtw.soft_dtw(xs, y, 0.5, backend="cpu", **option).sum()
    with pytest.raises(NotImplementedError, match=rf"with {name} are not available on the cpu backend"):
        torch.autograd.grad(v, xs, create_graph=True)
    (g,) = torch.autograd.grad(v, xs)
    assert torch.isfinite(g).all()
    C = softdtw.costs.sqeuclidean(x, y).requires_grad_()
    v = softdtw.soft_dtw_from_cost(C, 0.5, backend="cpu", **option).sum()
    with pytest.raises(NotImplementedError, match=name):
        torch.autograd.grad(v, C, create_graph=True)
    E = softdtw.soft_dtw_alignment(xs, y, 0.5, backend="cpu", **option)
    assert E.requires_grad  # never E without its graph
    with pytest.raises(NotImplementedError, match=name):
        E.sum().backward()
    # softdtw::hvp_cost refuses them too; the plain DP's second order is unaffected.
    with pytest.raises(NotImplementedError, match=name):
        _ops.hvp_cost(C.detach(), torch.tensor(0.5, dtype=F64), torch.tensor(XL), torch.tensor(YL), None,
                      C.detach(), torch.zeros(3, dtype=F64), "cpu", option.get("open_begin", False),
                      option.get("open_end", False), None if "step_penalty" not in option else torch.tensor(0.5,
                                                                                                      dtype=F64))
    v = softdtw.soft_dtw(xs, y, 0.5, backend="cpu").sum()
    (gx,) = torch.autograd.grad(v, xs, create_graph=True)
    assert gx.requires_grad


@pytest.mark.cuda
@pytest.mark.parametrize("variant", API_VARIANTS, ids=_vid)
def test_cuda_second_order_of_the_variants(variant):
    """cuda has the variants' hvp_cost (HVP_VARIANTS): gradgradcheck through soft_dtw on the GPU (float64, lengths,
    a penalty that requires grad), and the VJP of <W, soft_dtw_alignment> equal to the reference backend's."""
    assert getattr(get_backend("cuda"), "HVP_VARIANTS", False)
    ob, oe, pen = variant
    x, y = _data(seed=6, B=2, N=3, M=4)
    x, y = x.cuda().requires_grad_(), y.cuda().requires_grad_()
    g = torch.tensor(0.3, dtype=F64, device="cuda", requires_grad=True)
    p = torch.tensor(0.1 if pen is None else pen, dtype=F64, device="cuda", requires_grad=True)
    kw = dict(x_lengths=[3, 2], y_lengths=[4, 3], open_begin=ob, open_end=oe)

    def f(a, b, gg, pp):
        return softdtw.soft_dtw(a, b, gg, step_penalty=pp if pen is not None else None, **kw) + 0.0 * pp

    assert gradgradcheck(f, (x, y, g, p), fast_mode=True)
    W = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(5), dtype=F64)
    out = []
    for backend, dev in (("cuda", "cuda"), ("reference", "cpu")):
        leaves = [t.detach().to(dev).requires_grad_() for t in (x, y, g, p)]
        E = softdtw.soft_dtw_alignment(leaves[0], leaves[1], leaves[2], backend=backend,
                                       step_penalty=leaves[3] if pen is not None else None, **kw)
        assert E.requires_grad
        grads = torch.autograd.grad((E * W.to(dev)).sum(), leaves, allow_unused=True)
        out.append([None if t is None else t.cpu() for t in grads])
    for a, b, what in zip(*out, ("x", "y", "gamma", "penalty")):
        if b is None or a is None:
            assert (a is None or float(a.abs().max()) == 0) and (b is None or float(b.abs().max()) == 0), what
            continue
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10), (what, rel_err(a, b))
