"""The Numba cpu backend against tslearn and the float64 reference, called through the contract.

Sizes stay small (the whole file runs in well under a minute on two cores, Numba compilation
included); the one long case (N = M = 1000) is also quick. Every comparison is a relative error on
fresh random data.
"""
import math

import pytest
import torch
from tslearn.metrics import dtw as ts_dtw
from tslearn.metrics import dtw_path as ts_dtw_path
from tslearn.metrics import soft_dtw as ts_soft_dtw
from tslearn.metrics import soft_dtw_alignment as ts_alignment

from softdtw import costs
from softdtw._windows import build_window, window_has_path
from softdtw.backends import cpu
from softdtw.backends import reference as ref
from tests._helpers import case, rel_err
from tests.backends.test_reference import _constraint  # tslearn's keyword for a band / slope

F64 = torch.float64


@pytest.fixture(params=["lanes", "pairs"], autouse=True)
def plan(request, monkeypatch):
    """Every test runs both ways of spreading a batch: SIMD lanes across pairs (any lane count,
    also partial vectors) and one pair at a time in row strips. cpu._plan picks by batch size."""
    if request.param == "pairs":
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (True, cpu._MAX_LANES[dtype]))
    else:
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (False, min(max_lanes, -(-B // 2))))
    return request.param


def _lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


def _gamma(value, dtype=F64):
    return torch.tensor(value, dtype=dtype)


def _run(backend, x, y, gamma, cost, xl, yl, w, grad=None):
    """(value, dx, dy, dgamma) of one backend through forward(store) + backward."""
    value, saved = backend.forward(x, y, gamma, cost, xl, yl, w, "store")
    if grad is None:
        grad = torch.ones_like(value)
    dx, dy, dg = backend.backward(grad, x, y, gamma, cost, xl, yl, w, value, saved, "store")
    return value, dx, dy, dg


def _dgamma_close(dg, dg0, value, gamma, grad) -> bool:
    """dgamma within 1e-9 relative of the reference's, plus the reference's own rounding.

    The reference forms (value - <E, C>) / gamma, and E's weights exp(-(R_p - S) / gamma) carry
    eps |R| / gamma relative error, so its dgamma is off by ~ eps (value / gamma)^2 (1e-8 at
    gamma = 0.01 with values ~80: it even gets the sign wrong where the true dgamma is ~ -1e-12).
    The cpu backend sums same-signed per-cell entropies instead; dgamma <= 0 always.
    """
    if gamma == 0:
        return bool((dg == 0).all() and (dg0 == 0).all())
    eps = torch.finfo(F64).eps
    slack = 1e-9 * max(1.0, dg0.abs().max().item()) + 64 * eps * grad * (value / gamma) ** 2
    return bool(((dg - dg0).abs() <= slack).all() and (dg <= 0).all())


def _alignment(backend, C, gamma, xl, yl, w):
    """E `(B, N, M)` = dC of sum_b value_b, through forward_cost / backward_cost."""
    value, saved = backend.forward_cost(C, gamma, xl, yl, w, "store")
    E, _ = backend.backward_cost(torch.ones_like(value), C, gamma, xl, yl, w, value, saved, "store")
    return E


# --- against tslearn -------------------------------------------------------------------------------

@pytest.mark.parametrize("N,M,D,gamma,r,s", [
    (5, 7, 2, 1.0, None, None), (12, 12, 1, 0.1, None, None), (1, 6, 3, 1.0, None, None),
    (6, 1, 3, 1.0, None, None), (1, 1, 2, 0.5, None, None), (15, 11, 2, 1.0, 2, None),
    (12, 15, 3, 0.3, None, 2.0), (20, 20, 1, 1e-3, None, None), (9, 14, 2, 10.0, 1, None),
    (17, 13, 2, 0.2, 3, None), (16, 21, 2, 0.2, None, 1.5),
])
def test_value_and_alignment_match_tslearn(N, M, D, gamma, r, s):
    x, y = case(1, N, M, D, seed=N * 31 + M)
    xl, yl = _lengths(N), _lengths(M)
    w = build_window(xl, yl, N, M, r, s)
    kw = _constraint(r, s)
    value, _ = cpu.forward(x, y, _gamma(gamma), "sqeuclidean", xl, yl, w, "none")
    expected = ts_soft_dtw(x[0].numpy(), y[0].numpy(), gamma=gamma, **kw)
    assert abs(value.item() - expected) <= 1e-9 * abs(expected)
    E_ts, _ = ts_alignment(x[0].numpy(), y[0].numpy(), gamma=gamma, **kw)
    E = _alignment(cpu, costs.pairwise_cost("sqeuclidean", x, y), _gamma(gamma), xl, yl, w)
    assert rel_err(E[0], torch.from_numpy(E_ts)) <= 1e-9


@pytest.mark.parametrize("N,M,r", [(8, 8, None), (9, 13, 1), (13, 6, None), (1, 5, None), (10, 10, 0),
                                   (30, 22, 4)])
def test_hard_dtw_value_and_path_match_tslearn(N, M, r):
    x, y = case(1, N, M, 2, seed=N + 100 * M)
    xl, yl = _lengths(N), _lengths(M)
    w = build_window(xl, yl, N, M, r, None)
    kw = _constraint(r, None)
    zero = _gamma(0.0)
    value, _ = cpu.forward(x, y, zero, "sqeuclidean", xl, yl, w, "none")
    # tslearn's dtw is the square root of the path's summed squared distances.
    assert abs(value.item() - ts_dtw(x[0].numpy(), y[0].numpy(), **kw) ** 2) <= 1e-12 * value.item()
    E = _alignment(cpu, costs.pairwise_cost("sqeuclidean", x, y), zero, xl, yl, w)
    path, _ = ts_dtw_path(x[0].numpy(), y[0].numpy(), **kw)
    assert torch.nonzero(E[0] > 0.5).tolist() == [list(p) for p in path]
    assert set(E.unique().tolist()) <= {0.0, 1.0}


# --- against the float64 reference -----------------------------------------------------------------

@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("gamma", [0.0, 0.01, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("band,slope", [(None, None), (2, None), (None, 2.0), (3, 2.0)])
def test_batch_with_lengths_and_windows_matches_reference(cost, gamma, band, slope):
    B, N, M, D = 5, 13, 10, 3
    x, y = case(B, N, M, D, seed=11)
    if slope is None:
        xl, yl = _lengths(13, 4, 1, 13, 9), _lengths(10, 10, 6, 1, 7)
    else:  # an Itakura parallelogram needs lengths within a factor `slope` of each other
        xl, yl = _lengths(13, 6, 5, 13, 9), _lengths(10, 10, 6, 7, 7)
    w = build_window(xl, yl, N, M, band, slope)
    assert w is None or window_has_path(w, xl, yl).all()
    g = _gamma(gamma)
    grad = torch.rand(B, dtype=F64, generator=torch.Generator().manual_seed(1)) + 0.5
    v, dx, dy, dg = _run(cpu, x, y, g, cost, xl, yl, w, grad)
    v0, dx0, dy0, dg0 = _run(ref, x, y, g, cost, xl, yl, w, grad)
    assert rel_err(v, v0) <= 1e-9
    assert rel_err(dx, dx0) <= 1e-9 and rel_err(dy, dy0) <= 1e-9
    assert _dgamma_close(dg, dg0, v0, gamma, grad)
    # Padded steps get exactly zero gradient.
    for b in range(B):
        assert (dx[b, xl[b]:] == 0).all() and (dy[b, yl[b]:] == 0).all()


@pytest.mark.parametrize("gamma", [0.0, 0.05, 1.0])
def test_precomputed_cost_matches_reference(gamma):
    B, N, M = 4, 9, 12
    g = torch.Generator().manual_seed(3)
    C = torch.rand(B, N, M, dtype=F64, generator=g) * 3
    xl, yl = _lengths(9, 2, 9, 6), _lengths(12, 12, 3, 8)
    w = build_window(xl, yl, N, M, 3, None)
    grad = torch.rand(B, dtype=F64, generator=g) + 0.5
    v, saved = cpu.forward_cost(C, _gamma(gamma), xl, yl, w, "store")
    dC, dg = cpu.backward_cost(grad, C, _gamma(gamma), xl, yl, w, v, saved, "store")
    v0, saved0 = ref.forward_cost(C, _gamma(gamma), xl, yl, w, "store")
    dC0, dg0 = ref.backward_cost(grad, C, _gamma(gamma), xl, yl, w, v0, saved0, "store")
    assert rel_err(v, v0) <= 1e-9 and rel_err(dC, dC0) <= 1e-9
    assert _dgamma_close(dg, dg0, v0, gamma, grad)
    # Cells outside a pair's lengths or window get no gradient.
    assert dC[1, 2:].abs().max() == 0 and dC[2, :, 3:].abs().max() == 0
    assert (dC[0, 8, :5] == 0).all()  # the band (radius 3, n = 9, m = 12) starts row 8 at column 5


def test_many_groups_and_partial_last_group_match_reference():
    """B = 70 spans several SIMD groups of 32 / 16 lanes, the last one partly empty."""
    B, N, M, D = 70, 6, 8, 2
    x, y = case(B, N, M, D, seed=5)
    gen = torch.Generator().manual_seed(9)
    xl = torch.randint(1, N + 1, (B,), generator=gen)
    yl = torch.randint(1, M + 1, (B,), generator=gen)
    g = _gamma(0.3)
    v, dx, dy, dg = _run(cpu, x, y, g, "sqeuclidean", xl, yl, None)
    v0, dx0, dy0, dg0 = _run(ref, x, y, g, "sqeuclidean", xl, yl, None)
    assert rel_err(v, v0) <= 1e-9 and rel_err(dx, dx0) <= 1e-9 and rel_err(dy, dy0) <= 1e-9
    assert _dgamma_close(dg, dg0, v0, 0.3, torch.ones(B, dtype=F64))


def test_dgamma_matches_finite_differences():
    """dgamma is built from per-cell entropies (no cancellation); check it against the value."""
    x, y = case(3, 10, 8, 2, seed=4)
    xl, yl = _lengths(10, 10, 10), _lengths(8, 8, 8)
    for gamma in (0.05, 1.0):
        _, _, _, dg = _run(cpu, x, y, _gamma(gamma), "sqeuclidean", xl, yl, None)
        h = 1e-6 * gamma
        up, _ = cpu.forward(x, y, _gamma(gamma + h), "sqeuclidean", xl, yl, None, "none")
        down, _ = cpu.forward(x, y, _gamma(gamma - h), "sqeuclidean", xl, yl, None, "none")
        assert rel_err(dg, (up - down) / (2 * h)) <= 1e-5


# --- float32, small gamma, padding, memory modes ---------------------------------------------------

@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_float32_within_1e5_of_float64(cost, gamma):
    B, N, M, D = 6, 40, 33, 4
    x, y = case(B, N, M, D, seed=21)
    xl, yl = _lengths(40, 40, 17, 40, 25, 3), _lengths(33, 12, 33, 33, 20, 33)
    w = build_window(xl, yl, N, M, 5, None)
    g = _gamma(gamma)
    v, dx, dy, dg = _run(cpu, x.float(), y.float(), g.float(), cost, xl, yl, w)
    v0, dx0, dy0, dg0 = _run(cpu, x, y, g, cost, xl, yl, w)
    assert v.dtype == dx.dtype == dy.dtype == dg.dtype == torch.float32
    for got, want in ((v, v0), (dx, dx0), (dy, dy0), (dg, dg0)):
        assert rel_err(got, want) <= 1e-5
    # Values only (the all-float32 path) is as close.
    v_none, _ = cpu.forward(x.float(), y.float(), g.float(), cost, xl, yl, w, "none")
    assert rel_err(v_none, v0) <= 1e-5


def test_float32_values_of_long_pairs_keep_a_float64_state():
    """Past N + M = F32_STATE_MAX the value-only pass runs its DP in float64 (a float32 R drifts with the path:
    4.2e-5 at 3000 x 70000, 1.3e-5 at 65536^2 before), so long float32 values stay within 1e-6 of float64."""
    N, M = 1500, 40000
    assert N + M > cpu.F32_STATE_MAX
    x, y = case(2, N, M, 1, seed=40000)
    y = y + 1.0  # costs O(1) everywhere: values ~4e4
    g = _gamma(1.0)
    xl, yl = _lengths(N, 1200), _lengths(M, 35000)
    v32, _ = cpu.forward(x.float(), y.float(), g.float(), "sqeuclidean", xl, yl, None, "none")
    v64, _ = cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, "none")
    assert v32.dtype == torch.float32 and float(v64.abs().min()) > 1e4
    assert rel_err(v32, v64) <= 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tiny_gamma_long_series_is_finite_and_close_to_hard_dtw(dtype):
    B, N, M, D = 2, 1000, 1000, 2
    x, y = case(B, N, M, D, dtype=dtype, seed=8)
    xl, yl = _lengths(N, 700), _lengths(M, 1000)
    v, dx, dy, dg = _run(cpu, x, y, _gamma(1e-4, dtype), "sqeuclidean", xl, yl, None)
    for t in (v, dx, dy, dg):
        assert torch.isfinite(t).all()
    hard, _ = cpu.forward(x, y, _gamma(0.0, dtype), "sqeuclidean", xl, yl, None, "none")
    # hard - gamma log(#paths) <= soft <= hard, and #paths <= 3^(N + M).
    slack = 1e-4 * (N + M) * math.log(3)
    assert ((v <= hard * (1 + 1e-5)) & (v >= hard - slack - 1e-5 * hard)).all()
    assert dx.abs().max() > 0 and dy.abs().max() > 0


@pytest.mark.parametrize("gamma", [1e-4, 1e3])
def test_extreme_gamma_matches_reference(gamma):
    x, y = case(3, 12, 9, 2, seed=13)
    xl, yl = _lengths(12, 7, 12), _lengths(9, 9, 4)
    v, dx, dy, dg = _run(cpu, x, y, _gamma(gamma), "sqeuclidean", xl, yl, None)
    v0, dx0, dy0, dg0 = _run(ref, x, y, _gamma(gamma), "sqeuclidean", xl, yl, None)
    assert rel_err(v, v0) <= 1e-9 and rel_err(dx, dx0) <= 1e-9 and rel_err(dy, dy0) <= 1e-9
    assert torch.isfinite(dg).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_padding_leaves_each_pair_unchanged(dtype):
    B, N, M, D = 3, 11, 14, 2
    x, y = case(B, N, M, D, dtype=dtype, seed=17)
    xl, yl = _lengths(11, 6, 3), _lengths(5, 14, 9)
    g = _gamma(0.5, dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    v, dx, dy, dg = _run(cpu, x, y, g, "sqeuclidean", xl, yl, None)
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        xb, yb = x[b:b + 1, :n].contiguous(), y[b:b + 1, :m].contiguous()
        vb, dxb, dyb, dgb = _run(cpu, xb, yb, g, "sqeuclidean", _lengths(n), _lengths(m), None)
        assert rel_err(v[b:b + 1], vb) <= tol
        assert rel_err(dx[b, :n], dxb[0]) <= tol and rel_err(dy[b, :m], dyb[0]) <= tol
        assert (dx[b, n:] == 0).all() and (dy[b, m:] == 0).all()


def test_memory_modes_agree_and_saved_spec_describes_saved():
    B, N, M, D = 4, 7, 9, 3
    for dtype in (torch.float32, torch.float64):
        x, y = case(B, N, M, D, dtype=dtype, seed=2)
        xl, yl = _lengths(7, 7, 2, 5), _lengths(9, 4, 9, 9)
        g = _gamma(0.7, dtype)
        v_store, saved = cpu.forward(x, y, g, "l1", xl, yl, None, "store")
        v_none, empty = cpu.forward(x, y, g, "l1", xl, yl, None, "none")
        assert rel_err(v_none, v_store) <= (1e-6 if dtype == torch.float32 else 1e-12)
        for memory, t in (("store", saved), ("none", empty)):
            shape, sdtype = cpu.saved_spec("fused", B, N, M, D, dtype, memory)
            assert tuple(t.shape) == tuple(shape) and t.dtype == sdtype
        C = costs.pairwise_cost("l1", x, y)
        _, saved_c = cpu.forward_cost(C, g, xl, yl, None, "store")
        shape, sdtype = cpu.saved_spec("cost", B, N, M, 0, dtype, "store")
        assert tuple(saved_c.shape) == tuple(shape) and saved_c.dtype == sdtype
        # A backward given nothing saved recomputes the table.
        grad = torch.ones(B, dtype=dtype)
        with_table = cpu.backward(grad, x, y, g, "l1", xl, yl, None, v_store, saved, "store")
        without = cpu.backward(grad, x, y, g, "l1", xl, yl, None, v_store, empty, "store")
        for a, b in zip(with_table, without):
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_store_table_written_into_a_given_buffer(dtype):
    """forward(..., saved_out=buf) writes every cell of buf (NaN garbage, lengths and a band) and returns it
    as saved: the same bits as a fresh table; a buffer of another shape or dtype is not used."""
    B, N, M, D = 5, 11, 9, 2
    x, y = case(B, N, M, D, dtype=dtype, seed=4)
    xl, yl = _lengths(11, 6, 11, 3, 8), _lengths(9, 9, 4, 7, 9)
    window = build_window(xl, yl, N, M, 3.0, None)
    g = _gamma(0.5, dtype)
    v, saved = cpu.forward(x, y, g, "sqeuclidean", xl, yl, window, "store")
    buf = torch.full((B, N, M), math.nan, dtype=torch.float64)
    v2, saved2 = cpu.forward(x, y, g, "sqeuclidean", xl, yl, window, "store", saved_out=buf)
    assert saved2 is buf and torch.equal(v, v2) and torch.equal(saved, buf)
    other = torch.full((B, N, M + 1), math.nan, dtype=torch.float64)
    _, saved3 = cpu.forward(x, y, g, "sqeuclidean", xl, yl, window, "store", saved_out=other)
    assert saved3 is not other and torch.equal(saved3, saved)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_needs_skips_dy_and_dgamma_and_keeps_the_rest(dtype, cost, memory):
    """backward(needs=(dx, dy, dgamma)): an output not needed is zeros, the others are the full backward's
    (to rounding: a loop without dy's update may sum dx in another order, and without dgamma float64 takes
    the exact weights instead of the fast ones; lengths, a band, gamma = 0.3, the checkpointed backward's
    bands too)."""
    B, N, M, D = 5, 70, 23, 3  # N > 64: two checkpoint bands
    x, y = case(B, N, M, D, dtype=dtype, seed=6)
    xl, yl = _lengths(70, 41, 70, 9, 66), _lengths(23, 23, 12, 20, 5)
    window = build_window(xl, yl, N, M, 8.0, None)
    g = _gamma(0.3, dtype)
    grad = torch.linspace(0.5, 2.0, B, dtype=dtype)
    value, saved = cpu.forward(x, y, g, cost, xl, yl, window, memory)
    full = cpu.backward(grad, x, y, g, cost, xl, yl, window, value, saved, memory)
    assert full[1].abs().sum() > 0 and full[2].abs().sum() > 0
    for needs in [(True, False, False), (True, True, False), (True, False, True), (False, True, True)]:
        got = cpu.backward(grad, x, y, g, cost, xl, yl, window, value, saved, memory, needs=needs)
        tol = 1e-6 if dtype == torch.float32 else 1e-11
        assert rel_err(got[0], full[0]) <= tol  # dx is always computed
        for k in (1, 2):
            if needs[k]:
                assert rel_err(got[k], full[k]) <= tol
            else:
                assert torch.equal(got[k], torch.zeros_like(full[k]))


def test_outputs_are_fresh_and_inputs_untouched():
    x, y = case(2, 5, 6, 2, seed=3)
    x0, y0 = x.clone(), y.clone()
    xl, yl = _lengths(5, 3), _lengths(6, 6)
    v, dx, dy, dg = _run(cpu, x, y, _gamma(1.0), "sqeuclidean", xl, yl, None)
    assert torch.equal(x, x0) and torch.equal(y, y0)
    assert v.shape == (2,) and dx.shape == x.shape and dy.shape == y.shape and dg.shape == (2,)
