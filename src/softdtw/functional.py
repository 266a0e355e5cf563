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

from typing import List, NamedTuple, Union

import numpy as np
import torch

from . import _ops, costs
from ._checks import (_F32_MAX, NaNPadded, Problem, Span, _value_checks_enabled, as_tensor, as_variant,
                      check_cost_matrix, check_finite, cost_name, host_views, make_window, prepare, prepare_cost,
                      rerun_args, route_by_range, run_checked)
from .backends import FUSED_COSTS, get_backend
from .backends.cuda import FUSED_D_MAX, launch as _launch
from .backends.cuda import fastpath as _fastpath

__all__ = [
    "soft_dtw", "soft_dtw_divergence", "soft_dtw_from_cost", "soft_dtw_alignment", "dtw", "dtw_path",
    "soft_dtw_hvp", "HVPResult",
]


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _run_cost(C: torch.Tensor, p: Problem, memory: str, variant=None) -> torch.Tensor:
    B, N, M = C.shape
    if variant is None:
        mem = _ops.resolve_memory(memory, _needs_grad(C, p.gamma), p.backend, "cost", B, N, M, 0, C.dtype,
                                  C.device)
        return _ops.cost_value(C, p.gamma, p.x_lengths, p.y_lengths, p.window, mem, p.backend)
    grad = _needs_grad(C, p.gamma) or (variant[2] is not None and _needs_grad(variant[2]))
    mem = _ops.resolve_memory(memory, grad, p.backend, "cost", B, N, M, 0, C.dtype, C.device)
    return _ops.cost_value(C, p.gamma, p.x_lengths, p.y_lengths, p.window, mem, p.backend, variant)


def _variant(p: Problem, open_begin, open_end, step_penalty, bandwidth, itakura_max_slope):
    """The validated alignment-variant options of a prepared problem (None when none is set); refuses a backend
    without them (a third-party backend; the built-in ones have them) before anything runs."""
    variant = as_variant(open_begin, open_end, step_penalty, bandwidth, itakura_max_slope, p.x.device, p.x.dtype)
    if variant is not None and not torch.compiler.is_compiling():
        # (Under torch.compile the ops' kernels make the same check when they run: a backend not loaded yet is
        # imported there, as Dynamo cannot trace an import.)
        _ops.variant_backend(p.backend, *variant)
    return variant


def _run(p: Problem, cost, memory: str, variant=None, transposable: bool = False) -> torch.Tensor:
    """Soft-DTW values `(B,)` of a validated problem, in the compute dtype; variant: see :func:`_variant`.
    transposable: the caller's gamma is a float > 0 (see :func:`_transposable`)."""
    B, N, D = p.x.shape
    M = p.y.shape[1]
    if isinstance(cost, str) and cost in FUSED_COSTS:
        if transposable and variant is None and p.window is None and transposes(p, cost):
            # sdtw(x, y) = sdtw(y, x) (a symmetric cost, no band): the GPU's pass over the shorter rows is shorter.
            p = p._replace(x=p.y, y=p.x, x_lengths=p.y_lengths, y_lengths=p.x_lengths)
            B, N, D = p.x.shape
            M = p.y.shape[1]
        if variant is not None:
            grad = _needs_grad(p.x, p.y, p.gamma) or (variant[2] is not None and _needs_grad(variant[2]))
            mem = _ops.resolve_memory(memory, grad, p.backend, "fused", B, N, M, D, p.x.dtype, p.x.device)
            return _ops.fused_value(p.x, p.y, p.gamma, cost, p.x_lengths, p.y_lengths, p.window, mem, p.backend,
                                    variant)
        mem = _ops.resolve_memory(memory, _needs_grad(p.x, p.y, p.gamma), p.backend, "fused", B, N, M, D,
                                  p.x.dtype, p.x.device)
        if transposable and mem in ("store", "checkpoint") and p.window is None and _ops.two_ended_applies(
                p.x, p.y, cost, p.backend, mem):
            # few long pairs, a gradient, a float gamma > 0: from both ends (backends/cuda/two_ended.py), as the C++
            # launcher's two-ended plans run the storing ones
            return _ops.fused_two_ended(p.x, p.y, p.gamma, cost, p.x_lengths, p.y_lengths, mem)
        return _ops.fused_value(p.x, p.y, p.gamma, cost, p.x_lengths, p.y_lengths, p.window, mem, p.backend)
    # Under autocast the cost may come back in half precision; the DP always runs in the compute dtype.
    # A callable's output is checked like a precomputed C: numbers or +inf (forbidden cells), no NaN; and
    # costs past what the backend's kernels hold exactly run on the reference backend.
    C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M, device=p.x.device, cost=cost)
    C = C.to(p.x.dtype).contiguous()
    if not isinstance(cost, str):
        p = p._replace(backend=route_by_range([C.detach()], p.gamma, Span("C", 0, N, M), p.backend))
    return _run_cost(C, p, memory, variant)


def _transposable(gamma) -> bool:
    """Whether a call may run as (y, x): a float gamma > 0. Hard DTW breaks ties diagonal, up, left, which a swap
    would mirror (another subgradient); a tensor gamma is not read on the host."""
    return type(gamma) in (float, int) and gamma > 0


def transposes(p: Problem, cost: str) -> bool:
    """Whether the cuda backend runs a fused-cost problem faster as (y, x) (backends/cuda/launch.transposes). The
    caller checks what makes the swap exact: a symmetric cost (the built-in ones), no band, no alignment variant,
    a soft minimum (:func:`_transposable`)."""
    if p.backend != "cuda":
        return False
    B, N, D = p.x.shape
    return _launch.transposes(B, N, p.y.shape[1], 0 if D > FUSED_D_MAX else D, p.x.dtype, p.x.get_device())


def check_divergence_options(open_begin, open_end) -> None:
    """The soft-DTW divergence has no open ends (see :func:`soft_dtw_divergence`): a ValueError naming the
    option."""
    if open_begin is not False or open_end is not False:
        name = "open_begin" if open_begin is not False else "open_end"
        raise ValueError(
            f"the soft-DTW divergence does not take {name} (got {name}={open_begin if name == 'open_begin' else open_end!r}): "
            f"with an open end its self terms sdtw(x, x) and sdtw(y, y) match a series against a piece of "
            f"itself, which normalises nothing. Use soft_dtw(..., {name}=True) (SoftDTW(normalize=False)) for "
            f"subsequence matching; step_penalty works with the divergence.")


def _fast_call(x, gamma, bandwidth, itakura_max_slope, step_penalty) -> bool:
    """Whether a call may try the C++ launcher (backends/cuda/fastpath.py, which checks the rest, lengths
    included): a CUDA x, a float gamma, and none of the options it does not take."""
    return (type(gamma) is float and type(x) is torch.Tensor and x.is_cuda and bandwidth is None
            and itakura_max_slope is None and step_penalty is None)


def _finish(value: torch.Tensor, p: Problem) -> torch.Tensor:
    value = value.to(p.out_dtype)
    return value[0] if p.unbatched else value


def soft_dtw(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
             itakura_max_slope=None, x_lengths=None, y_lengths=None, memory: str = "auto",
             backend=None, open_begin: bool = False, open_end: bool = False,
             step_penalty: Union[None, float, torch.Tensor] = None) -> torch.Tensor:
    r"""Soft-DTW between the pairs (x[b], y[b]) of two batches (Cuturi & Blondel 2017).

    .. math:: \mathrm{sdtw}_\gamma(x, y) = \min{}^\gamma_{A} \langle A, C(x, y) \rangle

    over the warping paths A from (0, 0) to (n - 1, m - 1) (each path counted once; with the options below,
    over the paths they allow, of <A, C> + step_penalty * moves(A)).

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
        open_begin: if True, a path may start at any (0, j0): x[0] may match any step of y (subsequence
            soft-DTW: x is matched against a piece of y).
        open_end: if True, a path may end at any (n - 1, j1). Neither open end works with a band
            (bandwidth / itakura_max_slope raise a ValueError).
        step_penalty: None, a finite float or a 0-d tensor (that may require grad: the value is
            differentiable in it), added once for each vertical (i - 1, j) -> (i, j) and each horizontal
            (i, j - 1) -> (i, j) move of a path, never for a diagonal one; any sign. With closed ends a path
            makes 2|A| - n - m such moves, so a penalty p equals adding 2p to every cost and subtracting
            p(n + m).
            The three options run on every backend, and so does their second order (a backward with
            create_graph=True).

    Returns:
        `(B,)` soft-DTW values, same dtype as x (a 0-d tensor for unbatched inputs). Not normalised
        by path length; can be negative (use :func:`soft_dtw_divergence` for a non-negative loss).
        +inf (with a zero gradient) for a pair with no finite path or whose value overflows the dtype.

    Devices: CPU, CUDA. Differentiable in: x, y, gamma (and a step_penalty tensor).

    Example:
        >>> import torch, softdtw
        >>> x, y = torch.zeros(2, 4, 1), torch.ones(2, 5, 1)
        >>> softdtw.soft_dtw(x, y, gamma=0.0)
        tensor([5., 5.])
        >>> q, s = torch.tensor([[1.], [2.]]), torch.tensor([[5.], [1.], [2.], [7.]])
        >>> softdtw.soft_dtw(q, s, gamma=0.0, open_begin=True, open_end=True)  # q occurs inside s
        tensor(0.)
    """
    if open_begin is False and open_end is False \
            and _fast_call(x, gamma, bandwidth, itakura_max_slope, step_penalty):
        # A training step's call: the C++ launcher (backends/cuda/fastpath.py) or, when it does not take the
        # call, the Python path below; the two give the same values, gradients and errors.
        value = _fastpath.call(x, y, gamma, cost, memory, backend, x_lengths, y_lengths)
        if value is not None:
            return value
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    variant = None
    if step_penalty is not None or open_begin is not False or open_end is not False:
        variant = _variant(p, open_begin, open_end, step_penalty, bandwidth, itakura_max_slope)
    try:
        value = run_checked(p, lambda q: _run(q, cost, memory, variant, _transposable(gamma)))
    except NaNPadded as e:  # cuda checked the values after its kernels: again, with the padding's lengths
        value = soft_dtw(**rerun_args(e, p), gamma=gamma, cost=cost, bandwidth=bandwidth,
                         itakura_max_slope=itakura_max_slope, memory=memory, backend=backend,
                         open_begin=open_begin, open_end=open_end, step_penalty=step_penalty)
    return _finish(value, p)


def soft_dtw_divergence(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
                        itakura_max_slope=None, x_lengths=None, y_lengths=None, memory: str = "auto",
                        backend=None, open_begin: bool = False, open_end: bool = False,
                        step_penalty: Union[None, float, torch.Tensor] = None) -> torch.Tensor:
    r"""Soft-DTW divergence (Blondel, Mensch & Vert 2021): a non-negative loss, zero at x = y.

    .. math:: D_\gamma(x, y) = \mathrm{sdtw}_\gamma(x, y) - \tfrac12 \mathrm{sdtw}_\gamma(x, x)
              - \tfrac12 \mathrm{sdtw}_\gamma(y, y)

    Three separate dynamic programs, so N != M is fine. Arguments as :func:`soft_dtw`; each self-term
    uses that series' own lengths (and the band scaled to them). Non-negativity is a property of the
    unconstrained divergence with the squared Euclidean cost; with a band it is still 0 at x = y but
    may dip slightly below 0 elsewhere, since the band restricts the cross and self terms differently.

    step_penalty: the same penalty in all three terms. Every path from corner to corner makes 2|A| - n - m
    vertical or horizontal moves, and the constants p(n + m) cancel between the terms, so the divergence with
    a penalty p is exactly the divergence of the shifted cost C + 2p (each of the three terms' costs): still 0
    at x = y; non-negativity is not claimed. open_begin / open_end are refused (ValueError): with an open
    end the self terms sdtw(x, x), sdtw(y, y) match a series against a piece of itself, which normalises
    nothing; use :func:`soft_dtw` with the open ends.

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
    if open_begin is not False or open_end is not False:
        check_divergence_options(open_begin, open_end)
    if _fast_call(x, gamma, bandwidth, itakura_max_slope, step_penalty):
        # The three terms through the C++ launcher, with one value check; any term it does not take sends the
        # whole call to the Python path below (same values, gradients and errors).
        value = _fastpath.divergence_call(x, y, gamma, cost, memory, backend, x_lengths, y_lengths)
        if value is not None:
            return value
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    variant = None
    if step_penalty is not None:
        variant = _variant(p, False, False, step_penalty, bandwidth, itakura_max_slope)
    N, M = p.x.shape[1], p.y.shape[1]
    wxx = make_window(p.x_lengths, p.x_lengths, N, N, bandwidth, itakura_max_slope)
    wyy = make_window(p.y_lengths, p.y_lengths, M, M, bandwidth, itakura_max_slope)

    def run(q: Problem) -> torch.Tensor:
        qxx = q._replace(y=q.x, y_lengths=q.x_lengths, window=wxx)
        qyy = q._replace(x=q.y, x_lengths=q.y_lengths, window=wyy)
        t = _transposable(gamma)  # (the self terms are square: no swap, but a float gamma > 0 for both ends)
        return (_run(q, cost, memory, variant, t) - 0.5 * _run(qxx, cost, memory, variant, t)
                - 0.5 * _run(qyy, cost, memory, variant, t))

    try:
        value = run_checked(p, run)
    except NaNPadded as e:  # cuda checked the values after its kernels: again, with the padding's lengths
        return _finish(soft_dtw_divergence(**rerun_args(e, p), gamma=gamma, cost=cost, bandwidth=bandwidth,
                                           itakura_max_slope=itakura_max_slope, memory=memory, backend=backend,
                                           step_penalty=step_penalty),
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
                       x_lengths=None, y_lengths=None, memory: str = "auto", backend=None, open_begin: bool = False,
                       open_end: bool = False, step_penalty: Union[None, float, torch.Tensor] = None
                       ) -> torch.Tensor:
    """Soft-DTW of a precomputed cost matrix.

    Args:
        C: `(B, N, M)` (or `(N, M)`) float tensor of costs; entries past the lengths are ignored.
            +inf marks a forbidden cell (no path uses it); NaN and -inf raise.
        gamma, bandwidth, itakura_max_slope, x_lengths, y_lengths, memory, backend, open_begin, open_end,
            step_penalty: as :func:`soft_dtw` (x_lengths count rows of C, y_lengths columns).

    Returns:
        `(B,)` values (0-d for a 2-D C), same dtype as C; +inf (zero gradient) where every path crosses
        a forbidden cell. Devices: CPU, CUDA. Differentiable in: C, gamma (and a step_penalty tensor).

    Example:
        >>> import torch, softdtw
        >>> softdtw.soft_dtw_from_cost(torch.eye(3), gamma=0.0)  # every path meets C[0, 0] and C[2, 2]
        tensor(2.)
        >>> softdtw.soft_dtw_from_cost(1 - torch.eye(3), gamma=0.0)  # the diagonal costs nothing
        tensor(0.)
    """
    p = prepare_cost(C, gamma, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope, x_lengths=x_lengths,
                     y_lengths=y_lengths, memory=memory, backend=backend, defer=True)
    variant = None
    if step_penalty is not None or open_begin is not False or open_end is not False:
        variant = _variant(p, open_begin, open_end, step_penalty, bandwidth, itakura_max_slope)
    return _finish(run_checked(p, lambda q: _run_cost(q.x, q, memory, variant)), p)


def _alignment(p: Problem, cost, variant=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(E `(B, N, M)`, values `(B,)`) of a validated problem.

    E is differentiable in x, y and gamma when one of them requires grad (and grad mode is on): it is the
    first-order backward op run under autograd, whose own derivative is the Hessian-vector product
    (softdtw::hvp_cost). The values carry no graph. variant: see :func:`_variant` (E is differentiable in its
    step penalty too)."""
    pen = None if variant is None else variant[2]
    grad = _needs_grad(p.x, p.y, p.gamma) or (pen is not None and _needs_grad(pen))
    fwd = bwd = ()  # the ops' variant arguments: none for the plain DP
    if variant is not None:
        fwd = (variant[0], variant[1], None if pen is None else pen.detach())
        bwd = (variant[0], variant[1], None if pen is None else (pen if grad else pen.detach()))
    with torch.set_grad_enabled(grad):
        B, N, D = p.x.shape
        M = p.y.shape[1]
        C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M, device=p.x.device, cost=cost)
        C = C.to(p.x.dtype).contiguous()
        if not isinstance(cost, str):
            p = p._replace(backend=route_by_range([C.detach()], p.gamma, Span("C", 0, N, M), p.backend))
        with torch.no_grad():
            value, saved = _ops.forward_cost(C.detach(), p.gamma.detach(), p.x_lengths, p.y_lengths, p.window,
                                             "store", p.backend, *fwd)
        ones = torch.ones_like(value)
        gamma = p.gamma if grad else p.gamma.detach()
        E = _ops.backward_cost(ones, C, gamma, p.x_lengths, p.y_lengths, p.window, value, saved, "store",
                               p.backend, *bwd)[0]
    return E, value


def soft_dtw_alignment(x, y, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean", bandwidth=None,
                       itakura_max_slope=None, x_lengths=None, y_lengths=None, backend=None, open_begin: bool = False,
                       open_end: bool = False, step_penalty: Union[None, float, torch.Tensor] = None
                       ) -> torch.Tensor:
    r"""Expected alignment matrix E = dsdtw / dC (Cuturi & Blondel 2017, Algorithm 2).

    E[b, i, j] in [0, 1] is the probability that step i of x[b] is matched with step j of y[b] under
    the Gibbs distribution over paths at temperature gamma; gamma = 0 gives the 0/1 matrix of the
    optimal path. Arguments as :func:`soft_dtw`. With open_begin / open_end the paths (and so E's mass) may
    start anywhere on row 0 / end anywhere on row n - 1: each row of E then sums to at least 1, row 0's
    entries give where x[0] matches, and the last row's where x[n - 1] does.

    Returns:
        `(B, N, M)` (or `(N, M)`), same dtype as x; zero past the lengths, outside a band and on
        forbidden (+inf cost) cells; all zeros for a pair with no finite path.
        Devices: CPU, CUDA. Differentiable in: x, y, gamma (when one of them requires grad): the
        vector-Jacobian product of E is soft-DTW's Hessian-vector product (Mensch & Blondel 2018), which
        needs a backend with the second order (``hvp_cost``; others raise a NotImplementedError at the
        backward). E's graph holds the cost matrix `(B, N, M)`. gamma = 0: E is piecewise constant, its
        derivative 0. With open_begin, open_end or step_penalty E is differentiable too (and in a step_penalty
        tensor) on every backend.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> E = softdtw.soft_dtw_alignment(torch.randn(5, 1), torch.randn(7, 1), gamma=0.1)
        >>> E.shape, round(float(E[0, 0]), 4), round(float(E[-1, -1]), 4)  # every path starts and ends there
        (torch.Size([5, 7]), 1.0, 1.0)
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend)
    variant = _variant(p, open_begin, open_end, step_penalty, bandwidth, itakura_max_slope)
    E = _alignment(p, cost, variant)[0].to(p.out_dtype)
    return E[0] if p.unbatched else E


class HVPResult(NamedTuple):
    """What :func:`soft_dtw_hvp` returns, per pair b: the value, its gradient, and its Hessian times the direction."""

    value: torch.Tensor  #: `(B,)` soft-DTW values v_b
    grad_x: torch.Tensor  #: `(B, N, D)` d v_b / d x_b
    grad_y: torch.Tensor  #: `(B, M, D)` d v_b / d y_b
    hvp_x: torch.Tensor  #: `(B, N, D)` the x part of H_b (x_dot_b, y_dot_b)
    hvp_y: torch.Tensor  #: `(B, M, D)` the y part of H_b (x_dot_b, y_dot_b)


def _direction(t, name: str, like: torch.Tensor, unbatched: bool, of: str, check: bool) -> torch.Tensor:
    """A direction argument of :func:`soft_dtw_hvp` as `like`'s shape, dtype and device; checked finite here when
    `check` (else the caller checks it on the GPU)."""
    t = as_tensor(t, name)
    given = tuple(t.shape)
    if unbatched and t.dim() == 2:
        t = t.unsqueeze(0)
    if tuple(t.shape) != tuple(like.shape):
        want = tuple(like.shape[1:]) if unbatched else tuple(like.shape)
        raise ValueError(f"{name} must have {of}'s shape {want} (one direction per step and feature of {of}); got "
                         f"{given}.")
    if t.device != like.device:
        raise ValueError(f"{name} is on {t.device} but {of} is on {like.device}; move it with "
                         f"{name}.to({of}.device).")
    t = t.detach().to(like.dtype).contiguous()
    if check:
        check_finite(t, name)
    return t


def _cuda_checks():
    from .backends.cuda import checks

    return checks


def _hvp_table(p: Problem, cost: str, xd: torch.Tensor, yd: torch.Tensor) -> tuple:
    """(v, gx, gy, hx, hy) of a validated problem with a fused cost through the backend's hvp_cost on the cost table:
    C and its derivative along the direction `(B, N, M)` by torch ops, E and E-dot in one call, the contractions
    written out (costs.cost_vjp, cost_vjp_jvp), the value by a value-only pass: what the double backward runs for
    these costs, without its first-order forward and backward and its autograd graph."""
    x, y, g = p.x.detach(), p.y.detach(), p.gamma.detach()
    C = costs.pairwise_cost(cost, x, y).contiguous()
    Cd = costs.cost_jvp(cost, x, y, xd, yd).contiguous()
    # Through the op (its kernel is the backend's hvp_cost), so that torch.compile keeps it in the graph.
    E, _, Ed, _ = _ops.hvp_cost(C, g, p.x_lengths, p.y_lengths, p.window, Cd, C.new_zeros(C.shape[0]), p.backend)[:4]
    with torch.no_grad():
        v = _run_cost(C, p._replace(x=x, y=y, gamma=g), "auto")
    gx, gy = costs.cost_vjp(cost, x, y, E)
    hx, hy = costs.cost_vjp(cost, x, y, Ed)
    sx, sy = costs.cost_vjp_jvp(cost, x, y, E, xd, yd)
    return v, gx, gy, hx + sx, hy + sy


def _hvp_autograd(p: Problem, cost, xd: torch.Tensor, yd: torch.Tensor) -> tuple:
    """(v, gx, gy, hx, hy) of a validated problem by the double backward (every backend and option)."""
    with torch.enable_grad():
        xr, yr = p.x.detach().requires_grad_(True), p.y.detach().requires_grad_(True)
        v = _run(p._replace(x=xr, y=yr, gamma=p.gamma.detach()), cost, "auto")
        gx, gy = torch.autograd.grad(v.sum(), (xr, yr), create_graph=True)
        hx, hy = torch.autograd.grad((gx * xd).sum() + (gy * yd).sum(), (xr, yr), allow_unused=True)
    hx = torch.zeros_like(xr) if hx is None else hx
    hy = torch.zeros_like(yr) if hy is None else hy
    return v.detach(), gx.detach(), gy.detach(), hx, hy


def soft_dtw_hvp(x, y, x_dot, y_dot=None, gamma: Union[float, torch.Tensor] = 1.0, *, cost="sqeuclidean",
                 bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
                 backend=None) -> HVPResult:
    r"""Soft-DTW's value, gradient and one Hessian-vector product per pair, for a direction known up front.

    For each pair b, with v_b = sdtw(x_b, y_b) and H_b its Hessian in (x_b, y_b), returns v_b, its gradient and
    H_b (x_dot_b, y_dot_b): what Newton and truncated-Newton steps, influence functions and curvature estimates
    take. It gives what ``torch.autograd.grad`` with ``create_graph=True`` followed by a second ``grad`` gives (the
    same second order, Mensch & Blondel 2018), faster:

    - on the GPU, the squared Euclidean and l1 costs (K·D small enough for the kernel's registers, M up to 512 in
      float32, 256 in float64) run all three in one kernel, the HVP's own two passes: 0.74x the time of the value
      and gradient followed by the double backward's kernel with a constant gamma (0.72 against 0.97 ms at
      B = 1024, N = M = 256 on an H200; benchmarks/bench_hvp.py, "value_grad_hvp_fused", results/h200_hvp.md);
    - elsewhere these two costs take one ``hvp_cost`` of the backend on the cost table (1.4x faster than the double
      backward on a CPU);
    - "cosine" and callables take the double backward itself.

    Args:
        x, y, gamma, cost, bandwidth, itakura_max_slope, x_lengths, y_lengths, backend: as :func:`soft_dtw`.
        x_dot: the direction in x, x's shape `(B, N, D)` (or `(N, D)`); finite.
        y_dot: the direction in y, y's shape, or None (zero: a direction in x only).

    Returns:
        :class:`HVPResult` (value `(B,)`, grad_x `(B, N, D)`, grad_y `(B, M, D)`, hvp_x `(B, N, D)`,
        hvp_y `(B, M, D)`; without the batch dimension for unbatched inputs), in x's dtype, with no autograd graph
        (gamma is a constant here). Zero past the lengths. A pair with no finite path: value +inf, the rest zero.
        gamma = 0: hard DTW, whose Hessian is the cost's own along the optimal path.

    Example:
        >>> import torch, softdtw
        >>> x, y = torch.tensor([[0.], [2.], [3.]]), torch.tensor([[0.], [3.]])
        >>> r = softdtw.soft_dtw_hvp(x, y, torch.ones(3, 1), gamma=0.0)
        >>> r.value, r.grad_x[:, 0], r.hvp_x[:, 0]  # the path (0, 0) (1, 1) (2, 1): cost 0 + 1 + 0
        (tensor(1.), tensor([ 0., -2.,  0.]), tensor([2., 2., 2.]))
    """
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend, defer=True)
    now = p.pending is None  # else the values are checked on the GPU, and read after the kernel (run_checked)
    xd = _direction(x_dot, "x_dot", p.x, p.unbatched, "x", now)
    yd = torch.zeros_like(p.y) if y_dot is None else _direction(y_dot, "y_dot", p.y, p.unbatched, "y", now)

    def run(q: Problem) -> tuple:
        if isinstance(cost, str):
            # (The one-kernel value_grad_hvp is launched from Python, not through an op: not under torch.compile.)
            fused = None if torch.compiler.is_compiling() else getattr(get_backend(q.backend), "value_grad_hvp", None)
            if fused is not None:
                out = fused(cost, q.x, q.y, q.gamma.detach(), q.x_lengths, q.y_lengths, q.window, xd, yd)
                if out is not None:
                    return out
            if cost in FUSED_COSTS and getattr(get_backend(q.backend), "hvp_cost", None) is not None:
                return _hvp_table(q, cost, xd, yd)
        return _hvp_autograd(q, cost, xd, yd)

    direction = None if now else _cuda_checks().start(xd, yd)  # one check kernel, read after the call's
    try:
        out = run_checked(p, run)
    except NaNPadded as e:  # cuda checked x and y after the kernel: again, with the padding's lengths
        a = rerun_args(e, p)
        out = soft_dtw_hvp(a["x"], a["y"], xd, yd, gamma, cost=cost, bandwidth=bandwidth,
                           itakura_max_slope=itakura_max_slope, x_lengths=a["x_lengths"], y_lengths=a["y_lengths"],
                           backend=backend)
    finally:
        if direction is not None and not direction.ok():
            check_finite(xd, "x_dot")
            check_finite(yd, "y_dot")
    out = [t.to(p.out_dtype) for t in out]
    if p.unbatched:
        out = [t[0] for t in out]
    return HVPResult(*out)


def dtw(x, y, *, cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
        memory: str = "auto", backend=None, open_begin: bool = False, open_end: bool = False,
        step_penalty: Union[None, float, torch.Tensor] = None) -> torch.Tensor:
    """Hard DTW: the cost summed along the optimal path (soft-DTW with gamma = 0).

    With the default cost this is the sum of *squared* Euclidean distances along the path: tslearn's
    ``dtw`` squared (``tslearn.metrics.dtw(a, b) == softdtw.dtw(a, b).sqrt()``). Arguments as
    :func:`soft_dtw`; with open_begin and open_end it is subsequence DTW (tslearn's ``dtw_subsequence_path``'s
    value, squared), with step_penalty the minimum of the path cost plus the penalty per non-diagonal move.

    Returns:
        `(B,)` values (0-d for unbatched inputs), same dtype as x. Devices: CPU, CUDA.
        Differentiable in: x, y (the gradient of the cost along the optimal path) and a step_penalty tensor
        (the optimal path's number of non-diagonal moves).

    Example:
        >>> import torch, softdtw
        >>> softdtw.dtw(torch.tensor([[0.], [1.], [2.]]), torch.tensor([[0.], [2.]]))
        tensor(1.)
    """
    if step_penalty is None and open_begin is False and open_end is False:
        return soft_dtw(x, y, 0.0, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                        x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend)
    return soft_dtw(x, y, 0.0, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                    x_lengths=x_lengths, y_lengths=y_lengths, memory=memory, backend=backend, open_begin=open_begin,
                    open_end=open_end, step_penalty=step_penalty)


def _cpu_hard_paths(p: Problem, cost: str, open_begin: bool, open_end: bool
                    ) -> tuple[List[torch.Tensor], torch.Tensor]:
    """dtw_path on the cpu backend without a band or penalty: a hard-DTW wavefront that keeps one predecessor
    byte per cell, then a backtrack (backends/_cpu_search.hard_path), in float64. The same path as E's
    (tests/test_search.py), ~30x faster than the store + backward that E takes. Returns the paths and the values
    `(B,)` (float64)."""
    kern = _search_kernels()
    x, y = p.x.detach().to(torch.float64), p.y.detach().to(torch.float64)
    paths, values = [], []
    limit = torch.finfo(p.out_dtype).max
    for b, (n, m) in enumerate(zip(p.x_lengths.tolist(), p.y_lengths.tolist())):
        path, value = kern.hard_path_into(x[b, :n].numpy(), y[b, :m].numpy(), 0 if cost == "sqeuclidean" else 1,
                                          open_begin, open_end, kern.scratch("values", m, np.float64),
                                          kern.scratch("starts", m, np.int64),
                                          kern.scratch("dirs", kern.dirs_size(n, m), np.uint8))
        if not abs(value) <= limit:  # beyond float64, or beyond the dtype of the result (float32: every route raises)
            raise ValueError(f"pair {b} has no warping path of finite cost: its DTW cost overflows {p.out_dtype}. "
                             f"Rescale the inputs.")
        paths.append(torch.from_numpy(path))
        values.append(value)
    return paths, torch.tensor(values, dtype=torch.float64)


def _cpu_path_fast(x, y, cost, open_begin, open_end):
    """dtw_path of one unbatched pair of finite float32 / float64 CPU tensors with a named cost and no other option,
    without the validation layer: (path, value) or None (anything else, or a non-finite input or value: the
    caller takes the validating path, which reads NaN padding and raises the errors). At n = 32, L = 2000 the
    DP takes ~55 us, the validation as much again, and every torch call 2-20 us when it runs cold (as between
    other work): this path makes two (``numpy``) on the way in and two (``from_numpy``) on the way out."""
    if not (type(x) is torch.Tensor and type(y) is torch.Tensor and type(open_begin) is bool
            and type(open_end) is bool):
        return None
    dt = x.dtype
    if dt is not y.dtype or (dt is not torch.float64 and dt is not torch.float32):
        return None
    views = host_views(x, y)  # CPU tensors without a negative bit (else the validating route)
    if views is None:
        return None
    xn, yn = views
    if xn.ndim != 2 or yn.ndim != 2 or xn.shape[1] != yn.shape[1] or 0 in xn.shape or 0 in yn.shape:
        return None
    kern = _search_kernels()
    n, L = xn.shape[0], yn.shape[0]
    value = np.empty(1)
    path = kern.hard_path_checked(np.ascontiguousarray(xn, np.float64), np.ascontiguousarray(yn, np.float64),
                                  0 if cost == "sqeuclidean" else 1, open_begin, open_end,
                                  kern.scratch("values", L, np.float64), kern.scratch("starts", L, np.int64),
                                  kern.scratch("dirs", kern.dirs_size(n, L), np.uint8), value)
    if path.shape[0] == 0:
        return None
    if dt is torch.float32:
        if not abs(value[0]) <= _F32_MAX:  # overflows float32: the validating route raises (as every route does)
            return None
        value = value.astype(np.float32)
    return torch.from_numpy(path), torch.from_numpy(value.reshape(()))


def _search_kernels():
    """backends/_cpu_search, loaded (its compile notice and cached helpers) on first use."""
    from .backends import _cpu_search as kern
    from .backends._cpu_loading import prepare as load

    load(kern, kern.ENTRY_POINTS)
    return kern


def dtw_path(x, y, *, cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None,
             y_lengths=None, backend=None, open_begin: bool = False, open_end: bool = False,
             step_penalty: Union[None, float, torch.Tensor] = None, return_value: bool = False):
    """The optimal warping path of each pair (ties broken as tslearn: diagonal, then up, then left).

    open_begin, open_end, step_penalty: as :func:`soft_dtw` (the path minimises the cost plus the penalty per
    non-diagonal move; with open ends it starts at some (0, j0) / ends at some (n_b - 1, j1): subsequence DTW).
    return_value: also return the DTW value of each path (:func:`dtw`'s: the cost summed along it, plus the
    penalty of its moves), as tslearn's ``dtw_path`` and ``dtw_subsequence_path`` return the path and its
    distance (theirs is the square root of ours for the squared Euclidean cost).

    Returns:
        For batched inputs a list of B int64 tensors `(L_b, 2)` of (i, j) index pairs from (0, 0) to
        (n_b - 1, m_b - 1) (or the open ends' start and end); for unbatched inputs one `(L, 2)` tensor. On
        the inputs' device. With return_value=True a pair (paths, values): values `(B,)` (0-d for unbatched
        inputs) in x's dtype.

    Example:
        >>> import torch, softdtw
        >>> softdtw.dtw_path(torch.tensor([[0.], [1.], [2.]]), torch.tensor([[0.], [2.]])).tolist()
        [[0, 0], [1, 0], [2, 1]]
        >>> path, value = softdtw.dtw_path(torch.tensor([[0.], [1.], [2.]]), torch.tensor([[0.], [2.]]),
        ...                                return_value=True)
        >>> value
        tensor(1.)
    """
    if (backend is None or backend == "cpu") and bandwidth is None and itakura_max_slope is None \
            and x_lengths is None and y_lengths is None and step_penalty is None and isinstance(cost, str) \
            and cost in ("sqeuclidean", "l1"):
        fast = _cpu_path_fast(x, y, cost, open_begin, open_end)
        if fast is not None:
            return fast if return_value else fast[0]
    p = prepare(x, y, 0.0, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend)
    variant = _variant(p, open_begin, open_end, step_penalty, bandwidth, itakura_max_slope)
    if p.backend == "cpu" and p.window is None and cost in ("sqeuclidean", "l1") and (
            variant is None or variant[2] is None):
        paths, value = _cpu_hard_paths(p, cost, *((False, False) if variant is None else variant[:2]))
        return _paths_out(paths, value, p, return_value)
    with torch.no_grad():
        E, value = _alignment(p, cost, variant)
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
    return _paths_out(paths, value, p, return_value)


def _paths_out(paths: List[torch.Tensor], value: torch.Tensor, p: Problem, return_value: bool):
    """dtw_path's return: the paths (one tensor for unbatched inputs), with the values in x's dtype if asked."""
    paths = paths[0] if p.unbatched else paths
    if not return_value:
        return paths
    return paths, _finish(value.to(p.x.device), p)
