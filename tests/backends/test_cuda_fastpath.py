"""The C++ launcher of the eager training step (backends/cuda/fastpath.py, fastpath.cpp).

It must be invisible but for its speed: the calls it takes give bitwise the Python path's values and gradients
(the same kernels and arguments), a create_graph=True backward has the Python path's graph, bad values raise the
Python path's errors, NaN padding and inputs past the exact range take the Python path's reruns, and calls it
does not take (first call of a shape, variants, lengths that are not tensors, non-contiguous inputs, CUDA-graph
capture, functorch) run on the Python path. Marked ``cuda``; the switch and a failed build are tested everywhere
in test_fastpath.py.
"""
from __future__ import annotations

import os

import pytest
import torch

import softdtw
import softdtw._windows
from softdtw.backends.cuda import fastpath
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _node(v) -> str:
    return "" if v.grad_fn is None else v.grad_fn.name()


def _taken(v) -> bool:
    """Whether a value came from the launcher: its autograd node (under an unbatched call's select) is the C++
    one."""
    node = v.grad_fn
    if node is not None and node.name().startswith("SelectBackward"):
        node = node.next_functions[0][0]
    return node is not None and "CppNode" in node.name()


@pytest.fixture
def built():
    fastpath.build()
    fastpath.set_enabled(True)
    yield
    fastpath.set_enabled(True)


def _run(x, y, gamma, enabled, cost="sqeuclidean", needs=(True, False), create_graph=False, weights=None, **kw):
    """Value, dx, dy (None when not asked) of sum(soft_dtw) (sum(weights * soft_dtw): a grad of its own per pair),
    twice (the second call of a key is the one the launcher takes), with the launcher on or off."""
    fastpath.set_enabled(enabled)
    for _ in range(2):
        xc, yc = x.clone().requires_grad_(needs[0]), y.clone().requires_grad_(needs[1])
        v = softdtw.soft_dtw(xc, yc, gamma, cost=cost, **kw)
    wanted = [t for t, n in zip((xc, yc), needs) if n]
    loss = v.sum() if weights is None else (weights * v).sum()
    grads = torch.autograd.grad(loss, wanted, create_graph=create_graph) if wanted else []
    it = iter(grads)
    out = [v] + [next(it) if n else None for n in needs]
    return out, (xc, yc)


def _assert_bitwise(fast, slow, taken: bool = True):
    """fast: _run's outputs with the launcher on, slow: with it off; each output is bitwise the other's (None alike).
    taken: the values also say which path ran them (their autograd node)."""
    if taken:
        assert _taken(fast[0]), _node(fast[0])
        assert not _taken(slow[0]), _node(slow[0])
    for a, b in zip(fast, slow):
        if b is None:
            assert a is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b), rel_err(a, b)


CASES = [  # (B, N, M, D, cost, dtype)
    (1, 16, 16, 1, "sqeuclidean", torch.float32),
    (16, 128, 128, 1, "sqeuclidean", torch.float32),
    (64, 96, 96, 7, "sqeuclidean", torch.float32),
    (128, 64, 64, 3, "l1", torch.float32),
    (32, 512, 512, 1, "sqeuclidean", torch.float32),
    (8, 40, 33, 4, "l1", torch.float32),
    (5, 70, 90, 2, "sqeuclidean", torch.float64),
    (4, 64, 48, 16, "l1", torch.float64),
    (32, 128, 128, 64, "sqeuclidean", torch.float32),  # D > 16: the "gram" form
    (16, 400, 300, 80, "sqeuclidean", torch.float32),
    (4, 50, 60, 24, "sqeuclidean", torch.float64),
    # chained plans (forward_chain_kernel, backward_chain_kernel)
    (3, 300, 260, 16, "l1", torch.float64),
    (2, 2048, 2048, 1, "sqeuclidean", torch.float32),
    (1, 3000, 4096, 3, "l1", torch.float32),
    (16, 1024, 1024, 64, "sqeuclidean", torch.float32),  # the "gram" form, its table and x·yᵀ past 64 MiB
]


@pytest.mark.parametrize("B,N,M,D,cost,dtype", CASES)
@pytest.mark.parametrize("needs", [(True, False), (True, True), (False, False)])
def test_bitwise_the_python_path(built, B, N, M, D, cost, dtype, needs):
    g = torch.Generator(device="cuda").manual_seed(B * N + D)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    fast, _ = _run(x, y, 0.1, True, cost, needs)
    slow, _ = _run(x, y, 0.1, False, cost, needs)
    _assert_bitwise(fast, slow, taken=any(needs))  # (a value without a gradient has no node to tell by)


LENGTH_CASES = [  # (B, N, M, D, cost, dtype)
    (16, 128, 128, 1, "sqeuclidean", torch.float32),
    (32, 512, 512, 1, "sqeuclidean", torch.float32),
    (64, 96, 96, 7, "sqeuclidean", torch.float32),
    (8, 40, 33, 4, "l1", torch.float32),
    (5, 70, 90, 2, "sqeuclidean", torch.float64),
    (32, 128, 128, 64, "sqeuclidean", torch.float32),  # the "gram" form
    (16, 400, 300, 80, "sqeuclidean", torch.float32),  # run as (y, x): the lengths swap too
    (2, 2048, 1800, 1, "sqeuclidean", torch.float32),  # chained
    (16, 1024, 1024, 64, "sqeuclidean", torch.float32),  # chained "gram", a table past 64 MiB
]


def _lengths(B: int, N: int, M: int) -> tuple:
    """Per-pair lengths on the CPU, from half to all steps, one pair of length 1 on each side."""
    h = torch.Generator().manual_seed(B + N)
    xl = torch.randint((N + 1) // 2, N + 1, (B,), generator=h)
    yl = torch.randint((M + 1) // 2, M + 1, (B,), generator=h)
    xl[0], yl[-1] = 1, 1
    return xl, yl


@pytest.mark.parametrize("B,N,M,D,cost,dtype", LENGTH_CASES)
@pytest.mark.parametrize("given", ["gpu", "cpu", "x int32"])
def test_lengths_bitwise_the_python_path(built, B, N, M, D, cost, dtype, given):
    """Per-pair lengths as tensors (on the GPU, on the CPU, int32, one side only) go through the launcher, with
    bitwise the Python path's values and gradients."""
    g = torch.Generator(device="cuda").manual_seed(B * N + D)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    xl, yl = _lengths(B, N, M)
    kw = {"gpu": dict(x_lengths=xl.cuda(), y_lengths=yl.cuda()), "cpu": dict(x_lengths=xl, y_lengths=yl),
          "x int32": dict(x_lengths=xl.int().cuda())}[given]
    fast, _ = _run(x, y, 0.1, True, cost, (True, True), **kw)
    slow, _ = _run(x, y, 0.1, False, cost, (True, True), **kw)
    assert _taken(fast[0]), _node(fast[0])
    assert not _taken(slow[0]), _node(slow[0])
    for a, b in zip(fast, slow):
        assert torch.equal(a, b), rel_err(a, b)


AHEAD_CASES = CASES[:8]  # neither "gram" nor chained: plans whose backward runs ahead (fastpath.AHEAD_MAX_CELLS)


def _weights(B: int, dtype, special=()) -> torch.Tensor:
    """A grad of its own per pair: negative, zero, a power of two and not; special values (inf, nan) from pair 1."""
    w = 1.3 - 0.7 * torch.arange(B, dtype=dtype)
    w[0] = 0.5
    if B > 2:
        w[2] = 0.0
    for i, v in enumerate(special):
        w[(1 + i) % B] = v
    return w.cuda()


def _ahead(shape, dtype) -> bool:
    """Whether the launcher's storing plan of x's shape (either side: a call may run transposed) runs ahead."""
    return any(e and k[-1] and k[2] == dtype and shape in (k[0], k[1]) and e.plan in fastpath._AHEAD
               for k, e in fastpath._ENTRIES.items())


@pytest.mark.parametrize("B,N,M,D,cost,dtype", AHEAD_CASES)
@pytest.mark.parametrize("needs", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("lengths", [False, True])
def test_backward_ahead_bitwise_the_python_path(built, B, N, M, D, cost, dtype, needs, lengths):
    """A small storing call runs its backward in the forward with grad 1 and its node only scales by each pair's grad
    (fastpath.cpp, Plan::ahead; scale_grads.cu): bitwise the Python path's gradients, whose backward_kernel takes the
    grad itself, for grads of every kind and with lengths."""
    g = torch.Generator(device="cuda").manual_seed(B * N + D + 7)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    kw = {}
    if lengths:
        xl, yl = _lengths(B, N, M)
        kw = dict(x_lengths=xl.cuda(), y_lengths=yl.cuda())
    w = _weights(B, dtype)
    fast, _ = _run(x, y, 0.1, True, cost, needs, weights=w, **kw)
    slow, _ = _run(x, y, 0.1, False, cost, needs, weights=w, **kw)
    assert _ahead(x.shape, dtype)
    _assert_bitwise(fast, slow)


def test_backward_ahead_with_grads_not_finite(built):
    """An inf or NaN grad reaches the pair's own rows only: rows past its lengths stay zero, as backward_kernel writes
    them (not inf * 0)."""
    B, N, M = 5, 40, 36
    x, y = torch.randn(B, N, 2, device="cuda"), torch.randn(B, M, 2, device="cuda")
    kw = dict(x_lengths=torch.tensor([N, 20, 31, 1, 39], device="cuda"),
              y_lengths=torch.tensor([30, M, 2, 17, 36], device="cuda"))
    w = _weights(B, torch.float32, (float("inf"), float("nan")))
    fast, _ = _run(x, y, 0.1, True, "sqeuclidean", (True, True), weights=w, **kw)
    slow, _ = _run(x, y, 0.1, False, "sqeuclidean", (True, True), weights=w, **kw)
    assert _taken(fast[0]) and _ahead(x.shape, torch.float32)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(fast[1][1, 20:], torch.zeros_like(fast[1][1, 20:]))  # inf's pair, past its length


def test_backward_ahead_off_past_its_bound(built, monkeypatch):
    """Past AHEAD_MAX_CELLS the node runs the backward itself, with the same gradients bitwise."""
    x, y = torch.randn(8, 64, 3, device="cuda"), torch.randn(8, 72, 3, device="cuda")
    w = _weights(8, torch.float32)
    ahead, _ = _run(x, y, 0.1, True, "sqeuclidean", (True, True), weights=w)
    assert _ahead(x.shape, torch.float32)
    monkeypatch.setattr(fastpath, "AHEAD_MAX_CELLS", 0)
    fastpath._PLANS.clear()
    fastpath._ENTRIES.clear()
    try:
        later, _ = _run(x, y, 0.1, True, "sqeuclidean", (True, True), weights=w)
        assert _taken(later[0]) and not _ahead(x.shape, torch.float32)
    finally:
        fastpath._PLANS.clear()
        fastpath._ENTRIES.clear()
    for a, b in zip(ahead, later):
        assert torch.equal(a, b), rel_err(a, b)


def test_lengths_out_of_range_raise_the_python_paths_error(built):
    x, y = torch.randn(4, 20, 2, device="cuda"), torch.randn(4, 22, 2, device="cuda")
    fastpath.set_enabled(True)
    ok = dict(x_lengths=torch.tensor([20, 19, 18, 1], device="cuda"), y_lengths=torch.tensor([3, 22, 5, 9]))
    for _ in range(2):
        v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, **ok)
    assert _taken(v)
    for kw, msg in ((dict(x_lengths=torch.tensor([20, 19, 0, 17], device="cuda")), r"x_lengths must lie in \[1, 20\]"),
                    (dict(x_lengths=torch.tensor([20, 21, 3, 17], device="cuda")), r"x_lengths must lie in \[1, 20\]"),
                    (dict(y_lengths=torch.tensor([23, 1, 1, 1])), r"y_lengths must lie in \[1, 22\]")):
        xr = x.clone().requires_grad_()
        with pytest.raises(ValueError, match=msg):
            softdtw.soft_dtw(xr, y, 0.1, **kw)
        assert xr.grad is None
    v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, **ok)
    fastpath.set_enabled(False)
    w = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, **ok)
    assert _taken(v) and torch.equal(v, w)


def test_lengths_it_leaves_to_the_python_path_raise_its_errors(built):
    """Lengths the launcher does not read (a float or bool tensor, a wrong shape, a 2-d tensor) go to the Python
    path, whose error names them; lists and NumPy arrays are read there too, with the launcher's results."""
    x, y = torch.randn(4, 20, 2, device="cuda"), torch.randn(4, 22, 2, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    assert _taken(v)
    good = torch.tensor([20, 19, 18, 1])
    for kw, err, msg in ((dict(x_lengths=good.float()), TypeError, "x_lengths must be an integer tensor"),
                         (dict(y_lengths=torch.ones(4, dtype=torch.bool)), TypeError, "y_lengths must be an integer"),
                         (dict(x_lengths=good[:3].cuda()), ValueError, r"x_lengths must have shape \(4,\)"),
                         (dict(x_lengths=good.view(2, 2)), ValueError, r"x_lengths must have shape \(4,\)")):
        xr = x.clone().requires_grad_()
        with pytest.raises(err, match=msg):
            softdtw.soft_dtw(xr, y, 0.1, **kw)
        assert xr.grad is None
    v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, x_lengths=good.tolist())
    w = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, x_lengths=good.cuda())
    assert not _taken(v) and _taken(w) and torch.equal(v, w)


def test_lengths_with_value_checks_off(built, monkeypatch):
    """SOFTDTW_CHECK_VALUES=0: the launcher hands the kernels the lengths as given (no lengths_kernel), as the
    Python path does; in range, the same values."""
    x, y = torch.randn(4, 20, 2, device="cuda"), torch.randn(4, 22, 2, device="cuda")
    kw = dict(x_lengths=torch.tensor([20, 19, 18, 1]), y_lengths=torch.tensor([3, 22, 5, 9], dtype=torch.int32))
    fastpath.set_enabled(True)
    for _ in range(2):
        ref = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, **kw)
    monkeypatch.setenv("SOFTDTW_CHECK_VALUES", "0")
    v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1, **kw)
    assert _taken(ref) and _taken(v) and torch.equal(v, ref)


def test_unbatched_and_hard_dtw(built):
    x = torch.randn(30, 2, device="cuda")
    y = torch.randn(25, 2, device="cuda")
    for gamma in (0.0, 1.0):
        fast, _ = _run(x, y, gamma, True)
        slow, _ = _run(x, y, gamma, False)
        assert fast[0].shape == () and _taken(fast[0])
        assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


def test_value_only_is_taken_too(built):
    x, y = torch.randn(4, 50, 3, device="cuda"), torch.randn(4, 60, 3, device="cuda")
    fastpath.set_enabled(True)
    with torch.no_grad():
        for _ in range(2):
            a = softdtw.soft_dtw(x, y, 0.5)
    fastpath.set_enabled(False)
    with torch.no_grad():
        b = softdtw.soft_dtw(x, y, 0.5)
    assert torch.equal(a, b)


@pytest.mark.parametrize("dtype,gamma,lengths", [(torch.float32, 1.0, False), (torch.float32, 0.0, True),
                                                 (torch.float64, 0.1, True)],
                         ids=["f32", "hard-lengths", "f64-lengths"])
def test_two_ended_values_bitwise_the_python_path(built, monkeypatch, dtype, gamma, lengths):
    """A value-only call that two_ended.applies takes runs from both ends in C++ too (Fused::forward_two without a
    gradient, two_ended.forward's launches): the Python function runs for the shape's first call only, and the values
    are bitwise its own, with lengths and for hard DTW; soft_dtw_divergence's value-only terms the same."""
    from softdtw.backends.cuda import two_ended as te

    B, N, M = 2, 4096, 4096
    assert te.applies(B, N, M, 1, dtype, torch.cuda.current_device())
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(B, N, 1, device="cuda", generator=g, dtype=dtype)
    y = torch.randn(B, M, 1, device="cuda", generator=g, dtype=dtype)
    kw = {"x_lengths": torch.tensor([N, N - 777], device="cuda"),
          "y_lengths": torch.tensor([M - 5, M], device="cuda")} if lengths else {}
    calls = []
    real = te.forward
    monkeypatch.setattr(te, "forward", lambda *a: calls.append(1) or real(*a))
    fastpath.set_enabled(True)
    fast, fast_div, later = [], [], []
    with torch.no_grad():
        for fn, out, reps in [(softdtw.soft_dtw, fast, 3), (softdtw.soft_dtw_divergence, fast_div, 2 if gamma else 0)]:
            for _ in range(reps):
                before = len(calls)
                out.append(fn(x, y, gamma, **kw))
            later.append(len(calls) - before if reps else 0)
    assert calls and later == [0, 0], (len(calls), later)  # the first call of a key only
    fastpath.set_enabled(False)
    with torch.no_grad():
        slow = softdtw.soft_dtw(x, y, gamma, **kw)
        slow_div = softdtw.soft_dtw_divergence(x, y, gamma, **kw) if gamma > 0 else None
    assert torch.isfinite(slow).all()
    for v in fast:
        assert torch.equal(v, slow), rel_err(v, slow)
    for v in fast_div:
        assert torch.equal(v, slow_div), rel_err(v, slow_div)


@pytest.mark.parametrize("lengths", [False, True])
def test_create_graph_has_the_python_paths_graph(built, lengths):
    """A gradient penalty through the launcher's node: _FusedGrad, whose backward is the HVP, as on the Python path
    (with per-pair lengths too: the node hands the clamped lengths it ran with to the double backward)."""
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(6, 24, 2, device="cuda", dtype=torch.float64, generator=g)
    y = torch.randn(6, 30, 2, device="cuda", dtype=torch.float64, generator=g)
    kw = dict(x_lengths=torch.tensor([24, 1, 13, 20, 24, 7], device="cuda"),
              y_lengths=torch.tensor([30, 9, 1, 28, 15, 30])) if lengths else {}
    out = {}
    for enabled in (True, False):
        (v, dx, _), (xc, _) = _run(x, y, 0.3, enabled, create_graph=True, **kw)
        assert dx.requires_grad
        penalty = (dx ** 2).sum()
        (h,) = torch.autograd.grad(v.sum() + penalty, xc)
        out[enabled] = (v, dx, h, _taken(v))
    assert out[True][3] and not out[False][3]
    for a, b in zip(out[True][:3], out[False][:3]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gradgradcheck_through_the_launcher(built):
    fastpath.set_enabled(True)
    x = torch.randn(2, 5, 1, device="cuda", dtype=torch.float64)
    y = torch.randn(2, 6, 1, device="cuda", dtype=torch.float64)
    softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.7)  # the key's first call: the Python path
    xc = x.clone().requires_grad_()
    assert _taken(softdtw.soft_dtw(xc, y, 0.7))
    assert torch.autograd.gradgradcheck(lambda a: softdtw.soft_dtw(a, y, 0.7), (xc,))


@pytest.mark.parametrize("bad,word", [(float("nan"), "NaN"), (float("inf"), "Inf")])
def test_bad_values_raise_the_python_paths_error(built, bad, word):
    x, y = torch.randn(3, 20, 2, device="cuda"), torch.randn(3, 25, 2, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    xb = x.clone()
    xb[1, 7, 0] = bad
    with pytest.raises(ValueError, match=f"x contains {word}"):
        softdtw.soft_dtw(xb.requires_grad_(), y, 0.1)


def test_nan_padding_takes_the_python_paths_rerun(built):
    x, y = torch.randn(3, 20, 2, device="cuda"), torch.randn(3, 25, 2, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    xp = x.clone()
    xp[1, 15:] = float("nan")
    v = softdtw.soft_dtw(xp.requires_grad_(), y, 0.1)
    # Both storing forwards (x requires grad): a value-only pass may differ from a storing one in the last bit
    # (kernels/common.cuh, Link<float>::soft_core and soft_close).
    ref = softdtw.soft_dtw(x.clone().nan_to_num(0.0).requires_grad_(), y, 0.1,
                           x_lengths=torch.tensor([20, 15, 20], device="cuda"))
    torch.testing.assert_close(v, ref, rtol=0, atol=0)


def test_inputs_past_the_exact_range_get_the_reference_answer(built):
    x, y = torch.randn(2, 12, 1, device="cuda"), torch.randn(2, 14, 1, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    big = (x * 1e15).requires_grad_()
    v = softdtw.soft_dtw(big, y * 1e15, 0.1)
    ref = softdtw.soft_dtw(big.detach().double(), (y * 1e15).double(), 0.1, backend="reference")
    assert not _taken(v)
    torch.testing.assert_close(v.double(), ref, rtol=1e-6, atol=0)


def test_calls_it_does_not_take_run_on_the_python_path(built):
    x, y = torch.randn(4, 20, 2, device="cuda"), torch.randn(4, 22, 2, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    assert _taken(softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1))
    cases = [
        dict(x=x.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(), gamma=0.1),  # not contiguous
        dict(x=x.clone().requires_grad_(), gamma=torch.tensor(0.1, device="cuda")),  # a gamma tensor
        dict(x=x.clone().requires_grad_(), gamma=0.1, bandwidth=3),
        dict(x=x.clone().requires_grad_(), gamma=0.1, open_end=True),
        dict(x=x.clone().requires_grad_(), gamma=0.1, memory="checkpoint"),
        dict(x=x.clone().requires_grad_(), gamma=0.1, x_lengths=[20, 19, 18, 17]),  # lengths not in a tensor
        dict(x=x.clone().requires_grad_(), gamma=0.1, cost="cosine"),  # not a fused kernel cost
        dict(x=torch.randn(4, 20, 17, device="cuda", requires_grad=True), y=torch.randn(4, 22, 17, device="cuda"),
             gamma=0.1, cost="l1"),  # D > FUSED_D_MAX with l1: cdist, then the precomputed-cost kernels
        dict(x=torch.randn(4, 20, 17, device="cuda", requires_grad=True), y=torch.randn(4, 22, 17, device="cuda"),
             gamma=0.1, memory="checkpoint", cost="l1"),  # large D, checkpointed, l1: the Python path's row bands
    ]
    for kw in cases:
        xi, yi = kw.pop("x"), kw.pop("y", y)
        for _ in range(2):
            v = softdtw.soft_dtw(xi, yi, **kw)
        assert not _taken(v), kw


def _big_gram(seed: int = 0):
    """16 x 1024², D = 64 in float32: a chained "gram" plan whose stored table and x·yᵀ take 64 MiB each."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(16, 1024, 64, device="cuda", generator=g),
            torch.randn(16, 1024, 64, device="cuda", generator=g))


def test_large_tables_memory_auto_asks_per_call(built, monkeypatch):
    """Past 64 MiB the launcher stores the table where memory="auto" would (at most half the free memory, asked per
    call as _ops._resolve asks) and leaves the call to the Python path, which checkpoints, where it would not."""
    from softdtw import _ops

    x, y = _big_gram(1)
    fast, _ = _run(x, y, 1.0, True, needs=(True, True))
    assert _taken(fast[0])
    monkeypatch.setattr(_ops, "_free_bytes", lambda device: 200 << 20)  # storing needs 128 MiB: more than half
    ckpt, _ = _run(x, y, 1.0, True, needs=(True, True))
    assert not _taken(ckpt[0])
    for a, b in zip(fast, ckpt):
        assert rel_err(a, b) < 1e-4
    monkeypatch.undo()
    again, _ = _run(x, y, 1.0, True, needs=(True, True))
    assert _taken(again[0])
    for a, b in zip(fast, again):
        assert torch.equal(a, b)


CKPT_CASES = [  # (B, N, M, D, dtype): memory="checkpoint" with the "gram" cost, its forward one band of rows
    (16, 1024, 1024, 64, torch.float32),
    (2, 1024, 1100, 24, torch.float32),
    (4, 700, 900, 20, torch.float64),
    (3, 300, 200, 40, torch.float32),  # run as (y, x)
]


@pytest.mark.parametrize("B,N,M,D,dtype", CKPT_CASES)
@pytest.mark.parametrize("needs,lengths", [((True, False), False), ((True, True), False), ((True, True), True)])
def test_checkpoint_bitwise_the_python_path(built, B, N, M, D, dtype, needs, lengths):
    """memory="checkpoint" at large D, where the Python path's forward is one band of rows: the launcher runs that
    forward (the norms, x·yᵀ, the checkpointed chain kernel) and hands its backward to the Python path's
    (_backward_rows). Values and gradients are bitwise the Python path's, with lengths too."""
    g = torch.Generator(device="cuda").manual_seed(B + N + D)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    kw = {"memory": "checkpoint"}
    if lengths:
        h = torch.Generator().manual_seed(B)
        kw.update(x_lengths=torch.randint((N + 1) // 2, N + 1, (B,), generator=h).cuda(),
                  y_lengths=torch.randint((M + 1) // 2, M + 1, (B,), generator=h).cuda())
    fast, _ = _run(x, y, 0.5, True, needs=needs, **kw)
    slow, _ = _run(x, y, 0.5, False, needs=needs, **kw)
    _assert_bitwise(fast, slow)


def test_checkpoint_create_graph_has_the_python_paths_graph(built):
    """A create_graph=True backward of a checkpointed launcher call: the Python path's _FusedGrad (memory
    "checkpoint"), so the gradient and a second derivative through it are the Python path's."""
    x, y = torch.randn(2, 300, 24, device="cuda", dtype=torch.float64), torch.randn(2, 280, 24, device="cuda",
                                                                                   dtype=torch.float64)
    out = []
    for on in (True, False):
        (v, dx, _), (xc, _) = _run(x, y, 0.5, on, needs=(True, False), create_graph=True, memory="checkpoint")
        assert _taken(v) == on
        (h,) = torch.autograd.grad(dx.square().sum(), xc)
        out.append((v, dx, h))
    for a, b in zip(*out):
        assert torch.equal(a, b), rel_err(a, b)


def test_checkpoint_in_several_bands_takes_the_python_path(built, monkeypatch):
    """Where the checkpointed forward needs more than one band of rows (planned so, or memory short now: _fit_rows),
    the call runs on the Python path."""
    import softdtw.backends.cuda as be

    f64 = dict(device="cuda", dtype=torch.float64)
    x, y = torch.randn(2, 1200, 24, **f64), torch.randn(2, 1300, 24, **f64)  # one band of tiles of 256 rows
    v, _ = _run(x, y, 0.5, True, memory="checkpoint")
    assert _taken(v[0])
    monkeypatch.setattr(be, "_fit_rows", lambda h, TH, row_bytes, device: TH)  # memory short: bands of TH rows
    assert be._row_plan(2, 1200, 1300, torch.float64, torch.cuda.current_device())[0].TH < 1200
    short, _ = _run(x, y, 0.5, True, memory="checkpoint")
    assert not _taken(short[0])
    # (each band's GEMM rounds its own way: float64, test_cuda_banded's test_row_bands_equal_one_band)
    assert rel_err(short[0], v[0]) <= 1e-10 and rel_err(short[1], v[1]) <= 1e-9
    monkeypatch.undo()
    monkeypatch.setattr(be, "COST_BAND_BYTES", 1)  # planned in many bands (a shape not planned before; N < M: not
    monkeypatch.setattr(be, "ROW_BANDS", 1000)      # run as (y, x))
    plan, h = be._row_plan(2, 480, 500, torch.float32, torch.cuda.current_device())
    assert be._forward_band_rows(plan, h, 2, 480, 500, torch.float32) < 480
    many, _ = _run(torch.randn(2, 480, 24, device="cuda"), torch.randn(2, 500, 24, device="cuda"), 0.5, True,
                   memory="checkpoint")
    assert not _taken(many[0])


def _cap_memory(extra: int):
    """From now on this process's allocator may reserve only `extra` bytes beyond what it holds
    (torch.cuda.set_per_process_memory_fraction)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + extra) / total)


def _out_of_memory_body():
    """test_running_out_of_memory_raises_the_python_paths_error's steps, in a process of their own."""
    fastpath.build()
    fastpath.set_enabled(True)
    x, y = _big_gram(2)
    for _ in range(2):
        v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 1.0, memory="store")
    assert _taken(v)
    _cap_memory(32 << 20)  # the table alone takes 64 MiB
    with pytest.raises(MemoryError, match=r"B=16 pairs of lengths N=1024, M=1024 needs"):
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 1.0, memory="store")
    torch.cuda.set_per_process_memory_fraction(1.0)
    xc = x.clone().requires_grad_()
    v = softdtw.soft_dtw(xc, y, 1.0, memory="store")
    assert _taken(v)
    _cap_memory(32 << 20)  # the backward's E takes 64 MiB
    with pytest.raises(MemoryError, match=r"B=16 pairs of lengths N=1024, M=1024 needs"):
        v.sum().backward()
    torch.cuda.set_per_process_memory_fraction(1.0)
    print("out-of-memory steps: ok", flush=True)


def test_running_out_of_memory_raises_the_python_paths_error(built):
    """A large table that does not fit: the launcher's forward (memory="store") and backward hand the call to the
    Python path, which raises its MemoryError naming the sizes, not torch's OutOfMemoryError.

    In a fresh process: the cap (what the allocator holds + 32 MiB) also admits the free parts of segments it holds,
    and those depend on what ran before in the same process (in one whole-suite run the 64 MiB table fitted in them and
    nothing was raised)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(p for p in (str(root), str(root / "src"), os.environ.get("PYTHONPATH", "")) if p)
    r = subprocess.run([sys.executable, "-c", "from tests.backends.test_cuda_fastpath import _out_of_memory_body; "
                        "_out_of_memory_body()"], cwd=root, env=dict(os.environ, PYTHONPATH=path),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "out-of-memory steps: ok" in r.stdout, (r.stdout[-3000:] + r.stderr[-6000:])


def test_backward_on_a_side_stream(built):
    x, y = torch.randn(8, 64, 1, device="cuda"), torch.randn(8, 64, 1, device="cuda")
    slow, _ = _run(x, y, 0.1, False)
    fastpath.set_enabled(True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            xc = x.clone().requires_grad_()
            v = softdtw.soft_dtw(xc, y, 0.1)
            v.sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    assert _taken(v)
    assert torch.equal(xc.grad, slow[1])


def test_a_cuda_graph_capture_takes_the_python_path(built):
    from tests._helpers import capture_cuda_graph

    x, y = torch.randn(4, 32, 1, device="cuda"), torch.randn(4, 32, 1, device="cuda")
    fastpath.set_enabled(True)
    graph, v = capture_cuda_graph(lambda: softdtw.soft_dtw(x, y, 0.1))
    graph.replay()
    torch.cuda.synchronize()
    fastpath.set_enabled(False)
    assert torch.equal(v, softdtw.soft_dtw(x, y, 0.1))


def test_gram_form_under_autocast_takes_the_python_path(built):
    """Autocast would lower the gram form's GEMM to float16; the Python path keeps it in x's dtype."""
    x, y = torch.randn(4, 32, 64, device="cuda"), torch.randn(4, 36, 64, device="cuda")
    ref = softdtw.soft_dtw(x.double(), y.double(), 0.5)
    fastpath.set_enabled(True)
    for _ in range(2):
        xc = x.clone().requires_grad_()
        with torch.autocast("cuda", torch.float16):
            v = softdtw.soft_dtw(xc, y, 0.5)
    assert not _taken(v) and v.dtype == torch.float32
    assert rel_err(v, ref) < 1e-5
    v.sum().backward()
    assert torch.isfinite(xc.grad).all()


def test_a_gamma_schedule_reuses_the_shapes_plan(built):
    """A gamma that changes every step (annealing) is taken from its first call on, with one C++ plan."""
    x, y = torch.randn(4, 40, 2, device="cuda"), torch.randn(4, 44, 2, device="cuda")
    fastpath.set_enabled(True)
    softdtw.soft_dtw(x.clone().requires_grad_(), y, 1.0)  # the shape's first call: the Python path
    plans = len(fastpath._PLANS)
    for gamma in (0.9, 0.5, 0.25, 0.125):
        xc = x.clone().requires_grad_()
        v = softdtw.soft_dtw(xc, y, gamma)
        assert _taken(v), gamma
        v.sum().backward()
        fastpath.set_enabled(False)
        xs = x.clone().requires_grad_()
        ref = softdtw.soft_dtw(xs, y, gamma)
        ref.sum().backward()
        fastpath.set_enabled(True)
        assert torch.equal(v, ref) and torch.equal(xc.grad, xs.grad)
    assert len(fastpath._PLANS) == plans


@pytest.mark.parametrize("D", [3, 64])
def test_divergence_and_the_module_take_it_too(built, D):
    """soft_dtw_divergence (SoftDTW(normalize=True)): its three terms through the launcher, as the Python path."""
    g = torch.Generator(device="cuda").manual_seed(D)
    x = torch.randn(8, 50, D, device="cuda", generator=g)
    y = torch.randn(8, 60, D, device="cuda", generator=g)
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        for _ in range(2):  # a shape's first call takes the Python path (and registers the three terms' plans)
            xc = x.clone().requires_grad_()
            v = softdtw.SoftDTW(gamma=0.1, normalize=True, reduction="none")(xc, y)
        v.sum().backward()
        out[enabled] = (v, xc.grad, any("CppNode" in n.name() for n in _nodes(v)))
    assert out[True][2] and not out[False][2]
    torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=0, atol=0)
    xl, yl = torch.tensor([50, 1, 30, 49, 2, 50, 40, 12]), torch.tensor([60, 7, 1, 59, 33, 20, 60, 8])
    for lengths in (dict(x_lengths=xl, y_lengths=yl.cuda()), dict(x_lengths=xl, y_lengths=yl.int())):
        for enabled in (True, False):
            fastpath.set_enabled(enabled)
            for _ in range(2):
                xc = x.clone().requires_grad_()
                v = softdtw.soft_dtw_divergence(xc, y, 0.1, **lengths)
            v.sum().backward()
            out[enabled] = (v, xc.grad, any("CppNode" in n.name() for n in _nodes(v)))
        assert out[True][2] and not out[False][2]
        assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])
    with pytest.raises(ValueError, match=r"y_lengths must lie in \[1, 60\]"):  # the terms' check, after the copy
        softdtw.soft_dtw_divergence(x, y, 0.1, x_lengths=xl, y_lengths=torch.full((8,), 61))


def test_divergence_checks_once_and_keeps_the_python_paths_errors(built):
    """The divergence's three terms run behind one value check (over x and y) and, with lengths, one lengths_kernel;
    a bad value in either input, lengths out of range and inputs past the exact range of any term still give the
    Python path's errors and answers; unbatched calls are taken too."""
    x, y = torch.randn(3, 20, 2, device="cuda"), torch.randn(3, 25, 2, device="cuda")
    xl = torch.tensor([20, 7, 1], device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        v = softdtw.soft_dtw_divergence(x.clone().requires_grad_(), y, 0.1, x_lengths=xl)
    assert any("CppNode" in n.name() for n in _nodes(v))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        softdtw.soft_dtw_divergence(x.clone().requires_grad_(), y, 0.1, x_lengths=xl)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert sum("check_kernel" in n for n in names) == 1, names
    assert sum("lengths_kernel" in n for n in names) == 1, names
    assert sum("forward_kernel" in n for n in names) == 3, names
    yb = y.clone()
    yb[2, 4, 1] = float("nan")
    with pytest.raises(ValueError, match="y contains NaN"):
        softdtw.soft_dtw_divergence(x.clone().requires_grad_(), yb, 0.1)
    xr = x.clone().requires_grad_()
    with pytest.raises(ValueError, match=r"y_lengths must lie in \[1, 25\]"):
        softdtw.soft_dtw_divergence(xr, y, 0.1, y_lengths=torch.tensor([25, 26, 3]))
    assert xr.grad is None
    big = (x * 1e15).requires_grad_()
    v = softdtw.soft_dtw_divergence(big, y * 1e15, 0.1)
    ref = softdtw.soft_dtw_divergence(big.detach().double(), (y * 1e15).double(), 0.1, backend="reference")
    assert not any("CppNode" in n.name() for n in _nodes(v))
    torch.testing.assert_close(v.double(), ref, rtol=1e-6, atol=0)
    out = {}
    for enabled in (True, False):  # unbatched
        fastpath.set_enabled(enabled)
        for _ in range(2):
            x0 = x[0].clone().requires_grad_()
            v = softdtw.soft_dtw_divergence(x0, y[0], 0.1)
        v.backward()
        out[enabled] = (v, x0.grad, any("CppNode" in n.name() for n in _nodes(v)))
    assert out[True][2] and not out[False][2] and out[True][0].shape == ()
    assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])


def _nodes(v):
    """Every autograd node under v."""
    seen, todo = [], [v.grad_fn]
    while todo:
        n = todo.pop()
        if n is not None and n not in seen:
            seen.append(n)
            todo.extend(f for f, _ in n.next_functions)
    return seen


def test_retain_graph_backward_twice(built):
    """The C++ node's saved tensors (and the gram form's x·yᵀ) survive a first backward: a second one agrees."""
    for D in (2, 40):
        x, y = torch.randn(4, 30, D, device="cuda"), torch.randn(4, 34, D, device="cuda")
        fastpath.set_enabled(True)
        for _ in range(2):
            xc = x.clone().requires_grad_()
            v = softdtw.soft_dtw(xc, y, 0.2)
        assert _taken(v)
        (g1,) = torch.autograd.grad(v.sum(), xc, retain_graph=True)
        (g2,) = torch.autograd.grad(v.sum(), xc)
        assert torch.equal(g1, g2)


def test_the_background_build_loads_in_a_fresh_process():
    """The default: the first cuda call starts the build in a thread (a cached build here), later calls use it."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, torch, softdtw
        from softdtw.backends.cuda import fastpath
        x, y = torch.randn(2, 20, 1, device="cuda"), torch.randn(2, 20, 1, device="cuda")
        softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)   # starts the build; the Python path runs this call
        assert fastpath._thread is not None
        fastpath._thread.join(600)
        print(fastpath.status())
        for _ in range(2):
            v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
        print(v.grad_fn.name())
    """)
    env = {k: v for k, v in os.environ.items() if k != "SOFTDTW_FASTPATH"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "loaded" in out.stdout and "CppNode" in out.stdout, out.stdout


# --- the ops' CUDA kernels (fastpath.cpp, register_ops): what a compiled graph runs ------------------------------

def _counts():
    return fastpath.build().op_counts()


def _op_args(B, N, M, D, dtype, lengths=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g)
    gamma = torch.tensor(0.3, device="cuda", dtype=dtype)
    xl = torch.full((B,), N, device="cuda")
    yl = torch.full((B,), M, device="cuda")
    if lengths:
        xl[0], yl[-1] = max(1, N // 2), max(1, M - 3)
    return x, y, gamma, xl, yl


def _ops_once(args, cost, memory, enabled):
    """(value, dx, dy, dgamma) of softdtw::forward then softdtw::backward, with the C++ kernels on or off."""
    from softdtw import _ops

    fastpath.set_enabled(enabled)
    x, y, gamma, xl, yl = args
    value, saved = _ops.forward(x, y, gamma, cost, xl, yl, None, memory, "cuda")
    if memory != "store":
        return (value,)
    grad = torch.linspace(0.5, 1.5, x.shape[0], device="cuda", dtype=x.dtype)
    dx, dy, dgamma, dpen = _ops.backward(grad, x, y, gamma, cost, xl, yl, None, value, saved, memory, "cuda")
    assert dpen.shape == (0,)
    return value, dx, dy, dgamma


OP_CASES = [  # (B, N, M, D, cost, dtype, lengths)
    (1, 16, 16, 1, "sqeuclidean", torch.float32, False),
    (16, 128, 128, 1, "sqeuclidean", torch.float32, True),
    (64, 96, 96, 7, "sqeuclidean", torch.float32, False),
    (128, 64, 64, 3, "l1", torch.float32, True),
    (5, 70, 90, 2, "sqeuclidean", torch.float64, True),
    (32, 128, 128, 64, "sqeuclidean", torch.float32, False),  # the gram form
    (4, 50, 60, 24, "sqeuclidean", torch.float64, True),
    (16, 400, 300, 80, "sqeuclidean", torch.float32, False),  # N > M: a public call of it runs as (y, x)
    (8, 40, 33, 4, "l1", torch.float32, True),
]


@pytest.mark.parametrize("B,N,M,D,cost,dtype,lengths", OP_CASES)
@pytest.mark.parametrize("memory", ["store", "none"])
def test_op_kernels_bitwise_the_python_kernel(built, B, N, M, D, cost, dtype, lengths, memory):
    """softdtw::forward / softdtw::backward on CUDA: the C++ kernels give bitwise the Python kernel's values and
    gradients (the stored table is compared through the backward: its padding slots are never written)."""
    args = _op_args(B, N, M, D, dtype, lengths, seed=B + N + D)
    before = _counts()
    fast = _ops_once(args, cost, memory, True)
    after = _counts()
    assert after[0] - before[0] == (2 if memory == "store" else 1)  # forward (and backward) ran in C++
    slow = _ops_once(args, cost, memory, False)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("B,N,M,D,cost,dtype,lengths", [c for c in OP_CASES if c[3] in (1, 24, 64, 80)])
@pytest.mark.parametrize("needs", [1, 2, 3, 5])
def test_op_backward_needs_bitwise_the_full_call(built, B, N, M, D, cost, dtype, lengths, needs):
    """softdtw::backward's needs (bits 1 dx, 2 dy, 4 dgamma: what a compiled graph asks for, e.g. 1 for a target y
    and a constant gamma): the C++ kernel skips the gram form's GEMMs for what is left out (and x·yᵀ without
    dgamma in float32), and what it returns equals the full call's and the Python kernel's bitwise; the rest is
    empty (0,)."""
    from softdtw import _ops

    x, y, gamma, xl, yl = _op_args(B, N, M, D, dtype, lengths, seed=B + N + D)
    grad = torch.linspace(0.5, 1.5, B, device="cuda", dtype=dtype)
    outs = []
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        value, saved = _ops.forward(x, y, gamma, cost, xl, yl, None, "store", "cuda")
        args = (grad, x, y, gamma, cost, xl, yl, None, value, saved, "store", "cuda")
        before = _counts()
        part = _ops.backward(*args, False, False, None, needs)
        assert _counts()[0] - before[0] == (1 if enabled else 0)
        outs.append((_ops.backward(*args), part))
    for full, part in outs:
        for k in range(3):
            if needs >> k & 1:
                torch.testing.assert_close(part[k], full[k], rtol=0, atol=0)
            else:
                assert part[k].shape == (0,)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("D", [1, 80])
def test_transposed_calls_and_op_calls_keep_their_own_plans(built, D):
    """A public call of N > M steps runs as (y, x) (launch.transposes) on both paths; the op called directly on the
    same shapes keeps its own x, y (its plan is keyed apart): the call matches the reference backend, the op its
    Python kernel, bitwise, whichever ran first."""
    B, N, M = 16, 400, 300
    assert fastpath._launch.transposes(B, N, M, 0 if D > 16 else D, torch.float32, 0)
    g = torch.Generator(device="cuda").manual_seed(D)
    x = torch.randn(B, N, D, device="cuda", generator=g)
    y = torch.randn(B, M, D, device="cuda", generator=g)
    fast, (xc, _) = _run(x, y, 0.5, True, needs=(True, True), memory="store", backend="cuda")
    assert _taken(fast[0])
    want, _ = _run(x.double(), y.double(), 0.5, False, needs=(True, True), backend="reference")
    assert max(rel_err(a, b) for a, b in zip(fast, want)) <= 1e-3
    args = _op_args(B, N, M, D, torch.float32, False, seed=D)
    op_fast = _ops_once(args, "sqeuclidean", "store", True)
    op_slow = _ops_once(args, "sqeuclidean", "store", False)
    for a, b in zip(op_fast, op_slow):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_op_kernels_hand_the_rest_to_the_python_kernel(built):
    from softdtw import _ops

    x, y, gamma, xl, yl = _op_args(3, 40, 33, 2, torch.float32, True)
    window = softdtw._windows.build_window(xl, yl, 40, 33, 4, None)
    x20, y20 = torch.randn(3, 40, 20, device="cuda"), torch.randn(3, 33, 20, device="cuda")
    calls = [
        lambda: _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, window, "store", "cuda"),  # a band
        lambda: _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "checkpoint", "cuda"),
        lambda: _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", "cuda", True, False),  # open begin
        lambda: _ops.forward(x.transpose(1, 2).contiguous().transpose(1, 2), y, gamma, "sqeuclidean", xl, yl, None,
                             "store", "cuda"),
        lambda: _ops.forward(x20, y20, gamma, "l1", xl, yl, None, "store", "cuda"),  # D > 16 with l1: cdist
        lambda: _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", "reference"),
    ]
    for i, call in enumerate(calls):
        fastpath.set_enabled(True)
        before = _counts()
        v = call()[0]
        after = _counts()
        assert after[0] == before[0] and after[1] == before[1] + 1, i
        fastpath.set_enabled(False)
        assert torch.equal(v, call()[0]), i


@pytest.mark.parametrize("D", [2, 64])
def test_compiled_step_runs_the_op_kernels(built, D):
    """torch.compile(fullgraph=True) of a loss step: the compiled graph's ops run the C++ kernels, with bitwise
    the Python kernels' values and gradients."""
    _compiled_on_and_off(lambda a, b: softdtw.soft_dtw(a, b, 0.1).mean(), D)


def _compiled_on_and_off(loss_fn, D):
    """Two steps of torch.compile(loss_fn, fullgraph=True) with the C++ kernels on, then off: four op calls taken
    (forward and backward, twice) against none, and bitwise the same loss and gradient."""
    x, y = torch.randn(8, 48, D, device="cuda"), torch.randn(8, 40, D, device="cuda")
    torch._dynamo.reset()
    loss = torch.compile(loss_fn, fullgraph=True)
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        before = _counts()
        for _ in range(2):
            xc = x.clone().requires_grad_()
            v = loss(xc, y)
            v.backward()
        out[enabled] = (v, xc.grad, _counts()[0] - before[0])
    assert out[True][2] == 4 and out[False][2] == 0
    torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=0, atol=0)


def test_compiled_reduce_overhead_runs_the_op_kernels(built):
    """mode="reduce-overhead" (CUDA graphs): warm-up runs learn the plans, the captured graph replays the C++
    kernels' launches; values and gradients as eager."""
    x, y = torch.randn(8, 64, 3, device="cuda"), torch.randn(8, 64, 3, device="cuda")
    torch._dynamo.reset()
    fastpath.set_enabled(True)
    loss = torch.compile(lambda a, b: softdtw.soft_dtw(a, b, 0.1).mean(), mode="reduce-overhead", fullgraph=True)
    before = _counts()
    for _ in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        xc = x.clone().requires_grad_()
        v = loss(xc, y)
        v.backward()
    assert _counts()[0] > before[0]
    fastpath.set_enabled(False)
    xe = x.clone().requires_grad_()
    ve = softdtw.soft_dtw(xe, y, 0.1).mean()
    ve.backward()
    fastpath.set_enabled(True)
    torch.testing.assert_close(v, ve, rtol=0, atol=0)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=0, atol=0)


def test_create_graph_through_fused_grad(built):
    """A create_graph=True backward runs softdtw._ops._FusedGrad (its backward the HVP) from the launcher's node as
    from the Python path's, not the softdtw::backward op: the same gradient and second order, bitwise."""
    x, y = torch.randn(4, 30, 2, device="cuda", dtype=torch.float64), torch.randn(4, 26, 2, device="cuda",
                                                                                  dtype=torch.float64)
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        before = _counts()
        for _ in range(2):
            xc = x.clone().requires_grad_()
            (g,) = torch.autograd.grad(softdtw.soft_dtw(xc, y, 0.2).sum(), xc, create_graph=True)
        assert _node(g) == "_FusedGradBackward", _node(g)
        (h,) = torch.autograd.grad(g.square().sum(), xc)
        out[enabled] = (g, h, _counts()[0] - before[0])
    assert out[True][2] == 0 and out[False][2] == 0  # no op call on either path
    torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=0, atol=0)


# --- DILATE through the launcher (fastpath.dilate_call, fastpath.cpp's Dilate) -----------------------------------

def _dilate_run(x, y, enabled, needs=(True, False), alpha=0.5, gamma=0.05, calls=2):
    fastpath.set_enabled(enabled)
    for _ in range(calls):  # a shape's first call takes the Python path
        xc, yc = x.clone().requires_grad_(needs[0]), y.clone().requires_grad_(needs[1])
        v = softdtw.dilate_loss(xc, yc, alpha=alpha, gamma=gamma)
    v.mean().backward()
    return v, xc.grad, yc.grad


@pytest.mark.parametrize("B,N,M,D,dtype", [(64, 256, 256, 1, torch.float32), (64, 96, 96, 1, torch.float32),
                                           (32, 512, 512, 1, torch.float32), (8, 40, 33, 3, torch.float32),
                                           (5, 70, 90, 2, torch.float64)])
@pytest.mark.parametrize("needs,alpha", [((True, False), 0.5), ((True, True), 0.3), ((True, False), 1.0)])
def test_dilate_bitwise_the_python_path(built, B, N, M, D, dtype, needs, alpha):
    """The launcher's DILATE replays the Python path's torch calls and kernels: bitwise its losses and gradients."""
    g = torch.Generator(device="cuda").manual_seed(N + D)
    t = torch.randn(B, max(N, M), D, device="cuda", dtype=dtype, generator=g).cumsum(1) * 0.1
    x = (t[:, :N] + 0.3 * torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g)).contiguous()
    y = t[:, :M].contiguous()
    fast = _dilate_run(x, y, True, needs, alpha)
    assert _taken(fast[0])
    slow = _dilate_run(x, y, False, needs, alpha)
    assert not _taken(slow[0])
    for a, b in zip(fast, slow):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dilate_calls_it_does_not_take(built):
    x, y = torch.randn(4, 30, 1, device="cuda"), torch.randn(4, 28, 1, device="cuda")
    fastpath.set_enabled(True)
    cases = [
        dict(x_lengths=[30, 20, 10, 5]),  # lengths as a list: the Python path reads them
        dict(omega=torch.rand(30, 28, device="cuda")),
        dict(divergence=True),
        dict(cost="l1"),
        dict(bandwidth=5),
        dict(gamma=torch.tensor(0.1, device="cuda")),
    ]
    for kw in cases:
        kw = {"gamma": 0.1, **kw}
        for _ in range(2):
            v = softdtw.dilate_loss(x.clone().requires_grad_(), y, **kw)
        assert not _taken(v), kw
    for _ in range(2):  # no gradient, and the terms
        with torch.no_grad():
            v = softdtw.dilate_loss(x, y, gamma=0.1)
        loss, shape, temporal = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1, return_terms=True)
    assert v.grad_fn is None and not _taken(loss)
    torch.testing.assert_close(loss, v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("B,N,M,D,dtype", [(64, 96, 96, 1, torch.float32), (8, 40, 33, 3, torch.float32),
                                           (5, 70, 90, 2, torch.float64)])
@pytest.mark.parametrize("given", ["gpu", "cpu", "y int32 cpu"])
def test_dilate_lengths_bitwise_the_python_path(built, B, N, M, D, dtype, given):
    """DILATE with per-pair lengths goes through the launcher where dilate_xy_kernel runs: bitwise the Python
    path's losses and gradients, lengths on the GPU, on the CPU, or one side only in int32."""
    g = torch.Generator(device="cuda").manual_seed(N + D)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=g).cumsum(1) * 0.1
    y = torch.randn(B, M, D, device="cuda", dtype=dtype, generator=g).cumsum(1) * 0.1
    h = torch.Generator().manual_seed(B)
    xl, yl = torch.randint(N // 2, N + 1, (B,), generator=h), torch.randint(M // 2, M + 1, (B,), generator=h)
    xl[0], yl[-1] = 1, 2
    kw = {"gpu": dict(x_lengths=xl.cuda(), y_lengths=yl.cuda()), "cpu": dict(x_lengths=xl, y_lengths=yl),
          "y int32 cpu": dict(y_lengths=yl.int())}[given]
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        for _ in range(2):
            xc, yc = x.clone().requires_grad_(), y.clone().requires_grad_()
            v = softdtw.dilate_loss(xc, yc, alpha=0.4, gamma=0.05, **kw)
        v.mean().backward()
        out[enabled] = (v, xc.grad, yc.grad)
    assert _taken(out[True][0]) and not _taken(out[False][0])
    for a, b in zip(out[True], out[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dilate_lengths_it_does_not_take(built):
    """Lengths where dilate_xy_kernel does not run (K·D past its registers: the other route's Omega holds full
    lengths), or lengths the launcher leaves to the Python path: the Python path's results and errors."""
    fastpath.set_enabled(True)
    x, y = torch.randn(4, 30, 20, device="cuda"), torch.randn(4, 28, 20, device="cuda")
    xl = torch.tensor([30, 20, 10, 5], device="cuda")
    for _ in range(2):
        v = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1)
    assert _taken(v)  # the shape is taken without lengths
    v = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1, x_lengths=xl)
    fastpath.set_enabled(False)
    w = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1, x_lengths=xl)
    assert not _taken(v) and torch.equal(v, w)
    fastpath.set_enabled(True)
    x, y = x[..., :1].contiguous(), y[..., :1].contiguous()
    for _ in range(2):
        v = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1, x_lengths=xl)
    assert _taken(v)
    for kw, err, msg in ((dict(x_lengths=xl.float()), TypeError, "x_lengths must be an integer tensor"),
                         (dict(x_lengths=xl[:3]), ValueError, r"x_lengths must have shape \(4,\)"),
                         (dict(x_lengths=torch.tensor([30, 31, 1, 1])), ValueError, r"x_lengths must lie in \[1, 30\]"),
                         (dict(y_lengths=torch.tensor([0, 1, 1, 1], device="cuda")), ValueError,
                          r"y_lengths must lie in \[1, 28\]")):
        xr = x.clone().requires_grad_()
        with pytest.raises(err, match=msg):
            softdtw.dilate_loss(xr, y, gamma=0.1, **kw)
        assert xr.grad is None
    v = softdtw.dilate_loss(x.clone().requires_grad_(), y, gamma=0.1, x_lengths=xl)
    assert _taken(v)  # and the next good call is the launcher's again


def test_dilate_errors_are_the_python_paths(built):
    x, y = torch.randn(4, 30, 1, device="cuda"), torch.randn(4, 28, 1, device="cuda")
    fastpath.set_enabled(True)
    for _ in range(2):
        xc = x.clone().requires_grad_()
        v = softdtw.dilate_loss(xc, y, gamma=0.1)
    assert _taken(v)
    with pytest.raises(NotImplementedError, match="double backward through dilate_loss"):
        torch.autograd.grad(v.sum(), xc, create_graph=True)
    bad = x.clone()
    bad[1, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        softdtw.dilate_loss(bad.requires_grad_(), y, gamma=0.1)


# --- the cost ops' CUDA kernels: forward_cost, backward_cost, hvp_cost -------------------------------------------

@pytest.mark.parametrize("B,N,M,dtype,lengths", [(1, 16, 16, torch.float32, False), (16, 128, 100, torch.float32, True),
                                                 (64, 256, 256, torch.float32, False),
                                                 (5, 70, 90, torch.float64, True)])
def test_cost_op_kernels_bitwise_the_python_kernel(built, B, N, M, dtype, lengths):
    from softdtw import _ops

    x, y, gamma, xl, yl = _op_args(B, N, M, 2, dtype, lengths, seed=N + M)
    C = (x.unsqueeze(2) - y.unsqueeze(1)).square().sum(-1)
    g = torch.Generator(device="cuda").manual_seed(1)
    Cdot = torch.randn(B, N, M, device="cuda", dtype=dtype, generator=g)
    gdot = torch.rand(B, device="cuda", dtype=dtype, generator=g)
    grad = torch.linspace(0.5, 1.5, B, device="cuda", dtype=dtype)
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        before = _counts()
        value_only = _ops.forward_cost(C, gamma, xl, yl, None, "none", "cuda")[0]
        value, saved = _ops.forward_cost(C, gamma, xl, yl, None, "store", "cuda")
        dC, dgamma, dpen = _ops.backward_cost(grad, C, gamma, xl, yl, None, value, saved, "store", "cuda")
        hvp = _ops.hvp_cost(C, gamma, xl, yl, None, Cdot, gdot, "cuda")
        out[enabled] = (value_only, value, dC, dgamma, *hvp)
        assert _counts()[0] - before[0] == (4 if enabled else 0) and dpen.shape == (0,)
    for a, b in zip(out[True], out[False]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dilate_with_lengths_and_omega_takes_the_op_kernels(built):
    """DILATE's Python path (lengths, a user Omega) calls forward_cost and hvp_cost: their C++ kernels, bitwise."""
    x, y = torch.randn(8, 40, 1, device="cuda"), torch.randn(8, 36, 1, device="cuda")
    xl = torch.tensor([40, 30, 20, 40, 33, 12, 40, 7], device="cuda")
    omega = torch.rand(40, 36, device="cuda")
    out = {}
    for enabled in (True, False):
        fastpath.set_enabled(enabled)
        before = _counts()
        xc = x.clone().requires_grad_()
        v = softdtw.dilate_loss(xc, y, gamma=0.1, x_lengths=xl, omega=omega)
        v.sum().backward()
        out[enabled] = (v, xc.grad, _counts()[0] - before[0])
    assert out[True][2] == 2 and out[False][2] == 0
    torch.testing.assert_close(out[True][0], out[False][0], rtol=0, atol=0)
    torch.testing.assert_close(out[True][1], out[False][1], rtol=0, atol=0)


def test_compiled_precomputed_cost_runs_the_op_kernels(built):
    """A compiled loss on a cost the fused kernels do not have (cosine): forward_cost / backward_cost in C++."""
    _compiled_on_and_off(lambda a, b: softdtw.soft_dtw(a, b, 0.1, cost="cosine").mean(), 5)


def test_a_forced_plan_keeps_the_launcher_out(built):
    """Under launch.forced_plan (tests, probes) the forced layout runs, and no plan learnt under it stays."""
    from softdtw import _ops
    from softdtw.backends.cuda import launch

    x, y, gamma, xl, yl = _op_args(4, 64, 64, 1, torch.float32, seed=3)
    fastpath.set_enabled(True)
    with launch.forced_plan(1, 2):
        for _ in range(2):
            v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
        assert not _taken(v)
        before = _counts()
        _ops.forward(x, y, gamma, "sqeuclidean", xl, yl, None, "store", "cuda")
        assert _counts()[1] == before[1] + 1
    for _ in range(2):
        v = softdtw.soft_dtw(x.clone().requires_grad_(), y, 0.1)
    assert _taken(v)
