"""Loss modules: configuration in ``__init__``, data in ``forward``."""
from __future__ import annotations

import functools
import numbers
import warnings
from typing import Optional, Union

import torch
from torch import nn

from . import functional as F

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(values: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    return values


# Keywords of other libraries' soft-DTW modules that softdtw spells differently; a call with them is
# meant for that library's adapter in softdtw.compat (compat._common maps each to its library).
_FOREIGN_KEYWORDS = ("dist", "fused", "global_constraint", "sakoe_chiba_radius")


def _only_gamma_positional(init):
    """Guard for the modules' ``__init__``: gamma is the only positional argument and never a bool.

    Other soft-DTW libraries put other things in those places (Maghoumi's ``SoftDTW(use_cuda, gamma)``,
    pysdtw's ``SoftDTW(gamma, dist_func)``, tslearn's ``SoftDTWLossPyTorch(gamma, normalize, dist_func)``):
    such a call raises a TypeError naming the ``softdtw.compat`` module that reads it as meant, instead
    of being silently misread. The signature shown by ``help()`` stays the wrapped one.
    """

    @functools.wraps(init)
    def guarded(self, *args, **kwargs):
        gamma = args[0] if args else kwargs.get("gamma")
        if len(args) > 1 or isinstance(gamma, bool) or any(k in kwargs for k in _FOREIGN_KEYWORDS):
            from .compat._common import misuse_message

            raise TypeError(misuse_message(f"softdtw.{type(self).__name__}", args, kwargs))
        init(self, *args, **kwargs)

    return guarded


class SoftDTW(nn.Module):
    """Soft-DTW loss between pairs of series.

    Only ``gamma`` is positional; every other argument is keyword-only. The keywords are those of the
    soft-DTW modules users come from (``gamma``, ``normalize``, ``bandwidth``, ``dist_func``; ``use_cuda``
    is accepted and ignored with a warning: the device of the inputs decides), and like them it returns
    one value per pair unless ``reduction`` asks otherwise. A positional call written for another
    library (``SoftDTW(True, 0.1)``, ``SoftDTW(0.1, dist_func)``, ``SoftDTW(0.1, False, f)``) or with
    its keywords (``dist=``, ``fused=``, ``sakoe_chiba_radius=``) raises a TypeError that names the
    :mod:`softdtw.compat` module keeping that library's signature, so moving over is an import change.

    Args:
        gamma: smoothing >= 0 (float, or a tensor / nn.Parameter to learn it); 0 is hard DTW. Not a bool.
        normalize: if True, the soft-DTW divergence sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2, which is
            >= 0 and 0 at x = y (for any lengths).
        bandwidth: Sakoe–Chiba radius (tslearn's sakoe_chiba_radius), scaled to each pair's lengths;
            None for no band. A value <= 0 raises (it means "no band" in the libraries that call it
            bandwidth, the diagonal in tslearn); the functions take ``bandwidth=0`` as radius 0.
        dist_func: a callable (x `(B, N, D)`, y `(B, M, D)`) -> `(B, N, M)` cost; overrides ``cost``.
        reduction: "none" (default, `(B,)`), "mean" or "sum".
        cost: "sqeuclidean" (default), "l1" or "cosine".
        itakura_max_slope, memory, backend: as :func:`softdtw.soft_dtw`.
        open_begin, open_end, step_penalty: the alignment variants of :func:`softdtw.soft_dtw` (subsequence
            matching, a penalty per non-diagonal move: a float, or a tensor / nn.Parameter to learn it). With
            normalize=True only step_penalty is allowed (see :func:`softdtw.soft_dtw_divergence`).

    Shape:
        - x: `(B, N, D)` or `(N, D)`; y: `(B, M, D)` or `(M, D)`; either may be a PackedSequence
          (its lengths are used; do not pass x_lengths / y_lengths for it then).
        - x_lengths, y_lengths (optional): `(B,)` int.
        - Output: `(B,)` for reduction="none", else a scalar.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> loss_fn = softdtw.SoftDTW(gamma=0.1, normalize=True, reduction="mean")
        >>> pred = torch.randn(4, 20, 3, requires_grad=True)
        >>> loss = loss_fn(pred, torch.randn(4, 25, 3))
        >>> loss.backward()
    """

    @_only_gamma_positional
    def __init__(self, gamma: Union[float, torch.Tensor] = 1.0, *, normalize: bool = False,
                 bandwidth: Optional[float] = None, dist_func=None, reduction: str = "none",
                 cost="sqeuclidean", itakura_max_slope: Optional[float] = None, memory: str = "auto",
                 backend: Optional[str] = None, use_cuda: Optional[bool] = None, open_begin: bool = False,
                 open_end: bool = False, step_penalty: Union[None, float, torch.Tensor] = None):
        super().__init__()
        if normalize:
            F.check_divergence_options(open_begin, open_end)
        if use_cuda is not None:
            warnings.warn(
                "SoftDTW(use_cuda=...) is ignored: softdtw runs on the device of its inputs "
                "(move them with .cuda() to use the GPU).", UserWarning, stacklevel=3)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}.")
        if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool) and bandwidth <= 0:
            # Maghoumi's, pysdtw's and sdtw-cuda-torch's bandwidth <= 0 is "no band"; tslearn's radius 0
            # is the diagonal. Either reading would silently misread the other.
            raise ValueError(
                f"SoftDTW(bandwidth={bandwidth!r}) is refused: in Maghoumi's pytorch-softdtw-cuda, pysdtw and "
                f"sdtw-cuda-torch, whose keyword this is, bandwidth <= 0 means no band, while softdtw's bandwidth "
                f"is tslearn's Sakoe–Chiba radius (0: the diagonal only). Pass bandwidth=None for no band; for "
                f"the radius-0 band use softdtw.soft_dtw(x, y, gamma, bandwidth=0).")
        self.gamma = gamma
        self.normalize = bool(normalize)
        self.bandwidth = bandwidth
        self.cost = dist_func if dist_func is not None else cost
        self.reduction = reduction
        self.itakura_max_slope = itakura_max_slope
        self.memory = memory
        self.backend = backend
        self.open_begin = open_begin
        self.open_end = open_end
        self.step_penalty = step_penalty

    def forward(self, x, y, x_lengths=None, y_lengths=None) -> torch.Tensor:
        fn = F.soft_dtw_divergence if self.normalize else F.soft_dtw
        if self.step_penalty is None and self.open_begin is False and self.open_end is False:
            values = fn(x, y, self.gamma, cost=self.cost, bandwidth=self.bandwidth,
                        itakura_max_slope=self.itakura_max_slope, x_lengths=x_lengths, y_lengths=y_lengths,
                        memory=self.memory, backend=self.backend)
        else:
            values = fn(x, y, self.gamma, cost=self.cost, bandwidth=self.bandwidth,
                        itakura_max_slope=self.itakura_max_slope, x_lengths=x_lengths, y_lengths=y_lengths,
                        memory=self.memory, backend=self.backend, open_begin=self.open_begin,
                        open_end=self.open_end, step_penalty=self.step_penalty)
        return _reduce(values, self.reduction)

    def extra_repr(self) -> str:
        cost = getattr(self.cost, "__name__", self.cost)
        variants = "".join(f", {k}={getattr(self, k)}" for k in ("open_begin", "open_end", "step_penalty")
                           if getattr(self, k) not in (False, None))
        return (f"gamma={self.gamma}, normalize={self.normalize}, bandwidth={self.bandwidth}, "
                f"cost={cost!r}, reduction={self.reduction!r}{variants}")


class SoftDTWDivergence(SoftDTW):
    """The soft-DTW divergence as a loss: ``SoftDTW(normalize=True)`` (Blondel, Mensch & Vert 2021).

    Shape and arguments as :class:`SoftDTW` (only ``gamma`` positional).

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(2, 8, 1)
        >>> softdtw.SoftDTWDivergence(gamma=0.5)(x, x)
        tensor([0., 0.])
    """

    @_only_gamma_positional
    def __init__(self, gamma: Union[float, torch.Tensor] = 1.0, *, bandwidth: Optional[float] = None,
                 dist_func=None, reduction: str = "none", cost="sqeuclidean",
                 itakura_max_slope: Optional[float] = None, memory: str = "auto", backend: Optional[str] = None,
                 use_cuda: Optional[bool] = None):
        super().__init__(gamma, normalize=True, bandwidth=bandwidth, dist_func=dist_func, reduction=reduction,
                         cost=cost, itakura_max_slope=itakura_max_slope, memory=memory, backend=backend,
                         use_cuda=use_cuda)


class DILATELoss(nn.Module):
    """The DILATE loss (Le Guen & Thome 2019): alpha * soft-DTW + (1 - alpha) * <E, Omega>.

    See :func:`softdtw.dilate_loss` for the definition, the default Omega ((i - j) / n)^2 and where it
    differs from the published code. ``alpha`` and ``gamma`` are positional; the rest keyword-only.

    Args:
        alpha: weight of the shape term in [0, 1] (default 0.5, the paper's).
        gamma: soft-DTW smoothing (default 0.01, the paper's); a float or a tensor / nn.Parameter to learn it.
        omega: None (default penalty), a tensor broadcastable to `(B, N, M)`, or a callable (see dilate_loss).
        divergence: if True the shape term is the soft-DTW divergence.
        reduction: "none" (default, `(B,)`, as :class:`SoftDTW`), "mean" (the published loss's batch mean)
            or "sum".
        cost, bandwidth, itakura_max_slope, backend: as :func:`softdtw.soft_dtw`.

    Shape:
        - x (predictions): `(B, N, D)` or `(N, D)`; y (targets): `(B, M, D)` or `(M, D)`.
        - x_lengths, y_lengths (optional): `(B,)` int.
        - Output: `(B,)` for reduction="none", else a scalar.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> loss_fn = softdtw.DILATELoss(0.5, 0.1, reduction="mean", backend="reference")
        >>> pred = torch.randn(4, 20, 1, requires_grad=True)
        >>> loss_fn(pred, torch.randn(4, 20, 1)).backward()
    """

    def __init__(self, alpha: float = 0.5, gamma: Union[float, torch.Tensor] = 0.01, *, omega=None,
                 divergence: bool = False, reduction: str = "none", cost="sqeuclidean",
                 bandwidth: Optional[float] = None, itakura_max_slope: Optional[float] = None,
                 backend: Optional[str] = None):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}.")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"DILATELoss(alpha={alpha!r}): alpha must be a number in [0, 1] (the weight of "
                             f"the shape term).")
        self.alpha = float(alpha)
        self.gamma = gamma
        self.omega = omega
        self.divergence = bool(divergence)
        self.reduction = reduction
        self.cost = cost
        self.bandwidth = bandwidth
        self.itakura_max_slope = itakura_max_slope
        self.backend = backend

    def forward(self, x, y, x_lengths=None, y_lengths=None) -> torch.Tensor:
        from .dilate import dilate_loss

        values = dilate_loss(x, y, self.alpha, self.gamma, omega=self.omega, divergence=self.divergence,
                             cost=self.cost, bandwidth=self.bandwidth, itakura_max_slope=self.itakura_max_slope,
                             x_lengths=x_lengths, y_lengths=y_lengths, backend=self.backend)
        return _reduce(values, self.reduction)

    def extra_repr(self) -> str:
        return (f"alpha={self.alpha}, gamma={self.gamma}, divergence={self.divergence}, "
                f"reduction={self.reduction!r}")
