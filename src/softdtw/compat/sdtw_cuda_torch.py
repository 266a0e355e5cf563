"""sdtw-cuda-torch (the ``softdtw_cuda`` package of arXiv 2602.17206) on softdtw's engine: an import change.

.. code-block:: python

    from softdtw_cuda import SoftDTW, softdtw, softdtw_barycenter                     # before
    from softdtw.compat.sdtw_cuda_torch import SoftDTW, softdtw, softdtw_barycenter   # after

Same names, keyword-only arguments, defaults and return types: ``SoftDTW(*, gamma=1.0, bandwidth=None,
normalize=False, dist="sqeuclidean", fused=None)`` called as ``sdtw(x, y)`` -> `(B,)` (`(1,)` for
unbatched `(N, D)` inputs, as there); ``softdtw(x, y, *, gamma, bandwidth, normalize, dist, fused)``;
``softdtw_barycenter(X, *, gamma=1.0, weights=None, max_iter=100, lr=0.1, init=None, device=None,
verbose=False, fused=None, early_stopping=True, patience=10, tol=1e-5)`` -> the barycenter `(N, D)`
as a Tensor, and ``softdtw_barycenter_cpu``.

Follows sdtw-cuda-torch's conventions:

- ``bandwidth`` None or <= 0 means no band; otherwise the Sakoe–Chiba radius (for N = M the cells
  |i - j| <= bandwidth, as there).
- ``dist`` "sqeuclidean" (also "sq_euclidean", "squared_euclidean", any case); softdtw's "l1",
  "cosine" and callables work too.
- The barycenter minimises sum_b w_b sdtw(z, X[b]) with the weights normalised to sum 1, from the
  weighted mean (or ``init``), and returns a detached `(N, D)` tensor.

Does better:

- ``normalize=True`` with N != M works (sdtw-cuda-torch's concatenation trick refuses it).
- A band with N != M uses tslearn's band per pair, widened by |N - M| (an absolute band makes every
  pair infinite once |N - M| > bandwidth).
- ``fused``: softdtw computes "sqeuclidean" (and "l1") inside its kernels on every device, which is
  also its fastest path, so there is nothing to choose. ``fused=None`` and ``fused=True`` work on the
  CPU too (sdtw-cuda-torch raises for True there); ``fused=True`` with a cost that is not fused
  ("cosine", a callable) raises, as there; ``fused=False`` warns that it changes nothing (the values
  are the same).
- ``gamma=0`` is hard DTW (sdtw-cuda-torch raises).
- The barycenter is minimised by L-BFGS with a line search until the relative decrease falls below
  ``tol`` (softdtw's :func:`softdtw.soft_dtw_barycenter`), instead of a fixed-step Adam with gradient
  clipping and cosine annealing: ``lr`` and ``patience`` have nothing to set and warn when changed;
  ``early_stopping=False`` runs all ``max_iter`` iterations (unless the line search stalls).

Example (sdtw-cuda-torch's README):
    >>> import torch
    >>> from softdtw.compat.sdtw_cuda_torch import SoftDTW, softdtw_barycenter
    >>> _ = torch.manual_seed(0)
    >>> x = torch.randn(2, 50, 3, requires_grad=True)
    >>> y = torch.randn(2, 47, 3)
    >>> loss_fn = SoftDTW(gamma=1.0, dist="sqeuclidean", fused=True)
    >>> loss = loss_fn(x, y).mean()
    >>> loss.backward()
    >>> sequences = torch.randn(10, 100, 3)
    >>> softdtw_barycenter(sequences, gamma=1.0, max_iter=10, lr=0.1).shape
    torch.Size([100, 3])
"""
from __future__ import annotations

import warnings
from typing import Optional, Union

import torch

from .. import backends
from .. import barycenter as _barycenter
from . import _common

__all__ = ["SoftDTW", "softdtw", "softdtw_barycenter", "softdtw_barycenter_cpu"]

_LIB = "sdtw_cuda_torch"
_SQEUCLIDEAN_NAMES = ("sqeuclidean", "sq_euclidean", "squared_euclidean")
_NATIVE_NAMES = ("l1", "cosine")


def _cost(dist):
    """sdtw-cuda-torch's ``dist`` as a native cost."""
    if isinstance(dist, str):
        name = dist.lower()
        if name in _SQEUCLIDEAN_NAMES:
            return "sqeuclidean"
        if name in _NATIVE_NAMES:
            return name
    elif _common._is_function(dist):
        return dist
    raise ValueError(
        f"Unknown dist={dist!r}. Supported: 'sqeuclidean' (also 'sq_euclidean', 'squared_euclidean'), and "
        f"softdtw's 'l1', 'cosine' or a callable (x (B, N, D), y (B, M, D)) -> (B, N, M)."
    )


def _check_fused(fused, cost) -> None:
    if fused is not None and not _common.is_bool(fused):
        raise TypeError(f"fused must be None, True or False; got {_common.show(fused)}.")
    if fused is True and not (isinstance(cost, str) and cost in backends.FUSED_COSTS):
        raise ValueError(
            f"fused=True needs a cost computed inside the kernel ('sqeuclidean' or 'l1'); got "
            f"dist={_common.show(cost)}, which is materialised as a (B, N, M) tensor. Use fused=None."
        )


def _warn_unfused(fused) -> None:
    if fused is False:
        warnings.warn(
            "fused=False changes nothing here: softdtw computes the squared Euclidean cost inside its kernels "
            "on every device, which is also its fastest path, and the values are the same. Drop fused=False.",
            UserWarning, stacklevel=3)


def _native_options(gamma=1.0, bandwidth=None, normalize=False, dist="sqeuclidean", fused=None) -> dict:
    """The native ``softdtw.SoftDTW`` keyword arguments this library's arguments stand for."""
    options = {"gamma": _common.check_gamma(gamma, _LIB)}
    band = _common.check_bandwidth(bandwidth, _LIB)
    if band is not None:
        options["bandwidth"] = band
    if _common.check_bool(normalize, "normalize", _LIB):
        options["normalize"] = True
    cost = _cost(dist)
    _check_fused(fused, cost)
    if cost != "sqeuclidean":
        options["cost"] = cost
    return options


class SoftDTW(torch.nn.Module):
    """Soft-DTW with sdtw-cuda-torch's signature (module docstring: what follows it, what does better).

    Args (keyword-only):
        gamma: smoothing >= 0 (0 is hard DTW; a tensor / nn.Parameter may be learned).
        bandwidth: Sakoe–Chiba radius; None or <= 0 for no band (stored as None then).
        normalize: the soft-DTW divergence instead of soft-DTW (any N, M).
        dist: "sqeuclidean" (default; aliases as there), or softdtw's "l1", "cosine", a callable.
        fused: None (default), True or False; see the module docstring.

    Shape:
        - x: `(B, N, D)` or `(N, D)`; y: `(B, M, D)` or `(M, D)`.
        - Output: `(B,)`, `(1,)` for unbatched inputs; dtype of x.

    Devices: CPU, CUDA. Differentiable in: x, y, gamma.
    """

    def __init__(self, *, gamma: float = 1.0, bandwidth: Optional[float] = None, normalize: bool = False,
                 dist: str = "sqeuclidean", fused: Optional[bool] = None):
        super().__init__()
        _native_options(gamma, bandwidth, normalize, dist, fused)  # check now, not at the first call
        _warn_unfused(fused)
        self.gamma = gamma
        # The value given, as there (None for no band): forward converts it once. Storing the converted radius
        # (floor: 0.0 for 0.5) made forward read 0.0 as no band.
        self.bandwidth = None if _common.check_bandwidth(bandwidth, _LIB) is None else bandwidth
        self.normalize = bool(normalize)
        self.dist = dist
        self.fused = fused

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Soft-DTW (or the divergence) between x[b] and y[b]: `(B,)`."""
        options = _native_options(self.gamma, self.bandwidth, self.normalize, self.dist, self.fused)
        if isinstance(x, torch.Tensor) and x.dim() == 2:
            x = x.unsqueeze(0)
        if isinstance(y, torch.Tensor) and y.dim() == 2:
            y = y.unsqueeze(0)
        return _common.soft_dtw(x, y, options)


def softdtw(x: torch.Tensor, y: torch.Tensor, *, gamma: float = 1.0, bandwidth: Optional[float] = None,
            normalize: bool = False, dist: str = "sqeuclidean", fused: Optional[bool] = None) -> torch.Tensor:
    """sdtw-cuda-torch's functional form: ``SoftDTW(**kwargs)(x, y)``, `(B,)` (`(1,)` for `(N, D)` inputs).

    Example:
        >>> import torch
        >>> from softdtw.compat.sdtw_cuda_torch import softdtw
        >>> v = softdtw(torch.zeros(4, 1), torch.ones(5, 1), gamma=0.01)
        >>> v.shape, round(v.item(), 1)
        (torch.Size([1]), 5.0)
    """
    return SoftDTW(gamma=gamma, bandwidth=bandwidth, normalize=normalize, dist=dist, fused=fused)(x, y)


def softdtw_barycenter(X: torch.Tensor, *, gamma: float = 1.0, weights: Optional[torch.Tensor] = None,
                       max_iter: int = 100, lr: float = 0.1, init: Optional[torch.Tensor] = None,
                       device: Union[str, torch.device, None] = None, verbose: bool = False,
                       fused: Optional[bool] = None, early_stopping: bool = True, patience: int = 10,
                       tol: float = 1e-5) -> torch.Tensor:
    """Soft-DTW barycenter of X `(B, N, D)` with sdtw-cuda-torch's signature: returns `(N, D)`.

    Minimises sum_b w_b sdtw_gamma(z, X[b]) (w normalised to sum 1; uniform by default) from ``init``
    `(N, D)` or the weighted mean, with :func:`softdtw.soft_dtw_barycenter` (L-BFGS). ``device`` moves X
    first; ``verbose`` shows a progress bar; ``early_stopping=False`` sets the tolerance to 0; ``tol``
    is the relative decrease of the objective at which it stops. ``lr`` and ``patience`` (of the Adam loop
    there) have no counterpart and warn when changed from their defaults; ``fused`` as in
    :class:`SoftDTW`.

    Returns:
        `(N, D)` tensor, detached, dtype and device of X (after ``device``).
    """
    X = torch.as_tensor(X)
    if device is not None:
        X = X.to(device)
    _check_fused(fused, "sqeuclidean")
    _warn_unfused(fused)
    changed = [f"{k}={v!r}" for k, v, d in (("lr", lr, 0.1), ("patience", patience, 10)) if v != d]
    if changed:
        warnings.warn(
            f"{', '.join(changed)} changes nothing here: softdtw minimises the barycenter objective with "
            f"L-BFGS and a line search (no learning rate) until the relative decrease falls below tol.",
            UserWarning, stacklevel=2)
    if X.dim() != 3:
        raise ValueError(f"X must have shape (B, N, D); got X.shape={tuple(X.shape)}.")
    if weights is None:
        w = torch.full((X.shape[0],), 1.0 / X.shape[0], dtype=X.dtype, device=X.device)
    else:
        w = torch.as_tensor(weights).to(device=X.device, dtype=X.dtype)
        w = w / w.sum()
    result = _barycenter.soft_dtw_barycenter(
        X, _common.check_gamma(gamma, _LIB), weights=w, init=init, max_iter=max_iter,
        tol=tol if early_stopping else 0.0, progress=bool(verbose))
    return result.barycenter.detach()


def softdtw_barycenter_cpu(X: torch.Tensor, *, gamma: float = 1.0, weights: Optional[torch.Tensor] = None,
                           max_iter: int = 100, lr: float = 0.1, init: Optional[torch.Tensor] = None,
                           verbose: bool = False, fused: Optional[bool] = None, early_stopping: bool = True,
                           patience: int = 10, tol: float = 1e-5) -> torch.Tensor:
    """:func:`softdtw_barycenter` with ``device="cpu"``: `(N, D)`."""
    return softdtw_barycenter(X, gamma=gamma, weights=weights, max_iter=max_iter, lr=lr, init=init, device="cpu",
                              verbose=verbose, fused=fused, early_stopping=early_stopping, patience=patience,
                              tol=tol)
