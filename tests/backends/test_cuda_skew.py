"""The value-only forward with skewed lanes (kernels/forward_skew.cu) against the float64 reference and
against forward_kernel's value-only mode, which it must match bit for bit (same operations per cell).

Layouts are forced with ``launch.forced_skew(K, W, chain)``: sequential and chained, one and several
warps per pair, several chunks, pairs narrower than a chunk, bands, per-pair lengths, hard DTW, the
precomputed-cost path and float64. Marked ``cuda``; skipped without a GPU.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from softdtw.backends import reference as ref
from tests._helpers import rel_err
from tests.backends.test_cuda import _gamma, _problem

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def cuda_backend():
    return importlib.import_module("softdtw.backends.cuda")


def launch_module():
    return importlib.import_module("softdtw.backends.cuda.launch")


def _values(x, y, g, xl, yl, window, cost="sqeuclidean", skew=None):
    """forward(memory="none") under a forced skew layout (K, W, chain), or unskewed (skew=None)."""
    be = cuda_backend()
    with launch_module().forced_skew(*skew) if skew else launch_module().forced_skew(None):
        v, saved = be.forward(x, y, g, cost, xl, yl, window, "none")
    assert saved.numel() == 0
    return v


LAYOUTS = [(1, 1, False), (4, 1, False), (16, 1, False), (2, 2, False), (4, 4, False), (1, 8, False),
           (4, 1, True), (2, 4, True), (8, 2, True), (1, 4, True)]


@pytest.mark.parametrize("K,W,chain", LAYOUTS)
@pytest.mark.parametrize("B,N,M", [(3, 70, 300), (2, 257, 40), (5, 33, 1100), (1, 1, 1), (4, 1, 129)])
def test_skewed_values_match_the_unskewed_kernel_bit_for_bit(K, W, chain, B, N, M):
    x, y, xl, yl, _ = _problem(B, N, M, 2, seed=N + M + K, lengths=True)
    x, y = x.float(), y.float()
    g = _gamma(0.7, torch.float32)
    want = _values(x, y, g, xl, yl, None)
    got = _values(x, y, g, xl, yl, None, skew=(K, W, chain))
    assert torch.equal(got, want), (got - want).abs().max()
    expect = ref.forward(x.double(), y.double(), g.double(), "sqeuclidean", xl, yl, None, "none")[0]
    assert rel_err(got, expect) <= 1e-5


@pytest.mark.parametrize("K,W,chain", [(4, 1, False), (2, 2, True), (8, 1, True)])
@pytest.mark.parametrize("band,itakura", [(5, None), (None, 3.0)])  # every pair keeps a path
def test_skewed_values_with_bands(K, W, chain, band, itakura):
    x, y, xl, yl, window = _problem(4, 150, 170, 1, seed=3, lengths=True, band=band, itakura=itakura)
    x, y = x.float(), y.float()
    g = _gamma(0.3, torch.float32)
    got = _values(x, y, g, xl, yl, window.to(torch.int32), skew=(K, W, chain))
    want = _values(x, y, g, xl, yl, window.to(torch.int32))
    assert torch.equal(got, want)
    expect = ref.forward(x.double(), y.double(), g.double(), "sqeuclidean", xl, yl, window, "none")[0]
    assert rel_err(got, expect) <= 1e-5


@pytest.mark.parametrize("cost", ["l1", "sqeuclidean"])
@pytest.mark.parametrize("K,W,chain", [(4, 2, False), (2, 1, True)])
def test_skewed_hard_dtw_and_l1(cost, K, W, chain):
    x, y, xl, yl, _ = _problem(3, 90, 400, 3, seed=5, lengths=True)
    x, y = x.float(), y.float()
    for gamma in (0.0, 1.0):
        g = _gamma(gamma, torch.float32)
        got = _values(x, y, g, xl, yl, None, cost, skew=(K, W, chain))
        want = _values(x, y, g, xl, yl, None, cost)
        assert torch.equal(got, want)
        expect = ref.forward(x.double(), y.double(), g.double(), cost, xl, yl, None, "none")[0]
        assert rel_err(got, expect) <= 1e-5


@pytest.mark.parametrize("K,W,chain", [(4, 1, False), (2, 4, False), (4, 2, True)])
def test_skewed_precomputed_cost(K, W, chain):
    be = cuda_backend()
    x, y, xl, yl, _ = _problem(3, 120, 700, 1, seed=7, lengths=True)
    C = torch.cdist(x, y).square().float().contiguous()
    g = _gamma(0.5, torch.float32)
    with launch_module().forced_skew(K, W, chain):
        got, _ = be.forward_cost(C, g, xl, yl, None, "none")
    with launch_module().forced_skew(None):
        want, _ = be.forward_cost(C, g, xl, yl, None, "none")
    assert torch.equal(got, want)


@pytest.mark.parametrize("K,W,chain", [(2, 2, False), (4, 1, True)])
def test_skewed_float64_matches_the_reference(K, W, chain):
    x, y, xl, yl, _ = _problem(3, 200, 450, 2, seed=9, lengths=True)
    g = _gamma(0.1, torch.float64)
    got = _values(x, y, g, xl, yl, None, skew=(K, W, chain))
    expect = ref.forward(x, y, g, "sqeuclidean", xl, yl, None, "none")[0]
    assert rel_err(got, expect) <= 1e-10


def test_default_plan_runs_skewed_where_the_planner_says_so():
    """Whatever the planner picks for a value-only forward agrees with the unskewed kernel bit for bit."""
    launch = launch_module()
    x, y, xl, yl, _ = _problem(16, 2048, 2048, 1, seed=11)
    x, y = x.float(), y.float()
    g = _gamma(1.0, torch.float32)
    plan = launch.skew_plan_for(16, 2048, 2048, 1, torch.float32, 0)
    got = cuda_backend().forward(x, y, g, "sqeuclidean", xl, yl, None, "none")[0]
    want = _values(x, y, g, xl, yl, None)
    assert torch.equal(got, want), plan
