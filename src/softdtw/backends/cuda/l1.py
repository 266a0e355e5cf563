"""The l1 cost of large D (past FUSED_D_MAX) and its vector-Jacobian product, one kernel each (kernels/l1.cu).

:func:`cost` gives C = sum_d |x_id - y_jd| `(B, N, M)` for the precomputed-cost DP kernels, and :func:`vjp` turns
G = grad_b E_b `(B, N, M)` into dx = sum_j G_ij sign(x_i - y_j) and dy = -sum_i G_ij sign(x_i - y_j) (sign(0) = 0,
as torch's gradient of abs). Both are plain functions of tensors, not autograd: the backend's backward calls them.
At B = 32, N = M = 1024, D = 32 on the H100 they take 0.16 and 0.61 ms, where torch.cdist(p=1) took 43.6 ms for the
cost, torch's elementwise ops ~12 ms (one feature at a time) and ~13.6 ms for the gradients
(benchmarks/OPTIMIZATION_LOG.md, "Large D: l1 cost and gradients in tiles").
"""
from __future__ import annotations

import torch

from . import launch as _launch

_THREADS = 256
_TILE = 64             # l1_cost_kernel: 64 x 64 cells per block
_ROWS, _FEAT = 64, 32  # l1_vjp_kernel: 64 rows x 32 features per block
_TYPES = {torch.float32: "float", torch.float64: "double"}


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t `(B, L, D)` with D contiguous and rows D apart (any batch stride: a band of y's columns is one)."""
    return t if t.stride(2) == 1 and t.stride(1) == t.shape[2] else t.contiguous()


def cost(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum_d |x_id - y_jd| `(B, N, M)` for CUDA x `(B, N, D)`, y `(B, M, D)` of one float dtype; summed over d in
    ascending order, as the elementwise form does."""
    x, y = _rows_contiguous(x), _rows_contiguous(y)
    B, N, D = x.shape
    M = y.shape[1]
    C = torch.empty((B, N, M), dtype=x.dtype, device=x.device)
    if C.numel() == 0:
        return C
    ti, tj = -(-N // _TILE), -(-M // _TILE)
    _launch.launch("l1", f"sdtw::l1_cost_kernel<{_TYPES[x.dtype]}>", x.get_device(), B * ti * tj, _THREADS,
                   (x.data_ptr(), y.data_ptr(), C.data_ptr(), N, M, D, x.stride(0), y.stride(0), M, ti, tj))
    return C


def vjp(x: torch.Tensor, y: torch.Tensor, G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx `(B, N, D)`, dy `(B, M, D)`) of sum G * C for the l1 cost C of :func:`cost`; G `(B, N, M)` contiguous."""
    x, y = _rows_contiguous(x), _rows_contiguous(y)
    G = G.contiguous()
    B, N, D = x.shape
    M = y.shape[1]
    dx, dy = torch.empty((B, N, D), dtype=x.dtype, device=x.device), torch.empty((B, M, D), dtype=y.dtype, device=y.device)
    if dx.numel() == 0 or dy.numel() == 0:  # also N = 0 or M = 0: the sums are empty
        return dx.zero_(), dy.zero_()
    expr, dev = f"sdtw::l1_vjp_kernel<{_TYPES[x.dtype]}>", x.get_device()
    tf = -(-D // _FEAT)
    for a, o, out, R, Cn, gr, gc in ((x, y, dx, N, M, M, 1), (y, x, dy, M, N, 1, M)):
        tr = -(-R // _ROWS)
        _launch.launch("l1", expr, dev, B * tr * tf, _THREADS,
                       (a.data_ptr(), o.data_ptr(), G.data_ptr(), out.data_ptr(), R, Cn, D, a.stride(0), o.stride(0),
                        G.stride(0), gr, gc, tr, tf))
    return dx, dy
