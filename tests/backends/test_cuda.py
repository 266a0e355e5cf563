"""The cuda backend against the float64 reference (run on the GPU), plus streams, graphs and the cache.

Every test is marked ``cuda`` and skipped without a GPU. Run on a GPU machine with
``PYTHONPATH=src python3 -m pytest -m cuda tests/backends/test_cuda.py``.

Tolerances (issue 3): float32 values within 1e-5 and gradients within 1e-3 of the float64 reference,
float64 within 1e-10; errors are max |a - b| / max |b| over the batch (tests/_helpers.rel_err).
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import threading

import pytest
import torch

from softdtw._windows import build_window
from softdtw.backends import reference as ref
from tests._helpers import rel_err

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TOL = {torch.float32: (1e-5, 1e-3), torch.float64: (1e-10, 1e-10)}  # (value, gradients)


def cuda_backend():
    return importlib.import_module("softdtw.backends.cuda")


def launch_module():
    return importlib.import_module("softdtw.backends.cuda.launch")


def _problem(B, N, M, D, seed=0, lengths=False, band=None, itakura=None):
    """Fresh float64 data on the GPU: x, y, x_lengths, y_lengths, window (or None)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    xl = torch.full((B,), N, dtype=torch.int64)
    yl = torch.full((B,), M, dtype=torch.int64)
    if lengths and B > 1:
        xl[1:] = torch.randint(max(1, N // 2), N + 1, (B - 1,), generator=g)
        yl[1:] = torch.randint(max(1, M // 2), M + 1, (B - 1,), generator=g)
    window = build_window(xl, yl, N, M, band, itakura)
    dev = "cuda"
    return (x.to(dev), y.to(dev), xl.to(dev), yl.to(dev), None if window is None else window.to(dev))


def _gamma(value, dtype):
    return torch.tensor(value, dtype=dtype, device="cuda")


def _grad(B, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(B, generator=g, dtype=torch.float64) + 0.5).to("cuda", dtype)


def reference_fused(x, y, gamma, cost, xl, yl, window, grad):
    """Value, dx, dy, dgamma from the reference backend in float64 (on the GPU)."""
    x, y, gamma, grad = x.double(), y.double(), gamma.double(), grad.double()
    v, R = ref.forward(x, y, gamma, cost, xl, yl, window, "store")
    dx, dy, dg = ref.backward(grad, x, y, gamma, cost, xl, yl, window, v, R, "store")
    return v, dx, dy, dg


def cuda_fused(x, y, gamma, cost, xl, yl, window, grad, memory="store"):
    be = cuda_backend()
    v, saved = be.forward(x, y, gamma, cost, xl, yl, window, memory)
    dx, dy, dg = be.backward(grad, x, y, gamma, cost, xl, yl, window, v, saved, memory)
    return v, dx, dy, dg


def _dgamma_err(got, want, value, gamma):
    """d value / d gamma = (value - <E, C>) / gamma: two terms of size |value| / gamma nearly cancel, so
    its error is measured against that size (and against |dgamma| itself where larger)."""
    if gamma == 0:
        return 0.0
    scale = max(float(want.abs().max()), float(value.abs().max()) / gamma)
    return float((got.double() - want.double()).abs().max()) / max(scale, 1e-300)


def _check(got, want, dtype, gamma):
    """got / want: (value, grads..., dgamma); values and gradients by rel_err, dgamma by _dgamma_err."""
    errs = [rel_err(a, b) for a, b in zip(got[:-1], want[:-1])]
    errs.append(_dgamma_err(got[-1], want[-1], want[0], gamma))
    tv, tg = TOL[dtype]
    names = (["value", "dx", "dy"] if len(got) == 4 else ["value", "dC"]) + ["dgamma"]
    msg = ", ".join(f"{n}={e:.2e}" for n, e in zip(names, errs))
    assert all(torch.isfinite(t).all() for t in got), f"non-finite output ({msg})"
    assert errs[0] <= tv, msg
    assert all(e <= tg for e in errs[1:]), msg


# --- fused costs over the edge shapes -----------------------------------------------------------------

FUSED_CASES = [
    # B, N, M, D, cost, gamma, lengths, band, itakura
    (3, 1, 1, 1, "sqeuclidean", 1.0, False, None, None),
    (2, 1, 7, 3, "sqeuclidean", 0.1, False, None, None),
    (2, 7, 1, 1, "l1", 1.0, False, None, None),
    (2, 2, 33, 1, "sqeuclidean", 10.0, False, None, None),
    (3, 31, 32, 3, "sqeuclidean", 1.0, True, None, None),
    (3, 32, 31, 1, "l1", 0.1, True, None, None),
    (3, 33, 127, 3, "sqeuclidean", 1.0, True, 5, None),
    (3, 127, 100, 1, "sqeuclidean", 0.01, False, None, 2.0),
    (2, 513, 513, 1, "sqeuclidean", 1.0, True, None, None),
    (2, 513, 513, 3, "l1", 0.1, False, 20, None),
    (1, 1500, 127, 1, "sqeuclidean", 1.0, False, None, None),
    (2, 33, 1500, 3, "sqeuclidean", 0.1, True, None, None),
    (2, 127, 513, 16, "sqeuclidean", 1.0, True, None, None),  # largest in-kernel D
    (2, 127, 513, 17, "l1", 1.0, True, 30, None),  # smallest GEMM-path D
    (2, 127, 513, 64, "sqeuclidean", 1.0, True, None, None),
    (2, 33, 31, 300, "sqeuclidean", 10.0, False, None, None),
    (2, 31, 33, 300, "l1", 1.0, True, None, None),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("B,N,M,D,cost,gamma,lengths,band,itakura", FUSED_CASES)
def test_fused_matches_reference(dtype, B, N, M, D, cost, gamma, lengths, band, itakura):
    x, y, xl, yl, w = _problem(B, N, M, D, seed=N + 7 * M + D, lengths=lengths, band=band, itakura=itakura)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), cost, xl, yl, w, _grad(B, torch.float64))
    got = cuda_fused(x.to(dtype), y.to(dtype), _gamma(gamma, dtype), cost, xl, yl, w, _grad(B, dtype))
    _check(got, want, dtype, gamma)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("gamma", [1e-3, 1e-2, 0.1, 1.0, 10.0])
def test_gamma_range(dtype, gamma):
    x, y, xl, yl, w = _problem(4, 64, 80, 2, seed=3, lengths=True)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(4, torch.float64))
    got = cuda_fused(x.to(dtype), y.to(dtype), _gamma(gamma, dtype), "sqeuclidean", xl, yl, w, _grad(4, dtype))
    _check(got, want, dtype, gamma)


# float32 gradients where |R| / gamma is large (D = 33, 64 and small gamma; DESIGN.md's edge shapes). R
# reaches 1e5 to 1e7 in log2 units here; kept absolute in float32 it is rounded to ulp(|R| / (gamma ln 2)) and
# every cell's soft-min weights inherit that error (dy 4.05e-3 at (33, 0.1) on the H100 before frames). The
# storing and checkpointing passes keep each lane's R relative to a frame of its own (kernels/forward_pair.cuh,
# "Frames"; benchmarks/probes/f32_precision_model.py models it).
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
@pytest.mark.parametrize("D,gamma", [(33, 0.5), (33, 0.1), (64, 0.1), (64, 0.01)])
def test_float32_gradients_at_large_costs(D, gamma, memory):
    x, y, xl, yl, w = _problem(2, 400, 700, D, seed=D)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(2, torch.float64))
    got = cuda_fused(x.float(), y.float(), _gamma(gamma, torch.float32), "sqeuclidean", xl, yl, w,
                     _grad(2, torch.float32), memory)
    _check(got, want, torch.float32, gamma)


@pytest.mark.parametrize("K,W,chain", [(1, 1, False), (4, 1, False), (1, 4, False), (2, 2, True), (1, 2, True)])
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
def test_float32_frames_across_layouts(K, W, chain, memory):
    """Large costs at small gamma with fused costs under forced layouts: the frames cross lanes (shuffles),
    warps (shared memory), chunks (bnd, sequential and chained) and tiles (row checkpoints)."""
    x, y, xl, yl, w = _problem(3, 300, 500, 8, seed=K + 10 * W, lengths=True)
    x, y = 3 * x, 3 * y  # costs ~150 per cell: |R| / (gamma ln 2) ~ 1e6
    gamma = 0.1
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
    with launch_module().forced_plan(K, W, chain=chain, TH=64 if memory == "checkpoint" else None):
        got = cuda_fused(x.float(), y.float(), _gamma(gamma, torch.float32), "sqeuclidean", xl, yl, w,
                         _grad(3, torch.float32), memory)
    _check(got, want, torch.float32, gamma)


@pytest.mark.parametrize("K,W", [(1, 1), (4, 1), (16, 1), (1, 4), (16, 2)])
def test_float32_value_only_long_pairs_keep_frames(K, W):
    """Value-only sequential passes of pairs with N + M > launch.SEQ_FRAMES_MIN (forward_kernel's LONG) keep
    frames like the storing ones: large costs at small gamma, frames across lanes, warps and chunks, per-pair
    lengths and a band; the value against the float64 reference and against the storing pass of the same
    layout."""
    lm, be = launch_module(), cuda_backend()
    N, M = 120, 8200
    assert lm.seq_frames(torch.float32, False, N, M) and not lm.seq_frames(torch.float32, True, N, M)
    assert not lm.seq_frames(torch.float64, False, N, M) and not lm.seq_frames(torch.float32, False, 100, 8092)
    x, y, xl, yl, w = _problem(3, N, M, 2, seed=K + 10 * W, lengths=True, band=4000)
    x, y = 3 * x, 3 * y  # costs ~70 per cell: |R| / (gamma ln 2) ~ 1e6
    g64, g32 = _gamma(0.1, torch.float64), _gamma(0.1, torch.float32)
    want, _ = ref.forward(x, y, g64, "sqeuclidean", xl, yl, w, "none")
    with lm.forced_plan(K, W):
        assert lm.plan_for(3, N, M, 2, torch.float32, 0).chain is False
        got, saved = be.forward(x.float(), y.float(), g32, "sqeuclidean", xl, yl, w, "none")
        stored, _ = be.forward(x.float(), y.float(), g32, "sqeuclidean", xl, yl, w, "store")
    assert saved.numel() == 0 and bool(torch.isfinite(got).all())
    assert rel_err(got, want) <= TOL[torch.float32][0], f"value {rel_err(got, want):.2e}"
    assert rel_err(stored, want) <= TOL[torch.float32][0], f"stored {rel_err(stored, want):.2e}"
    # Both keep frames, not the same ones: the storing pass starts a later chunk's frames at its column's first
    # row (kernels/forward_pair.cuh), the value-only one at 0 until the first move, so their roundings differ
    # (H100: 2.2e-6 apart at |v| ~ 1.4e5; against float64 the storing pass 7.6e-8 to 2.2e-6, the value-only one
    # 1.2e-7 to 1.8e-6 over the five layouts, where frameless float32 passes drift by 1e-4).
    assert torch.allclose(got, stored, rtol=1e-5, atol=0), (got - stored).abs().max()


@pytest.mark.parametrize("K,W,chain,memory", [(4, 4, False, "store"), (2, 8, False, "store"), (4, 1, False, "store"),
                                           (4, 4, True, "store"), (2, 2, True, "checkpoint")])
def test_float32_end_cell_seed(K, W, chain, memory):
    """The float32 backward starts E at the end cell from a seed below it (kernels/backward.cu, SEED), not by a
    test per cell, and leaves cells past column m - 1 at E = 0 without one: E[n - 1, m - 1] is exactly 1 and E
    is exactly 0 outside the pair, for y lengths that put m - 1 on every column of a lane, at the last column of
    a chunk and at the first of the next; E against float64 within 1e-3, dgamma too."""
    be = cuda_backend()
    CW = 32 * W * K
    ms = [CW - 1, CW, CW + 1, CW + 2, CW + 3, 2 * CW - 5, 37, 2 * CW]
    B, N, M = len(ms), 70, 2 * CW
    x, y, xl, _, _ = _problem(B, N, M, 2, seed=K * W, lengths=True)
    yl = torch.tensor(ms, dtype=torch.int64, device="cuda")
    grad = torch.ones(B, dtype=torch.float64, device="cuda")
    C = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
    v64, R = ref.forward_cost(C, _gamma(0.3, torch.float64), xl, yl, None, "store")
    E64, dg64 = ref.backward_cost(grad, C, _gamma(0.3, torch.float64), xl, yl, None, v64, R, "store")
    g32 = _gamma(0.3, torch.float32)
    with launch_module().forced_plan(K, W, chain=chain, TH=64 if memory == "checkpoint" else None):
        v, saved = be.forward_cost(C.float(), g32, xl, yl, None, memory)
        E, dg = be.backward_cost(grad.float(), C.float(), g32, xl, yl, None, v, saved, memory)
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        assert E[b, n - 1, m - 1].item() == 1.0, (b, n, m, E[b, n - 1, m - 1].item())
        assert not E[b, n:].any() and not E[b, :, m:].any(), (b, n, m)
    assert rel_err(E, E64) <= 1e-3 and rel_err(dg, dg64) <= 1e-3, (rel_err(E, E64), rel_err(dg, dg64))


@pytest.mark.parametrize("K,W,chain", [(4, 4, False), (2, 8, False), (4, 1, False), (8, 1, False), (4, 4, True)])
@pytest.mark.parametrize("band", [None, 9])
def test_float32_backward_two_steps_per_iteration(K, W, chain, band):
    """The float32 backward runs its steps two per loop iteration (kernels/backward.cu, UNROLL): an odd number
    of steps ends on the first half. N and M each over two consecutive values give both parities of every pass
    (sequential and chained, with a band and per-pair lengths), the fused and the precomputed cost: value, dx, dy,
    dC and dgamma against float64 as every float32 path (TOL)."""
    for N in (61, 62):
        for M in (3 * 32 * W * K // 2, 3 * 32 * W * K // 2 + 1):
            x, y, xl, yl, w = _problem(4, N, M, 2, seed=N + M, lengths=True, band=band)
            grad = _grad(4, torch.float64)
            want = reference_fused(x, y, _gamma(0.3, torch.float64), "sqeuclidean", xl, yl, w, grad)
            with launch_module().forced_plan(K, W, chain=chain):
                got = cuda_fused(x.float(), y.float(), _gamma(0.3, torch.float32), "sqeuclidean", xl, yl, w,
                                 grad.float())
                gc = _cost_path(x.float(), y.float(), 0.3, xl, yl, w, torch.float32)
            _check(got, want, torch.float32, 0.3)
            _check(gc, _cost_reference(x, y, 0.3, xl, yl, w), torch.float32, 0.3)


@pytest.mark.parametrize("K,W,chain,D", [(4, 2, False, 2), (4, 4, False, 1), (8, 2, False, 1), (4, 4, False, 24),
                                         (4, 2, True, 24), (2, 4, False, 1), (4, 1, False, 1)])
@pytest.mark.parametrize("gamma", [0.05, 1.0, 10.0])
def test_float32_two_stage_storing_soft_min(K, W, chain, D, gamma):
    """Layouts of K >= 4 columns per lane store their links from a soft-min in two stages,
    smin(smin(diag, up), left) (kernels/forward_pair.cuh, SPLIT_STORE; launch.split_links); K = 2 from the three-way
    one. Value, dx, dy and dgamma against float64 over small and large gamma with per-pair lengths: the fused cost
    (sequential) and the gram cost of D = 24 (sequential and chained)."""
    M = 3 * 32 * W * K // 2 + 1
    x, y, xl, yl, w = _problem(3, 90, M, D, seed=K + 10 * W + D, lengths=True)
    grad = _grad(3, torch.float64)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, grad)
    with launch_module().forced_plan(K, W, chain=chain):
        got = cuda_fused(x.float(), y.float(), _gamma(gamma, torch.float32), "sqeuclidean", xl, yl, w, grad.float())
    _check(got, want, torch.float32, gamma)


# --- every layout: warps per pair, columns per lane, column chunks ---------------------------------------

LAYOUTS = [(1, 1), (2, 1), (4, 1), (16, 1), (1, 2), (2, 4), (4, 2), (8, 1), (1, 16), (4, 16)]


@pytest.mark.parametrize("K,W", LAYOUTS)
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_forced_layouts(K, W, gamma):
    """Small problems under every (K, W): exercises shuffles, warp hand-offs and chunk boundaries."""
    x, y, xl, yl, w = _problem(3, 70, 300, 2, seed=K * 100 + W, lengths=True, band=40)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
    with launch_module().forced_plan(K, W):
        got = cuda_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
        gc = _cost_path(x, y, gamma, xl, yl, None, torch.float64)
    _check(got, want, torch.float64, gamma)
    wc = _cost_reference(x, y, gamma, xl, yl, None)
    _check(gc, wc, torch.float64, gamma)


@pytest.mark.parametrize("K,W,chain", [(1, 1, False), (4, 1, False), (2, 4, False), (1, 2, True), (4, 2, True)])
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_gram_cost_across_layouts(K, W, chain, gamma):
    """Squared Euclidean of large D (the "gram" cost: an x·yᵀ table, the norms and clamp in the cells, E's
    row and column sums carried like a fused dx and dy) under forced layouts: the row sums cross lanes,
    warps and chunks (sequential and chained), with lengths and a band; hard DTW at gamma = 0."""
    D = 24
    x, y, xl, yl, w = _problem(3, 70, 300, D, seed=K + 10 * W, lengths=True, band=40)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
    with launch_module().forced_plan(K, W, chain=chain):
        got = cuda_fused(x, y, _gamma(gamma, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
        f32 = cuda_fused(x.float(), y.float(), _gamma(gamma, torch.float32), "sqeuclidean", xl, yl, w,
                         _grad(3, torch.float32))
    _check(got, want, torch.float64, gamma)
    if gamma > 0:  # (a float32 Gram cost may break a near-tie of hard DTW's argmin differently)
        _check(f32, want, torch.float32, gamma)


def test_gram_cost_long_pairs_planned():
    """Pairs of 1000+ steps with a Gram cost take the chained K = 4, W = 2 plan (launch.choose_plan): values and
    gradients against the float64 reference, with lengths."""
    x, y, xl, yl, w = _problem(2, 1100, 1030, 40, seed=4, lengths=True)
    assert cuda_backend()._plan("fused", 2, 1100, 1030, 40, torch.float64, 0, "store").chain
    want = reference_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(2, torch.float64))
    got = cuda_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(2, torch.float64))
    # 1e-9, not TOL's 1e-10: the Gram form |x|² + |y|² - 2 x·y cancels ~2 digits of costs ~80 (D = 40), summed
    # along ~2000-cell paths (H100: dy 1.0e-10, dx 2.6e-11, value 2e-15).
    errs = [rel_err(a, b) for a, b in zip(got[:3], want[:3])]
    assert max(errs) <= 1e-9, errs


def test_gram_backward_without_saved_recomputes():
    be = cuda_backend()
    x, y, xl, yl, w = _problem(2, 40, 50, 40, lengths=True)
    g, grad = _gamma(1.0, torch.float64), _grad(2, torch.float64)
    v, saved = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    a = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v, saved, "store")
    b = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v, saved.new_empty((0,)), "store")
    assert all(torch.equal(p, q) for p, q in zip(a, b))


@pytest.mark.parametrize("cost", ["sqeuclidean", "l1"])
@pytest.mark.parametrize("K,W,chain", [(None, None, False), (4, 1, False), (2, 4, False), (4, 2, True), (1, 2, True)])
@pytest.mark.parametrize("variant", [None, "band", "open_end", "penalty"])
def test_large_d_backward_without_dgamma_reads_no_cost(cost, K, W, chain, variant):
    """float32 links hold the normalised weights, so a large-D store backward that is not asked for dgamma builds no
    cost table again (no x·yᵀ GEMM, no cdist) and the kernel reads none (kernels/backward.cu, readc): dx, dy (and
    d penalty) must be the same bits as with the table, under sequential and chained layouts, with lengths."""
    be = cuda_backend()
    B, N, M, D = 3, 70, 300, 24
    x, y, xl, yl, w = _problem(B, N, M, D, seed=7, lengths=True, band=40 if variant == "band" else None)
    x, y = x.float(), y.float()
    g, grad = _gamma(0.5, torch.float32), _grad(B, torch.float32)
    kw = {"open_end": variant == "open_end"}
    if variant == "penalty":
        kw["step_penalty"] = torch.full((B,), 0.3, device="cuda")
    ctx = launch_module().forced_plan(K, W, chain=chain) if K else contextlib.nullcontext()
    with ctx:
        v, saved = be.forward(x, y, g, cost, xl, yl, w, "store", **kw)
        full = be.backward(grad, x, y, g, cost, xl, yl, w, v, saved, "store", **kw)
        lean = be.backward(grad, x, y, g, cost, xl, yl, w, v, saved, "store", needs=(True, True, False), **kw)
    assert torch.equal(full[0], lean[0]) and torch.equal(full[1], lean[1])
    if variant == "penalty":
        assert torch.equal(full[3], lean[3])
    assert torch.isfinite(full[2]).all()
    want = reference_fused(x.double(), y.double(), _gamma(0.5, torch.float64), cost, xl, yl, w,
                           _grad(B, torch.float64)) if variant in (None, "band") else None
    if want is not None:
        _check((v,) + tuple(lean[:2]) + (full[2],), want, torch.float32, 0.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("K,W", [(1, 1), (4, 1), (1, 4), (2, 2)])
def test_narrow_pairs_end_the_pass_early_over_junk_memory(dtype, K, W):
    """Pairs narrower than a chunk end the forward pass at their last column's lane, and the backward starts
    there (kernels/forward_pair.cuh, backward.cu): words of the lanes past it are never stored. The saved
    table is taken from memory left full of NaN (float64) / all-ones bits (float32), which must not leak."""
    be = cuda_backend()
    B, N, M, D = 3, 40, 21, 2
    x, y, xl, yl, w = _problem(B, N, M, D, seed=K + 10 * W, lengths=True)
    want = reference_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(B, torch.float64))
    with launch_module().forced_plan(K, W):
        shape, sdtype = be.saved_spec("fused", B, N, M, D, dtype, "store")
        junk = [torch.full(shape, float("nan") if sdtype == torch.float64 else -1, dtype=sdtype, device="cuda")
                for _ in range(8)]
        del junk
        got = cuda_fused(x.to(dtype), y.to(dtype), _gamma(0.5, dtype), "sqeuclidean", xl, yl, w, _grad(B, dtype))
    assert all(torch.isfinite(t).all() for t in got)
    _check(got, want, dtype, 0.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("K,W", [(1, 1), (4, 1), (2, 2), (4, 4)])
def test_narrow_table_pairs_end_the_pass_early_over_junk_memory(dtype, K, W):
    """A cost table's passes are trimmed too (K <= 4): lanes past a pair's last column skip their top rows, and
    the backward zeroes those cells of dC itself (kernels/backward.cu). dC is taken from memory left full of NaN,
    and the Gram cost writes E over x·yᵀ, whose padded columns are not zero: dC, dx and dy must match the
    reference with per-pair lengths whose last lanes are dead."""
    B, N, M = 3, 40, 21
    x, y, xl, yl, w = _problem(B, N, M, 2, seed=K + 10 * W, lengths=True)
    yl[0] = 13
    want = _cost_reference(x, y, 0.5, xl, yl, w)
    with launch_module().forced_plan(K, W):
        junk = [torch.full((B, N, M), float("nan"), dtype=dtype, device="cuda") for _ in range(8)]
        del junk
        got = _cost_path(x, y, 0.5, xl, yl, w, dtype)
    assert all(torch.isfinite(t).all() for t in got)
    _check(got, want, dtype, 0.5)
    xg, yg, xlg, ylg, _ = _problem(B, N, M, 24, seed=K + 10 * W, lengths=True)  # D > FUSED_D_MAX: the Gram cost
    ylg[0] = 13
    want = reference_fused(xg, yg, _gamma(0.5, torch.float64), "sqeuclidean", xlg, ylg, None, _grad(B, torch.float64))
    with launch_module().forced_plan(K, W):
        got = cuda_fused(xg.to(dtype), yg.to(dtype), _gamma(0.5, dtype), "sqeuclidean", xlg, ylg, None,
                         _grad(B, dtype))
    _check(got, want, dtype, 0.5)


def test_plans_cover_the_shapes():
    lm = launch_module()
    for B in (1, 16, 32, 1000, 20000):
        for M in (1, 16, 128, 512, 1024, 2048, 8192):
            for fused in (False, True):
                p = lm.choose_plan(B, 512, M, 16, 132, (), False, 4, fused)
                assert p.nch * p.CW >= M
                assert p.nch * p.CW < 2 * M + 32 * p.W * p.K


def test_narrow_pairs_take_a_wider_layout():
    """A 16-column pair: the passes end at the last lane holding a column (K <= 4, every cost), so K = 2 on 8
    lanes (23 steps) beats K = 1 on 16 (31 steps), for a fused cost and a cost table alike."""
    lm = launch_module()
    assert lm.choose_plan(1, 16, 16, 16, 132, (), False, 4, True).K == 2
    assert lm.choose_plan(1, 16, 16, 16, 132, (), False, 4, False).K == 2


# --- precomputed cost --------------------------------------------------------------------------------

def _cost_matrix(x, y):
    return ((x.unsqueeze(2) - y.unsqueeze(1)) ** 2).sum(-1) - 0.3  # some negative costs too


def _cost_reference(x, y, gamma, xl, yl, w):
    C = _cost_matrix(x, y).double()
    g = torch.tensor(gamma, dtype=torch.float64, device="cuda")
    grad = _grad(x.shape[0], torch.float64)
    v, R = ref.forward_cost(C, g, xl, yl, w, "store")
    dC, dg = ref.backward_cost(grad, C, g, xl, yl, w, v, R, "store")
    return v, dC, dg


def _cost_path(x, y, gamma, xl, yl, w, dtype, memory="store"):
    be = cuda_backend()
    C = _cost_matrix(x, y).to(dtype)
    g = torch.tensor(gamma, dtype=dtype, device="cuda")
    grad = _grad(x.shape[0], dtype)
    v, saved = be.forward_cost(C, g, xl, yl, w, memory)
    dC, dg = be.backward_cost(grad, C, g, xl, yl, w, v, saved, memory)
    return v, dC, dg


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("K,W,chain,memory", [(4, 1, False, "store"), (8, 4, False, "store"), (2, 2, False, "store"),
                                              (4, 2, True, "store"), (4, 1, True, "checkpoint")])
def test_cost_table_groups_match_the_scalar_path(dtype, K, W, chain, memory):
    """Cost tables whose rows allow it move in 16-byte groups (kernels/common.cuh, table_groups: the stride and M
    multiples of the lane's vector width, the table 16-byte aligned); others one value at a time. The same table
    at a 16-byte boundary and one element past it takes each path: values, dC and d gamma must be the same bits,
    with per-pair lengths whose last group is partly past the pair (y_lengths not a multiple of 4)."""
    be = cuda_backend()
    B, N, M = 3, 37, 68
    x, y, xl, yl, w = _problem(B, N, M, 2, seed=K + 10 * W, lengths=True)
    yl[1] = 41
    C = _cost_matrix(x, y).to(dtype)
    g = _gamma(0.5, dtype)
    grad = _grad(B, dtype)
    out = []
    for shift in (0, 1):
        buf = torch.empty(B * N * M + 16, dtype=dtype, device="cuda")
        base = (-(buf.data_ptr() // buf.element_size())) % (16 // buf.element_size())  # first 16-byte aligned element
        Ct = buf[base + shift: base + shift + B * N * M].view(B, N, M)
        assert (Ct.data_ptr() % 16 == 0) == (shift == 0)
        Ct.copy_(C)
        with launch_module().forced_plan(K, W, chain):
            v, saved = be.forward_cost(Ct, g, xl, yl, None, memory)
            dC, dg = be.backward_cost(grad, Ct, g, xl, yl, None, v, saved, memory)
        out.append((v, dC.clone(), dg))
    for a, b in zip(*out):
        assert torch.equal(a, b)
    want = _cost_reference(x, y, 0.5, xl, yl, None)
    _check(out[0], want, dtype, 0.5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("B,N,M,gamma,lengths,band,itakura", [
    (2, 1, 1, 1.0, False, None, None),
    (3, 31, 33, 0.1, True, None, None),
    (3, 127, 513, 1.0, True, 10, None),
    (2, 513, 300, 1.0, False, None, 3.0),
    (2, 1500, 1500, 0.5, True, None, None),
    (2, 40, 50, 0.0, True, 4, None),
])
def test_cost_path_matches_reference(dtype, B, N, M, gamma, lengths, band, itakura):
    x, y, xl, yl, w = _problem(B, N, M, 2, seed=N + M, lengths=lengths, band=band, itakura=itakura)
    want = _cost_reference(x, y, gamma, xl, yl, w)
    got = _cost_path(x, y, gamma, xl, yl, w, dtype)
    _check(got, want, dtype, gamma)


# --- hard DTW ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("N,M,D,band", [(1, 1, 1, None), (31, 33, 1, None), (127, 513, 3, None),
                                        (513, 127, 2, 20), (200, 200, 1, 0)])
def test_hard_dtw(dtype, N, M, D, band):
    x, y, xl, yl, w = _problem(3, N, M, D, seed=N * M, lengths=True, band=band)
    want = reference_fused(x, y, _gamma(0.0, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
    got = cuda_fused(x.to(dtype), y.to(dtype), _gamma(0.0, dtype), "sqeuclidean", xl, yl, w, _grad(3, dtype))
    _check(got, want, dtype, 0.0)
    assert torch.equal(got[3], torch.zeros_like(got[3]))  # no d/dgamma at gamma = 0


def test_hard_tie_breaking_follows_diagonal_up_left():
    # Constant series: every path has the same cost, so the argmin ties everywhere.
    x = torch.zeros(1, 5, 1, dtype=torch.float64, device="cuda")
    y = torch.zeros(1, 7, 1, dtype=torch.float64, device="cuda")
    xl, yl = torch.tensor([5], device="cuda"), torch.tensor([7], device="cuda")
    C = _cost_matrix(x, y) + 1.3
    g = _gamma(0.0, torch.float64)
    ones = torch.ones(1, dtype=torch.float64, device="cuda")
    v, R = ref.forward_cost(C, g, xl, yl, None, "store")
    E_ref, _ = ref.backward_cost(ones, C, g, xl, yl, None, v, R, "store")
    be = cuda_backend()
    vc, saved = be.forward_cost(C, g, xl, yl, None, "store")
    E, _ = be.backward_cost(ones, C, g, xl, yl, None, vc, saved, "store")
    assert torch.equal(E, E_ref)


# --- modes, limits, determinism ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_value_only_mode_saves_nothing_and_matches_store(dtype):
    be = cuda_backend()
    x, y, xl, yl, w = _problem(5, 100, 90, 3, lengths=True, band=15)
    x, y, g = x.to(dtype), y.to(dtype), _gamma(0.3, dtype)
    v_none, saved = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "none")
    v_store, saved_store = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    # float32: the storing forward evaluates the soft-min in another (equivalent) order; last-bit differences.
    assert saved.numel() == 0 and torch.allclose(v_none, v_store, rtol=1e-6, atol=0)
    if dtype == torch.float64:
        assert torch.equal(v_none, v_store)
    shape, sdtype = be.saved_spec("fused", 5, 100, 90, 3, dtype, "store")
    assert tuple(saved_store.shape) == tuple(shape) and saved_store.dtype == sdtype
    assert be.saved_spec("cost", 5, 100, 90, 0, dtype, "none") == ((0,), dtype)


def test_backward_without_saved_recomputes():
    be = cuda_backend()
    x, y, xl, yl, w = _problem(2, 40, 50, 1)
    g, grad = _gamma(1.0, torch.float64), _grad(2, torch.float64)
    v, saved = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
    a = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v, saved, "store")
    b = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v, saved.new_empty((0,)), "store")
    assert all(torch.equal(p, q) for p, q in zip(a, b))


@pytest.mark.parametrize("N", [1024, 4096])
def test_small_gamma_long_series_stays_finite(N):
    """gamma = 1e-4 at N = M = 4096 in float32: finite value and gradients, value close to float64."""
    x, y, xl, yl, w = _problem(1, N, N, 1, seed=5)
    g = 1e-4
    got = cuda_fused(x.float(), y.float(), _gamma(g, torch.float32), "sqeuclidean", xl, yl, w,
                     _grad(1, torch.float32))
    assert all(torch.isfinite(t).all() for t in got)
    value64, _ = cuda_backend().forward(x, y, _gamma(g, torch.float64), "sqeuclidean", xl, yl, w, "none")
    assert rel_err(got[0], value64) <= 1e-5
    if N == 1024:  # the reference's Python loop over 8k diagonals is too slow for 4096
        want = reference_fused(x, y, _gamma(g, torch.float64), "sqeuclidean", xl, yl, w, _grad(1, torch.float64))
        assert rel_err(got[0], want[0]) <= 1e-5


def test_long_pair_against_reference():
    """N = M = 4096 (several column chunks at one warp per pair), float64, against the GPU reference."""
    x, y, xl, yl, w = _problem(1, 4096, 2500, 1, seed=11)
    want = reference_fused(x, y, _gamma(1.0, torch.float64), "sqeuclidean", xl, yl, w, _grad(1, torch.float64))
    got = cuda_fused(x, y, _gamma(1.0, torch.float64), "sqeuclidean", xl, yl, w, _grad(1, torch.float64))
    _check(got, want, torch.float64, 1.0)


def test_8192_runs():
    x, y, xl, yl, w = _problem(2, 8192, 8192, 1, seed=2)
    got = cuda_fused(x.float(), y.float(), _gamma(1.0, torch.float32), "sqeuclidean", xl, yl, w,
                     _grad(2, torch.float32))
    assert all(torch.isfinite(t).all() for t in got)
    v64, _ = cuda_backend().forward(x, y, _gamma(1.0, torch.float64), "sqeuclidean", xl, yl, w, "none")
    assert rel_err(got[0], v64) <= 1e-5


@pytest.mark.parametrize("K,W", [(None, None), (2, 4)])
def test_two_runs_identical(K, W):
    x, y, xl, yl, w = _problem(6, 300, 260, 3, lengths=True, band=30)
    x, y = x.float(), y.float()
    args = (x, y, _gamma(0.2, torch.float32), "sqeuclidean", xl, yl, w, _grad(6, torch.float32))
    if K is None:
        a, b = cuda_fused(*args), cuda_fused(*args)
    else:
        with launch_module().forced_plan(K, W):
            a, b = cuda_fused(*args), cuda_fused(*args)
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_non_default_stream():
    x, y, xl, yl, w = _problem(4, 200, 150, 2, lengths=True)
    args = (x.float(), y.float(), _gamma(0.5, torch.float32), "l1", xl, yl, w, _grad(4, torch.float32))
    eager = cuda_fused(*args)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        side = cuda_fused(*args)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert all(torch.equal(p, q) for p, q in zip(eager, side))


def test_cuda_graph_capture_of_forward_and_backward():
    """Capture forward + backward once, replay on new data: same results as eager calls."""
    be = cuda_backend()
    x, y, xl, yl, w = _problem(8, 128, 100, 2, lengths=True, band=20)
    x, y = x.float(), y.float()
    g, grad = _gamma(0.7, torch.float32), _grad(8, torch.float32)

    def step():
        v, saved = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
        return (v,) + be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, v, saved, "store")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compile and load outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for seed in (21, 22):
        x2, y2, _, _, _ = _problem(8, 128, 100, 2, seed=seed)
        x.copy_(x2)
        y.copy_(y2)
        g.fill_(0.3 + seed / 100)
        graph.replay()
        torch.cuda.synchronize()
        eager = step()
        assert all(torch.equal(p, q) for p, q in zip(out, eager))


# --- the public API on CUDA ---------------------------------------------------------------------------

def _api():
    return importlib.import_module("softdtw")


def _pair_grads(fn, x, y, **kw):
    x = x.detach().clone().requires_grad_()
    y = y.detach().clone().requires_grad_()
    v = fn(x, y, **kw)
    v.sum().backward()
    return v.detach(), x.grad, y.grad


def test_transposes_follows_the_planners_model():
    """launch.transposes: pairs with more rows than columns run as (y, x) where the model says it is quicker (a
    few pairs: the pass is about rows + columns / K steps), never the other way round nor under a forced plan."""
    lm = launch_module()
    assert lm.transposes(16, 400, 300, 0, torch.float32, 0)  # speech: a Gram cost table
    assert lm.transposes(16, 1000, 200, 1, torch.float32, 0)
    assert not lm.transposes(16, 300, 400, 0, torch.float32, 0)
    assert not lm.transposes(16, 300, 300, 1, torch.float64, 0)
    with lm.forced_plan(4, 1):
        assert not lm.transposes(16, 1000, 200, 1, torch.float32, 0)


@pytest.mark.parametrize("D,cost", [(1, "sqeuclidean"), (1, "l1"), (40, "sqeuclidean"), (40, "l1")])
def test_transposed_pairs_match_reference(monkeypatch, D, cost):
    """soft_dtw runs pairs of N > M steps as (y, x) (functional._run): the op sees y first, and values and both
    gradients, with per-pair lengths swapped along, match the float64 reference; with a band it keeps x, y."""
    sd, ops = _api(), importlib.import_module("softdtw._ops")
    seen = []
    real = ops.fused_value
    monkeypatch.setattr(ops, "fused_value", lambda x, y, *a, **k: seen.append((x.shape[1], y.shape[1])) or real(x, y, *a, **k))
    x, y, xl, yl, _ = _problem(4, 300, 70, D, seed=D, lengths=True)
    kw = dict(gamma=0.5, cost=cost, x_lengths=xl, y_lengths=yl)
    assert launch_module().transposes(4, 300, 70, 0 if D > 16 else D, torch.float64, 0)
    want = _pair_grads(sd.soft_dtw, x, y, backend="reference", **kw)
    seen.clear()
    got = _pair_grads(sd.soft_dtw, x, y, backend="cuda", **kw)
    assert seen == [(70, 300)]
    tol = 1e-9 if D > 16 and cost == "sqeuclidean" else 1e-10  # the Gram form cancels ~2 digits (test_gram_cost_long_pairs_planned)
    errs = [rel_err(a, b) for a, b in zip(got, want)]
    assert max(errs) <= tol, errs
    want = _pair_grads(sd.soft_dtw, x, y, backend="reference", bandwidth=40, **kw)
    got = _pair_grads(sd.soft_dtw, x, y, backend="cuda", bandwidth=40, **kw)  # a band: no swap
    assert seen[-1] == (300, 70)
    assert max(rel_err(a, b) for a, b in zip(got, want)) <= tol
    sd.dtw(x, y, cost=cost, x_lengths=xl, y_lengths=yl)  # hard DTW keeps its tie order (diagonal, up, left)
    assert seen[-1] == (300, 70)


@pytest.mark.parametrize("name", ["soft_dtw", "soft_dtw_divergence", "dtw"])
def test_public_functions_match_reference(name):
    sd = _api()
    fn = getattr(sd, name)
    x, y, xl, yl, _ = _problem(4, 60, 45, 3, seed=9, lengths=True)
    kw = dict(x_lengths=xl, y_lengths=yl, bandwidth=12)
    if name != "dtw":
        kw["gamma"] = 0.5
    want = _pair_grads(fn, x, y, backend="reference", **kw)
    got = _pair_grads(fn, x, y, **kw)
    assert all(rel_err(a, b) <= 1e-10 for a, b in zip(got, want))
    got32 = _pair_grads(fn, x.float(), y.float(), **kw)
    assert rel_err(got32[0], want[0]) <= 1e-5
    assert all(rel_err(a, b) <= 1e-3 for a, b in zip(got32[1:], want[1:]))


def test_learnable_gamma_gradient():
    sd = _api()
    x, y, _, _, _ = _problem(3, 50, 40, 2, seed=4)
    out = {}
    for backend in ("reference", None):
        g = torch.tensor(0.8, dtype=torch.float64, device="cuda", requires_grad=True)
        sd.soft_dtw(x, y, g, backend=backend).sum().backward()
        out[backend] = g.grad
    assert rel_err(out[None], out["reference"]) <= 1e-10


def test_alignment_path_and_from_cost():
    sd = _api()
    x, y, _, _, _ = _problem(2, 40, 55, 2, seed=6)
    E = sd.soft_dtw_alignment(x, y, gamma=0.3)
    E_ref = sd.soft_dtw_alignment(x, y, gamma=0.3, backend="reference")
    assert E.device.type == "cuda" and rel_err(E, E_ref) <= 1e-10
    paths = sd.dtw_path(x, y)
    paths_ref = sd.dtw_path(x, y, backend="reference")
    assert all(torch.equal(p, q) for p, q in zip(paths, paths_ref))
    C = torch.rand(2, 40, 55, dtype=torch.float64, device="cuda", requires_grad=True)
    v = sd.soft_dtw_from_cost(C, gamma=0.2)
    v.sum().backward()
    C2 = C.detach().clone().requires_grad_()
    v_ref = sd.soft_dtw_from_cost(C2, gamma=0.2, backend="reference")
    v_ref.sum().backward()
    assert rel_err(v, v_ref) <= 1e-10 and rel_err(C.grad, C2.grad) <= 1e-10


def test_module_and_half_precision_inputs():
    sd = _api()
    x, y, _, _, _ = _problem(4, 30, 30, 2, seed=8)
    loss = sd.SoftDTW(gamma=0.5)
    v = loss(x.half(), y.half())
    v_ref = sd.soft_dtw(x.half().double(), y.half().double(), gamma=0.5)
    assert v.dtype == torch.float16 and rel_err(v.double(), v_ref) <= 2e-3


def test_bad_inputs_raise_clear_errors_on_cuda():
    sd = _api()
    x, y, _, _, _ = _problem(2, 10, 12, 2)
    bad = x.clone()
    bad[0, 3, 1] = float("nan")
    with pytest.raises(ValueError, match="x contains NaN"):
        # The value check runs on the GPU in front of the call's kernels and is read before the call returns
        # (backends/cuda/checks.py, _checks.run_checked).
        sd.soft_dtw(bad, y)
    with pytest.raises(ValueError, match="feature size"):
        sd.soft_dtw(x, y[..., :1])
    with pytest.raises(ValueError, match="x_lengths"):
        sd.soft_dtw(x, y, x_lengths=torch.tensor([11, 3], device="cuda"))
    with pytest.raises(ValueError, match="backend='cpu'"):
        sd.soft_dtw(x, y, backend="cpu")
    with pytest.raises(ValueError, match="gamma"):
        sd.soft_dtw(x, y, gamma=-1.0)


# --- compilation, cache, launch layer -------------------------------------------------------------------

def _fresh_compile_module(monkeypatch, cache):
    comp = importlib.import_module("softdtw.backends.cuda.compile")
    monkeypatch.setenv("SOFTDTW_CACHE_DIR", str(cache))
    return comp


def test_disk_cache_is_used_and_atomic(tmp_path, monkeypatch):
    comp = _fresh_compile_module(monkeypatch, tmp_path / "cache")
    expr = "sdtw::forward_kernel<float, 0, 1, 2, 1, false, false>"
    before = dict(comp.STATS)
    comp.cubin_for("forward", expr, "sm_90")
    files = list((tmp_path / "cache").glob("forward-sm_90-*.cubin"))
    assert len(files) == 1 and comp.STATS["compiles"] == before["compiles"] + 1
    comp.cubin_for("forward", expr, "sm_90")
    assert comp.STATS["disk_hits"] == before["disk_hits"] + 1
    # Concurrent writers of the same entry leave one valid file and no temporaries.
    cubin, mangled = comp.cubin_for("forward", expr, "sm_90")
    threads = [threading.Thread(target=comp._store_cached, args=(files[0], cubin, mangled)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert comp._load_cached(files[0]) == (cubin, mangled)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [files[0].name]


def test_unwritable_cache_falls_back_to_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    comp = _fresh_compile_module(monkeypatch, blocker / "cache")
    monkeypatch.setattr(comp, "_warned_cache", False)
    with pytest.warns(RuntimeWarning, match="SOFTDTW_CACHE_DIR"):
        cubin, mangled = comp.cubin_for("forward", "sdtw::forward_kernel<float, 1, 1, 1, 1, false, false>", "sm_90")
    assert cubin[:4] == b"\x7fELF" and mangled


def test_nvrtc_errors_name_kernel_arch_and_log():
    comp = importlib.import_module("softdtw.backends.cuda.compile")
    with pytest.raises(RuntimeError, match=r"(?s)forward_kernel<float, 9>.*sm_90.*compiler log"):
        comp.compile_cubin("forward", "sdtw::forward_kernel<float, 9>", "sm_90")


def test_missing_cuda_core_says_what_to_install(monkeypatch):
    comp = importlib.import_module("softdtw.backends.cuda.compile")
    monkeypatch.setitem(sys.modules, "cuda.core", None)
    monkeypatch.setitem(sys.modules, "cuda.core.experimental", None)
    with pytest.raises(ImportError, match=r'pip install "softdtw\[cuda1[23]\]"'):
        comp.cuda_core()


def test_fused_float32_pairs_past_1024_steps_run_chained():
    """float32 fused costs of 1028 to 2048 steps whose chained blocks fill at most half the GPU take the chained
    K = 4, W = 4 plan (launch.CHAIN_MARGIN_F32: H100, B = 1..64, forward + backward 9-18 % and value-only 20-28 %
    faster than the sequential K = 8, W = 8); 1024 steps, float64 and larger batches keep the sequential plan."""
    lm = launch_module()

    def plan(B, N, dtype=torch.float32):
        return lm.choose_plan(B, N, N, lm.k_max(dtype, 1), 132, lm._krings(dtype, 1), False, dtype.itemsize, True)

    for B, N in ((1, 2048), (16, 2048), (64, 2048), (32, 1280), (8, 1536)):
        p = plan(B, N)
        assert (p.K, p.W, p.chain) == (4, 4, True), (B, N, p)
    assert not plan(16, 1024).chain
    assert not plan(96, 2048).chain
    assert not plan(16, 2048, torch.float64).chain


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B,N,M,D", [(3, 17, 9, 24), (1, 1, 1, 17), (2, 300, 1, 1000), (4, 0, 5, 20)])
def test_gram_norms_one_launch(dtype, B, N, M, D):
    """kernels/norms.cu: |x_i| and |y_j| of the gram cost in one launch (float64 sums), against float64 torch norms;
    a non-contiguous input is taken as its values."""
    be = cuda_backend()
    x = torch.randn(B, N, D, dtype=torch.float64, device="cuda") * 3
    y = torch.randn(B, D, M, dtype=torch.float64, device="cuda").transpose(1, 2)  # non-contiguous
    xn, yn = be._norms(x.to(dtype), y.to(dtype))
    assert xn.shape == (B, N) and yn.shape == (B, M) and xn.dtype == yn.dtype == dtype
    tol = 2e-7 if dtype == torch.float32 else 1e-13  # float64: D = 1000 sums in two orders
    for got, v in ((xn, x.to(dtype).double()), (yn, y.to(dtype).double())):
        want = torch.linalg.vector_norm(v, dim=-1)
        if want.numel():
            assert ((got.double() - want).abs() <= tol * want).all()


def test_long_precomputed_cost_pairs_run_chained():
    """A precomputed or Gram cost of long pairs, up to 128 of them, runs chained (launch.choose_plan; the fused-cost
    model's one block per pair left most SMs idle): float32 W = 4, K = 4 while its blocks fill at most a quarter of
    the GPU, else K = 8; float64 K = 4, W = 2. Short pairs and fused costs keep the model."""
    lm = launch_module()
    p = lm.choose_plan(32, 2048, 2048, 16, 132, (), False, 4, False)
    assert (p.K, p.W, p.nch, p.chain) == (4, 4, 4, True)
    r = lm.choose_plan(128, 1024, 1024, 16, 132, (), False, 4, False)
    assert (r.K, r.W, r.nch, r.chain) == (8, 4, 1, True)
    f = lm.choose_plan(32, 2048, 2048, 16, 132, (), False, 8, False)  # float64
    assert (f.K, f.W, f.nch, f.chain) == (4, 2, 8, True)
    q = lm.choose_plan(32, 2048, 2000, 16, 132, (4, 2, 2, 1, 1), False, 4, False)  # the ring allows K = 2 at W = 4
    assert (q.K, q.W, q.nch, q.chain) == (2, 4, 8, True)
    assert not lm.choose_plan(256, 512, 512, 16, 132, (), False, 4, False).chain
    assert lm.choose_plan(128, 1024, 1024, 16, 132, (), False, 4, True) != r  # a fused cost: the model
    assert lm.choose_plan(32, 2048, 2048, 16, 132, (), True, 4, False).TH > 0  # checkpoint: the model's tiles
