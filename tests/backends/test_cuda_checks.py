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


def test_defer_applies_only_without_user_lengths():
    x, y = _xy()
    kw = dict(cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, memory="auto", backend=None)
    p = _checks.prepare(x, y, 1.0, x_lengths=None, y_lengths=None, defer=True, **kw)
    assert p.pending is not None
    _checks.finish_check(p)
    lengths = torch.full((3,), 20, device="cuda")
    p = _checks.prepare(x, y, 1.0, x_lengths=lengths, y_lengths=None, defer=True, **kw)
    assert p.pending is None  # lengths are checked before any kernel sees them


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
