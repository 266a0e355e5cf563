"""Value checks and the range guard of the public API on CUDA (backends/cuda/checks.py, _checks.run_checked).

soft_dtw, soft_dtw_divergence and soft_dtw_from_cost queue a kernel checking NaN / Inf and a gamma tensor,
and the range bound (the inputs' largest magnitude, softdtw._checks.REACH_LIMIT), in front of their own
kernels, and read both after those are queued: a bad value raises inside the call, with the synchronous
checks' message, whatever path the call takes (value only, forward + backward, several blocks of the check
kernel, a nested call from a cost callable, a call whose validation prepare() cached); inputs past what the
kernels hold exactly, and +inf costs (forbidden cells), give the reference backend's exact answer. Some tests
keep the GPU busy (torch.cuda._sleep) first, so the check has not run when the host comes to read it.
Marked ``cuda``; skipped without a GPU.
"""
from __future__ import annotations

import pytest
import torch

import softdtw
from softdtw import _checks
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

#: GPU cycles to spin before a call, so that its check is still queued when the host reads it (~50 ms).
BUSY = 100_000_000


def _xy(B=3, N=20, M=25, D=2, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g),
            torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g))


def _busy():
    """Keep the GPU busy (~50 ms) so that a call's check is still queued when the host reads it."""
    torch.cuda.synchronize()
    torch.cuda._sleep(BUSY)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("bad,word", [(float("nan"), "NaN"), (float("inf"), "Inf"), (-float("inf"), "Inf")])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("busy", [False, True])
def test_soft_dtw_raises_on_bad_values_inside_the_call(dtype, bad, word, grad, busy):
    x, y = _xy(dtype=dtype)
    x[1, 7, 0] = bad
    x.requires_grad_(grad)
    if busy:
        _busy()
    with pytest.raises(ValueError, match=f"x contains {word}"):
        softdtw.soft_dtw(x, y)  # the call reads its check before it returns, busy GPU or not
    assert x.grad is None
    y[2, 24, 1] = bad
    with pytest.raises(ValueError, match=f"y contains {word}"):
        softdtw.soft_dtw(x.detach().nan_to_num(0.0, 0.0, 0.0), y)


def test_a_bad_value_in_the_last_block_of_a_large_input_is_found():
    x, y = _xy(B=64, N=1000, M=10, D=16)  # 1.0M values of x: many blocks of the check kernel
    x[-1, -1, -1] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        softdtw.soft_dtw(x, y)


def test_divergence_and_from_cost_raise_too():
    x, y = _xy()
    y[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="y contains NaN"):
        softdtw.soft_dtw_divergence(x, y)
    C = torch.rand(2, 5, 6, device="cuda")
    C[1, 4, 5] = -float("inf")
    with pytest.raises(ValueError, match="C contains -inf"):
        softdtw.soft_dtw_from_cost(C)
    # +inf is a forbidden cell (issue 26): the check flags it, finish_check lets it through (a cost may be
    # +inf), and the range bound read with it sends the call to the reference backend (the kernels' sentinel
    # cannot hold +inf costs).
    C[1, 4, 5] = float("inf")
    C[0, 2, 3] = float("inf")
    want = softdtw.soft_dtw_from_cost(C.cpu().double(), backend="reference")
    for _ in range(2):
        got = softdtw.soft_dtw_from_cost(C)
        assert got[1] == float("inf") and rel_err(got[0].cpu(), want[0]) <= 1e-6


def test_divergence_backward_gets_no_gradient_of_bad_inputs():
    x, y = _xy()
    x.requires_grad_()
    y[0, 3, 1] = float("inf")
    _busy()
    with pytest.raises(ValueError, match="y contains Inf"):
        softdtw.soft_dtw_divergence(x, y).sum().backward()
    assert x.grad is None


@pytest.mark.parametrize("g", [-0.5, float("nan"), float("inf")])
def test_a_bad_gamma_tensor_on_the_gpu_raises(g):
    x, y = _xy()
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        softdtw.soft_dtw(x, y, torch.tensor(g, device="cuda", requires_grad=True))


def test_good_calls_after_errors_give_the_right_values():
    x, y = _xy(dtype=torch.float64)
    want = softdtw.soft_dtw(x.cpu(), y.cpu(), 0.3)
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    for _ in range(3):
        with pytest.raises(ValueError):
            softdtw.soft_dtw(bad, y, 0.3)
        assert rel_err(softdtw.soft_dtw(x, y, 0.3).cpu(), want) <= 1e-12


def test_good_gradients_on_a_busy_gpu():
    x, y = _xy(dtype=torch.float64)
    xr = x.clone().requires_grad_()
    _busy()
    softdtw.soft_dtw(xr, y, 0.3).sum().backward()
    xc = x.cpu().requires_grad_()
    softdtw.soft_dtw(xc, y.cpu(), 0.3).sum().backward()
    assert rel_err(xr.grad.cpu(), xc.grad) <= 1e-10


def test_a_cached_call_still_checks_values_and_range():
    """prepare() caches a cuda call's validation per (shapes, dtypes, options, float gamma); the values are new
    every call, so a cache hit must still check them and bound their range."""
    x, y = _xy(B=2, N=8, M=9, D=3, seed=4)
    kw = dict(cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, memory="auto", backend=None)
    for _ in range(2):
        softdtw.soft_dtw(x, y, 0.7)
        p = _checks.prepare(x, y, 0.7, x_lengths=None, y_lengths=None, defer=True, **kw)
        assert isinstance(p.pending, _checks._Pending) and p.pending.span == _checks.Span("sqeuclidean", 3, 8, 9)
        _checks.finish_check(p)
        assert not p.pending.out_of_range()
    assert any(k[0] == x.shape and k[-1] == 0.7 for k in _checks._PREPARED)  # cached: the second round was a hit
    big = x * 1e15  # float32: costs ~1e30, far past REACH_LIMIT in log2 units
    want = softdtw.soft_dtw(big.cpu().double(), y.cpu().double(), 0.7, backend="reference")
    got = softdtw.soft_dtw(big, y, 0.7)
    assert torch.isfinite(got).all() and rel_err(got.cpu().double(), want) <= 1e-5
    bad = x.clone()
    bad[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        softdtw.soft_dtw(bad, y, 0.7)
    assert rel_err(softdtw.soft_dtw(x, y, 0.7).cpu(), softdtw.soft_dtw(x.cpu(), y.cpu(), 0.7)) <= 1e-5


def test_a_nested_call_from_a_cost_callable_keeps_its_own_check():
    x, y = _xy()
    inner = []

    def cost(a, b):  # calls soft-DTW itself (on good data) while the outer check is pending
        inner.append(softdtw.soft_dtw(a.nan_to_num(0.0), b, 1.0))
        return torch.cdist(a, b).square()

    bad = x.clone()
    bad[2, 3, 1] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        softdtw.soft_dtw(bad, y, cost=cost)
    assert len(inner) == 1 and torch.isfinite(inner[0]).all()
    v = softdtw.soft_dtw(x, y, cost=cost)
    assert torch.isfinite(v).all()


def test_defer_takes_user_lengths_except_with_a_band():
    """User lengths are checked by the deferred kernel too, and the kernels get copies clamped into range; with a
    band the window is built from the lengths first, so they are checked before any kernel."""
    x, y = _xy()
    kw = dict(cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, memory="auto", backend=None)
    p = _checks.prepare(x, y, 1.0, x_lengths=None, y_lengths=None, defer=True, **kw)
    assert p.pending is not None
    _checks.finish_check(p)
    lengths = torch.tensor([20, 7, 1], device="cuda")
    p = _checks.prepare(x, y, 1.0, x_lengths=lengths, y_lengths=[25, 1, 3], defer=True, **kw)
    assert p.pending is not None and p.x_lengths is not lengths
    assert p.x_lengths.tolist() == [20, 7, 1] and p.y_lengths.tolist() == [25, 1, 3]
    _checks.finish_check(p)
    p = _checks.prepare(x, y, 1.0, x_lengths=lengths, y_lengths=None, defer=True, **dict(kw, bandwidth=3))
    assert p.pending is None


def test_lengths_kernel_clamps_and_flags():
    from softdtw.backends.cuda import checks

    a = torch.randn(1000, device="cuda")
    xl = torch.tensor([1, 5, 10], device="cuda")
    c = checks.start(a, lengths=(xl, 10, None, 0))
    assert c.ok() and torch.equal(c.lengths[0], xl) and c.lengths[1] is None
    yl = torch.tensor([0, 12, 3], device="cuda")
    c = checks.start(a, lengths=(xl, 10, yl, 11))
    assert not c.ok() and c.lengths[0].tolist() == [1, 5, 10] and c.lengths[1].tolist() == [1, 11, 3]
    c = checks.start(a, lengths=(xl, 9, None, 0))  # 10 > 9
    assert not c.ok() and c.lengths[0].tolist() == [1, 5, 9]
    many = torch.full((3000,), 7, device="cuda")  # several blocks; the bad one in the last
    many[2999] = 8
    assert not checks.start(a, lengths=(None, 0, many, 7)).ok()
    _busy()
    assert checks.start(a, lengths=(many, 8, many, 9)).ok()  # the slots' counters were zeroed


@pytest.mark.parametrize("side", ["x", "y"])
@pytest.mark.parametrize("bad", ["zero", "negative", "past"])
@pytest.mark.parametrize("busy", [False, True])
def test_out_of_range_lengths_raise_with_the_synchronous_message(side, bad, busy):
    """Lengths out of range raise inside the call, after its kernels ran on clamped copies, with the message of the
    synchronous check (the CPU's), for soft_dtw (value and gradient), the divergence and soft_dtw_from_cost."""
    x, y = _xy()  # N = 20, M = 25
    T = 20 if side == "x" else 25
    v = {"zero": 0, "negative": -3, "past": T + 1}[bad]
    lengths = torch.tensor([T, 5, v], device="cuda")
    kw = {f"{side}_lengths": lengths}
    with pytest.raises(ValueError) as want:
        softdtw.soft_dtw(x.cpu(), y.cpu(), 0.1, **{f"{side}_lengths": lengths.cpu()})
    msg = str(want.value)
    assert f"{side}_lengths must lie in [1, {T}]" in msg
    xr = x.clone().requires_grad_(True)
    calls = [lambda: softdtw.soft_dtw(x, y, 0.1, **kw),
             lambda: softdtw.soft_dtw(xr, y, 0.1, **kw).sum().backward(),
             lambda: softdtw.soft_dtw_divergence(x, y, 0.1, **kw)]
    for call in calls:
        if busy:
            _busy()
        with pytest.raises(ValueError) as got:
            call()
        assert str(got.value) == msg
    assert xr.grad is None
    C = torch.cdist(x, y) ** 2
    with pytest.raises(ValueError, match=r"must lie in \[1, " + str(T) + r"\]"):
        softdtw.soft_dtw_from_cost(C, 0.1, **kw)


def test_nan_padding_beside_user_lengths_on_the_gpu():
    """As on the CPU: y NaN-padded while x has user lengths is read as y's lengths (the call runs again with them);
    NaN padding of an input whose lengths were given, or NaN inside a series, raises the CPU's message."""
    x, y = _xy()
    xl = torch.tensor([20, 9, 13], device="cuda")
    padded = y.clone()
    padded[1, 18:] = float("nan")
    got = softdtw.soft_dtw(x, padded, 0.1, x_lengths=xl)
    want = softdtw.soft_dtw(x, y, 0.1, x_lengths=xl, y_lengths=torch.tensor([25, 18, 25], device="cuda"))
    assert rel_err(got, want) < 1e-6
    for yl, inside in ((torch.tensor([25, 18, 25], device="cuda"), False), (None, True)):
        bad = padded.clone()
        if inside:
            bad[0, 3, 1] = float("nan")
        with pytest.raises(ValueError) as want_err:
            softdtw.soft_dtw(x.cpu(), bad.cpu(), 0.1, x_lengths=xl.cpu(), y_lengths=None if yl is None else yl.cpu())
        with pytest.raises(ValueError) as got_err:
            softdtw.soft_dtw(x, bad, 0.1, x_lengths=xl, y_lengths=yl)
        assert str(got_err.value) == str(want_err.value)


@pytest.mark.parametrize("D", [1, 3, 64])
def test_a_step_with_user_lengths_makes_no_host_sync(D):
    """Per-pair lengths (a tensor on the GPU, or a list) no longer make the call wait for the GPU: no host
    synchronisation in a loss step, the divergence, soft_dtw_from_cost or DILATE, and the values and gradients
    those of the float64 reference backend."""
    x, y = _xy(B=4, N=40, M=30, D=D)
    xl = torch.tensor([40, 33, 12, 1], device="cuda")
    yl = [30, 2, 30, 17]
    x.requires_grad_(True)
    C = (torch.cdist(x.detach(), y) ** 2).requires_grad_(True)

    def step():
        x.grad = C.grad = None
        a = softdtw.soft_dtw(x, y, 0.1, x_lengths=xl, y_lengths=yl)
        b = softdtw.soft_dtw_divergence(x, y, 0.1, x_lengths=xl, y_lengths=yl)
        c = softdtw.soft_dtw_from_cost(C, 0.1, x_lengths=xl, y_lengths=yl)
        d = softdtw.dilate_loss(x, y, 0.5, 0.1, x_lengths=xl, y_lengths=yl)
        (a.sum() + b.sum() + c.sum() + d.sum()).backward()
        return a, b, c, d

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    gx, gC = x.grad.clone(), C.grad.clone()
    xd, yd, Cd = x.detach().double().cpu().requires_grad_(True), y.double().cpu(), C.detach().double().cpu()
    Cd.requires_grad_(True)
    kw = dict(x_lengths=xl.cpu(), y_lengths=yl, backend="reference")
    want = (softdtw.soft_dtw(xd, yd, 0.1, **kw), softdtw.soft_dtw_divergence(xd, yd, 0.1, **kw),
            softdtw.soft_dtw_from_cost(Cd, 0.1, **kw), softdtw.dilate_loss(xd, yd, 0.5, 0.1, **kw))
    sum(w.sum() for w in want).backward()
    for g, w in zip(got, want):
        assert rel_err(g.detach().double().cpu(), w.detach()) < 1e-4
    assert rel_err(gx.double().cpu(), xd.grad) < 1e-3 and rel_err(gC.double().cpu(), Cd.grad) < 1e-3


def test_check_kernel_flags_directly():
    from softdtw.backends.cuda import checks

    a = torch.randn(100_000, device="cuda", dtype=torch.float64)
    assert checks.start(a, None, torch.tensor(0.0, device="cuda", dtype=torch.float64)).ok()
    # the range bound's inputs come from the same pass: max finite |v| of a and b, and gamma
    for dtype in (torch.float32, torch.float64):
        u = torch.randn(70_001, device="cuda", dtype=dtype)
        v = torch.randn(333, device="cuda", dtype=dtype)
        v[5] = -1e30
        g = torch.tensor(0.37, device="cuda", dtype=dtype)
        c = checks.start(u, v, None, g)
        assert c.ok() and c.vmax == float(v.abs().max()) and c.gamma == float(g)
        c = checks.start(u, None, g)
        assert c.ok() and c.vmax == float(u.abs().max()) and c.gamma == float(g)
        v[7], v[9] = float("nan"), -float("inf")  # NaN is left out of the max, +inf counts
        c = checks.start(u, v, None, g)
        assert not c.ok() and c.vmax == float("inf")
    a[77_777] = float("inf")
    c = checks.start(a, a[:10])
    assert not c.ok() and c.slot is None  # the slot went back to the pool
    b = torch.randn(33, device="cuda")
    assert not checks.start(b, None, torch.tensor(-1e-30, device="cuda")).ok()
    for _ in range(3):  # slots are reused: their counters were zeroed by the kernel
        _busy()
        assert checks.start(b, b).ok()  # queued behind the sleep: ok() waits for it
