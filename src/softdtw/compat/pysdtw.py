"""pysdtw on softdtw's engine: an import change.

.. code-block:: python

    import pysdtw                               # before
    from softdtw.compat import pysdtw           # after

Same names, positional order, defaults and return types: ``pysdtw.SoftDTW(gamma=1.0, dist_func=None,
use_cuda=True, bandwidth=None)`` called as ``sdtw(X, Y)`` with tensors `(B, N, D)`, `(B, M, D)` or
``torch.nn.utils.rnn.PackedSequence``\\ s, returning `(B,)` in the order the series were packed;
``pysdtw.distance.pairwise_l2_squared`` and ``pairwise_l2_squared_exact``; the autograd functions
``SoftDTWcpu`` / ``SoftDTWcuda`` with ``.apply(D, lengths, gamma, bandwidth)``.

Follows pysdtw's conventions:

- PackedSequence inputs (also packed with ``enforce_sorted=False``): each pair uses its own lengths.
- ``bandwidth`` None or <= 0 means no band; otherwise the Sakoe–Chiba radius (for N = M the cells
  |i - j| <= bandwidth, as pysdtw).
- ``dist_func(x, y) -> (B, N, M)``, default squared Euclidean; with the default (or either
  ``pysdtw.distance`` function) the cost is computed inside the kernel and never materialised.

Does better where pysdtw has known bugs or limits:

- A band with N != M uses tslearn's band per pair, widened by |n - m| so every pair keeps a path.
  pysdtw's "approximate" band scales one index (|i m / n - j| <= bandwidth), which can exclude the first
  cell and make a pair infinite, and its CPU backward applies it with the padded sizes instead of the
  pair's lengths (gradient of another function than the forward).
- float64 stays float64 (pysdtw's CPU path rounds R through float32).
- ``use_cuda`` does not pick the device, the inputs do: the default ``use_cuda=True`` with CPU tensors
  runs on the CPU (pysdtw fails), ``use_cuda=False`` with CUDA tensors runs on the GPU; both warn once
  per module.
- Arguments are checked, so a call in another library's order raises instead of being misread
  (``SoftDTW(True, 0.1)`` — Maghoumi's order — and ``SoftDTW(0.1, False, f)`` — tslearn's — are
  TypeErrors).

Example:
    >>> import torch
    >>> from torch.nn.utils.rnn import pack_sequence
    >>> from softdtw.compat import pysdtw
    >>> _ = torch.manual_seed(0)
    >>> X = torch.rand((10, 5, 7), requires_grad=True)
    >>> Y = torch.rand((10, 9, 7))
    >>> sdtw = pysdtw.SoftDTW(gamma=1.0, dist_func=pysdtw.distance.pairwise_l2_squared, use_cuda=False)
    >>> res = sdtw(X, Y)
    >>> res.sum().backward()
    >>> X.grad.shape
    torch.Size([10, 5, 7])
    >>> packed = pack_sequence([torch.rand(4, 7), torch.rand(6, 7)], enforce_sorted=False)
    >>> sdtw(packed, Y[:2]).shape
    torch.Size([2])
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from .. import costs
from .. import functional as F
from . import _common

__all__ = ["SoftDTW", "SoftDTWcpu", "SoftDTWcuda", "distance", "pairwise_l2_squared"]

_LIB = "pysdtw"


def pairwise_l2_squared(x, y):
    """Squared Euclidean cost between each step of x `(B, N, D)` and y `(B, M, D)`: `(B, N, M)`.

    As a ``dist_func`` it is recognised and computed inside the kernel instead.
    """
    return costs.sqeuclidean(x, y)


def pairwise_l2_squared_exact(x, y):
    """Squared Euclidean cost `(B, N, M)` (pysdtw's broadcast version; the same function here)."""
    return costs.sqeuclidean(x, y)


#: pysdtw's ``distance`` module: ``pysdtw.distance.pairwise_l2_squared`` works unchanged.
distance = SimpleNamespace(pairwise_l2_squared=pairwise_l2_squared,
                           pairwise_l2_squared_exact=pairwise_l2_squared_exact)

_SQEUCLIDEAN = (pairwise_l2_squared, pairwise_l2_squared_exact)


def _native_options(gamma=1.0, dist_func=None, use_cuda=True, bandwidth=None) -> dict:
    """The native ``softdtw.SoftDTW`` keyword arguments this library's arguments stand for."""
    options = {"gamma": _common.check_gamma(gamma, _LIB)}
    _common.check_dist_func(dist_func, _LIB)
    if dist_func is not None and dist_func not in _SQEUCLIDEAN:
        options["cost"] = dist_func
    _common.check_bool(use_cuda, "use_cuda", _LIB)
    band = _common.check_bandwidth(bandwidth, _LIB)
    if band is not None:
        options["bandwidth"] = band
    return options


class SoftDTW(torch.nn.Module):
    """Soft-DTW with pysdtw's signature (module docstring: what follows it, what does better).

    Args:
        gamma: smoothing >= 0 (0 is hard DTW; a tensor / nn.Parameter may be learned).
        dist_func: callable (x `(B, N, D)`, y `(B, M, D)`) -> `(B, N, M)`; None for squared Euclidean.
        use_cuda: True (default) or False. Kept for the signature; the device of the inputs decides.
        bandwidth: Sakoe–Chiba radius; None or <= 0 for no band.

    Shape:
        - X: `(B, N, D)` tensor or PackedSequence of B series; Y: `(B, M, D)` or PackedSequence.
        - Output: `(B,)`, pair b from the b-th series of each (packing order).

    Devices: CPU, CUDA. Differentiable in: X, Y (a pack's ``data``), gamma.
    """

    def __init__(self, gamma: float = 1.0, dist_func=None, use_cuda: bool = True, bandwidth: int = None):
        super().__init__()
        _native_options(gamma, dist_func, use_cuda, bandwidth)  # check now, not at the first call
        self.gamma = gamma
        self.bandwidth = 0 if bandwidth is None else float(bandwidth)
        self.dist_func = dist_func if dist_func is not None else pairwise_l2_squared
        self.use_cuda = use_cuda
        self.dtw_func = (SoftDTWcuda if use_cuda else SoftDTWcpu).apply  # as there (this module's own)

    def forward(self, X, Y):
        """Soft-DTW between X[b] and Y[b] (each over its own length): `(B,)`."""
        _common.warn_use_cuda(self, self.use_cuda, X, _LIB)
        options = _native_options(self.gamma, self.dist_func, self.use_cuda, self.bandwidth)
        return _common.soft_dtw(X, Y, options)


class _FromCost:
    """pysdtw's autograd function: ``apply(D, lengths, gamma, bandwidth)`` on a cost `(B, N, M)`.

    lengths is `(B, 2)` int: the valid (n, m) of each pair. Returns `(B,)`, differentiable in D.
    """

    @staticmethod
    def apply(D, lengths, gamma, bandwidth):
        lengths = torch.as_tensor(lengths)
        band = _common.check_bandwidth(bandwidth, _LIB)
        return F.soft_dtw_from_cost(D, _common.check_gamma(gamma, _LIB), bandwidth=band,
                                    x_lengths=lengths[:, 0], y_lengths=lengths[:, 1])


class SoftDTWcpu(_FromCost):
    """pysdtw's CPU autograd function; here it runs on D's device (see :class:`_FromCost`)."""


class SoftDTWcuda(_FromCost):
    """pysdtw's CUDA autograd function; here it runs on D's device (see :class:`_FromCost`)."""
