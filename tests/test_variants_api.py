"""Alignment variants (issue 25) through the public API: open_begin, open_end and step_penalty of soft_dtw,
soft_dtw_from_cost, dtw, dtw_path, soft_dtw_alignment, soft_dtw_divergence and SoftDTW, against brute-force
path enumeration (tests/_paths.py), on the reference, cpu and cuda backends (cuda: marked ``cuda``, the data moved
to the GPU); the ops' schemas (opcheck), torch.compile, and the refusals (create_graph, the divergence's open ends,
bad options).

Tiny sizes: every pair is small enough to enumerate its warping paths.
"""
import pytest
import torch
from torch.autograd import gradcheck

import softdtw
import softdtw.costs
from softdtw import _ops
from tests._paths import alignment_matrices, moves, paths, soft_value

F64 = torch.float64
BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
GAMMAS = [0.0, 0.1, 1.0]
# (open_begin, open_end, step_penalty)
VARIANTS = [(True, False, None), (False, True, None), (True, True, None), (False, False, 0.3), (True, True, -0.2),
            (True, False, 0.5)]
XL, YL = [3, 2, 1], [5, 4, 3]  # per-pair lengths; N = 3 != M = 5


def _vid(v):
    return f"b{int(v[0])}e{int(v[1])}p{v[2]}"


def _data(seed=0, B=3, N=3, M=5, D=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=F64)
    y = torch.randn(B, M, D, generator=g, dtype=F64)
    return x, y


def _oracle_pair(C, gamma, open_begin, open_end, penalty):
    """(value, paths, alignment matrices, moves) of one pair's cost C `(n, m)` by enumeration; the value is
    differentiable in C, gamma and penalty (tensors) by autograd."""
    n, m = C.shape
    ps = paths(n, m, None, open_begin, open_end)
    A = alignment_matrices(ps, n, m)
    mv = moves(ps)
    return soft_value(C, gamma, A, penalty, mv), ps, A, mv


def _oracle(x, y, gamma, variant, grads=True):
    """(values `(B,)`, dx, dy, dgamma, dpenalty) of sum_b value_b by enumeration, float64, per pair lengths."""
    ob, oe, pen = variant
    xo = x.detach().clone().requires_grad_()
    yo = y.detach().clone().requires_grad_()
    go = torch.tensor(gamma, dtype=F64, requires_grad=True)
    po = torch.tensor(0.0 if pen is None else pen, dtype=F64, requires_grad=True)
    values = []
    for b, (n, m) in enumerate(zip(XL, YL)):
        C = softdtw.costs.pairwise_cost("sqeuclidean", xo[b:b + 1, :n], yo[b:b + 1, :m])[0]
        values.append(_oracle_pair(C, go, ob, oe, po)[0])
    v = torch.stack(values)
    if not grads:
        return v.detach()
    g = torch.autograd.grad(v.sum(), (xo, yo, go, po), allow_unused=True)
    g = [torch.zeros((), dtype=F64) if t is None else t for t in g]
    return (v.detach(), *g)


def _lengths():
    return torch.tensor(XL), torch.tensor(YL)


def _on(backend, *tensors):
    """The tensors on the backend's device (cuda: the GPU, else unchanged)."""
    return tuple(t.cuda() if backend == "cuda" else t for t in tensors)


# --- values and gradients against path enumeration -------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_soft_dtw_matches_path_enumeration(backend, gamma, variant):
    """Values and gradients in x, y, gamma and a penalty tensor, per-pair lengths, N != M."""
    x, y = _data()
    xl, yl = _on(backend, *_lengths())
    ob, oe, pen = variant
    xs, ys = (t.clone().requires_grad_() for t in _on(backend, x, y))
    g = torch.tensor(gamma, dtype=F64, requires_grad=True)
    p = None if pen is None else torch.tensor(pen, dtype=F64, requires_grad=True)
    v = softdtw.soft_dtw(xs, ys, g, x_lengths=xl, y_lengths=yl, backend=backend, open_begin=ob, open_end=oe,
                         step_penalty=p)
    want = _oracle(x, y, gamma, variant)
    assert torch.allclose(v.cpu(), want[0], rtol=1e-10, atol=1e-10)
    got = torch.autograd.grad(v.sum(), [t for t in (xs, ys, g, p) if t is not None])
    for a, b in zip(got, want[1:]):
        assert torch.allclose(a.cpu(), b, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_soft_dtw_from_cost_matches_path_enumeration(backend, gamma, variant):
    ob, oe, pen = variant
    xl, yl = _lengths()
    C = torch.rand(3, 3, 5, generator=torch.Generator().manual_seed(1), dtype=F64) * 2
    Cs = _on(backend, C)[0].requires_grad_()
    p = None if pen is None else torch.tensor(pen, dtype=F64, requires_grad=True)
    v = softdtw.soft_dtw_from_cost(Cs, gamma, x_lengths=xl, y_lengths=yl, backend=backend, open_begin=ob,
                                   open_end=oe, step_penalty=p)
    dC = torch.autograd.grad(v.sum(), Cs)[0].cpu()
    v = v.cpu()
    for b, (n, m) in enumerate(zip(XL, YL)):
        Cb = C[b, :n, :m].clone().requires_grad_()
        po = torch.tensor(0.0 if pen is None else pen, dtype=F64)
        want = _oracle_pair(Cb, gamma, ob, oe, po)[0]
        E = torch.autograd.grad(want, Cb)[0]
        assert float(v[b].detach()) == pytest.approx(float(want), rel=1e-10, abs=1e-10)
        assert torch.allclose(dC[b, :n, :m], E, atol=1e-9)
        assert float(dC[b].abs().sum()) == pytest.approx(float(E.abs().sum()), abs=1e-9)  # zero past the lengths


@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dtw_and_dtw_path_are_the_best_enumerated_path(backend, variant):
    """Hard DTW: the value is the minimum over the enumerated paths of cost + penalty * moves, and dtw_path
    returns that (unique, random costs) path, starting and ending where the options allow."""
    ob, oe, pen = variant
    x, y = _data(seed=2)
    xl, yl = _lengths()
    xd, yd, xld, yld = _on(backend, x, y, xl, yl)
    v = softdtw.dtw(xd, yd, x_lengths=xld, y_lengths=yld, backend=backend, open_begin=ob, open_end=oe,
                    step_penalty=pen).cpu()
    got_paths = [t.cpu() for t in softdtw.dtw_path(xd, yd, x_lengths=xld, y_lengths=yld, backend=backend,
                                                   open_begin=ob, open_end=oe, step_penalty=pen)]
    for b, (n, m) in enumerate(zip(XL, YL)):
        C = softdtw.costs.pairwise_cost("sqeuclidean", x[b:b + 1, :n], y[b:b + 1, :m])[0]
        _, ps, A, mv = _oracle_pair(C, 0.0, ob, oe, 0.0)
        scores = (A * C).sum((1, 2)) + (0.0 if pen is None else pen) * mv
        best = int(scores.argmin())
        assert float(v[b]) == pytest.approx(float(scores[best]), rel=1e-12, abs=1e-12)
        assert got_paths[b].tolist() == [list(c) for c in ps[best]]
        if not ob:
            assert got_paths[b][0].tolist() == [0, 0]
        if not oe:
            assert got_paths[b][-1].tolist() == [n - 1, m - 1]


@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_soft_dtw_alignment_matches_path_enumeration(backend, gamma, variant):
    ob, oe, pen = variant
    x, y = _data(seed=3)
    xl, yl = _lengths()
    xd, yd, xld, yld = _on(backend, x, y, xl, yl)
    E = softdtw.soft_dtw_alignment(xd, yd, gamma, x_lengths=xld, y_lengths=yld, backend=backend, open_begin=ob,
                                   open_end=oe, step_penalty=pen).cpu()
    for b, (n, m) in enumerate(zip(XL, YL)):
        C = softdtw.costs.pairwise_cost("sqeuclidean", x[b:b + 1, :n], y[b:b + 1, :m])[0].requires_grad_()
        want = torch.autograd.grad(_oracle_pair(C, gamma, ob, oe, torch.tensor(pen or 0.0, dtype=F64))[0], C)[0]
        assert torch.allclose(E[b, :n, :m], want, atol=1e-9)
        assert float(E[b, n:].abs().sum() + E[b, :, m:].abs().sum()) == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_in_x_y_gamma_and_the_penalty(backend):
    x, y = _on(backend, *_data(seed=4, B=2, N=3, M=4, D=1))
    xl, yl = _on(backend, torch.tensor([3, 2]), torch.tensor([4, 3]))
    g = torch.tensor(0.3, dtype=F64)
    p = torch.tensor(0.2, dtype=F64)
    for ob, oe in ((True, False), (False, True), (True, True), (False, False)):
        def f(a, b, gg, pp):
            return softdtw.soft_dtw(a, b, gg, x_lengths=xl, y_lengths=yl, backend=backend, open_begin=ob,
                                    open_end=oe, step_penalty=pp)
        args = tuple(t.clone().requires_grad_() for t in (x, y, g, p))
        assert gradcheck(f, args, eps=1e-6, atol=1e-6)
    C = _on(backend, torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(5), dtype=F64))[0]

    def h(c, gg, pp):
        return softdtw.soft_dtw_from_cost(c, gg, x_lengths=xl, y_lengths=yl, backend=backend, open_begin=True,
                                          open_end=True, step_penalty=pp)
    assert gradcheck(h, tuple(t.clone().requires_grad_() for t in (C, g, p)), eps=1e-6, atol=1e-6)


def test_cpu_checkpoint_equals_store_with_the_variants():
    x, y = _data(seed=6, B=2, N=6, M=9, D=2)
    p = torch.tensor(0.4, dtype=F64, requires_grad=True)
    out = []
    for memory in ("store", "checkpoint"):
        xs = x.clone().requires_grad_()
        v = softdtw.soft_dtw(xs, y, 0.5, memory=memory, backend="cpu", open_begin=True, open_end=True,
                             step_penalty=p)
        out.append((v.detach(), *torch.autograd.grad(v.sum(), (xs, p))))
    for a, b in zip(*out):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


# --- penalties with closed ends: a shifted cost; the divergence ---------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_closed_end_penalty_is_a_cost_shift_and_divergence_keeps_it(backend):
    """Closed paths make 2|A| - n - m non-diagonal moves: penalty p = cost + 2p less p(n + m); in the
    divergence the constants cancel, so it equals the divergence of the shifted cost (0 at x = y)."""
    x, y, xl, yl = _on(backend, *_data(seed=7), *_lengths())
    p = 0.35

    def shifted(a, b):
        return softdtw.costs.pairwise_cost("sqeuclidean", a, b) + 2 * p

    v = softdtw.soft_dtw(x, y, 0.5, x_lengths=xl, y_lengths=yl, backend=backend, step_penalty=p)
    w = softdtw.soft_dtw(x, y, 0.5, x_lengths=xl, y_lengths=yl, backend=backend, cost=shifted)
    assert torch.allclose(v, w - p * (xl + yl).to(F64), rtol=1e-10, atol=1e-10)
    d = softdtw.soft_dtw_divergence(x, y, 0.5, x_lengths=xl, y_lengths=yl, backend=backend, step_penalty=p)
    e = softdtw.soft_dtw_divergence(x, y, 0.5, x_lengths=xl, y_lengths=yl, backend=backend, cost=shifted)
    assert torch.allclose(d, e, rtol=1e-10, atol=1e-10)
    assert torch.allclose(softdtw.soft_dtw_divergence(x, x, 0.5, backend=backend, step_penalty=p).cpu(),
                          torch.zeros(3, dtype=F64), atol=1e-12)


@pytest.mark.parametrize("option", ["open_begin", "open_end"])
def test_divergence_refuses_open_ends(option):
    x, y = _data()
    with pytest.raises(ValueError, match=f"divergence does not take {option}"):
        softdtw.soft_dtw_divergence(x, y, 0.5, **{option: True})
    with pytest.raises(ValueError, match=option):
        softdtw.SoftDTW(0.5, normalize=True, **{option: True})


# --- SoftDTW --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
def test_soft_dtw_module_with_the_options(variant):
    ob, oe, pen = variant
    x, y = _data(seed=8)
    xl, yl = _lengths()
    p = None if pen is None else torch.nn.Parameter(torch.tensor(pen, dtype=F64))
    loss = softdtw.SoftDTW(0.1, reduction="sum", backend="cpu", open_begin=ob, open_end=oe, step_penalty=p)
    xs = x.clone().requires_grad_()
    v = loss(xs, y, xl, yl)
    want = _oracle(x, y, 0.1, variant)
    assert float(v) == pytest.approx(float(want[0].sum()), rel=1e-10)
    v.backward()
    assert torch.allclose(xs.grad, want[1], atol=1e-9)
    if p is not None:
        assert float(p.grad) == pytest.approx(float(want[4]), rel=1e-8, abs=1e-10)
    assert ("open_end=True" in repr(loss)) == oe


# --- the ops: opcheck, eager against the ops, torch.compile ---------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck_variant_schemas(backend):
    x, y = _data(seed=9, B=2, N=3, M=5)
    xl, yl = torch.tensor([3, 2]), torch.tensor([5, 3])
    gamma = torch.tensor(0.5, dtype=F64)
    pen = torch.tensor(0.3, dtype=F64)
    grad = torch.rand(2, dtype=F64)
    x, y, xl, yl, gamma, pen, grad = _on(backend, x, y, xl, yl, gamma, pen, grad)
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y)
    # cuda: the stored table has padding slots the kernels never write, so AOT's bitwise comparison of the
    # forward's outputs cannot hold for it (as in tests/test_cuda_integration.py).
    utils = ("test_schema", "test_autograd_registration", "test_faketensor") if backend == "cuda" else \
        torch.library._OPCHECK_DEFAULT_UTILS
    for opts in ((True, False, None), (False, True, pen), (True, True, pen)):
        rg = [t.clone().requires_grad_() for t in (x, y, gamma)]
        prg = None if opts[2] is None else pen.clone().requires_grad_()
        torch.library.opcheck(_ops.forward, (*rg, "sqeuclidean", xl, yl, None, "store", backend, opts[0], opts[1],
                                             prg), test_utils=utils)
        torch.library.opcheck(_ops.forward_cost, (C.clone().requires_grad_(), rg[2], xl, yl, None, "store", backend,
                                                  opts[0], opts[1], prg), test_utils=utils)
        value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", backend, *opts)
        out = _ops.backward(grad, x, y, gamma, "sqeuclidean", xl, yl, None, value, saved, "store", backend, *opts)
        assert out[3].shape == ((2,) if opts[2] is not None else (0,))
        torch.library.opcheck(_ops.backward, (grad, x, y, gamma, "sqeuclidean", xl, yl, None, value, saved, "store",
                                              backend, *opts))
        value, saved = _ops.forward_cost(C, gamma, xl, yl, None, "store", backend, *opts)
        torch.library.opcheck(_ops.backward_cost, (grad, C, gamma, xl, yl, None, value, saved, "store", backend,
                                                   *opts))


@pytest.mark.parametrize("backend", BACKENDS)
def test_eager_variant_path_equals_the_custom_ops(backend):
    x, y = _data(seed=10, B=2, N=3, M=5)
    xl, yl = _on(backend, torch.tensor([3, 2]), torch.tensor([5, 3]))
    args = [t.clone().requires_grad_()
            for t in _on(backend, x, y, torch.tensor(0.5, dtype=F64), torch.tensor(0.2, dtype=F64))]
    grad = _on(backend, torch.rand(2, dtype=F64))[0]
    variant = (True, True, args[3])
    eager = _ops.fused_value(*args[:3], "l1", xl, yl, None, "store", backend, variant)
    ge = torch.autograd.grad((eager * grad).sum(), args)
    op, _ = _ops.forward(*args[:3], "l1", xl, yl, None, "store", backend, *variant)
    go = torch.autograd.grad((op * grad).sum(), args)
    assert torch.equal(eager, op) and all(torch.equal(a, b) for a, b in zip(ge, go))


def test_torch_compile_fullgraph_open_end_matches_eager():
    def loss(x, y, p):
        return softdtw.soft_dtw(x, y, 0.2, open_end=True, step_penalty=p, backend="cpu").sum()

    compiled = torch.compile(loss, fullgraph=True)
    x, y = torch.randn(3, 4, 2), torch.randn(3, 7, 2)
    out = []
    for fn in (loss, compiled):
        xs, p = x.clone().requires_grad_(), torch.tensor(0.1, requires_grad=True)
        v = fn(xs, y, p)
        out.append((v.detach(), *torch.autograd.grad(v, (xs, p))))
    for a, b in zip(*out):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


# --- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("option", [dict(open_begin=True), dict(open_end=True), dict(step_penalty=0.5)])
def test_a_backend_without_variants_refuses_them(monkeypatch, option):
    """A backend without the variants raises a NotImplementedError naming the option, never a value without it.
    Simulated on the cpu backend."""
    monkeypatch.setitem(_ops._HAS_VARIANTS, "cpu", False)
    x, y = _data()
    name = next(iter(option))
    for call in (lambda: softdtw.soft_dtw(x, y, 0.5, backend="cpu", **option),
                 lambda: softdtw.dtw_path(x, y, backend="cpu", **option),
                 lambda: softdtw.soft_dtw_from_cost(x @ y.transpose(1, 2), backend="cpu", **option)):
        with pytest.raises(NotImplementedError, match=rf"{name} is not available on the cpu backend.*\.cpu\(\)"):
            call()


@pytest.mark.cuda
@pytest.mark.parametrize("option", [dict(open_begin=True), dict(open_end=True), dict(step_penalty=0.5)])
def test_cuda_runs_the_variants(option):
    """The cuda backend has the variants (its kernels' VAR flags): values, alignments and gradients equal the
    reference backend's on the GPU (tests/backends/test_cuda_variants.py covers the plans, dtypes and memory
    modes; the reference stands in for the cpu backend here, whose Numba compile would take ~40 s)."""
    x, y = (t.cuda() for t in _data())
    xs = x.clone().requires_grad_()
    for fn in (softdtw.soft_dtw, softdtw.soft_dtw_alignment):
        got, want = fn(xs, y, 0.5, **option), fn(x, y, 0.5, backend="reference", **option)
        assert torch.allclose(got.detach(), want, rtol=1e-10, atol=1e-12)
    (g,) = torch.autograd.grad(softdtw.soft_dtw(xs, y, 0.5, **option).sum(), xs)
    xr = x.clone().requires_grad_()
    (gr,) = torch.autograd.grad(softdtw.soft_dtw(xr, y, 0.5, backend="reference", **option).sum(), xr)
    assert torch.allclose(g, gr, rtol=1e-9, atol=1e-12)
    assert torch.allclose(softdtw.dtw(x, y, **option), softdtw.dtw(x, y, backend="reference", **option))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("option", [dict(open_begin=True), dict(open_end=True), dict(step_penalty=0.5)])
def test_create_graph_refuses_the_variants_without_their_hvp(backend, option, monkeypatch):
    """A backend whose hvp_cost lacks the variants (HVP_VARIANTS unset) refuses their second order; reference, cpu
    and cuda have it (tests/test_variants_second_order.py, tests/backends/test_cuda_hvp.py), so it is simulated
    here."""
    monkeypatch.setattr(softdtw.backends.get_backend(backend), "HVP_VARIANTS", False, raising=False)
    name = next(iter(option))
    x, y = _on(backend, *_data())
    xs = x.clone().requires_grad_()
    v = softdtw.soft_dtw(xs, y, 0.5, backend=backend, **option).sum()
    with pytest.raises(NotImplementedError, match=rf"with {name} are not available on the {backend} backend"):
        torch.autograd.grad(v, xs, create_graph=True)
    (g,) = torch.autograd.grad(v, xs)  # first order is fine
    C = softdtw.costs.pairwise_cost("sqeuclidean", x, y).requires_grad_()
    v = softdtw.soft_dtw_from_cost(C, 0.5, backend=backend, **option).sum()
    with pytest.raises(NotImplementedError, match=name):
        torch.autograd.grad(v, C, create_graph=True)
    E = softdtw.soft_dtw_alignment(xs, y, 0.5, backend=backend, **option)
    assert E.requires_grad  # never E without its graph
    with pytest.raises(NotImplementedError, match=name):
        E.sum().backward()


def test_bad_options_say_what_is_wrong():
    x, y = _data()
    with pytest.raises(TypeError, match="open_begin must be True or False"):
        softdtw.soft_dtw(x, y, open_begin="yes")
    with pytest.raises(TypeError, match="open_end must be True or False"):
        softdtw.dtw_path(x, y, open_end=1)
    with pytest.raises(ValueError, match="step_penalty must be a finite number"):
        softdtw.soft_dtw(x, y, step_penalty=float("inf"))
    with pytest.raises(ValueError, match="step_penalty must be a finite number"):
        softdtw.soft_dtw(x, y, step_penalty=torch.tensor(float("nan")))
    with pytest.raises(TypeError, match="step_penalty must be a finite float or a 0-d float tensor"):
        softdtw.soft_dtw(x, y, step_penalty=torch.ones(2))
    with pytest.raises(TypeError, match="step_penalty"):
        softdtw.soft_dtw(x, y, step_penalty="0.5")
    with pytest.raises(ValueError, match="open_end=True cannot be combined with a band"):
        softdtw.soft_dtw(x, y, bandwidth=1, open_end=True)
    with pytest.raises(ValueError, match="open_begin=True cannot be combined with a band"):
        softdtw.soft_dtw_alignment(x, y, itakura_max_slope=2.0, open_begin=True)
    # A band with a step penalty is fine.
    softdtw.soft_dtw(x, y, bandwidth=2, step_penalty=0.1)
