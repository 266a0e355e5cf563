"""Chained plans and memory="checkpoint" of the cuda backend against the float64 reference (on the GPU).

Chained plans run one block per (pair, column chunk), the chunks of a pair at once, handing boundary
columns over through L2 flags; memory="checkpoint" saves R on chunk and tile boundaries and recomputes
each tile in the backward (kernels/forward_pair.cuh, backward.cu). Small tile heights (forced_plan's TH)
put several tiles, a partial bottom tile and many chunks into small problems. Tolerances as in
test_cuda.py (issue 3): float32 values 1e-5, gradients 1e-3; float64 1e-10.
"""
from __future__ import annotations

import pytest
import torch

from tests._helpers import rel_err
from tests.backends.test_cuda import (TOL, _check, _cost_matrix, _cost_reference, _gamma, _grad, _problem,
                                      cuda_backend, cuda_fused, launch_module, reference_fused)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CASES = [
    # B, N, M, D, cost, gamma, lengths, band, K, W, TH
    (3, 70, 300, 2, "sqeuclidean", 0.5, True, 40, 1, 1, 96),
    (3, 70, 300, 2, "sqeuclidean", 0.0, True, 40, 2, 1, 96),
    (2, 333, 250, 1, "l1", 1.0, True, None, 1, 2, 160),
    (2, 1, 517, 3, "sqeuclidean", 0.1, False, None, 2, 1, 96),
    (2, 517, 1, 1, "sqeuclidean", 1.0, True, None, 1, 1, 96),
    (2, 800, 700, 1, "sqeuclidean", 0.01, True, 100, 4, 4, 288),
    (1, 500, 2100, 1, "sqeuclidean", 1.0, False, None, 8, 2, 160),
    (4, 257, 129, 4, "l1", 0.3, True, 20, 1, 4, 288),
]


def _layout(K, W, TH, chain=True):
    return launch_module().forced_plan(K, W, chain=chain, TH=TH)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("memory", ["store", "checkpoint"])
@pytest.mark.parametrize("B,N,M,D,cost,gamma,lengths,band,K,W,TH", CASES)
def test_chained_fused_matches_reference(dtype, memory, B, N, M, D, cost, gamma, lengths, band, K, W, TH):
    x, y, xl, yl, w = _problem(B, N, M, D, seed=N + 3 * M + K, lengths=lengths, band=band)
    want = reference_fused(x, y, _gamma(gamma, torch.float64), cost, xl, yl, w, _grad(B, torch.float64))
    with _layout(K, W, TH):
        got = cuda_fused(x.to(dtype), y.to(dtype), _gamma(gamma, dtype), cost, xl, yl, w, _grad(B, dtype), memory)
        v_none, _ = cuda_backend().forward(x.to(dtype), y.to(dtype), _gamma(gamma, dtype), cost, xl, yl, w, "none")
    _check(got, want, dtype, gamma)
    assert rel_err(v_none, want[0]) <= TOL[dtype][0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("gamma", [0.0, 0.7])
def test_chained_precomputed_cost_checkpoint(dtype, gamma):
    be = cuda_backend()
    x, y, xl, yl, w = _problem(3, 300, 420, 2, seed=9, lengths=True, band=60)
    want = _cost_reference(x, y, gamma, xl, yl, w)
    C = _cost_matrix(x, y).to(dtype)
    g, grad = _gamma(gamma, dtype), _grad(3, dtype)
    for memory in ("store", "checkpoint"):
        with _layout(2, 2, 160):
            v, saved = be.forward_cost(C, g, xl, yl, w, memory)
            dC, dg = be.backward_cost(grad, C.clone(), g, xl, yl, w, v, saved, memory)
        _check((v, dC, dg), want, dtype, gamma)


@pytest.mark.parametrize("N,M", [(1, 300), (3, 129), (17, 600), (40, 40)])
@pytest.mark.parametrize("K,W,chain", [(1, 2, False), (2, 4, False), (1, 4, True), (4, 2, True)])
def test_short_series_on_several_warps_per_pair(N, M, K, W, chain):
    """Layouts of 2 and 4 warps per pair over series of 1 to 40 rows, narrow and wide in y (several
    chunks; the last one narrower than a chunk, so sequential passes are trimmed): agree with the
    reference, sequential and chained, chained also with memory="checkpoint"."""
    x, y, xl, yl, w = _problem(3, N, M, 2, seed=N + M + W, lengths=True)
    want = reference_fused(x, y, _gamma(0.5, torch.float64), "sqeuclidean", xl, yl, w, _grad(3, torch.float64))
    for memory in ("store", "checkpoint") if chain else ("store",):
        with _layout(K, W, 64 * W + 32, chain):
            got = cuda_fused(x.float(), y.float(), _gamma(0.5, torch.float32), "sqeuclidean", xl, yl, w,
                             _grad(3, torch.float32), memory)
        _check(got, want, torch.float32, 0.5)


def test_checkpoint_and_store_agree_and_saved_spec():
    """Same plan, both memory modes: gradients equal to rounding; the checkpoint is far smaller."""
    be = cuda_backend()
    x, y, xl, yl, w = _problem(3, 1500, 1300, 1, seed=4, lengths=True, band=300)
    x, y = x.float(), y.float()
    g, grad = _gamma(0.5, torch.float32), _grad(3, torch.float32)
    with _layout(4, 2, 288):
        vs, ss = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "store")
        a = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, vs, ss, "store")
        vc, sc = be.forward(x, y, g, "sqeuclidean", xl, yl, w, "checkpoint")
        b = be.backward(grad, x, y, g, "sqeuclidean", xl, yl, w, vc, sc, "checkpoint")
        shape, sdtype = be.saved_spec("fused", 3, 1500, 1300, 1, torch.float32, "checkpoint")
    # float32: the storing forward's soft-min is evaluated in another (equivalent) order: last-bit differences.
    assert rel_err(vc, vs) <= 1e-6
    for p, q in zip(a, b):  # the checkpointed rows come from the value-only soft-min: last-bit differences
        assert rel_err(q, p) <= 1e-4
    assert tuple(sc.shape) == tuple(shape) and sc.dtype == sdtype == torch.float32
    assert sc.numel() * 20 < ss.numel()


def test_chain_with_more_blocks_than_fit_at_once():
    """8192 one-warp blocks (more than an H100 holds at once): tickets keep the chain deadlock-free."""
    x, y, xl, yl, w = _problem(128, 40, 2048, 1, seed=6, lengths=True)
    want = reference_fused(x, y, _gamma(1.0, torch.float64), "sqeuclidean", xl, yl, w, _grad(128, torch.float64))
    with _layout(1, 1, 96):
        got = cuda_fused(x.float(), y.float(), _gamma(1.0, torch.float32), "sqeuclidean", xl, yl, w,
                         _grad(128, torch.float32), "checkpoint")
    _check(got, want, torch.float32, 1.0)


def test_planner_chains_few_long_pairs_and_always_for_checkpoint():
    lm = launch_module()
    p = lm.choose_plan(1, 65536, 65536, 16, 132)
    assert p.chain and p.nch > 1
    p = lm.choose_plan(16384, 512, 512, 16, 132)
    assert not p.chain
    for B, N, M in [(1, 65536, 65536), (16, 8192, 8192), (4096, 128, 128), (3, 5, 7)]:
        p = lm.choose_plan(B, N, M, 16, 132, (), True)
        assert p.chain and p.TH >= 1 and p.nch * p.CW >= M
        assert p.TH >= N or p.TH >= 64 * p.W + 32
        assert B * p.nch * p.tile_numel() * 4 <= max(lm.TILE_BYTES, B * p.nch * 2 * (64 * p.W + 32) * p.CW * 4)


def test_checkpoint_long_pair_bounded_memory():
    """B = 1, N = M = 20000 float32 checkpoint: value within 1e-5 of the float64 value-only pass, and the
    step's peak memory far below the 1.6 GB a stored table would take."""
    be = cuda_backend()
    x, y, xl, yl, w = _problem(1, 20000, 20000, 1, seed=12)
    g = _gamma(1.0, torch.float32)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    got = cuda_fused(x.float(), y.float(), g, "sqeuclidean", xl, yl, w, _grad(1, torch.float32), "checkpoint")
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    v64, _ = be.forward(x, y, _gamma(1.0, torch.float64), "sqeuclidean", xl, yl, w, "none")
    assert all(torch.isfinite(t).all() for t in got)
    assert rel_err(got[0], v64) <= 1e-5
    assert peak < 0.5e9, peak


def test_out_of_memory_is_a_clear_error():
    """A checkpoint that cannot fit: MemoryError naming the sizes and what to do, not a CUDA error."""
    be = cuda_backend()
    free = torch.cuda.mem_get_info()[0]
    N = 1 << 20  # R on the chunk boundaries alone: B · nch · N floats
    B = max(2, int(free // (N * 4 * 8)))
    x = torch.randn(1, N, 1, device="cuda").expand(B, N, 1)
    lengths = torch.full((B,), N, dtype=torch.int64, device="cuda")
    g = _gamma(1.0, torch.float32)
    with pytest.raises(MemoryError, match=r"B=\d+ pairs of lengths N=1048576.*GiB.*fewer pairs"):
        be.forward(x, x, g, "sqeuclidean", lengths, lengths, None, "checkpoint")
