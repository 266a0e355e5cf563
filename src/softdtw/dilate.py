r"""DILATE: a shape term (soft-DTW) plus a temporal term (the expected alignment against a time-shift
penalty), for training forecasters (Le Guen & Thome, "Shape and Time Distortion Loss for Training Deep
Time Series Forecasting Models", NeurIPS 2019).

.. math::
    \mathrm{DILATE}(x, y) = \alpha\, \mathrm{sdtw}_\gamma(x, y) + (1 - \alpha) \langle E_\gamma(x, y), \Omega \rangle,
    \qquad E_\gamma = \partial\, \mathrm{sdtw}_\gamma / \partial C,

with Omega[i, j] = ((i - j) / n)^2 by default. The temporal term's gradient is a Hessian-vector product of
soft-DTW (Mensch & Blondel 2018): with gradients the loss runs a value-only forward DP and one call of the backend's ``hvp_cost`` along Omega
(a directional forward and backward), which gives the temporal value and the gradients of both terms at once.
"""
from __future__ import annotations

import numbers
from typing import Callable, Optional, Union

import torch

from . import _ops, costs
from .backends.cuda import fastpath as _fastpath
from ._checks import NaNPadded, Span, check_cost_matrix, make_window, prepare, rerun_args, route_by_range, run_checked

__all__ = ["dilate_loss", "default_omega"]


def default_omega(i: torch.Tensor, j: torch.Tensor, x_lengths: torch.Tensor, y_lengths: torch.Tensor) -> torch.Tensor:
    """The default temporal penalty ((i - j) / n_b)^2, n_b the pair's x length (the forecast horizon).

    Args:
        i: `(1, N, 1)` int64 step indices of x; j: `(1, 1, M)` of y; x_lengths, y_lengths: `(B, 1, 1)` int64.

    Returns:
        `(B, N, M)` float64. For N != M the steps are compared at face value (step i of x against step j
        of y, same start and sampling rate), not rescaled to relative positions i / n - j / m.
    """
    return ((i - j).double() / x_lengths.double()) ** 2


def _omega_tensor(omega, B: int, N: int, M: int, x_lengths, y_lengths, dtype, device) -> torch.Tensor:
    """omega (None, a callable or a tensor broadcastable to `(B, N, M)`) as a `(B, N, M)` tensor."""
    if omega is None:
        # The default is finite by construction: formed in the data dtype, with no check pass (DILATE on a 2-core
        # CPU spent ~7 % of its step building and checking a float64 Omega).
        i = torch.arange(N, device=device, dtype=dtype).view(1, N, 1)
        j = torch.arange(M, device=device, dtype=dtype).view(1, 1, M)
        return ((i - j) / x_lengths.to(dtype).view(B, 1, 1)).square_()
    if callable(omega):
        fn = omega
        i = torch.arange(N, device=device).view(1, N, 1)
        j = torch.arange(M, device=device).view(1, 1, M)
        out = fn(i, j, x_lengths.view(B, 1, 1), y_lengths.view(B, 1, 1))
        name = "the omega callable's output"
    else:
        out, name = omega, "omega"
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a tensor broadcastable to (B, N, M) = ({B}, {N}, {M}); got "
                        f"{type(out).__name__}.")
    try:
        out = torch.broadcast_to(out, (B, N, M))
    except RuntimeError:
        raise ValueError(f"{name} must be broadcastable to (B, N, M) = ({B}, {N}, {M}) (e.g. (N, M)); got shape "
                         f"{tuple(out.shape)}.") from None
    out = out.to(device=device, dtype=dtype)
    if not bool(torch.isfinite(out.detach()).all()):
        raise ValueError(f"{name} must be finite; it holds NaN or Inf.")
    return out


class _Dilate(torch.autograd.Function):
    """(sdtw `(B,)`, <E, Omega> `(B,)`) of a cost C `(B, N, M)`, differentiable in C, gamma and Omega.

    Omega does not depend on C, so the forward makes the one hvp_cost call along (Omega, 0) that both terms'
    gradients need: E (the temporal value <E, Omega> and the shape term's gradient), Edot = H Omega (the temporal
    term's gradient in C), and their gamma parts; the soft-DTW value comes from a value-only forward. The backward
    for the upstream (gs, gt) is then a combination: dC = gs E + gt Edot, dgamma = sum_b gs vgamma + gt vgamma_dot,
    dOmega = gt E (three DP passes in all, against four for a first-order forward + backward and an HVP in the
    backward)."""

    @staticmethod
    def forward(ctx, C, gamma, omega, meta):
        x_lengths, y_lengths, window, backend = meta
        value, _ = _ops.forward_cost(C, gamma, x_lengths, y_lengths, window, "none", backend)
        E, vgamma, Edot, vgamma_dot, _, _ = _ops.hvp_cost(C, gamma, x_lengths, y_lengths, window, omega.contiguous(),
                                                    torch.zeros_like(value), backend)
        ctx.save_for_backward(gamma, value, E, vgamma, Edot, vgamma_dot)
        return value, (E * omega).sum((1, 2))

    @staticmethod
    def backward(ctx, g_shape, g_temporal):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "a double backward through dilate_loss is not supported: DILATE's gradient is already a second "
                "derivative of soft-DTW (softdtw::hvp_cost), which has no derivative of its own. Take its "
                "backward with create_graph=False.")
        gamma, value, E, vgamma, Edot, vgamma_dot = ctx.saved_tensors
        B = E.shape[0]
        gs = E.new_zeros(B) if g_shape is None else g_shape
        gt = E.new_zeros(B) if g_temporal is None else g_temporal
        keep = torch.isfinite(value).to(E.dtype)
        gs, gt = gs * keep, gt * keep
        need = ctx.needs_input_grad
        dC = dgamma = domega = None
        if need[0]:
            dC = gs.view(-1, 1, 1) * E + gt.view(-1, 1, 1) * Edot
        if need[1]:
            dgamma = (gs * vgamma + gt * vgamma_dot).sum().reshape(gamma.shape)
        if need[2]:
            domega = gt.view(-1, 1, 1) * E
        return dC, dgamma, domega, None


class _DilateXY(torch.autograd.Function):
    """The DILATE loss alpha sdtw + (1 - alpha) <E, Omega> `(B,)` of x, y with the default Omega and a fused cost,
    differentiable in x, y and gamma, from one kernel (cuda: backends/cuda/hvp.py, dilate_xy): its forward gives
    the terms and the loss's gradient in x and y, the backward scales them by the upstream. The same values as
    _Dilate's path (C, a value-only forward, hvp_cost along Omega) up to rounding."""

    @staticmethod
    def forward(ctx, x, y, gamma, meta):
        alpha, (v, tv, vg, vgd, dx, dy) = meta  # hvp.dilate_xy's outputs: the kernel ran before apply
        ctx.save_for_backward(v, vg, vgd, dx, dy)
        ctx.alpha, ctx.gamma_shape = alpha, gamma.shape
        return alpha * v + (1.0 - alpha) * tv

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "a double backward through dilate_loss is not supported: DILATE's gradient is already a second "
                "derivative of soft-DTW (softdtw::hvp_cost), which has no derivative of its own. Take its "
                "backward with create_graph=False.")
        v, vg, vgd, dx, dy = ctx.saved_tensors
        gk = grad * torch.isfinite(v).to(v.dtype)
        need = ctx.needs_input_grad
        a = ctx.alpha
        return (dx * gk.view(-1, 1, 1) if need[0] else None, dy * gk.view(-1, 1, 1) if need[1] else None,
                (gk * (a * vg + (1.0 - a) * vgd)).sum().reshape(ctx.gamma_shape) if need[2] else None, None)


def _dilate_xy(p, alpha, omega, divergence, cost, terms):
    """(loss, shape, temporal) through _DilateXY where its kernel runs (cuda backend, "sqeuclidean" or "l1", the
    default Omega, no band, no divergence, and only the loss asked for: shape and temporal come back without a
    graph), else None. Not under torch.compile: its kernel is launched from Python, not through a custom op, so
    the graph takes _Dilate's ops instead."""
    if terms or p.backend != "cuda" or omega is not None or divergence or p.window is not None or \
            not isinstance(cost, str) or cost not in ("sqeuclidean", "l1") or torch.compiler.is_compiling():
        return None
    from .backends.cuda import hvp as _hvp

    out = _hvp.dilate_xy(p.x, p.y, p.gamma.detach(), p.x_lengths, p.y_lengths, float(alpha), cost)
    if out is None:
        return None
    loss = _DilateXY.apply(p.x, p.y, p.gamma, (float(alpha), out))
    return loss, out[0], out[1]


def dilate_loss(x, y, alpha: float = 0.5, gamma: Union[float, torch.Tensor] = 0.01, *,
                omega: Optional[Union[torch.Tensor, Callable]] = None, divergence: bool = False,
                cost="sqeuclidean", bandwidth=None, itakura_max_slope=None, x_lengths=None, y_lengths=None,
                backend=None, return_terms: bool = False):
    r"""The DILATE loss of each pair: alpha * shape + (1 - alpha) * temporal (Le Guen & Thome 2019).

    .. math::
        \mathrm{shape} = \mathrm{sdtw}_\gamma(x, y), \qquad
        \mathrm{temporal} = \sum_{i,j} E_{ij}\, \Omega_{ij}, \qquad
        \Omega_{ij} = \Big(\frac{i - j}{n}\Big)^2 \text{ by default},

    E the expected alignment of x and y (:func:`softdtw.soft_dtw_alignment`), n the pair's x length.

    Args:
        x: `(B, N, D)` predictions (or `(N, D)`); steps past `x_lengths` are ignored.
        y: `(B, M, D)` targets (or `(M, D)`); M may differ from N.
        alpha: weight of the shape term in [0, 1] (the paper's default 0.5).
        gamma: soft-DTW smoothing > 0 (float or 0-d tensor, learnable); the paper uses 0.01 on series
            scaled to about [0, 1]. gamma = 0 gives hard DTW, whose E is piecewise constant: the temporal
            term then has zero gradient.
        omega: the temporal penalty: None for :func:`default_omega` ((i - j) / n_b)^2, a tensor
            broadcastable to `(B, N, M)` (e.g. `(N, M)`; it may require grad), or a callable
            ``omega(i, j, x_lengths, y_lengths)`` with i `(1, N, 1)`, j `(1, 1, M)` int64 step indices and
            lengths `(B, 1, 1)`, returning something broadcastable to `(B, N, M)`. Entries past the lengths
            and outside a band meet E = 0 and do not count.
        divergence: if True the shape term is the soft-DTW divergence
            sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2 (>= 0, 0 at x = y) instead of sdtw(x, y).
        cost, bandwidth, itakura_max_slope, x_lengths, y_lengths, backend: as :func:`softdtw.soft_dtw`.
        return_terms: also return the shape and temporal terms.

    Returns:
        `(B,)` losses in x's dtype (0-d for unbatched inputs), or (loss, shape, temporal) with return_terms.

    Differences from the published code (vincent-leguen/DILATE, ``loss/dilate_loss.py``): there the shape term
    is the batch mean of soft-DTW on the squared Euclidean cost with the targets as the first argument, the
    temporal term is sum_b sum_ij E_ij (i - j)^2 / (N^2 B) on N x N pairs, and the loss is one scalar. Here
    the loss is per pair (take ``.mean()``, or ``DILATELoss(reduction="mean")``, for theirs: same value for
    equal lengths, as the squared Euclidean cost and the default Omega are symmetric), the pairs may have
    N != M and their own lengths (Omega then divides by each pair's n_b), the cost, the band and Omega are
    options, gamma can be learned, and the gradients are exact in float64 DP (theirs runs the DP one pair at
    a time on the CPU, in float32, without a gradient for gamma).

    Memory: on the cuda backend with the default Omega, the squared Euclidean or l1 cost of D <= 16 features, no
    band, no divergence and only the loss asked for, one kernel computes the terms and the gradient (the cost formed
    in its cells) and keeps 16-32 bytes per cell of records while it runs; otherwise C, E, E-dot and the backend's
    second-order working tables, each `(B, N, M)`, with the cost matrix materialised. Devices: CPU, CUDA. Differentiable in: x, y, gamma, omega (needs a backend with
    ``hvp_cost``; others raise a NotImplementedError naming the backend). Not twice differentiable.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> pred = torch.randn(4, 20, 1, requires_grad=True)
        >>> loss = softdtw.dilate_loss(pred, torch.randn(4, 20, 1), alpha=0.5, gamma=0.1, backend="reference")
        >>> loss.shape
        torch.Size([4])
        >>> loss.mean().backward()
        >>> bool(torch.isfinite(pred.grad).all())
        True
    """
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1] (the weight of the shape term); got {alpha!r}.")
    alpha = float(alpha)  # NumPy scalars too, as DILATELoss takes them
    if omega is None and not divergence and not return_terms and type(gamma) is float and type(x) is torch.Tensor \
            and x.is_cuda and isinstance(cost, str) and cost == "sqeuclidean" and bandwidth is None \
            and itakura_max_slope is None:
        # A training step's call: the C++ launcher (backends/cuda/fastpath.py, dilate_call) or, when it does not
        # take the call, the Python path below; the two give the same losses, gradients and errors.
        loss = _fastpath.dilate_call(x, y, alpha, gamma, backend, x_lengths, y_lengths)
        if loss is not None:
            return loss
    p = prepare(x, y, gamma, cost=cost, bandwidth=bandwidth, itakura_max_slope=itakura_max_slope,
                x_lengths=x_lengths, y_lengths=y_lengths, memory="auto", backend=backend, defer=True)
    try:  # on cuda the value check runs in front of the kernels and is read after them (no host sync)
        loss, shape, temporal = run_checked(
            p, lambda q: _terms(q, alpha, omega, divergence, cost, bandwidth, itakura_max_slope, return_terms))
    except NaNPadded as e:  # cuda checked the values after its kernels: again, with the padding's lengths
        loss, shape, temporal = dilate_loss(**rerun_args(e, p), alpha=alpha, gamma=gamma, omega=omega,
                                            divergence=divergence, cost=cost, bandwidth=bandwidth,
                                            itakura_max_slope=itakura_max_slope, backend=backend,
                                            return_terms=True)

    def out(t):
        t = t.to(p.out_dtype)
        return t[0] if p.unbatched else t

    return (out(loss), out(shape), out(temporal)) if return_terms else out(loss)


def _terms(p, alpha, omega, divergence, cost, bandwidth, itakura_max_slope, terms=True):
    """(loss, shape, temporal) `(B,)` of a prepared problem, in the compute dtype."""
    fused = _dilate_xy(p, alpha, omega, divergence, cost, terms)
    if fused is not None:
        return fused
    B, N, D = p.x.shape
    M = p.y.shape[1]
    C = check_cost_matrix(costs.pairwise_cost(cost, p.x, p.y), B, N, M, device=p.x.device, cost=cost)
    C = C.to(p.x.dtype).contiguous()
    backend = p.backend
    if not isinstance(cost, str):
        backend = route_by_range([C.detach()], p.gamma, Span("C", 0, N, M), backend)
    Om = _omega_tensor(omega, B, N, M, p.x_lengths, p.y_lengths, p.x.dtype, p.x.device)
    needs = torch.is_grad_enabled() and (C.requires_grad or p.gamma.requires_grad or Om.requires_grad)
    if needs:
        _ops._hvp_function(backend)  # the backward needs the second order: say so now, not after the forward
        shape, temporal = _Dilate.apply(C, p.gamma, Om, (p.x_lengths, p.y_lengths, p.window, backend))
    else:
        with torch.no_grad():
            shape, temporal = _dilate_values(C, p.gamma, Om, p.x_lengths, p.y_lengths, p.window, backend)
    if divergence:
        from .functional import _run  # functional imports nothing from here; a late import keeps it that way

        wxx = make_window(p.x_lengths, p.x_lengths, N, N, bandwidth, itakura_max_slope)
        wyy = make_window(p.y_lengths, p.y_lengths, M, M, bandwidth, itakura_max_slope)
        qxx = p._replace(y=p.x, y_lengths=p.x_lengths, window=wxx, pending=None)
        qyy = p._replace(x=p.y, x_lengths=p.y_lengths, window=wyy, pending=None)
        shape = shape - 0.5 * _run(qxx, cost, "auto") - 0.5 * _run(qyy, cost, "auto")
    return alpha * shape + (1.0 - alpha) * temporal, shape, temporal


def _dilate_values(C, gamma, omega, x_lengths, y_lengths, window, backend):
    """(sdtw, <E, Omega>) without a graph (no input requires grad)."""
    gamma = gamma.detach()
    value, saved = _ops.forward_cost(C, gamma, x_lengths, y_lengths, window, "store", backend)
    E = _ops.backward_cost(torch.ones_like(value), C, gamma, x_lengths, y_lengths, window, value, saved, "store",
                           backend)[0]
    return value, (E * omega).sum((1, 2))
