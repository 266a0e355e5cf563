"""Value checks of the public API on CUDA, run behind the call's kernels without stopping the host
(backends/cuda/checks.py, _checks.run_checked / settle).

soft_dtw, soft_dtw_divergence and soft_dtw_from_cost check NaN / Inf and a gamma tensor in a kernel queued
behind their own kernels. It writes NaN into the call's results when a value is bad; the host reads its flag
at the end of the call if the GPU has finished it, else in the backward or at the end of the next call. The
errors must be those of the synchronous checks, whatever path the call takes (value only, forward + backward,
several blocks of the check kernel, a nested call from a cost callable). To make "the GPU has not run the
check yet" certain, tests keep the GPU busy (torch.cuda._sleep) before the call. Marked ``cuda``; skipped
without a GPU.
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

#: GPU cycles to spin before a call whose check must still be pending when the call returns (~50 ms).
BUSY = 100_000_000


def _xy(B=3, N=20, M=25, D=2, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g),
            torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g))


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Load every kernel the tests launch and fill the pool of check slots first: loading a module or
    allocating page-locked memory may wait for the GPU, which would finish a check the test means to leave
    pending."""
    from softdtw.backends.cuda import checks

    for dtype in (torch.float32, torch.float64, torch.float16):
        x, y = _xy(dtype=dtype)
        softdtw.soft_dtw(x, y)
        softdtw.soft_dtw(x.requires_grad_(), y).sum().backward()
        softdtw.soft_dtw_divergence(x, y).sum().backward()
    softdtw.soft_dtw_from_cost(torch.rand(2, 5, 6, device="cuda"))
    a = torch.randn(10, device="cuda")
    pending = [checks.start(a.double()) for _ in range(6)] + [checks.start(a) for _ in range(6)]
    assert all(c.ok() for c in pending)
    _checks.settle()
    torch.cuda.synchronize()


def _late(fn):
    """fn() on a busy GPU: it returns before its value check has run (the check is left pending)."""
    _checks.settle()
    torch.cuda._sleep(BUSY)
    out = fn()
    assert len(_checks._PENDING) == 1, "the call waited for its value check"
    return out


def _raises_now_or_at_settle(match, fn):
    """fn() raises ValueError(match) at once, or returns NaN values and the next settle raises it."""
    with pytest.raises(ValueError, match=match):
        v = fn()
        assert torch.isnan(v).all()
        _checks.settle()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("bad,word", [(float("nan"), "NaN"), (float("inf"), "Inf"), (-float("inf"), "Inf")])
@pytest.mark.parametrize("grad", [False, True])
def test_a_bad_value_gives_nan_values_and_its_error_later(dtype, bad, word, grad):
    x, y = _xy(dtype=dtype)
    x[1, 7, 0] = bad
    x.requires_grad_(grad)
    v = _late(lambda: softdtw.soft_dtw(x, y))
    assert v.shape == (3,) and torch.isnan(v).all()  # every value of the call: the call is invalid
    earlier = r"x contains " + word + r".*earlier soft-DTW call on x \(3, 20, 2\) and y \(3, 25, 2\)"
    with pytest.raises(ValueError, match=earlier):
        if grad:
            v.sum().backward()  # the backward reads the check before handing any gradient back
        else:
            _checks.settle()
    assert x.grad is None
    y[2, 24, 1] = bad
    _raises_now_or_at_settle(f"y contains {word}", lambda: softdtw.soft_dtw(x.detach().nan_to_num(0.0, 0.0, 0.0), y))


def test_the_next_call_raises_an_earlier_calls_error_and_later_calls_are_right():
    x, y = _xy(dtype=torch.float64)
    want = softdtw.soft_dtw(x.cpu(), y.cpu(), 0.3)
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    v = _late(lambda: softdtw.soft_dtw(bad, y, 0.3))
    with pytest.raises(ValueError, match=r"x contains NaN.*earlier soft-DTW call"):
        softdtw.soft_dtw(x, y, 0.3)  # a good call: it ends by reading the earlier call's check
    assert torch.isnan(v).all()
    for _ in range(3):
        assert rel_err(softdtw.soft_dtw(x, y, 0.3).cpu(), want) <= 1e-12
        _checks.settle()


def test_a_bad_value_in_the_last_block_of_a_large_input_is_found():
    x, y = _xy(B=64, N=1000, M=10, D=16)  # 1.0M values of x: many blocks of the check kernel
    x[-1, -1, -1] = float("nan")
    _raises_now_or_at_settle("x contains NaN", lambda: softdtw.soft_dtw(x, y))


def test_divergence_and_from_cost_raise_too():
    x, y = _xy()
    y[0, 0, 0] = float("nan")
    _raises_now_or_at_settle("y contains NaN", lambda: softdtw.soft_dtw_divergence(x, y))
    C = torch.rand(2, 5, 6, device="cuda")
    C[1, 4, 5] = float("inf")
    _raises_now_or_at_settle("C contains Inf", lambda: softdtw.soft_dtw_from_cost(C))
    v = _late(lambda: softdtw.soft_dtw_from_cost(C))
    with pytest.raises(ValueError, match=r"C contains Inf.*earlier soft-DTW call on C \(2, 5, 6\)"):
        _checks.settle()
    assert torch.isnan(v).all()


def test_divergence_backward_raises():
    x, y = _xy()
    x.requires_grad_()
    y[0, 3, 1] = float("inf")
    v = _late(lambda: softdtw.soft_dtw_divergence(x, y))
    assert torch.isnan(v).all()
    with pytest.raises(ValueError, match="y contains Inf"):
        v.sum().backward()
    assert x.grad is None


@pytest.mark.parametrize("g", [-0.5, float("nan"), float("inf")])
def test_a_bad_gamma_tensor_on_the_gpu_raises(g):
    x, y = _xy()
    gamma = torch.tensor(g, device="cuda", requires_grad=True)
    _raises_now_or_at_settle("gamma must be a finite number >= 0", lambda: softdtw.soft_dtw(x, y, gamma))


def test_good_calls_after_errors_give_the_right_values():
    x, y = _xy(dtype=torch.float64)
    want = softdtw.soft_dtw(x.cpu(), y.cpu(), 0.3)
    bad = x.clone()
    bad[0, 0, 0] = float("nan")
    for _ in range(3):
        _raises_now_or_at_settle("x contains NaN", lambda: softdtw.soft_dtw(bad, y, 0.3))
        v = softdtw.soft_dtw(x, y, 0.3)
        _checks.settle()
        assert rel_err(v.cpu(), want) <= 1e-12


def test_good_gradients_while_a_check_is_pending():
    x, y = _xy(dtype=torch.float64)
    xr = x.clone().requires_grad_()
    v = _late(lambda: softdtw.soft_dtw(xr, y, 0.3))
    v.sum().backward()  # waits for the check (the GPU is busy): passes
    assert not _checks._PENDING
    xc = x.cpu().requires_grad_()
    softdtw.soft_dtw(xc, y.cpu(), 0.3).sum().backward()
    assert rel_err(xr.grad.cpu(), xc.grad) <= 1e-10


def test_a_nested_call_from_a_cost_callable_keeps_its_own_check():
    x, y = _xy()
    inner = []

    def cost(a, b):  # calls soft-DTW itself (on good data) while the outer check is pending
        inner.append(softdtw.soft_dtw(a.nan_to_num(0.0), b, 1.0))
        return torch.cdist(a, b).square()

    bad = x.clone()
    bad[2, 3, 1] = float("nan")
    _raises_now_or_at_settle("x contains NaN", lambda: softdtw.soft_dtw(bad, y, cost=cost))
    assert len(inner) == 1 and torch.isfinite(inner[0]).all()
    v = softdtw.soft_dtw(x, y, cost=cost)
    _checks.settle()
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


def test_check_kernel_flags_and_poisons_directly():
    from softdtw.backends.cuda import checks

    a = torch.randn(100_000, device="cuda", dtype=torch.float64)
    out = torch.randn(7, device="cuda", dtype=torch.float64)
    before = out.clone()
    assert checks.start(a, None, torch.tensor(0.0, device="cuda", dtype=torch.float64), poison=out).ok()
    assert torch.equal(out, before)  # a good check leaves the results alone
    a[77_777] = float("inf")
    c = checks.start(a, a[:10], poison=out)
    assert not c.ok() and c.slot is None
    assert torch.isnan(out).all()
    b = torch.randn(33, device="cuda")
    assert not checks.start(b, None, torch.tensor(-1e-30, device="cuda")).ok()
    torch.cuda._sleep(BUSY)
    c = checks.start(b, b)
    assert not c.done()  # queued behind the sleep: asking does not wait
    assert c.ok()
