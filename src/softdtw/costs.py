"""Ground costs between the steps of two batches of series: `(B, N, D)`, `(B, M, D)` -> `(B, N, M)`.

"sqeuclidean" and "l1" are also computed inside the cpu and cuda kernels (never materialised);
these PyTorch versions serve the reference backend, alignments, and costs without a fused kernel.
A callable cost ``f(x, y) -> (B, N, M)`` (the ``dist_func`` of other soft-DTW libraries) is used as is.
"""
from __future__ import annotations

from typing import Callable, Union

import torch

Cost = Union[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]

#: Named costs understood everywhere.
NAMED_COSTS = ("sqeuclidean", "l1", "cosine")

# Above this many (B·N·M·D) elements, squared distances use the GEMM form instead of broadcasting.
_BROADCAST_LIMIT = 1 << 24


def sqeuclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum_d (x_id - y_jd)^2. Exact differences for small problems; GEMM form (clamped at 0) for big ones."""
    B, N, D = x.shape
    M = y.shape[1]
    if B * N * M * D <= _BROADCAST_LIMIT:
        return (x.unsqueeze(2) - y.unsqueeze(1)).pow(2).sum(-1)
    xx = x.pow(2).sum(-1, keepdim=True)
    yy = y.pow(2).sum(-1).unsqueeze(1)
    return torch.baddbmm(xx + yy, x, y.transpose(1, 2), alpha=-2.0).clamp_min(0.0)


def l1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum_d |x_id - y_jd|."""
    B, N, D = x.shape
    M = y.shape[1]
    if B * N * M * D <= _BROADCAST_LIMIT:
        return (x.unsqueeze(2) - y.unsqueeze(1)).abs().sum(-1)
    return torch.cdist(x, y, p=1.0)


def _unit(v: torch.Tensor) -> torch.Tensor:
    """v / |v| along the last dimension, at any scale: each step is first divided by its largest
    |entry| (so the norm neither overflows, as for float32 steps of size 1e20, nor underflows); an
    all-zero step stays zero. The scale factor is a constant to autograd: v / |v| does not depend on
    it, so the gradient is exact."""
    scale = v.detach().abs().amax(dim=-1, keepdim=True)
    v = v / torch.where(scale > 0, scale, torch.ones_like(scale))
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1.0)  # >= 1 unless the step is all zeros


def cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1 - <x_i, y_j> / (|x_i| |y_j|), in [0, 2], for steps of any scale; a step that is all zeros
    has cost 1 against everything."""
    return 1.0 - torch.bmm(_unit(x), _unit(y).transpose(1, 2))


_NAMED = {"sqeuclidean": sqeuclidean, "l1": l1, "cosine": cosine}


def pairwise_cost(cost: Cost, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The `(B, N, M)` cost matrix of ``cost`` (a name from :data:`NAMED_COSTS` or a callable)."""
    fn = _NAMED[cost] if isinstance(cost, str) else cost
    return fn(x, y)


def cost_vjp(cost: str, x: torch.Tensor, y: torch.Tensor, dC: torch.Tensor):
    """(dx, dy) = vector-Jacobian product of a named cost with dC `(B, N, M)`, written out.

    sqeuclidean: dX = 2 (rowsum(dC) x - dC y), dY = 2 (colsum(dC) y - dC^T x).
    l1: dX_i = sum_j dC_ij sign(x_i - y_j), dY = -(that with i and j exchanged).
    """
    if cost == "sqeuclidean":
        # The column sums of dC by a GEMM with ones: dC.sum(1), a reduction over the middle dimension,
        # took two (B, N, M) temporaries on CUDA (benchmarks/OPTIMIZATION_LOG.md, "Large D: memory of the GEMM path").
        colsum = torch.bmm(dC.transpose(1, 2), x.new_ones(x.shape[:-1] + (1,)))  # (B, M, 1)
        dx = 2.0 * (dC.sum(2, keepdim=True) * x - torch.bmm(dC, y))
        dy = 2.0 * (colsum * y - torch.bmm(dC.transpose(1, 2), x))
        return dx, dy
    if cost == "l1":
        sign = torch.sign(x.unsqueeze(2) - y.unsqueeze(1))  # (B, N, M, D)
        weighted = dC.unsqueeze(-1) * sign
        return weighted.sum(2), -weighted.sum(1)
    # Any other cost: differentiate its PyTorch definition.
    with torch.enable_grad():
        xg, yg = x.detach().requires_grad_(), y.detach().requires_grad_()
        C = pairwise_cost(cost, xg, yg)
        return torch.autograd.grad(C, (xg, yg), dC)


def cost_jvp(cost: str, x: torch.Tensor, y: torch.Tensor, x_dot: torch.Tensor, y_dot: torch.Tensor) -> torch.Tensor:
    """The derivative of a fused cost's `(B, N, M)` matrix along (x_dot, y_dot) (the shapes of x, y).

    sqeuclidean: 2 <x_i - y_j, x_dot_i - y_dot_j>; l1: sum_d sign(x_id - y_jd) (x_dot_id - y_dot_jd).
    """
    B, N, D = x.shape
    M = y.shape[1]
    if cost == "sqeuclidean":
        if B * N * M * D <= _BROADCAST_LIMIT:
            return 2.0 * ((x.unsqueeze(2) - y.unsqueeze(1)) * (x_dot.unsqueeze(2) - y_dot.unsqueeze(1))).sum(-1)
        own = (x * x_dot).sum(-1, keepdim=True) + (y * y_dot).sum(-1).unsqueeze(1)
        cross = torch.bmm(x, y_dot.transpose(1, 2)) + torch.bmm(x_dot, y.transpose(1, 2))
        return 2.0 * (own - cross)
    if cost == "l1":
        return (torch.sign(x.unsqueeze(2) - y.unsqueeze(1)) * (x_dot.unsqueeze(2) - y_dot.unsqueeze(1))).sum(-1)
    raise ValueError(f"cost_jvp is written out for the fused costs ('sqeuclidean', 'l1') only; got {cost!r}.")


def cost_vjp_jvp(cost: str, x: torch.Tensor, y: torch.Tensor, dC: torch.Tensor, x_dot: torch.Tensor,
                 y_dot: torch.Tensor):
    """The derivative of :func:`cost_vjp` (x, y) -> (dx, dy) along (x_dot, y_dot) with dC held fixed: the
    cost's own Hessian times the direction, weighted by dC. sqeuclidean: cost_vjp of the direction
    (the VJP is linear in x, y); l1: zero (almost everywhere)."""
    if cost == "sqeuclidean":
        return cost_vjp(cost, x_dot, y_dot, dC)
    if cost == "l1":
        return torch.zeros_like(x), torch.zeros_like(y)
    raise ValueError(f"cost_vjp_jvp is written out for the fused costs ('sqeuclidean', 'l1') only; got {cost!r}.")
