"""Alignment variants (issue 25) on the cuda backend: open_begin, open_end and step_penalty in the kernels'
sequential, chained and checkpointed plans, against the reference backend in float64 on the GPU (itself tested
against path enumeration and the cpu backend in tests/test_alignment_variants.py; the reference needs no Numba
compile, which would take each test worker ~40 s).

Every test is marked ``cuda`` and skipped without a GPU. Tolerances: float64 1e-9, float32 1e-4 (relative to
the largest entry of each output, tests/_helpers.rel_err); d value / d gamma is measured against |value| / gamma
(the two terms of (value - <E, C> - p dv/dp) / gamma nearly cancel, as in tests/backends/test_cuda.py).
"""
from __future__ import annotations

import importlib

import pytest
import torch

import softdtw
import softdtw.costs
from softdtw.backends import reference as ref
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

F64 = torch.float64
TOL = {torch.float64: 1e-9, torch.float32: 1e-4}
# (open_begin, open_end, step_penalty)
VARIANTS = [(True, False, None), (False, True, None), (True, True, None), (False, False, 0.3), (True, True, -0.2),
            (True, False, 0.5), (False, True, 0.25)]


def _vid(v):
    return f"b{int(v[0])}e{int(v[1])}p{v[2]}"


def cuda_backend():
    return importlib.import_module("softdtw.backends.cuda")


def _layout(K, W, chain=False, TH=None):
    return importlib.import_module("softdtw.backends.cuda.launch").forced_plan(K, W, chain=chain, TH=TH)


def _data(B, N, M, D, seed, lengths=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=F64)
    y = torch.randn(B, M, D, generator=g, dtype=F64)
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    if lengths and B > 1:
        xl[1:] = torch.randint(max(1, N // 2), N + 1, (B - 1,), generator=g)
        yl[1:] = torch.randint(max(1, M // 3), M + 1, (B - 1,), generator=g)
    grad = torch.rand(B, generator=g, dtype=F64) + 0.5
    return x, y, xl, yl, grad


def _opts(variant, dtype, device):
    ob, oe, pen = variant
    return dict(open_begin=ob, open_end=oe,
                step_penalty=None if pen is None else torch.tensor(pen, dtype=dtype, device=device))


def _fused(be, x, y, gamma, cost, xl, yl, grad, memory, variant):
    """(value, dx, dy, dgamma[, dpenalty]) of one backend's forward + backward."""
    opts = _opts(variant, x.dtype, x.device)
    g = torch.tensor(gamma, dtype=x.dtype, device=x.device)
    v, saved = be.forward(x, y, g, cost, xl, yl, None, memory, **opts)
    return (v,) + tuple(be.backward(grad, x, y, g, cost, xl, yl, None, v, saved, memory, **opts))


def _ref_fused(x, y, gamma, cost, xl, yl, grad, variant):
    """The reference backend's forward + backward in float64 on the GPU."""
    return _fused(ref, x.cuda().double(), y.cuda().double(), gamma, cost, xl.cuda(), yl.cuda(), grad.cuda().double(),
                  "store", variant)


def _compare(got, want, dtype, gamma, what="", cost=False):
    """(value, dx, dy | dC, dgamma[, dpenalty]): values and gradients by rel_err, dgamma against |value| / gamma."""
    tol = TOL[dtype]
    names = (["value", "dC"] if cost else ["value", "dx", "dy"]) + ["dgamma", "dpenalty"]
    assert len(got) == len(want)
    errs = {}
    for name, a, b in zip(names, got, want):
        a, b = a.detach().double().cpu(), b.detach().double().cpu()
        if name == "dgamma":
            scale = max(float(b.abs().max()), float(want[0].abs().max()) / gamma) if gamma else 1.0
            errs[name] = float((a - b).abs().max()) / max(scale, 1e-300)
        else:
            errs[name] = rel_err(a, b)
    msg = f"{what} " + ", ".join(f"{k}={v:.2e}" for k, v in errs.items())
    assert all(torch.isfinite(t).all() for t in got), f"non-finite output ({msg})"
    assert all(e <= tol for e in errs.values()), msg


# --- fused costs: every plan, memory mode and dtype against the reference backend ----------------------------

# B, N, M, D, cost, (K, W, chain) forced layout (None: the planner's), lengths
CASES = [
    (5, 7, 9, 2, "sqeuclidean", None, True),
    (4, 40, 33, 3, "sqeuclidean", (1, 1, False), True),      # one warp, two chunks, one column per lane
    (3, 70, 300, 1, "l1", (4, 2, False), True),             # sequential chunks of two warps
    (3, 150, 200, 2, "sqeuclidean", (2, 2, True), True),    # chained
    (2, 33, 31, 1, "sqeuclidean", (1, 4, True), False),     # chained, N != M, narrower than a chunk
]


# float64: every variant but the open end with a penalty (the float32 one has it, with its seeds taken back out of
# the penalty sum); float32: the open ends and the penalty, apart and together.
DTYPE_VARIANTS = ([pytest.param(F64, v, id=f"f64-{_vid(v)}") for v in VARIANTS if v != (False, True, 0.25)]
                  + [pytest.param(torch.float32, v, id=f"f32-{_vid(v)}") for v in VARIANTS if v in
                     ((True, True, None), (False, False, 0.3), (True, True, -0.2))])


@pytest.mark.parametrize("dtype,variant", DTYPE_VARIANTS)
@pytest.mark.parametrize("B,N,M,D,cost,layout,lengths", CASES)
def test_fused_matches_reference(dtype, variant, B, N, M, D, cost, layout, lengths):
    x, y, xl, yl, grad = _data(B, N, M, D, seed=N + M + D, lengths=lengths)
    be = cuda_backend()
    for gamma in (0.0, 0.5) if dtype == F64 else (0.5,):
        want = _ref_fused(x, y, gamma, cost, xl, yl, grad, variant)
        args = (x.cuda().to(dtype), y.cuda().to(dtype), gamma, cost, xl.cuda(), yl.cuda(), grad.cuda().to(dtype))
        if layout is None:
            got = _fused(be, *args, "store", variant)
        else:
            with _layout(*layout):
                got = _fused(be, *args, "store", variant)
        _compare(got, want, dtype, gamma, f"gamma={gamma}")


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("variant", [(True, True, None), (True, True, 0.4), (False, True, None), (True, False, -0.3)],
                         ids=_vid)
@pytest.mark.parametrize("gamma", [0.0, 0.3])
def test_checkpoint_equals_store_and_reference(dtype, variant, gamma):
    """memory="checkpoint" (chained, tiles of 160 rows recomputed in the backward: the open begin in the top tile)
    against store and the reference backend; the value-only pass (memory="none") too."""
    if dtype == torch.float32 and gamma == 0.0:
        pytest.skip("hard DTW in float32: ties may break differently from float64")
    x, y, xl, yl, grad = _data(3, 420, 300, 2, seed=11)
    be = cuda_backend()
    want = _ref_fused(x, y, gamma, "sqeuclidean", xl, yl, grad, variant)
    args = (x.cuda().to(dtype), y.cuda().to(dtype), gamma, "sqeuclidean", xl.cuda(), yl.cuda(), grad.cuda().to(dtype))
    with _layout(2, 2, True, 160):
        ckpt = _fused(be, *args, "checkpoint", variant)
        store = _fused(be, *args, "store", variant)
        opts = _opts(variant, dtype, "cuda")
        none, saved = be.forward(args[0], args[1], torch.tensor(gamma, dtype=dtype, device="cuda"), "sqeuclidean",
                                 args[4], args[5], None, "none", **opts)
    assert saved.numel() == 0
    _compare(ckpt, want, dtype, gamma, "checkpoint")
    _compare(store, want, dtype, gamma, "store")
    assert rel_err(none, want[0]) <= TOL[dtype]


# (M, K, W): 16 chunks of 512 columns, and of 256 (two columns per lane)
LONG = [pytest.param(8000, 4, 4, id="M8000-K4W4"), pytest.param(4000, 2, 4, id="M4000-K2W4")]


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("variant", [(True, True, None), (True, True, 0.2), (False, False, 0.2)], ids=_vid)
@pytest.mark.parametrize("M,K,W", LONG)
def test_long_chained_pair(dtype, variant, M, K, W):
    """A short x against a long y, chained over 16 chunks (store, checkpoint), then the planner's layout. (The
    reference's loop over M anti-diagonals sets this test's time.) The float32 closed-end penalty case at K = 2,
    W = 4 gave dy 2.1e-4 before a later chunk's frames started at its column's first row (forward_pair.cuh);
    4.1e-5 since (benchmarks/probes/short_x_precision.py)."""
    x, y, xl, yl, grad = _data(1, 24, M, 1, seed=5)
    be = cuda_backend()
    want = _ref_fused(x, y, 0.2, "sqeuclidean", xl, yl, grad, variant)
    args = (x.cuda().to(dtype), y.cuda().to(dtype), 0.2, "sqeuclidean", xl.cuda(), yl.cuda(), grad.cuda().to(dtype))
    with _layout(K, W, True):
        got = _fused(be, *args, "store", variant)
        ckpt = _fused(be, *args, "checkpoint", variant)
    _compare(got, want, dtype, 0.2, "store")
    _compare(ckpt, want, dtype, 0.2, "checkpoint")
    got = _fused(be, *args, "store", variant)  # the planner's own layout
    _compare(got, want, dtype, 0.2, "planned")


@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_short_x_sequential_chunks_float32(memory):
    """The same 24 x 4000 closed-end penalty pair in the sequential layout (K = 4, W = 1: 32 chunks of 128
    columns run by one block): dy 1.6e-4 before the chunk frames, 3.4e-5 since."""
    x, y, xl, yl, grad = _data(1, 24, 4000, 1, seed=5)
    variant = (False, False, 0.2)
    want = _ref_fused(x, y, 0.2, "sqeuclidean", xl, yl, grad, variant)
    args = (x.cuda().float(), y.cuda().float(), 0.2, "sqeuclidean", xl.cuda(), yl.cuda(), grad.cuda().float())
    with _layout(4, 1, False):
        got = _fused(cuda_backend(), *args, memory, variant)
    _compare(got, want, torch.float32, 0.2, memory)


# --- precomputed and large-D costs ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("variant", [(True, True, None), (False, True, 0.3), (True, False, -0.1)], ids=_vid)
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_precomputed_cost_matches_reference(dtype, variant, memory):
    g = torch.Generator().manual_seed(3)
    C = torch.rand(3, 50, 70, generator=g, dtype=F64) * 2
    xl, yl = torch.tensor([50, 31, 44]), torch.tensor([70, 70, 19])
    grad = torch.rand(3, generator=g, dtype=F64) + 0.5
    gamma = 0.4
    opts = _opts(variant, F64, "cuda")
    gr = torch.tensor(gamma, dtype=F64, device="cuda")
    v, s = ref.forward_cost(C.cuda(), gr, xl.cuda(), yl.cuda(), None, "store", **opts)
    want = (v,) + tuple(ref.backward_cost(grad.cuda(), C.cuda(), gr, xl.cuda(), yl.cuda(), None, v, s, "store",
                                          **opts))
    be = cuda_backend()
    Cd, gd = C.cuda().to(dtype), torch.tensor(gamma, dtype=dtype, device="cuda")
    opts = _opts(variant, dtype, "cuda")
    with _layout(2, 1, memory == "checkpoint", 128 if memory == "checkpoint" else None):
        v, s = be.forward_cost(Cd, gd, xl.cuda(), yl.cuda(), None, memory, **opts)
        got = (v,) + tuple(be.backward_cost(grad.cuda().to(dtype), Cd, gd, xl.cuda(), yl.cuda(), None, v, s, memory,
                                            **opts))
    _compare(got, want, dtype, gamma, memory, cost=True)


@pytest.mark.parametrize("D,cost", [(40, "sqeuclidean"), (20, "l1")])
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_large_d_matches_reference(D, cost, memory):
    """The GEMM paths (the Gram cost in the cells; a precomputed cost; banded for memory="checkpoint")."""
    x, y, xl, yl, grad = _data(3, 60, 90, D, seed=D)
    variant = (True, True, 0.2)
    want = _ref_fused(x, y, 0.7, cost, xl, yl, grad, variant)
    got = _fused(cuda_backend(), x.cuda(), y.cuda(), 0.7, cost, xl.cuda(), yl.cuda(), grad.cuda(), memory, variant)
    _compare(got, want, F64, 0.7, memory)


# --- the penalty: per pair, its identity with closed ends ---------------------------------------------------

def test_per_pair_penalty_equals_separate_calls():
    x, y, xl, yl, grad = _data(4, 30, 45, 2, seed=9)
    pens = torch.tensor([0.0, 0.3, -0.2, 1.5], dtype=F64)
    be = cuda_backend()
    g = torch.tensor(0.5, dtype=F64, device="cuda")
    xd, yd, xld, yld = x.cuda(), y.cuda(), xl.cuda(), yl.cuda()
    v, s = be.forward(xd, yd, g, "sqeuclidean", xld, yld, None, "store", open_end=True, step_penalty=pens.cuda())
    out = be.backward(grad.cuda(), xd, yd, g, "sqeuclidean", xld, yld, None, v, s, "store", open_end=True,
                      step_penalty=pens.cuda())
    for b in range(4):
        want = _ref_fused(x[b:b + 1], y[b:b + 1], 0.5, "sqeuclidean", xl[b:b + 1], yl[b:b + 1], grad[b:b + 1],
                          (False, True, float(pens[b])))
        n, m = int(xl[b]), int(yl[b])
        got = (v[b:b + 1], out[0][b:b + 1, :n], out[1][b:b + 1, :m], out[2][b:b + 1], out[3][b:b + 1])
        _compare(got, (want[0], want[1][:, :n], want[2][:, :m], want[3], want[4]), F64, 0.5, f"pair {b}")


def test_closed_end_penalty_is_a_cost_shift():
    """Closed paths make 2|A| - n - m non-diagonal moves: the penalty p is a cost 2p per cell, less p (n + m)."""
    x, y, xl, yl, _ = _data(3, 64, 80, 1, seed=12)
    p = 0.35
    xd, yd, xld, yld = x.cuda(), y.cuda(), xl.cuda(), yl.cuda()
    v = softdtw.soft_dtw(xd, yd, 0.5, x_lengths=xld, y_lengths=yld, step_penalty=p)
    C = softdtw.costs.pairwise_cost("sqeuclidean", xd, yd) + 2 * p
    w = softdtw.soft_dtw_from_cost(C, 0.5, x_lengths=xld, y_lengths=yld)
    assert torch.allclose(v, w - p * (xld + yld).to(F64), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("layout", [(1, 1, False), (2, 2, True)])
def test_penalty_with_a_band_matches_reference(dtype, layout):
    """Penalties work with bands (closed ends): a Sakoe-Chiba band of radius 6, sequential and chained plans."""
    x, y, xl, yl, grad = _data(3, 60, 75, 1, seed=15)
    from softdtw._windows import build_window
    window = build_window(xl, yl, 60, 75, 6, None)
    pen = 0.3
    gr, pr = torch.tensor(0.4, dtype=F64, device="cuda"), torch.tensor(pen, dtype=F64, device="cuda")
    ra = (x.cuda(), y.cuda(), gr, "sqeuclidean", xl.cuda(), yl.cuda(), window.cuda())
    v, s = ref.forward(*ra, "store", step_penalty=pr)
    want = (v,) + tuple(ref.backward(grad.cuda(), *ra, v, s, "store", step_penalty=pr))
    be = cuda_backend()
    g, p = torch.tensor(0.4, dtype=dtype, device="cuda"), torch.tensor(pen, dtype=dtype, device="cuda")
    args = (x.cuda().to(dtype), y.cuda().to(dtype), g, "sqeuclidean", xl.cuda(), yl.cuda(), window.cuda())
    with _layout(*layout):
        v, s = be.forward(*args, "store", step_penalty=p)
        got = (v,) + tuple(be.backward(grad.cuda().to(dtype), *args, v, s, "store", step_penalty=p))
    _compare(got, want, dtype, 0.4, "band")


# --- hard DTW paths with open ends; the public API and gradcheck ----------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS, ids=_vid)
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("N,M", [(40, 120), (30, 80)])
def test_dtw_path_equals_reference(variant, dtype, N, M):
    """float64: the same paths as the reference backend (ties broken alike, as the cpu backend's); float32 (whose
    reference runs in float64, so near-ties may break apart): the same values."""
    ob, oe, pen = variant
    x, y, xl, yl, _ = _data(4, N, M, 2, seed=21)
    x, y = x.to(dtype), y.to(dtype)
    if dtype == F64:
        want = softdtw.dtw_path(x, y, x_lengths=xl, y_lengths=yl, backend="reference", open_begin=ob, open_end=oe,
                                step_penalty=pen)
        got = softdtw.dtw_path(x.cuda(), y.cuda(), x_lengths=xl.cuda(), y_lengths=yl.cuda(), open_begin=ob,
                               open_end=oe, step_penalty=pen)
        for a, b in zip(got, want):
            assert a.cpu().tolist() == b.tolist()
    vc = softdtw.dtw(x, y, x_lengths=xl, y_lengths=yl, backend="reference", open_begin=ob, open_end=oe,
                     step_penalty=pen)
    vg = softdtw.dtw(x.cuda(), y.cuda(), x_lengths=xl.cuda(), y_lengths=yl.cuda(), open_begin=ob, open_end=oe,
                     step_penalty=pen)
    assert rel_err(vg, vc) <= TOL[dtype]


def test_subsequence_search_path_on_a_long_series():
    """A 16-step query planted in a 30000-step series: the open-ended hard path starts and ends around it."""
    g = torch.Generator().manual_seed(4)
    series = torch.randn(1, 30000, 1, generator=g, dtype=F64)
    q = series[:, 17000:17016].clone()
    path = softdtw.dtw_path(q.cuda(), series.cuda(), open_begin=True, open_end=True)[0]
    assert path[0].tolist() == [0, 17000] and path[-1].tolist() == [15, 17015]
    assert float(softdtw.dtw(q.cuda(), series.cuda(), open_begin=True, open_end=True)) == 0.0


def test_gradcheck_on_cuda():
    x, y, xl, yl, _ = _data(2, 5, 7, 1, seed=13)
    xl, yl = xl.cuda(), yl.cuda()
    for ob, oe in ((True, False), (False, True), (True, True)):
        def f(a, b, gg, pp):
            return softdtw.soft_dtw(a, b, gg, x_lengths=xl, y_lengths=yl, open_begin=ob, open_end=oe,
                                    step_penalty=pp)
        args = tuple(t.cuda().requires_grad_() for t in (x, y, torch.tensor(0.3, dtype=F64),
                                                         torch.tensor(0.2, dtype=F64)))
        assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6)


def test_defaults_are_the_plain_dp():
    """step_penalty = 0 and the plain call agree to the last bit in float64 (float32: the same kernels' variant
    instantiation, up to rounding)."""
    x, y, xl, yl, grad = _data(3, 50, 60, 2, seed=14)
    be = cuda_backend()
    args = (x.cuda(), y.cuda(), 0.5, "sqeuclidean", xl.cuda(), yl.cuda(), grad.cuda())
    plain = _fused(be, *args, "store", (False, False, None))
    zero = _fused(be, *args, "store", (False, False, 0.0))
    for a, b in zip(plain, zero):
        assert rel_err(b, a) <= 1e-13
    assert float(zero[4].abs().max()) > 0  # the expected number of non-diagonal moves


def test_bands_with_open_ends_are_refused():
    x, y, xl, yl, _ = _data(2, 8, 8, 1, seed=1)
    with pytest.raises(ValueError, match="open_end=True cannot be combined with a band"):
        softdtw.soft_dtw(x.cuda(), y.cuda(), bandwidth=2, open_end=True)
