"""Alignment variants (issue 25) at the backend level: open_begin, open_end and step_penalty on the
reference, cpu and cuda backends (cuda: marked ``cuda``), against brute-force path enumeration (tests/_paths.py),
tslearn's subsequence DTW, gradcheck, and each other (memory modes, plans, dtypes).

Tiny sizes: every pair is small enough to enumerate its warping paths.
"""
import itertools

import numpy as np
import pytest
import torch
from tslearn.metrics import dtw_subsequence_path

from softdtw.backends import cpu
from softdtw.backends import reference as ref
from tests._helpers import rel_err
from tests._paths import alignment_matrices, moves, paths, soft_value

F64 = torch.float64
VARIANTS = [dict(open_begin=b, open_end=e) for b, e in itertools.product([False, True], repeat=2)]
GAMMAS = [0.0, 0.1, 1.0]
BACKENDS = {"reference": ref, "cpu": cpu}
CUDA = pytest.param("cuda", marks=pytest.mark.cuda)


class _OnCuda:
    """The cuda backend with CPU tensors in and out: the tests build their data on the CPU."""

    def __getattr__(self, fn):
        from softdtw.backends import cuda as be

        def call(*args, **kwargs):
            move = lambda t: t.cuda() if isinstance(t, torch.Tensor) else t  # noqa: E731
            out = getattr(be, fn)(*map(move, args), **{k: move(v) for k, v in kwargs.items()})
            return tuple(t.cpu() for t in out)
        return call


BACKENDS["cuda"] = _OnCuda()


@pytest.fixture(params=["lanes", "pairs"])
def plan(request, monkeypatch):
    """The cpu backend's two ways of spreading a batch (SIMD lanes across pairs, or one pair at a time
    in row strips), forced whatever the batch size."""
    if request.param == "pairs":
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (True, cpu._MAX_LANES[dtype]))
    else:
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (False, min(max_lanes, -(-B // 2))))
    return request.param


def _oracle(C, gamma, open_begin, open_end, penalty):
    """(value, E, d/dgamma, d/dpenalty) of one pair by enumeration of its paths, float64."""
    n, m = C.shape
    ps = paths(n, m, None, open_begin, open_end)
    A = alignment_matrices(ps, n, m)
    Cg = C.detach().double().clone().requires_grad_()
    g = torch.tensor(float(gamma), dtype=F64, requires_grad=True)
    p = torch.tensor(float(penalty or 0.0), dtype=F64, requires_grad=True)
    v = soft_value(Cg, g, A, p, moves(ps))
    E, dg, dp = torch.autograd.grad(v, (Cg, g, p), allow_unused=True)
    zero = torch.zeros((), dtype=F64)
    return v.detach(), E, (zero if dg is None else dg), (zero if dp is None else dp)


def _run_cost(backend, C, gamma, xl, yl, memory="store", grad=None, **opts):
    """(value, dC, dgamma[, dpenalty]) of a backend's forward_cost + backward_cost."""
    g = torch.tensor(gamma, dtype=C.dtype)
    v, saved = backend.forward_cost(C, g, xl, yl, None, memory, **opts)
    grad = torch.ones(C.shape[0], dtype=C.dtype) if grad is None else grad
    return (v,) + tuple(backend.backward_cost(grad, C, g, xl, yl, None, v, saved, memory, **opts))


def _pen(value, dtype=F64):
    return None if value is None else torch.tensor(value, dtype=dtype)


# --- against path enumeration -------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"b{int(v['open_begin'])}e{int(v['open_end'])}")
@pytest.mark.parametrize("penalty", [None, 0.3, -0.2])
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("name", ["reference", "cpu", CUDA])
def test_matches_path_enumeration_with_lengths(name, gamma, penalty, variant, plan):
    """Values, E, d/dgamma and d/dpenalty of every variant equal the soft-min over the enumerated paths
    (each counted once) of each pair's own (n_b, m_b) block; padded cells get E = 0."""
    torch.manual_seed(hash((gamma, penalty, variant["open_begin"], variant["open_end"])) % 2**31)
    xl, yl = torch.tensor([4, 1, 3, 4]), torch.tensor([5, 3, 1, 2])
    C = torch.rand(4, 4, 5, dtype=F64) * 2
    grad = torch.tensor([1.0, 0.5, 2.0, -1.0], dtype=F64)
    out = _run_cost(BACKENDS[name], C, gamma, xl, yl, grad=grad, step_penalty=_pen(penalty), **variant)
    assert len(out) == (3 if penalty is None else 4)
    for b in range(4):
        n, m = int(xl[b]), int(yl[b])
        v, E, dg, dp = _oracle(C[b, :n, :m], gamma, variant["open_begin"], variant["open_end"], penalty)
        assert float(out[0][b]) == pytest.approx(float(v), rel=1e-12, abs=1e-12)
        assert torch.allclose(out[1][b, :n, :m], grad[b] * E, rtol=1e-10, atol=1e-12)
        pad = torch.ones(4, 5, dtype=torch.bool)
        pad[:n, :m] = False
        assert torch.all(out[1][b][pad] == 0)
        assert float(out[2][b]) == pytest.approx(float(grad[b] * dg), rel=1e-9, abs=1e-11)
        if penalty is not None:
            assert float(out[3][b]) == pytest.approx(float(grad[b] * dp), rel=1e-9, abs=1e-11)


def test_open_begin_counts_each_start_once():
    """A virtual row of zeros used as both diagonal and vertical predecessor would count each start
    twice: smin(0, 0, a) = smin(-gamma log 2, a). With one column, open_begin changes nothing."""
    C = torch.rand(1, 3, 1, dtype=F64)
    one = torch.ones(1, dtype=torch.int64)
    for gamma in (0.1, 1.0):
        g = torch.tensor(gamma, dtype=F64)
        closed, _ = ref.forward_cost(C, g, 3 * one, one, None, "none")
        for backend in (ref, cpu):
            opened, _ = backend.forward_cost(C, g, 3 * one, one, None, "none", open_begin=True)
            assert float(opened) == pytest.approx(float(closed), rel=1e-14)


# --- the cpu backend: memory modes, plans, dtypes, fused costs ----------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"b{int(v['open_begin'])}e{int(v['open_end'])}")
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("memory", ["store", "checkpoint", "none"])
def test_cpu_fused_matches_reference(memory, gamma, variant, plan):
    """Fused sqeuclidean forward + backward (dx, dy, dgamma, dpenalty) with lengths; 40 pairs so that the
    lanes plan fills its vectors."""
    torch.manual_seed(3)
    B, N, M = 40, 6, 7
    x, y = torch.randn(B, N, 2, dtype=F64), torch.randn(B, M, 2, dtype=F64)
    xl, yl = torch.randint(1, N + 1, (B,)), torch.randint(1, M + 1, (B,))
    g, p = torch.tensor(gamma, dtype=F64), _pen(0.25)
    grad = torch.rand(B, dtype=F64)
    opts = dict(variant, step_penalty=p)
    v0, s0 = ref.forward(x, y, g, "sqeuclidean", xl, yl, None, "store", **opts)
    want = (v0,) + ref.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, v0, s0, "store", **opts)
    v1, s1 = cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, memory, **opts)
    got = (v1,) + cpu.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, v1, s1, memory, **opts)
    assert len(got) == 5
    for a, b in zip(got, want):
        assert rel_err(a, b) < 1e-11


@pytest.mark.parametrize("variant", VARIANTS[1:], ids=lambda v: f"b{int(v['open_begin'])}e{int(v['open_end'])}")
@pytest.mark.parametrize("gamma", [0.0, 0.3])
def test_cpu_checkpoint_bands_equal_store(gamma, variant, plan):
    """N = 150 rows: three checkpoint bands of 64 rows, the open begin in the first and the open end
    in the last one recomputed; float64 equal to store mode and to the reference."""
    torch.manual_seed(4)
    B = 3
    x, y = torch.randn(B, 150, 2, dtype=F64), torch.randn(B, 30, 2, dtype=F64)
    xl, yl = torch.tensor([150, 100, 131]), torch.tensor([30, 20, 27])
    g, p = torch.tensor(gamma, dtype=F64), _pen(0.2)
    opts = dict(variant, step_penalty=p)
    res = {}
    for memory in ("store", "checkpoint"):
        v, s = cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, memory, **opts)
        res[memory] = (v,) + cpu.backward(torch.ones(B, dtype=F64), x, y, g, "sqeuclidean", xl, yl, None, v, s,
                                          memory, **opts)
    v, s = ref.forward(x, y, g, "sqeuclidean", xl, yl, None, "store", **opts)
    want = (v,) + ref.backward(torch.ones(B, dtype=F64), x, y, g, "sqeuclidean", xl, yl, None, v, s, "store", **opts)
    for a, b, c in zip(res["checkpoint"], res["store"], want):
        assert rel_err(a, b) < 1e-12
        assert rel_err(b, c) < 1e-10


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"b{int(v['open_begin'])}e{int(v['open_end'])}")
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_cpu_float32_close_to_float64(gamma, variant, plan):
    torch.manual_seed(5)
    B, N, M = 20, 24, 40
    x, y = torch.randn(B, N, 3, dtype=F64), torch.randn(B, M, 3, dtype=F64)
    xl, yl = torch.randint(10, N + 1, (B,)), torch.randint(10, M + 1, (B,))
    out = {}
    for dt in (torch.float32, F64):
        g, p = torch.tensor(gamma, dtype=dt), _pen(0.1, dt)
        opts = dict(variant, step_penalty=p)
        xd, yd = x.to(dt), y.to(dt)
        v, s = cpu.forward(xd, yd, g, "sqeuclidean", xl, yl, None, "store", **opts)
        out[dt] = (v,) + cpu.backward(torch.ones(B, dtype=dt), xd, yd, g, "sqeuclidean", xl, yl, None, v, s,
                                      "store", **opts)
        vn, _ = cpu.forward(xd, yd, g, "sqeuclidean", xl, yl, None, "none", **opts)  # float32 state
        assert rel_err(vn.double(), v.double()) < (1e-5 if dt == torch.float32 else 1e-14)
    for a, b in zip(out[torch.float32], out[F64]):
        assert rel_err(a.double(), b) < 2e-4


def test_zero_penalty_and_defaults_are_bitwise_the_plain_dp(plan):
    """step_penalty = 0 adds exact zeros, and the default options are the plain DP, bit for bit."""
    torch.manual_seed(6)
    x, y = torch.randn(5, 9, 2), torch.randn(5, 11, 2)
    xl, yl = torch.tensor([9, 3, 9, 1, 7]), torch.tensor([11, 11, 2, 5, 8])
    g = torch.tensor(0.5)
    for backend in (ref, cpu):
        v0, s0 = backend.forward(x, y, g, "l1", xl, yl, None, "store")
        v1, s1 = backend.forward(x, y, g, "l1", xl, yl, None, "store", step_penalty=torch.tensor(0.0))
        assert torch.equal(v0, v1) and torch.equal(s0, s1)
        b0 = backend.backward(torch.ones(5), x, y, g, "l1", xl, yl, None, v0, s0, "store")
        b1 = backend.backward(torch.ones(5), x, y, g, "l1", xl, yl, None, v1, s1, "store",
                              step_penalty=torch.tensor(0.0))
        assert len(b0) == 3 and len(b1) == 4
        for a, b in zip(b0, b1):
            assert torch.equal(a, b)


@pytest.mark.parametrize("option", ["open_begin", "open_end"])
@pytest.mark.parametrize("name", ["reference", "cpu", CUDA])
def test_bands_with_open_ends_are_refused(name, option):
    C = torch.rand(1, 4, 4, dtype=F64)
    one = torch.tensor([4])
    window = torch.tensor([[[0, 2], [0, 3], [1, 4], [2, 4]]], dtype=torch.int32)
    with pytest.raises(ValueError, match=f"{option}=True cannot be combined with a band"):
        BACKENDS[name].forward_cost(C, torch.tensor(0.1, dtype=F64), one, one, window, "none", **{option: True})


def test_step_penalty_with_a_band_matches_enumeration():
    """Penalties are fine with bands (closed ends): paths through the band's cells only."""
    torch.manual_seed(7)
    C = torch.rand(1, 4, 5, dtype=F64)
    window = torch.tensor([[[0, 2], [0, 3], [1, 4], [2, 5]]], dtype=torch.int32)
    allowed = torch.zeros(4, 5, dtype=torch.bool)
    for i in range(4):
        allowed[i, window[0, i, 0]:window[0, i, 1]] = True
    ps = paths(4, 5, allowed.tolist())
    A = alignment_matrices(ps, 4, 5)
    want = soft_value(C[0], 0.2, A, 0.4, moves(ps))
    lengths = (torch.tensor([4]), torch.tensor([5]))
    for backend in (ref, cpu):
        v, _ = backend.forward_cost(C, torch.tensor(0.2, dtype=F64), *lengths, window, "none",
                                    step_penalty=torch.tensor(0.4, dtype=F64))
        assert float(v) == pytest.approx(float(want), rel=1e-12)


# --- subsequence DTW against tslearn --------------------------------------------------------------

@pytest.mark.parametrize("name", ["reference", "cpu", CUDA])
@pytest.mark.parametrize("seed", range(4))
def test_subsequence_hard_dtw_matches_tslearn(name, seed):
    """open_begin + open_end, gamma = 0: the value is tslearn's dtw_subsequence_path distance squared
    (it returns sqrt of the summed squared Euclidean costs), and E is its path."""
    rng = np.random.default_rng(seed)
    n, L, D = int(rng.integers(1, 8)), int(rng.integers(8, 40)), int(rng.integers(1, 3))
    q, s = rng.normal(size=(n, D)), rng.normal(size=(L, D))
    path, dist = dtw_subsequence_path(q, s)
    x, y = torch.tensor(q).unsqueeze(0), torch.tensor(s).unsqueeze(0)
    xl, yl = torch.tensor([n]), torch.tensor([L])
    g = torch.tensor(0.0, dtype=F64)
    backend = BACKENDS[name]
    v, saved = backend.forward(x, y, g, "sqeuclidean", xl, yl, None, "store", open_begin=True, open_end=True)
    assert float(v) == pytest.approx(float(dist) ** 2, rel=1e-12, abs=1e-12)
    C = ((x.unsqueeze(2) - y.unsqueeze(1)) ** 2).sum(-1)
    E = _run_cost(backend, C, 0.0, xl, yl, open_begin=True, open_end=True)[1][0]
    assert sorted(map(tuple, E.nonzero().tolist())) == sorted(map(tuple, path))
    assert torch.all((E == 0) | (E == 1))


# --- gradcheck of the reference through its differentiable forward -------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"b{int(v['open_begin'])}e{int(v['open_end'])}")
def test_reference_gradcheck(variant):
    """Autograd through the reference's forward (C, gamma and step_penalty) passes gradcheck, and agrees
    with its analytic backward."""
    torch.manual_seed(8)
    xl, yl = torch.tensor([3, 2]), torch.tensor([4, 4])
    C = torch.rand(2, 3, 4, dtype=F64, requires_grad=True)
    g = torch.tensor(0.3, dtype=F64, requires_grad=True)
    p = torch.tensor(0.15, dtype=F64, requires_grad=True)

    def f(C, g, p):
        return ref.forward_cost(C, g, xl, yl, None, "store", step_penalty=p, **variant)[0]

    assert torch.autograd.gradcheck(f, (C, g, p))
    v = f(C, g, p)
    dC, dg, dp = torch.autograd.grad(v.sum(), (C, g, p))
    out = _run_cost(ref, C.detach(), 0.3, xl, yl, step_penalty=p.detach(), **variant)
    assert torch.allclose(out[1], dC, rtol=1e-10, atol=1e-12)
    assert float(out[2].sum()) == pytest.approx(float(dg), rel=1e-10)
    assert float(out[3].sum()) == pytest.approx(float(dp), rel=1e-10)
