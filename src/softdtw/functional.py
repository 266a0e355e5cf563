r"""Soft-DTW and friends as functions: validate, pick the backend, call the op.

Conventions (see DESIGN.md): x `(B, N, D)`, y `(B, M, D)` (or unbatched `(N, D)`, `(M, D)`), cost
C[b, i, j] = cost(x[b, i], y[b, j]), and

.. math::
    R_{i,j} = C_{i,j} + \min{}^\gamma(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}),\quad
    \min{}^\gamma(a) = -\gamma \log \sum_k e^{-a_k/\gamma},

with R[-1, -1] = 0 and the other borders +inf; soft-DTW is R[N-1, M-1] (Cuturi & Blondel 2017).

Non-finite numbers: x, y and gamma must be finite (NaN or Inf raise a ValueError naming the input). A cost
(precomputed, or returned by a cost callable) may be +inf: that cell is forbidden, no warping path uses it;
NaN or -inf costs raise. A pair's value is +inf when every path crosses a forbidden cell, or when its exact
value overflows the dtype (e.g. float32 inputs of size 1e20, whose squared differences already do); such a
pair gets a zero gradient. Never NaN from finite inputs. Inputs too large for a backend's kernels to hold
exactly (cost / gamma near the kernels' finite stand-in for +inf, or +inf costs on CUDA) run on the exact
reference backend instead, slower (see softdtw._checks.REACH_LIMIT).
"""
from __future__ import annotations

from typing import List, Union

import torch

from . import _ops, costs
from ._checks import (NaNPadded, Problem, Span, _value_checks_enabled, check_cost_matrix, cost_name, make_window,
                      prepare, prepare_cost, rerun_args, route_by_range, run_checked)
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
    # A callable's output is checked like a precomputed C: numbers or +inf (forbidden cells), no NaN; and
    # costs past what the backend's kernels hold exactly run on the reference backend.
    C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M, device=p.x.device, cost=cost)
    C = C.to(p.x.dtype).contiguous()
    if not isinstance(cost, str):
        p = p._replace(backend=route_by_range([C.detach()], p.gamma, Span("C", 0, N, M), p.backend))
    return _run_cost(C, p, memory)


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
        cost: "sqeuclidean" (default), "l1", "cosine", or a callable (x, y) -> `(B, N, M)` (+inf marks
            a forbidden cell; NaN raises).
        bandwidth: Sakoe–Chiba radius (tslearn's `sakoe_chiba_radius`, fractional radii included),
            per pair of lengths; None = no band (a radius past both lengths is no band either).
        itakura_max_slope: Itakura parallelogram slope (tslearn's `itakura_max_slope`); None = none.
        x_lengths: `(B,)` int valid lengths of x (default: all N).
        y_lengths: `(B,)` int valid lengths of y (default: all M).
        memory: "auto" (default), "store" or "checkpoint": what the forward keeps for the backward.
        backend: None (by device), "reference", "cpu" or "cuda".

    Returns:
        `(B,)` soft-DTW values, same dtype as x (a 0-d tensor for unbatched inputs). Not normalised
        by path length; can be negative (use :func:`soft_dtw_divergence` for a non-negative loss).
        +inf (with a zero gradient) for a pair with no finite path or whose value overflows the dtype.

    Devices: CPU, CUDA. Differentiable in: x, y, gamma.

    Example:
        >>> import torch, softdtw
        >>> x, y = torch.zeros(2, 4, 1), torch.ones(2, 5, 1)
        >>> softdtw.soft_dtw(x, y, gamma=0.0)
        tensor([5., 5.])
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    try:
        value = run_checked(p, lambda q: _run(q, cost, memory))
    except NaNPadded as e:  # cuda checked the values after its kernels: again, with the padding's lengths
        value = soft_dtw(**rerun_args(e, p), gamma=gamma, cost=cost, bandwidth=bandwidth,
                         itakura_max_slope=itakura_max_slope, memory=memory, backend=backend)
    return _finish(value, p)


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
    wxx = make_window(p.x_lengths, p.x_lengths, N, N, bandwidth, itakura_max_slope)
    wyy = make_window(p.y_lengths, p.y_lengths, M, M, bandwidth, itakura_max_slope)

    def run(q: Problem) -> torch.Tensor:
        qxx = q._replace(y=q.x, y_lengths=q.x_lengths, window=wxx)
        qyy = q._replace(x=q.y, x_lengths=q.y_lengths, window=wyy)
        return _run(q, cost, memory) - 0.5 * _run(qxx, cost, memory) - 0.5 * _run(qyy, cost, memory)

    try:
        value = run_checked(p, run)
    except NaNPadded as e:  # cuda checked the values after its kernels: again, with the padding's lengths
        return _finish(soft_dtw_divergence(**rerun_args(e, p), gamma=gamma, cost=cost, bandwidth=bandwidth,
                                           itakura_max_slope=itakura_max_slope, memory=memory, backend=backend),
                       p)
    # With the named costs a series against itself has a path of cost 0 (the diagonal): the self terms are
    # finite, and the divergence is +inf only when sdtw(x, y) is. A callable may forbid that path.
    if not isinstance(cost, str) and _value_checks_enabled() and bool(torch.isnan(value).any()):
        b = int(torch.isnan(value).nonzero()[0, 0])
        raise ValueError(
            f"the soft-DTW divergence of pair {b} is undefined (inf - inf): {cost_name(cost)} gives +inf costs "
            f"that block every path of a series against itself, so sdtw(x, x) or sdtw(y, y) is +inf. A cost "
            f"used with the divergence must leave the diagonal of a series against itself finite."
        )
    return _finish(value, p)


def soft_dtw_from_cost(C, gamma: Union[float, torch.Tensor] = 1.0, *, bandwidth=None, itakura_max_slope=None,
                       x_lengths=None, y_lengths=None, memory: str = "auto", backend=None) -> torch.Tensor:
    """Soft-DTW of a precomputed cost matrix.

    Args:
        C: `(B, N, M)` (or `(N, M)`) float tensor of costs; entries past the lengths are ignored.
            +inf marks a forbidden cell (no path uses it); NaN and -inf raise.
        gamma, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory, backend: as :func:`soft_dtw`
            (x_lengths count rows of C, y_lengths columns).

    Returns:
        `(B,)` values (0-d for a 2-D C), same dtype as C; +inf (zero gradient) where every path crosses
        a forbidden cell. Devices: CPU, CUDA. Differentiable in: C, gamma.

    Example:
        >>> import torch, softdtw
        >>> softdtw.soft_dtw_from_cost(torch.eye(3), gamma=0.0)  # every path meets C[0, 0] and C[2, 2]
        tensor(2.)
        >>> softdtw.soft_dtw_from_cost(1 - torch.eye(3), gamma=0.0)  # the diagonal costs nothing
        tensor(0.)
    """
    p = prepare_cost(C, gamma, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, x_lengths=x_lengths,
                     y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    return _finish(run_checked(p, lambda q: _run_cost(q.x, q, memory)), p)


def _alignment(p: Problem, cost) -> tuple[torch.Tensor, torch.Tensor]:
    """(E `(B, N, M)`, values `(B,)`) of a validated problem.

    E is differentiable in x, y and gamma when one of them requires grad (and grad mode is on): it is the
    first-order backward op run under autograd, whose own derivative is the Hessian-vector product
    (softdtw::hvp_cost). The values carry no graph."""
    grad = _needs_grad(p.x, p.y, p.gamma)
    with torch.set_grad_enabled(grad):
        B, N, D = p.x.shape
        M = p.y.shape[1]
        C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M, device=p.x.device, cost=cost)
        C = C.to(p.x.dtype).contiguous()
        if not isinstance(cost, str):
            p = p._replace(backend=route_by_range([C.detach()], p.gamma, Span("C", 0, N, M), p.backend))
        with torch.no_grad():
            value, saved = _ops.forward_cost(C.detach(), p.gamma.detach(), p.x_lengths, p.y_lengths, p.window,
                                             "store", p.backend)
        ones = torch.ones_like(value)
        gamma = p.gamma if grad else p.gamma.detach()
        E, _ = _ops.backward_cost(ones, C, gamma, p.x_lengths, p.y_lengths, p.window, value, saved, "store",
                                  p.backend)
    return E, value


def soft_dtw_alignment(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
                       itakura_max_slope=None, x_lengths=None, y_lengths=None, backend=None) -> torch.Tensor:
    r"""Expected alignment matrix E = dsdtw / dC (Cuturi & Blondel 2017, Algorithm 2).

    E[b, i, j] in [0, 1] is the probability that step i of x[b] is matched with step j of y[b] under
    the Gibbs distribution over paths at temperature gamma; gamma = 0 gives the 0/1 matrix of the
    optimal path. Arguments as :func:`soft_dtw`.

    Returns:
        `(B, N, M)` (or `(N, M)`), same dtype as x; zero past the lengths, outside a band and on
        forbidden (+inf cost) cells; all zeros for a pair with no finite path.
        Devices: CPU, CUDA. Differentiable in: x, y, gamma (when one of them requires grad): the
        vector-Jacobian product of E is soft-DTW's Hessian-vector product (Mensch & Blondel 2018), which
        needs a backend with the second order (``hvp_cost``; others raise a NotImplementedError at the
        backward). E's graph holds the cost matrix `(B, N, M)`. gamma = 0: E is piecewise constant, its
        derivative 0.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> E = softdtw.soft_dtw_alignment(torch.randn(5, 1), torch.randn(7, 1), gamma=0.1)
        >>> E.shape, round(float(E[0, 0]), 4), round(float(E[-1, -1]), 4)  # every path starts and ends there
        (torch.Size([5, 7]), 1.0, 1.0)
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend)
    E = _alignment(p, cost)[0].to(p.out_dtype)
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
    with torch.no_grad():
        E, value = _alignment(p, cost)
    blocked = torch.isinf(value)
    if bool(blocked.any()):
        b = int(blocked.nonzero()[0, 0])
        raise ValueError(
            f"pair {b} has no warping path of finite cost: every path crosses a +inf cost (a forbidden cell"
            f"{' of ' + cost_name(cost) if callable(cost) else ''}), or its DTW cost overflows "
            f"{p.out_dtype}. Allow at least one path (fewer +inf cells, a wider band) or rescale the inputs."
        )
    on_path = E > 0.5
    paths = [torch.nonzero(on_path[b]) for b in range(on_path.shape[0])]  # row-major = path order
    return paths[0] if p.unbatched else paths
