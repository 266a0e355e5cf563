"""Soft-DTW of few long pairs from both ends: the value-only forward, and gradients (kernels/two_ended.cu).

A chained value-only pass of a long pair takes about N + nch·(32 W + lag) lane steps: where the batch is small, that
one pair's critical path, not the GPU's throughput, sets the time (B = 16, N = M = 8192: 2.9 ms of kernel, 365 GCUPS,
on an H200, with most of the GPU idle; from both ends 2.05 ms, 520 GCUPS, since the cells' open diag-up stage and the
halves' late chain loads, OPTIMIZATION_LOG.md "The diag-up stage left open"). Every monotone path crosses from row
h - 1 to row h exactly once, so the value is a soft-min over the columns of R[h - 1, :] (the forward DP of rows [0, h))
against S[h, :] (the same DP of rows [h, n) and y, both reversed): two DPs of about N / 2 rows each, run as one
chained launch of 2B pairs, and a fold of their last rows. Three launches: the halves' inputs (reversed copies),
forward_chain_kernel with the open end (which keeps each pair's last row in float64), and the fold.

Gradients too (:func:`forward_saving`, :func:`backward`): the open end's backward seeds each pair's last row with
2^(v - endr[j]), so kernels/two_ended.cu's seed kernel rewrites the halves' end values into d value / d R[h - 1, j]
(top) and d value / d S[h, j] (bottom), and the halves' dx, dy map back. Only for a float gamma > 0 (hard DTW breaks
ties in the bottom rows by R, which the halves never form), no band or variant, pairs of at least GRAD_MIN_ROWS rows
and a doubled launch of at most GRAD_WARPS_PER_SM warps per SM (CKPT_MIN_ROWS and CKPT_WARPS_PER_SM with
memory="checkpoint"; :func:`applies_grad`). Storing calls: the C++ launcher's two-ended plans (fastpath.py) and the
Python path (softdtw._ops._FusedTwoEnded) launch the same kernels, so the two agree bitwise. Checkpointed calls (the
halves keep their checkpoints, the backward recomputes their tiles) run on the Python path, where the launcher leaves
every checkpointed call of a fused cost. torch.compile's graphs hold the ops and run one-ended; a create_graph=True
backward is the one-ended differentiable one (its forward run again in the call's memory mode).

The value-only path is taken where it pays (:func:`applies`): a value-only call (no gradient) of a fused cost, no band
or alignment variant, whose pass is chained and whose doubled launch keeps at most :data:`WARPS_PER_SM` warps per SM
(past that the GPU is full, and halving the path buys nothing: B = 64, N = M = 8192 ran 15 % slower), and not where
the halves would run K = 8 against a one-ended K <= :data:`SPLIT_K_MAX` in float32. The public API runs these calls
through the C++ launcher as well (fastpath.py, the launches of :func:`forward`); the ops' kernels (torch.compile)
leave them to the Python kernel, which calls :func:`forward`. The values equal the one-ended pass's up to rounding
(float64: 1e-15; float32: a few ulp, both within the one-ended pass's own distance to float64;
tests/backends/test_cuda_two_ended.py). benchmarks/OPTIMIZATION_LOG.md, "Two-ended value-only forward".
"""
from __future__ import annotations

import os

import torch

from . import launch as _launch

#: Warps per SM the doubled launch may keep (2B·nch·W <= WARPS_PER_SM · SMs).
WARPS_PER_SM = 16
#: The float32 value-only chained pass takes its cells' soft-min in two stages up to this K (kernels/forward_pair.cuh,
#: SPLIT_PASS), a step ~17 % shorter than K = 8's. Halves planned at K = 8 against a one-ended pass at K <= 4 lose
#: (H200: 32 x 8192² 3.35 -> 3.54 ms, 16 x 16384² 6.79 -> 7.11, 4 x 65536² 28.4 -> 28.8), so they keep one end.
SPLIT_K_MAX = 4
_THREADS = 256  # kernels/two_ended.cu: TWO_ENDED_THREADS, and the inputs kernel's block
_enabled = [os.environ.get("SOFTDTW_TWO_ENDED", "1") != "0"]  # SOFTDTW_TWO_ENDED=0: one-ended everywhere (A/B runs)
_CACHE: dict = {}  # applies' answers per (B, N, M, D, dtype, device)


def set_enabled(on: bool) -> None:
    """Switch the two-ended paths on or off (benchmarks and tests compare them with the one-ended pass). Plans the C++
    launcher learnt before keep their kind: switch before a shape's first call (or set SOFTDTW_TWO_ENDED=0)."""
    _enabled[0] = bool(on)
    _CACHE.clear()


def enabled() -> bool:
    """Whether the two-ended paths are on."""
    return _enabled[0]


def applies(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int) -> bool:
    """Whether a value-only call of B pairs of N x M (fused cost of D features, no band or variant) runs from both
    ends: its pass is chained, the halves' pass is chained too, their blocks keep at most WARPS_PER_SM warps per
    SM, and (float32) the halves' step is not K = 8's against a one-ended K <= SPLIT_K_MAX. Under a forced plan
    (launch.forced_plan) the forced layout is the halves'."""
    if not _enabled[0] or N < 2:
        return False
    return _applies(B, N, M, D, dtype, device_index, bool(_launch._forced))


def _applies(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int, forced: bool) -> bool:
    key = (B, N, M, D, dtype, device_index)
    if not forced and key in _CACHE:
        return _CACHE[key]
    one = _launch.plan_for(B, N, M, D, dtype, device_index)
    half = _launch.plan_for(2 * B, (N + 1) // 2, M, D, dtype, device_index)
    ok = one.chain and half.chain and 2 * B * half.nch * half.W <= WARPS_PER_SM * _launch.sm_count(device_index)
    if dtype == torch.float32 and one.K <= SPLIT_K_MAX < half.K:
        ok = False
    if not forced:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[key] = ok
    return ok


#: The gradient from both ends (storing calls with a float gamma > 0, in the C++ launcher and on the Python path alike:
#: fastpath.py's _add_two_ended_plan, softdtw._ops._FusedTwoEnded): pairs of at least GRAD_MIN_ROWS rows whose doubled
#: launch keeps at most GRAD_WARPS_PER_SM warps per SM. Shorter pairs lose (the halves' inputs, the fold and the mapping
#: are three more launches; H200 prototype, 16 x 128², 64 x 96², 128 x 64²: 1.5-2.2x the one-ended GPU time), as does
#: a fuller GPU (128 x 512², 1024 warps: 0.51 -> 0.53-0.71 ms a training step). At 512 rows the halves' kernels take
#: 0.209 ms against 0.293 (32 x 512², all kernels back to back), but there the host bounds the step, and the two-ended
#: plan's more launches cost it more than that: 1.23-1.26x the MSE step against 1.16-1.17x; with its copies of grad
#: gone (three more kernels, not five), 1.64-1.66x against 1.43-1.54x on a faster host (MSE step 0.31-0.46 ms,
#: "The two-ended backward without copies of grad"). At 768 rows the GPU bounds it and the halves win: 4 to 64 x 768²,
#: kernels 0.34-0.35 ms against 0.59-0.60, the step 1.22-1.48x the MSE step against 1.38-1.66x (H200;
#: OPTIMIZATION_LOG.md, "The gradient from both ends from 768 rows"; before it, "Pairs of 512 rows from both ends,
#: again", "A gradient from both ends" and "Checkpointed gradients from both ends").
GRAD_MIN_ROWS = 768
GRAD_WARPS_PER_SM = 4
#: The same bound for memory="checkpoint" (whose backward runs twice the warps, half of them recomputing tiles): H200,
#: a forward + backward step 0.69-0.82x the one-ended one up to 7.8 warps per SM (1 x 4096² to 1 x 65536², 32 x
#: 2048²: 0.90), 1.15x at 15.5 (2 x 65536²). The halves' tile buffers are twice the one-ended call's (2B·nch blocks),
#: within the same launch.TILE_BYTES: one 65536² pair peaks at 1.27 GB instead of 0.73 (tiles of 512 rows would keep
#: 0.75 GB but give back most of the gain there, 0.92x).
CKPT_WARPS_PER_SM = 8
#: And its rows: memory="checkpoint" keeps the bound it was measured at (its calls run on the Python path, whose host
#: time is more; not measured at 768 rows).
CKPT_MIN_ROWS = 1024


def applies_grad(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int,
                 memory: str = "store") -> bool:
    """Whether a call with a gradient of B pairs of N x M runs from both ends (fused cost of D features, no band or
    variant, a float gamma > 0: the caller's part). memory: "store" (the C++ launcher and the Python path alike) or
    "checkpoint" (the Python path)."""
    ckpt = memory == "checkpoint"
    if not _enabled[0] or N < (CKPT_MIN_ROWS if ckpt else GRAD_MIN_ROWS) or memory not in ("store", "checkpoint"):
        return False
    half = _launch.plan_for(2 * B, (N + 1) // 2, M, D, dtype, device_index, ckpt)
    warps = 2 * B * half.W * (half.nch if half.chain else 1)
    return warps <= (CKPT_WARPS_PER_SM if ckpt else GRAD_WARPS_PER_SM) * _launch.sm_count(device_index)


def _kernel(name: str, dtype: torch.dtype) -> str:
    """The instantiation of one of kernels/two_ended.cu's kernels for the data dtype."""
    return f"sdtw::{name}<{_launch._CTYPE[dtype]}>"


def _open_end():
    """The halves' alignment variant: the open end (backends/cuda/__init__.py, _Var), nothing else."""
    from . import _NO_PENALTY, _Var

    return _Var(2, None, _NO_PENALTY)


def inputs(x: torch.Tensor, y: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> tuple:
    """The 2B pairs of the two halves (kernels/two_ended.cu, two_ended_inputs_kernel): x2 `(2B, ceil(N / 2), D)`, y2
    `(2B, M, D)`, and their lengths, int64 `(2B,)` each."""
    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    dev = x.get_device()
    # The halves' inputs and lengths in two buffers (one allocation each).
    data = x.new_empty((2 * B * (H + M) * D,))
    x2, y2 = data[:2 * B * H * D].view(2 * B, H, D), data[2 * B * H * D:].view(2 * B, M, D)
    lengths = torch.empty((4 * B,), dtype=torch.int64, device=x.device)
    xl2, yl2 = lengths[:2 * B], lengths[2 * B:]
    span = 2 * B * max(H, M)
    _launch.launch("two_ended", _kernel("two_ended_inputs_kernel", x.dtype), dev, -(-span // _THREADS), _THREADS,
                   (x.data_ptr(), y.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.i32(B),
                    _launch.i32(N), _launch.i32(M), _launch.i32(D), x2.data_ptr(), y2.data_ptr(), xl2.data_ptr(),
                    yl2.data_ptr()))
    return x2, y2, xl2, yl2


def forward(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, cost: str, x_lengths: torch.Tensor,
            y_lengths: torch.Tensor) -> torch.Tensor:
    """Values `(B,)` of x `(B, N, D)`, y `(B, M, D)` (contiguous, a fused cost), gamma a 0-d tensor of x's dtype,
    lengths int64 `(B,)`, computed from both ends; nothing is saved."""
    from . import _forward_chain_buffers, _forward_chain_expr, _launch_forward_chain

    x2, y2, xl2, yl2 = inputs(x, y, x_lengths, y_lengths)
    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    dev = x.get_device()
    var = _open_end()
    plan = _launch.plan_for(2 * B, H, M, D, x.dtype, dev)
    halves, _, bufs = _forward_chain_buffers(x2, 2 * B, H, M, plan, False, var)  # halves: their own values, unused
    expr = _forward_chain_expr(x.dtype, cost, D, plan, False, False, var)
    _launch_forward_chain(expr, dev, plan, x2, y2, None, gamma, xl2, yl2, None, halves, None, bufs, 2 * B, H, M, var)
    value = x.new_empty((B,))
    _launch.launch("two_ended", _kernel("two_ended_value_kernel", x.dtype), dev, B, _THREADS,
                   (bufs[3].data_ptr(), gamma.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.i32(B),
                    _launch.i32(N), _launch.i32(M), value.data_ptr()))
    return value


def _ones_at(B: int, M: int) -> int:
    """Where the seeds buffer (float64 entries) of B pairs of M columns holds its 2B ones, after the seeds (2B, M) and
    the end values (2B, 2): the halves' grad in :func:`backward` (kernels/two_ended.cu, two_ended_seed_kernel)."""
    return 2 * B * M + 4 * B


def forward_saving(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, cost: str, x_lengths: torch.Tensor,
                   y_lengths: torch.Tensor, memory: str = "store") -> tuple:
    """The forward from both ends that keeps what a gradient needs (storing: the Python path's twin of fastpath.cpp's
    Fused::forward_two, the same launches): values `(B,)` and what :func:`backward` needs (the halves' link table, or
    with memory="checkpoint" their checkpoints, with the end values after it; their inputs and lengths; the backward's
    seeds). x, y contiguous, a fused cost, gamma > 0 (the caller's part)."""
    from . import _end_in, _run_forward, _table_numel

    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    dev = x.get_device()
    ckpt = memory == "checkpoint"
    x2, y2, xl2, yl2 = inputs(x, y, x_lengths, y_lengths)
    _, saved = _run_forward(x2, y2, None, cost, D, gamma, xl2, yl2, None, not ckpt, ckpt, _open_end())
    plan = _launch.plan_for(2 * B, H, M, D, x.dtype, dev, ckpt)
    end = _end_in(saved, _table_numel(plan, 2 * B, H, x.dtype, memory))
    ones = _ones_at(B, M)
    seeds = torch.empty((ones + 2 * B,), dtype=torch.float64, device=x.device)
    value = x.new_empty((B,))
    _launch.launch("two_ended", _kernel("two_ended_seed_kernel", x.dtype), dev, B, _THREADS,
                   (end, gamma.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.i32(B), _launch.i32(N),
                    _launch.i32(M), seeds.data_ptr(), value.data_ptr(), seeds.data_ptr() + 8 * ones))
    return value, (saved, x2, y2, xl2, yl2, seeds)


def backward(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, cost: str,
             x_lengths: torch.Tensor, y_lengths: torch.Tensor, kept: tuple, memory: str = "store") -> tuple:
    """(dx, dy) of sum_b grad_b value_b from :func:`forward_saving`'s kept tensors (of the same memory mode): the open
    end's backward of the 2B pairs from the seeds, then the halves' dx, dy mapped back and scaled by grad
    (fastpath.cpp's launch_backward_two, the same launches). No dgamma: the forward's values are not needed."""
    from . import _like, _run_backward

    saved, x2, y2, xl2, yl2, seeds = kept
    B, N, D = x.shape
    M = y.shape[1]
    dev = x.get_device()
    # The halves' backward runs with grad 1 (the seed kernel's ones after the seeds) and the grads kernel scales by
    # grad, as fastpath.cpp does (no copies of grad). Their dgamma is not asked for: any 2B finite values do (x2's).
    ones2 = seeds[_ones_at(B, M):].view(x.dtype)[:2 * B]
    dx2, dy2, _, _ = _run_backward(ones2, x2, y2, None, None, cost, D, gamma, xl2, yl2, None, x2, saved,
                                   memory == "checkpoint", None, _open_end(), seeds.data_ptr())
    grad = _like(grad, x)
    dx, dy = torch.empty_like(x), torch.empty_like(y)
    span = B * max(N, M)
    _launch.launch("two_ended", _kernel("two_ended_grads_kernel", x.dtype), dev, -(-span // _THREADS), _THREADS,
                   (dx2.data_ptr(), dy2.data_ptr(), grad.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(),
                    _launch.i32(B), _launch.i32(N), _launch.i32(M), _launch.i32(D), dx.data_ptr(), dy.data_ptr()))
    return dx, dy
