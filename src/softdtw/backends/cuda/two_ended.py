"""The value-only forward of few long pairs from both ends (kernels/two_ended.cu).

A chained value-only pass of a long pair takes about N + nch·(32 W + lag) lane steps: where the batch is small, that
one pair's critical path, not the GPU's throughput, sets the time (B = 16, N = M = 8192: 2.9 ms of kernel, 365 GCUPS,
on an H200, with most of the GPU idle). Every monotone path crosses from row h - 1 to row h exactly once, so the value
is a soft-min over the columns of R[h - 1, :] (the forward DP of rows [0, h)) against S[h, :] (the same DP of rows
[h, n) and y, both reversed): two DPs of about N / 2 rows each, run as one chained launch of 2B pairs, and a fold of
their last rows. Three launches: the halves' inputs (reversed copies), forward_chain_kernel with the open end (which
keeps each pair's last row in float64), and the fold.

It is taken where it pays (:func:`applies`): a value-only call (no gradient) of a fused cost, no band or alignment
variant, whose pass is chained and whose doubled launch keeps at most :data:`WARPS_PER_SM` warps per SM (past that
the GPU is full, and halving the path buys nothing: B = 64, N = M = 8192 ran 15 % slower). The values equal the
one-ended pass's up to rounding (float64: 1e-15; float32: a few ulp, both within the one-ended pass's own distance
to float64; tests/backends/test_cuda_two_ended.py). benchmarks/OPTIMIZATION_LOG.md, "Two-ended value-only forward".
"""
from __future__ import annotations

import torch

from . import launch as _launch

#: Warps per SM the doubled launch may keep (2B·nch·W <= WARPS_PER_SM · SMs).
WARPS_PER_SM = 16
_THREADS = 256  # kernels/two_ended.cu: TWO_ENDED_THREADS, and the inputs kernel's block
_CTYPE = {torch.float32: "float", torch.float64: "double"}
_enabled = [True]


def set_enabled(on: bool) -> None:
    """Switch the two-ended path on or off (benchmarks and tests compare it with the one-ended pass)."""
    _enabled[0] = bool(on)


def enabled() -> bool:
    return _enabled[0]


def applies(B: int, N: int, M: int, D: int, dtype: torch.dtype, device_index: int) -> bool:
    """Whether a value-only call of B pairs of N x M (fused cost of D features, no band or variant) runs from both
    ends: its pass is chained, the halves' pass is chained too, and their blocks keep at most WARPS_PER_SM warps per
    SM. Under a forced plan (launch.forced_plan) the forced layout is the halves'."""
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
    if not forced:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[key] = ok
    return ok


_CACHE: dict = {}


def inputs(x: torch.Tensor, y: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> tuple:
    """The 2B pairs of the two halves (kernels/two_ended.cu, two_ended_inputs_kernel): x2 `(2B, ceil(N / 2), D)`, y2
    `(2B, M, D)`, and their lengths, int64 `(2B,)` each."""
    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    # The halves' inputs and lengths in two buffers (one allocation each).
    data = x.new_empty((2 * B * (H + M) * D,))
    x2, y2 = data[:2 * B * H * D].view(2 * B, H, D), data[2 * B * H * D:].view(2 * B, M, D)
    lengths = torch.empty((4 * B,), dtype=torch.int64, device=x.device)
    xl2, yl2 = lengths[:2 * B], lengths[2 * B:]
    span = 2 * B * max(H, M)
    _launch.launch("two_ended", f"sdtw::two_ended_inputs_kernel<{_CTYPE[x.dtype]}>", dev, -(-span // _THREADS),
                   _THREADS, (x.data_ptr(), y.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.i32(B),
                              _launch.i32(N), _launch.i32(M), _launch.i32(D), x2.data_ptr(), y2.data_ptr(),
                              xl2.data_ptr(), yl2.data_ptr()))
    return x2, y2, xl2, yl2


def forward(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, cost: str, x_lengths: torch.Tensor,
            y_lengths: torch.Tensor) -> torch.Tensor:
    """Values `(B,)` of x `(B, N, D)`, y `(B, M, D)` (contiguous, a fused cost), gamma a 0-d tensor of x's dtype,
    lengths int64 `(B,)`, computed from both ends; nothing is saved."""
    from . import _forward_chain_buffers, _forward_chain_expr, _launch_forward_chain, _variant

    x2, y2, xl2, yl2 = inputs(x, y, x_lengths, y_lengths)
    B, N, D = x.shape
    M = y.shape[1]
    H = (N + 1) // 2
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ctype = _CTYPE[x.dtype]
    var = _variant(x2, 2 * B, None, False, True, None)
    plan = _launch.plan_for(2 * B, H, M, D, x.dtype, dev)
    halves, _, bufs = _forward_chain_buffers(x2, 2 * B, H, M, plan, False, var)  # halves: their own values, unused
    expr = _forward_chain_expr(x.dtype, cost, D, plan, False, False, 2 * B, dev, var)
    _launch_forward_chain(expr, dev, plan, x2, y2, None, gamma, xl2, yl2, None, halves, None, bufs, 2 * B, H, M, var)
    value = x.new_empty((B,))
    _launch.launch("two_ended", f"sdtw::two_ended_value_kernel<{ctype}>", dev, B, _THREADS,
                   (bufs[3].data_ptr(), gamma.data_ptr(), x_lengths.data_ptr(), y_lengths.data_ptr(), _launch.i32(B),
                    _launch.i32(N), _launch.i32(M), value.data_ptr()))
    return value
