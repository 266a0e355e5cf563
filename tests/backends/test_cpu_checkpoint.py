"""memory="checkpoint" on the cpu backend: the same values and gradients as memory="store".

Checkpointing saves R every TH rows and recomputes each band of TH rows in the backward, so
checkpoint and store must agree to rounding: float64 within 1e-12 relative, float32 within 1e-5
(in fact the band recompute repeats the forward's arithmetic and the results are bitwise equal).
Band heights other than the production ones (>= 64) are forced by patching ``cpu.band_rows``, so
that small problems cross many band boundaries: TH = 1, TH < strip height, TH not a multiple of
the 16/32-row strips of the one-pair-at-a-time path, N a multiple of TH and not, N < TH.
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softdtw
from softdtw import _ops, costs
from softdtw._windows import build_window, window_has_path
from softdtw.backends import cpu
from softdtw.backends import reference as ref
from tests._helpers import case, rel_err

F64 = torch.float64
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.fixture(params=["lanes", "pairs"])
def plan(request, monkeypatch):
    """Both ways of spreading a batch (as in test_cpu.py): SIMD lanes across pairs, and one pair
    at a time in row strips (16 or 32 rows)."""
    if request.param == "pairs":
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (True, cpu._MAX_LANES[dtype]))
    else:
        monkeypatch.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (False, min(max_lanes, -(-B // 2))))
    return request.param


def _band_rows(monkeypatch, th):
    if th is not None:
        monkeypatch.setattr(cpu, "band_rows", lambda N: th)


def _lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


def _fused(memory, x, y, gamma, cost, xl, yl, w, grad):
    value, saved = cpu.forward(x, y, gamma, cost, xl, yl, w, memory)
    shape, dtype = cpu.saved_spec("fused", *x.shape[:2], y.shape[1], x.shape[2], x.dtype, memory)
    assert tuple(saved.shape) == tuple(shape) and saved.dtype == dtype
    return (value,) + cpu.backward(grad, x, y, gamma, cost, xl, yl, w, value, saved, memory)


def _given(memory, C, gamma, xl, yl, w, grad):
    value, saved = cpu.forward_cost(C, gamma, xl, yl, w, memory)
    shape, dtype = cpu.saved_spec("cost", *C.shape, 0, C.dtype, memory)
    assert tuple(saved.shape) == tuple(shape) and saved.dtype == dtype
    return (value,) + cpu.backward_cost(grad, C, gamma, xl, yl, w, value, saved, memory)


def _assert_close(got, want, dtype):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        if b.abs().max() == 0:
            assert (a == 0).all()
        else:
            assert rel_err(a, b) <= TOL[dtype]


# (B, N, M, xl, yl, band radius, Itakura slope, TH); TH None = the production rule (>= 64).
CASES = [
    (1, 1, 1, (1,), (1,), None, None, None),
    (1, 1, 9, (1,), (9,), None, None, 1),
    (2, 9, 1, (9, 4), (1, 1), None, None, 2),
    (3, 13, 10, (13, 5, 1), (10, 10, 3), None, None, 1),
    (3, 13, 10, (13, 5, 1), (10, 10, 3), None, None, 4),
    (3, 40, 23, (40, 33, 17), (23, 11, 23), 3, None, 5),
    (2, 40, 23, (40, 32), (23, 20), None, 1.8, 8),
    (2, 48, 48, (48, 48), (48, 30), 4, None, 16),
    (2, 70, 30, (70, 64), (30, 21), None, None, 17),
    (2, 70, 30, (70, 35), (30, 30), 2, None, 35),
    (3, 64, 50, (64, 63, 20), (50, 50, 49), None, None, None),  # N = TH: one band, no checkpoint
    (2, 65, 50, (65, 64), (50, 7), None, None, None),  # one checkpoint, a 1-row band
    (2, 200, 90, (200, 131), (90, 77), 5, None, None),  # N not a multiple of TH = 64
    (1, 30, 200, (30,), (200,), None, None, None),  # N < TH, N < M
    # Many bands through one reused buffer, narrow windows: one pair at a time, the recompute writes only the
    # columns the backward reads (cpu.py, _backward_bands), so a stale cell read would show here.
    (2, 300, 290, (300, 251), (290, 240), 3, None, 16),
    (2, 120, 100, (120, 90), (100, 100), None, 1.5, 8),
]


@pytest.mark.parametrize("B,N,M,xl,yl,band,slope,th", CASES)
@pytest.mark.parametrize("gamma", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_checkpoint_equals_store(plan, monkeypatch, B, N, M, xl, yl, band, slope, th, gamma, dtype):
    _band_rows(monkeypatch, th)
    x, y = case(B, N, M, 3, dtype=dtype, seed=N + 7 * M)
    xl, yl = _lengths(*xl), _lengths(*yl)
    w = build_window(xl, yl, N, M, band, slope)
    assert w is None or window_has_path(w, xl, yl).all()
    g = torch.tensor(gamma, dtype=dtype)
    grad = torch.linspace(0.5, 1.5, B, dtype=dtype)
    for cost in ("sqeuclidean", "l1"):
        got = _fused("checkpoint", x, y, g, cost, xl, yl, w, grad)
        _assert_close(got, _fused("store", x, y, g, cost, xl, yl, w, grad), dtype)
        for b in range(B):  # padded steps get exactly zero gradient
            assert (got[1][b, xl[b]:] == 0).all() and (got[2][b, yl[b]:] == 0).all()
    C = costs.pairwise_cost("sqeuclidean", x, y) + 0.25
    got = _given("checkpoint", C, g, xl, yl, w, grad)
    _assert_close(got, _given("store", C, g, xl, yl, w, grad), dtype)


@pytest.mark.parametrize("th", [None, 3, 7])
@pytest.mark.parametrize("gamma", [0.0, 0.05, 1.0])
def test_checkpoint_matches_reference(plan, monkeypatch, th, gamma):
    _band_rows(monkeypatch, th)
    B, N, M, D = 4, 29, 17, 2
    x, y = case(B, N, M, D, seed=3)
    xl, yl = _lengths(29, 12, 1, 29), _lengths(17, 17, 5, 2)
    w = build_window(xl, yl, N, M, 3, None)
    g = torch.tensor(gamma, dtype=F64)
    grad = torch.tensor([1.0, 0.5, 2.0, 1.5], dtype=F64)
    v, dx, dy, dg = _fused("checkpoint", x, y, g, "sqeuclidean", xl, yl, w, grad)
    v0, saved0 = ref.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    dx0, dy0, dg0 = ref.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v0, saved0, "store")
    assert rel_err(v, v0) <= 1e-9 and rel_err(dx, dx0) <= 1e-9 and rel_err(dy, dy0) <= 1e-9
    if gamma == 0:
        assert (dg == 0).all()
    else:  # the reference's dgamma carries its own rounding (see test_cpu._dgamma_close)
        assert rel_err(dg, dg0) <= 1e-6


def test_checkpoints_are_what_the_backward_reads(monkeypatch):
    """The backward reads the saved rows (changing them changes the gradients), and N <= TH saves
    nothing."""
    _band_rows(monkeypatch, 4)
    x, y = case(2, 12, 9, 2, seed=5)
    xl, yl = _lengths(12, 12), _lengths(9, 9)
    g = torch.tensor(0.5, dtype=F64)
    grad = torch.ones(2, dtype=F64)
    v, saved = cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, "checkpoint")
    assert saved.shape == (2 * 2 * 9,)  # rows 3 and 7 of each pair (row 11 is the last row)
    dx, _, _ = cpu.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, v, saved, "checkpoint")
    shifted = saved.clone().view(2, 2, 9)
    shifted[:, 1, :4] += 3.0  # row 7 of both pairs, log2 units
    dx2, _, _ = cpu.backward(grad, x, y, g, "sqeuclidean", xl, yl, None, v, shifted.view(-1), "checkpoint")
    assert not torch.equal(dx, dx2) and torch.isfinite(dx2).all()
    monkeypatch.undo()
    _, saved = cpu.forward(x, y, g, "sqeuclidean", xl, yl, None, "checkpoint")
    assert saved.numel() == 0 and cpu.band_rows(12) == 64


def test_band_rows_rule():
    assert [cpu.band_rows(n) for n in (1, 64, 4096, 4097, 20000, 100000)] == [64, 64, 64, 96, 160, 320]
    for n in (1, 63, 64, 65, 200, 20000, 70001):
        th, k = cpu._checkpoints(n)
        assert th % 32 == 0 and k * th < n <= (k + 1) * th  # one checkpoint above every band but the first
        assert cpu.saved_spec("fused", 3, n, 5, 2, torch.float32, "checkpoint") == ((3 * k * 5,), F64)
    # Symbolic sizes (torch.compile, dynamic shapes): a flat buffer of unknown length.
    assert cpu.saved_spec("cost", 3, object(), 5, 0, F64, "checkpoint") == (None, F64)
    assert "checkpoint" in cpu.MEMORY_MODES


def test_long_pair_checkpoint_equals_store():
    """N = M = 3000 in float64 (one pair, so the one-pair-at-a-time path): 47 bands of 64 rows."""
    N = 3000
    x, y = case(1, N, N, 1, seed=11)
    y = y + 1.0
    xl, yl = _lengths(N), _lengths(N)
    g = torch.tensor(0.1, dtype=F64)
    grad = torch.ones(1, dtype=F64)
    got = _fused("checkpoint", x, y, g, "sqeuclidean", xl, yl, None, grad)
    want = _fused("store", x, y, g, "sqeuclidean", xl, yl, None, grad)
    # One pair: the band recompute runs with the forward's plan, so it repeats the forward's
    # arithmetic from the checkpoints' exact values and the results are bitwise store's.
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.isfinite(t).all() for t in got) and got[1].abs().max() > 0


def test_chunked_batch_equals_store(monkeypatch):
    """Batches whose band buffer exceeds _BAND_BYTES run in chunks of pairs."""
    monkeypatch.setattr(cpu, "_BAND_BYTES", 1)  # chunks of numba.get_num_threads() pairs
    _band_rows(monkeypatch, 5)
    B, N, M = 7, 23, 11
    x, y = case(B, N, M, 2, seed=9)
    xl = _lengths(23, 1, 17, 23, 9, 23, 5)
    yl = _lengths(11, 11, 4, 1, 11, 8, 11)
    g = torch.tensor(0.3, dtype=F64)
    grad = torch.linspace(0.5, 2.0, B, dtype=F64)
    got = _fused("checkpoint", x, y, g, "l1", xl, yl, None, grad)
    _assert_close(got, _fused("store", x, y, g, "l1", xl, yl, None, grad), F64)


# --- public API, memory="auto" ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_public_api_checkpoint_equals_store(dtype):
    B, N, M, D = 3, 150, 97, 2
    x0, y0 = case(B, N, M, D, dtype=dtype, seed=2)
    xl, yl = [150, 90, 131], [97, 97, 40]
    results = {}
    for memory in ("store", "checkpoint"):
        x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
        gamma = torch.tensor(0.2, dtype=dtype, requires_grad=True)
        kw = dict(x_lengths=xl, y_lengths=yl, bandwidth=10, memory=memory)
        loss = softdtw.soft_dtw(x, y, gamma, **kw) @ torch.tensor([1.0, 2.0, 0.5], dtype=dtype)
        loss = loss + softdtw.soft_dtw_divergence(x, y, gamma, cost="l1", **kw).sum()
        loss.backward()
        results[memory] = (loss.detach(), x.grad, y.grad, gamma.grad)
        C = costs.pairwise_cost("sqeuclidean", x0, y0).requires_grad_()
        softdtw.soft_dtw_from_cost(C, 0.5, x_lengths=xl, y_lengths=yl, memory=memory).sum().backward()
        results[memory] += (C.grad,)
    _assert_close(results["checkpoint"], results["store"], dtype)


def test_auto_picks_checkpoint_when_the_table_does_not_fit(monkeypatch):
    """resolve_memory only compares sizes (nothing is allocated): a 2 GiB table with 1 GiB free
    checkpoints on the CPU, a 32 MiB one stores."""
    monkeypatch.setattr(_ops, "_free_bytes", lambda device: 1 << 30)
    cpu_dev = torch.device("cpu")
    huge = dict(kind="fused", B=1, N=16384, M=16384, D=1, dtype=torch.float32, device=cpu_dev)
    assert _ops.resolve_memory("auto", True, "cpu", **huge) == "checkpoint"
    assert _ops.resolve_memory("auto", True, "cpu", **dict(huge, N=512, M=8192)) == "store"
    assert _ops.resolve_memory("auto", False, "cpu", **huge) == "none"
    assert _ops.resolve_memory("checkpoint", True, "cpu", **dict(huge, N=4, M=4)) == "checkpoint"


def test_auto_checkpoints_through_the_api(monkeypatch):
    """With no free memory, memory="auto" runs the checkpointed backward and gets store's gradients."""
    seen = []
    forward = cpu.forward
    monkeypatch.setattr(cpu, "forward", lambda *a: seen.append(a[-1]) or forward(*a))
    monkeypatch.setattr(_ops, "_SMALL_TABLE", 0)
    monkeypatch.setattr(_ops, "_free_bytes", lambda device: 0)
    x0, y0 = case(2, 80, 70, 2, seed=4)
    grads = []
    for memory in ("auto", "store"):
        x = x0.clone().requires_grad_()
        softdtw.soft_dtw(x, y0, 0.3, memory=memory).sum().backward()
        grads.append(x.grad)
    assert seen == ["checkpoint", "store"]
    assert rel_err(grads[0], grads[1]) <= 1e-12


def test_host_free_bytes_is_sane():
    free = _ops._free_bytes(torch.device("cpu"))
    assert isinstance(free, int) and 0 < free


def test_ops_opcheck_and_compile_with_checkpoint():
    x, y = case(2, 70, 9, 2, seed=1)
    gamma = torch.tensor(0.5, dtype=F64)
    xl, yl = _lengths(70, 66), _lengths(9, 6)
    window = build_window(xl, yl, 70, 9, 2, None)
    torch.library.opcheck(_ops.forward, (x.clone().requires_grad_(), y, gamma, "sqeuclidean", xl, yl,
                                         window, "checkpoint", "cpu"))
    value, saved = _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "checkpoint", "cpu")
    assert saved.shape == (2 * 1 * 9,)
    grad = torch.rand(2, dtype=F64)
    torch.library.opcheck(_ops.backward, (grad, x, y, gamma, "sqeuclidean", xl, yl, window, value, saved,
                                          "checkpoint", "cpu"))

    def loss(x, y):
        return softdtw.soft_dtw(x, y, 0.5, memory="checkpoint").sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for N in (70, 130):
        x, y = case(2, N, 9, 2, seed=N)
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        compiled(xc, y).backward()
        loss(xe, y).backward()
        assert rel_err(xc.grad, xe.grad) <= 1e-12


# --- property test ----------------------------------------------------------------------------------

@st.composite
def _problems(draw):
    B = draw(st.integers(1, 4))
    N = draw(st.integers(1, 40))
    M = draw(st.integers(1, 20))
    xl = draw(st.lists(st.integers(1, N), min_size=B, max_size=B))
    yl = draw(st.lists(st.integers(1, M), min_size=B, max_size=B))
    return dict(B=B, N=N, M=M, D=draw(st.integers(1, 3)), xl=xl, yl=yl,
                band=draw(st.one_of(st.none(), st.integers(0, 4))),
                gamma=draw(st.sampled_from([0.0, 1e-3, 0.1, 1.0, 10.0])),
                cost=draw(st.sampled_from(["sqeuclidean", "l1"])),
                th=draw(st.integers(1, 45)), by_pair=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(_problems())
def test_property_checkpoint_equals_store(monkeypatch, p):
    with monkeypatch.context() as m:
        m.setattr(cpu, "band_rows", lambda N: p["th"])
        if p["by_pair"]:
            m.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (True, cpu._MAX_LANES[dtype]))
        else:
            m.setattr(cpu, "_plan", lambda B, M, D, dtype, max_lanes: (False, min(max_lanes, -(-B // 2))))
        x, y = case(p["B"], p["N"], p["M"], p["D"], seed=p["seed"])
        xl, yl = torch.tensor(p["xl"]), torch.tensor(p["yl"])
        w = build_window(xl, yl, p["N"], p["M"], p["band"], None)
        g = torch.tensor(p["gamma"], dtype=F64)
        grad = torch.rand(p["B"], dtype=F64, generator=torch.Generator().manual_seed(p["seed"])) + 0.5
        got = _fused("checkpoint", x, y, g, p["cost"], xl, yl, w, grad)
        _assert_close(got, _fused("store", x, y, g, p["cost"], xl, yl, w, grad), F64)
