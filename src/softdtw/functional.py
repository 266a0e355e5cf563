r"""Soft-DTW and friends as functions: validate, pick the backend, call the op.

Conventions (see DESIGN.md): x `(B, N, D)`, y `(B, M, D)` (or unbatched `(N, D)`, `(M, D)`), cost
C[b, i, j] = cost(x[b, i], y[b, j]), and

.. math::
    R_{i,j} = C_{i,j} + \min{}^\gamma(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}),\quad
    \min{}^\gamma(a) = -\gamma \log \sum_k e^{-a_k/\gamma},

with R[-1, -1] = 0 and the other borders +inf; soft-DTW is R[N-1, M-1] (Cuturi & Blondel 2017).
"""
from __future__ import annotations

from typing import List, Union

import torch

from . import _ops, costs
from ._checks import Problem, check_cost_matrix, make_window, prepare, prepare_cost, run_checked
from .backends import FUSED_COSTS

__all__ = [
    "soft_dtw", "soft_dtw_divergence", "soft_dtw_from_cost", "soft_dtw_alignment", "dtw", "dtw_path",
]


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _run_cost(C: torch.Tensor, p: Problem, memory: str) -> torch.Tensor:
    B, N, M = C.shape
    mem = _ops.resolve_memory(memory, _needs_grad(C, p.gamma), p.backend, "cost", B, N, M, 0, C.dtype,
                              C.device)
    return _ops.cost_value(C, p.gamma, p.x_lengths, p.y_lengths, p.window, mem, p.backend)


def _run(p: Problem, cost, memory: str) -> torch.Tensor:
    """Soft-DTW values `(B,)` of a validated problem, in the compute dtype."""
    B, N, D = p.x.shape
    M = p.y.shape[1]
    if isinstance(cost, str) and cost in FUSED_COSTS:
        mem = _ops.resolve_memory(memory, _needs_grad(p.x, p.y, p.gamma), p.backend, "fused", B, N, M, D,
                                  p.x.dtype, p.x.device)
        return _ops.fused_value(p.x, p.y, p.gamma, cost, p.x_lengths, p.y_lengths, p.window, mem, p.backend)
    # Under autocast the cost may come back in half precision; the DP always runs in the compute dtype.
    C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M).to(p.x.dtype)
    return _run_cost(C.contiguous(), p, memory)


def _finish(value: torch.Tensor, p: Problem) -> torch.Tensor:
    value = value.to(p.out_dtype)
    return value[0] if p.unbatched else value


def soft_dtw(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
             itakura_max_slope=None, x_lengths=None, y_lengths=None, memory: str = "auto",
             backend=None) -> torch.Tensor:
    r"""Soft-DTW between the pairs (x[b], y[b]) of two batches (Cuturi & Blondel 2017).

    .. math:: \mathrm{sdtw}_\gamma(x, y) = \min{}^\gamma_{A} \langle A, C(x, y) \rangle

    over the warping paths A from (0, 0) to (n - 1, m - 1).

    Args:
        x: `(B, N, D)` float tensor (or `(N, D)`); steps past `x_lengths` are ignored. A
            ``torch.nn.utils.rnn.PackedSequence`` is read as its padded batch with its lengths (pairs
            keep the packing order, also for ``enforce_sorted=False``); x_lengths must then be None.
        y: `(B, M, D)` float tensor (or `(M, D)`, or a PackedSequence as x); M may differ from N.
        gamma: smoothing >= 0, in the units of the cost (squared units of x for "sqeuclidean");
            a float or a 0-d tensor that may require grad (learnable gamma). 0 gives hard DTW.
        cost: "sqeuclidean" (default), "l1", "cosine", or a callable (x, y) -> `(B, N, M)`.
        bandwidth: Sakoe–Chiba radius (tslearn's `sakoe_chiba_radius`), per pair of lengths; None = no band.
        itakura_max_slope: Itakura parallelogram slope (tslearn's `itakura_max_slope`); None = none.
        x_lengths: `(B,)` int valid lengths of x (default: all N).
        y_lengths: `(B,)` int valid lengths of y (default: all M).
        memory: "auto" (default), "store" or "checkpoint": what the forward keeps for the backward.
        backend: None (by device), "reference", "cpu" or "cuda".

    Returns:
        `(B,)` soft-DTW values, same dtype as x (a 0-d tensor for unbatched inputs). Not normalised
        by path length; can be negative (use :func:`soft_dtw_divergence` for a non-negative loss).

    Devices: CPU, CUDA. Differentiable in: x, y, gamma.

    Example:
        >>> import torch, softdtw
        >>> x, y = torch.zeros(2, 4, 1), torch.ones(2, 5, 1)
        >>> softdtw.soft_dtw(x, y, gamma=0.0)
        tensor([5., 5.])
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    return _finish(run_checked(p, lambda: _run(p, cost, memory)), p)


def soft_dtw_divergence(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
                        itakura_max_slope=None, x_lengths=None, y_lengths=None, memory: str = "auto",
                        backend=None) -> torch.Tensor:
    r"""Soft-DTW divergence (Blondel, Mensch & Vert 2021): a non-negative loss, zero at x = y.

    .. math:: D_\gamma(x, y) = \mathrm{sdtw}_\gamma(x, y) - \tfrac12 \mathrm{sdtw}_\gamma(x, x)
              - \tfrac12 \mathrm{sdtw}_\gamma(y, y)

    Three separate dynamic programs, so N != M is fine. Arguments as :func:`soft_dtw`; each self-term
    uses that series' own lengths (and the band scaled to them). Non-negativity is a property of the
    unconstrained divergence with the squared Euclidean cost; with a band it is still 0 at x = y but
    may dip slightly below 0 elsewhere, since the band restricts the cross and self terms differently.

    Returns:
        `(B,)` divergences, same dtype as x. Devices: CPU, CUDA. Differentiable in: x, y, gamma.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> x, y = torch.randn(3, 10, 2), torch.randn(3, 12, 2)
        >>> softdtw.soft_dtw_divergence(x, x)
        tensor([0., 0., 0.])
        >>> bool((softdtw.soft_dtw_divergence(x, y) > 0).all())
        True
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    N, M = p.x.shape[1], p.y.shape[1]
    pxx = p._replace(y=p.x, y_lengths=p.x_lengths,
                     window=make_window(p.x_lengths, p.x_lengths, N, N, bandwidth, itakura_max_slope))
    pyy = p._replace(x=p.y, x_lengths=p.y_lengths,
                     window=make_window(p.y_lengths, p.y_lengths, M, M, bandwidth, itakura_max_slope))
    value = run_checked(p, lambda: _run(p, cost, memory) - 0.5 * _run(pxx, cost, memory)
                        - 0.5 * _run(pyy, cost, memory))
    return _finish(value, p)


def soft_dtw_from_cost(C, gamma: Union[float, torch.Tensor] = 1.0, *, bandwidth=None, itakura_max_slope=None,
                       x_lengths=None, y_lengths=None, memory: str = "auto", backend=None) -> torch.Tensor:
    """Soft-DTW of a precomputed cost matrix.

    Args:
        C: `(B, N, M)` (or `(N, M)`) float tensor of costs; entries past the lengths are ignored.
        gamma, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory, backend: as :func:`soft_dtw`
            (x_lengths count rows of C, y_lengths columns).

    Returns:
        `(B,)` values (0-d for a 2-D C), same dtype as C. Devices: CPU, CUDA. Differentiable in: C, gamma.

    Example:
        >>> import torch, softdtw
        >>> softdtw.soft_dtw_from_cost(torch.eye(3), gamma=0.0)  # every path meets C[0, 0] and C[2, 2]
        tensor(2.)
        >>> softdtw.soft_dtw_from_cost(1 - torch.eye(3), gamma=0.0)  # the diagonal costs nothing
        tensor(0.)
    """
    p = prepare_cost(C, gamma, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, x_lengths=x_lengths,
                     y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    return _finish(run_checked(p, lambda: _run_cost(p.x, p, memory)), p)


def _alignment(p: Problem, cost) -> torch.Tensor:
    """E `(B, N, M)` of a validated problem (no autograd graph)."""
    with torch.no_grad():
        B, N, D = p.x.shape
        M = p.y.shape[1]
        C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M).to(p.x.dtype).contiguous()
        gamma = p.gamma.detach()
        value, saved = _ops.forward_cost(C, gamma, p.x_lengths, p.y_lengths, p.window, "store", p.backend)
        ones = torch.ones_like(value)
        E, _ = _ops.backward_cost(ones, C, gamma, p.x_lengths, p.y_lengths, p.window, value, saved, "store",
                                  p.backend)
    return E


def soft_dtw_alignment(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
                       itakura_max_slope=None, x_lengths=None, y_lengths=None, backend=None) -> torch.Tensor:
    r"""Expected alignment matrix E = dsdtw / dC (Cuturi & Blondel 2017, Algorithm 2).

    E[b, i, j] in [0, 1] is the probability that step i of x[b] is matched with step j of y[b] under
    the Gibbs distribution over paths at temperature gamma; gamma = 0 gives the 0/1 matrix of the
    optimal path. Arguments as :func:`soft_dtw`.

    Returns:
        `(B, N, M)` (or `(N, M)`), same dtype as x; zero past the lengths and outside a band.
        Devices: CPU, CUDA. Not differentiable (detached).

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> E = softdtw.soft_dtw_alignment(torch.randn(5, 1), torch.randn(7, 1), gamma=0.1)
        >>> E.shape, round(float(E[0, 0]), 4), round(float(E[-1, -1]), 4)  # every path starts and ends there
        (torch.Size([5, 7]), 1.0, 1.0)
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend)
    E = _alignment(p, cost).to(p.out_dtype)
    return E[0] if p.unbatched else E


def dtw(x, y, *, cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
        memory: str = "auto", backend=None) -> torch.Tensor:
    """Hard DTW: the cost summed along the optimal path (soft-DTW with gamma = 0).

    With the default cost this is the sum of *squared* Euclidean distances along the path: tslearn's
    ``dtw`` squared (``tslearn.metrics.dtw(a, b) == softdtw.dtw(a, b).sqrt()``). Arguments as
    :func:`soft_dtw`.

    Returns:
        `(B,)` values (0-d for unbatched inputs), same dtype as x. Devices: CPU, CUDA.
        Differentiable in: x, y (the gradient of the cost along the optimal path).

    Example:
        >>> import torch, softdtw
        >>> softdtw.dtw(torch.tensor([[0.], [1.], [2.]]), torch.tensor([[0.], [2.]]))
        tensor(1.)
    """
    return soft_dtw(x, y, 0.0, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                    x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend)


def dtw_path(x, y, *, cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None,
             y_lengths=None, backend=None) -> Union[torch.Tensor, List[torch.Tensor]]:
    """The optimal warping path of each pair (ties broken as tslearn: diagonal, then up, then left).

    Returns:
        For batched inputs a list of B int64 tensors `(L_b, 2)` of (i, j) index pairs from (0, 0) to
        (n_b - 1, m_b - 1); for unbatched inputs one `(L, 2)` tensor. On the inputs' device.

    Example:
        >>> import torch, softdtw
        >>> softdtw.dtw_path(torch.tensor([[0.], [1.], [2.]]), torch.tensor([[0.], [2.]])).tolist()
        [[0, 0], [1, 0], [2, 1]]
    """
    p = prepare(x, y, 0.0, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend)
    on_path = _alignment(p, cost) > 0.5
    paths = [torch.nonzero(on_path[b]) for b in range(on_path.shape[0])]  # row-major = path order
    return paths[0] if p.unbatched else paths
