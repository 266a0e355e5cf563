"""Maghoumi's pytorch-softdtw-cuda (``soft_dtw_cuda.py``) on softdtw's engine: an import change.

.. code-block:: python

    from soft_dtw_cuda import SoftDTW            # before
    from softdtw.compat.maghoumi import SoftDTW   # after

Same name, positional order, defaults and return type: ``SoftDTW(use_cuda, gamma=1.0, normalize=False,
bandwidth=None, dist_func=None)``, called as ``sdtw(X, Y)`` on `(B, N, D)`, `(B, M, D)` and returning
`(B,)`; the attributes ``use_cuda``, ``gamma``, ``normalize``, ``bandwidth`` (0 for none) and
``dist_func`` are read at each call, as there.

Follows Maghoumi's conventions:

- ``bandwidth`` None or <= 0 means no band; otherwise the Sakoe–Chiba radius, cells with
  |i - j| <= bandwidth (the same cells as Maghoumi's for N = M).
- ``dist_func(x, y) -> (B, N, M)``; the default is the squared Euclidean cost
  (``SoftDTW._euclidean_dist_func``), computed inside the kernel and never materialised.
- ``normalize=True`` is sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2.

Does better where Maghoumi's code has known bugs or limits:

- ``normalize=True`` with N != M works (three separate DPs; Maghoumi's concatenation raises).
- A band with N != M uses tslearn's band per pair, widened by |N - M| (Maghoumi's absolute band makes
  every pair infinite once |N - M| > bandwidth).
- Any length on the GPU (Maghoumi's CUDA kernel falls back to the CPU above 1024 steps) and float64 kept
  in float64 (Maghoumi's CPU path rounds R through float32).
- ``use_cuda`` does not pick the device, the inputs do: ``use_cuda=True`` with CPU tensors runs on the
  CPU (Maghoumi's code fails), ``use_cuda=False`` with CUDA tensors runs on the GPU (same values); both
  warn once per module.
- Arguments are checked, so a call in another library's order raises instead of being misread:
  ``SoftDTW(0.1)`` (use_cuda forgotten; Maghoumi runs it on CUDA with gamma = 1) and
  ``SoftDTW(True, 0.1, dist)`` (a cost in normalize's place) are TypeErrors.
- x and y may be PackedSequences (as in the native API).

Example:
    >>> import torch
    >>> from softdtw.compat.maghoumi import SoftDTW
    >>> _ = torch.manual_seed(0)
    >>> x = torch.rand((8, 15, 5), requires_grad=True)
    >>> y = torch.rand((8, 12, 5))
    >>> sdtw = SoftDTW(use_cuda=False, gamma=0.1)
    >>> loss = sdtw(x, y)
    >>> loss.shape
    torch.Size([8])
    >>> loss.mean().backward()
    >>> SoftDTW(0.1)
    Traceback (most recent call last):
    ...
    TypeError: use_cuda must be True or False; got 0.1. ...
"""
from __future__ import annotations

import torch

from .. import costs
from . import _common

__all__ = ["SoftDTW"]

_LIB = "maghoumi"


def _native_options(use_cuda, gamma=1.0, normalize=False, bandwidth=None, dist_func=None) -> dict:
    """The native ``softdtw.SoftDTW`` keyword arguments this library's arguments stand for."""
    _common.check_bool(use_cuda, "use_cuda", _LIB)
    options = {"gamma": _common.check_gamma(gamma, _LIB)}
    if _common.check_bool(normalize, "normalize", _LIB):
        options["normalize"] = True
    band = _common.check_bandwidth(bandwidth, _LIB)
    if band is not None:
        options["bandwidth"] = band
    _common.check_dist_func(dist_func, _LIB)
    if dist_func is not None and dist_func is not SoftDTW._euclidean_dist_func:
        options["cost"] = dist_func
    return options


class SoftDTW(torch.nn.Module):
    """Soft-DTW loss with Maghoumi's signature (module docstring: what follows it, what does better).

    Args:
        use_cuda: True or False. Kept for the signature; the device of the inputs decides where it runs.
        gamma: smoothing >= 0 (0 is hard DTW; a tensor / nn.Parameter may be learned).
        normalize: the soft-DTW divergence instead of soft-DTW (any N, M).
        bandwidth: Sakoe–Chiba radius; None or <= 0 for no band.
        dist_func: callable (x `(B, N, D)`, y `(B, M, D)`) -> `(B, N, M)`; None for squared Euclidean.

    Shape:
        - X: `(B, N, D)`, Y: `(B, M, D)` (or PackedSequences).
        - Output: `(B,)`, dtype of X.

    Devices: CPU, CUDA. Differentiable in: X, Y, gamma.
    """

    def __init__(self, use_cuda, gamma=1.0, normalize=False, bandwidth=None, dist_func=None):
        super().__init__()
        _native_options(use_cuda, gamma, normalize, bandwidth, dist_func)  # check now, not at the first call
        self.normalize = normalize
        self.gamma = gamma
        self.bandwidth = 0 if bandwidth is None else float(bandwidth)
        self.use_cuda = use_cuda
        self.dist_func = dist_func if dist_func is not None else SoftDTW._euclidean_dist_func

    @staticmethod
    def _euclidean_dist_func(x, y):
        """Squared Euclidean cost between each step of x `(B, N, D)` and y `(B, M, D)`: `(B, N, M)`."""
        return costs.sqeuclidean(x, y)

    def forward(self, X, Y):
        """Soft-DTW (or the divergence) between X[b] and Y[b]: `(B,)`."""
        _common.warn_use_cuda(self, self.use_cuda, X, _LIB)
        options = _native_options(self.use_cuda, self.gamma, self.normalize, self.bandwidth, self.dist_func)
        return _common.soft_dtw(X, Y, options)
