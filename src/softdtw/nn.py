"""Loss modules: configuration in ``__init__``, data in ``forward``."""
from __future__ import annotations

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


class SoftDTW(nn.Module):
    """Soft-DTW loss between pairs of series, a drop-in for the soft-DTW modules users come from.

    Accepts the keyword arguments of Maghoumi's pytorch-softdtw-cuda / pysdtw (``gamma``, ``normalize``,
    ``bandwidth``, ``dist_func``, ``use_cuda`` — the last is ignored with a warning: the device of the
    inputs decides) and of tslearn's ``SoftDTWLossPyTorch`` (``gamma``, ``normalize``, ``dist_func``).
    Like them it returns one value per pair unless ``reduction`` asks otherwise.

    Args:
        gamma: smoothing >= 0 (float, or a tensor / nn.Parameter to learn it); 0 is hard DTW.
        normalize: if True, the soft-DTW divergence sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2, which is
            >= 0 and 0 at x = y (for any lengths).
        bandwidth: Sakoe–Chiba radius (tslearn's sakoe_chiba_radius), scaled to each pair's lengths.
        dist_func: a callable (x `(B, N, D)`, y `(B, M, D)`) -> `(B, N, M)` cost; overrides ``cost``.
        reduction: "none" (default, `(B,)`), "mean" or "sum".
        cost: "sqeuclidean" (default), "l1" or "cosine".
        itakura_max_slope, memory, backend: as :func:`softdtw.soft_dtw`.

    Shape:
        - x: `(B, N, D)` or `(N, D)`; y: `(B, M, D)` or `(M, D)`.
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

    def __init__(self, gamma: Union[float, torch.Tensor] = 1.0, normalize: bool = False,
                 bandwidth: Optional[float] = None, dist_func=None, reduction: str = "none", *,
                 cost="sqeuclidean", itakura_max_slope: Optional[float] = None, memory: str = "auto",
                 backend: Optional[str] = None, use_cuda: Optional[bool] = None):
        super().__init__()
        if isinstance(gamma, bool):
            # SoftDTW(True, ...) is Maghoumi's positional use_cuda.
            use_cuda, gamma = gamma, 1.0
        if use_cuda is not None:
            warnings.warn(
                "SoftDTW(use_cuda=...) is ignored: softdtw runs on the device of its inputs "
                "(move them with .cuda() to use the GPU).", UserWarning, stacklevel=2)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}.")
        self.gamma = gamma
        self.normalize = bool(normalize)
        self.bandwidth = bandwidth
        self.cost = dist_func if dist_func is not None else cost
        self.reduction = reduction
        self.itakura_max_slope = itakura_max_slope
        self.memory = memory
        self.backend = backend

    def forward(self, x, y, x_lengths=None, y_lengths=None) -> torch.Tensor:
        fn = F.soft_dtw_divergence if self.normalize else F.soft_dtw
        values = fn(x, y, self.gamma, cost=self.cost, bandwidth=self.bandwidth,
                    itakura_max_slope=self.itakura_max_slope, x_lengths=x_lengths, y_lengths=y_lengths,
                    memory=self.memory, backend=self.backend)
        return _reduce(values, self.reduction)

    def extra_repr(self) -> str:
        cost = getattr(self.cost, "__name__", self.cost)
        return (f"gamma={self.gamma}, normalize={self.normalize}, bandwidth={self.bandwidth}, "
                f"cost={cost!r}, reduction={self.reduction!r}")


class SoftDTWDivergence(SoftDTW):
    """The soft-DTW divergence as a loss: ``SoftDTW(normalize=True)`` (Blondel, Mensch & Vert 2021).

    Shape and arguments as :class:`SoftDTW`.

    Example:
        >>> import torch, softdtw
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(2, 8, 1)
        >>> softdtw.SoftDTWDivergence(gamma=0.5)(x, x)
        tensor([0., 0.])
    """

    def __init__(self, gamma: Union[float, torch.Tensor] = 1.0, bandwidth: Optional[float] = None,
                 dist_func=None, reduction: str = "none", **kwargs):
        super().__init__(gamma, True, bandwidth, dist_func, reduction, **kwargs)
